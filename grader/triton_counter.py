"""The course's kernel counter: run a Triton kernel in Triton's CPU interpreter and count what it moves.

    counts = triton_counter.launch(add_kernel, (4,), x, y, out, n, BLOCK=256)
    counts.loaded_bytes, counts.stored_bytes      # bytes requested by tl.load / tl.store (masked-off lanes not counted)
    counts.unique_bytes                           # bytes touched at least once: the traffic of a perfect cache
    counts.programs                               # program instances run (the grid's size)
    counts.widest                                 # lanes of the widest single tl.load or tl.store (its block's size)

Triton's interpreter (TRITON_INTERPRET=1) runs each program of the grid one
after another, in Python, on torch CPU tensors. Every tl.load and tl.store
reaches its builder (`create_masked_load` / `create_masked_store`) with the
addresses of every lane and the mask; `launch` wraps those for the length of
one launch, so it sees every access before it happens. The interpreter itself
checks no bounds: a lane past the end of a tensor reads whatever memory lies
there (a right answer by luck, or a crash later). The counter copies each
tensor argument into one arena, with unused space between them, and stops any
lane that falls outside its argument with `OutOfBounds`, naming the kernel, the
program, the argument and the index, before the access runs. Results are
copied back into the caller's tensors after a launch that finished.

Tested against one triton version (PINNED); on another `launch` refuses with
a clear message, since it wraps the interpreter's internals.
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from grader import shortcuts

PINNED = "3.9.0"  # the triton version this counter wraps and is tested against
MAX_PROGRAMS = 20_000  # a launch larger than this is refused: the interpreter runs programs one by one, in Python
_GAP = 1 << 12  # bytes of unused arena between two arguments, at least; more for large arguments


class OutOfBounds(IndexError):
    """A load or store whose lanes fall outside the tensor they point into, stopped before it ran."""


class KernelFailed(RuntimeError):
    """The kernel raised inside the interpreter (the message names the kernel and the cause)."""


def unavailable() -> str | None:
    """Why Triton's interpreter cannot run here, in one line; None when it can."""
    if not sys.platform.startswith("linux"):
        return (f"Triton ships wheels for Linux only and this is {sys.platform}: run this lesson in a Linux VM, "
                "a container (docker run ... python:3.11) or WSL2 on Windows; the other lessons run here as they are.")
    try:
        import triton
    except ImportError:
        return f"triton is not installed: pip install triton=={PINNED} (Linux, Python >= 3.11)"
    if triton.__version__ != PINNED:
        return (f"the course's kernel counter wraps Triton's interpreter and is tested with triton {PINNED}; this "
                f"environment has triton {triton.__version__}. Install the tested one: pip install triton=={PINNED}")
    return None


class Unavailable(RuntimeError):
    """Triton's interpreter cannot run here; shown in a notebook as one line saying what to do."""

    def _render_traceback_(self) -> list[str]:
        return [f"✗ {self}"]


def stop_if_unavailable() -> None:
    """A lesson's first cell: stop with one line (why, and what to do) where the interpreter cannot run."""
    why = unavailable()
    if why:
        raise Unavailable(why)


def require_triton() -> None:
    """Raise a clear RuntimeError when the interpreter or the pinned triton is missing."""
    why = unavailable()
    if why:
        raise RuntimeError(why)


def interpreted(kernel: Any):
    """The kernel as Triton's interpreter runs it, whether it was decorated with TRITON_INTERPRET=1 or not."""
    require_triton()
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, InterpretedFunction):
        return kernel
    if isinstance(kernel, JITFunction):
        return InterpretedFunction(kernel.fn)
    raise TypeError(f"{getattr(kernel, '__name__', type(kernel).__name__)} is not a Triton kernel: "
                    "decorate it with @triton.jit")


@dataclass
class Region:
    """One tensor argument inside the arena: where its elements lie, and what the kernel did to them."""

    name: str
    lo: int  # address of the first byte of the argument's span
    hi: int  # one past its last byte
    itemsize: int  # bytes per element of the tensor
    numel: int
    loaded: int = 0  # bytes requested by loads
    stored: int = 0  # bytes requested by stores
    touched_load: np.ndarray = field(default=None, repr=False)  # (hi - lo,) bool: bytes loaded at least once
    touched_store: np.ndarray = field(default=None, repr=False)
    writer: np.ndarray = field(default=None, repr=False)  # (span elements,) int: last program that stored each element
    overwritten: int = 0  # element stores that landed on an element another program had stored

    def __post_init__(self) -> None:
        self.touched_load = np.zeros(self.hi - self.lo, dtype=bool)
        self.touched_store = np.zeros(self.hi - self.lo, dtype=bool)
        self.writer = np.full((self.hi - self.lo) // max(self.itemsize, 1), -1, dtype=np.int64)


@dataclass
class Counts:
    """What one launch moved: bytes requested and unique bytes, per argument and in all, and the programs run."""

    kernel: str
    grid: tuple
    programs: int
    regions: dict  # argument name -> Region
    widest: int = 0  # lanes in the widest single load or store, masked lanes included: the block it worked on

    @property
    def loaded_bytes(self) -> int:
        return sum(r.loaded for r in self.regions.values())

    @property
    def stored_bytes(self) -> int:
        return sum(r.stored for r in self.regions.values())

    @property
    def bytes(self) -> int:
        """Bytes requested by every load and store (what a GPU without any cache would move)."""
        return self.loaded_bytes + self.stored_bytes

    @property
    def unique_loaded_bytes(self) -> int:
        return sum(int(r.touched_load.sum()) for r in self.regions.values())

    @property
    def unique_stored_bytes(self) -> int:
        return sum(int(r.touched_store.sum()) for r in self.regions.values())

    @property
    def unique_bytes(self) -> int:
        """Bytes read at least once plus bytes written at least once (what a perfect cache would move)."""
        return self.unique_loaded_bytes + self.unique_stored_bytes

    @property
    def overwritten(self) -> int:
        """Element stores onto an element another program had already stored (a race on a GPU)."""
        return sum(r.overwritten for r in self.regions.values())

    def writers(self, name: str) -> np.ndarray:
        """For each element of argument `name` (in its span), the program that stored it last; -1 for none."""
        return self.regions[name].writer.copy()

    def per_argument(self) -> dict:
        """{argument: {loaded, stored, unique_loaded, unique_stored}} in bytes, plain numbers."""
        return {n: {"loaded": r.loaded, "stored": r.stored, "unique_loaded": int(r.touched_load.sum()),
                    "unique_stored": int(r.touched_store.sum())} for n, r in self.regions.items()}

    def summary(self) -> dict:
        """The launch's totals as plain numbers (what a check sends to its judge)."""
        return {"kernel": self.kernel, "programs": self.programs, "loaded_bytes": self.loaded_bytes,
                "stored_bytes": self.stored_bytes, "unique_loaded_bytes": self.unique_loaded_bytes,
                "unique_stored_bytes": self.unique_stored_bytes, "overwritten": self.overwritten,
                "widest": self.widest}


def _span(t: torch.Tensor) -> tuple[int, int]:
    """(first element's offset in elements from the storage start, number of elements the view spans)."""
    if t.numel() == 0:
        return t.storage_offset(), 0
    if any(s < 0 for s in t.stride()):
        raise ValueError("the counter takes tensors with non-negative strides")
    return t.storage_offset(), sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1


def _arena(arguments: dict) -> tuple[dict, dict, list]:
    """Copies of the tensor arguments in one arena, spaced apart: (new arguments, regions, copy-backs)."""
    tensors = {k: v for k, v in arguments.items() if isinstance(v, torch.Tensor)}
    for name, t in tensors.items():
        if t.device.type != "cpu":
            raise ValueError(f"{name} is on {t.device}: the interpreter runs on CPU tensors")
        if t.dtype.is_complex or t.dtype == torch.bool:
            raise ValueError(f"{name} is {t.dtype}: the counter takes real-number tensors")
    storages: dict[int, tuple[torch.UntypedStorage, int]] = {}  # storage address -> (storage, arena offset)
    size = _GAP
    for t in tensors.values():
        storage = t.untyped_storage()
        if storage.data_ptr() not in storages:
            storages[storage.data_ptr()] = (storage, size)
            size += 2 * max(_GAP, (storage.nbytes() + 255) // 256 * 256)  # its bytes, then as many unused
    arena = torch.empty(size, dtype=torch.uint8)
    copies = []
    for storage, offset in storages.values():
        block = arena[offset:offset + storage.nbytes()]
        block.copy_(torch.empty(0, dtype=torch.uint8).set_(storage))
        copies.append((storage, block))
    new, regions = dict(arguments), {}
    for name, t in tensors.items():
        storage, offset = storages[t.untyped_storage().data_ptr()]
        whole = arena[offset:offset + storage.nbytes() // t.element_size() * t.element_size()].view(t.dtype)
        view = whole.as_strided(t.shape, t.stride(), whole.storage_offset() + t.storage_offset())
        first, count = _span(t)
        lo = whole.data_ptr() + first * t.element_size()
        new[name] = view
        regions[name] = Region(name, lo, lo + count * t.element_size(), t.element_size(), t.numel())
    return new, regions, copies


def _ordinal(region: Region, address: int) -> int:
    return (int(address) - region.lo) // region.itemsize


_AS_INTERPRETED: dict = {}  # id(JITFunction) -> (it, its InterpretedFunction), for tl's library (tl.sum, tl.max ...)


class _library_interpreted:  # noqa: N801  (a context manager, used like a function)
    """For one launch: a @triton.jit function called from a kernel runs in the interpreter.

    When triton is imported before TRITON_INTERPRET=1 is set, tl's library functions written in
    Triton (tl.sum, tl.max, tl.zeros, tl.sigmoid ...) are decorated for the GPU compiler, and the
    interpreter cannot call them. Inside a launch, calling one runs it as the interpreter would have
    decorated it, so the counter works whatever the import order was.
    """

    def __enter__(self):
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        self.cls, self.saved = JITFunction, JITFunction.__dict__.get("__call__")

        def call(fn, *args, **kwargs):
            entry = _AS_INTERPRETED.get(id(fn))  # by id: a JITFunction's hash compiles its source's dependencies
            if entry is None or entry[0] is not fn:
                entry = _AS_INTERPRETED[id(fn)] = (fn, InterpretedFunction(fn.fn))
            return entry[1](*args, **kwargs)

        JITFunction.__call__ = call
        return self

    def __exit__(self, *exc) -> bool:
        if self.saved is None:
            del self.cls.__call__
        else:
            self.cls.__call__ = self.saved
        return False


class _Watch:
    """The wrappers around the interpreter's builder for one launch: count, bound-check, stop."""

    def __init__(self, kernel: str, regions: dict, builder: Any):
        self.kernel, self.regions, self.builder = kernel, regions, builder
        self.program, self.programs, self.widest = (0, 0, 0), 0, 0
        self.order = sorted(regions.values(), key=lambda r: r.lo)

    def grid_idx(self, original):
        def set_grid_idx(x, y, z):
            original(x, y, z)
            self.program, self.programs = (x, y, z), self.programs + 1
        return set_grid_idx

    def _linear(self) -> int:
        gx, gy, _ = self.builder.grid_dim
        x, y, z = self.program
        return x + gx * (y + gy * z)

    def _where(self) -> str:
        gx, gy, gz = self.builder.grid_dim
        axes = [str(self.program[0])] + [str(p) for p, g in zip(self.program[1:], (gy, gz)) if g > 1]
        return f"program {', '.join(axes)} of grid {tuple(g for g in (gx, gy, gz) if g > 1) or (gx,)}"

    def _regions_of(self, addresses: np.ndarray, itemsize: int) -> np.ndarray:
        """Index into self.order of the argument each address lies in; -1 when it lies in none."""
        owner = np.full(addresses.shape, -1, dtype=np.int64)
        for i, r in enumerate(self.order):
            inside = (addresses >= r.lo) & (addresses + itemsize <= r.hi) & (owner < 0)
            owner[inside] = i
        return owner

    def _nearest(self, address: int) -> Region:
        return min(self.order, key=lambda r: 0 if r.lo <= address < r.hi else min(abs(address - r.lo), abs(address - r.hi)))

    def _account(self, what: str, ptrs: Any, mask: Any) -> None:
        itemsize = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
        addresses = np.asarray(ptrs.data, dtype=np.uint64).astype(np.int64)
        on = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        self.widest = max(self.widest, int(addresses.size))
        active = addresses[on]
        if active.size == 0:
            return
        owner = self._regions_of(active, itemsize) if self.order else np.full(active.shape, -1)
        if (owner < 0).any():
            self._stop(what, active, owner, addresses, on)
        linear = self._linear()
        for i, r in enumerate(self.order):
            mine = active[owner == i]
            if mine.size == 0:
                continue
            start = mine - r.lo
            touched = r.touched_load if what == "load" else r.touched_store
            for b in range(itemsize):
                touched[start + b] = True
            if what == "load":
                r.loaded += mine.size * itemsize
            else:
                r.stored += mine.size * itemsize
                if r.itemsize == itemsize:
                    idx = start // itemsize
                    before = r.writer[idx]
                    r.overwritten += int(((before >= 0) & (before != linear)).sum())
                    r.writer[idx] = linear

    def _stop(self, what: str, active: np.ndarray, owner: np.ndarray, addresses: np.ndarray, on: np.ndarray) -> None:
        bad = active[owner < 0]
        if not self.order:
            raise OutOfBounds(f"{self.kernel}, {self._where()}: a {what} through a pointer that is not into any tensor "
                              "argument; stopped before it ran.")
        r = self._nearest(int(bad[0]))
        first, last = _ordinal(r, int(bad.min())), _ordinal(r, int(bad.max()))
        lanes = f"{bad.size} of its {int(on.sum())} unmasked lanes" if bad.size > 1 else "one unmasked lane"
        index = f"index {first}" if first == last else f"indices {first} .. {last}"
        raise OutOfBounds(
            f"{self.kernel}, {self._where()}: a tl.{what} through `{r.name}` at {index}, but `{r.name}` has {r.numel} "
            f"elements (indices 0 .. {r.numel - 1}); {lanes} out of bounds. The course's counter stopped it before the "
            f"access: Triton itself checks nothing, and on a GPU (or here without the counter) this {what} "
            f"{'reads' if what == 'load' else 'writes'} memory that is not `{r.name}`'s: a wrong answer, a corrupted "
            "tensor or a crash later. Give the access a mask (mask=offsets < n) that turns the lanes past the end off.")

    def load(self, original):
        def create_masked_load(ptrs, mask, other, cache_policy, is_volatile):
            self._account("load", ptrs, mask)
            return original(ptrs, mask, other, cache_policy, is_volatile)
        return create_masked_load

    def store(self, original):
        def create_masked_store(ptrs, value, mask, cache_policy):
            self._account("store", ptrs, mask)
            return original(ptrs, value, mask, cache_policy)
        return create_masked_store

    def refuse(self, name: str):
        def refused(*args, **kwargs):
            raise KernelFailed(f"{self.kernel} uses {name.replace('create_', 'tl.')}: the course's counter counts "
                               "tl.load and tl.store only, so it does not run this kernel")
        return refused


_REFUSED = ("create_atomic_cas", "create_atomic_rmw", "create_atomic_load", "create_atomic_store",
            "create_descriptor_load", "create_descriptor_store", "create_descriptor_gather",
            "create_descriptor_scatter")


def _grid_size(grid: Any, arguments: dict) -> tuple:
    shape = grid(arguments) if callable(grid) else grid
    if isinstance(shape, int) or not isinstance(shape, (tuple, list)) or not 1 <= len(shape) <= 3:
        raise ValueError(f"the grid is {shape!r}: give a tuple of 1 to 3 program counts, like (programs,)")
    for g in shape:
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 0:
            raise ValueError(f"the grid is {tuple(shape)!r}: each entry is a whole number of programs (>= 0)")
    return tuple(int(g) for g in shape)


def launch(kernel: Any, grid: Any, *args: Any, max_programs: int = MAX_PROGRAMS, **kwargs: Any) -> Counts:
    """Run `kernel[grid](*args, **kwargs)` in Triton's interpreter, counting every load and store; returns Counts.

    Raises OutOfBounds (before the access) for a lane outside its tensor, KernelFailed when the kernel
    raises, NotImplementedError when the kernel is an unfinished stub, ValueError for a grid too large.
    """
    fn = interpreted(kernel)
    from triton.runtime import interpreter as ti
    from triton.runtime.errors import InterpreterError

    name = fn.fn.__name__
    course = _course_kernel(fn.fn)
    if course is not None:  # counted when a cell launched it (launch is transparent: see _LAUNCHED)
        _LAUNCHED[course]()
    try:
        bound = inspect.signature(fn.fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{name}{inspect.signature(fn.fn)}: {exc}") from None
    shape = _grid_size(grid, dict(bound.arguments))
    programs = int(np.prod(shape)) if shape else 0
    if programs > max_programs:
        raise ValueError(f"{name} launched on a grid of {programs:,} programs {shape}; the interpreter runs them one "
                         f"by one, and the counter takes at most {max_programs:,}. Does each program take a block of "
                         "elements (a grid of about n / BLOCK), not one element each?")
    new, regions, copies = _arena(dict(bound.arguments))
    builder = ti.interpreter_builder
    watch = _Watch(name, regions, builder)
    patched = {"set_grid_idx": watch.grid_idx(builder.set_grid_idx),
               "create_masked_load": watch.load(builder.create_masked_load),
               "create_masked_store": watch.store(builder.create_masked_store),
               **{m: watch.refuse(m) for m in _REFUSED}}
    for attr, wrapper in patched.items():
        setattr(builder, attr, wrapper)
    try:
        with _library_interpreted(), np.errstate(all="ignore"):  # a kernel's inf and NaN are its result, not a warning
            fn[shape](**new)
    except InterpreterError as exc:
        cause = exc.__cause__
        if isinstance(cause, (OutOfBounds, KernelFailed)):
            raise type(cause)(str(cause)) from None
        if isinstance(cause, NotImplementedError):
            raise NotImplementedError(f"{name} is not written yet") from None
        raise KernelFailed(f"{name} failed in Triton's interpreter ({_where_text(watch)}): "
                           f"{type(cause).__name__ if cause else 'error'}: {str(cause or exc)[:1500]}") from None
    finally:
        for attr in patched:
            builder.__dict__.pop(attr, None)
    for storage, block in copies:
        torch.empty(0, dtype=torch.uint8).set_(storage).copy_(block)
    return Counts(name, shape, watch.programs, regions, watch.widest)


COURSE_KERNELS = ("bias_add_kernel", "gelu_kernel", "matmul_kernel", "flash_attention_kernel")


def launched_label(name: str) -> str:
    """What a guard's `earlier=` and its message call a launch of the course's kernel `name` from a cell."""
    return f"the course's {name} (grader.triton_kernels) under grader.triton_counter.launch"


def _launched_marker(name: str):
    @shortcuts.course_only(launched_label(name))
    def launched() -> None:
        """Counts a launch of one of the course's kernels (or a copy of its code) that a cell asked for."""

    return launched


# One course_only marker per course kernel, called by `launch` whenever it runs that kernel. `launch` is transparent
# (shortcuts.transparent): the marker counts as called by whoever called `launch`, so a cell that measures with the
# course's kernels under the counter before a byte check is noticed by that check's `earlier=` (a copy test measured
# fusion_bytes that way in the cell before its function), while the course's own wrappers (triton_kernels.matmul, ...)
# are counted by their own course_only labels.
_LAUNCHED = {name: _launched_marker(name) for name in COURSE_KERNELS}


def launched_labels(wrapper: str, *kernels: str) -> tuple[str, ...]:
    """The course_only names a cell measures with before a check (a guard's `earlier=`): the course's wrapper
    grader.triton_kernels.`wrapper`, and the course's `kernels` (or copies of their code) launched under the counter."""
    return (f"grader.triton_kernels.{wrapper}", *(launched_label(k) for k in kernels))


def launched_markers(wrapper: str, *kernels: str) -> tuple:
    """The same as course_only functions, for a prediction's `watch=`: the markers of `kernels`, and the wrapper
    itself where triton is installed (without it nothing launches)."""
    found = tuple(_LAUNCHED[k] for k in kernels)
    try:
        from grader import triton_kernels
    except ImportError:
        return found
    return found + (getattr(triton_kernels, wrapper),)


def _course_kernel(fn: Any) -> str | None:
    """Which of the course's kernels `fn` is: the kernel itself, or a copy of its code (same bytecode, constants and
    names: renaming its variables or moving its lines keeps them); None for any other kernel."""
    try:
        from grader import triton_kernels
    except ImportError:
        return None
    mine = getattr(fn, "__code__", None)
    for name, kernel in triton_kernels.kernels().items():
        code = kernel.fn.__code__
        if fn is kernel.fn or (mine is not None and (mine.co_code, mine.co_consts, mine.co_names)
                               == (code.co_code, code.co_consts, code.co_names)):
            return name
    return None


def _where_text(watch: _Watch) -> str:
    try:
        return watch._where()
    except (AttributeError, TypeError, ValueError):
        return "before its first program"


def interpret_env_set() -> bool:
    """Whether TRITON_INTERPRET=1 is set (kernels decorated now run in the interpreter)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


shortcuts.transparent(launch)  # it only runs the kernel it is handed: a course kernel's marker counts for its caller
