"""Count where a loop makes the host wait for the device, and the bytes it copies to the device.

`SyncCounter` is a TorchFunctionMode: inside `with SyncCounter() as counter:` every torch call the
learner's code makes passes through it, methods and Python's conversions of a tensor included (a
TorchDispatchMode alone misses the calls that never reach the dispatcher as operators). It records
each read from the device (the host waits) and each copy to the device, with its bytes. Which calls
are reads is lesson 02's quiz (SYNC_ANSWERS), so that decision, `_read_of`, is sealed
(grader.checks._sealed): the counter opens it when it first counts.

A copy to the device is a sync point too unless it comes from pinned memory with
`non_blocking=True`: without non_blocking, PyTorch's CUDA copy (aten/src/ATen/native/cuda/Copy.cu)
calls memcpy_and_sync (c10/cuda/CUDAFunctions.h): cudaMemcpyAsync, then cudaStreamSynchronize,
so `.to(device)` returns only when everything queued on the stream before it has finished. From
pageable memory with non_blocking, the CUDA driver stages the bytes through its own pinned buffer
with the host's help, so the host is not freed either. `Event.blocking` says which copies wait;
a copy's op says whether non_blocking=True was asked for.

Only the learner's own lines count. Each event is attributed to the frame that called into
torch; frames in torch itself, in site-packages, in the standard library or in this package
are library internals (AdamW's own step counter, for example) and are left out.

Any device: on a machine without the accelerator the counter *pretends*. The loop is given
`counter.device` (say `cuda`); every tensor still lives on the CPU, but the counter remembers
which storages would be on the device, so a CPU run counts the same events a GPU run would.
The CUDA-only cross-check, built on torch.cuda.set_sync_debug_mode, is grader.gpu.sync_warnings.
"""

from __future__ import annotations

import linecache
import os
import site
import sys
import sysconfig
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from grader import device as dev
from grader import shortcuts as _shortcuts_module
from grader.checks._sealed import sealed
from grader.shortcuts import course_only, module_code


@sealed("02_transfers", "SYNC_ANSWERS")
def _read_of(name: str, args: tuple, kwargs: dict, this: Any, inputs: list, on_device: Callable) -> tuple | None:
    """Whether the torch call `name` (on `this`, with `inputs`) reads from the device: (the op in the lesson's words,
    bytes read, whether the result is a new host tensor), or None. Lesson 02's quiz answers, so sealed
    (grader.checks._sealed)."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_SHORTCUTS = _shortcuts_module.__file__  # grader/shortcuts.py: a course_only wrapper's frame
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])
# Frames that only pass a call on to the mode (Python wrappers in torch); skipped to find the caller.
# torch.unique and friends are Python wrappers too (torch/functional.py, boolean_dispatch in torch/_jit_internal.py).
_PASSING = tuple(os.path.join(_TORCH, name) for name in ("overrides.py", "_tensor.py", "_tensor_str.py", "functional.py",
                                                          "_jit_internal.py"))


@dataclass(frozen=True)
class Event:
    """One read from the device or copy to it, made by the learner's code."""

    kind: str  # "read" (device -> host, the host waits) or "copy" (host -> device)
    op: str  # ".item()", "float()", ".to(device)", ...
    nbytes: int  # bytes crossing the host link
    blocking: bool  # True when the host waits for it: every read, and a copy unless pinned + non_blocking
    where: str  # "file:line", the data (for a notebook cell the file is ipykernel's temporary one)
    line: str  # that line's source, stripped
    place: str = ""  # the same place in the learner's words: "line 3 of your train_fixed", "cell line 8"


def _is_cell(filename: str) -> bool:
    """True for code typed into a notebook cell or compiled from a string (ipykernel's temporary files, "<...>")."""
    return filename.startswith("<") or os.path.basename(os.path.dirname(filename)).startswith("ipykernel_")


def describe_place(filename: str, lineno: int, function: str = "<module>", first_line: int = 1) -> str:
    """Where a line is, as a learner would say it: "line 3 of your train_fixed", "cell line 8", "loop.py line 8".

    A line inside a function is counted from its `def` (line 1), so it reads the same
    whichever cell holds the function; a cell's temporary file name never appears.
    """
    if function and not function.startswith("<"):
        where = f"line {lineno - first_line + 1} of your {function}"
        return where if _is_cell(filename) else f"{where} ({os.path.basename(filename)})"
    return f"cell line {lineno}" if _is_cell(filename) else f"{os.path.basename(filename)} line {lineno}"


_LIBRARIES = tuple(dict.fromkeys([_TORCH, _PACKAGE, _STDLIB, *(sysconfig.get_paths()[k] for k in ("purelib", "platlib")),
                                    *site.getsitepackages(), site.getusersitepackages()]))


def _is_library(frame) -> bool:
    """True for the code of torch, installed packages, the standard library and the course package itself: a module's
    own code, not code compiled under such a file name (grader.shortcuts.module_code)."""
    return module_code(frame, _LIBRARIES)


def _in_course(frame) -> bool:
    """True for the course package's own code (this module aside: _caller skips it)."""
    return module_code(frame, (_PACKAGE,))


def _caller():
    """The frame that called into torch (skipping this module and torch's passing-on wrappers)."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename == __file__ or frame.f_code.co_filename.startswith(_PASSING)):
        frame = frame.f_back
    return frame


def _tensors(args: Any, kwargs: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten((args, kwargs))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # tensors without storage (meta, some subclasses)
        return None


@course_only("grader.syncs.SyncCounter")
def _used_past_enter() -> None:
    """Stands for a SyncCounter that counted while in force without its own __enter__ (a copy test entered one through
    its base class, TorchFunctionMode.__enter__, which the course_only wrapper never saw): the use is recorded as
    entering it is, under the same name. Called from _NOTE_USE, code outside the package, so it is counted."""


_NOTE_USE = compile("used()", "<a SyncCounter in force without its own __enter__>", "eval")


class SyncCounter(TorchFunctionMode):
    """Context manager that records every device read and host-to-device copy the learner's code makes.

    `device`: the accelerator the loop is meant for ("cuda", "mps"); None takes the best one
    here, or a pretend "cuda" when there is none. Run the loop with `counter.device`.
    """

    def __init__(self, device: str | torch.device | None = None):
        super().__init__()
        if device is None:
            best = dev.pick_device("auto")
            device = best if best.type != "cpu" else "cuda"
        self.device = torch.device(device)
        self.pretend = self.device.type != "cpu" and self.device.type not in dev.available()
        self.events: list[Event] = []
        self._resident: set[int] = set()  # storages on the (pretend) device
        self._pinned: set[int] = set()  # storages in (pretend) pinned host memory
        self._entered = None  # the frame that entered the counter (its `with` statement)
        self._noted = False  # a use past __enter__ already recorded (_record)

    # Entering a counter from a notebook cell measures: lesson 02's quiz and sync_points ask for a prediction of what
    # it counts, so a cell that enters one before those are answered is noticed (grader.shortcuts; the course's own
    # code entering it is not counted).
    @course_only("grader.syncs.SyncCounter")
    def __enter__(self):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename == _SHORTCUTS:  # the course_only wrapper's own frame
            frame = frame.f_back
        self._entered = frame
        return super().__enter__()

    # --- what the learner asks ----------------------------------------------------------------

    @property
    def reads(self) -> int:
        """Device-to-host reads: each one makes the host wait."""
        return sum(e.kind == "read" for e in self.events)

    @property
    def copies(self) -> int:
        """Host-to-device copies."""
        return sum(e.kind == "copy" for e in self.events)

    @property
    def bytes_copied(self) -> int:
        """Bytes copied host to device."""
        return sum(e.nbytes for e in self.events if e.kind == "copy")

    @property
    def blocking_copies(self) -> int:
        """Host-to-device copies the host waits for: pageable memory, or no non_blocking=True."""
        return sum(e.kind == "copy" and e.blocking for e in self.events)

    @property
    def sync_points(self) -> int:
        """Places the host waits: every read, and every blocking copy."""
        return sum(e.blocking for e in self.events)

    def by_op(self, kind: str | None = None) -> Counter:
        """How many events of each op (".item()": 10, ...), optionally of one kind."""
        return Counter(e.op for e in self.events if kind in (None, e.kind))

    def table(self) -> list[dict]:
        """One row per (kind, op, line): how often it happened and the bytes it moved.

        "place" is where, in the learner's words (show that); "where" is file:line, for code.
        """
        rows: dict[tuple, dict] = {}
        for e in self.events:
            row = rows.setdefault(
                (e.kind, e.op, e.where),
                {"kind": e.kind, "op": e.op, "line": e.line, "place": e.place, "where": e.where, "count": 0, "nbytes": 0,
                 "blocking": e.blocking},
            )
            row["count"] += 1
            row["nbytes"] += e.nbytes
        return list(rows.values())

    def display_rows(self) -> list[dict]:
        """`table()` as a learner should see it: "where" is the place in their words, never a temporary file."""
        return [{"where": row["place"], **{k: v for k, v in row.items() if k not in ("place", "where")}}
                for row in self.table()]

    def on_device(self, t: torch.Tensor) -> bool:
        """True when `t` is (or, pretending, would be) in device memory."""
        if self.pretend:
            return _storage(t) in self._resident
        return t.device.type != "cpu"

    # --- the mode ------------------------------------------------------------------------------

    def _learner_frame(self, frame):
        """The frame of the learner's code an event belongs to, or None for the course's own and a library's.

        The course's code is walked through to the learner's line that called it (a copy test hid the buggy loop's
        sync points by calling it from the package), but never past the frame that entered the counter: what the
        course runs there itself (a check around the learner's function) is not the learner's."""
        while frame is not None and _in_course(frame):
            if frame is self._entered:
                return None
            frame = frame.f_back
        if frame is None or _is_library(frame):
            return None
        up = frame
        while up is not None and up is not self._entered:  # inside the counter's `with`, or it is not this counter's
            up = up.f_back
        return frame if up is not None or self._entered is None else None

    def _record(self, kind: str, op: str, nbytes: int, blocking: bool = True) -> None:
        if self._entered is None:  # in force without its own __enter__ (TorchFunctionMode.__enter__ called on it)
            if not self._noted:  # a copy test measured the loops so, unseen: count nothing, and record the use
                self._noted = True
                eval(_NOTE_USE, {"used": _used_past_enter})
            return
        frame = self._learner_frame(_caller())
        if frame is None:
            return
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        line = linecache.getline(filename, lineno, frame.f_globals).strip()
        code = frame.f_code
        place = describe_place(filename, lineno, code.co_name, code.co_firstlineno)
        self.events.append(Event(kind, op, int(nbytes), blocking, f"{os.path.basename(filename)}:{lineno}", line, place))

    def _is_target(self, value: Any) -> bool:
        """True for a device (or device string) that names the pretend device."""
        if isinstance(value, torch.device):
            return value.type == self.device.type
        return isinstance(value, str) and value.split(":")[0] == self.device.type

    def _rewrite(self, args: tuple, kwargs: dict) -> tuple[tuple, dict, bool]:
        """Pretending: replace the pretend device by the CPU; say whether it was named."""
        named = False

        def swap(value):
            nonlocal named
            if self._is_target(value):
                named = True
                return torch.device("cpu")
            return value

        return tuple(swap(a) for a in args), {k: swap(v) for k, v in kwargs.items()}, named

    def _pinned_here(self, t: torch.Tensor) -> bool:
        return _storage(t) in self._pinned if self.pretend else t.is_pinned()

    def _copy_in(self, t: torch.Tensor, op: str, non_blocking: bool) -> None:
        if non_blocking:  # ".to(device)" -> ".to(device, non_blocking=True)": asked for, whether or not it can be
            op = op[:-1] + ("" if op.endswith("()") else ", ") + "non_blocking=True)"
        self._record("copy", op, t.nbytes, blocking=not (non_blocking and self._pinned_here(t)))

    def _mark(self, out: Any, resident: bool) -> None:
        leaves, _ = tree_flatten(out)
        for t in leaves:
            if isinstance(t, torch.Tensor):
                ptr = _storage(t)
                if ptr is not None:
                    (self._resident.add if resident else self._resident.discard)(ptr)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.device:  # naming a device is not moving anything; keep the pretend device's name
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        named = False
        if self.pretend:
            if name in ("pin_memory", "is_pinned"):
                return self._pretend_pinning(name, args[0])
            args, kwargs, named = self._rewrite(args, kwargs)
        inputs = _tensors(args, kwargs)
        this = args[0] if args and isinstance(args[0], torch.Tensor) else None

        if name == "to" and this is not None:
            return self._to(func, this, args, kwargs, named)
        if name == "cuda" and this is not None:
            return self._to_device(func, this, args, kwargs, ".cuda()", bool(kwargs.get("non_blocking", False)))
        if name == "copy_" and len(inputs) >= 2:
            dst, src = args[0], args[1]
            if self.on_device(dst) and not self.on_device(src):
                self._copy_in(src, ".copy_()", bool(kwargs.get("non_blocking", False)))
            elif self.on_device(src) and not self.on_device(dst):
                self._record("read", ".copy_() to the host", src.nbytes)
            return func(*args, **kwargs)

        read = _read_of(name, args, kwargs, this, inputs, self.on_device)
        if read is not None:
            op, nbytes, fresh = read
            self._record("read", op, nbytes)
            if fresh:
                out = func(*args, **kwargs)
                return out.clone() if self.pretend else out  # a new host tensor, as on a GPU

        out = func(*args, **kwargs)
        if self.pretend:
            self._mark(out, named or any(self.on_device(t) for t in inputs))
        return out

    def _pretend_pinning(self, name: str, t: torch.Tensor):
        """Pretending: pin_memory returns a copy the counter treats as pinned; is_pinned asks the counter."""
        if name == "is_pinned":
            return _storage(t) in self._pinned
        with torch._C.DisableTorchFunction():
            out = t.clone()
        self._pinned.add(_storage(out))
        return out

    def _to(self, func, this, args, kwargs, named):
        """Tensor.to: a copy to the device, a read back to the host, or neither (dtype only)."""
        parsed = {k: v for k, v in kwargs.items() if k != "copy"}  # _parse_to refuses copy=
        target, _, non_blocking, _ = torch._C._nn._parse_to(*args[1:], **parsed)
        if target is None:
            out = func(*args, **kwargs)
            if self.pretend:
                self._mark(out, self.on_device(this))
            return out
        to_device = named if self.pretend else target.type != "cpu"
        if to_device:
            return self._to_device(func, this, args, kwargs, ".to(device)", non_blocking)
        if self.on_device(this):
            self._record("read", ".to('cpu')", this.nbytes, blocking=not non_blocking)
            out = func(*args, **kwargs)
            if self.pretend:
                out = out.clone()
                self._mark(out, False)
            return out
        return func(*args, **kwargs)

    def _to_device(self, func, this, args, kwargs, op, non_blocking):
        """A move to the device: counted (with its bytes) unless the tensor is there already."""
        if self.on_device(this):
            if not self.pretend:
                return func(*args, **kwargs)
            out = this.to(*args[1:], **{k: v for k, v in kwargs.items() if k != "non_blocking"}) if op != ".cuda()" else this
            self._mark(out, True)
            return out
        self._copy_in(this, op, non_blocking)
        if not self.pretend:
            return func(*args, **kwargs)
        out = this.to(*args[1:], **kwargs) if op != ".cuda()" else this
        if _storage(out) == _storage(this):
            out = out.clone()  # a device copy is a new storage; the host tensor stays on the host
        self._mark(out, True)
        return out


def summary(counter: SyncCounter, steps: int) -> dict:
    """One row for a loop version: reads, copies, bytes and sync points, in total and per step."""
    return {
        "reads": counter.reads,
        "copies": counter.copies,
        "blocking copies": counter.blocking_copies,
        "bytes copied": counter.bytes_copied,
        "sync points": counter.sync_points,
        "reads per step": counter.reads / steps,
        "bytes per step": counter.bytes_copied / steps,
    }


def modelled_seconds(
    counter: SyncCounter,
    transfer_seconds: Callable[[float, float, float], float],
    link_bandwidth: float,
    latency: float,
    side_stream: bool = False,
) -> float:
    """Model: seconds the loop's stream spends on the host link; every read and every copy pays latency + bytes / bandwidth.

    On one stream a copy runs in order with the kernels, pinned and non_blocking or not: the host
    is free, but the device does not compute while the copy runs. With `side_stream=True`, copies
    from pinned memory with non_blocking=True run on a second stream beside the compute and cost
    the loop's stream only their latency (if the compute takes longer than the copy).
    """
    total = 0.0
    for e in counter.events:
        if side_stream and e.kind == "copy" and not e.blocking:
            total += latency  # the copy itself runs beside the compute, on the side stream
        else:
            total += transfer_seconds(e.nbytes, link_bandwidth, latency)
    return total
