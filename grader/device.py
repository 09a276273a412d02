"""Which device the course runs on, how to wait for it, and what is in its memory.

One place for CUDA, Apple's MPS and the CPU. Lessons call `pick_device` once and
pass the device around; nothing else in the course asks torch which backend is up.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Callable

import torch


def available() -> list[str]:
    """Device types usable here, best first ("cuda", "mps", "cpu")."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    found.append("cpu")
    return found


def pick_device(prefer: str = "auto") -> torch.device:
    """The device to use: `prefer` if it is usable, or the best one here for "auto"."""
    prefer = (prefer or "auto").lower()
    usable = available()
    if prefer == "auto":
        return torch.device(usable[0])
    kind = prefer.split(":")[0]
    if kind not in usable:
        raise RuntimeError(
            f"device {prefer!r} was asked for but this machine has only {usable}. "
            "Use device='auto' to take the best one available."
        )
    return torch.device(prefer)


def synchronize(device: torch.device | str) -> None:
    """Block until all work queued on `device` has finished (a no-op on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def sync_fn(device: torch.device | str) -> Callable[[], None]:
    """A zero-argument synchronize for `device`, the shape `time_op` takes."""
    device = torch.device(device)
    return lambda: synchronize(device)


def is_async(device: torch.device | str) -> bool:
    """True where launching work returns before the work is done (CUDA, MPS)."""
    return torch.device(device).type in ("cuda", "mps")


@dataclass(frozen=True)
class MemoryFigures:
    """What the allocator reports, in bytes; None where this backend cannot tell."""

    allocated: int | None
    reserved: int | None
    peak_allocated: int | None
    total: int | None


def memory(device: torch.device | str) -> MemoryFigures:
    """Allocated, reserved, peak and total memory of `device` from torch's allocator."""
    device = torch.device(device)
    if device.type == "cuda":
        return MemoryFigures(
            allocated=torch.cuda.memory_allocated(device),
            reserved=torch.cuda.memory_reserved(device),
            peak_allocated=torch.cuda.max_memory_allocated(device),
            total=torch.cuda.get_device_properties(device).total_memory,
        )
    if device.type == "mps":
        # torch.mps documents current_allocated_memory and driver_allocated_memory;
        # it keeps no peak counter, and the total is the machine's unified memory.
        total = getattr(torch.mps, "recommended_max_memory", lambda: None)()
        return MemoryFigures(
            allocated=torch.mps.current_allocated_memory(),
            reserved=torch.mps.driver_allocated_memory(),
            peak_allocated=None,
            total=total,
        )
    return MemoryFigures(allocated=None, reserved=None, peak_allocated=None, total=None)


def reset_peak(device: torch.device | str) -> None:
    """Start a new peak-memory measurement where the backend keeps one (CUDA)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def name(device: torch.device | str) -> str:
    """A human name for the device: the GPU's model, or the CPU's."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple GPU (MPS) on {platform.machine()}"
    return platform.processor() or platform.machine() or "CPU"


_SIZE_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}


def last_level_cache_bytes(device: torch.device | str) -> int | None:
    """The device's last-level cache in bytes: a CUDA GPU's L2, the CPU's largest cache (Linux sysfs); None if unknown.

    A bandwidth measurement whose working set fits in it measures the cache, not the memory.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or None
    if device.type != "cpu":
        return None
    sizes = []
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(root)
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "size")) as f:
                text = f.read().strip()
        except OSError:
            continue
        unit = _SIZE_UNITS.get(text[-1:].upper(), 1)
        digits = text[:-1] if text[-1:].upper() in _SIZE_UNITS else text
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes) if sizes else None


def describe(device: torch.device | str) -> str:
    """One line saying what the lesson will run on, for the top of every notebook."""
    device = torch.device(device)
    line = f"device: {device} ({name(device)}), torch {torch.__version__}, {threads_label(torch.get_num_threads())}"
    if device.type == "cpu":
        line += ". No GPU here: GPU figures below are recorded runs or models from data/, labelled as such."
    return line


def cpu_threads() -> int:
    """How many cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


# At most this many threads by default: past it a lesson's small matmuls gain little and the machine gets noisy.
_MAX_DEFAULT_THREADS = 8


def default_threads(cores: int | None = None) -> int:
    """The CPU threads a lesson should give torch on this machine, so its timings stay legible.

    The contract of the lessons' `threads` parameter: `threads = 0` means "choose for me",
    i.e. `set_threads(0)` uses this number; any other value is used as given. On a small
    machine (4 cores or fewer) it is 1: the browser, JupyterLab and the kernel share those
    cores, and a matmul split over every core waits for whichever core the browser took,
    so small sizes jump from microseconds to milliseconds and the curves zig-zag. On a
    bigger machine it is half the cores (leaving the rest to everything else), at most 8.
    `cores` defaults to the cores this process may use (`cpu_threads()`).
    """
    cores = cpu_threads() if cores is None else int(cores)
    if cores <= 4:
        return 1
    return max(1, min(cores // 2, _MAX_DEFAULT_THREADS))


def set_threads(threads: int = 0) -> int:
    """Give torch `threads` CPU threads (0: `default_threads()`); returns the number now in use."""
    if threads < 0:
        raise ValueError(f"threads must be 0 (choose for this machine) or a positive number, not {threads}")
    torch.set_num_threads(threads or default_threads())
    return torch.get_num_threads()


def threads_label(threads: int | None = None) -> str:
    """"1 CPU thread", "4 CPU threads": torch's current count unless given, said in English."""
    threads = torch.get_num_threads() if threads is None else threads
    return f"{threads} CPU thread" + ("" if threads == 1 else "s")
