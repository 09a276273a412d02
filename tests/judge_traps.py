"""Checks whose judging half misbehaves on purpose: for tests of the grader's judge process (test_grading_bounds.py)."""

from __future__ import annotations

from grader.checks._common import Check, fail


def _spin(observation, **kwargs):
    while True:
        pass


def _hog(observation, **kwargs):
    return [0] * (1 << 34)  # 128 GiB


def _strict(observation, **kwargs):
    if observation != 1:
        fail(f"you returned {observation!r}; return 1")


spins = Check("spins", lambda fn: fn(), _spin)
hogs = Check("hogs", lambda fn: fn(), _hog)
strict = Check("strict", lambda fn: fn(), _strict)
