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

from grader.shortcuts import course_only


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

    @property
    def low(self) -> float:
        """The fastest sample, seconds."""
        return min(self.samples)

    @property
    def high(self) -> float:
        """The slowest sample, seconds."""
        return max(self.samples)

    def __float__(self) -> float:
        return float(self.median)


@course_only("grader.timing.measure")
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


@course_only("grader.timing.benchmark_median")
def benchmark_median(fn: Callable[[], object], min_run_time: float = 0.2) -> float:
    """Median seconds per call of `fn` according to torch.utils.benchmark (it synchronizes CUDA itself)."""
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


@course_only("grader.timing.unsynchronized")
def unsynchronized(fn: Callable[[], object], repeats: int = 7) -> Timing:
    """The wrong way, kept for demonstration: the clock is read without waiting for the device."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))


# A figure is rough when its slowest run took this many times its fastest, or its runs vary this much.
BUSY_RATIO = 3.0
BUSY_CV = 0.5


def _samples_of(measurement) -> tuple[float, ...]:
    """The samples of a Timing, or a plain sequence of seconds."""
    return tuple(float(x) for x in getattr(measurement, "samples", measurement))


def trust_note(samples, ratio: float = BUSY_RATIO, cv: float = BUSY_CV) -> str | None:
    """A plain sentence when the machine was too busy for these timings to be trusted, else None.

    `samples` is one measurement (a Timing or a sequence of seconds) or several (a list or
    dict of them, e.g. one per size of a figure); the worst one speaks. It is too busy when
    the slowest run took `ratio` times the fastest or more, or the runs' coefficient of
    variation (standard deviation over mean) is `cv` or more. Fewer than 3 runs say nothing.
    """
    if isinstance(samples, dict):
        samples = list(samples.values())
    if hasattr(samples, "samples"):
        groups = [_samples_of(samples)]
    else:
        items = list(samples)
        one = all(isinstance(x, (int, float)) for x in items)
        groups = [_samples_of(items)] if one else [_samples_of(m) for m in items]
    worst_ratio, worst_cv = 0.0, 0.0
    for group in groups:
        group = [x for x in group if x > 0]
        if len(group) < 3:
            continue
        worst_ratio = max(worst_ratio, max(group) / min(group))
        worst_cv = max(worst_cv, statistics.pstdev(group) / statistics.fmean(group))
    if worst_ratio < ratio and worst_cv < cv:
        return None
    return (f"This machine was busy while timing (the slowest run took {worst_ratio:.0f}× the fastest): "
            "treat these numbers as rough, or close other programs and run the cell again.")


def format_seconds(seconds: float) -> str:
    """1.2e-5 -> '12.0 µs'; picks ns, µs, ms or s."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale or unit == "ns":
            return f"{seconds / scale:.1f} {unit}"
    return f"{seconds} s"
