"""Checks for lesson 05 (reading the machine): diagnose, busy_fraction, top_ops, idle_by_cause, fixed_loader, mfu."""

from __future__ import annotations

import gc
import math
import warnings
from typing import Callable

import torch
from torch.utils.data import DataLoader

from grader import loading
from grader.checks._common import Check, call, close, expect, fail, is_number, recorded, require_callable, same

__all__ = ["expect", "check_diagnose", "check_busy_fraction", "check_top_ops", "check_idle_by_cause", "check_fixed_loader",
           "loader_on", "check_mfu"]

ANSWERS = ("near-oom", "waiting", "thermal", "tiny-or-memory-bound", "compute-bound")

# --- diagnose -------------------------------------------------------------------------------------------------


def reading(util_pct: float = 99.0, power_w: float = 500.0, power_limit_w: float = 700.0, sm_mhz: float = 1980.0,
            max_sm_mhz: float = 1980.0, reasons: tuple[str, ...] = (), smi_used_mib: float = 40_000.0,
            peak_allocated_mib: float = 30_000.0, total_mib: float = 80_000.0) -> dict:
    """One reading as `diagnose` receives it: nvidia-smi's numbers and torch's peak, plain data."""
    return {"util_pct": util_pct, "power_w": power_w, "power_limit_w": power_limit_w, "sm_mhz": sm_mhz,
            "max_sm_mhz": max_sm_mhz, "reasons": list(reasons), "smi_used_mib": smi_used_mib,
            "peak_allocated_mib": peak_allocated_mib, "total_mib": total_mib}


# An H100 (700 W) running dense bf16 matmuls: at the power cap, the firmware holds the clock below its maximum
# (sw_power_cap), and nvidia-smi's memory.used is 98% because the caching allocator keeps what it reserved.
_AT_CAP = reading(99.0, 695.0, 700.0, 1755.0, 1980.0, ("sw_power_cap",), 78_500.0, 52_000.0)
_OOM_IDLE = reading(20.0, 120.0, 700.0, 1980.0, 1980.0, (), 79_800.0, 76_000.0)  # torch's peak: 95% of the card
_OOM_EDGE = reading(97.0, 500.0, 700.0, 1980.0, 1980.0, (), 79_000.0, 72_000.0)  # exactly 90%
_WAITING_FULL = reading(30.0, 90.0, 700.0, 1980.0, 1980.0, (), 79_000.0, 30_000.0)  # smi 99% full, torch 38%
_UTIL_EDGE = reading(50.0, 400.0, 700.0)  # 50% is not below 50
_TINY = reading(100.0, 150.0, 700.0)  # 21% of the limit at 100% utilisation
_T4_AT_CAP = reading(100.0, 66.5, 70.0, 1410.0, 1590.0, ("sw_power_cap",), 15_000.0, 9_000.0, 15_360.0)  # 95% of 70 W
_SAME_WATTS_BIG = reading(100.0, 66.5, 700.0)  # the same watts on a 700 W card: 9.5%
_SAME_SHARE_BIG = reading(100.0, 665.0, 700.0)  # 95% of the limit, clocks still at their maximum
_HOT_LOW_POWER = reading(99.0, 300.0, 700.0, 990.0, 1980.0, ("hw_thermal_slowdown",))  # 43%: the clock was halved
_HOT_SW = reading(98.0, 600.0, 700.0, 1500.0, 1980.0, ("sw_thermal_slowdown",))
_HALF_POWER = reading(100.0, 350.0, 700.0)  # exactly half the limit is not below half
_MID = reading(96.0, 500.0, 700.0)  # 71%
_DIAGNOSE_CASES = [(case,) for case in (_AT_CAP, _OOM_IDLE, _OOM_EDGE, _WAITING_FULL, _UTIL_EDGE, _TINY, _T4_AT_CAP,
                                        _SAME_WATTS_BIG, _SAME_SHARE_BIG, _HOT_LOW_POWER, _HOT_SW, _HALF_POWER, _MID)]


def describe(r: dict) -> str:
    """A reading in words, for a message."""
    reasons = ", ".join(r["reasons"]) or "none"
    return (f"utilisation {r['util_pct']:g}%, {r['power_w']:g} of {r['power_limit_w']:g} W, SM clock {r['sm_mhz']:g} of "
            f"{r['max_sm_mhz']:g} MHz, event reasons: {reasons}; nvidia-smi memory.used {r['smi_used_mib']:g} of "
            f"{r['total_mib']:g} MiB, torch's peak allocated {r['peak_allocated_mib']:g} MiB")


def _judge_diagnose(diagnose: Callable) -> None:
    """diagnose: near an OOM by torch's peak, waiting by utilisation, thermal by the event reasons, then power share."""
    got = {i: call(diagnose, *_DIAGNOSE_CASES[i]) for i in range(len(_DIAGNOSE_CASES))}
    (at_cap, oom_idle, oom_edge, waiting_full, util_edge, tiny, t4_cap, same_watts, same_share, hot_low, hot_sw,
     half, mid) = (got[i] for i in range(len(_DIAGNOSE_CASES)))
    for i, answer in got.items():
        if answer not in ANSWERS:
            fail(f"diagnose({describe(_DIAGNOSE_CASES[i][0])}) returned {answer!r}; return exactly one of {list(ANSWERS)}.")
    if at_cap == "near-oom" or waiting_full == "near-oom":
        r = _AT_CAP if at_cap == "near-oom" else _WAITING_FULL
        fail(f"diagnose({describe(r)}) returned 'near-oom': you read nvidia-smi's memory.used "
             f"({r['smi_used_mib'] / r['total_mib']:.0%} of the card) as the OOM signal. It counts the CUDA context "
             "plus everything PyTorch's caching allocator has reserved and keeps for reuse, so 95-99% is normal in a "
             f"healthy run. Whether the next allocation fits is read from torch: its peak allocated here is "
             f"{r['peak_allocated_mib'] / r['total_mib']:.0%} of the card. Compare peak_allocated_mib / total_mib with "
             "0.9.")
    if oom_idle == "waiting" and oom_edge == "near-oom":
        fail(f"diagnose({describe(_OOM_IDLE)}) returned 'waiting': you read utilisation before memory. torch's peak "
             "is 95% of the card: the run is about to stop with an out-of-memory error, and that comes first, "
             "whatever the utilisation.")
    if oom_idle != "near-oom" or oom_edge != "near-oom":
        if oom_idle != "near-oom" and oom_edge != "near-oom":
            fail(f"diagnose({describe(_OOM_IDLE)}) returned {oom_idle!r}: torch's peak allocated is 95% of the card's "
                 "memory, so the answer is 'near-oom' (read it first). peak_allocated_mib / total_mib is a fraction "
                 "(0 to 1): compare it with 0.9, not 90.")
        fail(f"diagnose({describe(_OOM_EDGE)}) returned {oom_edge!r}: torch's peak is exactly 90% of the card, which is "
             "at the threshold: 'near-oom' (peak / total >= 0.9).")
    if waiting_full != "waiting":
        if tiny == "waiting" or mid == "waiting":
            fail("diagnose returned 'waiting' at 96-100% utilisation; only utilisation below 50% means the GPU waits.")
        fail(f"diagnose({describe(_WAITING_FULL)}) returned {waiting_full!r}, not 'waiting'. util_pct is a percent "
             "(0 to 100): 30 means 30%, below 50%. Compare util_pct with 50, not 0.5.")
    if util_edge == "waiting":
        fail(f"diagnose({describe(_UTIL_EDGE)}) returned 'waiting'; waiting means utilisation below 50%, and 50% is "
             "not below 50%.")
    if same_share == "thermal":
        fail(f"diagnose({describe(_SAME_SHARE_BIG)}) returned 'thermal': you called power at the limit a fault. Sitting "
             "at the power cap is the normal state of dense tensor-core work: the chip draws all it may and the "
             "firmware trims the clock to stay under the limit (clocks_event_reasons.sw_power_cap). That is "
             "'compute-bound', and healthy. Heat is told by a thermal event reason, not by the power.")
    if at_cap == "thermal" or t4_cap == "thermal":
        fail(f"diagnose({describe(_AT_CAP)}) returned {at_cap!r}: an SM clock below its maximum says the chip slowed, "
             "not why. Here the reason is sw_power_cap: the firmware holding power at the limit, the normal state of "
             "dense work ('compute-bound'). Only hw_thermal_slowdown or sw_thermal_slowdown mean heat.")
    if hot_low == "tiny-or-memory-bound" and hot_sw == "thermal":
        fail(f"diagnose({describe(_HOT_LOW_POWER)}) returned 'tiny-or-memory-bound': you read the power share before "
             "the event reasons. A chip slowed by heat runs its clock lower (990 of 1980 MHz here), so it draws less "
             "power too; the low power is the slowdown's effect, not tiny kernels. Read the reasons first.")
    if hot_low != "thermal" or hot_sw != "thermal":
        case, answer = (_HOT_SW, hot_sw) if hot_sw != "thermal" else (_HOT_LOW_POWER, hot_low)
        fail(f"diagnose({describe(case)}) returned {answer!r}: the event reasons include a thermal slowdown "
             "(hw_thermal_slowdown or sw_thermal_slowdown in reading['reasons']): the chip is too hot and lowered "
             "its clock. The answer is 'thermal'.")
    if tiny == "compute-bound":
        fail(f"diagnose({describe(_TINY)}) returned 'compute-bound': high utilisation alone does not mean the chip is "
             "busy. Utilisation counts the time at least one kernel ran, however small; at 21% of the power limit the "
             "arithmetic units are mostly idle: 'tiny-or-memory-bound'. Look at power before calling it busy.")
    if mid == at_cap == "tiny-or-memory-bound":
        fail("diagnose called 500 W and 695 W of a 700 W limit 'tiny-or-memory-bound': power_w / power_limit_w is a "
             "fraction (0 to 1), not a percent. Compare it with 0.5, not 50.")
    if t4_cap != same_share or same_watts == t4_cap:
        fail(f"diagnose gave {t4_cap!r} for 66.5 W on a 70 W card, {same_watts!r} for 66.5 W on a 700 W card and "
             f"{same_share!r} for 665 W on a 700 W card: you compared absolute watts. 66.5 of 70 W and 665 of 700 W "
             "are both 95% of the limit; use the share power_w / power_limit_w.")
    if half == "tiny-or-memory-bound":
        fail(f"diagnose({describe(_HALF_POWER)}) returned 'tiny-or-memory-bound'; exactly half the limit is not below "
             "half: 'compute-bound'.")
    expected = [(_TINY, "tiny-or-memory-bound"), (_SAME_WATTS_BIG, "tiny-or-memory-bound"), (_MID, "compute-bound"),
                (_AT_CAP, "compute-bound"), (_T4_AT_CAP, "compute-bound"), (_SAME_SHARE_BIG, "compute-bound"),
                (_UTIL_EDGE, "compute-bound"), (_HALF_POWER, "compute-bound")]
    for case, want in expected:
        answer = call(diagnose, case)
        if answer != want:
            fail(f"diagnose({describe(case)}) returned {answer!r}; that is {case['power_w'] / case['power_limit_w']:.0%} "
                 "of the power limit with no thermal reason, torch's peak below 90% and utilisation of at least 50%: "
                 f"{want!r}.")


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


# --- idle_by_cause --------------------------------------------------------------------------------------------
# Cases: (compute ranges, loading ranges, start, end). The answer: (idle while the loop waited for data, idle for
# other reasons), where idle means covered by no compute range, and waiting for data means idle under a loading range.

_I_OVERLAP = ([(0.0, 30.0), (60.0, 90.0)], [(20.0, 70.0)], 0.0, 100.0)  # (30, 10): 20-30 and 60-70 of the load overlap compute
_I_MERGE = ([(0.0, 40.0), (30.0, 60.0)], [(50.0, 80.0)], 0.0, 100.0)  # (20, 20): compute 0-60, once
_I_NESTED = ([(0.0, 50.0), (10.0, 20.0)], [(40.0, 45.0), (55.0, 70.0)], 0.0, 100.0)  # (15, 35): busy until 50
_I_UNSORTED = ([(70.0, 80.0), (0.0, 10.0)], [(40.0, 60.0), (10.0, 30.0), (45.0, 55.0)], 0.0, 100.0)  # (40, 40)
_I_SORTED = ([(0.0, 10.0), (70.0, 80.0)], [(10.0, 30.0), (40.0, 60.0), (45.0, 55.0)], 0.0, 100.0)  # the same, sorted
_I_TOUCH = ([(0.0, 10.0), (10.0, 20.0)], [(20.0, 30.0)], 0.0, 40.0)  # (10, 10)
_I_EDGES = ([(-20.0, 10.0), (90.0, 130.0)], [(-50.0, 0.0), (5.0, 30.0), (80.0, 120.0)], 0.0, 100.0)  # (30, 50)
_I_NO_LOADING = ([(10.0, 20.0)], [], 0.0, 50.0)  # (0, 40): none of the idle time is the loader's
_I_NO_COMPUTE = ([], [(2.0, 5.0)], 0.0, 10.0)  # (3, 7)
_I_EMPTY = ([], [], 0.0, 10.0)  # (0, 10)
_I_HIDDEN = ([(0.0, 10.0)], [(0.0, 10.0)], 0.0, 10.0)  # (0, 0): the load runs entirely under compute
_IDLE = {  # name: (case, answer)
    "overlap": (_I_OVERLAP, (30.0, 10.0)), "merge": (_I_MERGE, (20.0, 20.0)), "nested": (_I_NESTED, (15.0, 35.0)),
    "unsorted": (_I_UNSORTED, (40.0, 40.0)), "sorted": (_I_SORTED, (40.0, 40.0)), "touch": (_I_TOUCH, (10.0, 10.0)),
    "edges": (_I_EDGES, (30.0, 50.0)), "no_loading": (_I_NO_LOADING, (0.0, 40.0)),
    "no_compute": (_I_NO_COMPUTE, (3.0, 7.0)), "empty": (_I_EMPTY, (0.0, 10.0)), "hidden": (_I_HIDDEN, (0.0, 0.0)),
}
_IDLE_CASES = [case for case, _ in _IDLE.values()]


def _as_pair(value) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(is_number(v) for v in value):
        return float(value[0]), float(value[1])
    return None


def _idle_call(case: tuple) -> str:
    compute, load, start, end = case
    return f"idle_by_cause({compute}, {load}, {start:g}, {end:g})"


def _judge_idle_by_cause(idle_by_cause: Callable) -> None:
    """idle_by_cause: (idle under a loading range, idle under none) within the window; idle = covered by no compute."""
    raw = {name: call(idle_by_cause, *case) for name, (case, _) in _IDLE.items()}
    got = {}
    for name, value in raw.items():
        got[name] = _as_pair(value)
        if got[name] is None:
            fail(f"{_idle_call(_IDLE[name][0])} returned {value!r}; return a tuple of two numbers: (idle time while the "
                 "loop waited for data, idle time for other reasons).")

    def gave(name: str, *answers: tuple) -> bool:
        return any(all(math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9) for g, w in zip(got[name], a)) for a in answers)

    wrong = {name for name, (_, want) in _IDLE.items() if not gave(name, want)}
    if not wrong:
        return
    shown = {name: f"{_idle_call(_IDLE[name][0])} returned {raw[name]!r}" for name in _IDLE}
    if gave("no_compute", (7.0, 3.0)) and gave("overlap", (10.0, 30.0)):
        fail(f"{shown['no_compute']}: the two numbers are swapped. The first is the idle time under a loading range "
             "(here 2 to 5: 3), the second the idle time under none (7).")
    if gave("no_loading", (40.0, 0.0)) or gave("no_compute", (10.0, 0.0)):
        fail(f"{shown['no_loading']}: you blamed all the idle time on the loader. Idle time outside every loading "
             "range is not the loader's fault (Python between steps, the profiler, a log line): it is the second "
             "number, here (0, 40).")
    if gave("hidden", (10.0, -10.0), (10.0, 0.0)) or gave("overlap", (50.0, -10.0), (50.0, 10.0), (50.0, 0.0)):
        fail(f"{shown['overlap']}; you counted loading time that overlaps compute as idle: the device was busy then. "
             "The DataLoader's range runs from 20 to 70, but compute covers 20 to 30 and 60 to 70, so the device "
             "waited for data only from 30 to 60 (30), and sat idle with no batch being fetched from 90 to 100 (10).")
    if gave("overlap", (20.0, 20.0)) and gave("touch", (5.0, 15.0)):
        fail(f"{shown['overlap']}: you split the idle time in proportion to the share of the window the loader ran "
             "(40 idle × 50% = 20). Whose fault an idle moment is depends on when it happened: idle from 30 to 60, "
             "under the DataLoader's range, is waiting for data (30); idle from 90 to 100, under none, is not (10).")
    if gave("overlap", (30.0, 0.0)) and gave("no_loading", (0.0, 0.0)):
        fail(f"{shown['overlap']} and {shown['no_loading']}: you counted only the gaps between compute ranges. Idle "
             "time before the first compute range and after the last counts too: the window runs from start to end. "
             "Expected (30, 10) and (0, 40).")
    if "merge" in wrong and gave("merge", (10.0, 20.0), (20.0, 10.0), (10.0, 10.0)):
        fail(f"{shown['merge']}: (0, 40) and (30, 60) overlap, and you counted 30 to 40 twice. The device is busy from "
             "0 to 60, once: idle from 60 to 100 (40), waiting for data from 60 to 80: (20, 20).")
    if "nested" in wrong and gave("nested", (20.0, 60.0), (15.0, 65.0), (20.0, 30.0)):
        fail(f"{shown['nested']}: (10, 20) sits inside (0, 50), and you took the device as idle from 20. It is busy "
             "until 50: keep the latest end seen so far, not the previous range's end. Idle from 50 to 100, waiting "
             "for data from 55 to 70: (15, 35).")
    if "unsorted" in wrong and "sorted" not in wrong:
        fail(f"{shown['unsorted']}, but the right answer, (40, 40), when the same ranges came sorted. A profile's "
             "ranges come in any order: sort them yourself (by start) before walking through them.")
    if wrong == {"edges"}:
        fail(f"{shown['edges']}; only the part of each range between start and end counts. Clip the ranges to the "
             "window: the device is idle from 10 to 90 (80), waiting for data from 10 to 30 and from 80 to 90: (30, 50).")
    name = next(name for name in _IDLE if name in wrong)
    fail(f"{shown[name]}; expected {_IDLE[name][1]}. The device is idle when no compute range covers the moment; idle "
         "time under a loading range is the loop waiting for data (the first number), idle time under none is "
         "something else's (the second). Loading while compute runs costs nothing: the device was busy.")


check_idle_by_cause = recorded("idle_by_cause", "idle_by_cause", _IDLE_CASES, _judge_idle_by_cause)


# --- fixed_loader ---------------------------------------------------------------------------------------------

_N, _BATCH = 23, 5  # 23 items in batches of 5: the last batch holds 3
# (seconds to read one item, batch size, seconds a step computes): workers needed = ceil(batch × item / step)
_RATIOS = [(0.002, 8, 0.004), (0.002, 8, 0.0015), (0.001, 5, 0.010)]  # 16/4 ms: 4; 16/1.5 ms: 11; 5/10 ms: 1
_ITER = (0.0001, _BATCH, 0.010)  # the loader whose batches are read: 0.5 ms per batch, 1 worker


def workers_needed(item_seconds: float, batch_size: int, step_seconds: float) -> int:
    """k workers each read a whole batch at a time, so together deliver k batches per batch-read time."""
    return max(1, math.ceil(round(batch_size * item_seconds / step_seconds, 9)))


def _batches(loader: DataLoader) -> list[list[int]]:
    """The item indices of every batch, in order."""
    return [[int(i) for i in ids] for _, ids in loader]


def _observe_fixed_loader(fixed_loader: Callable) -> dict:
    require_callable(fixed_loader, "fixed_loader")
    seen: dict = {"ratios": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # more workers than cores; pin_memory without CUDA (judged below, not printed)
        for item_s, batch, step_s in _RATIOS + [_ITER]:
            for device in ("cpu", "cuda"):
                if device == "cuda" and (item_s, batch, step_s) != _RATIOS[0]:
                    continue
                dataset = loading.SlowDataset(_N, item_seconds=item_s, features=3)
                loader = call(fixed_loader, dataset, batch, torch.device(device), step_s,
                              label=f"fixed_loader(dataset, {batch}, torch.device({device!r}), {step_s})")
                if not isinstance(loader, DataLoader):
                    return {"type": type(loader).__name__}
                settings = loading.settings(loader)
                if device == "cuda":
                    seen["cuda"] = settings
                elif (item_s, batch, step_s) == _ITER:  # its batches: the same sampler and batch size, read in-process
                    seen["cpu"] = settings
                    seen["batches"] = _batches(loading.with_workers(loader, 0))  # no worker to start: the order is the sampler's
                else:
                    seen["ratios"].append(settings["num_workers"])
                del loader
    gc.collect()
    seen["type"] = "DataLoader"
    return seen


def _judge_fixed_loader(observation: dict) -> None:
    """fixed_loader: the slow loader's batches, from enough workers for load time over step time, that stay; pinned only for CUDA."""
    if observation.get("type") != "DataLoader":
        fail(f"fixed_loader returned a {observation.get('type')}; return a torch.utils.data.DataLoader.")
    cpu, cuda, chosen = observation["cpu"], observation["cuda"], list(observation["ratios"])
    want = _batches(loading.slow_loader(loading.SlowDataset(_N, item_seconds=0.0, features=3), _BATCH))
    needed = [workers_needed(*case) for case in _RATIOS]
    if 0 in chosen or cpu["num_workers"] == 0:
        fail("fixed_loader's DataLoader has num_workers=0: the main process still reads every item itself, so the "
             "training loop waits for each batch. Give it worker processes that load the next batches while this "
             "one computes.")
    texts = [f"{b} items of {i * 1e3:g} ms with a {s * 1e3:g} ms step: {k} worker(s)" for (i, b, s), k in zip(_RATIOS, chosen)]
    if chosen == [math.ceil(i / s) for i, _, s in _RATIOS] and chosen != needed:
        fail(f"fixed_loader chose {'; '.join(texts)}. You divided one item's read time by the step time, but a "
             "worker builds a whole batch before handing it over: one batch takes batch_size × item_seconds to read.")
    for (item_s, batch, step_s), k, need in zip(_RATIOS, chosen, needed):
        load_ms, step_ms = batch * item_s * 1e3, step_s * 1e3
        if k < need:
            rounded = " (you rounded down: a fraction of a worker is still a whole worker)" if k == math.floor(
                load_ms / step_ms) else ""
            fail(f"fixed_loader chose {k} worker(s) for batches that take {load_ms:g} ms to read ({batch} items of "
                 f"{item_s * 1e3:g} ms) and a step of {step_ms:g} ms: too few{rounded}. Each worker reads one whole "
                 f"batch at a time, so k workers deliver k batches every {load_ms:g} ms, and the loop eats one every "
                 f"{step_ms:g} ms: k >= {load_ms:g} / {step_ms:g}, so at least {need}.")
        if k > need + 2:
            fail(f"fixed_loader chose {k} workers for batches that take {load_ms:g} ms to read and a step of "
                 f"{step_ms:g} ms: {need} keep up (k workers deliver k batches per {load_ms:g} ms). Each extra worker "
                 "is one more process holding a copy of the data set and its prefetched batches; choose the number "
                 "from the ratio of read time to step time.")
    if cpu["shuffle"]:
        fail("fixed_loader shuffles (shuffle=True): its batches are no longer the slow loader's. Keep the order "
             "(shuffle=False, the default); the fix is about who loads the items, not which items come.")
    if cpu["drop_last"]:
        fail(f"fixed_loader sets drop_last=True: with {_N} items in batches of {_BATCH} it drops the last 3 items. "
             "Keep drop_last=False, as the slow loader has it.")
    if cpu["pin_memory"]:
        fail("fixed_loader pins memory (pin_memory=True) for a CPU device: pinned (page-locked) memory only speeds "
             "up copies to a CUDA GPU; without CUDA it is a wasted copy (and a warning). Pin only when "
             "device.type == 'cuda'.")
    if cpu["batch_size"] != _BATCH:
        fail(f"fixed_loader(dataset, {_BATCH}, ...) made batches of {cpu['batch_size']}; use the batch_size it was given.")
    if observation.get("batches") != want:
        fail(f"fixed_loader's batches hold the items {observation.get('batches')}; the slow loader's are {want}. "
             "Same data set, same batch size, same order, nothing dropped.")
    if not cpu["persistent_workers"]:
        fail("fixed_loader starts its workers afresh every epoch (persistent_workers=False): each start costs a new "
             "process and a copy of the data set. Keep them between epochs with persistent_workers=True.")
    if not cuda["pin_memory"]:
        fail("fixed_loader(dataset, 8, torch.device('cuda'), ...) does not pin memory: when batches go to a CUDA GPU, "
             "pin_memory=True lets the copy run from page-locked memory (and with non_blocking=True overlap compute).")
    if cuda["num_workers"] != chosen[0] or cuda["shuffle"] or cuda["drop_last"]:
        fail("fixed_loader's DataLoader for a CUDA device differs from its CPU one in workers, shuffle or drop_last; "
             "only pin_memory should depend on the device.")


check_fixed_loader = Check("fixed_loader", _observe_fixed_loader, _judge_fixed_loader)


def _observe_loader_on(fixed_loader: Callable, n: int, batch_size: int, item_seconds: float, step_seconds: float) -> dict:
    require_callable(fixed_loader, "fixed_loader")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = loading.SlowDataset(int(n), item_seconds=float(item_seconds), features=2)
        loader = call(fixed_loader, dataset, int(batch_size), torch.device("cpu"), float(step_seconds),
                      label=f"fixed_loader(dataset of {n}, {batch_size}, cpu, {step_seconds})")
        if not isinstance(loader, DataLoader):
            return {"batches": None, "workers": None}
        return {"batches": _batches(loading.with_workers(loader, 0)), "workers": int(loader.num_workers)}


def _judge_loader_on(observation: dict, n: int, batch_size: int, item_seconds: float, step_seconds: float,
                     want: list, workers: int, why: str) -> None:
    got = observation.get("workers")
    if not same(observation.get("batches"), want) or not isinstance(got, int) or not workers <= got <= workers + 2:
        fail(f"{why} (fixed_loader's batches held {observation.get('batches')!r}, from {got!r} workers)")


loader_on = Check("fixed_loader on a given data set", _observe_loader_on, _judge_loader_on,
                  inputs=("n", "batch_size", "item_seconds", "step_seconds"), announce=False)
loader_on.__doc__ = ("Hidden test: fixed_loader on a SlowDataset of `n` items in batches of `batch_size` gives `want` "
                     "(item indices) from `workers` to `workers` + 2 workers.")


# --- mfu ------------------------------------------------------------------------------------------------------

_PEAKS = {"fp32": 67e12, "bf16": 989e12}  # an H100 SXM's datasheet peaks (data/chips.csv), FLOP/s
_M_BF16 = (1e9, 8, 1024, 1.0, _PEAKS, "bf16")  # 6 × 1e9 × 8192 / 989e12 = 4.97%
_M_FP32 = (1e9, 8, 1024, 1.0, _PEAKS, "fp32")  # the same run judged against the fp32 peak: 73%
_M_SMALL = (136_960, 2, 32, 0.01, {"fp32": 1e11}, "fp32")  # the lesson's small transformer on a 100 GFLOP/s CPU: 5.3%
_M_SHAPE = (1e8, 4, 256, 0.5, {"bf16": 312e12, "fp32": 19.5e12}, "bf16")  # 0.39%
_MFU_CASES = [_M_BF16, _M_FP32, _M_SMALL, _M_SHAPE]


def model_flops_utilisation(n_params: float, batch: int, seq_len: int, step_seconds: float, peaks: dict,
                            dtype: str) -> float:
    """The reference: 6 FLOPs per parameter per token for a training step, over the step time, over the dtype's peak."""
    return 6 * n_params * batch * seq_len / step_seconds / peaks[dtype]


def _judge_mfu(mfu: Callable) -> None:
    """mfu: 6 × parameters × tokens per training step, per second, over the peak of the dtype the run used."""
    got = [call(mfu, *case) for case in _MFU_CASES]
    want = [model_flops_utilisation(*case) for case in _MFU_CASES]
    for case, value in zip(_MFU_CASES, got):
        if not is_number(value):
            fail(f"mfu{case[:4]} returned {value!r} ({type(value).__name__}); return a float, a fraction of the peak.")
    got = [float(v) for v in got]
    ratio = [g / w for g, w in zip(got, want)]

    def all_near(values: list[float]) -> bool:
        return all(math.isclose(r, v, rel_tol=1e-6) for r, v in zip(ratio, values))

    if all_near([100.0] * 4):
        fail(f"mfu(1e9 parameters, 8 × 1024 tokens, 1 s, bf16) returned {got[0]!r}, a percent: return a fraction "
             f"(0 to 1), here {want[0]:.4f}.")
    if all_near([1 / 3] * 4):
        fail(f"mfu(1e9 parameters, 8 × 1024 tokens, 1 s, bf16) returned {got[0]:.4f}: you counted 2 FLOPs per parameter "
             "per token, the forward pass alone (one multiply and one add per weight). A training step also runs "
             "backward, which does the forward's work twice (the gradient for the activations and the gradient for "
             f"the weights): 2 + 4 = 6 × parameters × tokens, here {want[0]:.4f}.")
    if all_near([2 / 3] * 4):
        fail(f"mfu(...) returned {got[0]:.4f}: 4 FLOPs per parameter per token counts backward once. Backward computes "
             "two gradients (for the activations and for the weights), each as much work as the forward: 6 in all.")
    if math.isclose(got[0], got[1], rel_tol=1e-9) or math.isclose(got[0], want[1], rel_tol=1e-6):
        fail(f"mfu gave {got[0]:.4f} for a bf16 run and {got[1]:.4f} for the same run in fp32: you divided by the "
             "wrong peak. A chip's peak depends on the number format (an H100 does 989 TFLOP/s in bf16 on its tensor "
             "cores, 67 in fp32); divide by peaks[dtype], the peak of the format the run used.")
    if all(math.isclose(g, w / c[2], rel_tol=1e-6) for g, w, c in zip(got, want, _MFU_CASES)):
        fail(f"mfu counted one token per sequence (batch × 1): {got[0]:.3g} for 8 sequences of 1024 tokens. Every "
             "token of every sequence goes through every weight: tokens per step = batch × seq_len.")
    if all(math.isclose(g, w / c[1], rel_tol=1e-6) for g, w, c in zip(got, want, _MFU_CASES)):
        fail(f"mfu counted the tokens of one sequence only ({got[0]:.3g} for 8 sequences of 1024 tokens): a step "
             "processes batch × seq_len tokens.")
    if all(math.isclose(g, w * c[3], rel_tol=1e-6) for g, w, c in zip(got, want, _MFU_CASES)):
        fail("mfu ignored the step time: FLOPs per step are a rate only once divided by step_seconds (FLOP/s), then "
             "by the peak (FLOP/s).")
    for case, g, w in zip(_MFU_CASES, got, want):
        if not math.isclose(g, w, rel_tol=1e-6):
            fail(f"mfu(n_params={case[0]:g}, batch={case[1]}, seq_len={case[2]}, step_seconds={case[3]:g}, "
                 f"dtype={case[5]!r}) returned {g:.6g}; 6 × parameters × tokens per step / step time / peak of "
                 f"{case[5]} is {w:.6g}.")


check_mfu = recorded("mfu", "mfu", _MFU_CASES, _judge_mfu)
