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
from grader.checks.lesson05 import (_B_CLIP, _B_EMPTY, _B_NESTED, _B_OUTSIDE, _B_OVERLAP, _B_SIMPLE, _B_SPAN,
                                    _BUSY_CASES)

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


JUDGES = {"busy_fraction": _busy_fraction}
