"""Unit tests of the grader package's learner-facing modules (CPU only, no timing assertions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.text
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


def test_chips_columns_in_order():
    import csv

    with open(ROOT / "data" / "chips.csv", newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert header == ["chip", "vendor", "form", "memory_gb", "memory_bandwidth_gbs", "fp32_tflops", "tf32_tflops",
                      "fp16_tflops", "bf16_tflops", "fp8_tflops", "host_link", "host_link_gbs", "nvlink_gbs",
                      "power_limit_w", "source", "notes"]
    readme = (ROOT / "data" / "README.md").read_text()
    for column in header:
        assert f"| `{column}` |" in readme, f"data/README.md does not explain chips.csv's {column}"


def test_nvlink_figures_name_their_document():
    documents = ("datasheet", "whitepaper", "product brief")
    chips = specs.load_chips()
    assert [c.name for c in chips if c.nvlink_gbs], "no chip in data/chips.csv has an nvlink_gbs figure"
    for c in chips:
        if c.nvlink_gbs is not None:
            assert 50 <= c.nvlink_gbs <= 2000, f"{c.name}: nvlink_gbs {c.nvlink_gbs} is not GB/s"
            assert "NVLink" in c.notes and "nvlink_gbs =" in c.notes, f"{c.name}: notes must quote the NVLink figure"
            assert "both directions" in c.notes, f"{c.name}: notes must say the figure sums both directions"
            assert any(d in c.source.lower() for d in documents), f"{c.name}: source names no document"
        else:
            assert "nvlink_gbs empty" in c.notes, f"{c.name}: notes must say why nvlink_gbs is empty"
    assert specs.chip("A100").nvlink_gbs == 600 and specs.chip("T4").nvlink_gbs is None


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


def test_workspace_refreshes_a_read_only_data_copy_and_writes_the_index(tmp_path):
    import nbformat

    from grader.pipeline.release import INDEX, workspace
    from grader.pipeline.tools import lessons

    mine = tmp_path / "mine"
    workspace(ROOT, mine)
    copied = mine / "data" / "chips.csv"
    assert copied.read_text() == (ROOT / "data" / "chips.csv").read_text()
    assert not os.access(copied, os.W_OK) or os.getuid() == 0  # root may write anything; the mode says read-only
    assert not copied.stat().st_mode & 0o222
    (mine / "data" / "stale.csv").write_text("old")  # refreshed on every call: what data/ no longer has goes
    workspace(ROOT, mine)
    assert not (mine / "data" / "stale.csv").exists()
    index = nbformat.read(str(mine / INDEX), as_version=4)
    assert [c.cell_type for c in index.cells] == ["markdown"]
    text = index.cells[0].source
    for lesson in lessons(ROOT):  # in order, each a link to the learner's copy
        assert f"]({lesson}/{lesson}.ipynb)" in text
    positions = [text.index(f"]({lesson}/") for lesson in lessons(ROOT)]
    assert positions == sorted(positions)
    assert "data/chips.csv" in text and "30 minutes" in text and "Shut Down All Kernels" in text
    assert "Run All stops at the first unfinished exercise" in text


def test_default_threads_contract():
    assert device.default_threads(1) == 1 and device.default_threads(2) == 1 and device.default_threads(4) == 1
    assert device.default_threads(8) == 4 and device.default_threads(64) == 8
    assert device.default_threads() >= 1
    before = torch.get_num_threads()
    try:
        assert device.set_threads(0) == device.default_threads()
        assert device.set_threads(1) == 1
        with pytest.raises(ValueError):
            device.set_threads(-1)
    finally:
        torch.set_num_threads(before)


def test_threads_are_counted_in_english():
    assert device.threads_label(1) == "1 CPU thread"
    assert device.threads_label(4) == "4 CPU threads"
    assert "1 CPU threads" not in device.describe("cpu")


def test_trust_note_speaks_only_when_the_machine_was_busy():
    assert timing.trust_note([1e-5, 1.1e-5, 1.2e-5, 1.05e-5]) is None
    note = timing.trust_note([1e-5, 1.1e-5, 6e-5])
    assert note and "busy" in note and "6×" in note and "rough" in note
    # several measurements (one per size): the worst speaks; a Timing works too
    assert timing.trust_note([timing.Timing((1.0, 1.0, 1.0)), timing.Timing((1.0, 1.0, 12.0))]).count("12×") == 1
    assert timing.trust_note({"64": [1.0, 1.1, 1.0], "128": [2.0, 2.1, 2.0]}) is None
    assert timing.trust_note([1.0, 9.0]) is None  # two runs say nothing
    t = timing.Timing((3.0, 1.0, 2.0))
    assert (t.low, t.high, float(t)) == (1.0, 3.0, 2.0)


def test_spread_reads_numbers_timings_and_samples():
    mid, low, high = plots.spread([1.0, 2.0])
    assert list(mid) == [1.0, 2.0] and low is None and high is None
    mid, low, high = plots.spread([timing.Timing((1.0, 3.0, 2.0)), [4.0, 6.0, 5.0], 7.0])
    assert list(mid) == [2.0, 5.0, 7.0] and list(low) == [1.0, 4.0, 7.0] and list(high) == [3.0, 6.0, 7.0]


def _legend_texts(fig):
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_measured_lines_draw_their_spread_and_a_busy_note():
    sizes = [64, 128]
    fig = plots.time_vs_size(sizes, {"CPU (measured here)": [[1e-5, 1e-5, 6e-5], [1e-4, 1.1e-4, 1.2e-4]]},
                             note="This machine was busy")
    ax = fig.axes[0]
    assert ax.collections, "no band for the spread"
    assert fig.legends and not ax.get_legend(), "the legend belongs off the axes"
    assert "This machine was busy" in fig.legends[0].get_title().get_text()


def test_coinciding_series_are_said_to_coincide():
    assert plots.coinciding({"a": [1, 2, 3], "b": [1, 2.01, 3], "c": [1, 5, 3]}) == {"b": "a"}
    assert plots.coinciding({"a": [0, 1], "b": [1e-9, 1]}) == {}
    fig = plots.time_vs_size([1, 2], {"GPU (recorded)": [1, 2], "GPU (model)": [1, 2]})
    assert "GPU (model) (coincides with GPU (recorded))" in _legend_texts(fig)
    fig = plots.lines({"fp32": ([1, 2], [1, 2]), "bf16": ([1, 2], [1, 2]), "x": ([3, 4], [1, 2])}, "x", "y")
    assert _legend_texts(fig) == ["fp32", "bf16 (coincides with fp32)", "x"]


def test_no_bars_on_a_log_axis_and_zeros_are_shown():
    from matplotlib.patches import Rectangle

    for fig in (plots.bars(["a", "b", "c"], [1e-4, 0.0, 2e-6], "s", log=True),
                plots.grouped_bars(["g1", "g2"], {"x": [1.0, 0.0], "y": [2.0, 0.1]}, "s", log=True)):
        ax = fig.axes[0]
        assert ax.get_yscale() == "log"
        assert not [p for p in ax.patches if isinstance(p, Rectangle)], "bars drawn on a log axis"
        assert "0" in [t.get_text() for t in ax.texts], "a zero vanished"
    linear = plots.bars(["a", "b"], [1.0, 0.0], "s")
    assert linear.axes[0].get_yscale() == "linear" and len(linear.axes[0].patches) == 2


def test_reference_lines_are_labelled_and_text_is_big_enough():
    fig = plots.memory_stack([("m", {"parameters": 2**30, "activations (model)": 2**31})], [("H100 (datasheet)", 80 * 2**30)])
    ax = fig.axes[0]
    assert any("H100" in t and "80 GiB" in t for t in _legend_texts(fig)), _legend_texts(fig)
    assert any("H100" in t.get_text() and "80 GiB" in t.get_text() for t in ax.texts)
    figs = [fig, plots.roofline([("x", 1e12, 1e11)], [("p", 1.0)], lambda i, p, b: min(p, i * b)),
            plots.lines({"a": ([1, 2], [1, 2])}, "x", "y", hlines={"limit": 1.5}),
            plots.format_ranges([("fp16", 6e-8, 6e-5, 65504.0)], [1e-3, 1e-6]),
            plots.bars(["a"], [1.0], "y", log=True), plots.grouped_bars(["g"], {"x": [1.0]}, "y")]
    for f in figs:
        f.canvas.draw() if hasattr(f.canvas, "draw") else None
        small = [t.get_text() for a in f.axes for t in a.texts if t.get_fontsize() < 9]
        small += [t.get_text() for legend in f.legends for t in legend.get_texts() if t.get_fontsize() < 9]
        assert not small, f"text under 9 pt: {small}"


def test_widgets_wrap_their_controls():
    chips = [c for c in specs.load_chips() if c.has_roofline()]
    w = widgets.roofline_explorer(chips, lambda i, p, b: min(p, i * b), lambda i, p, b: "memory",
                                  lambda n, width: n / (1.5 * width))
    row = w.children[0]
    assert row.layout.flex_flow == "row wrap"
    for control in row.children:
        assert control.layout.max_width == "100%" and control.style.description_width == "initial"


def test_sync_places_are_in_the_learners_words():
    from grader.syncs import SyncCounter, describe_place

    cell = "/tmp/ipykernel_4242/2641094725.py"
    assert describe_place(cell, 8) == "cell line 8"
    assert describe_place(cell, 12, "train_fixed", 10) == "line 3 of your train_fixed"
    assert describe_place("/home/me/loop.py", 8) == "loop.py line 8"
    assert "2641094725" not in describe_place(cell, 12, "train_fixed", 10)
    code = "def train_fixed(x):\n    y = x.sum() * 2\n    return y.item()\ntrain_fixed(x)\n"
    with SyncCounter() as counter:
        x = torch.ones(3, device=counter.device)
        counter.events.clear()
        exec(compile(code, cell, "exec"), {"x": x})
    (row,) = counter.table()
    assert row["place"] == "line 3 of your train_fixed" and row["where"] == "2641094725.py:3"
    (shown,) = counter.display_rows()
    assert shown["where"] == "line 3 of your train_fixed" and "place" not in shown
    assert ".py" not in " ".join(str(v) for v in shown.values())


def test_learner_config_hides_every_nbgrader_extension():
    import json

    learner = ROOT / "lab-config" / "learner"
    disabled = json.loads((learner / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert disabled.get("@jupyter/nbgrader") is True
    server = json.loads((learner / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]
    installed = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "nbgrader.json"
    if installed.exists():  # every server extension nbgrader enables is turned off for learners
        enabled = json.loads(installed.read_text())["ServerApp"]["jpserver_extensions"]
        assert {name for name, on in enabled.items() if on} <= {name for name, on in server.items() if on is False}


def test_lab_command_culls_kernels_and_only_the_learner_gets_the_learner_config(tmp_path):
    from grader.pipeline import lab
    from grader.pipeline.release import CULL_IDLE_MINUTES, INDEX

    learner = lab.server_command(tmp_path, 8899, "t0k3n")
    assert f"--MappingKernelManager.cull_idle_timeout={CULL_IDLE_MINUTES * 60}" in learner
    assert "--MappingKernelManager.cull_connected=False" in learner and "--ServerApp.port_retries=0" in learner
    assert f"--ServerApp.default_url=/lab/tree/{INDEX}" in learner and "--IdentityProvider.token=t0k3n" in learner
    assert not any("default_url" in a for a in lab.server_command(tmp_path, 8899, "t", instructor=True))
    assert lab.server_env(ROOT)["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0] == str(ROOT / "lab-config" / "learner")
    assert "lab-config" not in lab.server_env(ROOT, instructor=True).get("JUPYTER_CONFIG_PATH", "")
    box = lab.banner("http://127.0.0.1:8899/lab/tree/x?token=t", Path("my-work/.jupyter-server.log"), False)
    assert "\n  http://127.0.0.1:8899/lab/tree/x?token=t\n" in box and box.splitlines()[-1].startswith("===")


def test_make_lab_prints_the_url_last_and_hides_nbgrader(tmp_path):
    """`python -m grader lab` for real: the URL comes last, the server answers, nbgrader's pages are not there."""
    import re
    import signal
    import urllib.error
    import urllib.request

    from grader.pipeline.lab import free_port

    port = free_port(20000)
    proc = subprocess.Popen([sys.executable, "-m", "grader", "--root", str(ROOT), "lab", str(tmp_path / "mine"),
                             "--no-browser", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("===") and len([l for l in lines if l.startswith("===")]) == 2:
                break
        text = "".join(lines)
        url = re.search(r"^  (http://127\.0\.0\.1:\d+/lab/tree/00_START_HERE\.ipynb\?token=\w+)$", text, re.M)
        assert url, text
        token = url.group(1).rsplit("=", 1)[1]
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=10).status == 200
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/formgrader?token={token}", timeout=10)
        assert missing.value.code == 404
        assert (tmp_path / "mine" / "00_START_HERE.ipynb").exists() and (tmp_path / "mine" / "data" / "chips.csv").exists()
        assert "[I " not in text, "the server's log belongs in the log file"
        assert (tmp_path / "mine" / ".jupyter-server.log").read_text().strip()
        # the tabs it reopens are this folder's: a workspace saved through the page lands in the folder, not in
        # ~/.jupyter, where every other server of the user (a presenter's, last week's course) would reopen them
        name = f"probe-{port}"
        saved = urllib.request.Request(f"http://127.0.0.1:{port}/lab/api/workspaces/{name}", method="PUT",
                                       data=json.dumps({"data": {}, "metadata": {"id": name}}).encode(),
                                       headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
        assert urllib.request.urlopen(saved, timeout=10).status in (200, 204)
        assert [p.name for p in (tmp_path / "mine" / ".jupyter-workspaces").iterdir()][0].startswith(name)
    finally:
        proc.send_signal(signal.SIGINT)  # as Ctrl-C would: the launcher stops the server and its kernels
        assert proc.wait(timeout=60) == 0


def test_presenter_copy_shows_stubs_no_hidden_tests_and_slides_that_fit():
    import importlib.util

    import nbformat

    from grader.pipeline.run import hide_answers

    spec = importlib.util.spec_from_file_location("lesson_source", ROOT / "scripts" / "lesson_source.py")
    lesson_source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lesson_source)
    lesson = "01_crossover"
    source = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    release = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    for cell in source.cells:  # as if executed: an output under every code cell
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", text="shown\n")]
    shown = hide_answers(source, release)
    text = "\n".join(c.source for c in shown.cells)
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
    assert "raise NotImplementedError()" in text
    for cell in shown.cells:
        if cell.cell_type == "code":
            solution = cell.metadata.get("nbgrader", {}).get("solution")
            assert bool(cell.outputs) != bool(solution), "exercise outputs go, every other output stays"
    # without a release to copy from, the solution regions become nbgrader's stub
    alone = hide_answers(nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4), None)
    assert "BEGIN SOLUTION" not in "\n".join(c.source for c in alone.cells)
    from nbformat.sign import NotebookNotary

    from grader.pipeline.run import deck, presented

    source = deck(ROOT, lesson)  # demo = True written into the parameters cell: no injected cell, no extra slide
    (parameters,) = [c for c in source.cells if "parameters" in c.metadata.get("tags", [])]
    assert "\ndemo = True  # " in parameters.source and "injected" not in str(source)
    for cell in source.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", text="✓ all checks passed\n")]
    marked = presented(source, release, lesson_source)
    assert "BEGIN SOLUTION" not in str(marked) and "HIDDEN TESTS" not in str(marked)
    kinds = [c.metadata["slideshow"]["slide_type"] for c in marked.cells]
    shown = [c for c, kind in zip(marked.cells, kinds) if kind != "skip"]
    lead_in = {id(b) for a, b in zip(shown, shown[1:]) if a.cell_type == "markdown" and not a.metadata.get(
        "nbgrader", {}).get("solution") and len(a.source) <= lesson_source.LEAD_IN_CHARS}  # shares a short lead-in's
    for cell, kind in zip(marked.cells, kinds):
        grading = cell.metadata.get("nbgrader", {})
        opens = "-" if id(cell) in lead_in else "subslide"
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("#"):
            assert kind == "slide"
        elif grading.get("solution"):  # the stub, as text: rerunning it cannot replace the answer in a live kernel
            assert cell.cell_type == "markdown" and "raise NotImplementedError()" in cell.source and kind == opens
        elif grading.get("grade"):  # a check: its "all checks passed" was the instructor's answer's, so no slide
            assert kind == "skip"
        elif cell.cell_type == "code" and cell.get("id") != "presenter-focus":
            assert kind == opens
    shown_on_slides = [c for c, kind in zip(marked.cells, kinds) if kind != "skip"]
    assert not any("all checks passed" in str(c.get("outputs", "")) for c in shown_on_slides if
                   c.metadata.get("nbgrader", {}).get("grade"))
    assert kinds[0] == "slide" and kinds.count("slide") >= 5
    assert marked.cells[-1].id == "presenter-focus" and kinds[-1] == "skip"
    assert marked.metadata["rise"]["scroll"] is True and marked.metadata["rise"]["width"] == 1280
    assert NotebookNotary().check_signature(marked), "an unsigned deck shows its widgets as text"


def test_figure_gallery_for_review():
    """Each plot function on made-up data, saved to test-artifacts/plots/ so a person can look at the figures."""
    out = ROOT / "test-artifacts" / "plots"
    out.mkdir(parents=True, exist_ok=True)
    busy = [timing.Timing((1e-5, 1.2e-5, 6e-5)), timing.Timing((8e-5, 9e-5, 1e-4)), timing.Timing((6e-4, 7e-4, 9e-4))]
    gpu = [1e-5, 1.1e-5, 2e-5]
    figures = {
        "time_vs_size-spread-busy-note-coinciding": plots.time_vs_size(
            [64, 128, 256], {f"CPU, {device.threads_label(1)} (measured here)": busy, "GPU (recorded)": gpu,
                             "GPU (model)": gpu}, "matmul: seconds per call", note=timing.trust_note(busy)),
        "bars-log-as-points-with-a-zero": plots.bars(
            ["copy batch in (model)", "reads back (model)", "device memory read (model)"], [7.7e-5, 0.0, 3.3e-6],
            "seconds per step", "host link vs device memory (model)", log=True),
        "memory_stack-labelled-chip-line": plots.memory_stack(
            [("GPT-2 small", {"parameters": 2**29, "gradients": 2**29, "optimizer state": 2**31,
                              "activations (model)": 6 * 2**30})], [("NVIDIA T4 (datasheet)", 15 * 2**30)]),
        "lines-coinciding-and-reference-line": plots.lines(
            {"float32": ([0, 1, 2], [0, 1, 2]), "bfloat16": ([0, 1, 2], [0, 1, 2]), "float16": ([0, 1, 2], [0, 1, 1])},
            "additions", "running sum", "coinciding series", hlines={"float16 stalls at 1": 1.0}),
    }
    for name, fig in figures.items():
        fig.savefig(out / f"{name}.png", dpi=80)
        assert (out / f"{name}.png").stat().st_size > 1000


# A figure shows at its natural size (100 dpi) up to the output area's width and shrinks beyond it. In a
# 1024-px window with JupyterLab's file browser open the output area is about 660 px wide.
OUTPUT_AREA_PX_AT_1024 = 660
SMALLEST_TEXT_PX = 12.5  # 9 pt at its natural size


def _smallest_text_px(fig) -> tuple[float, str]:
    """The smallest text of `fig` in screen pixels, shown in a 1024-px window, and that text."""
    fig.canvas.draw() if hasattr(fig.canvas, "draw") else fig.savefig(__import__("io").BytesIO())
    scale = min(1.0, OUTPUT_AREA_PX_AT_1024 / (fig.get_figwidth() * fig.dpi))
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip() and t.get_visible()]
    smallest = min(texts, key=lambda t: t.get_fontsize())
    return smallest.get_fontsize() * fig.dpi / 72 * scale, smallest.get_text()


def test_the_traces_timelines_and_memory_panels_read_at_1024_px():
    """Lessons 05 and 07's figures, as a learner sees them in a 1024-px window: no text under 9 pt's natural size."""
    rows = [{"t_s": t / 10, "util_pct": 50.0, "power_w": 300.0} for t in range(20)]
    lanes = {"CPU": [("aten::mm", 0.0, 400.0), ("aten::add", 500.0, 900.0)], "GPU": [("gemm", 100.0, 800.0)]}
    panels = {m: {s: {"kept whole on every rank": 3e9, "this rank's 1/8 of the sharded part": 1e9} for s in ("ddp", "zero3")}
              for m in ("GPT-2 XL (1.5B)", "LLaMA-7B")}
    figures = {
        "smi_traces": plots.smi_traces({"matmul (model)": rows, "tiny kernels (model)": rows}, 700.0,
                                       "utilisation and power, 100 ms samples (model: NVIDIA H100 SXM5 80GB datasheet)"),
        "timeline": plots.timeline(lanes, "one training step of the small transformer, CPU and GPU lanes (measured here)"),
        "loader_timelines": plots.loader_timelines({"0 workers": ([(0.01, 0.02)], 0.0, 0.05),
                                                    "4 workers": ([(0.0, 0.02), (0.02, 0.04)], 0.0, 0.05)}, "loader"),
        "memory_per_rank": plots.memory_per_rank(panels, [("NVIDIA H100 SXM5 80GB", 80 * 2**30)], "training state per rank"),
    }
    small = {name: _smallest_text_px(fig) for name, fig in figures.items()}
    small = {name: (round(px, 1), text) for name, (px, text) in small.items() if px < SMALLEST_TEXT_PX}
    assert not small, f"text smaller than {SMALLEST_TEXT_PX} px in a 1024-px window: {small}"


def test_only_a_learners_kernels_keep_a_ledger_of_first_guesses(monkeypatch, tmp_path):
    """A presenter's decks and an instructor's server run the solutions: their answers must never become the user's
    first guesses in the ledger a later `make lab` reads (grader.predictions.ledger_path)."""
    from grader import predictions
    from grader.pipeline import lab, run

    monkeypatch.delenv(predictions.ENV_LEDGER, raising=False)
    assert predictions.ENV_LEDGER not in lab.server_env(ROOT)
    assert lab.server_env(ROOT, presenter=True)[predictions.ENV_LEDGER] == ""
    assert lab.server_env(ROOT, instructor=True)[predictions.ENV_LEDGER] == ""

    seen = []

    class Client:  # what run_deck's kernel would start with
        def __init__(self, *args, **kwargs):
            pass

        def execute(self):
            seen.append(os.environ.get(predictions.ENV_LEDGER))

    monkeypatch.setattr("grader.pipeline.kernels.notebook_client", Client)
    run.run_deck(ROOT, "01_crossover", {"demo": True})
    assert seen == [""] and predictions.ENV_LEDGER not in os.environ
