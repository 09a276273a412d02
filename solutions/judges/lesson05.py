"""The instructor's judges of lesson 05's keyed checks (busy_fraction, top_ops, idle_by_cause, diagnose, mfu): they
hold the answers, so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson05.py) and keeps
only digests and messages in grader/checks/keys/05_reading_the_machine.json; the learner's checks
(grader/checks/lesson05.py) judge by those. A message names the kind of mistake and the principle, never the
expected value nor the formula. The cases stay in the package: they are inputs, not answers.
"""

from __future__ import annotations

import math
from typing import Callable

from grader.checks._common import call, close, fail, is_number
from grader.checks.lesson05 import (_ADAM, _B_CLIP, _B_EMPTY, _B_NESTED, _B_OUTSIDE, _B_OVERLAP, _B_SIMPLE, _B_SPAN,
                                    _BUSY_CASES, _GEMM, _SOFTMAX, _TOP_CASES, CPU_ROWS, CUDA_ROWS)

# --- busy_fraction -----------------------------------------------------------------------------------


def _busy_reference(intervals, start: float, end: float) -> float:
    """The share of [start, end] covered by at least one interval."""
    busy, reached = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reached), min(b, end)
        if b > a:
            busy, reached = busy + b - a, b
    return busy / (end - start)


def _busy_fraction(busy_fraction: Callable) -> None:
    """busy_fraction: the share of [start, end] covered by at least one interval."""
    got = {i: call(busy_fraction, *case) for i, case in enumerate(_BUSY_CASES)}
    for i, value in got.items():
        if not is_number(value):
            fail(f"busy_fraction{_BUSY_CASES[i]} returned {value!r} ({type(value).__name__}); return a float from 0 to 1.")
    simple, overlap, clip, span, outside, empty, nested = (float(got[i]) for i in range(len(_BUSY_CASES)))
    if close(simple, 50.0):
        fail(f"busy_fraction{_B_SIMPLE} returned {simple!r}: a share is a fraction from 0 to 1, not a percent.")
    if overlap > 1.0 or close(overlap, 1.75) or close(nested, 1.1):
        fail(f"busy_fraction{_B_OVERLAP} returned {overlap!r}, more than the whole window: you summed intervals that "
             "overlap. Kernels on two streams run at the same time, and a moment when two run counts once: "
             "utilisation is the share of the window in which at least one kernel ran.")
    if close(clip, 1.0) or close(outside, 0.275):
        fail(f"busy_fraction{_B_CLIP} returned {clip!r}: the intervals were not clipped to the window. A kernel that "
             "started before the window opened, or ran on after it closed, was busy inside the window only for the "
             "part between start and end.")
    if close(span, 2 / 3) or close(simple, 2 / 3):
        fail(f"busy_fraction{_B_SPAN} returned {span!r}: you divided by the intervals' span (first start to last end), "
             "not by the window. Idle time before the first kernel and after the last is idle time too.")
    for value, case in ((simple, _B_SIMPLE), (overlap, _B_OVERLAP), (clip, _B_CLIP), (span, _B_SPAN),
                        (outside, _B_OUTSIDE), (empty, _B_EMPTY), (nested, _B_NESTED)):
        if not math.isclose(value, _busy_reference(*case), rel_tol=1e-9, abs_tol=1e-12):
            fail(f"busy_fraction{case} returned {value!r}: not the share of the window in which at least one interval "
                 "ran. Walk the window from start to end: each moment is busy or not, whatever the number of kernels "
                 "running then and whichever order the intervals came in.")


# --- top_ops -----------------------------------------------------------------------------------------


def _top_reference(rows: list[dict], n: int) -> list[str]:
    """The answer: host operator rows (no labels, kernels or runtime calls) by self time, each once."""
    from grader.profiling import is_runtime_call

    ops = [r for r in rows if not r["is_label"] and r.get("device_type", "CPU") == "CPU" and not is_runtime_call(r)]
    return [r["name"] for r in sorted(ops, key=lambda r: -r["self_us"])[:n]]


def _top_ops(top_ops: Callable) -> None:
    """top_ops: the n operators with the most self time, most first, each operator once (no labels, no kernel rows)."""
    got = call(top_ops, CPU_ROWS, 3)
    if not isinstance(got, (list, tuple)) or not all(isinstance(name, str) for name in got):
        fail(f"top_ops(rows, 3) returned {got!r}; return a list of the op names (strings).")
    got = list(got)
    ops = [r for r in CPU_ROWS if not r["is_label"]]

    def names(rows: list[dict], key: str, most_first: bool = True) -> list[str]:
        return [r["name"] for r in sorted(rows, key=lambda r: r[key], reverse=most_first)[:3]]

    if got in (names(ops, "total_us"), names(CPU_ROWS, "total_us")):
        fail(f"top_ops(rows, 3) returned {got}: sorted by total time. A range's total includes everything under it "
             "(the backward pass's entry contains every op it ran): it counts the same time again at every level.")
    if got in (names(ops, "self_us", False), names(CPU_ROWS, "self_us", False)):
        fail(f"top_ops(rows, 3) returned {got}: the operators that cost least come first. Most time first.")
    if "ProfilerStep*" in got or "backward" in got:
        which = ", ".join(name for name in ("ProfilerStep*", "backward") if name in got)
        fail(f"top_ops(rows, 3) returned {got}, which holds labels ({which}). A label is a range someone named "
             "(record_function, the schedule's ProfilerStep#): it is not an operator you could make faster.")
    if got == names(ops, "calls"):
        fail(f"top_ops(rows, 3) returned {got}: sorted by number of calls. Many cheap calls are not where the time "
             "goes.")
    for case in _TOP_CASES[:5]:
        mine = call(top_ops, *case)
        if not isinstance(mine, (list, tuple)) or list(mine) != _top_reference(*case):
            fail(f"top_ops(a CPU profile's rows, {case[1]}) returned {mine!r}: not the operators that cost the most "
                 "time themselves, most first"
                 + (" (n = 0 asks for none)" if case[1] == 0 else " (with fewer operators than n, all of them)"
                    if case[1] > 6 else " (the rows may come in any order)" if case[0] is not CPU_ROWS else "") + ".")
    cuda = call(top_ops, CUDA_ROWS, 4)
    if not isinstance(cuda, (list, tuple)) or not all(isinstance(name, str) for name in cuda):
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda!r}; return a list of the op names (strings).")
    cuda = list(cuda)
    labels = [name for name in cuda if name in ("ProfilerStep*", "forward")]
    if labels:
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda}, with the label(s) {labels}. On a CUDA profile each "
             "label has a row on the device too (device_type 'CUDA'), whose time is the labelled span, idle gaps "
             "included: it is still not an operator.")
    kernels = [name for name in cuda if name in (_GEMM, _SOFTMAX, _ADAM) or name.startswith("vectorized")]
    if kernels:
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda}: it names kernels ({kernels[0][:40]}...), rows with "
             "device_type 'CUDA'. A kernel is the device's side of the operator that launched it, with the same "
             "device time: listing both counts one matmul twice and pushes another operator off the list.")
    if "cudaLaunchKernel" in cuda:
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda}, with cudaLaunchKernel: the host's call into the CUDA "
             "runtime that queued each kernel, not an operator of the model.")
    if "aten::linear" in cuda and cuda.index("aten::linear") < len(cuda) - 1:
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda}: aten::linear is ranked by its total time, which is "
             "its aten::mm's. Rank each operator by the time spent in it itself.")
    for case in _TOP_CASES[5:]:
        mine = call(top_ops, *case)
        if not isinstance(mine, (list, tuple)) or list(mine) != _top_reference(*case):
            fail(f"top_ops(a CUDA profile's rows, {case[1]}) returned {mine!r}: not the operators that cost the device "
                 "the most time themselves, each once, most first. Read the rows of a CUDA profile: which of them are "
                 "the model's operators, and which are the same work seen again?")


JUDGES = {"busy_fraction": _busy_fraction, "top_ops": _top_ops}
