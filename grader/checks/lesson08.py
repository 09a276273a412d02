"""Checks for lesson 08 (inside a kernel): Triton kernels run in Triton's CPU interpreter under the course's counter.

Each kernel check launches the learner's kernel through `grader.triton_counter.launch` on the check's own
inputs (made from fixed seeds, so the judge can make them again in its own process), with every output
the check allocates filled with NaN: an element the kernel never wrote stays NaN, whatever the memory
held before. The observation is plain data: the outputs, the counter's totals, or the error the launch
raised (an out-of-bounds lane is stopped by the counter before it runs, so a missing mask is a message,
not a crashed interpreter). The judges compare against torch and name the usual mistakes.

The pure functions (fusion_bytes, tile_traffic, best_tiles, flash_traffic) are recorded and judged by
digests (grader.checks._keys): their answers and the judges that hold them are the instructor's
(solutions/judges/lesson08.py); only the on-chip budget TILE_PREDICTION's model needs stays here.
attention_blocked runs in torch under a TorchDispatchMode that notes the largest tensor it creates, so the
judge can tell an online softmax from one that builds the s x s scores; a TorchFunctionMode notes a tensor handed out
of torch (Tensor.numpy, .tolist), which that watch cannot follow; tracemalloc notes the peak of what is allocated
outside torch (numpy arrays, Python lists), so the scores cannot hide in numpy either.
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from grader import shortcuts, triton_counter
from grader.checks import _plain
from grader.checks._common import (Check, Prediction, Raised, Replay, _key, answered_by, call, close, fail, guard,
                                   is_number, quote, record)
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson08.expect
from grader.checks._keys import Keyed, digest
from grader.notebook import CheckFailed, NotDone
from grader.checks._sealed import sealed
from grader.shortcuts import course_only

LESSON = "08_inside_a_kernel"  # the lesson's name in the keys and the predictions record (grader.predictions)
NAN = float("nan")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _launch(kernel: Any, name: str, grid: Any, args: tuple, kwargs: dict, outs: dict, block: int | None = None) -> dict:
    """Run a learner's kernel under the counter; what came out (outputs, counts) or what it raised, as plain data.

    With `block`: whether any one load or store worked on more lanes than that (a kernel that ignores its BLOCK)."""
    try:
        counts = triton_counter.launch(kernel, grid, *args, **kwargs)
    except NotImplementedError:
        raise NotDone(name) from None
    except triton_counter.OutOfBounds as exc:
        return {"error": "OutOfBounds", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001  the judge says which launch raised what
        return {"error": type(exc).__name__, "message": str(exc)[:2000]}
    summary = counts.summary()
    widest = summary.pop("widest", 0)
    if block is not None:
        summary["wider_than_block"] = bool(widest > block)
    return {"outs": {k: v.clone() for k, v in outs.items()}, "counts": summary}


def _launch_failed(run: Any, label: str) -> None:
    """Fail with the launch's own error, when it raised one (an out-of-bounds lane, a crash in the kernel)."""
    if not isinstance(run, dict):
        fail(f"{label}: the check could not read what your kernel did")
    if "error" in run:
        if run["error"] == "OutOfBounds":
            fail(f"{label}: {run['message']}")
        fail(f"{label} raised {run['error']}: {run.get('message', '')}")
    if not isinstance(run.get("outs"), dict) or not isinstance(run.get("counts"), dict):
        fail(f"{label}: the check could not read what your kernel did")


def _out(run: dict, key: str, shape: tuple, label: str) -> torch.Tensor:
    got = run["outs"].get(key)
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(shape):
        fail(f"{label}: the check could not read the output back")
    return got.float()


def _unwritten(got: torch.Tensor) -> str | None:
    """Which elements are still NaN (never written), as text; None when all were written."""
    idx = torch.nonzero(torch.isnan(got.flatten())).flatten()
    if idx.numel() == 0:
        return None
    first, last = int(idx[0]), int(idx[-1])
    return f"{idx.numel()} of its {got.numel()} elements (flat indices {first} .. {last}) were never written (still NaN)"


# --- exercise 1: add_kernel and its grid -----------------------------------------------------------

_ADD_CASES = [(1000, 256), (1024, 256), (7, 64), (300, 32)]  # (n, BLOCK)


def _add_inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(n)
    return torch.randn(n, generator=g), torch.randn(n, generator=g)


def _as_grid(value: Any) -> tuple | None:
    if isinstance(value, (tuple, list)) and 1 <= len(value) <= 3 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                        for v in value):
        return tuple(value)
    return None


def _observe_add(add_kernel: Any, add_grid: Callable, masked_lanes: Callable) -> dict:
    # add_kernel comes first in the exercise cell: an unfinished one is named before add_grid (one program, 7 lanes)
    x, y = _add_inputs(7)
    _launch(add_kernel, "add_kernel", (1,), (x, y, torch.full((7,), NAN), 7), {"BLOCK": 64}, {})
    grids = record(add_grid, "add_grid", _ADD_CASES)
    masks = record(masked_lanes, "masked_lanes", _ADD_CASES)
    runs = []
    for n, block in _ADD_CASES:
        outcome = dict(grids["calls"]).get(_key((n, block)), {})
        grid = _as_grid(_plain.decode(outcome["value"])) if "value" in outcome else None
        if grid is None or math.prod(grid) > 2 * (n // block + 1):
            runs.append(None)  # far more programs than blocks: the judge names the grid without running them all
            continue
        x, y = _add_inputs(n)
        out = torch.full((n,), NAN)
        runs.append(_launch(add_kernel, "add_kernel", grid, (x, y, out, n), {"BLOCK": block}, {"out": out}))
    return {"grids": grids, "masks": masks, "runs": runs}


def _judge_add(observation: dict) -> None:
    grids, masks, runs = Replay(observation.get("grids")), Replay(observation.get("masks")), observation.get("runs")
    if not isinstance(runs, list) or len(runs) != len(_ADD_CASES):
        fail("the check could not read what your kernel did")
    for (n, block), run in zip(_ADD_CASES, runs):
        programs = -(-n // block)
        grid = call(grids, n, block)
        shape = _as_grid(grid)
        label = f"add_grid({n}, {block})"
        if shape is None:
            fail(f"{label} returned {grid!r}; return the grid as a tuple of whole numbers, like (programs,).")
        if math.prod(shape) != programs:
            if math.prod(shape) == n // block:
                fail(f"{label} returned {shape}: those programs cover whole blocks only, and the elements of the "
                     "last, partial block are never written. Every element needs a program; the mask is what keeps a "
                     "partial block's extra lanes from reading or writing past the end.")
            if math.prod(shape) == n:
                fail(f"{label} returned {shape}: one program per element. Each program handles a whole block of "
                     "elements (section 1).")
            fail(f"{label} returned {shape} ({math.prod(shape)} programs) for {n} elements in blocks of {block}: "
                 + ("more programs than blocks; the extra ones have no element at all." if math.prod(shape) > programs
                    else "too few programs, so some elements have no program.")
                 + " Every element needs a program, and only the last block may be partial.")
        kernel_label = f"add_kernel on n={n}, BLOCK={block} (grid {shape})"
        _launch_failed(run, kernel_label)
        counts = run["counts"]
        x, y = _add_inputs(n)
        got = _out(run, "out", (n,), kernel_label)
        if counts.get("overwritten", 0) > 0:
            fail(f"{kernel_label}: different programs stored into the same elements, and "
                 f"{_unwritten(got) or 'some were never written'}. Every program works on its own block: the "
                 "offsets of program p must start where program p − 1's block ended (tl.program_id(0) says which "
                 "program this is).")
        missing = _unwritten(got)
        if missing:
            fail(f"{kernel_label}: {missing}. Each program stores its whole block (with the mask for the tail).")
        if not torch.allclose(got, x + y, rtol=1e-6, atol=1e-6):
            fail(f"{kernel_label}: out is not x + y: each lane loads x and y at its own element and stores their sum "
                 "there.")
        if counts.get("stored_bytes") != 4 * n or counts.get("loaded_bytes") != 8 * n:
            fail(f"{kernel_label}: the counter saw more or fewer bytes move than x and y read once each and out "
                 "written once (float32; masked-off lanes move nothing). Load each input once per lane.")
        lanes = call(masks, n, block)
        want = programs * block - n
        if not (is_number(lanes) and lanes == want):
            if lanes == n % block and want != n % block:
                fail(f"masked_lanes({n}, {block}) returned {lanes}: that is n % BLOCK, the elements the last block "
                     "does have. masked_lanes counts lanes, the ones with no element.")
            if want == 0:
                fail(f"masked_lanes({n}, {block}) returned {lanes}: when BLOCK divides n, does any lane of the launch "
                     "lack an element?")
            fail(f"masked_lanes({n}, {block}) returned {lanes!r}: masked_lanes counts the lanes of the whole launch "
                 "that have no element (section 1).")


check_add = Check("add_kernel, add_grid and masked_lanes", _observe_add, _judge_add)


# --- exercise 2: fusion_bytes, then a fused bias + GELU kernel ----------------------------------------

# (rows, cols, dtype_bytes); the last is a billion elements, which no interpreter can run: counted, not measured
_FUSION_CASES = [(1024, 4096, 2), (4, 8, 4), (3, 5, 4), (1, 1, 8), (256, 1000, 4), (49152, 20000, 2)]


# The answers of fusion_bytes, tile_traffic, flash_traffic and best_tiles are not here: each is judged by digests
# (grader.checks._keys), made by scripts/build_keys.py from the instructor's judges (solutions/judges/lesson08.py,
# never released).


def _kernel_code(kernel: Any, name: str) -> dict:
    """{function: label} for one of the course's kernels as it runs: its Python function, and the function Triton's
    interpreter rewrites it into (InterpretedFunction caches one per kernel, so every launch runs that same code)."""
    found = {kernel.fn: name}
    try:
        from triton.runtime.interpreter import InterpretedFunction

        found[InterpretedFunction(kernel.fn).rewrite()] = name
    except Exception:  # noqa: BLE001  another triton: the counter refuses to run there anyway
        pass
    return found


def _instruments(*names: str) -> dict:
    """The course's instruments that measure what fusion_bytes, tile_traffic, flash_traffic (and attention_blocked)
    ask for: the wrappers in grader.triton_kernels, the kernels themselves however they are launched (their own code,
    not only the wrappers': a copy test launched triton_kernels.kernels()[...] under the counter itself), and the
    counter's launch, with which a function could measure a copy of a printed kernel instead of counting.
    `names`: the kernels that matter (all when none is given)."""
    try:
        from grader import triton_kernels
    except ImportError:  # no triton here (macOS): the kernels cannot run, so no function can measure with them
        return dict(shortcuts.ELSEWHERE)
    found = {triton_kernels.unfused_bias_gelu: "grader.triton_kernels.unfused_bias_gelu",
             triton_kernels.matmul: "grader.triton_kernels.matmul",
             triton_kernels.flash_attention: "grader.triton_kernels.flash_attention",
             triton_counter.launch: "grader.triton_counter.launch"}
    for name, kernel in triton_kernels.kernels().items():
        if not names or name in names:
            found.update(_kernel_code(kernel, f"the course's {name} (grader.triton_kernels)"))
    return {**found, **shortcuts.ELSEWHERE}  # a copy test measured in a thread of its own, where no watch follows


def _bytes_check(what: str, cases: list, returns: str, pair: bool, hints: Callable[[Replay], None],
                 unknown: str, earlier: tuple[str, ...]) -> Any:
    """The keyed check of the byte count `what`, one number or a `pair`: its public half says what it `returns` on
    every case; numbers are keyed as floats (an int and a float of the same bytes are one answer). A function that
    measures with the course's kernels instead of counting is noticed."""
    def public(fn: Replay) -> None:
        for case in cases:
            got = call(fn, *case)
            if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(is_number(v) for v in got) if pair
                    else is_number(got)):
                fail(f"{what}{case} returned {got!r}; return {returns}.")

    def observe(fn: Callable) -> dict:
        """The recording of every case; a function seen measuring on the small cases is not run on the last, which
        no interpreter can run (the guard around this check names what it called)."""
        recording = record(fn, what, cases[:-1])
        if not shortcuts.seen():  # measuring is caught on the small cases: the last one no interpreter could run
            recording["calls"] += record(fn, what, cases[-1:])["calls"]
        return recording

    return guard(Keyed(LESSON, what, what, cases, floats=True, public=public, hints=hints, unknown=unknown,
                       observe=observe), what, _instruments(), earlier=earlier)


def _hints_fusion_bytes(fn: Replay) -> None:
    """An unknown answer in which fusing saves nothing."""
    for case in _FUSION_CASES:
        unfused, fused = (float(v) for v in call(fn, *case))
        if fused >= unfused:
            fail(f"fusion_bytes{case}: the fused kernel moves no fewer bytes than the two kernels. Fusing keeps the "
                 "intermediate on chip: what the first kernel writes and the second reads back never moves.")


check_fusion_bytes = _bytes_check(
    "fusion_bytes", _FUSION_CASES, "(unfused_bytes, fused_bytes), two numbers of bytes", True, _hints_fusion_bytes,
    unknown="fusion_bytes is not the least bytes the two kernels and the fused one move, nor a mistake the course "
            "knows. Go kernel by kernel, and for each tensor ask what must cross memory at the least (section 2).",
    earlier=triton_counter.launched_labels("unfused_bias_gelu", "bias_add_kernel", "gelu_kernel"))

# (rows, cols, BLOCK, strided): strided x is the first `cols` columns of a (rows, 2·cols + 3) tensor
_GELU_CASES = [(4, 100, 128, False), (3, 7, 16, True), (2, 1000, 256, True), (5, 64, 128, True)]


def _gelu_inputs(rows: int, cols: int, strided: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(rows * 1000 + cols)
    wide = 3 * torch.randn(rows, 2 * cols + 3, generator=g)
    bias = torch.randn(cols, generator=g)
    return (wide[:, :cols] if strided else wide[:, :cols].contiguous()), bias


def _observe_bias_gelu(kernel: Any, cases: list | None = None) -> dict:
    runs = []
    for rows, cols, block, strided in cases or _GELU_CASES:
        x, bias = _gelu_inputs(rows, cols, strided)
        out = torch.full((rows, cols), NAN)
        n = rows * cols
        runs.append(_launch(kernel, "bias_gelu_kernel", (-(-n // block),), (x, bias, out, n, cols, x.stride(0)),
                            {"BLOCK": block}, {"out": out}))
    return {"runs": runs}


def _judge_bias_gelu(observation: dict, cases: list | None = None) -> None:
    cases = cases or _GELU_CASES
    runs = observation.get("runs")
    if not isinstance(runs, list) or len(runs) != len(cases):
        fail("the check could not read what your kernel did")
    for (rows, cols, block, strided), run in zip(cases, runs):
        n = rows * cols
        x, bias = _gelu_inputs(rows, cols, strided)
        label = (f"bias_gelu_kernel on a {rows}×{cols} x " + (f"(a view, rows {x.stride(0)} elements apart" if strided
                 else "(contiguous") + f", BLOCK={block})")
        _launch_failed(run, label)
        got, want = _out(run, "out", (rows, cols), label), torch.nn.functional.gelu(x + bias)
        missing = _unwritten(got)
        if missing:
            fail(f"{label}: {missing}. out is contiguous: lane i of the launch stands for element i of out.")
        if strided:
            flat = x.as_strided((rows, cols), (cols, 1), x.storage_offset())  # x read as if its rows were cols apart
            if torch.allclose(got, torch.nn.functional.gelu(flat + bias), atol=1e-4):
                fail(f"{label}: x was read as if it were contiguous. This x is a view: its rows lie x_row_stride "
                     "elements apart, with gaps between them, so the flat index of out is not x's. Work out which "
                     "row and column a lane stands for, then where that element of x is. (Right on contiguous x, "
                     "wrong here.)")
        by_row = torch.nn.functional.gelu(x + bias.repeat(math.ceil(rows / cols))[:rows, None]) if cols != rows else None
        if by_row is not None and torch.allclose(got, by_row, atol=1e-4):
            fail(f"{label}: the bias was indexed by row. bias has one value per column.")
        if torch.allclose(got, torch.nn.functional.gelu(x), atol=1e-4):
            fail(f"{label}: out is gelu(x): the bias was never added.")
        if torch.allclose(got, x + bias, atol=1e-4):
            fail(f"{label}: out is x + bias: GELU was never applied.")
        err = float((got - want).abs().max())
        if err > 1e-4:
            approx = torch.nn.functional.gelu(x + bias, approximate="tanh")
            hint = (" Close to GELU, not GELU: an approximation (tanh or sigmoid form). The check wants the exact "
                    "form, 0.5 · y · (1 + erf(y / √2)); tl.erf exists (tl has no tanh)."
                    if err < 0.05 or torch.allclose(got, approx, atol=1e-3) else
                    " GELU(y) = 0.5 · y · (1 + erf(y / √2)) with y = x + bias.")
            fail(f"{label}: out differs from gelu(x + bias).{hint}")
        counts = run["counts"]
        if counts.get("stored_bytes") != 4 * n:
            fail(f"{label}: the counter saw more bytes stored than the output holds. A fused kernel writes its output "
                 "once and keeps the intermediate x + bias in registers; storing it (and loading it back) is the "
                 "unfused chain's traffic inside one kernel.")
        if counts.get("unique_loaded_bytes") != 4 * (n + cols):
            fail(f"{label}: the kernel read other bytes than x's elements and the bias, each once. Did it load "
                 "something it does not use?")


check_bias_gelu = Check("bias_gelu_kernel", _observe_bias_gelu, _judge_bias_gelu)


def _observe_bias_gelu_on(kernel: Any, rows: int, cols: int, block: int) -> dict:
    return _observe_bias_gelu(kernel, [(rows, cols, block, True)])


def _judge_bias_gelu_on(observation: dict, rows: int, cols: int, block: int, why: str) -> None:
    try:
        _judge_bias_gelu(observation, [(rows, cols, block, True)])
    except CheckFailed as exc:
        fail(f"{why}: {exc}")


bias_gelu_on = Check("bias_gelu_kernel on another shape", _observe_bias_gelu_on, _judge_bias_gelu_on,
                     inputs=("rows", "cols", "block"), announce=False)
bias_gelu_on.__doc__ = "Hidden test: bias_gelu_kernel on a strided (rows, cols) view of 3·randn with this BLOCK."


# --- exercise 3: row softmax ------------------------------------------------------------------------

# (label, rows, cols, scale, shift, strided, BLOCK, rise): normal rows; rows x50; rows near -200; a strided view of a
# wider tensor; rows that fit one block and rows longer than one (walked BLOCK columns at a time); rows whose columns
# after the first block are `rise` higher, so the row's max is in a later block and e^(x − the first block's max)
# overflows float32 there (a kernel that subtracts one block's max passes every other case)
_SOFTMAX_CASES = [("normal rows", 6, 37, 1.0, 0.0, False, 64, 0.0),
                  ("normal rows, a strided view, longer than a block", 5, 37, 1.0, 0.0, True, 16, 0.0),
                  ("rows × 50, longer than a block", 4, 37, 50.0, 0.0, False, 16, 0.0),
                  ("rows near −200, a strided view, longer than a block", 4, 37, 1.0, -200.0, True, 16, 0.0),
                  ("rows × 50 in one block", 3, 40, 50.0, 0.0, False, 64, 0.0),
                  ("rows of 64, exactly two blocks", 3, 64, 1.0, 0.0, False, 32, 0.0),
                  ("rows of a vocabulary's length, a strided view", 2, 3000, 1.0, 0.0, True, 256, 0.0),
                  ("rows near 0 in their first block and near +100 after it", 3, 40, 1.0, 0.0, False, 16, 100.0)]


def _softmax_input(rows: int, cols: int, scale: float, shift: float, strided: bool, rise: float = 0.0,
                   after: int = 0) -> torch.Tensor:
    """randn × scale + shift, its columns from `after` on raised by `rise`; strided: a view of a wider tensor."""
    g = _gen(rows * 100 + cols + int(scale))
    wide = torch.randn(rows, cols + 13, generator=g) * scale + shift
    wide[:, (5 if strided else 0) + after:] += rise
    return wide[:, 5:5 + cols] if strided else wide[:, :cols].contiguous()


def _observe_softmax(kernel: Any, cases: list | None = None) -> dict:
    runs = []
    for _, rows, cols, scale, shift, strided, block, rise in cases or _SOFTMAX_CASES:
        x = _softmax_input(rows, cols, scale, shift, strided, rise, block)
        out = torch.full((rows, cols), NAN)
        runs.append(_launch(kernel, "softmax_kernel", (rows,), (x, out, cols, x.stride(0), out.stride(0)),
                            {"BLOCK": block}, {"out": out}, block=block))
    return {"runs": runs}


def _softmax_zero_padded(x: torch.Tensor, block: int) -> torch.Tensor:
    """What a kernel computes when masked lanes load 0: the zeros of the last block join the max and the sum."""
    pad = -(-x.shape[1] // block) * block - x.shape[1]
    padded = torch.cat([x, torch.zeros(x.shape[0], pad)], dim=1)
    return torch.softmax(padded, dim=1)[:, :x.shape[1]]


def _softmax_by_block(x: torch.Tensor, block: int) -> torch.Tensor:
    """What a kernel computes when it normalises each block of a row on its own."""
    return torch.cat([torch.softmax(x[:, j:j + block], dim=1) for j in range(0, x.shape[1], block)], dim=1)


def _judge_softmax(observation: dict, cases: list | None = None) -> None:
    cases = cases or _SOFTMAX_CASES
    runs = observation.get("runs")
    if not isinstance(runs, list) or len(runs) != len(cases):
        fail("the check could not read what your kernel did")
    results = []
    for (label, rows, cols, scale, shift, strided, block, rise), run in zip(cases, runs):
        text = (f"softmax_kernel on {label} ({rows}×{cols}{', row stride ' + str(cols + 13) if strided else ''}, "
                f"BLOCK {block})")
        _launch_failed(run, text)
        got = _out(run, "out", (rows, cols), text)
        if run["counts"].get("wider_than_block") is not False:
            fail(f"{text}: one tl.load or tl.store of your kernel worked on more lanes at once than BLOCK. "
                 "BLOCK is how many columns a program holds at a time (on a GPU, what fits its registers); a block "
                 "of another width, fixed in the kernel, fits some rows and not others, and no row is too long for "
                 "a kernel that keeps to BLOCK.")
        x = _softmax_input(rows, cols, scale, shift, strided, rise, block)
        results.append((got, x, text, strided, block, shift, run["counts"]))
    right = [bool(torch.allclose(got, torch.softmax(x, dim=1), atol=1e-5)) for got, x, *_ in results]
    for ok, (got, x, text, strided, block, shift, counts) in zip(right, results):
        if ok:
            continue
        want = torch.softmax(x, dim=1)
        if counts.get("stored_bytes", 0) < 4 * x.numel() or counts.get("overwritten", 0):
            longer = x.shape[1] > block
            fail(f"{text}: {_unwritten(got) or 'some elements were not written by their own row'}"
                 f"{' (and programs stored over each other)' if counts.get('overwritten') else ''}. One program per "
                 "row stores all n_cols of its results at its own row of out, masked"
                 + (": this row is longer than BLOCK, so the program must go on past its first block." if longer
                    else "."))
        if strided and _rows_as_if_contiguous(got, x):
            fail(f"{text}: wrong rows. This x is a view of a wider tensor, so its rows are x_row_stride elements apart, "
                 "not n_cols. (Right on contiguous rows, wrong here.)")
        if torch.allclose(got, _softmax_zero_padded(x, block), atol=1e-5):
            fail(f"{text}: the lanes past n_cols were loaded as 0, and a 0 joins the row's max and sum (e^(0 − max) "
                 "for every masked lane). A masked lane must hold a value that changes neither the max nor the sum.")
        if x.shape[1] > block and torch.allclose(got, _softmax_by_block(x, block), atol=1e-5):
            fail(f"{text}: each block of the row was normalised on its own, so each block sums to 1. The sum runs over "
                 "the whole row: it must be complete before any value of the row is written.")
        if not torch.isfinite(got).all():
            low_right = any(r for r, (_, _, _, _, blk, sh, _) in zip(right, results) if sh < -100 and blk < 37)
            if low_right and x.shape[1] > block:
                fail(f"{text}: the output holds inf or NaN, though rows near −200 came out right: you subtract a max, "
                     "but not the whole row's (one block's?). A value above the number you subtract overflows e^x "
                     "(float32 above x ≈ 88.7). The max must be over the whole row before any exponent is taken.")
            fail(f"{text}: the output holds inf or NaN. e^x overflows float32 above x ≈ 88.7 (rows × 50) and "
                 "underflows to 0 below about −103 (rows near −200), so the sum is inf or 0 and the division NaN. "
                 "Section 3: softmax does not change when one number is subtracted from every element of a row; "
                 "which number keeps every exponent in range?")
        fail(f"{text}: out differs from torch.softmax(x, dim=1). Every value of a row is divided by one sum over the "
             "whole row, of exponents all taken relative to the same number.")


def _rows_as_if_contiguous(got: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether `got` is the softmax of rows read n_cols apart from x's first element (the stride taken as n_cols)."""
    flat = x.as_strided((x.numel(),), (1,), x.storage_offset())
    return torch.allclose(got, torch.softmax(flat.view_as(x), 1), atol=1e-5)


check_softmax = Check("softmax_kernel", _observe_softmax, _judge_softmax)


def _observe_softmax_on(kernel: Any, rows: int, cols: int, scale: float, shift: float, block: int = 32,
                        rise: float = 0.0) -> dict:
    return _observe_softmax(kernel, [("the hidden test's rows", rows, cols, scale, shift, True, block, rise)])


def _judge_softmax_on(observation: dict, rows: int, cols: int, scale: float, shift: float, why: str,
                      block: int = 32, rise: float = 0.0) -> None:
    try:
        _judge_softmax(observation, [("the hidden test's rows", rows, cols, scale, shift, True, block, rise)])
    except CheckFailed as exc:
        fail(f"{why}: {exc}")


softmax_on = Check("softmax_kernel on other rows", _observe_softmax_on, _judge_softmax_on,
                   inputs=("rows", "cols", "scale", "shift", "block", "rise"), announce=False)
softmax_on.__doc__ = ("Hidden test: softmax_kernel on a strided rows × cols input of randn × scale + shift (the columns "
                      "after the first BLOCK raised by rise), in BLOCK columns.")


# --- exercise 4: tile traffic and the best tiles under an on-chip budget -----------------------------

# (M, N, K, BM, BN, BK, dtype_bytes); the last is a ~16384³ matmul, far past what the interpreter can run: counted.
# Ragged (M, N, K multiples of no block): one program measured times the grid is not its traffic (a copy test measured
# an evenly tiled 16384³ that way)
_TILE_CASES = [(256, 256, 256, 64, 64, 32, 2), (256, 256, 256, 64, 64, 64, 2), (1000, 300, 130, 128, 64, 32, 4),
               (64, 64, 64, 64, 64, 64, 4), (512, 128, 1024, 32, 128, 16, 2), (16385, 16383, 16389, 128, 128, 64, 2)]


def _hints_tile_traffic(fn: Replay) -> None:
    """An unknown answer that changes when only the step along K changes (the first two cases differ in BK alone)."""
    if not close(float(call(fn, *_TILE_CASES[0])), float(call(fn, *_TILE_CASES[1]))):
        fail("tile_traffic changed when only BK changed. BK only cuts what a program reads into steps along K: "
             "does the step change how much the program reads in all?")


check_tile_traffic = _bytes_check(
    "tile_traffic", _TILE_CASES, "a number of bytes", False, _hints_tile_traffic,
    unknown="tile_traffic is not the bytes the programs request, nor a mistake the course knows. Each program "
            "computes one tile of C: which rows of A and columns of B does it need, how many programs are there "
            "(tiles at the edge of C included), and what does each write, and when?",
    earlier=triton_counter.launched_labels("matmul", "matmul_kernel"))

_SIZES = (16, 32, 64, 128, 256)
_REGS = 65536 * 4  # bytes: the register file of an A100's or H100's SM (data/sm.csv)
# (M, N, K, BK, dtype_bytes, smem_bytes, regs_bytes, num_stages, sizes): what each case tells apart is written beside
# the instructor's judge (solutions/judges/lesson08.py), not here: it names the tiles that fit.
_BEST_CASES = [(4096, 4096, 4096, 64, 2, 233472, _REGS, 4, _SIZES), (4096, 4096, 4096, 64, 2, 233472, _REGS, 1, _SIZES),
               (8192, 1024, 4096, 32, 4, 167936, _REGS, 3, _SIZES), (512, 512, 512, 64, 2, 49152, _REGS, 2, _SIZES),
               (8192, 64, 1024, 64, 2, 233472, _REGS, 3, _SIZES), (512, 512, 512, 64, 2, 49152, _REGS, 4, _SIZES),
               (4096, 4096, 4096, 64, 2, 233472, _REGS, 3, _SIZES), (4096, 4096, 4096, 32, 1, 233472, 131072, 2, _SIZES),
               (4096, 4096, 4096, 32, 2, 233472, 65536, 2, _SIZES), (4096, 4096, 4096, 64, 2, 233472, 196608, 3, _SIZES)]


# best_tiles' answer and the on-chip budget that decides it are the instructor's (solutions/judges/lesson08.py): the
# package holds neither (a copy test passed best_tiles with the budget functions it found here).
def _best_label(k: int) -> str:
    """A case named without its numbers (they are also tile sizes a message must not hand over)."""
    return (f"the check's case {k + 1} of {len(_BEST_CASES)} (its arguments, in order: "
            f"lesson08.BEST_TILES_CASES[{k}])")


def _public_best_tiles(fn: Replay) -> None:
    """What can be said of best_tiles without its answer: two whole tile sizes for every case."""
    for k, case in enumerate(_BEST_CASES):
        value = call(fn, *case)
        if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value)):
            fail(f"best_tiles on {_best_label(k)} returned {quote(value)}; return (BM, BN), two tile sizes from `sizes`.")


def _hints_best_tiles(fn: Replay) -> None:
    """An unknown answer whose tile is not from `sizes`."""
    for k, case in enumerate(_BEST_CASES):
        sizes = case[-1]
        mine = tuple(call(fn, *case))
        if not all(v in sizes for v in mine):
            fail(f"best_tiles on {_best_label(k)} returned a tile size that is not in `sizes`: pick BM and BN from it.")


check_best_tiles = Keyed(
    LESSON, "best_tiles", "best_tiles", _BEST_CASES, public=_public_best_tiles, hints=_hints_best_tiles,
    unknown="best_tiles picked another tile than the course's on at least one case, and not by a mistake the course "
            "knows. Go back to section 4: what each of the two on-chip budgets holds, and in what precision, for "
            "every tile you consider, and what a bigger tile buys.")
BEST_TILES_CASES = _BEST_CASES  # what best_tiles' messages point to: (M, N, K, BK, dtype_bytes, smem, regs, stages, sizes)


# --- exercise 4: predict the best tile of an fp16 8192³ matmul on an H100 ----------------------------

TILE_CHIP, TILE_SIZES = "NVIDIA H100 SXM5 80GB", (16, 32, 64, 128, 256, 512)
_LIMITS = ("shared memory", "registers", "nothing")
_TILE_WORDS = tuple(f"{bm}x{bn}" for bm in TILE_SIZES[2:] for bn in TILE_SIZES[2:])  # "64x64" .. "512x512"
_TILE_CASE = (8192, 64, 2, 3)  # M = N = K, BK, dtype_bytes, num_stages

# TILE_PREDICTION's model, worked out by the instructor's judge (solutions/judges/lesson08.py, tile_model_keys) from
# data/sm.csv's H100 and kept as digests, sealed (grader.checks._keys.digest): the tiles as good as the best, the tiles
# that fit on chip, and what stops 256 × 256. tests/test_lesson08_content.py checks them against the judge.


@course_only()
@sealed(LESSON, "TILE_PREDICTION")
def _tile_keys() -> dict:
    """TILE_PREDICTION's model as digests (sealed; see above)."""


@course_only()
def _tile_key(word: str) -> str:
    """A TILE_PREDICTION word's digest (matched against _tile_keys(), it answers the prediction: watched)."""
    return digest(LESSON, "TILE_PREDICTION", word)


@course_only()
@sealed(LESSON, "TILE_PREDICTION")
def _tile_model() -> tuple[tuple[str, ...], str]:
    """Part of TILE_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "TILE_PREDICTION")
def _tile_said(answer: dict) -> list[str]:
    """Part of TILE_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "TILE_PREDICTION")
def _tile_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of TILE_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "TILE_PREDICTION")
def _tile_model_said(context: dict) -> str:
    """Part of TILE_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


def _explorer() -> Callable:
    """The lesson's tile explorer (grader.widgets.tile_explorer): it shows whether a tile fits a chip's shared memory and
    registers, so opened before the first guess it answers TILE_PREDICTION."""
    from grader import widgets

    return widgets.tile_explorer


check_tile_prediction = Prediction(LESSON, "TILE_PREDICTION", {"tile": _TILE_WORDS, "256x256": _LIMITS},
                                   points=1, band=_tile_band, model=_tile_model_said,
                                   mistakes=lambda answer, context: "; ".join(_tile_said(answer)) or None,
                                   watch=(_tile_model, _tile_said, _tile_key, _explorer()))


# --- exercise 5: blocked attention with the online softmax -------------------------------------------

# (label, s, d, block, kind): kind picks the scores: random; very negative; high in the first block, then falling
_ATTN_CASES = [("random scores", 64, 16, 16, "random"), ("random scores, a ragged last block", 50, 8, 16, "random"),
               ("very negative scores", 48, 8, 16, "negative"), ("scores falling block by block", 48, 8, 16, "falling"),
               ("a long sequence", 1200, 8, 128, "random")]
# Python's own allocations while a learner's function runs (torch's wrappers, a first call's imports) can reach a
# few hundred KB: memory made outside torch is judged only where the s x s scores in float32 are past this.
_OUTSIDE_FLOOR = 4 * 2**20


def attention_inputs(s: int, d: int, kind: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of shape (s, d) whose scores q·kᵀ/√d are random, all very negative, or fall by ~200 after block 1."""
    g = _gen(seed * 1000 + s * 10 + d)
    q, k, v = (torch.randn(s, d, generator=g) for _ in range(3))
    if kind == "negative":
        q = q.abs() + 1.0
        k = -(k.abs() + 1.0) * 40.0
    elif kind == "falling":
        q = q.abs() + 1.0
        k = k.abs() + 1.0
        k[16:] *= -30.0  # keys after the first block score far below the first block's
    return q, k, v


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: bool = True) -> torch.Tensor:
    """softmax(q kᵀ / √d) v, in float64 (the judge's answer)."""
    scores = q.double() @ k.double().T / (math.sqrt(q.shape[1]) if scale else 1.0)
    return (torch.softmax(scores, dim=1) @ v.double()).float()


def _no_rescale(q, k, v, block):
    """The online softmax without the rescale: blocks summed as if each block's max were the final one."""
    s, d = q.shape
    m = torch.full((s, 1), -math.inf, dtype=torch.float64)
    acc, l = torch.zeros(s, d, dtype=torch.float64), torch.zeros(s, 1, dtype=torch.float64)
    for j in range(0, k.shape[0], block):
        sc = q.double() @ k[j:j + block].double().T / math.sqrt(d)
        m = torch.maximum(m, sc.max(1, keepdim=True).values)
        p = torch.exp(sc - m)
        l = l + p.sum(1, keepdim=True)
        acc = acc + p @ v[j:j + block].double()
    return (acc / l).float()


class _Largest(TorchDispatchMode):
    """Notes the largest tensor any torch operation makes (in elements), and how many operations ran.

    At the dispatcher, below torch functions: torch._C.DisableTorchFunction does not hide a tensor from it (a copy
    test hid the s x s scores of its attention_blocked from a TorchFunctionMode that way), and a fused library call
    is seen as the operations it runs here."""

    def __init__(self, keys: tuple = (), rows: int = 0):
        super().__init__()
        self.largest, self.ops = 0, 0
        # the storages of k and v (and of copies made of them): an operation that computes with more than `rows`
        # of their rows at once took the keys whole, not a block at a time
        self.rows = rows
        self.tracked = {t.untyped_storage().data_ptr(): t.shape[-1] for t in keys if t.numel()}  # storage: row width
        self.alive: list = []  # the copies followed, held until the run ends: a freed copy's memory, reused by another
        # tensor (the next block's scores), would make that tensor look like k
        self.whole = None  # the first such operation's name

    def _from_keys(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.numel() > 0 and t.untyped_storage().data_ptr() in self.tracked

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No torch.compile runs in a check: left True, torch wraps __torch_dispatch__ to skip Dynamo, and the first
        call imports torch._dynamo (3 s on a laptop, in a check that otherwise takes a fraction of one)."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        for t in outs:
            self.largest = max(self.largest, t.numel())
        if self.tracked:
            inputs = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if self._from_keys(t)]
            if inputs and func.overloadpacket.__name__ in _SHAPE_ONLY:  # reads k's shape, not its values
                pass
            elif inputs and not any(self._from_keys(t) for t in outs):  # a view of k or v computes nothing
                width = self.tracked[inputs[0].untyped_storage().data_ptr()]
                if func.overloadpacket.__name__ in _MOVES:  # a copy of them is them: follow it
                    self.tracked.update({t.untyped_storage().data_ptr(): width for t in outs if t.numel()})
                    self.alive.extend(outs)
                elif self.whole is None and any(t.numel() > self.rows * self.tracked[t.untyped_storage().data_ptr()]
                                                for t in inputs):
                    self.whole = func.overloadpacket.__name__
        return out


class _LeavesTorch(TorchFunctionMode):
    """Notes the first Tensor method that hands a tensor's values out of torch (Tensor.numpy, .tolist, numpy's
    __array__). The dispatch watch above sees only torch's operations: a copy of the tester's attention_blocked took
    k and v into numpy and walked them one query row at a time, where neither watch nor tracemalloc's floor saw it."""

    _OUT = {"numpy": "Tensor.numpy", "tolist": "Tensor.tolist", "__array__": "numpy's asarray (Tensor.__array__)"}

    def __init__(self):
        super().__init__()
        self.left = None  # the first such method's name

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = self._OUT.get(getattr(func, "__name__", ""))
        if name and self.left is None:
            self.left = name
        return func(*args, **(kwargs or {}))


# operations that copy or convert the values of k and v: their outputs are followed as k and v themselves (a view
# shares their storage, so it is k or v already and never reaches this list)
_MOVES = {"_to_copy", "clone", "copy_", "contiguous", "index", "index_select", "gather", "cat", "stack",
          "constant_pad_nd", "lift_fresh"}
# operations that read only the shape, dtype and device of k or v (an accumulator made like v)
_SHAPE_ONLY = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "new_empty",
               "new_zeros", "new_ones", "new_full", "empty_strided", "zero_", "fill_"}


def _observe_attention(fn: Callable, cases: list | None = None) -> dict:
    cases = cases or _ATTN_CASES
    runs = []
    for label, s, d, block, kind in cases:
        q, k, v = attention_inputs(s, d, kind)
        mode, leaves = _Largest((k, v), block), _LeavesTorch()
        tracing = tracemalloc.is_tracing()  # a learner's cell may trace already: then only its peak is reset
        if not tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        try:
            with mode, leaves:
                got = call(fn, q, k, v, block, label=f"attention_blocked(q, k, v, block={block}) on {label}")
        finally:
            # switched off inside the function: what it allocated outside torch is unknown, so taken as unbounded
            outside = tracemalloc.get_traced_memory()[1] - before if tracemalloc.is_tracing() else None
            if not tracing:
                tracemalloc.stop()
        pair = isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)
        shown = f"one tensor of shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else quote(got)
        runs.append({"out": got[0] if pair else shown, "lse": got[1] if pair else None,
                     "largest": mode.largest, "ops": mode.ops, "outside": outside, "whole": mode.whole,
                     "left": leaves.left})
        if leaves.left or (s > block and (mode.whole or mode.largest >= s * s)):
            # the judge fails on this case whatever the output (right: the keys were not taken a block at a time, or
            # left torch; wrong: wrong), so the cases after it, the 1200-token one among them, are not run: a row-at-a-time
            # function took 20 s there under the watch, in each test of its mutant
            runs += [{"out": "not run (an earlier case failed)", "lse": None}] * (len(cases) - len(runs))
            break
    return {"runs": runs}


def _judge_attention(observation: dict, cases: list | None = None) -> None:
    cases = cases or _ATTN_CASES
    runs = observation.get("runs")
    if not isinstance(runs, list) or len(runs) != len(cases):
        fail("the check could not read what your function did")
    for (label, s, d, block, kind), run in zip(cases, runs):
        text = f"attention_blocked on {label} (s={s}, d={d}, block={block})"
        got = run.get("out") if isinstance(run, dict) else None
        lse = run.get("lse") if isinstance(run, dict) else None
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (s, d):
            shown = got if isinstance(got, str) else f"an out of shape {tuple(got.shape)}" if isinstance(
                got, torch.Tensor) else quote(got)
            fail(f"{text} returned {shown}; return (out, lse): the (s, d) output and the (s,) log-sum-exp of each "
                 "row's scores.")
        if not isinstance(lse, torch.Tensor) or lse.numel() != s:
            fail(f"{text} returned {quote(lse)} as lse; return (out, lse) with lse a tensor of s values, one per "
                 "query row.")
        q, k, v = attention_inputs(s, d, kind)
        want = reference_attention(q, k, v)
        if torch.allclose(got.float(), want, atol=1e-4, rtol=1e-4):
            if run.get("left"):
                fail(f"{text}: right, but your attention_blocked takes the tensors out of torch ({run['left']}): the "
                     "check measures the memory torch holds, so it cannot tell whether the scores were made a block at "
                     "a time. Write it with torch.")
            if not run.get("ops"):
                fail(f"{text}: right, but the check saw no torch operation run: it cannot tell whether the {s}×{s} "
                     "scores were made. Compute it with torch on the tensors you are given, in plain code the check "
                     "can watch.")
            if run.get("largest", 0) >= s * s and s > block:
                fail(f"{text}: right, but a tensor of {run['largest']} elements was made: the {s}×{s} scores. The "
                     f"point of the online softmax is to need only a {s}×{block} block of scores at a time.")
            if run.get("whole") and s > block:
                fail(f"{text}: right, but one operation ({run['whole']}) computed with more than {block} rows of k or "
                     f"v at once: keys and values are taken {block} rows at a time, and each block is folded into "
                     "what the rows have summed so far.")
            if s * s * 4 >= _OUTSIDE_FLOOR and s > block:
                outside = run.get("outside")
                if outside is None:
                    fail(f"{text}: right, but tracemalloc was stopped while your function ran, so the check cannot "
                         f"tell whether the {s}×{s} scores were made outside torch. Leave it running.")
                if outside >= s * s * 4:
                    fail(f"{text}: right, but {outside / 2**20:.0f} MiB were allocated outside torch while it ran "
                         f"(numpy arrays or Python lists): room for the {s}×{s} scores. The online softmax needs only "
                         f"a {s}×{block} block of scores at a time, in torch or anywhere else.")
            _judge_lse(text, lse.reshape(s).double(), q, k)
            continue
        if not torch.isfinite(got).all():
            if kind == "negative":
                fail(f"{text}: the output holds NaN or inf. With every score far below 0, a running max that starts "
                     "at 0 makes e^(score − 0) underflow to 0 for every key, so l = 0 and acc / l = 0/0. A running max "
                     "must start below any score it could meet.")
            if kind == "falling":
                fail(f"{text}: the output holds NaN or inf. The first block's scores are far above the later ones: "
                     "taking each block's own max as the new max makes exp(m_old − m_new) = e^(+200), which "
                     "overflows. The running max never falls: it is the max of every score seen so far.")
            fail(f"{text}: the output holds NaN or inf.")
        if torch.allclose(got.float(), reference_attention(q, k, v, scale=False), atol=1e-4, rtol=1e-4):
            fail(f"{text}: this is softmax(q kᵀ) v: the scores were not divided by √d (= {math.sqrt(d):.3g}).")
        if torch.allclose(got.float(), _no_rescale(q, k, v, block), atol=1e-4, rtol=1e-4):
            fail(f"{text}: when a block raises the running max, what was summed before is relative to the old max, "
                 "in the running sum and in the accumulator alike: bring both to the new max before adding the new "
                 "block.")
        fail(f"{text}: differs from softmax(q kᵀ/√d) v by up to {float((got.float() - want).abs().max()):.3g}. "
             "Every block's exponentials must be taken against one and the same maximum by the time they are added "
             "together, and each row is divided by the sum of all of its exponentials, over every block: which of "
             "your running quantities still refer to an older maximum, and when does the division happen?")


def _judge_lse(text: str, lse: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> None:
    """The log-sum-exp of each row's scores, log Σ_j e^(q_i·k_j / √d), against what the usual mistakes give."""
    scores = q.double() @ k.double().T / math.sqrt(q.shape[1])
    want, top = torch.logsumexp(scores, dim=1), scores.max(dim=1).values

    def near(x: torch.Tensor) -> bool:
        return bool(torch.allclose(lse, x, rtol=1e-5, atol=1e-3))

    if near(want):
        return
    if not torch.isfinite(lse).all():
        fail(f"{text}: the output is right, but lse holds inf or NaN. The sum inside the log is taken of numbers far "
             "outside float32's range here: what do your running quantities hold that stays in range?")
    if near(want - top):
        fail(f"{text}: the output is right, but lse is off by each row's max score. What exactly is your running sum "
             "a sum of?")
    if near(top):
        fail(f"{text}: the output is right, but lse is each row's max score: the max alone leaves out every other "
             "term of the sum.")
    if near(torch.exp(want)) or near(torch.exp(want - top)):
        fail(f"{text}: the output is right, but lse is not a logarithm: it is the sum itself, which overflows or "
             "underflows float32 for scores like these.")
    fail(f"{text}: the output is right, but lse is not log Σ_j e^(score_ij) of each row. What do the running max and "
         "the running sum say about that sum, once every block has been seen?")


check_attention_blocked = guard(Check("attention_blocked", _observe_attention, _judge_attention), "attention_blocked",
                                {reference_attention: "grader.checks.lesson08.reference_attention",
                                 **_instruments("flash_attention_kernel")},
                                earlier=triton_counter.launched_labels("flash_attention", "flash_attention_kernel"))


def _observe_attention_on(fn: Callable, s: int, d: int, block: int, seed: int) -> dict:
    return _observe_attention(fn, [("the hidden test's q, k, v", s, d, block, "random")])


def _judge_attention_on(observation: dict, s: int, d: int, block: int, seed: int, why: str) -> None:
    try:
        _judge_attention(observation, [("the hidden test's q, k, v", s, d, block, "random")])
    except CheckFailed as exc:
        fail(f"{why}: {exc}")


attention_on = Check("attention_blocked on other sizes", _observe_attention_on, _judge_attention_on,
                     inputs=("s", "d", "block", "seed"), announce=False)
attention_on.__doc__ = "Hidden test: attention_blocked on random (s, d) inputs with this block."


# --- exercise 6: FlashAttention's traffic ---------------------------------------------------------------

# (s, d, block_m, block_n, dtype_bytes); the last, s ≈ 64k, is far past what the interpreter can run: counted. s is a
# multiple of neither block (a copy test measured an evenly tiled s = 65536 as one program times the grid)
_FLASH_CASES = [(1024, 64, 128, 64, 2), (4096, 128, 64, 128, 2), (100, 16, 32, 16, 4), (256, 32, 256, 32, 4),
                (65541, 128, 128, 64, 2)]


def _hints_flash_traffic(fn: Replay) -> None:
    """An unknown answer that loads less than the inputs hold."""
    for s, d, bm, bn, b in _FLASH_CASES:
        if float(call(fn, s, d, bm, bn, b)[0]) < 3 * b * s * d:
            fail(f"flash_traffic(s={s}, d={d}, block_m={bm}, block_n={bn}, dtype_bytes={b}): fewer bytes loaded than "
                 "Q, K and V hold. Every element of each input is read at least once.")


check_flash_traffic = _bytes_check(
    "flash_traffic", _FLASH_CASES, "(load_bytes, store_bytes)", True, _hints_flash_traffic,
    unknown="flash_traffic is not what the course's attention kernel requests, nor a mistake the course knows. Read "
            "the kernel: which tensor each tl.load reads, inside which loop, and how many programs run it; and what "
            "its tl.store writes, and how often.",
    earlier=triton_counter.launched_labels("flash_attention", "flash_attention_kernel"))

# tile_traffic and best_tiles, once they pass, answer TILE_PREDICTION (copy test r23 wrote exercise 4 first and read
# the tile off its own best_tiles): passing either before the first guess counts as asking for the answer.
answered_by(check_tile_prediction, check_best_tiles, check_tile_traffic)

__all__ = ["check_add", "check_fusion_bytes", "check_bias_gelu", "bias_gelu_on", "check_softmax", "softmax_on", "check_tile_traffic",
           "check_best_tiles", "check_tile_prediction", "check_attention_blocked", "attention_on", "check_flash_traffic", "expect", "Raised"]
