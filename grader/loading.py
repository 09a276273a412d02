"""A data set that waits like storage does, and a stopwatch for a training loop fed by a DataLoader.

The data set lives here, in the package, not in a notebook: DataLoader workers
started with "spawn" (macOS's default) or "forkserver" (Linux's default from
Python 3.14) import the data set by name, and cannot import anything a notebook
defined. With "fork" (Linux) the workers are copies of the notebook's process.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
import warnings
from typing import Callable

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from grader.shortcuts import course_only


class SlowDataset(Dataset):
    """`n` items; each `__getitem__` sleeps `item_seconds` (a disk or network read: waiting, not computing).

    Item i is (features, i): a float vector (features,) that depends only on i, and i itself.
    """

    def __init__(self, n: int, item_seconds: float = 0.002, features: int = 32):
        self.n, self.item_seconds, self.features = n, item_seconds, features

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        if self.item_seconds:
            time.sleep(self.item_seconds)
        return torch.arange(self.features, dtype=torch.float32) / self.features + i, i


def slow_loader(dataset: Dataset, batch_size: int) -> DataLoader:
    """The loader the lesson starts from: the main process reads every item itself, in order."""
    return DataLoader(dataset, batch_size=batch_size)


def start_method() -> str | None:
    """"fork" on Linux (fast to start, sees everything the notebook defined); None (the platform's default) elsewhere."""
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return "fork"
    return None


def settings(loader: DataLoader) -> dict:
    """A DataLoader's settings as plain data: workers, batch size, order, pinning, prefetch, start method."""
    context = loader.multiprocessing_context
    return {
        "num_workers": int(loader.num_workers),
        "batch_size": loader.batch_size,
        "shuffle": isinstance(loader.sampler, RandomSampler),
        "drop_last": bool(loader.drop_last),
        "pin_memory": bool(loader.pin_memory),
        "persistent_workers": bool(loader.persistent_workers),
        "prefetch_factor": loader.prefetch_factor,
        "start_method": None if context is None else context.get_start_method(),
    }


def close(loader: DataLoader) -> None:
    """Stop a loader's persistent workers now, rather than whenever the loader is garbage-collected."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    if hasattr(loader, "_iterator"):
        loader._iterator = None


def timed_epoch(loader: DataLoader, compute: Callable[[torch.Tensor], object], steps: int | None = None) -> dict:
    """Run `compute(batch)` on each batch; per step the seconds spent waiting in next() and computing.

    Returns {"wait_s": [...], "compute_s": [...], "compute_intervals": [(start, end), ...], "start": t0, "end": t1},
    times in seconds from the first request for a batch (its wait included).
    """
    waits, computes, intervals = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that more workers than cores may be slow (sleeping workers need no core)
        batches = iter(loader)  # with persistent workers: tells them a new epoch starts
        t0 = time.perf_counter()
        while steps is None or len(waits) < steps:
            before = time.perf_counter()
            try:
                x, _ = next(batches)
            except StopIteration:
                break
            got = time.perf_counter()
            compute(x)
            done = time.perf_counter()
            waits.append(got - before)
            computes.append(done - got)
            intervals.append((got - t0, done - t0))
        end = time.perf_counter() - t0
        del batches
    return {"wait_s": waits, "compute_s": computes, "compute_intervals": intervals, "start": 0.0, "end": end}


# Lesson 05's IDLE_GUESS reveal cell profiles the loop fed by this loader: a copy test ran that cell's body before
# guessing. It is course_only and watched by IDLE_GUESS: called from a cell before the first guess, it is a reveal.
@course_only("grader.loading.with_workers")
def with_workers(loader: DataLoader, num_workers: int) -> DataLoader:
    """A loader like `loader` (same data set, batch size, order, pinning, prefetch, start method) with `num_workers` workers."""
    extra = {}
    if num_workers:
        extra = {"persistent_workers": True, "prefetch_factor": loader.prefetch_factor or 2,
                 "multiprocessing_context": loader.multiprocessing_context or start_method()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that more workers than cores may be slow (sleeping workers need no core)
        return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=loader.sampler,
                          drop_last=loader.drop_last, pin_memory=loader.pin_memory, num_workers=num_workers, **extra)
