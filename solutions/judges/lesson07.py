"""The instructor's judges of lesson 07's keyed checks (bytes_per_rank, bubble_fraction): they hold the answers, so
they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson07.py) and keeps
only digests and messages in grader/checks/keys/07_data_parallel.json; the learner's checks
(grader/checks/lesson07.py) judge by those. A message names the kind of mistake and the principle, never the
expected value nor the formula.
"""

from __future__ import annotations

from typing import Callable

from grader.checks._common import Replay, call, close, fail, is_number
from grader.checks.lesson07 import _BUBBLE_CASES, _MEM_CASES, _PSI, STAGES

# --- bytes_per_rank ----------------------------------------------------------------------------------


def _bytes_per_rank(fn: Callable) -> None:
    """bytes_per_rank: DeepSpeed's mixed-precision Adam per parameter; ZeRO 1 shards the optimizer, 2 the gradients, 3 the weights."""
    got = {case: call(fn, *case) for case in _MEM_CASES}
    for case, value in got.items():
        if not is_number(value):
            fail(f"bytes_per_rank{case} returned {value!r} ({type(value).__name__}); return a number of bytes.")
    g = {stage: float(got[(_PSI, 8, stage)]) for stage in STAGES}
    if not close(g["ddp"], 16 * _PSI, 1e-9):
        if close(g["ddp"], 8 * _PSI, 1e-9) or close(g["ddp"], 12 * _PSI, 1e-9):
            fail("bytes_per_rank(1e9 parameters, 8 ranks, 'ddp') is short of DeepSpeed's layout: did you count the "
                 "fp32 master copy of the weights the optimizer keeps, and both of Adam's moments?")
        fail("bytes_per_rank(1e9 parameters, 8 ranks, 'ddp') is off: count each tensor DeepSpeed's layout keeps per "
             "parameter, in its own dtype: fp16 weights, fp16 gradients, and the optimizer's fp32 state (a master "
             "copy of the weights and Adam's two moments). DDP keeps all of it on every rank.")
    if close(g["zero1"], g["ddp"] / 8, 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero1') divided everything among the ranks. Stage 1 shards only the optimizer "
             "state; every rank still holds all the fp16 weights and gradients.")
    if not close(g["zero1"], 4 * _PSI + 12 * _PSI / 8, 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero1') is off: stage 1 keeps the weights and gradients whole on every rank and "
             "divides the optimizer state among the ranks.")
    if close(g["zero2"], g["zero1"], 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero2') is the same as stage 1: stage 2 also shards the gradients.")
    if not close(g["zero2"], 2 * _PSI + 14 * _PSI / 8, 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero2') is off: stage 2 keeps only the fp16 weights whole; the gradients and the "
             "optimizer state are divided among the ranks.")
    if not close(g["zero3"], 16 * _PSI / 8, 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero3') is off: stage 3 shards the weights too, so every byte is divided among "
             "the ranks.")
    for stage in STAGES:
        if not close(float(got[(_PSI, 1, stage)]), 16 * _PSI, 1e-9):
            fail(f"bytes_per_rank(1e9, 1, {stage!r}) is not what DDP keeps: with one rank there is nobody to share "
                 "with, so every stage keeps everything.")
    if not close(float(got[(3 * 10**8, 4, "zero2")]), 2 * 3e8 + 14 * 3e8 / 4, 1e-9):
        fail("bytes_per_rank(3e8, 4, 'zero2') is off, though right for 1e9 parameters on 8 ranks: use n_params and "
             "world as given.")


# --- bubble_fraction ---------------------------------------------------------------------------------


def _bubble_fraction(fn: Callable) -> None:
    """bubble_fraction: the idle share of a GPipe schedule of p stages and m micro-batches."""
    got = {case: call(fn, *case) for case in _BUBBLE_CASES}
    for case, value in got.items():
        if not is_number(value):
            fail(f"bubble_fraction{case} returned {value!r} ({type(value).__name__}); return a fraction from 0 to 1.")
    v = float(got[(4, 8)])
    if close(v, 3 / 8, 1e-9) or close(float(got[(4, 1)]), 3.0, 1e-9):
        fail("bubble_fraction(4 stages, 8 micro-batches) is the bubble's time over the useful time, not over the whole "
             "schedule (it can exceed 1: with one micro-batch it does). Count every slot of the schedule, and the "
             "slots in which one stage idles.")
    if close(v, 3 / 12, 1e-9) or close(v, 4 / 11, 1e-9):
        fail("bubble_fraction(4, 8) is one slot off: a stage waits for the first micro-batch to reach it and idles "
             "after the last one leaves; count both sides for the first and the last stage.")
    for (p, m), value in got.items():
        if not close(float(value), (p - 1) / (m + p - 1), 1e-9):
            fail(f"bubble_fraction({p}, {m}) is off" + (": one stage is no pipeline, so it never waits" if p == 1 else
                 ", though right elsewhere: count the slots of this schedule") + ".")


JUDGES = {"bytes_per_rank": _bytes_per_rank, "bubble_fraction": _bubble_fraction}
