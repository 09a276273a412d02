"""torch.profiler output as plain data: op rows, ranges on a timeline, the profiler's own cost, nvidia-smi traces.

    prof = profiling.profile_steps(step, steps=3)   # schedule + step(), every event kept
    table = profiling.rows(prof)                    # [{name, calls, self_us, total_us, is_label}, ...]
    spans = profiling.ranges(prof)                  # [{name, start_us, end_us, depth, is_label}, ...]

`rows` reads `key_averages()` through its public attributes only, so a check
can read a learner's profile as a list of dicts. A *label* is a range someone
wrote around code with `record_function` (`forward`, the DataLoader's own
`enumerate(DataLoader)#...`, the schedule's `ProfilerStep#N`), not an operator:
its self time is time spent under the label in no operator at all.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
import warnings
from typing import Callable, Iterable

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from grader import timing
from grader.shortcuts import course_only


def quiet() -> None:
    """Keep kineto's start/stop lines off stderr (they would show in a notebook); set before the first profile."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")


def activities(device: torch.device | str = "cpu") -> list[ProfilerActivity]:
    """CPU, plus CUDA when `device` is a CUDA device."""
    found = [ProfilerActivity.CPU]
    if torch.device(device).type == "cuda":
        found.append(ProfilerActivity.CUDA)
    return found


def profile_steps(step: Callable[[], object], steps: int = 3, warmup: int = 1,
                  device: torch.device | str = "cpu") -> profile:
    """Profile `steps` calls of `step()` after `warmup` traced-but-discarded ones (schedule + prof.step())."""
    quiet()
    plan = schedule(wait=0, warmup=warmup, active=steps, repeat=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's notes about CUDA/ITT on a CPU-only build
        with profile(activities=activities(device), schedule=plan, acc_events=True) as prof:
            for _ in range(warmup + steps):
                step()
                prof.step()
    return prof


def _is_label(name: str, annotation: bool) -> bool:
    return bool(annotation) or name.startswith("ProfilerStep")


def _device_name(event) -> str:
    """'CPU' for what the host ran (an operator, a label, a runtime call), 'CUDA' for what the device ran (a kernel)."""
    kind = getattr(event, "device_type", torch.autograd.DeviceType.CPU)
    return "CPU" if kind == torch.autograd.DeviceType.CPU else str(getattr(kind, "name", kind)).upper()


def rows(prof, use_device: bool = False) -> list[dict]:
    """One plain dict per row of `prof.key_averages()`: name, calls, self_us, total_us, is_label, device_type.

    Times are CPU microseconds, or device (kernel) microseconds when `use_device`. device_type is where the
    row's events ran: "CPU" for operators, labels and runtime calls (cudaLaunchKernel), "CUDA" for kernels and
    for the device's copy of each label (torch 2.13 keeps a row per name and device_type, so a CUDA profile
    holds aten::mm, its kernel and the cudaLaunchKernel that started it as three rows).
    """
    out = []
    for e in prof.key_averages():
        if use_device:
            self_us, total_us = e.self_device_time_total, e.device_time_total
        else:
            self_us, total_us = e.self_cpu_time_total, e.cpu_time_total
        out.append({"name": str(e.key), "calls": int(e.count), "self_us": float(self_us), "total_us": float(total_us),
                    "is_label": _is_label(str(e.key), getattr(e, "is_user_annotation", False)),
                    "device_type": _device_name(e)})
    return out


_RUNTIME = re.compile(r"^(cuda|cu|hip)[A-Z]")  # cudaLaunchKernel, cuLaunchKernel, cudaMemcpyAsync, hipLaunchKernel


def is_runtime_call(row: dict) -> bool:
    """A host row that is the CUDA runtime or driver (cudaLaunchKernel, cudaMemcpyAsync, cuLaunchKernel), not an operator."""
    return row.get("device_type", "CPU") == "CPU" and not row["is_label"] and bool(_RUNTIME.match(row["name"]))


def launches(table: list[dict], steps: int = 1) -> float:
    """Kernels launched per step: the kernel rows' calls on a CUDA profile; on a CPU profile (no kernel rows) the
    operators' calls, a rough stand-in (views launch nothing, nested operators count twice)."""
    kernels = [r for r in table if r.get("device_type", "CPU") != "CPU" and not r["is_label"]]
    if kernels:
        return sum(r["calls"] for r in kernels) / steps
    return sum(r["calls"] for r in table if not r["is_label"] and not is_runtime_call(r)) / steps


# Operators that reach a backend yet launch no kernel: a new shape over the same memory the schema does not mark as a
# view, an allocation without a fill, a number read back to the host (on a GPU, AdamW's step counts live on the host).
_NO_KERNEL = {"aten::_unsafe_view", "aten::lift_fresh", "aten::empty", "aten::empty_strided", "aten::empty_like",
              "aten::_local_scalar_dense"}


# Lesson 05's MFU_GUESS model counts the small step's kernels with this (grader.checks.lesson05.launch_bound_model):
# a copy test ran it, with torch's FLOP counter, on that step before guessing and had the model's exact figure. It is
# course_only and watched by that prediction: called from a cell before the first guess, it is recorded as a reveal.
@course_only("grader.profiling.device_ops")
def device_ops(fn: Callable[[], object]) -> dict[str, int]:
    """{operator: calls} of the work one call of `fn` hands to the device, counted where torch hands each operator to
    its backend (below autograd, after decompositions): views, allocations without a fill and reads back to the host
    left out. On a GPU each of these launches at least one kernel (a few launch more than one)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name
            if name.startswith("aten::") and not func.is_view and name not in _NO_KERNEL:
                self.calls[name] = self.calls.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    with _Count() as counted:
        fn()
    return dict(counted.calls)


def ranges(prof: profile, main_thread_only: bool = True) -> list[dict]:
    """Every CPU range in the profile: name, start_us, end_us (from the profile's start), depth, is_label.

    Depth 0 is a `ProfilerStep#N` (or a range with no parent); depth 1 what ran
    directly inside it, and so on. `main_thread_only` keeps the thread that
    called the profiler (the autograd engine's backward thread is reported apart).
    """
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    if not events:
        return []
    origin = _origin(prof)
    main = events[0].thread
    out = []
    for e in events:
        if main_thread_only and e.thread != main:
            continue
        depth, parent = 0, e.cpu_parent
        while parent is not None:
            depth, parent = depth + 1, parent.cpu_parent
        out.append({"name": e.name, "start_us": e.time_range.start - origin, "end_us": e.time_range.end - origin,
                    "depth": depth, "is_label": _is_label(e.name, getattr(e, "is_user_annotation", False))})
    return sorted(out, key=lambda r: (r["start_us"], r["depth"]))


def _origin(prof) -> float:
    """The time every range and interval is measured from: the profile's first host event (µs)."""
    starts = [e.time_range.start for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    return min(starts) if starts else 0.0


def loop_ranges(prof, compute: str = "compute", use_device: bool = False) -> dict:
    """A training loop's profile as (start_us, end_us) lists: when the device computed, the DataLoader's ranges.

    Returns {"compute": [...], "loading": [...], "window": (start_us, end_us)}: loading holds the
    `enumerate(DataLoader)#...` ranges, the window runs from the first ProfilerStep's start to the last one's end.
    compute holds the host's ranges named `compute` on the CPU, where an operator has finished when Python moves
    on; with `use_device` (a CUDA profile) it holds the kernels' own intervals on the device instead, since the
    host's range ends once its kernels are queued, or lasts while it waits in a synchronize.
    """
    spans = ranges(prof)
    steps = [(r["start_us"], r["end_us"]) for r in spans if r["name"].startswith("ProfilerStep")]
    busy = (device_intervals(prof) if use_device else
            [(r["start_us"], r["end_us"]) for r in spans if r["name"] == compute])
    return {"compute": busy,
            "loading": [(r["start_us"], r["end_us"]) for r in spans if r["name"].startswith("enumerate(DataLoader)")],
            "window": (min(a for a, _ in steps), max(b for _, b in steps)) if steps else (0.0, 0.0)}


def device_intervals(prof) -> list[tuple[float, float]]:
    """(start_us, end_us) of every kernel and copy the device ran (CUDA profiles), on the same clock as `ranges`.

    The device's copies of the labels (record_function and ProfilerStep spans, is_user_annotation) are left out:
    they cover the whole labelled range whether a kernel ran or not.
    """
    events = list(prof.events())
    if not events:
        return []
    origin = _origin(prof)
    return sorted((e.time_range.start - origin, e.time_range.end - origin) for e in events
                  if e.device_type != torch.autograd.DeviceType.CPU and not getattr(e, "is_user_annotation", False)
                  and not str(e.name).startswith("ProfilerStep"))


def overhead(step: Callable[[], object], sync: Callable[[], None], repeats: int = 5,
             device: torch.device | str = "cpu") -> tuple[timing.Timing, timing.Timing]:
    """The same step timed plain and inside an active profiler: (plain, profiled) Timings."""
    quiet()
    plain = timing.measure(step, sync, warmup=1, repeats=repeats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=activities(device)):
            profiled = timing.measure(step, sync, warmup=1, repeats=repeats)
    return plain, profiled


def trace_file(prof: profile, path: str) -> str:
    """Write the profile as a Chrome/Perfetto trace (open it at https://ui.perfetto.dev); returns the path."""
    prof.export_chrome_trace(path)
    return path


# --- nvidia-smi traces --------------------------------------------------------------------------------------

SMI_FIELDS = ("timestamp", "utilization.gpu", "power.draw", "power.limit", "memory.used", "memory.total",
              "clocks.sm", "clocks.max.sm", "clocks_event_reasons.active")
# Older drivers' names for a field (before 535 the clock event reasons were "clocks_throttle_reasons").
SMI_OLD_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
# field -> key of a parsed row
SMI_KEYS = {"utilization.gpu": "util_pct", "power.draw": "power_w", "power.limit": "power_limit_w",
            "memory.used": "mem_used_mib", "memory.total": "mem_total_mib", "clocks.sm": "sm_mhz",
            "clocks.max.sm": "max_sm_mhz", "clocks_event_reasons.active": "reasons",
            "clocks_throttle_reasons.active": "reasons"}

# NVML's clocks event reasons (nvmlClocksEventReason*; before driver 535 "clocks_throttle_reasons"): bit -> name
EVENT_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


def smi_fields(run: Callable | None = None) -> list[str]:
    """The fields of SMI_FIELDS this driver knows, each asked alone (with its older name where it has one).

    `nvidia-smi --query-gpu` fails as a whole when one field is unknown to the driver, so a query of all of them
    on a driver before 535 (no clocks_event_reasons) returns nothing: ask field by field, keep what answers.
    `run` is subprocess.run (a test passes its own).
    """
    import subprocess

    run = run or subprocess.run
    known = []
    for field in SMI_FIELDS:
        for name in (field, SMI_OLD_NAMES.get(field)):
            if name is None:
                continue
            try:
                done = run(["nvidia-smi", f"--query-gpu={name}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            if done.returncode == 0 and done.stdout.strip():
                known.append(name)
                break
    return known


def smi_command(interval_ms: int = 100, fields: Iterable[str] = SMI_FIELDS) -> list[str]:
    """The nvidia-smi command that prints `fields` as CSV every `interval_ms` milliseconds."""
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
            f"--loop-ms={interval_ms}"]


def _smi_number(text: str) -> float | None:
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return None  # "[N/A]" (MIG instances, unsupported products), "[Not Supported]", "[Unknown Error]"
    return value if value == value and abs(value) != float("inf") else None


def event_reasons(mask: str) -> list[str] | None:
    """The names of the reasons set in nvidia-smi's clocks_event_reasons.active bit mask ("0x...4"), or None."""
    try:
        bits = int(mask.strip(), 16)
    except ValueError:
        return None
    return [name for bit, name in EVENT_REASONS.items() if bits & bit]


def parse_smi(text: str, fields: Iterable[str] = SMI_FIELDS) -> list[dict]:
    """Rows of `smi_command(fields=fields)` output as dicts: t_s (from the first row), util_pct, power_w,
    power_limit_w, mem_used_mib, mem_total_mib, sm_mhz, max_sm_mhz, reasons (names of the active clocks event
    reasons). Field by field: a field the driver did not report, or reported as [N/A] or [Not Supported], is None."""
    fields = list(fields)
    out, first = [], None
    for row in csv.reader(io.StringIO(text)):
        if len(row) != len(fields):
            continue
        values = dict(zip(fields, (v.strip() for v in row)))
        when = None
        if "timestamp" in values:
            stamp = values["timestamp"]
            try:
                when = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S"))
                when += float("0." + stamp.split(".")[1]) if "." in stamp else 0.0
            except (ValueError, IndexError):
                continue
        parsed = {key: None for key in dict.fromkeys(SMI_KEYS.values())}
        for field, text_value in values.items():
            key = SMI_KEYS.get(field)
            if key == "reasons":
                parsed[key] = event_reasons(text_value)
            elif key is not None:
                parsed[key] = _smi_number(text_value)
        if when is not None:
            first = when if first is None else first
            parsed = {"t_s": round(when - first, 3), **parsed}
        else:
            parsed = {"t_s": None, **parsed}
        out.append(parsed)
    return out


def smi_words(sample: dict) -> str:
    """One nvidia-smi sample in words; a field the driver or a MIG instance did not report says so instead of failing."""

    def num(key: str, unit: str = "") -> str:
        value = sample.get(key)
        return "n/a" if value is None else f"{value:.0f}{unit}"

    reasons = sample.get("reasons")
    return (f"{num('mem_used_mib')} of {num('mem_total_mib')} MiB used, utilisation {num('util_pct', '%')}, "
            f"{num('power_w', ' W')} of a {num('power_limit_w', ' W')} limit, SM clock {num('sm_mhz')} of "
            f"{num('max_sm_mhz')} MHz, clock event reasons: "
            + ("n/a" if reasons is None else (", ".join(reasons) or "none")))


def mean_of(trace: Iterable[dict], key: str) -> float | None:
    """The mean of `key` over a trace's rows that have it; None when none do."""
    values = [r[key] for r in trace if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def matmul_peak_flops(device: torch.device | str = "cpu", sizes: Iterable[int] = (256, 512, 1024),
                      dtype: torch.dtype = torch.float32, repeats: int = 5) -> float:
    """This machine's peak, measured as lesson 01 does: the best 2n³ / seconds of an n×n matmul over `sizes` (FLOP/s)."""
    from grader import device as dev

    sync, best = dev.sync_fn(torch.device(device)), 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        seconds = timing.measure(lambda: a @ b, sync, warmup=1, repeats=repeats).median
        best = max(best, 2 * n**3 / seconds)
    return best
