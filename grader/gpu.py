"""The course's CUDA-only code, in one place, so one script can exercise all of it on a GPU.

Nothing here is needed on the CPU, and the tests never call it with CUDA; each
function refuses clearly when CUDA is missing. scripts/gpu_run.py calls every
function and records what it measures in data/recorded/ with its provenance.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from grader import device as dev
from grader.timing import measure


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


def sync_warnings(fn: Callable[[], object]) -> list[str]:
    """Run `fn` under torch.cuda.set_sync_debug_mode("warn"); one message per synchronizing CUDA call."""
    require_cuda()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    return [str(w.message) for w in caught if "synchroniz" in str(w.message).lower()]


def sync_debug_count(fn: Callable[[], object]) -> int:
    """How many synchronizing CUDA calls `fn` makes, as torch.cuda.set_sync_debug_mode("warn") reports them."""
    return len(sync_warnings(fn))


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


def three_way_benchmark(n: int, iters: int, device: torch.device | str, repeats: int = 3) -> dict[str, float]:
    """Accelerator only (CUDA or MPS): seconds for `iters` n×n matmuls on the CPU, on the device copying every iteration, and resident.

    The copying version moves the input to the device and the result back each iteration,
    as a loop that keeps its data on the host does; the resident one copies once, before the clock.
    """
    device = torch.device(device)
    sync = dev.sync_fn(device)
    x_host = torch.randn(n, n)
    x_device = x_host.to(device)

    def cpu_only():
        for _ in range(iters):
            x_host @ x_host

    def copying():
        for _ in range(iters):
            x = x_host.to(device)
            (x @ x).cpu()

    def resident():
        for _ in range(iters):
            x_device @ x_device

    return {
        "CPU only": measure(cpu_only, lambda: None, warmup=1, repeats=repeats).median,
        "GPU, copying every iteration": measure(copying, sync, warmup=1, repeats=repeats).median,
        "GPU, data resident": measure(resident, sync, warmup=1, repeats=repeats).median,
    }


@dataclass(frozen=True)
class StepFigures:
    """Allocator figures around one training step, bytes."""

    allocated_before: int
    peak_allocated: int
    allocated_after: int
    reserved_after: int
    reserved_after_empty_cache: int


def cuda_step_figures(step: Callable[[], object], device: torch.device | str) -> StepFigures:
    """CUDA only: run `step()` once and read allocated, peak and reserved from torch's allocator."""
    device = torch.device(device)
    dev.synchronize(device)
    dev.reset_peak(device)
    before = dev.memory(device).allocated
    step()
    dev.synchronize(device)
    after = dev.memory(device)
    torch.cuda.empty_cache()
    return StepFigures(before, after.peak_allocated, after.allocated, after.reserved, dev.memory(device).reserved)


# --- lesson 06: mixed precision on a GPU --------------------------------------------------------


def amp_training_figures(device: torch.device | str | None = None, batch: int = 8, seq: int = 1024,
                         steps: int = 20, repeats: int = 10) -> dict:
    """CUDA only: one AdamW step of a GPT-2-small-shaped TinyGPT in fp32, tf32, bf16 and fp16 (GradScaler).

    For each format: seconds per step (CUDA events: median, min, max of `repeats` steps after
    warm-up), tokens per second, peak allocated bytes over a step, and the loss after `steps`
    steps on a fixed batch (to show the runs agree).
    """
    from grader import memory, specs
    from grader.transformer import TinyGPT, batch_of_tokens

    device = require_cuda() if device is None else torch.device(device)
    if device.type != "cuda":
        require_cuda()
        raise RuntimeError("amp_training_figures needs an NVIDIA GPU with CUDA")
    row = next(r for r in specs.load_models() if r["model"].startswith("GPT-2 small"))
    shape = memory.shape_from_row(row, seq=seq)
    tokens = batch_of_tokens(shape, batch, seq, device)
    targets = batch_of_tokens(shape, batch, seq, device, seed=1)
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    rows = []
    try:
        for fmt in ("fp32", "tf32", "bf16", "fp16"):
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = fmt == "tf32"
            torch.manual_seed(0)
            net = TinyGPT(shape).to(device)
            opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(fmt)
            scaler = torch.amp.GradScaler("cuda") if fmt == "fp16" else None

            def step():
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None):
                    logits = net(tokens)
                    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                             targets.reshape(-1))
                if scaler is None:
                    loss.backward()
                    opt.step()
                else:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
                return loss

            for _ in range(3):
                step()
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            samples = []
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            peak = torch.cuda.max_memory_allocated(device)
            loss = None
            for _ in range(steps):
                loss = step()
            median = statistics.median(samples)
            rows.append({"format": fmt, "step_seconds": median, "step_seconds_min": min(samples),
                         "step_seconds_max": max(samples), "tokens_per_second": batch * seq / median,
                         "peak_bytes": peak, "loss_after_steps": float(loss.detach())})
            net = opt = scaler = None  # free this format's model before the next is built
            torch.cuda.empty_cache()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous
    return {"model": row["model"], "batch": batch, "seq": seq, "steps": steps, "formats": rows}
