"""The instructor's judges of lesson 02's keyed checks (link_from_copies, sync_points): they hold the answers, so they
are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson02.py) and keeps
only digests and messages in grader/checks/keys/02_transfers.json; the learner's checks (grader/checks/lesson02.py)
judge by those. A message names the kind of mistake and the principle, never the expected value nor the formula.
"""

from __future__ import annotations

from typing import Callable

from grader.checks._common import call, close, fail, is_number
from grader.checks.lesson02 import _FIT_CASES, _PREDICT_CASES, _sync_label

# --- link_from_copies ----------------------------------------------------------------------------------------------


def _line(copies) -> tuple[float, float]:
    """(latency, bandwidth) of the line through the smallest and the largest copy: both paid the same fixed cost."""
    (small, t_small), (big, t_big) = min(copies), max(copies)
    bandwidth = (big - small) / (t_big - t_small)
    return t_small - small / bandwidth, bandwidth


def _judge_link_from_copies(fit: Callable) -> None:
    """link_from_copies(copies) -> (latency seconds, bandwidth bytes/s) of the link the copies crossed."""
    answers = []
    for (copies,) in _FIT_CASES:
        got = call(fit, copies, label=f"link_from_copies({len(copies)} copies)")
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(is_number(v) for v in got):
            fail(f"link_from_copies returned {type(got).__name__}; return a pair of numbers: "
                 "(latency in seconds, bandwidth in bytes per second).")
        answers.append((float(got[0]), float(got[1]), copies))
    for latency, bandwidth, copies in answers:
        want_latency, want_bandwidth = _line(copies)
        if close(latency, want_bandwidth, rel=1e-3) and close(bandwidth, want_latency, rel=1e-3):
            fail("link_from_copies returned (bandwidth, latency): return the latency first, then the bandwidth.")
        if close(bandwidth, 8 * want_bandwidth, rel=1e-3) or close(bandwidth, want_bandwidth / 1e9, rel=1e-3):
            fail("your bandwidth is not in bytes per second (bits? GB/s?): the copies are in bytes and seconds.")
        if close(latency, 1e6 * want_latency, rel=1e-3) or close(latency, 1e3 * want_latency, rel=1e-3):
            fail("your latency is not in seconds (µs? ms?): the copies' times are in seconds.")
    (l0, b0, _), (l1, b1, _) = answers[0], answers[1]
    if not (close(l0, l1, rel=1e-6) and close(b0, b1, rel=1e-6)):
        fail("link_from_copies gives another link when the same copies come in another order: it must not depend "
             "on which copy is listed first.")
    for latency, bandwidth, copies in answers:
        want_latency, want_bandwidth = _line(copies)
        small = min(copies)
        if close(latency, small[1], rel=1e-3) and not close(latency, want_latency, rel=1e-3):
            fail("link_from_copies reads the smallest copy's time as the fixed cost: that copy moved bytes too, and "
                 "they took part of its time. Both copies paid the same fixed cost: use them together.")
        if close(bandwidth, max(copies)[0] / max(copies)[1], rel=1e-4) and not close(bandwidth, want_bandwidth, rel=1e-4):
            fail("link_from_copies divides the big copy's bytes by its whole time: that time includes the fixed "
                 "cost too. What does the difference between two copies say about the rate?")
        if latency <= 0 or bandwidth <= 0:
            fail("link_from_copies returned a fixed cost or a rate that is not positive: every copy takes longer "
                 "than nothing, and a bigger copy longer than a smaller one.")
        if not (close(latency, want_latency, rel=1e-6) and close(bandwidth, want_bandwidth, rel=1e-6)):
            fail(f"link_from_copies({len(copies)} copies) is not the link those copies crossed: with a fixed cost "
                 "per copy and a rate per byte, every copy lies on one line of time against bytes.")


# --- sync_points ---------------------------------------------------------------------------------------------------


def _sync_points_model(version: str, steps: int, n_batches: int) -> int:
    """What the counter measures for each of the lesson's loop versions (x and y are two copies per batch)."""
    return {"buggy": 3 * steps, "read once": 2 * steps + 1, "resident": 2 * n_batches + 1, "pinned": 1}[version]


def _judge_sync_points(sync_points: Callable[[str, int, int], int]) -> None:
    """sync_points(version, steps, n_batches): the sync points the counter measures for each loop version."""
    for version, steps, n_batches in _PREDICT_CASES:
        shown = _sync_label(version, steps, n_batches)
        got = call(sync_points, version, steps, n_batches, label=shown)
        if not is_number(got) or isinstance(got, float):
            fail(f"{shown} returned a {type(got).__name__}; return a whole number of sync points (an int).")
        want = _sync_points_model(version, steps, n_batches)
        if got == want:
            continue
        if (version, got) in (("buggy", steps), ("read once", 1), ("resident", 1)):
            fail(
                f"{shown} counts only the reads. A copy to the device from ordinary (pageable) host memory "
                "is a sync point too: PyTorch waits for the stream to drain before x.to(device) returns."
            )
        if (version, got) in (("buggy", 2 * steps), ("read once", steps + 1), ("resident", n_batches + 1)):
            fail(
                f"{shown}: each batch is two tensors, x and y, and each .to(device) is its own copy "
                "(and its own sync point when the memory is pageable)."
            )
        if version == "read once" and got == 2 * steps:
            fail(f"{shown} leaves out the one read after the loop: .tolist() waits for the device too.")
        if version == "buggy" and got == 3 * steps + 1:
            fail(f"{shown}: the buggy loop reads each loss with .item() inside the loop and returns the "
                 "list as it is; there is no extra read after the loop.")
        if version == "resident" and steps < n_batches and got == 2 * steps + 1:
            fail(
                f"{shown} copies only the batches the loop reaches. The resident loop moves the whole data "
                "set to the device before the first step, without knowing how many steps will use it: every one of "
                "the n_batches batches is copied (x and y), even with fewer steps than batches."
            )
        if version == "resident" and got in (2 * steps + 1, 2 * steps):
            fail(
                f"{shown} grows with the steps, but the resident loop copies the data set once, before the "
                "loop: its copies grow with n_batches, not with steps."
            )
        if version == "pinned" and got in (2 * steps + 1, 2 * steps, 2 * n_batches + 1):
            fail(
                f"{shown}: a copy from pinned memory with non_blocking=True does not make the host wait "
                "(and pin_memory() itself reads nothing from the device)."
            )
        fail(f"{shown} is not what the counter measures for that loop. Count, for that "
             "version, each read and each copy from pageable memory (x and y), and how often each runs.")


JUDGES = {"link_from_copies": _judge_link_from_copies, "sync_points": _judge_sync_points}
