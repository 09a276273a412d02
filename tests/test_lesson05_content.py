"""Lesson 05's toolkit (profile rows, ranges, nvidia-smi parsing, the slow data set and loaders), its data, and its checks' edges."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import multiprocessing
import shutil
import sys

import pytest
import torch
from torch.profiler import record_function

from conftest import ROOT, read_notebook, quiet_model
from grader import loading, profiling, shortcuts, specs
from grader.checks import _keys, lesson05
from grader.notebook import CheckFailed
from notebook_cells import namespace

LESSON = "05_reading_the_machine"


def _instructor_judges():
    """solutions/judges/lesson05.py, which holds the answers of the keyed checks (never packaged)."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import build_keys

    return build_keys.instructor_judges(LESSON)


@pytest.fixture(scope="module")
def small_profile():
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)

    def step():
        with record_function("forward"):
            y = layer(x).sum()
        with record_function("backward"):
            y.backward()

    return profiling.profile_steps(step, steps=2, warmup=1)


def test_rows_are_plain_and_mark_labels(small_profile):
    rows = profiling.rows(small_profile)
    assert rows and all(set(r) == {"name", "calls", "self_us", "total_us", "is_label", "device_type"} for r in rows)
    assert {r["device_type"] for r in rows} == {"CPU"}
    assert all(type(r["name"]) is str and type(r["calls"]) is int and type(r["self_us"]) is float for r in rows)
    by_name = {r["name"]: r for r in rows}
    assert by_name["forward"]["is_label"] and by_name["backward"]["is_label"]
    assert any(name.startswith("ProfilerStep") and r["is_label"] for name, r in by_name.items())
    assert not by_name["aten::addmm"]["is_label"]
    assert by_name["forward"]["calls"] == 2  # the warm-up step is discarded
    assert all(r["self_us"] <= r["total_us"] + 1e-6 for r in rows)


def test_ranges_nest_under_the_step(small_profile):
    spans = profiling.ranges(small_profile)
    steps = [r for r in spans if r["name"].startswith("ProfilerStep")]
    assert len(steps) == 2 and all(r["depth"] == 0 for r in steps)
    forward = [r for r in spans if r["name"] == "forward"]
    assert len(forward) == 2 and all(r["depth"] == 1 and r["start_us"] < r["end_us"] for r in forward)
    assert spans == sorted(spans, key=lambda r: (r["start_us"], r["depth"]))


def test_profiling_writes_nothing_to_stderr():
    """In a fresh process, as a notebook's kernel is: kineto reads its log level once, when a process first profiles
    (a test process that profiled before, without the course's quiet(), prints its start and stop lines)."""
    import subprocess

    code = "import torch\nfrom grader import profiling\nprofiling.profile_steps(lambda: torch.ones(3) + 1, steps=1)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"})
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_parse_smi_reads_numbers_blanks_and_clock_event_reasons():
    text = ("2026/11/30 06:00:00.100, 97, 412.50, 700.00, 81000, 81559, 1755, 1980, 0x0000000000000004\n"
            "2026/11/30 06:00:00.200, 3, [N/A], 700.00, 81000, 81559, 1980, 1980, 0x0000000000000060\n"
            "2026/11/30 06:00:00.300, 3, 80, 700.00, 81000, 81559, 1980, 1980, [Not Supported]\n"
            "garbage line\n")
    rows = profiling.parse_smi(text)
    assert len(rows) == 3
    assert rows[0] == {"t_s": 0.0, "util_pct": 97.0, "power_w": 412.5, "power_limit_w": 700.0,
                       "mem_used_mib": 81000.0, "mem_total_mib": 81559.0, "sm_mhz": 1755.0, "max_sm_mhz": 1980.0,
                       "reasons": ["sw_power_cap"]}
    assert rows[1]["t_s"] == pytest.approx(0.1) and rows[1]["power_w"] is None
    assert rows[1]["reasons"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"] and rows[2]["reasons"] is None
    assert profiling.mean_of(rows, "util_pct") == pytest.approx(103 / 3)
    command = profiling.smi_command(100)
    assert "--loop-ms=100" in command
    assert "clocks.max.sm" in command[1] and "clocks_event_reasons.active" in command[1]


def test_slow_dataset_and_loaders_keep_order():
    data = loading.SlowDataset(7, item_seconds=0.0, features=2)
    x, i = data[3]
    assert i == 3 and x.shape == (2,) and torch.equal(x, loading.SlowDataset(7, 0.0, 2)[3][0])
    with pytest.raises(IndexError):
        data[7]
    slow = loading.slow_loader(data, 3)
    assert [ids.tolist() for _, ids in slow] == [[0, 1, 2], [3, 4, 5], [6]]
    assert loading.settings(slow) == {"num_workers": 0, "batch_size": 3, "shuffle": False, "drop_last": False,
                                      "pin_memory": False, "persistent_workers": False, "prefetch_factor": None,
                                      "start_method": None}
    run = loading.timed_epoch(slow, lambda x: x.sum(), steps=2)
    assert len(run["wait_s"]) == len(run["compute_s"]) == len(run["compute_intervals"]) == 2
    assert all(0 <= a <= b <= run["end"] for a, b in run["compute_intervals"])


def test_worker_loader_keeps_order_and_leaves_no_process():
    before = set(multiprocessing.active_children())
    data = loading.SlowDataset(9, item_seconds=0.0, features=2)
    fast = loading.with_workers(loading.slow_loader(data, 4), 2)
    assert loading.settings(fast)["num_workers"] == 2 and loading.settings(fast)["persistent_workers"]
    assert [ids.tolist() for _, ids in fast] == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    loading.close(fast)
    assert set(multiprocessing.active_children()) <= before


def test_fixed_loader_check_leaves_no_worker_behind():
    before = set(multiprocessing.active_children())
    ns = namespace(LESSON)
    lesson05.check_fixed_loader(ns["fixed_loader"])
    lesson05.loader_on(ns["fixed_loader"], n=5, batch_size=2, item_seconds=0.0001, step_seconds=0.01,
                       want=[[0, 1], [2, 3], [4]], workers=1, why="order")
    assert set(multiprocessing.active_children()) <= before


@pytest.mark.parametrize("forged", [None, [], {}, {"calls": []}, [{"value": "busy"}], {"type": "DataLoader"},
                                    {"type": "DataLoader", "cpu": {}, "cuda": {}}, "busy", 0.5])
@pytest.mark.parametrize("check", ["check_diagnose", "check_busy_fraction", "check_top_ops", "check_idle_by_cause",
                                   "check_fixed_loader", "check_mfu"])
def test_judges_never_pass_a_forged_observation(check, forged):
    with pytest.raises(Exception):  # noqa: B017  CheckFailed, or any exception: the pipeline fails the check either way
        getattr(lesson05, check).judge(forged)


def test_a_judge_reads_plain_answers_and_names_the_mistake():
    always = lesson05.check_diagnose.observe(lambda reading: "busy")  # no mistake the keys know: the principle
    with pytest.raises(CheckFailed, match="what each number measures physically"):
        lesson05.check_diagnose.judge(always)
    crashed = lesson05.check_busy_fraction.observe(lambda intervals, start, end: 1 / 0)
    with pytest.raises(CheckFailed, match="raised ZeroDivisionError"):
        lesson05.check_busy_fraction.judge(crashed)


def test_every_nvidia_chip_names_its_power_limit():
    for chip in specs.load_chips():
        if chip.vendor == "NVIDIA":
            assert chip.power_limit_w and 50 <= chip.power_limit_w <= 1000, chip.name
            assert "power_limit_w" in chip.notes, f"{chip.name}: notes must say where power_limit_w comes from"
        else:
            assert chip.power_limit_w is None and "power_limit_w empty" in chip.notes
    assert "power_limit_w" in (ROOT / "data" / "README.md").read_text()
    assert specs.model_constants()["idle_power_share"]["kind"] == "model assumption"


def test_gpu_script_records_the_profile_section_on_the_cpu():
    spec = importlib.util.spec_from_file_location("gpu_run", ROOT / "scripts" / "gpu_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    figures = module.reading_figures(torch.device("cpu"), quick=True)
    assert figures["traces"] == {} and "no nvidia-smi" in figures["note"]
    rows = figures["profile_rows"]
    assert rows and {"name", "calls", "self_us", "total_us", "is_label", "device_type"} == set(rows[0])
    json.dumps(figures)  # the record is JSON


def test_lesson_shows_recorded_traces_labelled_as_such(tmp_path, monkeypatch):
    from grader.pipeline.run import run

    data = tmp_path / "data"
    shutil.copytree(ROOT / "data", data, ignore=shutil.ignore_patterns("recorded"))
    (data / "recorded").mkdir()
    def trace(util, power, sm, reasons):
        return [{"t_s": t / 10, "util_pct": util, "power_w": power, "power_limit_w": 700.0, "mem_used_mib": 80000.0,
                 "mem_total_mib": 81559.0, "sm_mhz": sm, "max_sm_mhz": 1980.0, "reasons": reasons} for t in range(5)]

    fixture = {  # a test fixture, not a measurement: it lives only in this temporary folder
        "provenance": {"device": "TEST-FIXTURE-GPU", "torch": "0.0", "date": "2000-01-01", "driver": "0", "cuda": "0",
                       "command": "tests/test_lesson05_content.py"},
        "figures": {"reading": {"traces": {"tiny kernels": trace(100.0, 150.0, 1980.0, []),
                                           "bf16 matmul": trace(100.0, 699.0, 1700.0, ["sw_power_cap"])},
                                "power_limit_w": 700.0, "peak_allocated_mib": {"tiny kernels": 10.0, "bf16 matmul": 400.0},
                                "profile_rows": [{"name": "aten::mm", "calls": 2, "self_us": 10.0, "total_us": 10.0,
                                                  "is_label": False, "device_type": "CPU"},
                                                 {"name": "sm80_gemm", "calls": 2, "self_us": 10.0, "total_us": 10.0,
                                                  "is_label": False, "device_type": "CUDA"}],
                                "device_busy_fraction": 0.5}},
    }
    (data / "recorded" / "fixture.json").write_text(json.dumps(fixture))
    monkeypatch.setenv("GRADER_DATA", str(data))
    results = run(ROOT, [LESSON], {"device": "cpu", "demo": True}, tmp_path / "out", log=lambda line: None)
    assert results[0][2] == "ok", results[0][2]
    executed = read_notebook(tmp_path / "out" / f"{LESSON}.ipynb")
    text = json.dumps(executed)
    assert "recorded: TEST-FIXTURE-GPU" in text and "tiny-kernels" in text
    # nvidia-smi's memory at 98% is not an OOM, and a matmul at the power cap is healthy, not "throttled"
    verdicts = next(json.dumps(c.outputs) for c in executed.cells if c.cell_type == "code" and "trace_reading" in c.source)
    assert "busy" in verdicts and "near-oom" not in verdicts and "throttled" not in verdicts
    assert "sw_power_cap (100%)" in verdicts  # a reason with the share of the samples it was active in
    assert "['aten::mm']" in text and "busy 50% of the profiled step" in text


def test_trace_file_is_a_chrome_trace(small_profile, tmp_path):
    path = profiling.trace_file(small_profile, str(tmp_path / "step.json"))
    events = json.loads(open(path, encoding="utf-8").read())["traceEvents"]
    assert any(e.get("name") == "forward" for e in events)


def test_sorting_the_given_list_in_place_is_no_mistake():
    """A learner may sort the ranges they are given in place; the check and the hidden tests still pass (class grader's path)."""
    from grader.pipeline.cellrunner import _observe
    from grader.pipeline.judging import judge_cell
    from notebook_cells import check_cells

    source = """
def idle_by_cause(compute, loading, start, end):
    compute.sort()
    loading.sort()
    cuts = sorted({start, end, *(t for a, b in compute + loading for t in (a, b) if start < t < end)})
    waiting = other = 0.0
    for a, b in zip(cuts, cuts[1:]):
        m = (a + b) / 2
        if not any(s <= m <= e for s, e in compute):
            if any(s <= m <= e for s, e in loading):
                waiting += b - a
            else:
                other += b - a
    return waiting, other

def busy_fraction(intervals, start, end):
    intervals.sort()
    busy, reached = 0.0, start
    for a, b in intervals:
        a, b = max(a, reached), min(b, end)
        if b > a:
            busy, reached = busy + b - a, b
    return busy / (end - start)
"""
    ns = namespace(LESSON)
    exec(compile(source, "<in-place>", "exec"), ns)

    def ask(request):
        return "ok", {"ok": True, "observation": _observe(request, ns), "stdout": "", "stderr": ""}

    for grade_id in ("idle_by_cause_check", "busy_fraction_check"):
        state, reply = judge_cell(check_cells(LESSON)[grade_id], ask)
        assert state == "ok" and reply["ok"], reply


def _markdown() -> str:
    nb = read_notebook(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb")
    return " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")


def test_the_text_reads_memory_power_and_clocks_as_they_are():
    """The defects of issue 19: each claim here was false or missing in the first edition."""
    text = _markdown()
    # nvidia-smi's memory used is the context plus the allocator's reserve; OOM risk is torch's peak
    assert "the next allocation fails" not in text
    assert "caching allocator" in text and "max_memory_allocated()" in text and "95-99%" not in text
    # at the power cap is normal; power cap and heat are told apart by the clocks' event reasons
    assert "throttl" not in text.replace("clocks_throttle_reasons", "")
    assert "not a fault" in text and "sw_power_cap" in text and "hw_thermal_slowdown" in text
    assert "clocks.max.sm" in text and "clocks_event_reasons" in text
    # NVML averages: utilisation over 1/6 to 1 s, power over 1 s on Ampere and newer
    assert "between 1/6 s and 1 s" in text and "averaged over 1 s" in text
    # the DataLoader's self time is idle device time only when nothing is queued (true here: learn synchronizes)
    assert "Only when nothing is queued" in text and "ends with a synchronize" in text
    # loaders: k workers per batch-read time, judged by mean wait and busy share
    assert "mean wait" in text and "median hides bursts" in text
    assert "MFU" in text.split("## 7")[1] and "## 7" in text.split("## What to remember")[0]


def test_no_stub_docstring_restates_an_answer():
    """The student release's docstrings state the contract, not the formula or recipe."""
    nb = read_notebook(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb")
    stubs = "\n".join(c.source for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution"))
    for answer in ("self_us", "is_label", "6 *", "ceil", "sorted", "0.9", "< 50", "0.5", "thermal_slowdown"):
        assert answer not in stubs, answer


def test_loader_chart_draws_the_busy_share_as_the_green_part_of_each_lane():
    """The chart shows what 'busy 38%' means: green compute over the red run, not a median bar with a label on top."""
    from grader import plots

    intervals = [(0.004, 0.005), (0.009, 0.010), (0.010, 0.011)]
    fig = plots.loader_timelines({"2 workers\nbusy 27%": (intervals, 0.0, 0.011)}, "test")
    bars = fig.axes[0].patches
    red = [b for b in bars if b.get_facecolor()[:3] == pytest.approx((0xEE / 255, 0x66 / 255, 0x77 / 255))]
    green = [b for b in bars if b.get_facecolor()[:3] == pytest.approx((0x22 / 255, 0x88 / 255, 0x33 / 255))]
    assert len(red) == 1 and len(green) == 3
    share = sum(b.get_width() for b in green) / red[0].get_width()
    assert share == pytest.approx(3 / 11)
    assert fig.axes[0].get_xlabel().endswith("(ms)") and fig.get_size_inches()[0] * fig.dpi <= 1024


def test_idle_exercise_asks_whose_fault_the_idle_time_is():
    """Issue 19: idle_gaps repeated busy_fraction; idle_by_cause makes the learner tell the loader's idle time from the rest."""
    text = _markdown()
    assert "idle_gaps" not in text and "idle_by_cause" in text
    assert "waiting for data" in text and "two owners" in text and "device_intervals" in text
    exercise = text.split("**Exercise 4 (diagnose).**")[1].split("**Prediction (IDLE_GUESS)")[0]
    # third edition: the contract names neither the shapes a profile's ranges take nor the rule for loading under
    # compute; the learner derives both from the two owners
    assert "overlap" not in exercise and "sit inside" not in exercise and "stick out" not in exercise


def test_idle_check_cases_cover_every_branch_the_lesson_teaches():
    """The visible cases hold each shape a profile gives, so no mistake passes the ✓ and fails only a hidden test."""
    cases = list(lesson05._IDLE.values())
    want = _instructor_judges()._IDLE_WANT  # the answers live with the instructor (solutions/judges), not in the package
    answered = [(lesson05._IDLE[name], want[name]) for name in lesson05._IDLE]

    def pairs(ranges):
        return [(a, b) for i, a in enumerate(ranges) for j, b in enumerate(ranges) if i != j]

    assert any(c1[0] < l[0] < c1[1] < l[1] for compute, loading, _, _ in cases for c1 in compute for l in loading)
    assert any(a[1] == b[0] for compute, _, _, _ in cases for a, b in pairs(compute))  # compute ranges that touch
    assert any(a[0] < b[0] < a[1] < b[1] for compute, _, _, _ in cases for a, b in pairs(compute))  # overlapping compute
    assert any(a[0] <= b[0] and b[1] <= a[1] for compute, _, _, _ in cases for a, b in pairs(compute))  # nested
    assert any(list(compute) != sorted(compute) for compute, _, _, _ in cases)
    assert any(list(loading) != sorted(loading) for _, loading, _, _ in cases)
    assert any(a < start or b > end for compute, loading, start, end in cases for a, b in compute + loading)
    assert any(not compute for compute, _, _, _ in cases) and any(not loading for _, loading, _, _ in cases)
    assert any(split[1] > 0 and loading for (_, loading, _, _), split in answered)  # idle outside loading
    assert any(split == (0.0, 0.0) and loading for (_, loading, _, _), split in answered)  # load hidden


def test_loop_ranges_reads_a_starved_loop():
    """profiling.loop_ranges: the compute ranges, the DataLoader's ranges and the profiled steps' window."""
    data = loading.SlowDataset(12, item_seconds=0.0005, features=4)
    batches = iter(loading.slow_loader(data, 3))

    def step():
        x = next(batches)[0]
        with record_function("compute"):
            x.sum()

    loop = profiling.loop_ranges(profiling.profile_steps(step, steps=2))
    assert len(loop["compute"]) == 2 and len(loop["loading"]) == 2
    start, end = loop["window"]
    for a, b in loop["compute"] + loop["loading"]:
        assert start <= a < b <= end
    assert sum(b - a for a, b in loop["loading"]) >= 2 * 3 * 500  # 3 items of 0.5 ms per batch, in µs


def test_nvidia_smi_memory_power_and_clock_reasons_are_read_as_they_are():
    """05 section 1 and its summary said a healthy run reads 95-99% used (the allocator holds what the peak needed,
    it does not fill the card), that a stream of kernels doing little arithmetic draws little power (moving data
    costs more energy than arithmetic on it), ignored hw_slowdown and hw_power_brake_slowdown, and section 7 said a
    launch-bound step, whose kernels are shorter than their launch gaps, would keep nvidia-smi at 100%."""
    text = "\n".join(c.source for c in read_notebook(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb").cells)
    assert "95-99%" not in text, "05 still calls 95-99% of the card used the healthy state"
    assert "would keep nvidia-smi at 100%" not in text, "05 still gives a launch-bound step full utilisation"
    assert "do little arithmetic\n#   draw little" not in text and "do little arithmetic draw little" not in text
    assert "fragmentation" in text and "outside the allocator" in text
    assert "data movement" in text and "hw_slowdown" in text and "hw_power_brake_slowdown" in text


# --- third edition (issue 30): the CUDA paths, read from torch 2.13's profiler and nvidia-smi, tested without a GPU ---


def test_a_cuda_profile_counts_each_operator_and_kernel_once():
    """A CUDA profile's key_averages() holds aten::mm, its kernel and cudaLaunchKernel as three rows (and each label on
    the host and on the device): rows() says where each ran, top_ops (the reference) names each operator once, and
    launches() counts each kernel once. The lesson as it was summed every non-label row: three launches per matmul."""
    import cuda_profile

    prof = cuda_profile.matmul_steps(steps=2)
    table = profiling.rows(prof, use_device=True)
    by = {(r["name"], r["device_type"]): r for r in table}
    assert by[("aten::mm", "CPU")]["self_us"] == by[(cuda_profile.GEMM, "CUDA")]["self_us"] == 800.0
    assert ("cudaLaunchKernel", "CPU") in by and ("forward", "CUDA") in by and by[("forward", "CUDA")]["is_label"]
    ns = namespace(LESSON)
    assert ns["top_ops"](table, 2) == ["aten::mm", "aten::add"]
    assert profiling.launches(table, 2) == 2.0  # a matmul and an add per step
    old_count = sum(r["calls"] for r in table if not r["is_label"]) / 2  # the first edition's ops per step
    assert old_count == 7.0  # op + kernel + cudaLaunchKernel for each of the two, and the synchronize: not 2


def test_device_busy_time_is_the_kernels_on_the_device_never_host_ranges():
    """On CUDA the busy share is the union of kernel intervals inside the profiled steps; the device's copies of the
    labels (which span idle gaps) and the host's ranges (which end once kernels are queued) are not busy time."""
    import cuda_profile

    from grader import gpu

    prof = cuda_profile.matmul_steps(steps=2, gap_us=100.0)
    assert profiling.device_intervals(prof) == [(30.0, 430.0), (430.0, 450.0), (590.0, 990.0), (990.0, 1010.0)]
    loop = profiling.loop_ranges(prof, use_device=True)
    assert loop["compute"] == profiling.device_intervals(prof) and loop["window"] == (0.0, 1020.0)
    figures = gpu.profile_figures(prof, 2)
    assert figures["device_busy_fraction"] == pytest.approx(840 / 1020)
    assert figures["kernels_per_step"] == 2.0
    host = profiling.loop_ranges(prof, compute="forward")["compute"]
    assert sum(b - a for a, b in host) == 900.0  # the host's labelled ranges would have said 900 of 1020 µs


def test_nvidia_smi_is_asked_field_by_field_and_tolerates_missing_values():
    """A driver before 535 knows clocks_throttle_reasons, not clocks_event_reasons, and one unknown field fails the
    whole query; a MIG instance reports [N/A] where the lesson formatted a number ({:.0f} of None raised)."""
    import subprocess

    def driver_530(command, **kwargs):
        field = command[1].split("=", 1)[1]
        known = field != "clocks_event_reasons.active"
        return subprocess.CompletedProcess(command, 0 if known else 2, "0x4\n" if known else "",
                                           "" if known else "Field is not a valid field to query.")

    fields = profiling.smi_fields(run=driver_530)
    assert "clocks_throttle_reasons.active" in fields and "clocks_event_reasons.active" not in fields
    assert len(fields) == len(profiling.SMI_FIELDS)
    command = profiling.smi_command(100, fields)
    assert "clocks_throttle_reasons.active" in command[1]
    mig = "2026/12/03 10:00:00.100, [N/A], 61.20, [N/A], 9800, 10240, [N/A], [N/A], 0x0000000000000000\n"
    row = profiling.parse_smi(mig, fields)[0]
    assert row["util_pct"] is None and row["power_limit_w"] is None and row["mem_used_mib"] == 9800.0
    assert row["reasons"] == []
    words = profiling.smi_words(row)
    assert "n/a" in words and "9800 of 10240 MiB" in words
    old = profiling.parse_smi(mig.replace(", 0x0000000000000000", ""), [f for f in fields if "reasons" not in f])[0]
    assert old["reasons"] is None and old["power_w"] == pytest.approx(61.2)


def test_the_gpu_runs_measure_mfus_peak_on_sizes_that_are_not_launch_bound():
    """05 measured a GPU's peak on 256² and 512² matmuls with a synchronize per call: launch-bound on an H100."""
    spec = importlib.util.spec_from_file_location("gpu_run", ROOT / "scripts" / "gpu_run.py")
    gpu_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_run)
    assert min(gpu_run.GPU_PARAMETERS[LESSON]["peak_sizes"]) >= 4096
    setup = next(c.source for c in read_notebook(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb").cells
                 if "DEVICE = dev.pick_device" in c.source)
    assert 'DEVICE.type == "cuda" and max(peak_sizes) < 4096' in setup


def test_diagnose_treats_hardware_slowdowns_as_faults_and_flashes_as_noise():
    """The first edition's diagnose read only the thermal reasons: hw_slowdown and hw_power_brake_slowdown holding the
    clock down all through a trace passed as tiny kernels; nvidia-smi says hw_slowdown may flash on a clock change."""
    ns = namespace(LESSON)
    assert ns["diagnose"](lesson05._D["reading 11"]) == ns["diagnose"](lesson05._D["reading 12"]) == "slowed"
    assert ns["diagnose"](lesson05._D["reading 13"]) == "busy"
    old = lesson05.reading(99.0, 230.0, 700.0, 800.0, 1980.0, {"hw_slowdown": 0.9})
    thermal_only = {"hw_thermal_slowdown", "sw_thermal_slowdown"} & set(old["reasons"])
    assert not thermal_only and old["power_w"] / old["power_limit_w"] < 0.5  # the old rules: 'tiny-or-memory-bound'


def test_the_mfu_guess_model_counts_the_kernels_a_gpu_launches_not_the_cpus_operators():
    """The first model counted every operator of a CPU profile as a launch (1985 a step: nested operators, views,
    AdamW's loop per parameter), so it said 2.6e-6 and an honest count of the step's kernels (about a hundred) missed
    it by more than ten times. The model counts the operators that hand work to the device, AdamW as a GPU runs it."""
    model = quiet_model(lesson05.launch_bound_model)()
    assert 60 <= model["kernels"] <= 300, model
    net, opt, tokens = lesson05._small_transformer()
    cpu_operators = profiling.launches(profiling.rows(profiling.profile_steps(
        lambda: (opt.zero_grad(), torch.nn.functional.cross_entropy(net(tokens).flatten(0, 1), tokens.flatten()).backward(),
                 opt.step()), steps=1)), 1)
    assert cpu_operators > 5 * model["kernels"]  # what the first model counted
    six_n = _instructor_judges().small_step_flops()  # the parameters' share: attention's matmuls add a few percent
    assert six_n < model["flops"] < 1.1 * six_n
    assert model["mfu"] == pytest.approx(model["flops"] / model["step_seconds"] / specs.chip("H100").peak("bf16"))
    band = quiet_model(lesson05._mfu_guess_band)
    paper = 50e6 / (120 * 1e-5) / 989e12  # about a hundred and twenty kernels of 10 µs for 50 MFLOP, on paper
    assert band({"mfu": paper}, {})[0] == 1.0
    solution = next(c.source for c in read_notebook(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb").cells
                    if c.source.startswith("MFU_GUESS"))
    guess = float(re.search(r'"mfu": ([0-9][0-9.e-]*)', solution).group(1))
    assert band({"mfu": guess}, {})[0] == 1.0


def test_device_ops_leaves_out_what_launches_no_kernel():
    x = torch.randn(4, 8, requires_grad=True)
    counted = profiling.device_ops(lambda: (x.t().reshape(8, 4).transpose(0, 1) * 2).sum().backward())
    assert "aten::t" not in counted and "aten::view" not in counted and "aten::transpose" not in counted
    assert counted.get("aten::mul", 0) >= 1 and counted.get("aten::sum", 0) == 1


def test_the_mfu_checks_models_leave_no_count_of_biases_or_layernorm_to_judge():
    """Counting biases and LayerNorm or not changes an MFU by a percent; the keyed check compares exact answers, so
    its models carry neither, and they still run."""
    for name, (make, *_) in lesson05._MFU_MODELS.items():
        model = make()
        assert not [n for n, _ in model.named_parameters() if n.endswith("bias") or ".ln" in n or n.startswith("ln")], name
    model = lesson05._MFU_MODELS["gpt"][0]()
    assert model(torch.zeros(1, 4, dtype=torch.long)).shape == (1, 4, 512)


def test_fixed_loaders_worker_counts_are_not_in_the_package():
    """A copy test pasted the package's general worker count (workers_needed) into fixed_loader, and in round 3 read
    the answer off the shipped counts of the check's three cases (_NEEDED = (4, 11, 1)): the counts live in the
    instructor's judge, and the check judges the workers by keys."""
    assert not hasattr(lesson05, "workers_needed")
    assert not hasattr(lesson05, "_NEEDED") and not hasattr(lesson05, "_FROM_ONE_ITEM")
    assert isinstance(lesson05.check_fixed_loader, _keys.Keyed)
    judges = _instructor_judges()
    assert judges._NEEDED == (4, 11, 1) and judges._FROM_ONE_ITEM == (1, 2, 1)


@pytest.mark.parametrize("name", list(lesson05._MFU_MODELS))
def test_the_mfu_judges_count_is_what_torch_computes_for_the_parameters_matmuls(name):
    """The instructor's count (each matmul: forward; its weight's gradient if trained; its input's if a trained
    parameter lies below), computed a second way: torch's FLOP counter on a real forward and backward of the check's
    model, attention's batched matmuls left out. Frozen layers, a first layer fed data and a tied head included."""
    from torch.utils.flop_counter import FlopCounterMode

    make, batch, seq, *_ = lesson05._MFU_MODELS[name]
    model = make()
    x = (torch.randint(0, model.shape.vocab_size, (batch, seq)) if hasattr(model, "tokens")
         else torch.randn(batch, seq, model[0].in_features))
    with FlopCounterMode(display=False) as counter:
        model(x).float().sum().backward()
    matmuls = sum(v for op, v in counter.get_flop_counts()["Global"].items() if "bmm" not in str(op))
    assert matmuls == _instructor_judges()._step_flops_per_token(model) * batch * seq


def test_the_textbook_6n_is_wrong_where_part_of_the_model_is_frozen():
    """6 FLOPs per weight per token holds for a model trained whole whose first matmul is fed by a trained table; the
    check has models where it does not hold, and its mutant is told so."""
    judges = _instructor_judges()
    six_n = {name: judges._step_flops_per_token(make(), weight_grad="always", input_grad="always")
             for name, (make, *_) in lesson05._MFU_MODELS.items()}
    right = {name: judges._step_flops_per_token(make()) for name, (make, *_) in lesson05._MFU_MODELS.items()}
    assert six_n["gpt"] == right["gpt"] and six_n["long_context"] == right["long_context"]
    assert all(six_n[n] > right[n] for n in ("mlp", "mlp_bottom_frozen", "mlp_middle_frozen", "gpt_table_frozen",
                                             "gpt_top_tuned"))


def test_no_cell_source_states_idle_guess_answer():
    """A copy test read IDLE_GUESS's answer off the source of later cells (the reveal cell's printed sentences, the
    summary table's label) before guessing: the reading now comes from a watched course_only function."""
    nb = read_notebook(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb")
    for cell in nb.cells:
        for said in ("theirs to shrink", "not the loader's", "only the loader's idle time", "make batches arrive sooner"):
            assert said not in cell.source, (said, cell.source[:200])
    assert lesson05.idle_split_reading.course_only in lesson05.check_idle_guess.watched
    assert "grader.loading.with_workers" in lesson05.check_idle_guess.watched


def test_diagnose_lists_its_verdicts_in_no_order_of_precedence():
    """Copy test r22 wrote section 1's readings as ifs in the order the exercise listed the verdicts, which was the
    order they must be tested in. The list and the stub now name them in no such order: which comes first is the
    learner's to work out (what ends a run, what only wastes it)."""
    from notebook_cells import solution_cells

    text = "\n".join(c.source for c in read_notebook(ROOT / "notebooks" / "05_reading_the_machine" /
                                                     "05_reading_the_machine.ipynb").cells)
    start = text.index("Return what the machine is doing")
    order = sorted(("near-oom", "waiting", "slowed", "tiny-kernels", "busy"), key=lambda w: text.index(f'`"{w}"`', start))
    assert order != ["near-oom", "waiting", "slowed", "tiny-kernels", "busy"], order
    stub = solution_cells("05_reading_the_machine", student=True)["diagnose"]
    assert "'near-oom', 'waiting', 'slowed', 'tiny-kernels', 'busy'" not in stub


def test_the_lessons_own_cells_never_count_as_asking_for_a_prediction(tmp_path):
    """Copy test r33: with every function done and both predictions left blank, running the rest of the lesson zeroed
    MFU_GUESS (section 6's op count calls profiling.device_ops) and, when fixed_loader chose other than 2 workers,
    IDLE_GUESS (section 5's table calls loading.with_workers), though neither cell shows their answers. Those cells
    now wait for a first guess with one line, so a learner who comes back to the predictions still earns them."""
    from grader import predictions
    from grader.pipeline.kernels import notebook_client

    nb = read_notebook(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb")
    release = read_notebook(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb")
    blank = {c.metadata["nbgrader"]["grade_id"]: c.source for c in release.cells
             if c.metadata.get("nbgrader", {}).get("grade_id") in ("MFU_GUESS", "IDLE_GUESS")}
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in blank:
            cell.source = blank[grade_id]
        if cell.cell_type == "code" and "def fixed_loader" in cell.source:  # 3 workers, not 2: the loader table then
            cell.source = cell.source.replace(  # builds a "2 workers" loader, with loading.with_workers
                "workers = max(1, math.ceil(batch_size * dataset.item_seconds / step_seconds))", "workers = 3")
            assert "workers = 3" in cell.source
    folder = tmp_path / LESSON
    folder.mkdir()
    record = folder / predictions.FILE_NAME
    with predictions.environment(**{predictions.ENV_PATH: str(record), predictions.ENV_LEDGER: ""}):
        notebook_client(nb, timeout=600, kernel_name="python3", allow_errors=True,
                        resources={"metadata": {"path": str(folder)}}).execute()
    stamped = {name: entry.get("revealed") for part in predictions.read(record).values()
               for name, entry in part["entries"].items()}
    assert not any(stamped.get(name) for name in blank), stamped
    skipped = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    for name in blank:
        assert any(f"this cell runs what is scored against `{name}`" in text for text in skipped), name
