"""The instructor's judges of lesson 06's keyed checks (smooth, verdict, smallest_kept): they hold the answers, so
they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson06.py) and keeps
only digests and messages in grader/checks/keys/06_mixed_precision.json; the learner's checks
(grader/checks/lesson06.py) judge by those. A message names the kind of mistake and the principle, never the
expected value nor the formula.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from grader.checks._common import Replay, call, close, fail, is_number
from grader.checks.lesson06 import _KEPT_CASES, _SMOOTH_CASES, _VERDICT_CASES

# --- smooth ------------------------------------------------------------------------------------------


def smooth_reference(values: list[float], beta: float, correct: bool = True, swapped: bool = False,
                     corrected_by: float | None = None) -> list[float]:
    """The bias-corrected average, or one of the known mistakes (no correction, beta swapped)."""
    out, v = [], 0.0
    past = 1 - beta if swapped else beta
    for t, x in enumerate(values, start=1):
        v = past * v + (1 - past) * x
        if correct:
            denominator = 1 - (past if corrected_by is None else corrected_by) ** t
            out.append(v / denominator if denominator else math.nan)
        else:
            out.append(v)
    return out


def _swapped(args: tuple) -> list[list[float]]:
    values, beta = args
    return [smooth_reference(values, beta, swapped=True),
            smooth_reference(values, beta, swapped=True, corrected_by=beta),
            smooth_reference(values, beta, correct=False, swapped=True)]


def _same_list(got: Any, want: list[float], rel: float = 1e-9) -> bool:
    return (isinstance(got, list) and len(got) == len(want)
            and all(is_number(g) and close(float(g), w, rel) for g, w in zip(got, want)))


def _smooth(smooth: Callable) -> None:
    """smooth(losses, beta): the bias-corrected exponential moving average."""
    for args in _SMOOTH_CASES[:5]:
        got = call(smooth, *args)
        if _same_list(got, smooth_reference(*args)):
            continue
        if any(_same_list(got, wrong) for wrong in _swapped(args)):
            fail("smooth uses beta the wrong way round. beta is the weight of the past, so beta = 0.9 averages over "
                 "about 10 steps and beta = 0 returns the losses unchanged.")
        if _same_list(got, smooth_reference(*args, correct=False)):
            fail("smooth has no bias correction: the average starts at 0, so its first values are pulled towards 0. "
                 "A first loss of 4.0 must smooth to 4.0.")
        values, beta = args
        for shift in (1, -1):
            weights = [1 - beta ** (t + shift) for t in range(1, len(values) + 1)]
            if all(weights) and _same_list(got, [v / w for v, w in zip(smooth_reference(values, beta, correct=False),
                                                                       weights)]):
                fail("smooth's bias correction is one step off. After t steps the real losses carry part of the "
                     "weight and the starting 0 the rest: divide by the real losses' share after exactly t steps, "
                     "so a first loss of 4.0 smooths to 4.0.")
        if args[0] == [2.0] * 5:
            fail("smooth does not return a constant loss unchanged: a constant loss must smooth to the same constant.")
        fail("smooth is not the bias-corrected exponential moving average of the losses.")
    if call(smooth, [], 0.9) != []:
        fail("smooth([], 0.9) should return an empty list.")


# --- verdict -----------------------------------------------------------------------------------------


def _verdict(verdict: Callable) -> None:
    """verdict(reference, run, beta, rtol): 'diverged' (not finite, or rising), 'agrees' (within rtol), else 'stalled'."""
    answers = {name: call(verdict, *args, label=f"verdict(reference, run [{name}], beta, rtol)")
               for name, args in _VERDICT_CASES.items()}
    bad = {k: v for k, v in answers.items() if v not in ("agrees", "stalled", "diverged")}
    if bad:
        fail("verdict returned something other than 'agrees', 'stalled' or 'diverged'; return exactly one of them.")
    for name in ("nan at the end", "nan in the middle", "inf"):
        if answers[name] == "agrees":
            fail("verdict called a run whose loss became NaN or inf 'agrees': every comparison with NaN is False, so a "
                 "test like `not (difference > tolerance)` lets it through, and a smoothed curve carries the NaN to "
                 "its end. A loss that is not a number is a blown-up run.")
        if answers[name] != "diverged":
            fail("verdict got a run whose loss became NaN or inf wrong: a loss that is not finite means the run "
                 "blew up.")
    if answers["flat"] == "agrees":
        fail("verdict said a flat run 'agrees' with a reference that fell from 1e-6 to 1e-7: with losses this small an "
             "absolute tolerance passes anything. rtol is a tolerance relative to the size of the reference's loss.")
    if answers["flat"] != "stalled":
        fail("verdict got a finite, flat run wrong: it neither blew up nor got worse, and it never reached the "
             "reference.")
    if answers["same last value only"] == "agrees" or (answers["one noisy last value"] == "stalled"
                                                   and answers["reference ends on a noisy step"] == "agrees"):
        fail("verdict judged by the last raw loss: a flat run whose last value happens to equal the reference's, or a "
             "run that tracks the reference but ends on one noisy step, was misjudged. One raw loss is one noisy "
             "step: judge the smoothed curves.")
    if answers["reference ends on a noisy step"] != "agrees":
        fail("verdict misjudged a run that follows the reference step for step when the reference's last raw loss is "
             "one noisy step 30 % up: the reference was compared unsmoothed. Both curves are noisy, and both need "
             "the same smoothing.")
    if answers["rising with a rising reference"] != "diverged":
        fail("verdict misjudged a run whose smoothed loss rose 3 % a step because its reference rose alongside it. A "
             "run that got worse than where it started diverged, whatever the reference did: that is read from the "
             "run's own curve, before any comparison with the reference. (A rising fp32 reference is a broken "
             "reference: look at it next.)")
    if answers["flat and noisy"] != "stalled":
        fail("verdict misjudged a flat run with ±30 % noise whose raw last loss is above its first: its smoothed curve "
             "ends about where it started. Noise moves single losses by more than rtol, so whether a run got worse "
             "is read on the smoothed curve too.")
    if answers["5.2 % above"] != "stalled" or answers["4.8 % below"] != "agrees":
        fail("near the tolerance verdict misjudged a run 5.2 % above the reference or one 4.8 % below it (rtol 5 %): "
             "the tolerance was taken relative to the run's loss, or one-sided. rtol is relative to the reference's "
             "loss, in either direction.")
    if answers["agrees"] != "agrees" or answers["big losses agree"] != "agrees":
        fail("verdict did not say 'agrees' for a run within 1–2 % of the reference all along: it ends where the "
             "reference ends, well within the tolerance.")
    if answers["rising"] != "diverged":
        fail("verdict misjudged a run whose smoothed loss rose 5 % a step: it ended far worse than it started.")
    if answers["one noisy last value"] != "agrees" or answers["same last value only"] != "stalled":
        fail("verdict judged single noisy losses somewhere: every judgement is on the smoothed curves.")


# --- the smallest number a format keeps --------------------------------------------------------------

# (exponent bits, mantissa bits) of the formats the lesson casts gradients to, and torch's dtype for each
KEPT_FORMATS = {"fp32": (8, 23, torch.float32), "bf16": (8, 7, torch.bfloat16), "fp16": (5, 10, torch.float16),
                "fp8_e4m3": (4, 3, torch.float8_e4m3fn), "fp8_e5m2": (5, 2, torch.float8_e5m2)}


def smallest_kept_reference(exponent_bits: int, mantissa_bits: int, subnormals: bool = True,
                            bias_shift: int = 0) -> float:
    """The smallest positive number of an IEEE-style format: its smallest subnormal, or (mistakes) the smallest normal,
    or a bias off by one."""
    bias = 2 ** (exponent_bits - 1) - 1 + bias_shift
    return 2.0 ** (1 - bias - (mantissa_bits if subnormals else 0))


def torch_smallest_kept(dtype: torch.dtype) -> float:
    """The same number read from torch: the smallest normal times the spacing of the mantissa (finfo.tiny × eps)."""
    info = torch.finfo(dtype)
    return info.tiny * info.eps


def _smallest_kept(fn: Callable) -> None:
    """smallest_kept(exponent_bits, mantissa_bits): the smallest positive number the format holds, its smallest subnormal."""
    got = {case: call(fn, *case) for case in _KEPT_CASES}
    for case, value in got.items():
        if not is_number(value) or float(value) <= 0:
            fail(f"smallest_kept{case} returned {value!r}; return a positive number (a float).")
    for name, (e, m, dtype) in KEPT_FORMATS.items():
        value, want = float(got[(e, m)]), torch_smallest_kept(dtype)
        if close(value, want, 1e-9):
            continue
        if close(value, smallest_kept_reference(e, m, subnormals=False), 1e-9):
            fail(f"smallest_kept ({name}) returned the smallest *normal* number. Below it the exponent field is 0 and "
                 "the format goes on with subnormals, evenly spaced, whose mantissa has no leading 1: the smallest "
                 "positive number is the smallest of those. A gradient between the two survives (with fewer "
                 "significant bits); that is why a cast to fp16 keeps values well below its smallest normal.")
        for shift in (1, -1):
            if close(value, smallest_kept_reference(e, m, bias_shift=shift), 1e-9) or close(
                    value, smallest_kept_reference(e, m, subnormals=False, bias_shift=shift), 1e-9):
                fail(f"smallest_kept ({name}) is a factor 2 off: the exponent bias is off by one (or the mantissa "
                     "counted with its hidden bit). Go back to how the bias follows from the exponent's width, and to "
                     "which bits a subnormal's mantissa has.")
        fail(f"smallest_kept ({name}) is not the smallest positive number {name} keeps. Work it out from the bias, the "
             "smallest normal exponent, and how far the subnormals go below it.")
    if not close(float(got[(6, 9)]), smallest_kept_reference(6, 9), 1e-9):
        fail("smallest_kept is right for the formats a table lists, not for 6 exponent and 9 mantissa bits. Work from "
             "the bits, not from a table of formats.")


JUDGES = {"smooth": _smooth, "verdict": _verdict, "smallest_kept": _smallest_kept}
