"""scripts/cluster_allreduce.py, run for real under torchrun with two CPU ranks (gloo)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "cluster_allreduce.py"


def _torchrun() -> list[str]:
    """The torchrun of the Python running the tests (same environment), or its module form."""
    found = Path(sys.executable).parent / "torchrun"
    return [str(found)] if found.is_file() else [sys.executable, "-m", "torch.distributed.run"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    command = [*_torchrun(), "--standalone", "--nproc-per-node", "2", str(SCRIPT), "--sizes", "small", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def _script():
    spec = importlib.util.spec_from_file_location("cluster_allreduce", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_ranks_write_a_recording_with_provenance(tmp_path):
    out = tmp_path / "recorded" / "allreduce.json"
    done = _run(["--out", str(out)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ring fit" in done.stdout or "set to zero" in done.stdout or "not resolved" in done.stdout
    record = json.loads(out.read_text())
    prov = record["provenance"]
    for key in ("device", "device_type", "driver", "cuda", "torch", "python", "date", "command", "measured_by"):
        assert key in prov, key
    assert prov["backend"] == "gloo" and prov["world_size"] == 2 and prov["hosts"] == 1
    assert prov["device_type"] == "cpu" and prov["measured_by"] == "scripts/cluster_allreduce.py"
    assert "--nproc-per-node 2" in prov["command"] and "cluster_allreduce.py" in prov["command"]
    figures = record["figures"]["allreduce"]
    assert figures["dtype"] == "float32"
    assert figures["nbytes"] == sorted(figures["nbytes"]) and len(figures["nbytes"]) == 4
    assert len(figures["median_seconds"]) == len(figures["samples_seconds"]) == 4
    assert all(len(s) == figures["repeats"] for s in figures["samples_seconds"])
    assert all(0 < t < 10 for t in figures["median_seconds"])
    fit = figures["fit"]
    assert fit["derived_from"] == "median_seconds" and "latency_seconds" in fit and "bandwidth_bytes_per_second" in fit


def test_nothing_is_written_without_out(tmp_path):
    before = sorted((ROOT / "data").rglob("*"))
    done = _run([], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not list(tmp_path.iterdir()) and sorted((ROOT / "data").rglob("*")) == before


def test_outside_torchrun_it_says_how_to_start():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "torchrun" in done.stderr


@pytest.mark.parametrize("world_size", [2, 8])
def test_ring_fit_recovers_latency_and_bandwidth(world_size):
    script = _script()
    latency, bandwidth, n = 20e-6, 50e9, world_size
    nbytes = [4 * 4**k for k in range(2, 12)]
    seconds = [2 * (n - 1) * latency + 2 * (n - 1) / n * b / bandwidth for b in nbytes]
    fit = script.fit_ring(nbytes, seconds, n)
    assert fit["latency_seconds"] == pytest.approx(latency, rel=1e-6)
    assert fit["bandwidth_bytes_per_second"] == pytest.approx(bandwidth, rel=1e-6)
    assert fit["max_relative_error"] < 1e-9
    assert script.fit_ring(nbytes, seconds, 1)["latency_seconds"] is None
