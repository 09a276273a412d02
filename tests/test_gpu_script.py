"""The GPU script and the recorded-run path, tested without a GPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, read_notebook
from grader import gpu
from grader.pipeline.run import run

SCRIPT = ROOT / "scripts" / "gpu_run.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("call", [
    lambda: gpu.require_cuda(),
    lambda: gpu.event_seconds(lambda: None),
    lambda: gpu.sync_debug_count(lambda: None),
    lambda: gpu.allocator_figures(),
])
def test_cuda_only_code_refuses_clearly(call):
    with pytest.raises(RuntimeError, match="NVIDIA GPU"):
        call()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_script_never_records_a_cpu_run_as_gpu_data():
    out = subprocess.run([sys.executable, str(SCRIPT), "--no-lessons"], capture_output=True, text=True)
    assert out.returncode == 2 and "no CUDA" in out.stderr
    out = subprocess.run([sys.executable, str(SCRIPT), "--allow-cpu", "--no-lessons"], capture_output=True, text=True)
    assert out.returncode == 2 and "refusing" in out.stderr


def test_script_writes_figures_with_provenance(tmp_path):
    subprocess.run([sys.executable, str(SCRIPT), "--allow-cpu", "--quick", "--no-lessons", "--out", str(tmp_path)],
                   check=True, capture_output=True, text=True)
    record = json.loads(next(tmp_path.glob("*.json")).read_text())
    for key in ("device", "driver", "cuda", "torch", "date", "command"):
        assert key in record["provenance"]
    assert record["provenance"]["device_type"] in ("cpu", "cuda", "mps")
    assert set(record["figures"]["matmul_seconds"]) == {"32", "64", "128", "256"}
    assert all(v > 0 for v in record["figures"]["matmul_seconds"].values())
    assert set(record["figures"]["three_way"]["seconds"]) == {"64", "256"}
    rows = record["figures"]["memory"]["activation_model_vs_hooks"]
    assert rows and all(abs(r["model_bytes"] - r["measured_bytes"]) <= 0.05 * r["measured_bytes"] for r in rows)


def test_lesson01_shows_a_recorded_run_labelled_as_such(tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(ROOT / "data", data, ignore=shutil.ignore_patterns("recorded"))
    (data / "recorded").mkdir()
    fixture = {  # a test fixture, not a measurement: it lives only in this temporary folder
        "provenance": {"device": "TEST-FIXTURE-GPU", "torch": "0.0", "date": "2000-01-01", "driver": "0", "cuda": "0",
                       "command": "tests/test_gpu_script.py"},
        "figures": {
            "matmul_seconds": {str(n): 1e-5 * (1 + n / 256) ** 3 for n in [32, 64, 128, 256, 512, 1024]},
            "matmul_unsynchronized_seconds": {"1024": 2e-5},
            "first_call": {"n": 1023, "first_seconds": 0.5, "median_seconds": 0.001},
        },
    }
    (data / "recorded" / "fixture.json").write_text(json.dumps(fixture))
    monkeypatch.setenv("GRADER_DATA", str(data))
    results = run(ROOT, ["01_crossover"], {"device": "cpu"}, tmp_path / "out", log=lambda line: None)
    assert results[0][2] == "ok", results[0][2]
    text = json.dumps(read_notebook(tmp_path / "out" / "01_crossover.ipynb"))
    assert "recorded: TEST-FIXTURE-GPU" in text
    assert "too fast" in text and "first call of a fresh 1023" in text


def test_lesson08_kernel_figures_arithmetic_and_chip_match():
    """The CPU-side part of lesson 08's GPU timing: rows of achieved figures and the chip a device name maps to."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_run", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    chip = script.chip_for("NVIDIA H100 80GB HBM3")
    assert chip is not None and "H100" in chip.name
    assert script.chip_for("NVIDIA GeForce RTX 4090").name.endswith("4090")
    assert script.chip_for("Some Other Card") is None
    row = script.kernel_row("add", 12e9, 1e9, 0.005, 0.004, chip)
    assert row["triton_gbs"] == 12e9 / 0.005 / 1e9 and row["triton_share_of_peak_bandwidth"] == 12e9 / 0.005 / chip.bandwidth
    assert row["torch_us"] == 4000.0


def test_lesson08_kernels_are_taken_from_the_solution_and_decorated_for_the_compiler(tmp_path):
    """What gpu_run.py compiles on CUDA: the solution's kernels and the course's, as JITFunctions (decorating needs no GPU)."""
    import os

    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('gpu_run', {str(SCRIPT)!r})\n"
            "script = importlib.util.module_from_spec(spec); spec.loader.exec_module(script)\n"
            "found = script.lesson08_kernels()\n"
            "print(sorted((name, type(k).__name__) for name, k in found.items()))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("add_kernel", "bias_gelu_kernel", "softmax_kernel", "matmul_kernel", "flash_attention_kernel"):
        assert f"('{name}', 'JITFunction')" in done.stdout


def test_lesson09_decode_runs_on_the_cpu_and_its_mbu_is_bytes_over_time_over_bandwidth():
    """The lesson-09 GPU measurement's code path, run small on the CPU; its arithmetic on constructed times."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gpu_run

    from grader import predictions
    from grader.checks import lesson09  # noqa: F401  its predictions listen for calls of serving.time_steps

    found = gpu_run.lesson09_decode(torch.device("cpu"), quick=True, batches=[1, 2], d_model=64, layers=2, repeats=1,
                                    dtype=torch.float32)
    assert not predictions.path().exists()  # it timed what lesson 09's predictions are about, and stamped no reveal
    assert [r["batch"] for r in found["rows"]] == [1, 2] and all(r["step_seconds"] > 0 for r in found["rows"])
    assert found["chip"] is None and all(r["mbu"] is None for r in found["rows"])
    assert found["weight_bytes"] == 2 * 12 * 64 * 64 * 4 + 2 * 2 * 2 * 64 * 4  # Linear weights and layer norms
    rows = gpu_run.decode_rows({1: [0.02, 0.01, 0.03], 8: [0.04]}, weight_bytes=1e9, kv_bytes_per_sequence=1e8,
                               bandwidth=1e11)
    assert rows[0]["step_seconds"] == 0.02 and rows[0]["tokens_per_second"] == 50
    assert abs(rows[0]["mbu"] - 1.1e9 / 0.02 / 1e11) < 1e-12
    assert abs(rows[1]["mbu"] - 1.8e9 / 0.04 / 1e11) < 1e-12 and rows[1]["tokens_per_second"] == 200


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_run_for_test", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_lesson08_kernels_are_checked_against_torch_before_timing_in_the_interpreter():
    """Third edition: the GPU script timed lesson 08's kernels without checking what they computed. Each case's
    result is now compared with torch's (float64) under its arithmetic's tolerance; here on the CPU, in Triton's
    interpreter, with the solution's kernels and small sizes: every case passes, and a case whose kernel writes
    nothing, or the wrong rows, is refused."""
    script = _script()
    kernels = script.lesson08_kernels(interpret=True)
    cases = script.lesson08_cases(kernels, torch.device("cpu"), quick=True, small=True)
    assert [c["arithmetic"] for c in cases].count("tf32 dot") == 2
    for case in cases:
        case["run"]()
        verdict = script.check_result(case["name"], case["out"], case["reference"](), case["arithmetic"])
        assert verdict["norm_relative_error"] < 1e-5, (case["name"], verdict)  # the interpreter's tl.dot is exact fp32
    gelu = next(c for c in cases if c["name"].startswith("bias+gelu"))
    gelu["out"].fill_(float("nan"))
    with pytest.raises(script.KernelWrong, match="NaN or inf"):
        script.check_result(gelu["name"], gelu["out"], gelu["reference"](), gelu["arithmetic"])
    soft = next(c for c in cases if c["name"].startswith("row softmax"))
    with pytest.raises(script.KernelWrong, match="not torch's result"):
        script.check_result(soft["name"], soft["out"].flip(0), soft["reference"](), soft["arithmetic"])


def test_a_tf32_result_passes_its_tolerance_and_would_fail_float32s():
    """tl.dot runs fp32 inputs as TF32 on a GPU: its inputs keep 10 mantissa bits. A matmul of TF32-truncated inputs
    passes the 'tf32 dot' rule and fails float32's elementwise atol (the second edition compared at atol 1e-5)."""
    script = _script()
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)

    def tf32(t):  # drop the 13 low mantissa bits, as the tensor cores read a float32 register
        return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)

    got, want = tf32(a) @ tf32(b), a.double() @ b.double()
    verdict = script.check_result("tf32 matmul", got, want, "tf32 dot")
    assert 1e-4 < verdict["norm_relative_error"] < script.TOLERANCES["tf32 dot"][1] / 2
    with pytest.raises(script.KernelWrong):
        script.check_result("tf32 matmul", got, want, "float32")
    with pytest.raises(script.KernelWrong):
        script.check_result("a wrong matmul", got.T, want, "tf32 dot")
