"""Mutants for lesson 05 (reading the machine)."""

LESSON = "05_reading_the_machine"

_DIAGNOSE_HEAD = "def diagnose(util_pct, power_w, power_limit_w, mem_used, mem_total):\n"

_LOADER_HEAD = """
import torch
from torch.utils.data import DataLoader
def fixed_loader(dataset, batch_size, device):
"""

MUTANTS = {
    "diagnose_check": [
        ("utilisation read before memory", _DIAGNOSE_HEAD + """
    if util_pct < 50: return "waiting"
    if mem_used / mem_total >= 0.95: return "memory"
    share = power_w / power_limit_w
    if share < 0.5: return "tiny-or-memory-bound"
    if share >= 0.95: return "throttled"
    return "busy"
""", r"read utilisation before memory"),
        ("high utilisation called busy without looking at power", _DIAGNOSE_HEAD + """
    if mem_used / mem_total >= 0.95: return "memory"
    if util_pct < 50: return "waiting"
    if power_w / power_limit_w >= 0.95: return "throttled"
    return "busy"
""", r"high utilisation alone does not mean busy"),
        ("absolute watts instead of the share of the limit", _DIAGNOSE_HEAD + """
    if mem_used / mem_total >= 0.95: return "memory"
    if util_pct < 50: return "waiting"
    if power_w < 350: return "tiny-or-memory-bound"
    if power_w >= 665: return "throttled"
    return "busy"
""", r"you compared absolute watts"),
        ("utilisation as a fraction", _DIAGNOSE_HEAD + """
    if mem_used / mem_total >= 0.95: return "memory"
    if util_pct < 0.5: return "waiting"
    share = power_w / power_limit_w
    if share < 0.5: return "tiny-or-memory-bound"
    if share >= 0.95: return "throttled"
    return "busy"
""", r"util_pct is a percent"),
        ("power share compared as a percent", _DIAGNOSE_HEAD + """
    if mem_used / mem_total >= 0.95: return "memory"
    if util_pct < 50: return "waiting"
    share = power_w / power_limit_w
    if share < 50: return "tiny-or-memory-bound"
    if share >= 95: return "throttled"
    return "busy"
""", r"a fraction \(0 to 1\), not a percent"),
        ("memory share compared as a percent", _DIAGNOSE_HEAD + """
    if mem_used / mem_total >= 95: return "memory"
    if util_pct < 50: return "waiting"
    share = power_w / power_limit_w
    if share < 0.5: return "tiny-or-memory-bound"
    if share >= 0.95: return "throttled"
    return "busy"
""", r"a fraction, 0 to 1"),
    ],
    "busy_fraction_check": [
        ("overlaps summed", """
def busy_fraction(intervals, start, end):
    busy = sum(min(b, end) - max(a, start) for a, b in intervals if min(b, end) > max(a, start))
    return busy / (end - start)
""", r"summed intervals that overlap"),
        ("not clipped to the window", """
def busy_fraction(intervals, start, end):
    busy, reached = 0.0, float("-inf")
    for a, b in sorted(intervals):
        a = max(a, reached)
        if b > a:
            busy += b - a
            reached = b
    return busy / (end - start)
""", r"not clipped to the window"),
        ("divided by the intervals' span", """
def busy_fraction(intervals, start, end):
    busy, reached = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reached), min(b, end)
        if b > a:
            busy += b - a
            reached = b
    lo = max(start, min(a for a, _ in intervals)) if intervals else start
    hi = min(end, max(b for _, b in intervals)) if intervals else end
    return busy / (hi - lo) if hi > lo else 0.0
""", r"divided by the intervals' span"),
        ("a percent", """
def busy_fraction(intervals, start, end):
    busy, reached = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reached), min(b, end)
        if b > a:
            busy += b - a
            reached = b
    return 100 * busy / (end - start)
""", r"not a percent"),
    ],
    "top_ops_check": [
        ("sorted by total time", """
def top_ops(rows, n):
    ops = [r for r in rows if not r["is_label"]]
    return [r["name"] for r in sorted(ops, key=lambda r: r["total_us"], reverse=True)[:n]]
""", r"sorted by total time"),
        ("ascending", """
def top_ops(rows, n):
    ops = [r for r in rows if not r["is_label"]]
    return [r["name"] for r in sorted(ops, key=lambda r: r["self_us"])[:n]]
""", r"least self time"),
        ("labels kept", """
def top_ops(rows, n):
    return [r["name"] for r in sorted(rows, key=lambda r: r["self_us"], reverse=True)[:n]]
""", r"which holds labels"),
        ("only ProfilerStep rows dropped", """
def top_ops(rows, n):
    ops = [r for r in rows if not r["name"].startswith("ProfilerStep")]
    return [r["name"] for r in sorted(ops, key=lambda r: r["self_us"], reverse=True)[:n]]
""", r"which holds labels \(backward\)"),
        ("sorted by calls", """
def top_ops(rows, n):
    ops = [r for r in rows if not r["is_label"]]
    return [r["name"] for r in sorted(ops, key=lambda r: r["calls"], reverse=True)[:n]]
""", r"sorted by number of calls"),
        ("sorts the caller's rows in place", """
def top_ops(rows, n):
    rows.sort(key=lambda r: r["calls"], reverse=True)
    return [r["name"] for r in rows if not r["is_label"]][:n]
""", r"sorted by number of calls"),
    ],
    "idle_gaps_check": [
        ("input not sorted", """
def idle_gaps(ranges, min_gap_us):
    gaps, reached = [], None
    for start, end in ranges:
        if reached is not None and start - reached >= min_gap_us and start > reached:
            gaps.append((reached, start))
        reached = end if reached is None else max(reached, end)
    return gaps
""", r"sort them by start"),
        ("an overlap reported as a negative gap", """
def idle_gaps(ranges, min_gap_us):
    ranges = sorted(ranges)
    return [(a_end, b_start) for (_, a_end), (b_start, _) in zip(ranges, ranges[1:])
            if b_start - a_end >= min_gap_us or b_start < a_end]
""", r"negative gap"),
        ("nested ranges taken as top-level", """
def idle_gaps(ranges, min_gap_us):
    ranges = sorted(ranges)
    return [(a_end, b_start) for (_, a_end), (b_start, _) in zip(ranges, ranges[1:]) if b_start - a_end >= min_gap_us]
""", r"nested inside"),
        ("strictly longer than min_gap_us", """
def idle_gaps(ranges, min_gap_us):
    gaps, reached = [], None
    for start, end in sorted(ranges):
        if reached is not None and start - reached > min_gap_us:
            gaps.append((reached, start))
        reached = end if reached is None else max(reached, end)
    return gaps
""", r"exactly min_gap_us"),
    ],
    "fixed_loader_check": [
        ("num_workers=0", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=0, pin_memory=device.type == "cuda")
""", r"num_workers=0"),
        ("one worker", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=1, persistent_workers=True,
                      pin_memory=device.type == "cuda", multiprocessing_context="fork")
""", r"num_workers=1"),
        ("pin_memory=True without CUDA", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=2, persistent_workers=True, pin_memory=True,
                      multiprocessing_context="fork")
""", r"pins memory \(pin_memory=True\) for a CPU device"),
        ("shuffle changed", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=2, persistent_workers=True,
                      pin_memory=device.type == "cuda", multiprocessing_context="fork")
""", r"shuffles"),
        ("drop_last changed", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, drop_last=True, num_workers=2, persistent_workers=True,
                      pin_memory=device.type == "cuda", multiprocessing_context="fork")
""", r"drop_last=True"),
        ("workers restarted every epoch", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=2, pin_memory=device.type == "cuda",
                      multiprocessing_context="fork")
""", r"persistent_workers=True"),
        ("never pins, even for CUDA", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=2, persistent_workers=True,
                      multiprocessing_context="fork")
""", r"does not pin memory"),
    ],
}
