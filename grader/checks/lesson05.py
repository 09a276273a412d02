"""Checks for lesson 05 (reading the machine): diagnose, busy_fraction, top_ops, idle_gaps, fixed_loader."""

from __future__ import annotations

import copy
import gc
import math
import warnings
from typing import Callable

import torch
from torch.utils.data import DataLoader

from grader import loading
from grader.checks._common import Check, Raised, call, close, fail, is_number, require_callable, same
from grader.notebook import CheckFailed, NotDone


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:500]
    except Exception:  # noqa: BLE001  a learner's exception whose __str__ raises
        return f"<{type(exc).__name__}>"


class _Answers:
    """Stands in for the learner's function in a judge: the answer it gave to case i, found by its arguments."""

    def __init__(self, name: str, cases: list[tuple], observation: list):
        if not isinstance(observation, list) or len(observation) != len(cases):
            raise CheckFailed(f"the check could not read what {name} returned (a recording of the wrong length)")
        self.__name__, self.cases, self.outcomes = name, cases, observation

    def __call__(self, *args):
        outcome = self.outcomes[self.cases.index(args)]
        if not isinstance(outcome, dict):
            raise CheckFailed(f"the check could not read what {self.__name__} returned")
        if "raised" in outcome:
            raise Raised(f"{self.__name__}{args!r}"[:200], str(outcome.get("raised")), str(outcome.get("message")))
        return outcome.get("value")


def recorded(what: str, name: str, cases: list[tuple], judge: Callable) -> Check:
    """Like _common.recorded, but each call gets its own copy of the arguments and is found again by position.

    A learner may sort the list they are given in place (rows.sort(...), ranges.sort()); a copy per call keeps
    that from changing the arguments of the calls after it, or the key the answer is found by.
    """

    def observe(fn):
        require_callable(fn, name)
        out = []
        for args in cases:
            try:
                out.append({"value": fn(*copy.deepcopy(args))})
            except NotImplementedError:
                raise NotDone(name) from None
            except Exception as exc:  # noqa: BLE001  the judge says which call raised what
                out.append({"raised": type(exc).__name__, "message": _text(exc)})
        return out

    return Check(what, observe, lambda observation: judge(_Answers(name, cases, observation)))


def _observe_expect(fn: Callable, args: tuple = ()) -> list:
    name = getattr(fn, "__name__", "your function")
    return recorded("hidden test", name if isinstance(name, str) else "your function", [tuple(args)],
                    lambda answers: None).observe(fn)


def _judge_expect(observation: list, want, why: str, args: tuple = (), rel: float = 1e-9, abs_tol: float = 0.0) -> None:
    answers = _Answers("your function", [tuple(args)], observation)
    try:
        got = answers(*tuple(args))
    except Raised as exc:
        fail(f"{exc}; {why}")
    if not same(got, want, rel, abs_tol):
        fail(why)


expect = Check("hidden test", _observe_expect, _judge_expect, inputs=("args",), announce=False)
expect.__doc__ = """Hidden test: `expect(fn, args=(...), want=..., why="...")`, fn called on a copy of args (it may sort them in place)."""

ANSWERS = ("memory", "waiting", "tiny-or-memory-bound", "busy", "throttled")

# --- diagnose -------------------------------------------------------------------------------------------------

GB = 1e9
_FULL_IDLE = (20.0, 100.0, 700.0, 79 * GB, 80 * GB)  # memory nearly full, utilisation low
_FULL_BUSY = (97.0, 300.0, 700.0, 79 * GB, 80 * GB)
_WAITING = (30.0, 90.0, 700.0, 40 * GB, 80 * GB)
_TINY = (100.0, 150.0, 700.0, 40 * GB, 80 * GB)  # 21% of the limit at 100% utilisation
_BUSY = (98.0, 500.0, 700.0, 40 * GB, 80 * GB)  # 71%
_THROTTLED = (99.0, 695.0, 700.0, 40 * GB, 80 * GB)  # 99%
_T4_AT_CAP = (100.0, 66.5, 70.0, 8 * GB, 16 * GB)  # 95% of a 70 W card
_BIG_SAME_WATTS = (100.0, 66.5, 700.0, 40 * GB, 80 * GB)  # the same watts on a 700 W card: 9.5%
_BIG_SAME_SHARE = (100.0, 665.0, 700.0, 40 * GB, 80 * GB)  # the same share as the T4: 95%
_T4_BUSY = (100.0, 45.0, 70.0, 8 * GB, 16 * GB)  # 64% of a 70 W card
_EDGE_UTIL = (50.0, 400.0, 700.0, 40 * GB, 80 * GB)  # 50% is not below 50
_EDGE_MEMORY = (90.0, 400.0, 700.0, 76 * GB, 80 * GB)  # exactly 95% of the memory
_DIAGNOSE_CASES = [_FULL_IDLE, _FULL_BUSY, _WAITING, _TINY, _BUSY, _THROTTLED, _T4_AT_CAP, _BIG_SAME_WATTS,
                   _BIG_SAME_SHARE, _T4_BUSY, _EDGE_UTIL, _EDGE_MEMORY]


def _reading(case: tuple) -> str:
    util, power, limit, used, total = case
    return (f"utilisation {util:g}%, {power:g} W of a {limit:g} W limit, "
            f"{used / GB:g} of {total / GB:g} GB used")


def _judge_diagnose(diagnose: Callable) -> None:
    """diagnose reads memory, then utilisation, then power as a share of the limit."""
    got = {case: call(diagnose, *case) for case in _DIAGNOSE_CASES}
    for case, answer in got.items():
        if answer not in ANSWERS:
            fail(f"diagnose({_reading(case)}) returned {answer!r}; return exactly one of {list(ANSWERS)}.")
    if got[_FULL_BUSY] != "memory" or got[_EDGE_MEMORY] != "memory":
        case = _FULL_BUSY if got[_FULL_BUSY] != "memory" else _EDGE_MEMORY
        fail(f"diagnose({_reading(case)}) returned {got[case]!r}: with {case[3] / case[4]:.0%} of the memory used the "
             "answer is 'memory'. Compare mem_used / mem_total (a fraction, 0 to 1) with 0.95, before anything else.")
    if got[_FULL_IDLE] == "waiting":
        fail(f"diagnose({_reading(_FULL_IDLE)}) returned 'waiting': you read utilisation before memory. "
             "Read memory first: with 79 of 80 GB used the next allocation fails, whatever the utilisation says.")
    if got[_FULL_IDLE] != "memory":
        fail(f"diagnose({_reading(_FULL_IDLE)}) returned {got[_FULL_IDLE]!r}; with 79 of 80 GB used the answer is "
             "'memory', whatever the utilisation.")
    if got[_WAITING] != "waiting":
        if got[_TINY] == "waiting" or got[_BUSY] == "waiting":
            fail(f"diagnose returned 'waiting' at {got[_TINY] == 'waiting' and 100 or 98}% utilisation; only "
                 "utilisation below 50% means the GPU is waiting.")
        fail(f"diagnose({_reading(_WAITING)}) returned {got[_WAITING]!r}, not 'waiting'. util_pct is a percent "
             "(0 to 100), not a fraction: 30 means 30%, which is below 50%. Compare util_pct with 50, not 0.5.")
    if got[_EDGE_UTIL] == "waiting":
        fail(f"diagnose({_reading(_EDGE_UTIL)}) returned 'waiting'; waiting means utilisation below 50%, "
             "and 50% is not below 50%.")
    if got[_TINY] == "busy":
        fail(f"diagnose({_reading(_TINY)}) returned 'busy': high utilisation alone does not mean busy. "
             "Utilisation counts the time at least one kernel ran, however small; at 21% of the power limit the "
             "arithmetic units are mostly idle: 'tiny-or-memory-bound'. Look at power before calling it busy.")
    if got[_BUSY] == got[_THROTTLED] == "tiny-or-memory-bound":
        fail(f"diagnose called 500 W and 695 W of a 700 W limit 'tiny-or-memory-bound': power_w / power_limit_w is "
             "a fraction (0 to 1), not a percent. Compare it with 0.5 and 0.95, not 50 and 95.")
    if got[_T4_AT_CAP] != got[_BIG_SAME_SHARE] or got[_BIG_SAME_WATTS] == got[_T4_AT_CAP]:
        fail(f"diagnose gave {got[_T4_AT_CAP]!r} for 66.5 W on a 70 W card, {got[_BIG_SAME_WATTS]!r} for 66.5 W on a "
             f"700 W card and {got[_BIG_SAME_SHARE]!r} for 665 W on a 700 W card: you compared absolute watts. "
             "66.5 of 70 W and 665 of 700 W are both 95% of the limit; use the share power_w / power_limit_w.")
    expected = {_TINY: "tiny-or-memory-bound", _BUSY: "busy", _THROTTLED: "throttled", _T4_AT_CAP: "throttled",
                _BIG_SAME_WATTS: "tiny-or-memory-bound", _T4_BUSY: "busy", _EDGE_UTIL: "busy", _EDGE_MEMORY: "memory"}
    for case, want in expected.items():
        if got[case] != want:
            share = case[1] / case[2]
            fail(f"diagnose({_reading(case)}) returned {got[case]!r}; that is {share:.0%} of the power limit and "
                 f"{case[3] / case[4]:.0%} of the memory, so the reading order (memory ≥ 95%, utilisation < 50%, "
                 f"power share < 50%, ≥ 95%) gives {want!r}.")


check_diagnose = recorded("diagnose", "diagnose", _DIAGNOSE_CASES, _judge_diagnose)


# --- busy_fraction --------------------------------------------------------------------------------------------

_B_SIMPLE = ([(0.0, 10.0), (20.0, 30.0)], 0.0, 40.0)  # 0.5
_B_OVERLAP = ([(0.0, 10.0), (0.0, 10.0), (5.0, 20.0)], 0.0, 20.0)  # 1.0 (summed: 1.75)
_B_CLIP = ([(-10.0, 10.0), (30.0, 50.0)], 0.0, 40.0)  # 0.5 (unclipped: 1.0)
_B_SPAN = ([(10.0, 20.0), (30.0, 40.0)], 0.0, 100.0)  # 0.2 (over the span: 0.667)
_B_OUTSIDE = ([(50.0, 60.0), (5.0, 6.0)], 0.0, 40.0)  # 0.025: one outside the window entirely
_B_EMPTY = ([], 0.0, 10.0)  # 0.0
_B_NESTED = ([(0.0, 100.0), (10.0, 20.0)], 0.0, 100.0)  # 1.0
_BUSY_CASES = [_B_SIMPLE, _B_OVERLAP, _B_CLIP, _B_SPAN, _B_OUTSIDE, _B_EMPTY, _B_NESTED]


def _judge_busy_fraction(busy_fraction: Callable) -> None:
    """busy_fraction: the share of [start, end] covered by at least one interval."""
    got = {i: call(busy_fraction, *case) for i, case in enumerate(_BUSY_CASES)}
    for i, value in got.items():
        if not is_number(value):
            fail(f"busy_fraction{_BUSY_CASES[i]} returned {value!r} ({type(value).__name__}); return a float from 0 to 1.")
    simple, overlap, clip, span, outside, empty, nested = (float(got[i]) for i in range(len(_BUSY_CASES)))
    if close(simple, 50.0):
        fail("busy_fraction returned 50 where half the window is busy: return a fraction from 0 to 1, not a percent.")
    if overlap > 1.0 or close(overlap, 1.75) or close(nested, 1.1):
        fail(f"busy_fraction([(0, 10), (0, 10), (5, 20)], 0, 20) returned {overlap!r}: above 1, because you summed "
             "intervals that overlap. Time when two kernels run at once counts once: utilisation is the share of the "
             "window in which at least one kernel ran. Merge overlapping intervals first.")
    if close(clip, 1.0) or close(outside, 0.275):
        fail(f"busy_fraction([(-10, 10), (30, 50)], 0, 40) returned {clip!r}: the intervals were not clipped to the "
             "window. Only the part of each interval between start and end counts (here 10 + 10 of 40 µs: 0.5).")
    if close(span, 2 / 3) or close(simple, 2 / 3):
        fail(f"busy_fraction([(10, 20), (30, 40)], 0, 100) returned {span:.3f}: you divided by the intervals' span "
             "(10 to 40), not by the window. Divide the busy time by end - start (here 20 of 100 µs: 0.2).")
    if not close(simple, 0.5):
        fail(f"busy_fraction([(0, 10), (20, 30)], 0, 40) returned {simple!r}; kernels ran for 20 of the 40 µs, so 0.5.")
    for value, want, case in ((overlap, 1.0, _B_OVERLAP), (clip, 0.5, _B_CLIP), (span, 0.2, _B_SPAN),
                              (outside, 0.025, _B_OUTSIDE), (empty, 0.0, _B_EMPTY), (nested, 1.0, _B_NESTED)):
        if not math.isclose(value, want, rel_tol=1e-9, abs_tol=1e-12):
            fail(f"busy_fraction{case} returned {value!r}; the share of the window covered by at least one interval "
                 f"is {want}.")


check_busy_fraction = recorded("busy_fraction", "busy_fraction", _BUSY_CASES, _judge_busy_fraction)


# --- top_ops --------------------------------------------------------------------------------------------------


def _row(name: str, calls: int, self_us: float, total_us: float, is_label: bool = False) -> dict:
    return {"name": name, "calls": calls, "self_us": self_us, "total_us": total_us, "is_label": is_label}


PROFILE_ROWS = [  # a made-up training profile, shaped like profiling.rows() output
    _row("ProfilerStep*", 3, 900.0, 9000.0, True),
    _row("backward", 3, 1000.0, 6000.0, True),
    _row("autograd::engine::evaluate_function: MmBackward0", 6, 20.0, 3000.0),
    _row("aten::mm", 12, 2500.0, 2600.0),
    _row("aten::add_", 40, 300.0, 300.0),
    _row("aten::gelu", 3, 800.0, 820.0),
    _row("aten::empty", 200, 50.0, 50.0),
    _row("aten::copy_", 30, 400.0, 410.0),
]
_TOP_CASES = [(PROFILE_ROWS, 3), (PROFILE_ROWS, 1), (PROFILE_ROWS, 10), (PROFILE_ROWS, 0), (PROFILE_ROWS[::-1], 3)]


def _judge_top_ops(top_ops: Callable) -> None:
    """top_ops: the n operator names (labels left out) with the most self time, most first."""
    got = call(top_ops, PROFILE_ROWS, 3)
    if not isinstance(got, (list, tuple)) or not all(isinstance(name, str) for name in got):
        fail(f"top_ops(rows, 3) returned {got!r}; return a list of the op names (strings).")
    got = list(got)
    ops = [r for r in PROFILE_ROWS if not r["is_label"]]

    def names(rows: list[dict], key: str, most_first: bool = True) -> list[str]:
        return [r["name"] for r in sorted(rows, key=lambda r: r[key], reverse=most_first)[:3]]

    if got in (names(ops, "total_us"), names(PROFILE_ROWS, "total_us")):
        fail(f"top_ops(rows, 3) returned {got}: sorted by total time. A range's total includes everything under it "
             "(the backward pass's entry contains every op it ran), so sort by self_us: time spent in the op itself.")
    if got in (names(ops, "self_us", False), names(PROFILE_ROWS, "self_us", False)):
        fail(f"top_ops(rows, 3) returned {got}: the ops with the least self time. Sort in descending order "
             "(reverse=True): most time first.")
    if "ProfilerStep*" in got or "backward" in got:
        which = ", ".join(name for name in ("ProfilerStep*", "backward") if name in got)
        fail(f"top_ops(rows, 3) returned {got}, which holds labels ({which}). Rows with is_label True are ranges "
             "someone named (record_function, ProfilerStep#), not operators: leave them out.")
    if got == names(ops, "calls"):
        fail(f"top_ops(rows, 3) returned {got}: sorted by number of calls. Many cheap calls are not where the time "
             "goes; sort by self_us.")
    want = ["aten::mm", "aten::gelu", "aten::copy_"]
    if got != want:
        fail(f"top_ops(rows, 3) returned {got}; the three operators with the most self time are {want}.")
    one, many, none = call(top_ops, PROFILE_ROWS, 1), call(top_ops, PROFILE_ROWS, 10), call(top_ops, PROFILE_ROWS, 0)
    if list(one) != ["aten::mm"]:
        fail(f"top_ops(rows, 1) returned {one!r}; return a list with the one name, ['aten::mm'].")
    if list(many) != ["aten::mm", "aten::gelu", "aten::copy_", "aten::add_", "aten::empty",
                      "autograd::engine::evaluate_function: MmBackward0"]:
        fail(f"top_ops(rows, 10) returned {many!r}; with fewer than 10 operators, return all six, most self time first "
             "(and no labels).")
    if list(none) != []:
        fail(f"top_ops(rows, 0) returned {none!r}; n = 0 asks for an empty list.")
    if list(call(top_ops, PROFILE_ROWS[::-1], 3)) != want:
        fail("top_ops gave a different answer when the rows came in another order; sort them yourself by self_us.")


check_top_ops = recorded("top_ops", "top_ops", _TOP_CASES, _judge_top_ops)


# --- idle_gaps ------------------------------------------------------------------------------------------------

_G_SIMPLE = ([(0.0, 10.0), (15.0, 30.0), (100.0, 120.0)], 10.0)  # [(30, 100)]
_G_UNSORTED = ([(100.0, 120.0), (0.0, 10.0), (40.0, 50.0)], 1.0)  # [(10, 40), (50, 100)]
_G_OVERLAP = ([(0.0, 50.0), (40.0, 60.0), (80.0, 90.0)], 1.0)  # [(60, 80)]
_G_NESTED = ([(0.0, 100.0), (10.0, 20.0), (50.0, 60.0), (130.0, 140.0)], 1.0)  # [(100, 130)]
_G_EDGE = ([(0.0, 10.0), (20.0, 30.0)], 10.0)  # [(10, 20)]: exactly min_gap counts
_G_EMPTY = ([], 5.0)
_G_ONE = ([(3.0, 8.0)], 0.0)
_GAP_CASES = [_G_SIMPLE, _G_UNSORTED, _G_OVERLAP, _G_NESTED, _G_EDGE, _G_EMPTY, _G_ONE]


def _as_gaps(value) -> list[tuple] | None:
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for gap in value:
        if not isinstance(gap, (list, tuple)) or len(gap) != 2 or not all(is_number(v) for v in gap):
            return None
        out.append((float(gap[0]), float(gap[1])))
    return out


def _judge_idle_gaps(idle_gaps: Callable) -> None:
    """idle_gaps: (start, end) of every stretch of at least min_gap_us that no range covers, between the first and last."""
    got = {i: call(idle_gaps, *case) for i, case in enumerate(_GAP_CASES)}
    gaps = {i: _as_gaps(v) for i, v in got.items()}
    for i, value in gaps.items():
        if value is None:
            fail(f"idle_gaps{_GAP_CASES[i]} returned {got[i]!r}; return a list of (start, end) tuples of numbers.")
    if any(end < start for g in gaps.values() for start, end in g):
        bad = next((start, end) for g in gaps.values() for start, end in g if end < start)
        fail(f"idle_gaps returned the gap {bad}, which ends before it starts: two ranges overlapped and you reported "
             "the overlap as a negative gap. Merge overlapping ranges first; a gap is time no range covers.")
    if gaps[1] != [(10.0, 40.0), (50.0, 100.0)]:
        fail(f"idle_gaps({_G_UNSORTED[0]}, 1) returned {got[1]!r}; expected [(10, 40), (50, 100)]. The ranges can "
             "come in any order (here the last one first): sort them by start before looking for gaps.")
    if gaps[3] != [(100.0, 130.0)]:
        fail(f"idle_gaps({_G_NESTED[0]}, 1) returned {got[3]!r}; expected [(100, 130)]. (10, 20) and (50, 60) are "
             "nested inside (0, 100): the device is busy until 100, so there is no gap at 20 or 60. Keep the latest "
             "end seen so far, not the previous range's end.")
    if gaps[2] != [(60.0, 80.0)]:
        fail(f"idle_gaps({_G_OVERLAP[0]}, 1) returned {got[2]!r}; expected [(60, 80)]: (0, 50) and (40, 60) overlap, "
             "so the first idle time starts at 60.")
    if gaps[0] != [(30.0, 100.0)]:
        fail(f"idle_gaps({_G_SIMPLE[0]}, 10) returned {got[0]!r}; expected [(30, 100)]: the 5 µs gap from 10 to 15 "
             "is shorter than min_gap_us = 10 and is left out.")
    if gaps[4] != [(10.0, 20.0)]:
        fail(f"idle_gaps({_G_EDGE[0]}, 10) returned {got[4]!r}; a gap of exactly min_gap_us (10) counts: [(10, 20)].")
    if gaps[5] != [] or gaps[6] != []:
        fail(f"idle_gaps returned {got[5]!r} for no ranges and {got[6]!r} for one; neither has a gap between ranges: [].")


check_idle_gaps = recorded("idle_gaps", "idle_gaps", _GAP_CASES, _judge_idle_gaps)


# --- fixed_loader ---------------------------------------------------------------------------------------------

_N, _BATCH = 23, 5  # 23 items in batches of 5: the last batch holds 3


def _batches(loader: DataLoader) -> list[list[int]]:
    """The item indices of every batch, in order."""
    return [[int(i) for i in ids] for _, ids in loader]


def _observe_fixed_loader(fixed_loader: Callable) -> dict:
    require_callable(fixed_loader, "fixed_loader")
    dataset = loading.SlowDataset(_N, item_seconds=0.0, features=3)
    seen: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # more workers than cores; pin_memory without CUDA (judged below, not printed)
        for device in ("cpu", "cuda"):
            loader = call(fixed_loader, dataset, _BATCH, torch.device(device),
                          label=f"fixed_loader(dataset, {_BATCH}, torch.device({device!r}))")
            if not isinstance(loader, DataLoader):
                return {"type": type(loader).__name__}
            seen[device] = loading.settings(loader)
            if device == "cpu":  # iterate only where the batches stay here; a CUDA loader would pin on this machine
                try:
                    seen["batches"] = _batches(loader)
                    seen["again"] = _batches(loader)  # a second epoch: persistent workers are reused
                finally:
                    loading.close(loader)
            del loader
    gc.collect()
    seen["type"] = "DataLoader"
    return seen


def _judge_fixed_loader(observation: dict) -> None:
    """fixed_loader: the slow loader's batches, from workers that stay and prefetch; pinned only for CUDA."""
    if observation.get("type") != "DataLoader":
        fail(f"fixed_loader returned a {observation.get('type')}; return a torch.utils.data.DataLoader.")
    cpu, cuda = observation["cpu"], observation["cuda"]
    want = _batches(loading.slow_loader(loading.SlowDataset(_N, item_seconds=0.0, features=3), _BATCH))
    if cpu["num_workers"] == 0:
        fail("fixed_loader's DataLoader has num_workers=0: the main process still reads every item itself, so the "
             "training loop waits for each batch. Give it worker processes (num_workers=2 or more) that load the "
             "next batches while this one computes.")
    if cpu["num_workers"] == 1:
        fail("fixed_loader's DataLoader has num_workers=1: one worker overlaps reading with computing, but it still "
             "reads one batch at a time, so when a batch takes longer to read than a step takes to compute the loop "
             "still waits. Use 2 or more workers.")
    if cpu["shuffle"]:
        fail("fixed_loader shuffles (shuffle=True): its batches are no longer the slow loader's. Keep the order "
             "(shuffle=False, the default); the fix is about who loads the items, not which items come.")
    if cpu["drop_last"]:
        fail(f"fixed_loader sets drop_last=True: with {_N} items in batches of {_BATCH} it drops the last 3 items. "
             "Keep drop_last=False, as the slow loader has it.")
    if cpu["pin_memory"]:
        fail("fixed_loader pins memory (pin_memory=True) for a CPU device: pinned (page-locked) memory only speeds "
             "up copies to a CUDA GPU; without CUDA it is a wasted copy (and a warning). Use "
             "pin_memory=(device.type == 'cuda').")
    if cpu["batch_size"] != _BATCH:
        fail(f"fixed_loader(dataset, {_BATCH}, ...) made batches of {cpu['batch_size']}; use the batch_size it was given.")
    if observation.get("batches") != want:
        fail(f"fixed_loader's batches hold the items {observation.get('batches')}; the slow loader's are {want}. "
             "Same data set, same batch size, same order, nothing dropped.")
    if observation.get("again") != want:
        fail("fixed_loader's second epoch gave different batches from its first; every epoch should give the slow "
             "loader's batches.")
    if not cpu["persistent_workers"]:
        fail("fixed_loader starts its workers afresh every epoch (persistent_workers=False): each start costs a new "
             "process and a copy of the data set. Keep them between epochs with persistent_workers=True.")
    if not cuda["pin_memory"]:
        fail("fixed_loader(dataset, 5, torch.device('cuda')) does not pin memory: when batches go to a CUDA GPU, "
             "pin_memory=True lets the copy run from page-locked memory (and with non_blocking=True overlap compute).")
    if cuda["num_workers"] == 0 or cuda["shuffle"] or cuda["drop_last"]:
        fail("fixed_loader's DataLoader for a CUDA device differs from its CPU one in workers, shuffle or drop_last; "
             "only pin_memory should depend on the device.")


check_fixed_loader = Check("fixed_loader", _observe_fixed_loader, _judge_fixed_loader)


def _observe_loader_on(fixed_loader: Callable, n: int, batch_size: int) -> dict:
    require_callable(fixed_loader, "fixed_loader")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = call(fixed_loader, loading.SlowDataset(int(n), item_seconds=0.0, features=2), int(batch_size),
                      torch.device("cpu"), label=f"fixed_loader(dataset of {n}, {batch_size}, cpu)")
        if not isinstance(loader, DataLoader):
            return {"batches": None}
        try:
            return {"batches": _batches(loader)}
        finally:
            loading.close(loader)
            del loader
            gc.collect()


def _judge_loader_on(observation: dict, n: int, batch_size: int, want: list, why: str) -> None:
    if not same(observation.get("batches"), want):
        fail(f"{why} (fixed_loader's batches held {observation.get('batches')!r})")


loader_on = Check("fixed_loader on a given data set", _observe_loader_on, _judge_loader_on,
                  inputs=("n", "batch_size"), announce=False)
loader_on.__doc__ = "Hidden test: fixed_loader on a SlowDataset of `n` items in batches of `batch_size` gives `want` (item indices)."
