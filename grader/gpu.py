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


def copy_compute_overlap(nbytes: int, n: int, repeats: int = 10) -> dict[str, float]:
    """Median seconds (CUDA events) of a pinned non_blocking copy of `nbytes` and an n×n matmul: alone, on one stream, and with the copy on a side stream.

    On one stream the copy and the matmul run in order, so "one stream" is about copy + matmul
    however the copy was asked for. On a side stream the copy engine moves the bytes while the
    matmul runs on the main stream: "side stream" is about the longer of the two.
    """
    device = require_cuda()
    host = torch.empty(max(nbytes // 4, 1), dtype=torch.float32).pin_memory()  # page-locked: DMA can read it
    a = torch.randn(n, n, device=device)
    main = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)

    def copy_only():
        host.to(device, non_blocking=True)

    def matmul_only():
        a @ a

    def one_stream():
        host.to(device, non_blocking=True)  # queued on the main stream: the matmul starts after it
        a @ a

    def side_stream():
        side.wait_stream(main)  # the copy starts after what the main stream queued before it
        with torch.cuda.stream(side):
            x = host.to(device, non_blocking=True)
        a @ a  # main stream, beside the copy
        main.wait_stream(side)  # nothing on the main stream may use x before the copy is done
        x.record_stream(main)  # x was allocated on the side stream and is used on main: tell the allocator

    return {name: event_seconds(fn, repeats=repeats) for name, fn in
            (("copy", copy_only), ("matmul", matmul_only), ("one stream", one_stream), ("side stream", side_stream))}


def early_host_read(n: int = 4096) -> dict[str, bool]:
    """A non_blocking copy to pinned host memory, read before and after an event says it arrived: did each read see the result?"""
    device = require_cuda()
    a = torch.randn(n, n, device=device)
    out = torch.zeros(n, dtype=torch.float32).pin_memory()
    torch.cuda.synchronize()
    result = (a @ a).sum(dim=1)  # queued: the device is still busy when the next line runs
    out.copy_(result, non_blocking=True)  # queued too; returns at once
    early = out.clone()  # read on the host without waiting: may still be zeros
    arrived = torch.cuda.Event()
    arrived.record()
    arrived.synchronize()  # the host waits for the copy
    want = result.cpu()
    return {"read before the event matched": bool(torch.equal(early, want)),
            "read after the event matched": bool(torch.equal(out, want))}


# --- lesson 05: nvidia-smi traces and a CUDA profile ----------------------------------------------------------


def smi_sample() -> dict:
    """One nvidia-smi reading now: util_pct, power_w, power_limit_w, mem_used_mib, mem_total_mib, sm_mhz, max_sm_mhz,
    reasons; a field this driver does not know, or a MIG instance does not report ([N/A]), is None."""
    import subprocess

    from grader import profiling

    require_cuda()
    fields = profiling.smi_fields()
    command = [c for c in profiling.smi_command(fields=fields) if not c.startswith("--loop-ms")]
    out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
    rows = profiling.parse_smi(out.stdout, fields)
    if not rows:
        raise RuntimeError(f"nvidia-smi printed nothing the course can read: {out.stdout[:200]!r}")
    return rows[0]


def smi_trace(work: Callable[[], object], seconds: float = 3.0, interval_ms: int = 100) -> list[dict]:
    """Call `work()` over and over for `seconds` while nvidia-smi samples every `interval_ms`; the parsed samples."""
    import subprocess
    import tempfile
    import time

    from grader import profiling

    require_cuda()
    fields = profiling.smi_fields()  # the fields this driver knows: one unknown field fails the whole query
    with tempfile.TemporaryFile(mode="w+") as log:
        sampler = subprocess.Popen(profiling.smi_command(interval_ms, fields), stdout=log, stderr=subprocess.DEVNULL,
                                   text=True)
        try:
            time.sleep(2 * interval_ms / 1e3)  # a sample or two of the idle card first
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                work()
            torch.cuda.synchronize()
            time.sleep(2 * interval_ms / 1e3)
        finally:
            sampler.terminate()
            sampler.wait(timeout=10)
        log.seek(0)
        return profiling.parse_smi(log.read(), fields)


def smi_workloads(device: torch.device) -> dict[str, Callable[[], object]]:
    """The four workloads lesson 05 shows: a starved loader, tiny kernels, a big bf16 matmul, big bf16 adds."""
    from grader import loading

    dataset = loading.SlowDataset(10_000, item_seconds=0.002, features=1024)
    batches = iter(loading.slow_loader(dataset, 16))
    weight = torch.randn(1024, 1024, device=device)
    tiny = torch.zeros(1, device=device)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    x = torch.randn(2**28, device=device, dtype=torch.bfloat16)  # 512 MiB each
    y = torch.randn(2**28, device=device, dtype=torch.bfloat16)

    def starved():
        features, _ = next(batches)
        (features.to(device) @ weight).sum().item()

    def tiny_kernels():
        for _ in range(1000):
            tiny.add_(1)
        torch.cuda.synchronize()

    def matmul():
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()

    def adds():
        for _ in range(10):
            x + y
        torch.cuda.synchronize()

    return {"starved loader": starved, "tiny kernels": tiny_kernels, "bf16 matmul 8192²": matmul,
            "big bf16 adds": adds}


def cuda_transformer_profile(steps: int = 2) -> dict:
    """One profiled training step (after a warm-up) of the course's small transformer with CUDA activity: rows and device busy share."""
    from grader import profiling
    from grader.transformer import Shape, TinyGPT, batch_of_tokens

    device = require_cuda()
    shape = Shape(n_layers=4, d_model=256, n_heads=8, d_ff=1024, vocab_size=4096, max_seq_len=256, dropout=0.1)
    net = TinyGPT(shape).to(device)
    opt = torch.optim.AdamW(net.parameters())
    tokens = batch_of_tokens(shape, 8, 256, device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.profiler.record_function("forward"):
            loss = torch.nn.functional.cross_entropy(net(tokens).flatten(0, 1), tokens.flatten())
        with torch.profiler.record_function("backward"):
            loss.backward()
        with torch.profiler.record_function("optimizer"):
            opt.step()
        torch.cuda.synchronize()

    prof = profiling.profile_steps(step, steps=steps, device=device)
    return profile_figures(prof, steps)


def profile_figures(prof, steps: int) -> dict:
    """A CUDA profile as the recording keeps it: rows by device self time, the device's busy share of the steps.

    Busy time is the union of the kernels' device intervals inside the profiled steps' window (ProfilerStep's
    host ranges), never the host's ranges; works on any profile-like object (a test passes a constructed one).
    """
    from grader import profiling

    loop = profiling.loop_ranges(prof, use_device=True)
    start, end = loop["window"]
    covered, reached = 0.0, start
    for a, b in sorted(loop["compute"]):
        a, b = max(a, reached), min(b, end)
        if b > a:
            covered, reached = covered + b - a, b
    busy = covered / (end - start) if end > start else None
    rows = sorted(profiling.rows(prof, use_device=True), key=lambda r: -r["self_us"])[:40]
    return {"profile_rows": rows, "device_busy_fraction": busy, "steps": steps,
            "kernels_per_step": profiling.launches(profiling.rows(prof, use_device=True), steps),
            "shape": {"n_layers": 4, "d_model": 256, "batch": 8, "seq": 256}}


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
