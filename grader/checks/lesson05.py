"""Checks for lesson 05 (reading the machine): diagnose, busy_fraction, top_ops, idle_by_cause, fixed_loader, mfu,
and the lesson's two predictions (MFU_GUESS, IDLE_GUESS).

No message gives an expected value: a message names the kind of mistake and the principle to go back to.
"""

from __future__ import annotations

import gc
import itertools
import math
import warnings
from typing import Callable

import torch
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode

from grader import gpu as _gpu
from grader import loading, profiling, shortcuts
from grader.checks._common import (Check, Prediction, Replay, call, close, expect, fail, guard, is_number, recorded,
                                  require_callable, same)
from grader.checks._keys import Keyed
from grader.checks._sealed import sealed
from grader.shortcuts import course_only

__all__ = ["expect", "check_diagnose", "check_busy_fraction", "check_top_ops", "check_idle_by_cause", "check_fixed_loader",
           "loader_on", "check_mfu", "mfu_on", "check_mfu_guess", "check_idle_guess", "LESSON"]

LESSON = "05_reading_the_machine"  # the lesson's name in the predictions record (grader.predictions)
ANSWERS = ("busy", "near-oom", "slowed", "tiny-kernels", "waiting")  # alphabetical: the order to test them in is the exercise
# the course's own code that would answer an exercise: {function: its name} (guard). A copy test handed a made-up
# profile to the recording's summary, whose busy share is the union busy_fraction asks for.
_SHORTCUTS: dict = {_gpu.profile_figures: "grader.gpu.profile_figures (the recording's busy share, a union of intervals)",
                    profiling.loop_ranges: "grader.profiling.loop_ranges"}

# --- diagnose -------------------------------------------------------------------------------------------------


def reading(util_pct: float = 99.0, power_w: float = 500.0, power_limit_w: float = 700.0, sm_mhz: float = 1980.0,
            max_sm_mhz: float = 1980.0, reasons: dict | None = None, smi_used_mib: float = 40_000.0,
            peak_allocated_mib: float = 30_000.0, total_mib: float = 80_000.0) -> dict:
    """One reading as `diagnose` receives it: a trace's means from nvidia-smi and torch's peak, plain data.

    reasons: {clock event reason: share of the trace's samples in which it was active, 0 to 1}.
    """
    return {"util_pct": util_pct, "power_w": power_w, "power_limit_w": power_limit_w, "sm_mhz": sm_mhz,
            "max_sm_mhz": max_sm_mhz, "reasons": dict(reasons or {}), "smi_used_mib": smi_used_mib,
            "peak_allocated_mib": peak_allocated_mib, "total_mib": total_mib}


# Each case is far from any line a sensible reading would draw: the check judges what is read, and in which order,
# never where a line is drawn. An H100 (700 W, 80 GB) unless said otherwise.
_D = {  # neutral labels: a copy test read descriptive names of these readings as their answers
    "reading 1": reading(99.0, 695.0, 700.0, 1755.0, 1980.0, {"sw_power_cap": 1.0}, 78_500.0, 52_000.0),
    "reading 2": reading(20.0, 120.0, 700.0, 1980.0, 1980.0, {"gpu_idle": 0.6}, 79_800.0, 77_500.0),
    "reading 3": reading(99.0, 690.0, 700.0, 1755.0, 1980.0, {"sw_power_cap": 1.0}, 79_900.0, 78_000.0),
    "reading 4": reading(12.0, 90.0, 700.0, 1980.0, 1980.0, {"gpu_idle": 0.8}, 79_000.0, 30_000.0),
    "reading 5": reading(100.0, 140.0, 700.0),
    "reading 6": reading(100.0, 68.0, 70.0, 1410.0, 1590.0, {"sw_power_cap": 1.0}, 15_000.0, 9_000.0, 15_360.0),  # a T4
    "reading 7": reading(100.0, 68.0, 700.0),  # the T4's watts on a 700 W card
    "reading 8": reading(100.0, 680.0, 700.0),  # the T4's share of its limit on the 700 W card
    "reading 9": reading(99.0, 300.0, 700.0, 990.0, 1980.0, {"hw_thermal_slowdown": 1.0}),
    "reading 10": reading(98.0, 600.0, 700.0, 1500.0, 1980.0, {"sw_thermal_slowdown": 1.0}),
    "reading 11": reading(99.0, 230.0, 700.0, 800.0, 1980.0, {"hw_slowdown": 0.9}),
    "reading 12": reading(99.0, 260.0, 700.0, 900.0, 1980.0, {"hw_slowdown": 0.95, "hw_power_brake_slowdown": 0.95}),
    "reading 13": reading(99.0, 610.0, 700.0, 1980.0, 1980.0, {"hw_slowdown": 0.03}),  # one sample in 30
    "reading 14": reading(96.0, 520.0, 700.0),
    # copy test r24 passed with near-oom tested after slowed and tiny-kernels: nothing put those together
    "reading 15": reading(99.0, 300.0, 700.0, 990.0, 1980.0, {"hw_thermal_slowdown": 1.0}, 79_900.0, 78_000.0),
    "reading 16": reading(100.0, 140.0, 700.0, 1980.0, 1980.0, {}, 79_900.0, 78_000.0),
}
_DIAGNOSE_NAMES = list(_D)
_DIAGNOSE_CASES = [(_D[n],) for n in _DIAGNOSE_NAMES]


def describe(r: dict) -> str:
    """A reading in words, for a message."""
    reasons = ", ".join(f"{k} in {v:.0%} of the samples" for k, v in dict(r["reasons"]).items()) or "none"
    return (f"utilisation {r['util_pct']:g}%, {r['power_w']:g} of {r['power_limit_w']:g} W, SM clock {r['sm_mhz']:g} of "
            f"{r['max_sm_mhz']:g} MHz, event reasons: {reasons}; nvidia-smi memory.used {r['smi_used_mib']:g} of "
            f"{r['total_mib']:g} MiB, torch's peak allocated {r['peak_allocated_mib']:g} MiB")


def _public_diagnose(diagnose: Replay) -> None:
    """What can be said of diagnose without its answer: one of the five words for every reading."""
    for n in _DIAGNOSE_NAMES:
        answer = call(diagnose, _D[n])
        if answer not in ANSWERS:
            fail(f"diagnose({describe(_D[n])}) returned {answer!r}; return exactly one of {list(ANSWERS)}.")


check_diagnose = guard(Keyed(
    LESSON, "diagnose", "diagnose", _DIAGNOSE_CASES, public=_public_diagnose,
    unknown="diagnose does not read the check's readings as the machine means them, nor in a way the course knows. "
            "Go back over what each number measures physically and which of them can mislead, when a clock event "
            "reason counts, and what comes first when several apply."),
    "diagnose", _SHORTCUTS)


def _observe_diagnose_on(diagnose: Callable, case: dict) -> dict:
    require_callable(diagnose, "diagnose")
    return {"got": call(diagnose, reading(**case), label="diagnose(a reading)")}


def _judge_diagnose_on(observation: dict, case: dict, want: str, why: str) -> None:
    if observation.get("got") != want:
        fail(why)


diagnose_on = Check("diagnose on a reading", _observe_diagnose_on, _judge_diagnose_on, inputs=("case",), announce=False)
diagnose_on.__doc__ = "Hidden test: diagnose(reading(**case)) is `want`."

# --- busy_fraction --------------------------------------------------------------------------------------------

_B_SIMPLE = ([(0.0, 10.0), (20.0, 30.0)], 0.0, 40.0)
_B_OVERLAP = ([(0.0, 10.0), (0.0, 10.0), (5.0, 20.0)], 0.0, 20.0)  # two streams at once
_B_CLIP = ([(-10.0, 10.0), (30.0, 50.0)], 0.0, 40.0)  # kernels that stick out of the window
_B_SPAN = ([(10.0, 20.0), (30.0, 40.0)], 0.0, 100.0)  # idle before the first and after the last
_B_OUTSIDE = ([(50.0, 60.0), (5.0, 6.0)], 0.0, 40.0)  # one outside the window entirely
_B_EMPTY = ([], 0.0, 10.0)
_B_NESTED = ([(0.0, 100.0), (10.0, 20.0)], 0.0, 100.0)
_B_UNSORTED = ([(10.0, 20.0), (0.0, 15.0)], 0.0, 40.0)  # two streams, listed in the order a profile read its buffers
_B_SORTED = ([(0.0, 15.0), (10.0, 20.0)], 0.0, 40.0)  # the same kernels, listed by start
_BUSY_CASES = [_B_SIMPLE, _B_OVERLAP, _B_CLIP, _B_SPAN, _B_OUTSIDE, _B_EMPTY, _B_NESTED, _B_UNSORTED, _B_SORTED]

# The answers of busy_fraction, top_ops, idle_by_cause, diagnose and mfu are not here: each is judged by digests
# (grader.checks._keys) made by the instructor's judges (solutions/judges/lesson05.py), which are never packaged.


def _public_busy_fraction(busy_fraction: Replay) -> None:
    """What can be said of busy_fraction without its answer: a number for every case."""
    for case in _BUSY_CASES:
        value = call(busy_fraction, *case)
        if not is_number(value):
            fail(f"busy_fraction{case} returned {value!r} ({type(value).__name__}); return a float from 0 to 1.")


def _hints_busy_fraction(busy_fraction: Replay) -> None:
    for case in _BUSY_CASES:
        value = float(call(busy_fraction, *case))
        if not 0.0 <= value <= 1.0:
            fail(f"busy_fraction{case} returned {value!r}: a share of the window lies from 0 to 1.")
    unsorted, ordered = float(call(busy_fraction, *_B_UNSORTED)), float(call(busy_fraction, *_B_SORTED))
    if not math.isclose(unsorted, ordered, rel_tol=1e-9, abs_tol=1e-12):
        fail(f"busy_fraction{_B_UNSORTED} returned {unsorted!r} and busy_fraction{_B_SORTED} returned {ordered!r}: "
             "the same kernels, listed in another order, gave another share. The device does not know the order a "
             "profile lists its kernels in.")


check_busy_fraction = guard(Keyed(
    LESSON, "busy_fraction", "busy_fraction", _BUSY_CASES, floats=True, public=_public_busy_fraction,
    hints=_hints_busy_fraction,
    unknown="busy_fraction is not the share of the window in which at least one interval ran, nor a mistake the "
            "course knows. Walk the window from start to end: each moment is busy or not, whatever the number of "
            "kernels running then and whichever order the intervals came in."),
    "busy_fraction", _SHORTCUTS)


# --- top_ops --------------------------------------------------------------------------------------------------


def _row(name: str, calls: int, self_us: float, total_us: float, is_label: bool = False, device_type: str = "CPU") -> dict:
    return {"name": name, "calls": calls, "self_us": self_us, "total_us": total_us, "is_label": is_label,
            "device_type": device_type}


CPU_ROWS = [  # a made-up training profile on the CPU, shaped like profiling.rows() output (CPU µs)
    _row("ProfilerStep*", 3, 900.0, 9000.0, True),
    _row("backward", 3, 1000.0, 6000.0, True),
    _row("autograd::engine::evaluate_function: MmBackward0", 6, 20.0, 3000.0),
    _row("aten::mm", 12, 2500.0, 2600.0),
    _row("aten::add_", 40, 300.0, 300.0),
    _row("aten::gelu", 3, 800.0, 820.0),
    _row("aten::empty", 200, 50.0, 50.0),
    _row("aten::copy_", 30, 400.0, 410.0),
]
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"
_SOFTMAX = "cunn_SoftMaxForward<4, float, float, float, SoftMaxForwardEpilogue>"
_ADAM = "multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor>"
CUDA_ROWS = [  # a made-up CUDA training profile in device time (profiling.rows(prof, use_device=True)), shaped as
    # torch 2.13's key_averages() gives it: a row per name and device_type, so each operator's kernel is a row of its
    # own with the same device time, the host's launch call is a row, and each label has a host row and a device row
    _row("ProfilerStep*", 3, 0.0, 5200.0, True, "CPU"),
    _row("ProfilerStep*", 3, 6100.0, 6100.0, True, "CUDA"),  # the step's span on the device, idle gaps included
    _row("forward", 3, 2300.0, 2300.0, True, "CUDA"),
    _row("forward", 3, 0.0, 1900.0, True, "CPU"),
    _row("aten::mm", 18, 2600.0, 2600.0, False, "CPU"),
    _row(_GEMM, 18, 2600.0, 2600.0, False, "CUDA"),
    _row("aten::_softmax", 6, 700.0, 700.0, False, "CPU"),
    _row(_SOFTMAX, 6, 700.0, 700.0, False, "CUDA"),
    _row("aten::_fused_adam_", 3, 450.0, 450.0, False, "CPU"),
    _row(_ADAM, 9, 450.0, 450.0, False, "CUDA"),
    _row("aten::linear", 18, 0.0, 2600.0, False, "CPU"),  # calls aten::mm: its device time is the matmul's
    _row("cudaLaunchKernel", 60, 0.0, 0.0, False, "CPU"),
    _row("aten::add", 12, 300.0, 300.0, False, "CPU"),
    _row("vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>", 12, 300.0, 300.0, False, "CUDA"),
]
PROFILE_ROWS = CPU_ROWS  # the name the lesson's earlier edition used
_TOP_CASES = [(CPU_ROWS, 3), (CPU_ROWS, 1), (CPU_ROWS, 10), (CPU_ROWS, 0), (CPU_ROWS[::-1], 3), (CUDA_ROWS, 3),
              (CUDA_ROWS, 4), (CUDA_ROWS[::-1], 4)]


def _public_top_ops(top_ops: Replay) -> None:
    """What can be said of top_ops without its answer: a list of names for every case, at most n of them."""
    for rows, n in _TOP_CASES:
        got = call(top_ops, rows, n)
        which = "a CPU" if rows[0]["device_type"] == rows[-1]["device_type"] == "CPU" else "a CUDA"
        if not isinstance(got, (list, tuple)) or not all(isinstance(name, str) for name in got):
            fail(f"top_ops({which} profile's rows, {n}) returned {got!r}; return a list of the op names (strings).")
        if len(got) > n:
            fail(f"top_ops({which} profile's rows, {n}) returned {len(got)} names: at most n.")


def _hints_top_ops(top_ops: Replay) -> None:
    for rows, n in _TOP_CASES:
        got = list(call(top_ops, rows, n))
        if len(set(got)) < len(got):
            fail(f"top_ops(a profile's rows, {n}) returned {got}: a name twice. Each operator once.")


check_top_ops = guard(Keyed(
    LESSON, "top_ops", "top_ops", _TOP_CASES, public=_public_top_ops, hints=_hints_top_ops,
    unknown="top_ops is not the operators of the model that cost the most time themselves, most first, each once, "
            "nor a mistake the course knows. Read the rows of both profiles: which column measures time spent in "
            "an operator itself, which rows are not operators at all, and which are the same work seen again?"),
    "top_ops", _SHORTCUTS)


# --- idle_by_cause --------------------------------------------------------------------------------------------
# Cases: (compute ranges, loading ranges, start, end), the shapes a profile's ranges take.

_IDLE = {  # name: case
    "overlap": ([(0.0, 30.0), (60.0, 90.0)], [(20.0, 70.0)], 0.0, 100.0),  # a load that overlaps compute at both ends
    "merge": ([(0.0, 40.0), (30.0, 60.0)], [(50.0, 80.0)], 0.0, 100.0),  # compute ranges that overlap
    "nested": ([(0.0, 50.0), (10.0, 20.0)], [(40.0, 45.0), (55.0, 70.0)], 0.0, 100.0),  # one inside another
    "unsorted": ([(70.0, 80.0), (0.0, 10.0)], [(40.0, 60.0), (10.0, 30.0), (45.0, 55.0)], 0.0, 100.0),
    "sorted": ([(0.0, 10.0), (70.0, 80.0)], [(10.0, 30.0), (40.0, 60.0), (45.0, 55.0)], 0.0, 100.0),  # the same, sorted
    "touch": ([(0.0, 10.0), (10.0, 20.0)], [(20.0, 30.0)], 0.0, 40.0),  # end to end
    "edges": ([(-20.0, 10.0), (90.0, 130.0)], [(-50.0, 0.0), (5.0, 30.0), (80.0, 120.0)], 0.0, 100.0),  # sticking out
    "no_loading": ([(10.0, 20.0)], [], 0.0, 50.0),
    "no_compute": ([], [(2.0, 5.0)], 0.0, 10.0),
    "empty": ([], [], 0.0, 10.0),
    "hidden": ([(0.0, 10.0)], [(0.0, 10.0)], 0.0, 10.0),  # the load runs entirely under compute
}
_IDLE_CASES = list(_IDLE.values())


def _as_pair(value) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(is_number(v) for v in value):
        return float(value[0]), float(value[1])
    return None


def _idle_call(case: tuple) -> str:
    compute, load, start, end = case
    return f"idle_by_cause({compute}, {load}, {start:g}, {end:g})"


def _public_idle_by_cause(idle_by_cause: Replay) -> None:
    """What can be said of idle_by_cause without its answer: two numbers for every case."""
    for case in _IDLE_CASES:
        value = call(idle_by_cause, *case)
        if _as_pair(value) is None:
            fail(f"{_idle_call(case)} returned {value!r}; return a tuple of two numbers: (idle time while the loop "
                 "waited for data, idle time for other reasons).")


def _hints_idle_by_cause(idle_by_cause: Replay) -> None:
    for case in _IDLE_CASES:
        waiting, other = _as_pair(call(idle_by_cause, *case))
        if min(waiting, other) < 0 or waiting + other > case[3] - case[2] + 1e-9:
            fail(f"{_idle_call(case)} returned ({waiting!r}, {other!r}): each part of the idle time lies between "
                 "nothing and the whole window, and together they are no more than the window.")
    unsorted, ordered = (_as_pair(call(idle_by_cause, *_IDLE[name])) for name in ("unsorted", "sorted"))
    if not all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for a, b in zip(unsorted, ordered)):
        fail(f"{_idle_call(_IDLE['unsorted'])} returned {unsorted} and {_idle_call(_IDLE['sorted'])} returned "
             f"{ordered}: the same ranges in another order gave another split. A profile lists its ranges in any order.")


check_idle_by_cause = guard(Keyed(
    LESSON, "idle_by_cause", "idle_by_cause", _IDLE_CASES, floats=True, public=_public_idle_by_cause,
    hints=_hints_idle_by_cause,
    unknown="idle_by_cause is not the device's idle time split by owner, nor a mistake the course knows. Go back to "
            "section 4: take the window moment by moment, and ask of each what the device was doing then and, if "
            "nothing, whose fault that was. Then try your function on the check's cases by hand."),
    "idle_by_cause", _SHORTCUTS)


# --- fixed_loader ---------------------------------------------------------------------------------------------

_N, _BATCH = 23, 5  # 23 items in batches of 5: the last batch holds 3
# (seconds to read one item, batch size, seconds a step computes); how many workers each needs is the exercise
_RATIOS = [(0.002, 8, 0.004), (0.002, 8, 0.0015), (0.001, 5, 0.010)]
_ITER = (0.0001, _BATCH, 0.010)  # the loader whose batches are read: 0.5 ms per batch, 1 worker


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


def _public_fixed_loader(observation: dict) -> None:
    """What can be said of fixed_loader without its answer: a DataLoader with workers, the slow loader's batches,
    settings that fit the device. How many workers each case needs is judged by the keys."""
    if observation.get("type") != "DataLoader":
        fail(f"fixed_loader returned a {observation.get('type')}; return a torch.utils.data.DataLoader.")
    cpu, cuda, chosen = observation["cpu"], observation["cuda"], list(observation["ratios"])
    want = _batches(loading.slow_loader(loading.SlowDataset(_N, item_seconds=0.0, features=3), _BATCH))
    if 0 in chosen or cpu["num_workers"] == 0:
        fail("fixed_loader's DataLoader has num_workers=0: the main process still reads every item itself, so the "
             "training loop waits for each batch. Give it worker processes that load the next batches while this "
             "one computes.")
    if cpu["shuffle"]:
        fail("fixed_loader shuffles (shuffle=True): its batches are no longer the slow loader's. The fix is about "
             "who loads the items, not which items come.")
    if cpu["drop_last"]:
        fail(f"fixed_loader sets drop_last=True: with {_N} items in batches of {_BATCH} it drops the last 3 items, "
             "which the slow loader keeps.")
    if cpu["pin_memory"]:
        fail("fixed_loader pins memory (pin_memory=True) for a CPU device: pinned (page-locked) memory only speeds "
             "up copies to a CUDA GPU; without CUDA it is a wasted copy (and a warning).")
    if cpu["batch_size"] != _BATCH:
        fail(f"fixed_loader(dataset, {_BATCH}, ...) made batches of {cpu['batch_size']}; use the batch_size it was given.")
    if observation.get("batches") != want:
        fail(f"fixed_loader's batches hold the items {observation.get('batches')}; the slow loader's are {want}. "
             "Same data set, same batch size, same order, nothing dropped.")
    if not cpu["persistent_workers"]:
        fail("fixed_loader starts its workers afresh every epoch (persistent_workers=False): each start costs a new "
             "process and a copy of the data set, every epoch.")
    if not cuda["pin_memory"]:
        fail("fixed_loader(dataset, 8, torch.device('cuda'), ...) does not pin memory: when batches go to a CUDA GPU, "
             "the copy from pageable memory is staged through a page-locked buffer first, and cannot overlap compute.")
    if cuda["num_workers"] != chosen[0] or cuda["shuffle"] or cuda["drop_last"]:
        fail("fixed_loader's DataLoader for a CUDA device differs from its CPU one in workers, shuffle or drop_last; "
             "only pin_memory should depend on the device.")


def _loader_texts(chosen: list) -> str:
    return "; ".join(f"{b} items of {i * 1e3:g} ms a batch with a {s * 1e3:g} ms step: {k} worker(s)"
                     for (i, b, s), k in zip(_RATIOS, chosen))


def _hints_fixed_loader(observation: dict) -> None:
    chosen = list(observation["ratios"])
    if chosen[1] < chosen[0]:
        fail(f"fixed_loader chose {_loader_texts(chosen)}: fewer workers for the same batch when the step is shorter. "
             "The shorter the step, the sooner the loop asks for the next batch.")


def _fewer_workers(offsets: tuple) -> Callable:
    """A reading of the worker counts with `offsets` fewer in each case: the check takes up to two workers more than
    the fewest that keep up (a spare one costs little), as the hidden test does."""
    return lambda observation: [k - d for k, d in zip(observation["ratios"], offsets)]


check_fixed_loader = Keyed(
    LESSON, "fixed_loader", "fixed_loader", observe=_observe_fixed_loader,
    summary=lambda observation: [int(k) for k in observation["ratios"]], public=_public_fixed_loader,
    hints=_hints_fixed_loader,
    accept=[_fewer_workers(d) for d in itertools.product(range(3), repeat=len(_RATIOS)) if any(d)],
    unknown="fixed_loader's worker counts do not keep the loop fed on the check's cases (or keep more than a couple "
            "of workers idle), nor make a mistake the course knows. Go back to section 5: what one worker delivers, "
            "how often, and how often the loop asks.")


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


def _gpt(n_layers: int, d_model: int, d_ff: int, vocab: int, max_seq: int, seed: int = 0) -> torch.nn.Module:
    from grader.transformer import Shape, TinyGPT

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyGPT(Shape(n_layers=n_layers, d_model=d_model, n_heads=2, d_ff=d_ff, vocab_size=vocab,
                             max_seq_len=max_seq, dropout=0.0))


def _mlp(widths: list[int]) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for a, b in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.GELU()]
    return torch.nn.Sequential(*layers[:-1])


def _bare(model: torch.nn.Module) -> torch.nn.Module:
    """`model` without biases and LayerNorm weights (it still runs). Whether a count of the parameters takes them in
    changes it by a percent, which the lesson leaves to the learner: on the check's models every such count agrees."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.bias = None
        elif isinstance(module, torch.nn.LayerNorm):
            module.weight = module.bias = None
    return model


def _frozen(model: torch.nn.Module, *names: str) -> torch.nn.Module:
    """`model` with the parameters whose names start with one of `names` frozen (requires_grad False), as when only
    part of a model is fine-tuned."""
    for name, param in model.named_parameters():
        if name.startswith(names):
            param.requires_grad_(False)
    return model


# name: (model maker, batch, seq_len, step_seconds, peaks, dtype); the models are bare (_bare). Some are trained only
# in part: what a training step computes for a frozen parameter, and for the layers around it, is the learner's to
# work out from what backward must produce.
_MFU_MODELS = {
    "gpt": (lambda: _bare(_gpt(2, 64, 256, 512, 64)), 8, 64, 0.02, _PEAKS, "bf16"),
    "gpt_fp32": (lambda: _bare(_gpt(2, 64, 256, 512, 64)), 8, 64, 0.02, _PEAKS, "fp32"),
    "long_context": (lambda: _bare(_gpt(1, 64, 256, 128, 4096)), 2, 1024, 0.05, {"fp32": 1e11}, "fp32"),
    "mlp": (lambda: _bare(_mlp([256, 1024, 256])), 4, 128, 0.005, {"bf16": 312e12, "fp32": 19.5e12}, "bf16"),
    "mlp_bottom_frozen": (lambda: _frozen(_bare(_mlp([256, 512, 512, 512, 256])), "0.", "2."), 4, 128, 0.005,
                          {"bf16": 312e12, "fp32": 19.5e12}, "bf16"),
    "mlp_middle_frozen": (lambda: _frozen(_bare(_mlp([128, 512, 512, 128])), "2."), 8, 64, 0.002, {"fp32": 1e11}, "fp32"),
    "gpt_table_frozen": (lambda: _frozen(_bare(_gpt(2, 64, 256, 512, 64)), "tokens."), 8, 64, 0.02, _PEAKS, "bf16"),
    "gpt_top_tuned": (lambda: _frozen(_bare(_gpt(2, 64, 256, 512, 64)), "tokens.", "positions.", "blocks.0."), 8, 64,
                      0.02, _PEAKS, "bf16"),
}
MFU_MODEL_WORDS = {  # what each of the check's models is, in a message's words
    "gpt": "TinyGPT, every parameter trained (bf16)", "gpt_fp32": "TinyGPT, every parameter trained (fp32)",
    "long_context": "TinyGPT with a long position table", "mlp": "two Linear layers, both trained",
    "mlp_bottom_frozen": "four Linear layers, the first two frozen",
    "mlp_middle_frozen": "three Linear layers, the middle one frozen",
    "gpt_table_frozen": "TinyGPT with its token table (and so its tied head) frozen",
    "gpt_top_tuned": "TinyGPT with both embedding tables and its first block frozen",
}
_MFU_TOL = 0.03  # the hidden tests' models keep their biases and LayerNorm: counted or not, within a few percent


def _observe_mfu(mfu: Callable) -> dict:
    require_callable(mfu, "mfu")
    got = {}
    for name, (make, *args) in _MFU_MODELS.items():
        got[name] = call(mfu, make(), *args, label=f"mfu(a model, {', '.join(map(repr, args[:3]))}, peaks, {args[-1]!r})")
    return {"got": got}


def _public_mfu(observation: dict) -> None:
    """What can be said of mfu without its answer: a positive number for every model, a fraction of the peak."""
    got = observation.get("got") if isinstance(observation, dict) else None
    if not isinstance(got, dict) or set(got) != set(_MFU_MODELS):
        fail("the check could not read what mfu returned (one answer per model)")
    for name, value in got.items():
        if not is_number(value) or not math.isfinite(float(value)) or float(value) <= 0:
            fail(f"mfu on the check's model of {MFU_MODEL_WORDS[name]} returned {value!r}; return a float, a "
                 "fraction of the peak.")


def _mfu_summary(observation: dict) -> list:
    return [float(observation["got"][name]) for name in _MFU_MODELS]


check_mfu = guard(Keyed(
    LESSON, "mfu", "mfu", observe=_observe_mfu, summary=_mfu_summary, public=_public_mfu,
    unknown="mfu is not the model's FLOPs per second over the peak, nor a mistake the course knows. Go back to "
            "section 7: which matmuls the step runs, what backward must compute for each of them in this model, and "
            "what the rate is compared with."),
    # torch's FLOP counters, run on a step of the model, measure what the exercise asks the learner to count (the
    # profilers' with_flops too: a copy of the check's models' matmuls, attention's batched ones filtered out)
    "mfu", {**_SHORTCUTS, FlopCounterMode: "torch.utils.flop_counter.FlopCounterMode (torch's own FLOP counter)",
            torch.profiler.profile: "torch.profiler.profile (its with_flops counts the FLOPs the step ran)",
            torch.autograd.profiler.profile: "torch.autograd.profiler.profile (its with_flops counts the FLOPs the step "
                                             "ran)",
            # a copy test ran torch's FLOP counter in a forked process, where the check's watch does not follow
            **shortcuts.ELSEWHERE})


def _observe_mfu_on(mfu: Callable, shape: dict, batch: int, seq_len: int, step_seconds: float, peaks: dict,
                    dtype: str, frozen: tuple = ()) -> dict:
    require_callable(mfu, "mfu")
    model = _frozen(_gpt(int(shape["n_layers"]), int(shape["d_model"]), int(shape["d_ff"]), int(shape["vocab"]),
                         int(shape["max_seq"])), *(str(f) for f in frozen))
    return {"got": call(mfu, model, int(batch), int(seq_len), float(step_seconds), dict(peaks), str(dtype),
                        label="mfu(a TinyGPT, ...)")}


def _judge_mfu_on(observation: dict, shape: dict, batch: int, seq_len: int, step_seconds: float, peaks: dict,
                  dtype: str, want: float, why: str, frozen: tuple = ()) -> None:
    got = observation.get("got")
    if not is_number(got) or abs(float(got) / want - 1) > _MFU_TOL:
        fail(why)


mfu_on = Check("mfu on a model", _observe_mfu_on, _judge_mfu_on,
               inputs=("shape", "batch", "seq_len", "step_seconds", "peaks", "dtype", "frozen"), announce=False)
mfu_on.__doc__ = ("Hidden test: mfu on a TinyGPT of `shape` (the parameters whose names start with one of `frozen` "
                  "frozen) is `want` within 3%.")


# --- the lesson's predictions ---------------------------------------------------------------------------------


MFU_GUESS_CHIP = "H100"  # the modelled GPU of the prediction (data/chips.csv), in bf16


_SMALL = {"n_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "vocab_size": 512, "max_seq_len": 64}
_SMALL_TOKENS = (2, 32)  # sequences, tokens each: the lesson's batch (section 3)


def _small_transformer(foreach: bool | None = None):
    """The lesson's small transformer (section 3), its optimizer and its batch, the same in every process.

    foreach=True: AdamW as it runs on a GPU (a few multi-tensor operators for all the parameters, torch's default
    there); None: torch's default on this device."""
    from grader.transformer import Shape, TinyGPT, batch_of_tokens

    shape = Shape(**_SMALL, dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = TinyGPT(shape)
    return net, torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=foreach), batch_of_tokens(shape, *_SMALL_TOKENS, "cpu")


_MODEL: dict = {}  # launch_bound_model's figures: deterministic, counted once per process


@course_only()
@sealed(LESSON, "MFU_GUESS")
def launch_bound_model() -> dict:
    """MFU_GUESS's model, {"kernels", "flops", "step_seconds", "mfu"}, counted on the CPU, the same on every machine
    (sealed, grader.checks._sealed: the reveal cell asks it once your guess is recorded; before, it is the reveal)."""


@course_only()
@sealed(LESSON, "MFU_GUESS")
def _mfu_guess_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of MFU_GUESS's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "MFU_GUESS")
def _mfu_guess_said(context: dict) -> str:
    """Part of MFU_GUESS's model or its feedback: sealed (grader.checks._sealed)."""


check_mfu_guess = Prediction(LESSON, "MFU_GUESS", {"mfu": "number"}, points=1, band=_mfu_guess_band,
                             model=_mfu_guess_said,
                             mistakes=lambda answer, context: ("a fraction of the peak is at most 1 (20% is 0.2)"
                                                               if answer["mfu"] > 1 else None),
                             watch=(launch_bound_model, profiling.device_ops))

_IDLE_WORDS = ("waiting", "other", "both", "neither")
# IDLE_GUESS's second key: the same loop on a GPU, learn() without its synchronize, a step's kernels and a batch's
# read as below, queuing a step free. Nothing here runs it: what the overlap of the host's read with the device's
# kernels leaves idle is to be worked out (copy test r22 measured the first key with a DataLoader of its own).
IDLE_GPU_KEY = "GPU idle share"
IDLE_GPU_KERNELS_MS = 10.0
IDLE_GPU_READ_MS = 15.0


@course_only()
@sealed(LESSON, "IDLE_GUESS")
def _idle_guess_words(answer: dict) -> str | None:
    """Part of IDLE_GUESS's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "IDLE_GUESS")
def _idle_gpu_model() -> float:
    """Part of IDLE_GUESS's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "IDLE_GUESS")
def _idle_gpu_mistake(share: float) -> str | None:
    """Part of IDLE_GUESS's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "IDLE_GUESS")
def _idle_guess_final(answer: dict) -> str | None:
    """Part of IDLE_GUESS's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "IDLE_GUESS")
def _idle_guess_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of IDLE_GUESS's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "IDLE_GUESS")
def idle_split_reading(slow: dict, fed: dict) -> list[str]:
    """What section 4's table of idle time by cause says, once IDLE_GUESS is recorded: `slow` and `fed` are its rows
    for the slow loader and for 2 workers. Here, not in the cell: a copy test read IDLE_GUESS's answer off the
    sentences the cell once printed, in its source, before guessing; IDLE_GUESS watches this function."""


@course_only()
@sealed(LESSON, "IDLE_GUESS")
def _idle_guess_said(context: dict) -> str:
    """Part of IDLE_GUESS's model or its feedback: sealed (grader.checks._sealed)."""


check_idle_guess = Prediction(LESSON, "IDLE_GUESS", {"shrinks": _IDLE_WORDS, IDLE_GPU_KEY: "share"}, points=1,
                              band=_idle_guess_band,
                              mistakes=lambda answer, context: _idle_guess_final(answer),
                              model=_idle_guess_said, watch=(_idle_guess_words, idle_split_reading, loading.with_workers,
                                                             _idle_gpu_model, _idle_gpu_mistake, _idle_guess_final))

