"""The instructor's judges of lesson 02's keyed checks (link_from_copies, sync_points): they hold the answers, so they
are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson02.py) and keeps
only digests and messages in grader/checks/keys/02_transfers.json; the learner's checks (grader/checks/lesson02.py)
judge by those. A message names the kind of mistake and the principle, never the expected value nor the formula.
"""

from __future__ import annotations

from typing import Callable

from grader.checks._common import call, close, fail, is_number
from grader.checks.lesson02 import _FIT_CASES, _PREDICT_CASES, _fit_label, _sync_label

# --- link_from_copies ----------------------------------------------------------------------------------------------


def _through(points, least_squares: bool = False) -> tuple[float, float]:
    """(intercept, 1 / slope) of the line through (x, y) points: the two of smallest and largest x, or all of them."""
    if least_squares:
        n = len(points)
        mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
        slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
        return my - slope * mx, (1 / slope if slope else float("inf"))
    (x0, y0), (x1, y1) = min(points), max(points)
    if x1 == x0 or y1 == y0:
        return float("nan"), float("nan")
    bandwidth = (x1 - x0) / (y1 - y0)
    return y0 - x0 / bandwidth, bandwidth


def _line(runs) -> tuple[float, float]:
    """(latency, bandwidth): a run of k copies of n bytes took k x (latency + n / bandwidth), so each copy's time
    (the run's over k) lies on one line against the bytes of one copy."""
    return _through([(n, t / k) for k, n, t in runs])


def _readings(runs) -> dict:
    """Known wrong readings of the runs: (latency, bandwidth) each gives."""
    per_copy = [(n, t / k) for k, n, t in runs]
    small, big = min(per_copy), max(per_copy)
    return {
        "whole run as one copy": [_through([(k * n, t) for k, n, t in runs]),
                                  _through([(k * n, t) for k, n, t in runs], least_squares=True)],
        "run's time against one copy's bytes": [_through([(n, t) for k, n, t in runs])],
        "one copy's time against the run's bytes": [_through([(k * n, t / k) for k, n, t in runs])],
        "each copy alone": [(small[1], big[0] / big[1])],
        "big copy's rate": [(_line(runs)[0], big[0] / big[1])],
    }


def _near(got: tuple[float, float], want: tuple[float, float], rel: float = 1e-4) -> bool:
    return all(close(g, w, rel=rel) for g, w in zip(got, want))


def _judge_link_from_copies(fit: Callable) -> None:
    """link_from_copies(runs) -> (latency seconds, bandwidth bytes/s) of the link the runs of copies crossed."""
    answers = []
    for (runs,) in _FIT_CASES:
        got = call(fit, runs, label=_fit_label(runs))
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(is_number(v) for v in got):
            fail(f"link_from_copies returned {type(got).__name__}; return a pair of numbers: "
                 "(latency in seconds, bandwidth in bytes per second).")
        answers.append(((float(got[0]), float(got[1])), runs))
    for got, runs in answers:
        want_latency, want_bandwidth = _line(runs)
        if _near(got, (want_bandwidth, want_latency), rel=1e-3):
            fail("link_from_copies returned (bandwidth, latency): return the latency first, then the bandwidth.")
        if close(got[1], 8 * want_bandwidth, rel=1e-3) or close(got[1], want_bandwidth / 1e9, rel=1e-3):
            fail("your bandwidth is not in bytes per second (bits? GB/s?): the runs are in bytes and seconds.")
        if close(got[0], 1e6 * want_latency, rel=1e-3) or close(got[0], 1e3 * want_latency, rel=1e-3):
            fail("your latency is not in seconds (µs? ms?): the runs' times are in seconds.")
    (g1, _), (g2, _) = answers[1], answers[2]
    if not _near(g1, g2, rel=1e-6):
        fail("link_from_copies gives another link when the same runs come in another order: it must not depend "
             "on which run is listed first.")
    for got, runs in answers:
        want = _line(runs)
        if _near(got, want, rel=1e-6):
            continue
        shown = f"{_fit_label(runs)}, runs of {' and '.join(str(k) for k, _, _ in runs)} copies"
        readings = _readings(runs)
        if any(_near(got, r) for r in readings["whole run as one copy"]):
            fail(f"{shown}: your link reads each run as one copy of all its bytes. A run of many copies did not pay "
                 "the fixed cost once (section 1: what does a copy pay whatever its size?).")
        if any(_near(got, r) for r in readings["run's time against one copy's bytes"]):
            fail(f"{shown}: your link sets a whole run's seconds against the bytes of one of its copies: the run's "
                 "time was spent on all its copies.")
        if any(_near(got, r) for r in readings["one copy's time against the run's bytes"]):
            fail(f"{shown}: your link sets the time of one copy against the bytes of the whole run: one copy moved "
                 "only its own bytes.")
        if any(_near(got, r) for r in readings["each copy alone"]):
            fail(f"{shown}: your link reads the smallest copy's time as the fixed cost: that copy moved bytes too, "
                 "and they took part of its time. Every copy paid the same fixed cost: use the runs together.")
        if any(_near(got, r) for r in readings["big copy's rate"]):
            fail(f"{shown}: your bandwidth divides the biggest copy's bytes by its whole time: that time includes "
                 "the fixed cost too.")
        if got[0] <= 0 or got[1] <= 0:
            fail(f"{shown} returned a fixed cost or a rate that is not positive: every copy takes longer than "
                 "nothing, and a bigger copy longer than a smaller one.")
        fail(f"{shown} is not the link those runs crossed (section 1: what does one copy pay whatever its size, and "
             "what grows with its bytes?).")


# --- sync_points ---------------------------------------------------------------------------------------------------


def _sync_points_model(version: str, steps: int, n_batches: int, copies: int = 2, mask: int = 1, read_after: int = 1,
                       pinned_waits: bool = False, resident_per_step: bool = False, resident_reached: bool = False) -> int:
    """What the counter measures for each of the lesson's loop versions: x and y are two copies per batch, and every
    version indexes the outlier mask once a step. The keywords make the known mistakes."""
    mask_reads = mask * steps
    if version == "buggy":
        return steps * (copies + 1) + mask_reads  # pageable copies and one .item() per step
    if version == "read once":
        return steps * copies + mask_reads + read_after
    if version == "resident":
        copied = steps if resident_per_step else min(steps, n_batches) if resident_reached else n_batches
        return copied * copies + mask_reads + read_after
    if version == "pinned":
        return (steps * copies if pinned_waits else 0) + mask_reads + read_after
    raise ValueError(version)


# Known mistakes, each a whole sync_points (every version): the keywords of _sync_points_model, and its message.
_SYNC_MISTAKES = [
    ({"mask": 0}, "leaves out a line that makes the host wait once in every step of every version: read the buggy "
                  "loop's step line by line again, asking of each what Python needs from the device (section 2)."),
    ({"copies": 0}, "counts only the reads. A copy to the device from ordinary (pageable) host memory is a sync point "
                    "too: PyTorch waits for the stream to drain before x.to(device) returns."),
    ({"copies": 1}, "counts one copy per batch: each batch is two tensors, x and y, and each .to(device) is its own "
                    "copy (and its own sync point when the memory is pageable)."),
    ({"read_after": 0}, "leaves out the one read after the loop: .tolist() waits for the device too."),
    ({"pinned_waits": True}, "counts the pinned version's copies as sync points: a copy from pinned memory with "
                             "non_blocking=True does not make the host wait (and pin_memory() itself reads nothing "
                             "from the device)."),
    ({"resident_per_step": True}, "lets the resident version's copies grow with the steps, but it copies the data set "
                                  "once, before the loop: its copies grow with n_batches, not with steps."),
    ({"resident_reached": True}, "copies only the batches the loop reaches. The resident loop moves the whole data set "
                                 "to the device before the first step, without knowing how many steps will use it: "
                                 "every one of the n_batches batches is copied (x and y), even with fewer steps than "
                                 "batches."),
    ({"mask": 0, "copies": 0}, "counts only the .item() and the read after the loop: a copy from pageable memory waits "
                               "too, and so does another line of every step (section 2)."),
]


def _judge_sync_points(sync_points: Callable[[str, int, int], int]) -> None:
    """sync_points(version, steps, n_batches): the sync points the counter measures for each loop version."""
    got = {}
    for version, steps, n_batches in _PREDICT_CASES:
        shown = _sync_label(version, steps, n_batches)
        value = call(sync_points, version, steps, n_batches, label=shown)
        if not is_number(value) or isinstance(value, float):
            fail(f"{shown} returned a {type(value).__name__}; return a whole number of sync points (an int).")
        got[version, steps, n_batches] = value
    wrong = [case for case in _PREDICT_CASES if got[case] != _sync_points_model(*case)]
    if not wrong:
        return
    first = _sync_label(*wrong[0])
    for changed, said in _SYNC_MISTAKES:
        if all(got[case] == _sync_points_model(*case, **changed) for case in _PREDICT_CASES):
            fail(f"sync_points is wrong from {first} on: it {said}")
    for case in wrong:  # one version wrong in a known way, the others right or wrong otherwise
        for changed, said in _SYNC_MISTAKES:
            if got[case] == _sync_points_model(*case, **changed) and len(changed) == 1 and not all(
                    _sync_points_model(*c, **changed) == _sync_points_model(*c) for c in _PREDICT_CASES if c[0] == case[0]):
                fail(f"{_sync_label(*case)}: it {said}")
    if any(got[case] == _sync_points_model(*case) + 1 for case in wrong if case[0] == "buggy"):
        fail(f"{first}: the buggy loop reads each loss with .item() inside the loop and returns the list as it is; "
             "there is no extra read after the loop.")
    fail(f"{first} is not what the counter measures for that loop. Count, for that version, each line that makes "
         "the host wait (section 2), and how often each runs.")


JUDGES = {"link_from_copies": _judge_link_from_copies, "sync_points": _judge_sync_points}
