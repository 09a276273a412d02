"""Unit tests of the grader package's learner-facing modules (CPU only, no timing assertions)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure

from conftest import ROOT
from grader import device, plots, specs, timing, widgets
from grader.checks import _common
from grader.checks.lesson01 import VirtualDevice


def test_pick_device_auto_is_usable():
    chosen = device.pick_device("auto")
    assert chosen.type in device.available()
    torch.ones(1, device=chosen)


def test_pick_device_refuses_missing_backend():
    missing = next((k for k in ("cuda", "mps") if k not in device.available()), None)
    if missing is None:
        pytest.skip("every backend is present here")
    with pytest.raises(RuntimeError, match="only"):
        device.pick_device(missing)


def test_cpu_sync_and_memory_figures():
    device.synchronize("cpu")
    device.sync_fn("cpu")()
    figures = device.memory("cpu")
    assert figures.allocated is None and figures.total is None  # the CPU has no allocator figures, not zero
    assert not device.is_async("cpu") and device.is_async("cuda")
    assert "cpu" in device.describe("cpu")


def test_measure_calls_warmup_plus_repeats_and_syncs_each_time():
    calls, syncs = [], []
    result = timing.measure(lambda: calls.append(1), lambda: syncs.append(1), warmup=3, repeats=5)
    assert len(calls) == 8 and len(syncs) >= 5
    assert len(result.samples) == 5 and result.median >= 0 and result.spread >= 0


def test_reference_timer_on_virtual_device_is_exact():
    dev = VirtualDevice(lambda i: 0.002)
    with dev.patched_clocks():
        got = timing.measure(dev.launch, dev.sync, warmup=2, repeats=5).median
    assert got == pytest.approx(0.002 + VirtualDevice.LAUNCH_SECONDS, rel=1e-9)


def test_virtual_device_restores_clocks():
    import time

    before = time.perf_counter
    with VirtualDevice(lambda i: 0.0).patched_clocks():
        assert time.perf_counter is not before
    assert time.perf_counter is before


def test_benchmark_median_runs():
    x = torch.ones(64, 64)
    assert timing.benchmark_median(lambda: x @ x, min_run_time=0.01) > 0


def test_format_seconds():
    assert timing.format_seconds(1.2e-5) == "12.0 µs"
    assert timing.format_seconds(2.5) == "2.5 s"


def test_chips_have_sources_and_units():
    chips = specs.load_chips()
    names = " ".join(c.name for c in chips)
    for wanted in ("T4", "L4", "A100", "H100", "H200", "RTX", "Apple"):
        assert wanted in names, f"data/chips.csv lacks a {wanted}"
    for c in chips:
        assert c.source.strip(), f"{c.name} has no source"
        if c.bandwidth:
            assert 50e9 < c.bandwidth < 20e12, f"{c.name}: bandwidth {c.bandwidth} is not in bytes/s"
        for dtype, peak in c.peak_flops.items():
            assert 1e11 < peak < 1e16, f"{c.name} {dtype}: {peak} is not FLOP/s"
    h100 = specs.chip("H100")
    assert h100.balance("bf16") == pytest.approx(h100.peak("bf16") / h100.bandwidth)


def test_models_table_has_llama_7b():
    models = {m["model"]: m for m in specs.load_models()}
    llama = next(m for name, m in models.items() if "7B" in name and "LLaMA" in name)
    assert llama["n_params"] == 6_738_415_616


def test_data_found_from_elsewhere(tmp_path):
    # A notebook autograded three folders deep must still find data/.
    code = "from grader.specs import data_dir; print(data_dir())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()).resolve() == (ROOT / "data").resolve()


def test_data_dir_env_override(tmp_path, monkeypatch):
    (tmp_path / "chips.csv").write_text((ROOT / "data" / "chips.csv").read_text())
    monkeypatch.setenv("GRADER_DATA", str(tmp_path))
    assert specs.data_dir() == tmp_path


def test_plots_return_figures():
    assert isinstance(plots.time_vs_size([1, 2], {"a (measured)": [1, 2], "b (model)": [2, 1]}), Figure)
    assert isinstance(plots.rate_vs_size([1, 2], {"a": [1e9, 2e9]}), Figure)
    roof = plots.roofline([("x", 1e12, 1e11)], [("p", 1.0)], lambda i, p, b: min(p, i * b))
    assert isinstance(roof, Figure)
    assert isinstance(plots.bars(["a"], [1.0], "y"), Figure)


def test_roofline_widget_responds():
    chips = [c for c in specs.load_chips() if c.has_roofline()]
    seen = []

    def attainable(i, p, b):
        seen.append(i)
        return min(p, i * b)

    w = widgets.roofline_explorer(chips, attainable, lambda i, p, b: "memory", lambda n, width: n / (1.5 * width))
    controls = w.children[0].children
    html = w.children[1]
    before = html.value
    controls[2].value = 12  # the size slider
    assert html.value != before and "4096×4096" in html.value


def test_call_names_the_crash():
    def broken(n):
        return 1 / 0

    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        _common.call(broken, 3)
    with pytest.raises(NotImplementedError):
        _common.call(lambda: (_ for _ in ()).throw(NotImplementedError()))


def test_checks_do_not_write_to_stderr(capfd):
    from grader.checks import lesson01

    lesson01.check_intensity(lambda f, b: f / b)
    captured = capfd.readouterr()
    assert captured.err == "" and "✓" in captured.out


def test_no_code_runs_on_import():
    code = "import grader, grader.device, grader.timing, grader.plots, grader.specs, grader.checks.lesson01; print('ok')"
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "ok" and out.stderr == ""


def test_workspace_copies_once_and_never_overwrites(tmp_path):
    from grader.pipeline.release import workspace
    from grader.pipeline.tools import lessons

    assert workspace(ROOT, tmp_path / "mine") == lessons(ROOT)
    notebook = tmp_path / "mine" / "01_crossover" / "01_crossover.ipynb"
    notebook.write_text("my answers")
    assert workspace(ROOT, tmp_path / "mine") == []
    assert notebook.read_text() == "my answers"
