"""Measure all-reduce time against message size on a cluster, the way lesson 07 does in the notebook.

Run it under torchrun, one process per rank (per GPU with NCCL):

    torchrun --standalone --nproc-per-node 2 scripts/cluster_allreduce.py            # one machine
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 scripts/cluster_allreduce.py --out data/recorded/allreduce-<site>-<date>.json

For each size (float32 tensors, log-spaced sizes) every rank waits at a barrier,
times one all-reduce, and the slowest rank's time (an all-reduce with MAX) is
that repeat's time; the median over repeats is the size's time. Rank 0 prints a
table and fits the ring model

    t = 2(n-1) * latency + 2(n-1)/n * nbytes / bandwidth

by least squares weighted by 1/t (each size's relative error counts the same).
`--out FILE` writes the medians, every repeat and the fit as JSON with the run's
provenance (data/README.md, recorded/); nothing is written without it.

Standalone on purpose: it needs torch and numpy, not the course package, so a
cluster can run it from a bare checkout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

# float32 elements per message; log-spaced (x4 each step)
SIZES = {
    "small": [2**k for k in range(6, 13, 2)],     # 256 B .. 16 KiB: a smoke test, seconds on a laptop
    "default": [2**k for k in range(8, 25, 2)],   # 1 KiB .. 64 MiB
    "large": [2**k for k in range(8, 29, 2)],     # 1 KiB .. 1 GiB: for GPUs with NVLink or InfiniBand
}
FLOAT32_BYTES = 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", choices=sorted(SIZES), default="default", help="which log-spaced message sizes")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per size (default 5 for small, else 11)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per size first")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                   help="auto: nccl when CUDA is available, else gloo")
    p.add_argument("--out", type=Path, default=None, help="write the JSON here (rank 0 only)")
    return p.parse_args(argv)


def pick_backend(choice: str) -> str:
    """nccl when asked, or when auto and CUDA is there; gloo otherwise."""
    if choice == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    return choice


def driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, if it is there."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def device_name(device: torch.device) -> str:
    """What the tensors lived on, in words."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:  # Linux names the CPU model here; platform.processor() often says only "x86_64"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "CPU: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU: " + (platform.processor() or platform.machine() or "unknown")


def launch_command() -> str:
    """The torchrun command line that started this rank (read from the parent process), else this process's own."""
    try:
        parts = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        parts = []
    if len(parts) > 1 and Path(parts[1]).name in ("torchrun", "torch.distributed.run"):
        parts = parts[1:]  # "python .../torchrun ..." -> "torchrun ..."
    if parts and (Path(parts[0]).name == "torchrun" or "torch.distributed.run" in parts):
        parts[0] = Path(parts[0]).name
        return " ".join(map(shlex.quote, parts))
    return "(launcher not found) " + " ".join([Path(sys.executable).name, *map(shlex.quote, sys.argv)])


def time_allreduce(nelem: int, device: torch.device, repeats: int, warmup: int, barrier) -> list[float]:
    """Seconds per timed all-reduce of `nelem` float32s: the slowest rank's time, one entry per repeat."""
    x = torch.zeros(nelem, dtype=torch.float32, device=device)  # zeros stay zeros: no overflow over repeats
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        dist.all_reduce(x)
    sync()
    samples = []
    for _ in range(repeats):
        barrier()
        sync()
        start = time.perf_counter()
        dist.all_reduce(x)
        sync()  # NCCL returns before the GPU is done
        seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        samples.append(float(seconds.item()))
    return samples


def fit_ring(nbytes: list[float], seconds: list[float], world_size: int) -> dict:
    """Weighted least-squares fit of t = 2(n-1)·latency + 2(n-1)/n·nbytes/bandwidth (weights 1/t)."""
    n = world_size
    if n < 2:
        return {"latency_seconds": None, "bandwidth_bytes_per_second": None,
                "note": "world size 1: a ring of one rank sends nothing, so there is nothing to fit"}
    t = np.asarray(seconds, dtype=float)
    columns = np.stack([np.full_like(t, 2 * (n - 1)), 2 * (n - 1) / n * np.asarray(nbytes, dtype=float)], axis=1)
    a, y = columns / t[:, None], np.ones_like(t)  # rows divided by t: relative errors
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    note = "weighted least squares, weights 1/t"
    if coef[0] < 0 or coef[1] <= 0:  # one term fits the noise below zero: refit without it
        keep = 1 if coef[0] < 0 else 0
        single = np.linalg.lstsq(a[:, [keep]], y, rcond=None)[0][0]
        coef = np.zeros(2)
        coef[keep] = single
        note += "; the " + ("latency" if keep == 1 else "bandwidth") + " term came out negative and was set to zero"
    latency, per_byte = float(coef[0]), float(coef[1])
    model = columns @ coef
    return {
        "latency_seconds": latency,
        "bandwidth_bytes_per_second": 1 / per_byte if per_byte > 0 else None,
        "model_seconds": [float(m) for m in model],
        "max_relative_error": float(np.max(np.abs(model - t) / t)),
        "note": note,
    }


def provenance(device: torch.device, backend: str, world_size: int, hosts: int) -> dict:
    """Where and how these figures were measured."""
    return {
        "device": device_name(device),
        "device_type": device.type,
        "driver": driver_version(),
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "command": launch_command(),
        "measured_by": "scripts/cluster_allreduce.py",
        "backend": backend,
        "world_size": world_size,
        "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", world_size)),
        "hosts": hosts,
    }


def table(nbytes: list[int], medians: list[float], spreads: list[tuple[float, float]], fit: dict, n: int) -> str:
    """The per-size table rank 0 prints: time, spread, bus bandwidth, model."""
    lines = [f"{'bytes':>12} {'median µs':>10} {'min..max µs':>22} {'bus GB/s':>9} {'model µs':>10}"]
    model = fit.get("model_seconds") or [None] * len(nbytes)
    for size, t, (lo, hi), m in zip(nbytes, medians, spreads, model):
        bus = 2 * (n - 1) / n * size / t / 1e9 if n > 1 else float("nan")  # what each rank's link carried
        spread = f"{lo * 1e6:.1f}..{hi * 1e6:.1f}"
        lines.append(f"{size:>12,} {t * 1e6:>10.1f} {spread:>22} {bus:>9.3g} "
                     + (f"{m * 1e6:>10.1f}" if m is not None else f"{'-':>10}"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure, print on rank 0, and write --out on rank 0."""
    args = parse_args(argv)
    if "RANK" not in os.environ:
        print("run me under torchrun, e.g. torchrun --standalone --nproc-per-node 2 scripts/cluster_allreduce.py",
              file=sys.stderr)
        return 2
    backend = pick_backend(args.backend)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "nccl":
        if not torch.cuda.is_available():
            print("--backend nccl needs CUDA GPUs; use --backend gloo on CPUs", file=sys.stderr)
            return 2
        torch.cuda.set_device(local_rank)  # one process per GPU
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=backend)
    try:
        rank, n = dist.get_rank(), dist.get_world_size()
        barrier = (lambda: dist.barrier(device_ids=[local_rank])) if backend == "nccl" else dist.barrier
        names = [None] * n
        dist.all_gather_object(names, socket.gethostname())
        hosts = len(set(names))
        repeats = args.repeats or (5 if args.sizes == "small" else 11)
        elements = SIZES[args.sizes]
        nbytes = [e * FLOAT32_BYTES for e in elements]
        samples = [time_allreduce(e, device, repeats, args.warmup, barrier) for e in elements]
        if rank == 0:
            medians = [statistics.median(s) for s in samples]
            fit = fit_ring(nbytes, medians, n)
            print(f"all-reduce, float32, {backend}, world size {n} on {hosts} host(s), {device_name(device)}, "
                  f"median of {repeats} (slowest rank each time)")
            print(table(nbytes, medians, [(min(s), max(s)) for s in samples], fit, n))
            if fit["latency_seconds"] is not None:
                bw = fit["bandwidth_bytes_per_second"]
                print(f"ring fit: latency {fit['latency_seconds'] * 1e6:.2f} µs per step, bandwidth "
                      + (f"{bw / 1e9:.3g} GB/s per link, one direction" if bw else "not resolved")
                      + f" (worst size off by {fit['max_relative_error']:.0%})")
            else:
                print(fit["note"])
            if backend == "gloo":
                print("gloo on one machine moves bytes through memory and loopback, not a network")
            if args.out is not None:
                record = {
                    "provenance": provenance(device, backend, n, hosts),
                    "figures": {"allreduce": {
                        "dtype": "float32",
                        "repeats": repeats,
                        "timing": "barrier, then one all_reduce; each repeat is the slowest rank's time",
                        "nbytes": nbytes,
                        "median_seconds": medians,
                        "samples_seconds": samples,
                        "fit": {"model": "t = 2(n-1)*latency + 2(n-1)/n * nbytes / bandwidth",
                                "derived_from": "median_seconds", **fit},
                    }},
                }
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
                print(f"wrote {args.out}")
        barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
