"""The course's reference timer, beside torch.utils.benchmark.

`measure` is what the lessons trust: warm-up calls, a synchronize before every
clock read, the median of the repeats. `benchmark_median` asks
torch.utils.benchmark the same question, so a lesson can show the two agree.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Timing:
    """Seconds per call: every timed sample, and their median and spread."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """Interquartile range over the median: 0.05 means the middle half agree within 5%."""
        if len(self.samples) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return (q3 - q1) / self.median if self.median else 0.0


def measure(fn: Callable[[], object], sync: Callable[[], None], warmup: int = 2, repeats: int = 7) -> Timing:
    """Time `fn`: `warmup` untimed calls, then `repeats` calls each synchronized before the clock."""
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))


def benchmark_median(fn: Callable[[], object], min_run_time: float = 0.2) -> float:
    """Median seconds per call of `fn` according to torch.utils.benchmark (it synchronizes CUDA itself)."""
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def unsynchronized(fn: Callable[[], object], repeats: int = 7) -> Timing:
    """The wrong way, kept for demonstration: the clock is read without waiting for the device."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))


def format_seconds(seconds: float) -> str:
    """1.2e-5 -> '12.0 µs'; picks ns, µs, ms or s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale or unit == "ns":
            return f"{seconds / scale:.1f} {unit}"
    return f"{seconds} s"
