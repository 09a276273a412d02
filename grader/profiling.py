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
import time
import warnings
from typing import Callable, Iterable

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from grader import timing


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


def rows(prof: profile, use_device: bool = False) -> list[dict]:
    """One plain dict per name in `prof.key_averages()`: name, calls, self_us, total_us, is_label.

    Times are CPU microseconds, or device (kernel) microseconds when `use_device`.
    """
    out = []
    for e in prof.key_averages():
        if use_device:
            self_us, total_us = e.self_device_time_total, e.device_time_total
        else:
            self_us, total_us = e.self_cpu_time_total, e.cpu_time_total
        out.append({"name": str(e.key), "calls": int(e.count), "self_us": float(self_us), "total_us": float(total_us),
                    "is_label": _is_label(str(e.key), getattr(e, "is_user_annotation", False))})
    return out


def ranges(prof: profile, main_thread_only: bool = True) -> list[dict]:
    """Every CPU range in the profile: name, start_us, end_us (from the profile's start), depth, is_label.

    Depth 0 is a `ProfilerStep#N` (or a range with no parent); depth 1 what ran
    directly inside it, and so on. `main_thread_only` keeps the thread that
    called the profiler (the autograd engine's backward thread is reported apart).
    """
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    if not events:
        return []
    origin = min(e.time_range.start for e in events)
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


def loop_ranges(prof: profile, compute: str = "compute") -> dict:
    """A training loop's profile as (start_us, end_us) lists: the ranges named `compute`, the DataLoader's ranges.

    Returns {"compute": [...], "loading": [...], "window": (start_us, end_us)}: loading holds the
    `enumerate(DataLoader)#...` ranges, and the window runs from the first ProfilerStep's start to the last one's end.
    """
    spans = ranges(prof)
    steps = [(r["start_us"], r["end_us"]) for r in spans if r["name"].startswith("ProfilerStep")]
    return {"compute": [(r["start_us"], r["end_us"]) for r in spans if r["name"] == compute],
            "loading": [(r["start_us"], r["end_us"]) for r in spans if r["name"].startswith("enumerate(DataLoader)")],
            "window": (min(a for a, _ in steps), max(b for _, b in steps)) if steps else (0.0, 0.0)}


def device_intervals(prof: profile) -> list[tuple[float, float]]:
    """(start_us, end_us) of every kernel the device ran (CUDA profiles), from the profile's first CPU event."""
    events = list(prof.events())
    if not events:
        return []
    origin = min(e.time_range.start for e in events)
    return sorted((e.time_range.start - origin, e.time_range.end - origin) for e in events
                  if e.device_type != torch.autograd.DeviceType.CPU)


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

# NVML's clocks event reasons (nvmlClocksEventReason*; before driver 535 "clocks_throttle_reasons"): bit -> name
EVENT_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


def smi_command(interval_ms: int = 100) -> list[str]:
    """The nvidia-smi command that prints SMI_FIELDS as CSV every `interval_ms` milliseconds."""
    return ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits",
            f"--loop-ms={interval_ms}"]


def _smi_number(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def event_reasons(mask: str) -> list[str] | None:
    """The names of the reasons set in nvidia-smi's clocks_event_reasons.active bit mask ("0x...4"), or None."""
    try:
        bits = int(mask.strip(), 16)
    except ValueError:
        return None
    return [name for bit, name in EVENT_REASONS.items() if bits & bit]


def parse_smi(text: str) -> list[dict]:
    """Rows of `smi_command()` output as dicts: t_s (from the first row), util_pct, power_w, power_limit_w,
    mem_used_mib, mem_total_mib, sm_mhz, max_sm_mhz, reasons (names of the active clocks event reasons)."""
    out, first = [], None
    for row in csv.reader(io.StringIO(text)):
        if len(row) != len(SMI_FIELDS):
            continue
        stamp = row[0].strip()
        try:
            when = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S"))
            when += float("0." + stamp.split(".")[1]) if "." in stamp else 0.0
        except (ValueError, IndexError):
            continue
        first = when if first is None else first
        util, power, limit, used, total, sm, max_sm = (_smi_number(v) for v in row[1:-1])
        out.append({"t_s": round(when - first, 3), "util_pct": util, "power_w": power, "power_limit_w": limit,
                    "mem_used_mib": used, "mem_total_mib": total, "sm_mhz": sm, "max_sm_mhz": max_sm,
                    "reasons": event_reasons(row[-1])})
    return out


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
