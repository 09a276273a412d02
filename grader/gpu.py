"""The course's CUDA-only code, in one place, so one script can exercise all of it on a GPU.

Nothing here is needed on the CPU, and the tests never call it with CUDA; each
function refuses clearly when CUDA is missing. scripts/gpu_run.py calls every
function and records what it measures in data/recorded/ with its provenance.
"""

from __future__ import annotations

import statistics
import warnings
from typing import Callable

import torch


def require_cuda() -> torch.device:
    """The current CUDA device, or a clear error where there is none."""
    if not torch.cuda.is_available():
        raise RuntimeError("this needs an NVIDIA GPU with CUDA; torch.cuda.is_available() is False here")
    return torch.device("cuda", torch.cuda.current_device())


def event_seconds(fn: Callable[[], object], warmup: int = 3, repeats: int = 20) -> float:
    """Median seconds per call of `fn` measured with CUDA events (device time, not host time)."""
    require_cuda()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)  # ms -> s
    return statistics.median(samples)


def sync_debug_count(fn: Callable[[], object]) -> int:
    """How many synchronizing CUDA calls `fn` makes, as torch.cuda.set_sync_debug_mode("warn") reports them."""
    require_cuda()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
            torch.cuda.synchronize()
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    return sum(1 for w in caught if "synchroniz" in str(w.message).lower())


def allocator_figures() -> dict[str, int]:
    """Allocated, reserved and peak bytes from torch's CUDA caching allocator."""
    device = require_cuda()
    return {
        "allocated": torch.cuda.memory_allocated(device),
        "reserved": torch.cuda.memory_reserved(device),
        "peak_allocated": torch.cuda.max_memory_allocated(device),
        "total": torch.cuda.get_device_properties(device).total_memory,
    }


def pinned_copy_seconds(nbytes: int, repeats: int = 10) -> dict[str, float]:
    """Host-to-device copy time of `nbytes` from pageable memory and from pinned memory with non_blocking."""
    device = require_cuda()
    n = nbytes // 4
    pageable = torch.empty(n, dtype=torch.float32)
    pinned = torch.empty(n, dtype=torch.float32).pin_memory()
    return {
        "pageable": event_seconds(lambda: pageable.to(device), repeats=repeats),
        "pinned_non_blocking": event_seconds(lambda: pinned.to(device, non_blocking=True), repeats=repeats),
    }


def autocast_matmul_seconds(n: int, dtype: torch.dtype) -> float:
    """Median seconds of an n×n float32 matmul run under CUDA autocast to `dtype` (fp16 or bf16)."""
    device = require_cuda()
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)

    def op():
        with torch.autocast("cuda", dtype=dtype):
            return a @ b

    return event_seconds(op)


def grad_scaler_steps(steps: int = 20) -> list[float]:
    """The scale torch.amp.GradScaler("cuda") holds after each of `steps` fp16 training steps on a small model."""
    device = require_cuda()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cuda")
    x, y = torch.randn(256, 64, device=device), torch.randn(256, 1, device=device)
    scales = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(float(scaler.get_scale()))
    return scales
