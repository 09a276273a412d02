"""Record a GPU run: every CUDA-only path the course has, and every lesson with GPU parameters.

On a machine with an NVIDIA GPU, from the course checkout:

    .venv/bin/python scripts/gpu_run.py            # writes data/recorded/<device>-<date>.json

The JSON holds the measured figures and their provenance (device, driver, CUDA,
torch, date, command). Lessons show these figures, labelled "recorded", when
they run where there is no GPU. Commit the file; never edit its numbers.

`--allow-cpu --out DIR` runs the same code paths that do not need CUDA, so the
script itself can be tested anywhere; it refuses to write a CPU run into
data/recorded/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import device as dev  # noqa: E402
from grader import timing  # noqa: E402

SIZES = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
QUICK_SIZES = [32, 64, 128, 256]
# Parameters each lesson runs with on a GPU: bigger problems than the CPU defaults.
GPU_PARAMETERS = {
    "01_crossover": {"sizes": SIZES, "large_n": 4096, "repeats": 11},
    # 05: MFU's peak on matmuls big enough to reach it (a 256² matmul with a sync per call times the launch)
    "05_reading_the_machine": {"loader_steps": 16, "profile_steps": 3, "peak_sizes": [4096, 8192]},
    # 06: matmuls that are not launch-bound, and a batch unlike the width, so no activation has a weight's shape
    "06_mixed_precision": {"time_width": 4096, "time_batch": 8192, "matmul_n": 8192, "repeats": 11},
    "09_serving": {"weights_over_cache": 8.0, "max_weights_mib": 16384, "batches": [1, 4, 16, 64, 256]},
}


def driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, if it is there."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def provenance(device: torch.device) -> dict:
    """Where and how these figures were measured."""
    return {
        "device": dev.name(device),
        "device_type": device.type,
        "driver": driver_version(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "measured_by": "scripts/gpu_run.py",
    }


def matmul_figures(device: torch.device, sizes: list[int]) -> dict:
    """Lesson 01: matmul seconds per size (synchronized), the unsynchronized illusion, launch cost."""
    sync = dev.sync_fn(device)
    seconds = {}
    for n in sizes:
        a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
        seconds[str(n)] = timing.measure(lambda: a @ b, sync, warmup=3, repeats=11).median
    big = sizes[-1]
    a, b = torch.randn(big, big, device=device), torch.randn(big, big, device=device)
    unsynced = timing.unsynchronized(lambda: a @ b, repeats=11).median
    sync()
    fresh = big - 1  # a shape nothing has used yet: the first call pays for setup
    c, d = torch.randn(fresh, fresh, device=device), torch.randn(fresh, fresh, device=device)
    cold = timing.measure(lambda: c @ d, sync, warmup=0, repeats=6).samples
    tiny = torch.ones(1, device=device)
    layer = torch.nn.Linear(1024, 1024, device=device)
    batches = {}
    with torch.no_grad():
        for batch in (1, 8, 64):
            x = torch.randn(batch, 1024, device=device)
            batches[str(batch)] = timing.measure(lambda: layer(x), sync, warmup=5, repeats=21).median
    return {
        "matmul_seconds": seconds,
        "matmul_unsynchronized_seconds": {str(big): unsynced},
        "first_call": {"n": fresh, "first_seconds": cold[0], "median_seconds": timing.Timing(cold[1:]).median},
        "tiny_op_seconds": timing.measure(lambda: tiny + 1, sync, warmup=10, repeats=51).median,
        "linear_1024_batch_seconds": batches,
    }


def transfer_figures(device: torch.device, sizes: list[int], iters: int = 20) -> dict:
    """Lesson 02: the three-way benchmark (CPU only, copying every iteration, data resident), per size."""
    from grader import gpu

    if device.type == "cpu":  # --allow-cpu: the same loops, all on the CPU, to test this script
        seconds = {}
        for n in sizes:
            x = torch.randn(n, n)
            seconds[str(n)] = {"CPU only": timing.measure(lambda: [x @ x for _ in range(iters)], lambda: None, 1, 3).median}
    else:
        seconds = {str(n): gpu.three_way_benchmark(n, iters, device, repeats=5) for n in sizes}
    return {"iters": iters, "seconds": seconds}


def memory_figures(device: torch.device) -> dict:
    """Lesson 04: the activation model against the saved-tensor hooks, and the allocator around one step."""
    import dataclasses

    from grader import gpu, memory
    from grader.transformer import Shape, TinyGPT, batch_of_tokens

    shape = Shape(n_layers=4, d_model=256, n_heads=8, d_ff=1024, vocab_size=4096, max_seq_len=1024, dropout=0.1)
    rows = []
    for p in (0.1, 0.0):
        net = TinyGPT(dataclasses.replace(shape, dropout=p)).to(device)
        for b, seq in ((1, 128), (4, 128), (8, 256), (2, 1024)):
            with memory.SavedTensors(exclude=net.parameters()) as saved:
                net(batch_of_tokens(net.shape, b, seq, device))
            model = memory.activation_model(net.shape, b, seq, mask_bytes=memory.dropout_mask_bytes(device))
            rows.append({"dropout": p, "batch": b, "seq": seq, "measured_bytes": saved.nbytes, "model_bytes": model})
    figures = {"activation_model_vs_hooks": rows}
    if device.type == "cuda":
        net = TinyGPT(shape).to(device)
        opt = torch.optim.AdamW(net.parameters())
        tokens = batch_of_tokens(shape, 8, 256, device)

        def step():
            opt.zero_grad(set_to_none=True)
            net(tokens).float().pow(2).mean().backward()
            opt.step()

        step()  # the optimizer state exists only after a first step
        figures["allocator_one_step"] = dataclasses.asdict(gpu.cuda_step_figures(step, device))
    return figures


def cuda_only_figures() -> dict:
    """The paths only CUDA has: events, sync debug mode, allocator, pinned copies, autocast, GradScaler."""
    from grader import gpu

    device = gpu.require_cuda()
    loss = torch.ones((), device=device)
    figures = {
        "sync_debug_item_calls_in_10_steps": gpu.sync_debug_count(lambda: [loss.item() for _ in range(10)]),
        "sync_debug_resident_loop": gpu.sync_debug_count(lambda: [loss * 2 for _ in range(10)]),
        "copy_64MiB_seconds": gpu.pinned_copy_seconds(64 * 2**20),
        "copy_compute_overlap_64MiB_matmul_4096_seconds": gpu.copy_compute_overlap(64 * 2**20, 4096),
        "early_host_read": gpu.early_host_read(),
        "autocast_matmul_4096_seconds": {
            "fp32": gpu.event_seconds(lambda: torch.randn(4096, 4096, device=device) @ torch.randn(4096, 4096, device=device)),
            "fp16": gpu.autocast_matmul_seconds(4096, torch.float16),
            "bf16": gpu.autocast_matmul_seconds(4096, torch.bfloat16),
        },
        "grad_scaler_scales": gpu.grad_scaler_steps(),
    }
    torch.cuda.reset_peak_memory_stats(device)
    block = torch.empty(2**28, dtype=torch.float32, device=device)  # 1 GiB
    held = gpu.allocator_figures()
    del block
    freed = gpu.allocator_figures()
    torch.cuda.empty_cache()
    emptied = gpu.allocator_figures()
    figures["allocator_1GiB"] = {"while_held": held, "after_del": freed, "after_empty_cache": emptied}
    return figures


def reading_figures(device: torch.device, quick: bool) -> dict:
    """Lesson 05: nvidia-smi traces of four workloads (CUDA with nvidia-smi only) and a profile of the small transformer."""
    from grader import profiling
    from grader.transformer import Shape, TinyGPT, batch_of_tokens

    figures: dict = {"interval_ms": 100, "traces": {}}
    if device.type == "cuda":
        from grader import gpu

        if shutil.which("nvidia-smi"):
            figures["peak_allocated_mib"] = {}  # torch's peak while each ran (all four workloads' inputs included)
            for name, work in gpu.smi_workloads(device).items():
                torch.cuda.reset_peak_memory_stats(device)
                figures["traces"][name] = gpu.smi_trace(work, seconds=1.0 if quick else 3.0)
                figures["peak_allocated_mib"][name] = torch.cuda.max_memory_allocated(device) / 2**20
                torch.cuda.empty_cache()
            limits = [r["power_limit_w"] for rows in figures["traces"].values() for r in rows if r["power_limit_w"]]
            figures["power_limit_w"] = max(limits) if limits else None
            figures["command"] = " ".join(profiling.smi_command())
        else:
            figures["note"] = "nvidia-smi not found: no traces"
        figures.update(gpu.cuda_transformer_profile())
    else:  # --allow-cpu: the same profile path on the CPU, so the script can be tested anywhere
        shape = Shape(n_layers=2, d_model=64, n_heads=4, d_ff=256, vocab_size=512, max_seq_len=64, dropout=0.0)
        net = TinyGPT(shape)
        tokens = batch_of_tokens(shape, 2, 32)
        prof = profiling.profile_steps(lambda: net(tokens).sum().backward(), steps=1)
        figures["profile_rows"] = sorted(profiling.rows(prof), key=lambda r: -r["self_us"])[:40]
        figures["note"] = "CPU run: no nvidia-smi traces"
    return figures


def amp_figures(quick: bool) -> dict:
    """Lesson 06: one training step of a GPT-2-small-shaped model in fp32, tf32, bf16 and fp16: time, tokens/s, peak memory."""
    from grader import gpu

    return gpu.amp_training_figures(batch=2 if quick else 8, seq=256 if quick else 1024, steps=5 if quick else 20,
                                    repeats=5 if quick else 10)


LESSON08 = ROOT / "solutions" / "08_inside_a_kernel" / "08_inside_a_kernel.ipynb"


def lesson08_kernels(interpret: bool = False) -> dict:
    """Lesson 08's solution kernels and the course's own, decorated for the GPU compiler (not the interpreter).

    interpret=True leaves TRITON_INTERPRET as it is (the CPU test sets it to 1 before triton is imported)."""
    import os

    import nbformat
    import triton

    from grader import triton_kernels

    import runpy
    import tempfile

    if not interpret:
        os.environ["TRITON_INTERPRET"] = "0"  # here the kernels compile for the GPU
    sources = [cell.source for cell in nbformat.read(str(LESSON08), as_version=4).cells
               if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution")]
    folder = Path(tempfile.mkdtemp(prefix="lesson08-kernels-"))
    path = folder / "lesson08_solutions.py"  # @triton.jit reads each kernel's source from its file
    path.write_text("\n\n".join(sources) + "\n")
    ns = runpy.run_path(str(path))
    names = ("add_kernel", "bias_gelu_kernel", "softmax_kernel")
    found = {name: triton.jit(getattr(ns[name], "fn", ns[name])) for name in names}
    found.update({name: triton.jit(k.fn) for name, k in triton_kernels.kernels().items()})
    return found


def kernel_row(name: str, nbytes: float, flops: float, triton_s: float, torch_s: float, chip) -> dict:
    """One kernel's figures: times, achieved bandwidth and FLOP/s, and their share of the chip's datasheet peaks."""
    row = {"kernel": name, "bytes": nbytes, "flops": flops, "triton_us": triton_s * 1e6, "torch_us": torch_s * 1e6,
           "triton_gbs": nbytes / triton_s / 1e9, "torch_gbs": nbytes / torch_s / 1e9,
           "triton_tflops": flops / triton_s / 1e12, "chip": chip.name if chip else None}
    if chip is not None and chip.bandwidth:
        row["triton_share_of_peak_bandwidth"] = nbytes / triton_s / chip.bandwidth
    if chip is not None and flops and "fp32" in chip.peak_flops:
        row["triton_share_of_fp32_peak"] = flops / triton_s / chip.peak("fp32")
    return row


def chip_for(device_name: str):
    """The chips.csv row whose model (e.g. H100, A100, T4) appears in the device's name; None when none does."""
    from grader import specs

    for chip in specs.load_chips():
        model = chip.name.split()[1] if chip.name.startswith("NVIDIA ") else None
        if model and model != "GeForce" and re.search(rf"\b{re.escape(model)}\b", device_name):
            return chip
        if model == "GeForce" and chip.name.split()[-1] in device_name:
            return chip
    return None


# Tolerances for a kernel's result against torch's, by the arithmetic the kernel does (checked before timing):
# elementwise ones are torch.testing.assert_close's defaults for the dtype (torch/testing/_comparison.py,
# _DTYPE_PRECISIONS: float32 1.3e-6 relative and 1e-5 absolute, float16 1e-3, bfloat16 1.6e-2), with room for a
# GPU's exp and erf, which are not torch's to the last bit; tl.dot on float32 inputs runs in TF32 by default
# (10 explicit mantissa bits, the low 13 dropped: about 2^-10 = 1e-3 relative per input, COURSE.md and
# data/tf32_conversions.csv), so a matmul or attention is held to its norm-wise relative error, 5e-3: a few
# times what TF32 leaves on random inputs and far below the error of a wrong kernel (order 1).
TOLERANCES = {  # arithmetic: ("elementwise", rtol, atol) or ("norm", relative error of the whole output)
    "float32": ("elementwise", 1.3e-6, 1e-5),
    "float32, exp or erf": ("elementwise", 1e-5, 1e-5),
    "float16": ("elementwise", 1e-3, 1e-5),
    "bfloat16": ("elementwise", 1.6e-2, 1e-5),
    "tf32 dot": ("norm", 5e-3),
}


class KernelWrong(AssertionError):
    """A lesson 08 kernel's result is not torch's within its dtype's tolerance: it is not timed."""


def check_result(name: str, got: torch.Tensor, want: torch.Tensor, arithmetic: str) -> dict:
    """Compare a kernel's output with torch's reference (computed in float64) under TOLERANCES[arithmetic]."""
    rule = TOLERANCES[arithmetic]
    got64, want64 = got.double(), want.double()
    if got.shape != want.shape:
        raise KernelWrong(f"{name}: output of shape {tuple(got.shape)}, torch's is {tuple(want.shape)}")
    if not torch.isfinite(got64).all():
        raise KernelWrong(f"{name}: {int((~torch.isfinite(got64)).sum())} elements are NaN or inf (unwritten or "
                          "overflowed): not timed")
    err = (got64 - want64).abs()
    result = {"arithmetic": arithmetic, "max_abs_error": float(err.max()),
              "norm_relative_error": float(torch.linalg.vector_norm(got64 - want64) / torch.linalg.vector_norm(want64))}
    if rule[0] == "norm":
        ok = result["norm_relative_error"] <= rule[1]
        said = f"norm-wise relative error {result['norm_relative_error']:.2e} > {rule[1]:g}"
    else:
        _, rtol, atol = rule
        ok = bool((err <= atol + rtol * want64.abs()).all())
        said = f"largest error {result['max_abs_error']:.2e} beyond rtol {rtol:g}, atol {atol:g}"
    if not ok:
        raise KernelWrong(f"{name}: not torch's result ({arithmetic}): {said}; not timed")
    return result


def lesson08_cases(k: dict, device: torch.device, quick: bool, small: bool = False) -> list[dict]:
    """Each lesson 08 kernel as a case: its launch, its output, torch's reference, the arithmetic, bytes and FLOPs.

    `small` sizes are for the CPU test, where the kernels run in Triton's interpreter.
    """
    import math

    n = 1 << (12 if small else 22 if quick else 26)
    rows = 16 if small else 4096
    cols = n // rows
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.full((n,), float("nan"), device=device)
    cases = [{"name": "add", "out": out, "arithmetic": "float32", "bytes": 12 * n, "flops": n,
              "run": lambda: k["add_kernel"][(math.ceil(n / 1024),)](x, y, out, n, BLOCK=1024),
              "reference": lambda: x.double() + y.double(), "torch": lambda: torch.add(x, y, out=out)}]
    h = torch.randn(rows, 2 * cols, device=device)  # a gated MLP's projection: the kernel reads its first half
    x2, bias = h[:, :cols], torch.randn(cols, device=device)
    gelu_out = torch.full((rows, cols), float("nan"), device=device)
    cases.append({"name": "bias+gelu fused", "out": gelu_out, "arithmetic": "float32, exp or erf",
                  "bytes": 8 * n + 4 * cols, "flops": 10 * n,
                  "run": lambda: k["bias_gelu_kernel"][(math.ceil(n / 1024),)](x2, bias, gelu_out, n, cols, x2.stride(0),
                                                                               BLOCK=1024),
                  "reference": lambda: torch.nn.functional.gelu(x2.double() + bias.double()),
                  "torch": lambda: torch.nn.functional.gelu(x2 + bias)})
    srows, scols = (8, 300) if small else (8192, 4096)
    sx = torch.randn(srows, scols, device=device)
    so = torch.full((srows, scols), float("nan"), device=device)
    sblock = 128 if small else 1024  # a row of 4096 in blocks of 1024: the kernel walks it
    cases.append({"name": f"row softmax ({scols} columns, BLOCK {sblock})", "out": so, "arithmetic": "float32, exp or erf",
                  "bytes": 8 * srows * scols, "flops": 5 * srows * scols,
                  "run": lambda: k["softmax_kernel"][(srows,)](sx, so, scols, sx.stride(0), so.stride(0), BLOCK=sblock),
                  "reference": lambda: torch.softmax(sx.double(), 1), "torch": lambda: torch.softmax(sx, 1)})
    m = 64 if small else 2048 if quick else 4096
    tile = 32 if small else 128
    a, b = torch.randn(m, m, device=device), torch.randn(m, m, device=device)
    c = torch.full((m, m), float("nan"), device=device)
    cases.append({"name": f"matmul {tile}×{tile}×32 (tl.dot: TF32)", "out": c, "arithmetic": "tf32 dot",
                  "bytes": 4 * (2 * m * m * (m // tile) + m * m), "flops": 2 * m**3,
                  "run": lambda: k["matmul_kernel"][(m // tile, m // tile)](a, b, c, m, m, m, *a.stride(), *b.stride(),
                                                                            *c.stride(), BM=tile, BN=tile, BK=32),
                  "reference": lambda: a.double() @ b.double(), "torch": lambda: torch.matmul(a, b)})
    s, d = (64, 16) if small else (2048, 64) if quick else (8192, 64)
    blk = 32 if small else 64
    q, kk, v = (torch.randn(s, d, device=device) for _ in range(3))
    o = torch.full((s, d), float("nan"), device=device)
    cases.append({"name": "flash attention forward", "out": o, "arithmetic": "tf32 dot",
                  "bytes": 4 * (s * d + 2 * s * d * (s // blk) + s * d), "flops": 4 * s * s * d,
                  "run": lambda: k["flash_attention_kernel"][(s // blk,)](q, kk, v, o, s, 1 / math.sqrt(d), D=d,
                                                                          BLOCK_M=blk, BLOCK_N=blk),
                  "reference": lambda: torch.softmax(q.double() @ kk.double().T / math.sqrt(d), 1) @ v.double(),
                  "torch": lambda: torch.nn.functional.scaled_dot_product_attention(q[None, None], kk[None, None],
                                                                                   v[None, None])})
    return cases


def kernel_figures(quick: bool) -> dict:
    """Lesson 08 on CUDA: each kernel compiled, its result checked against torch, then timed (CUDA events)."""
    from grader import gpu

    gpu.require_cuda()
    k = lesson08_kernels()
    chip = chip_for(torch.cuda.get_device_name())
    figures = []
    for case in lesson08_cases(k, torch.device("cuda"), quick):
        case["run"]()
        torch.cuda.synchronize()
        verdict = check_result(case["name"], case["out"], case["reference"](), case["arithmetic"])  # raises: not timed
        row = kernel_row(case["name"], case["bytes"], case["flops"], gpu.event_seconds(case["run"]),
                         gpu.event_seconds(case["torch"]), chip)
        figures.append({**row, "check": verdict})
    return {"kernels": figures, "note": "float32 inputs; tl.dot runs in TF32 by default (torch's matmul: "
            f"allow_tf32={torch.backends.cuda.matmul.allow_tf32}); each result was checked against torch's, computed "
            "in float64, before it was timed (TOLERANCES in scripts/gpu_run.py)"}


def decode_rows(seconds: dict, weight_bytes: float, kv_bytes_per_sequence: float, bandwidth: float | None) -> list[dict]:
    """Lesson 09's figures from decode-step times per batch: tokens/s and MBU (bytes a step reads over its time, as
    a share of the chip's datasheet bandwidth; None without one)."""
    import statistics

    rows = []
    for batch, times in sorted(seconds.items()):
        step = statistics.median(times)
        read = weight_bytes + kv_bytes_per_sequence * batch
        rows.append({"batch": int(batch), "step_seconds": step, "fastest_seconds": min(times),
                     "slowest_seconds": max(times), "tokens_per_second": batch / step, "bytes_per_step": read,
                     "mbu": read / step / bandwidth if bandwidth else None})
    return rows


def lesson09_decode(device: torch.device, quick: bool, batches: list[int] | None = None, d_model: int | None = None,
                    layers: int | None = None, repeats: int = 5, dtype: torch.dtype = torch.bfloat16) -> dict:
    """Lesson 09 on a GPU: one decode step of a bf16 GPT stack several times the L2 against batch; tokens/s and MBU."""
    from grader import serving, shortcuts

    # uncounted: time_steps is what lesson 09's predictions are about, and a cell calling it before a guess stamps a
    # reveal in predictions.json; this script keeps no such record and must write none in the folder it runs in
    time_steps = shortcuts._INNER.get(serving.time_steps, serving.time_steps)
    d_model = d_model or (1024 if quick else 4096)
    cache = dev.last_level_cache_bytes(device)
    if layers is None:  # layers_for counts float32 weights: in bf16 the stack is half that, still 4x the L2 or more
        layers = min(serving.layers_for(cache, 8, d_model), 40)
    batches = batches or ([1, 8, 64] if quick else [1, 4, 16, 64, 128, 256, 512])
    model = serving.DecodeStack(layers, d_model, n_heads=max(1, d_model // 128)).to(device=device, dtype=dtype)
    past = 16
    seconds = time_steps(model, batches, device, repeats=repeats, past=past)
    element = torch.empty((), dtype=dtype).element_size()
    kv_per_sequence = 2 * layers * d_model * past * element  # K and V of every past position, every layer (MHA)
    chip = chip_for(dev.name(device)) if device.type == "cuda" else None
    return {"rows": decode_rows(seconds, model.weight_bytes(), kv_per_sequence, chip.bandwidth if chip else None),
            "weight_bytes": model.weight_bytes(), "last_level_cache_bytes": cache, "layers": layers,
            "d_model": d_model, "dtype": str(dtype).removeprefix("torch."), "past_positions": past,
            "chip": chip.name if chip else None,
            "note": "eager PyTorch, one new position per sequence per step; MBU against the datasheet bandwidth"}


def run_lessons(device: torch.device, out_dir: Path, quick: bool) -> dict:
    """Every lesson under papermill with GPU parameters; seconds and status per lesson."""
    from grader.pipeline.run import run
    from grader.pipeline.tools import lessons

    results = {}
    for lesson in lessons(ROOT):
        params = {"device": str(device)}
        if quick:
            params["demo"] = True
        elif device.type == "cuda":
            params.update(GPU_PARAMETERS.get(lesson, {}))
        for name, seconds, status in run(ROOT, [lesson], params, out_dir):
            results[name] = {"seconds": round(seconds, 2), "status": status, "parameters": params}
    return results


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="folder for the JSON (default: data/recorded/)")
    parser.add_argument("--allow-cpu", action="store_true", help="run without CUDA (to test this script)")
    parser.add_argument("--quick", action="store_true", help="small sizes and demo lessons")
    parser.add_argument("--no-lessons", action="store_true", help="skip running the lessons")
    args = parser.parse_args(argv)

    device = dev.pick_device("auto")
    if device.type != "cuda" and not args.allow_cpu:
        print(f"no CUDA GPU here ({device}); use --allow-cpu --out DIR to test the script", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else ROOT / "data" / "recorded"
    if device.type != "cuda" and out.resolve() == (ROOT / "data" / "recorded").resolve():
        print("refusing to record a run without CUDA into data/recorded/", file=sys.stderr)
        return 2
    start = time.perf_counter()
    record = {"provenance": provenance(device), "figures": {}, "lessons": {}}
    record["figures"].update(matmul_figures(device, QUICK_SIZES if args.quick else SIZES))
    record["figures"]["three_way"] = transfer_figures(device, [64, 256] if args.quick else [64, 256, 512, 1024, 2048])
    record["figures"]["memory"] = memory_figures(device)
    record["figures"]["reading"] = reading_figures(device, args.quick)
    if device.type == "cuda":
        record["figures"]["cuda"] = cuda_only_figures()
        record["figures"]["amp"] = amp_figures(args.quick)
        record["figures"]["lesson08_kernels"] = kernel_figures(args.quick)
        record["figures"]["lesson09_decode"] = lesson09_decode(device, args.quick)
    if not args.no_lessons:
        record["lessons"] = run_lessons(device, out / "runs", args.quick)
    record["provenance"]["wall_seconds"] = round(time.perf_counter() - start, 1)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{slug(record['provenance']['device'])}-{record['provenance']['date']}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"recorded {path} in {record['provenance']['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
