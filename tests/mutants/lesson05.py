"""Mutants for lesson 05 (reading the machine)."""

# MFU_GUESS's model counts kernels and FLOPs on the CPU, the same on every machine: no MEASURED context.

LESSON = "05_reading_the_machine"

_FAULTS = '{"hw_thermal_slowdown", "sw_thermal_slowdown", "hw_slowdown", "hw_power_brake_slowdown"}'
_LASTING = '{k for k, v in r["reasons"].items() if v >= 0.5}'


def _diagnose(memory: str = 'r["peak_allocated_mib"] / r["total_mib"] >= 0.9',
              waiting: str = 'r["util_pct"] < 50',
              slowed: str = f'{_FAULTS} & {_LASTING}',
              tiny: str = 'r["power_w"] / r["power_limit_w"] < 0.5',
              extra: str = "", util_first: bool = False) -> str:
    """The reference diagnose with one rule changed: each mutant below is one mistake."""
    first, second = ("waiting", waiting), ("near-oom", memory)
    order = [first, second] if util_first else [second, first]
    lines = [f"    if {cond}: return {answer!r}" for answer, cond in order] + [extra]
    lines += [f"    if {slowed}: return 'slowed'", f"    if {tiny}: return 'tiny-kernels'", "    return 'busy'"]
    return "def diagnose(r):\n" + "\n".join(line for line in lines if line) + "\n"


_LOADER_HEAD = """
import math
import torch
from torch.utils.data import DataLoader
def fixed_loader(dataset, batch_size, device, step_seconds):
    k = math.ceil(batch_size * dataset.item_seconds / step_seconds)
"""

_FIXED = ("persistent_workers=True, pin_memory=device.type == 'cuda', multiprocessing_context='fork'")

_COVERED = """
def covered(ranges, start, end):
    total, reached = 0.0, start
    for a, b in sorted(ranges):
        a, b = max(a, reached), min(b, end)
        if b > a:
            total, reached = total + b - a, b
    return total
"""


def _sweep(order: str = "sorted(compute)", reach: str = "max(reached, b)") -> str:
    """A walk through the compute ranges that collects the idle gaps, with one line changed: each use is one mistake."""
    return _COVERED + f"""
def idle_by_cause(compute, loading, start, end):
    gaps, reached = [], start
    for a, b in {order}:
        if a > reached:
            gaps.append((reached, min(a, end)))
        reached = {reach}
    if reached < end:
        gaps.append((reached, end))
    waiting = sum(covered(loading, a, b) for a, b in gaps)
    return waiting, sum(b - a for a, b in gaps) - waiting
"""

_MFU = """
def mfu(model, batch, seq_len, step_seconds, peaks, dtype):
    skip = {{id(model.positions.weight)}} if hasattr(model, "positions") else set()
    n = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    return {k} * n * batch * seq_len / step_seconds / peaks[dtype]
"""

# the right count (each matmul: forward, its weight's gradient if trained, its input's if a trained parameter lies
# below), with {weight}, {inp} and {per} to make it wrong
_MFU_COUNT = """
import torch

def mfu(model, batch, seq_len, step_seconds, peaks, dtype):
    steps = [(isinstance(m, torch.nn.Linear) and name == "weight", p)
             for m in model.modules() for name, p in m.named_parameters(recurse=False)]
    if hasattr(model, "tokens"):
        steps.append((True, model.tokens.weight))
    flops, below = 0, False
    for multiplies, p in steps:
        if multiplies{skip}:
            flops += 2 * p.numel() * (1 + {weight} + {inp})
        below = below or p.requires_grad
    return {per} * flops * batch * seq_len / step_seconds / peaks[dtype]
"""


def _count(weight="p.requires_grad", inp="below", per="1", skip=""):
    return _MFU_COUNT.format(weight=weight, inp=inp, per=per, skip=skip)


MUTANTS = {
    "diagnose_check": [
        ("nvidia-smi's memory used taken as the OOM signal", _diagnose(memory='r["smi_used_mib"] / r["total_mib"] >= 0.95'),
         r"you read nvidia-smi's memory.used"),
        ("power at the cap called a fault", _diagnose(extra='    if r["power_w"] / r["power_limit_w"] >= 0.95: return "slowed"'),
         r"you called a high power draw a fault"),
        ("a clock below its maximum called a fault", _diagnose(slowed='r["sm_mhz"] < r["max_sm_mhz"]'),
         r"says the chip slowed, not why"),
        ("any clock event reason called a fault", _diagnose(slowed=f'{_LASTING} - {{"gpu_idle"}}'),
         r"the healthy state of dense work"),
        ("a reason that flashed once called a fault", _diagnose(slowed=f'{_FAULTS} & set(r["reasons"])'),
         r"a fault is a reason\s+that persists"),
        ("only the thermal reasons read", _diagnose(slowed='{"hw_thermal_slowdown", "sw_thermal_slowdown"} & '
                                                          f'{_LASTING}'),
         r"not thermal by name, but they are faults"),
        ("high utilisation called busy without looking at power", _diagnose(tiny="False"),
         r"high utilisation alone does not mean"),
        ("absolute watts instead of the share of the limit", _diagnose(tiny='r["power_w"] < 350'),
         r"you compared absolute watts"),
        ("power share read before the event reasons",
         _diagnose(extra='    if r["power_w"] / r["power_limit_w"] < 0.5: return "tiny-kernels"'),
         r"you read the power share before"),
        ("event reasons never read", _diagnose(slowed="False"), r"a thermal slowdown is active"),
        ("utilisation read before memory", _diagnose(util_first=True), r"read the utilisation before the memory"),
        ("power read before utilisation (r25: told util_pct is a percent)",
         "def diagnose(r):\n"
         "    if r['peak_allocated_mib'] / r['total_mib'] >= 0.9: return 'near-oom'\n"
         f"    if {_FAULTS} & {_LASTING}: return 'slowed'\n"
         "    if r['power_w'] / r['power_limit_w'] < 0.5: return 'tiny-kernels'\n"
         "    if r['util_pct'] < 50: return 'waiting'\n"
         "    return 'busy'\n", r"an idle GPU draws little power too"),
        ("memory read after the clock and the power (r24: the verdicts' list taken as the order)",
         "def diagnose(r):\n"
         f"    if {_FAULTS} & {_LASTING}: return 'slowed'\n"
         "    if r['util_pct'] >= 50 and r['power_w'] / r['power_limit_w'] < 0.5: return 'tiny-kernels'\n"
         "    if r['peak_allocated_mib'] / r['total_mib'] >= 0.9: return 'near-oom'\n"
         "    if r['util_pct'] < 50: return 'waiting'\n"
         "    return 'busy'\n", r"near an OOM whatever else the reading says"),
        ("utilisation as a fraction", _diagnose(waiting='r["util_pct"] < 0.5'), r"util_pct is a percent"),
        ("power share compared as a percent", _diagnose(tiny='r["power_w"] / r["power_limit_w"] < 50'),
         r"a\s+fraction \(0 to 1\), not a percent"),
        ("torch's peak compared as a percent", _diagnose(memory='r["peak_allocated_mib"] / r["total_mib"] >= 90'),
         r"their ratio is a fraction of the card"),
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
        ("merged in the order the profile listed them", """
def busy_fraction(intervals, start, end):
    busy, reached = 0.0, start
    for a, b in intervals:
        a, b = max(a, reached), min(b, end)
        if b > a:
            busy += b - a
            reached = b
    return busy / (end - start)
""", r"reads the intervals in the order they come"),
    ],
    "top_ops_check": [
        ("sorted by total time", """
def top_ops(rows, n):
    ops = [r for r in rows if not r["is_label"] and r["device_type"] == "CPU"]
    return [r["name"] for r in sorted(ops, key=lambda r: r["total_us"], reverse=True)[:n]]
""", r"sorted by total time"),
        ("ascending", """
def top_ops(rows, n):
    ops = [r for r in rows if not r["is_label"] and r["device_type"] == "CPU"]
    return [r["name"] for r in sorted(ops, key=lambda r: r["self_us"])[:n]]
""", r"cost least come first"),
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
    ops = [r for r in rows if not r["is_label"] and r["device_type"] == "CPU"]
    return [r["name"] for r in sorted(ops, key=lambda r: r["calls"], reverse=True)[:n]]
""", r"sorted by number of calls"),
        ("sorts the caller's rows in place", """
def top_ops(rows, n):
    rows.sort(key=lambda r: r["calls"], reverse=True)
    return [r["name"] for r in rows if not r["is_label"]][:n]
""", r"sorted by number of calls"),
        ("a CUDA profile's kernel rows kept beside their operators", """
def top_ops(rows, n):
    ops = [r for r in rows if not r["is_label"]]
    return [r["name"] for r in sorted(ops, key=lambda r: r["self_us"], reverse=True)[:n]]
""", r"counts one matmul twice"),
        ("a CUDA profile's device labels kept", """
def top_ops(rows, n):
    ops = [r for r in rows if not (r["is_label"] and r["device_type"] == "CPU") and r["device_type"] == "CPU"
           or r["device_type"] == "CUDA" and r["is_label"]]
    return [r["name"] for r in sorted(ops, key=lambda r: r["self_us"], reverse=True)[:n]]
""", r"each label has a row on the device side too"),
        ("the kernels listed instead of their operators", """
def top_ops(rows, n):
    ops = [r for r in rows if not r["is_label"] and (r["device_type"] == "CUDA" or
                                                    not any(x["device_type"] == "CUDA" for x in rows))]
    return [r["name"] for r in sorted(ops, key=lambda r: r["self_us"], reverse=True)[:n]]
""", r"it names kernels"),
    ],
    "idle_by_cause_check": [
        ("loading that overlaps compute counted as idle", _COVERED + """
def idle_by_cause(compute, loading, start, end):
    idle = (end - start) - covered(compute, start, end)
    waiting = covered(loading, start, end)
    return waiting, idle - waiting
""", r"you counted loading time that overlaps compute as idle"),
        ("overlapping compute ranges summed, not merged", _COVERED + """
def idle_by_cause(compute, loading, start, end):
    busy = sum(max(0.0, min(b, end) - max(a, start)) for a, b in compute)
    other = (end - start) - covered(compute + loading, start, end)
    return (end - start) - busy - other, other
""", r"counted their common part twice"),
        ("ranges not clipped to the window", """
def idle_by_cause(compute, loading, start, end):
    def covered(ranges):
        total, reached = 0.0, float("-inf")
        for a, b in sorted(ranges):
            a = max(a, reached)
            if b > a:
                total, reached = total + b - a, b
        return total
    idle = (end - start) - covered(compute)
    other = (end - start) - covered(compute + loading)
    return idle - other, other
""", r"ranges that stick out of the window"),
        ("ranges walked in the order given", _sweep(order="compute"), r"depends on\s+the order a profile lists"),
        ("a nested range ends the busy stretch", _sweep(reach="b"), r"while the outer range still ran"),
        ("every idle moment blamed on the loader", _COVERED + """
def idle_by_cause(compute, loading, start, end):
    return (end - start) - covered(compute, start, end), 0.0
""", r"you blamed all the idle time on the loader"),
        ("only the gaps between compute ranges (idle_gaps reused)", _COVERED + """
def idle_by_cause(compute, loading, start, end):
    ranges = sorted(compute)
    gaps, reached = [], None
    for a, b in ranges:
        if reached is not None and a > reached:
            gaps.append((reached, a))
        reached = b if reached is None else max(reached, b)
    waiting = sum(covered(loading, a, b) for a, b in gaps)
    return waiting, sum(b - a for a, b in gaps) - waiting
""", r"only the gaps between compute ranges"),
        ("idle split in proportion to the loader's share (busy_fraction reused)", """
def idle_by_cause(compute, loading, start, end):
    idle = (1 - busy_fraction(compute, start, end)) * (end - start)
    return idle * busy_fraction(loading, start, end), idle * (1 - busy_fraction(loading, start, end))
""", r"in proportion to the share of the window the loader ran"),
        ("the two numbers swapped", _COVERED + """
def idle_by_cause(compute, loading, start, end):
    idle = (end - start) - covered(compute, start, end)
    other = (end - start) - covered(compute + loading, start, end)
    return other, idle - other
""", r"the two numbers are swapped"),
    ],
    "fixed_loader_check": [
        ("num_workers=0", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=0, pin_memory=device.type == "cuda")
""", r"num_workers=0"),
        ("two workers whatever the ratio", _LOADER_HEAD + f"""
    return DataLoader(dataset, batch_size=batch_size, num_workers=2, {_FIXED})
""", r"too few, so the batches arrive slower.*Each worker reads one whole batch"),
        ("workers rounded down", _LOADER_HEAD + f"""
    k = max(1, math.floor(batch_size * dataset.item_seconds / step_seconds))
    return DataLoader(dataset, batch_size=batch_size, num_workers=k, {_FIXED})
""", r"too few, so the batches arrive slower than the loop takes them"),
        ("one item's read time, not a batch's", _LOADER_HEAD + f"""
    k = math.ceil(dataset.item_seconds / step_seconds)
    return DataLoader(dataset, batch_size=batch_size, num_workers=k, {_FIXED})
""", r"from one item's read time"),
        ("sixteen workers whatever the ratio", _LOADER_HEAD + f"""
    return DataLoader(dataset, batch_size=batch_size, num_workers=16, {_FIXED})
""", r"keep up"),
        ("pin_memory=True without CUDA", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=k, persistent_workers=True, pin_memory=True,
                      multiprocessing_context="fork")
""", r"pins memory \(pin_memory=True\) for a CPU device"),
        ("shuffle changed", _LOADER_HEAD + f"""
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=k, {_FIXED})
""", r"shuffles"),
        ("drop_last changed", _LOADER_HEAD + f"""
    return DataLoader(dataset, batch_size=batch_size, drop_last=True, num_workers=k, {_FIXED})
""", r"drop_last=True"),
        ("workers restarted every epoch", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=k, pin_memory=device.type == "cuda",
                      multiprocessing_context="fork")
""", r"persistent_workers=False"),
        ("never pins, even for CUDA", _LOADER_HEAD + """
    return DataLoader(dataset, batch_size=batch_size, num_workers=k, persistent_workers=True,
                      multiprocessing_context="fork")
""", r"does not pin memory"),
    ],
    "mfu_check": [
        ("2N instead of 6N for training", _MFU.format(k=2), r"the forward pass alone"),
        ("4N: backward counted once", _MFU.format(k=4), r"backward as much work as the forward"),
        ("every parameter counted, the position table too", """
def mfu(model, batch, seq_len, step_seconds, peaks, dtype):
    n = sum(p.numel() for p in model.parameters())
    return 6 * n * batch * seq_len / step_seconds / peaks[dtype]
""", r"the position embeddings included"),
        ("the textbook 6N for every matmul weight, frozen or not", _MFU.format(k=6),
         r"model of two Linear layers, both trained, mfu counted the same work for every weight"),
        ("6 × the trained parameters only", """
def mfu(model, batch, seq_len, step_seconds, peaks, dtype):
    skip = {id(model.positions.weight)} if hasattr(model, "positions") else set()
    n = sum(p.numel() for p in model.parameters() if id(p) not in skip and p.requires_grad)
    return 6 * n * batch * seq_len / step_seconds / peaks[dtype]
""", r"model of four Linear layers, the first two frozen, mfu left the frozen parameters out altogether"),
        ("a frozen layer costs its forward only", _count(inp="(p.requires_grad and below)"),
         r"model of three Linear layers, the middle one frozen, mfu counted a frozen layer's forward pass and nothing more"),
        ("the data given a gradient", _count(inp="True"), r"counted a gradient for the input of a matmul that nothing"),
        ("the peak of the wrong dtype", _count().replace("peaks[dtype]", 'peaks["fp32"]'),
         r"divide by the peak of the format"),
        ("the highest peak whatever the dtype", _count().replace("peaks[dtype]", "max(peaks.values())"),
         r"divide by the peak of the format"),
        ("tokens counted per sequence", _count().replace("batch * seq_len", "batch"), r"one token per sequence"),
        ("the tokens of one sequence", _count().replace("batch * seq_len", "seq_len"), r"tokens of one sequence only"),
        ("a percent", _count(per="100"), r"returned a percent"),
        ("step time ignored", _count().replace(" / step_seconds", ""), r"ignored the step time"),
    ],
    "MFU_GUESS_check": [
        ("a percent, not a fraction", "MFU_GUESS = {'mfu': 20, 'why': 'a fifth of the peak'}\n", r"not a fraction"),
        ("the datasheet's promise", "MFU_GUESS = {'mfu': 0.9, 'why': 'matmuls run at peak'}\n", r"well above"),
        ("every CPU operator taken for a kernel, AdamW's loop per parameter too",
         "MFU_GUESS = {'mfu': 2.5e-6, 'why': 'two thousand operators of 10 us for 50 MFLOP'}\n", r"well below"),
    ],
    "IDLE_GUESS_check": [
        ("workers shrink every idle time",
         "IDLE_GUESS = {'shrinks': 'both', 'GPU idle share': 5 / 15, 'why': 'more processes, less idle'}\n",
         r"not the loader's, and no worker shortens it"),
        ("workers shrink the other idle time",
         "IDLE_GUESS = {'shrinks': 'other', 'GPU idle share': 5 / 15, 'why': 'the loop runs faster'}\n",
         r"can only\s+shorten the time the loop spends waiting"),
        ("the GPU keeps the synchronize",
         "IDLE_GUESS = {'shrinks': 'waiting', 'GPU idle share': 15 / 25, 'why': 'read, then compute'}\n",
         r"the GPU: it keeps the synchronize"),
        ("the GPU's busy share for its idle share",
         "IDLE_GUESS = {'shrinks': 'waiting', 'GPU idle share': 10 / 15, 'why': 'computes 10 of 15 ms'}\n",
         r"the GPU: that is the share in which the device computes"),
        ("the GPU's step as the read plus the kernels",
         "IDLE_GUESS = {'shrinks': 'waiting', 'GPU idle share': 5 / 25, 'why': '5 ms of waiting in 25'}\n",
         r"the GPU: it makes a step last the read plus the kernels"),
        ("the GPU never idle without the synchronize",
         "IDLE_GUESS = {'shrinks': 'waiting', 'GPU idle share': 0, 'why': 'async hides the loader'}\n",
         r"the GPU: the device still waits"),
        ("the GPU's idle share in percent",
         "IDLE_GUESS = {'shrinks': 'waiting', 'GPU idle share': 100 * 5 / 15, 'why': 'a third'}\n",
         r"write a share from 0 to 1"),
    ],
}
