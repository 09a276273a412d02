"""Lesson 01's claims and corrections, each held by a test that fails on the old text or code."""

from __future__ import annotations

import ast
import json
import math
import statistics
import sys
from typing import Optional, Sequence

import pytest
import torch

from conftest import ROOT, blank_run_group, read_notebook, quiet_model
from notebook_cells import cell_index, graded, shown_by
from grader import plots, shortcuts, specs, timing
from grader.checks import lesson01
from grader.pipeline.judging import plan_cell

LESSON = "01_crossover"


sys.path.insert(0, str(ROOT / "scripts"))
import build_keys  # noqa: E402

JUDGES = build_keys.instructor_judges(LESSON)  # solutions/judges/lesson01.py: the course's models, never packaged
SOLUTION = ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"
STUDENT = ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"


def _sources(kind: str) -> list[str]:
    return [c.source for c in read_notebook(SOLUTION).cells if c.cell_type == kind]


def _markdown() -> str:
    return "\n".join(_sources("markdown"))


def _cell_with(text: str) -> str:
    found = [s for s in _sources("code") if text in s]
    assert len(found) == 1, f"want one code cell holding {text!r}, found {len(found)}"
    return found[0]


def _defined(name: str, ns: dict | None = None) -> object:
    """The notebook's function `name`, defined alone (its source cut out of the cell with ast)."""
    for source in _sources("code"):
        python = "\n".join("" if line.lstrip().startswith("%") else line for line in source.splitlines())
        for node in ast.parse(python).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                scope = {"statistics": statistics, "Sequence": Sequence, "Optional": Optional, "torch": torch,
                         **(ns or {})}
                exec(compile(ast.Module([node], []), f"<{name}>", "exec"), scope)
                return scope[name]
    raise KeyError(name)


def _parameters() -> dict:
    cell = next(c for c in read_notebook(SOLUTION).cells if "parameters" in c.get("metadata", {}).get("tags", []))
    scope: dict = {}
    exec(cell.source, scope)
    return scope


# --- balance points --------------------------------------------------------------------------


def test_balance_text_agrees_with_the_table():
    text = _markdown()
    assert "25 to 300" not in text, "the old balance range (25 to 300 FLOP/byte) is back"
    assert "10 to 20 FLOP/byte for fp32" in text and "100 to 300 for bf16" in text
    training = [c for c in specs.load_chips() if any(t in c.name for t in ("V100", "A100", "H100", "H200"))]
    assert len(training) == 4
    assert all(9 <= c.balance("fp32") <= 21 for c in training), [(c.name, c.balance("fp32")) for c in training]
    bf16 = [c.balance("bf16") for c in training if c.has_roofline("bf16")]
    assert bf16 and all(100 <= b <= 300 for b in bf16), bf16


def test_balance_ranges_are_printed_from_the_table():
    cell = _cell_with("Training GPUs")
    assert "c.balance(\"fp32\")" in cell and "c.balance(\"bf16\")" in cell, "the ranges must be computed, not typed"


# --- batch 1 against batch 8: the weights, not the launch ------------------------------------


def test_batch_section_explains_by_the_weight_read():
    text = _markdown()
    assert "A launch has a fixed cost" not in text, "the old explanation (the launch dominates) is back"
    assert "memory-bound on reading its weights" in text
    assert "LLM" in text and "batching" in text.lower()


def test_the_gpu_model_shows_the_weight_read_dominating_at_small_batch():
    params = _parameters()
    chip = specs.chip(params["model_chip"])
    d = params["linear_d"]
    constants = specs.model_constants()
    fixed = sum(constants[f"{k}_seconds"]["value"] for k in ("host_dispatch", "kernel_launch", "sync"))
    weight_read = d * d * 4 / chip.bandwidth
    assert weight_read > fixed, "at the lesson's defaults the launch would dominate, not the weights"
    calls = {b: fixed + JUDGES.linear_model(b, d, d, 4, chip.peak("fp32"), chip.bandwidth)["seconds_per_sample"] * b
             for b in (1, 8)}
    assert calls[8] < 1.1 * calls[1], "batch 8 should cost about what batch 1 does on the modelled GPU"
    assert all(JUDGES.linear_model(b, d, d, 4, chip.peak("fp32"), chip.bandwidth)["bound"] == "memory" for b in (1, 8))


def test_the_measured_linear_table_shows_the_spread():
    cell = _cell_with("layer = torch.nn.Linear")
    assert "fastest–slowest run" in cell and "rounds" in cell and "time_op" in cell


def test_the_solution_forecast_is_the_checks_model():
    ns: dict = {}
    for name in ("intensity", "attainable_flops", "bound"):
        ns[name] = _defined(name)
    forecast = _defined("linear_forecast", ns)
    for args in [(1, 4096, 4096, torch.bfloat16, 989.5e12, 3350e9), (512, 2048, 1024, torch.float32, 8.1e12, 320e9),
                 (64, 4096, 4096, torch.float32, 19.5e12, 2039e9)]:
        got, want = forecast(*args), JUDGES.linear_model(*args[:3], args[3].itemsize, *args[4:])
        assert got["bound"] == want["bound"]
        assert math.isclose(got["intensity"], want["intensity"], rel_tol=1e-12)
        assert math.isclose(got["seconds_per_sample"], want["seconds_per_sample"], rel_tol=1e-12)


# --- model constants ------------------------------------------------------------------------


LESSON_CONSTANTS = ("host_dispatch_seconds", "kernel_launch_seconds", "sync_seconds")


def test_model_constants_are_labelled_assumptions():
    doc = json.loads((ROOT / "data" / "model_constants.json").read_text(encoding="utf-8"))
    for key, entry in doc.items():
        if not key.startswith("_"):
            assert entry["kind"] == "model assumption", key
            assert isinstance(entry["value"], (int, float)) and entry["value"] > 0, key
    for key in LESSON_CONSTANTS:
        entry = doc[key]  # the GPU model of lesson 01 needs each of them
        assert entry["stands_for"].strip() and entry["source"].strip(), key
        words = json.dumps(entry).lower()
        assert "measured" not in words and "measures" not in words, f"{key} is an assumption: it names nothing measured"


def test_the_gpu_model_includes_dispatch_and_sync():
    cell = _cell_with("def matmul_rounds")
    assert '"host_dispatch", "kernel_launch", "sync"' in cell and "overhead +" in cell


# --- the crossover sentence ---------------------------------------------------------------------


def test_crossover_sentence_reads_right_when_the_crossover_is_the_smallest_size():
    sentence = _defined("crossover_sentence")
    sizes = [32, 64, 128]
    smallest = sentence(32, sizes, "GPU")
    assert "Below that" not in smallest and "every size" in smallest
    middle = sentence(64, sizes, "GPU")
    assert "Below that" in middle and "n = 64" in middle
    assert "never" in sentence(None, sizes, "GPU")


# --- the bandwidth probe --------------------------------------------------------------------


def test_bandwidth_probe_counts_the_bytes_that_move():
    cell = _cell_with("here_bandwidth =")
    assert "big + big" not in cell, "adding a tensor to itself reads one array but counts two"
    probe = cell.split("with skip_if_not_done")[0]
    from grader import device as dev

    ns = {"torch": torch, "timing": timing, "statistics": statistics, "DEVICE": torch.device("cpu"), "dev": dev,
          "math": __import__("math"), "lesson01": lesson01,
          "SYNC": lambda: None, "warmup": 0, "repeats": 1, "rounds": 1, "spread_of": _defined("spread_of"),
          "BUSY_SPREAD": 0.5}
    exec(compile(probe, "<probe>", "exec"), ns)
    a, b, out = ns["add_a"], ns["add_b"], ns["add_out"]
    assert a.data_ptr() != b.data_ptr() != out.data_ptr() != a.data_ptr(), "the add must read two tensors and write a third"
    assert "add_out.copy_(add_a)" in probe, "the bandwidth probe copies one tensor into another that exists"
    assert ns["copy_bytes"] == 2 * a.numel() * a.element_size()
    assert ns["here_bandwidth"] > 0
    from grader import predictions

    assert predictions.context(LESSON)["copy_bandwidth"] == ns["here_bandwidth"], "ADD_PREDICTION is judged with it"


# --- timers agree within a stated tolerance ------------------------------------------------------


def test_timer_comparison_states_its_tolerance():
    assert "The ratio should be near 1" not in _markdown()
    tolerance = float(_cell_with("AGREE_WITHIN =").split("AGREE_WITHIN =")[1].split("#")[0])
    assert 0 < tolerance < 1
    cell = _cell_with("timing.benchmark_median")
    assert "They agree" in cell and "They disagree" in cell and "gap <= AGREE_WITHIN" in cell
    cell = _cell_with("timing.unsynchronized")
    assert "both timings agree (ratio" not in cell, "'agree' without a tolerance is back"
    assert "differ <= AGREE_WITHIN" in cell


# --- hidden tests name the right dtype -----------------------------------------------------------


def _hidden_steps():
    for cell in read_notebook(SOLUTION).cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            for step in plan_cell(cell.source):
                if step.hidden:
                    yield step


def test_hidden_test_messages_name_the_dtype_of_their_arguments():
    checked = 0
    for step in _hidden_steps():
        dtypes = [a for a in step.kwargs.get("args", ()) if isinstance(a, torch.dtype)]
        for dtype in dtypes:
            assert str(dtype).removeprefix("torch.") in step.kwargs["why"], step.kwargs["why"]
            checked += 1
    assert checked >= 5


def test_the_bf16_bound_test_uses_a_bf16_intensity_and_peak():
    for step in _hidden_steps():
        why = step.kwargs.get("why", "")
        if step.names == ["bound"] and "bfloat16" in why:
            x, peak, _ = step.kwargs["args"]
            assert math.isclose(x, 2 * 4096**3 / (3 * 4096**2 * 2)), "a 4096² bf16 matmul does 4096/3 FLOP per byte"
            assert peak == specs.chip("H100").peak("bf16")
            return
    pytest.fail("no hidden bound test for a bf16 matmul")


def test_linear_forecast_hidden_answers_are_the_model():
    found = 0
    for step in _hidden_steps():
        if step.names == ["linear_forecast"]:
            batch, d_in, d_out, dtype, peak, bandwidth = step.kwargs["args"]
            want = JUDGES.linear_model(batch, d_in, d_out, dtype.itemsize, peak, bandwidth)
            got = step.kwargs["want"]
            assert got["bound"] == want["bound"]
            assert all(math.isclose(got[k], want[k], rel_tol=1e-9) for k in ("intensity", "seconds_per_sample"))
            found += 1
    assert found >= 2


# --- the sweep figure ---------------------------------------------------------------------


def test_thread_count_label_has_the_right_plural():
    plural = _defined("plural")
    assert plural(1, "thread") == "1 thread" and plural(2, "thread") == "2 threads"
    assert "threads (measured here)" not in _cell_with("def matmul_rounds")


def test_sweep_says_when_the_machine_was_too_busy():
    cell = _cell_with("def matmul_rounds")
    assert "too busy" in cell and "BUSY_SPREAD" in cell and "plots.with_spread" in cell
    spread_of = _defined("spread_of")
    assert spread_of([1.0, 1.0, 3.0]) == 2.0 and spread_of([2.0, 2.0]) == 0.0


def test_spread_figure_draws_bars_for_samples_and_keeps_the_legend_off_the_data():
    fig = plots.with_spread([32, 64], {"CPU (measured here)": [[1e-5, 2e-5, 4e-5], [3e-5, 5e-5]],
                                       "T4 (model)": [1e-5, 2e-5]}, "matrix size n", "seconds per call", "t")
    ax = fig.axes[0]
    assert len(ax.containers) == 1, "one error-bar set: the measured series, not the model"
    assert ax.get_legend() is None and len(fig.legends) == 1
    assert ax.get_xlabel() and ax.get_ylabel()
    assert all(t.get_fontsize() >= 9 for t in fig.legends[0].get_texts())
    assert ax.xaxis.label.get_fontsize() >= 9 and ax.yaxis.label.get_fontsize() >= 9
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64"]


# --- what a learner sees in a blank notebook -------------------------------------------------------


def test_opening_says_where_run_all_stops():
    assert "Run All\n# stops" not in _markdown()
    assert "stops at the first exercise you have not done yet, with one line saying which" in " ".join(_markdown().split())


@blank_run_group(LESSON)
def test_blank_release_fails_only_at_check_cells_with_one_line(blank_release):
    nb, _ = blank_release(LESSON)  # the blank release as stored, run cell by cell (conftest), shared with other tests
    graded = {i for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    errors = {i: o for i, c in enumerate(nb.cells) if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"}
    assert set(errors) == graded, f"errors outside check cells: {sorted(set(errors) - graded)}"
    for i, error in errors.items():
        assert error.ename == "NotDone" and len(error.traceback) == 1, (i, error.ename, error.traceback)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("name") != "stderr" or "WARNING" in out.get("text", ""), out.get("text")


def test_linear_forecast_judge_refuses_forged_observations():
    from grader.checks._common import _key

    args = [lesson01._linear_args(*case) for case in lesson01._LINEAR_CASES]
    right = [JUDGES.linear_model(a[0], a[1], a[2], a[3].itemsize, a[4], a[5]) for a in args]
    forged = [None, 1, "x", [], {}, {"calls": "x"}, {"name": "f", "calls": [["k", {"value": 1}]]},
              {"name": "f", "calls": [[_key(a), {"value": [1, 2]}] for a in args]},
              {"name": "f", "calls": [[_key(a), {"value": {**r, "intensity": {"__float__": "nan"}}}] for a, r in zip(args, right)]},
              {"name": "f", "calls": [[_key(a), {"value": {**r, "bound": ["memory"]}}] for a, r in zip(args, right)]},
              {"name": "f", "calls": [[_key(a), {"value": {**r, "extra": 1}}] for a, r in zip(args, right)]},
              {"name": "f", "calls": [[_key(a), {"raised": "X", "message": "m"}] for a in args]}]
    inner = lesson01.check_linear_forecast.inner  # the keyed check under its shortcut guard (r27)
    for observation in forged:
        with pytest.raises(Exception):
            inner.judge(observation)
        with pytest.raises(Exception):
            lesson01.check_linear_forecast.judge({"observed": observation, "shortcuts": []})
    honest = {"name": "f", "calls": [[_key(a), {"value": r}] for a, r in zip(args, right)]}
    inner.judge(honest)
    lesson01.check_linear_forecast.judge({"observed": honest, "shortcuts": []})


# --- every exercise makes the learner think (issue 20) ---------------------------------------------


def _at(predicate) -> int:
    return cell_index(LESSON, predicate)


@pytest.mark.parametrize("prediction,shown_in", [
    ("ADD_PREDICTION", "torch.add(add_a, add_b, out=add_out)"),
    ("COMPUTE_BOUND_N", "lesson01.scores_rows()"),
    ("CROSSOVER_PREDICTION", "def matmul_rounds"),
    ("LINEAR_PREDICTION", "layer = torch.nn.Linear"),
])
def test_each_prediction_is_written_before_the_cell_that_shows_the_answer(prediction, shown_in):
    assert _at(graded(prediction)) < _at(shown_by(shown_in))
    check = next(c.source for c in read_notebook(SOLUTION).cells if prediction in c.source
                 and c.get("metadata", {}).get("nbgrader", {}).get("grade"))
    assert any(prediction in s.names for s in plan_cell(check) if not s.hidden), "the visible check judges it"


@pytest.mark.parametrize("answer", [
    "n² outputs. Each output is a dot product",  # exercise 1's count
    "three n×n matrices",  # exercise 2's bytes
    r"\min(\text{peak}",  # exercise 4's roofline
    "Below the balance point an operation is **memory-bound**",  # exercise 4's bound
    "followed by `sync()` *before* the clock is read. Return the median",  # exercise 5's recipe
    "It does 2·batch·d_in·d_out FLOPs",  # exercise 7's FLOPs
    "0.5 FLOP/byte, far below every balance point",  # exercise 7's verdict
])
def test_the_text_does_not_print_the_answer_above_the_exercise(answer):
    assert answer not in _markdown()


def test_stub_docstrings_state_contracts_not_formulas():
    student = read_notebook(STUDENT)
    stubs = "\n".join(c.source for c in student.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    for formula in ("reads A and B once and writes C once", "counting a multiply-add as 2", "below the chip's balance",
                    "synchronizing before each clock read", "Median seconds", "per byte moved"):
        assert formula not in stubs, formula


def test_the_compute_bound_prediction_is_the_roofline_of_the_h100():
    """COMPUTE_BOUND_N asks for the scores matmul S = Q Kᵀ (Q, K s × 128, S s × s written to memory): its FLOP per byte
    rises with s towards 2·d / itemsize, so fp32 crosses the H100's balance point and bf16 never does."""
    h100 = specs.chip("H100")

    def scores_intensity(s: int, size: int) -> float:  # 2·s²·d FLOPs over Q, K and S, each moved once
        return 2 * s * s * 128 / ((2 * s * 128 + s * s) * size)

    first = quiet_model(lesson01._scores_bound_from)("fp32", 4)
    s = math.ceil(first)
    assert scores_intensity(s, 4) >= h100.balance("fp32") > scores_intensity(s - 1, 4) and s == 117
    assert math.isinf(quiet_model(lesson01._scores_bound_from)("bf16", 2))
    assert scores_intensity(10**9, 2) < 2 * 128 / 2 < h100.balance("bf16")


def test_the_compute_bound_prediction_is_no_loop_of_the_learners_square_functions():
    """Copy test r22 looped the learner's own matmul_flops, matmul_bytes, intensity and bound to the square question's
    answer (120 and 887) and scored 1/1: those functions price square matmuls only, and this answer is none of them."""
    band = quiet_model(lesson01._compute_bound_band)
    assert band({"fp32": 120.0, "bf16 ever": True}, {})[0] == 0.25
    assert band({"fp32": 117.0, "bf16 ever": False}, {})[0] == 1.0


# --- third edition: the corrections the outside review asked for ------------------------------------


def test_the_bandwidth_add_is_sized_from_the_last_level_cache():
    """A 2048² fp32 add (48 MiB) fits in an H100/H200's 50 MB L2: the add is sized from the machine's cache instead."""
    source = _cell_with("add_a = torch.randn(")
    assert "last_level_cache_bytes" in source and "torch.randn(2048, 2048" not in source
    ns = {"math": math, "dev": type("dev", (), {"last_level_cache_bytes": staticmethod(lambda d: 50 * 10**6)}),
          "DEVICE": "cuda"}
    head = source[:source.index("add_a = torch.randn(")]
    exec(head, ns)  # the sizing lines alone, for a 50 MB L2
    assert 2 * ns["add_n"] ** 2 * 4 >= 2 * 50 * 10**6, "the copy's working set should be several times the L2"
    # no byte count, and no "tensors together" (r31 counted the add's arrays from it): ADD_PREDICTION asks for it (r10)
    assert "could hold most of what it touches" in _markdown() and "tensors together" not in _markdown()


def test_last_level_cache_is_read_from_sysfs_on_the_cpu():
    from grader import device

    found = device.last_level_cache_bytes("cpu")
    assert found is None or found >= 1 << 16


def test_compute_bound_from_n_is_said_to_be_the_byte_count_only():
    source = _cell_with("lesson01.scores_rows()")
    assert "byte count only" in source and "load_sm()" in source and "occupancy" in source


def test_matmul_bytes_visible_check_judges_its_own_value():
    """The visible check passed 6n²·itemsize and bits (c·n²·itemsize, c not 2 or 4): the ✓ scored 0 and the roofline
    then blamed matmul_flops."""
    from grader.notebook import CheckFailed

    for wrong in (lambda n, d: 6 * n * n * d.itemsize, lambda n, d: 3 * n * n * d.itemsize * 8,
                  lambda n, d: 5 * n * n * d.itemsize):
        wrong.__name__ = "matmul_bytes"
        with pytest.raises(CheckFailed):
            lesson01.check_matmul_bytes(wrong)


# --- third edition: every exercise makes the learner think (issue 29) -------------------------------


def _markdown_before(grade_id: str) -> str:
    """The lesson's markdown above the cell `grade_id` (what a learner has read when writing it)."""
    cells = read_notebook(SOLUTION).cells
    stop = _at(graded(grade_id))
    return "\n".join(c.source for c in cells[:stop] if c.cell_type == "markdown")


@pytest.mark.parametrize("grade_id,recipe", [
    ("matmul_bytes", "moves every matrix it reads or writes exactly once"),  # the count, in words
    ("matmul_bytes", "each matrix moved once"),
    ("bound", "balance point** is peak / bandwidth"),  # the comparison, before bound is written
    ("bound", "peak / bandwidth, in FLOP/byte"),
    ("time_op", "Two more habits make a timing honest"),  # the three habits, listed above time_op
    ("time_op", "**Repeat and take the median**"),
    ("time_op", "The fix is to\n# **synchronize**"),
    ("time_op", "The fix is to **synchronize**"),
    ("crossover_size", "faster **there and at every larger size**"),  # the algorithm as the spec
    ("linear_forecast", "One call reads all of `W`, whatever the"),  # the byte count of a Linear
    ("linear_forecast", "weights, inputs, outputs, each\n# once"),
    ("linear_forecast", "the roofline time of the whole batch, divided by the batch"),
])
def test_the_text_above_an_exercise_states_the_principle_not_the_recipe(grade_id, recipe):
    grade_id = "roofline" if grade_id == "bound" else grade_id
    assert recipe not in _markdown_before(grade_id)


def test_stubs_no_longer_spell_out_the_spec():
    student = read_notebook(STUDENT)
    stubs = "\n".join(c.source for c in student.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    assert "each matrix moved once" not in stubs and "faster at that size and every larger one" not in stubs


def test_the_balance_point_is_shown_after_bound_is_checked():
    assert _at(shown_by("Training GPUs")) > _at(graded("bound_check"))
    assert "fp32 FLOP/byte" not in _cell_with("table = pd.DataFrame("), "section 1's table gave the balance away"


@pytest.mark.parametrize("prediction,points", [("COMPUTE_BOUND_N", 1), ("CROSSOVER_PREDICTION", 2),
                                               ("ADD_PREDICTION", 1), ("LINEAR_PREDICTION", 1)])
def test_each_prediction_has_a_graded_cell_of_its_own(prediction, points):
    from notebook_cells import prediction_cells

    cells = prediction_cells(LESSON)
    assert cells[f"{prediction}_check"].name == prediction and cells[f"{prediction}_check"].points == points
    for grade_id, source in __import__("notebook_cells").check_cells(LESSON).items():
        if grade_id != f"{prediction}_check":
            assert prediction not in source, f"{grade_id} shares a cell with {prediction}"


def test_the_machine_predictions_are_judged_against_this_runs_figures(fresh_predictions):
    """ADD_PREDICTION and LINEAR_PREDICTION: the band is the model fed with what this run measured (frozen with the
    first guess), so the same guess scores differently on two machines, and no guess is recorded before measuring."""
    from grader import predictions
    from grader.notebook import CheckFailed

    h100 = lesson01.ADD_H100_KEY
    with pytest.raises(CheckFailed, match="has not measured them yet"):
        lesson01.check_add_prediction({"add GFLOP/s": 1.0, h100: 837.0, "why": "guess"})
    assert predictions.entry(LESSON, "ADD_PREDICTION") is None, "a guess before the measurement is not recorded"
    slow = {"copy_bandwidth": 12e9, "matmul_peak": 100e9, "linear_d": 2048}
    fast = {"copy_bandwidth": 48e9, "matmul_peak": 100e9, "linear_d": 2048}

    def score(context: dict, guess: dict) -> float:
        entry = {"first": {**guess, "why": "12 bytes a FLOP"}, "reason": "12 bytes a FLOP",
                 "at": "2026-12-03T10:00:00+00:00", "context": context, "last": {}, "revealed": None, "shown": None}
        return lesson01.check_add_prediction._score({**guess, "why": "x"},
                                                    {LESSON: {"measured": {}, "entries": {"ADD_PREDICTION": entry}}})[0]

    right = {"add GFLOP/s": 1.0, h100: 3350 / 4}
    assert score(slow, right) == 1.0 and score(fast, right) == 0.75, "this machine's half follows this run's copy"
    # the H100's half is judged on its datasheet, whatever this machine measured: what timing here cannot give (r10)
    assert score(slow, {**right, h100: 1.0 * 3350 / 1.0}) == 0.75, "an H100 add at one FLOP per byte"
    assert score(slow, {**right, h100: 3350 / 6}) == 0.875, "the H100's add with b counted whole: half its band"
    # batch 64 against batch 1: the answer is this machine's balance point at work, not the lesson's slogan
    ratio = quiet_model(lesson01._linear_ratio_model)
    assert 3.5 < ratio(slow) < 4.5  # balance 8.3 FLOP/byte: batch 64 (≈30 FLOP/byte) is compute-bound
    assert 1.0 <= ratio({**slow, "matmul_peak": 480e9}) < 1.1  # balance 40: still waiting on the weights


def test_the_add_is_revealed_only_after_its_prediction():
    cell = _cell_with("torch.add(add_a, add_b, out=add_out)")
    assert "check_add_prediction.revealed()" in cell and "if shown:" in cell
    for shown in ("layer = torch.nn.Linear", "lesson01.scores_rows()"):
        assert ".revealed() as shown" in _cell_with(shown)


def test_the_time_op_diagnosis_runs_the_naive_timer_on_the_simulated_gpu():
    cell = _cell_with("def naive_time")
    assert "lesson01.simulated_gpu()" in cell and "sim.durations" in cell and "sim.events" in cell
    assert _at(shown_by("def naive_time")) < _at(graded("time_op")) < _at(shown_by("timing.unsynchronized"))
    sim = lesson01.simulated_gpu()
    naive = _defined("naive_time", {"time": __import__("time")})
    with sim.patched_clocks(naive.__globals__):
        said = naive(sim.launch, 8)
    assert said < 0.01 * statistics.median(sim.durations), "the simulated GPU shows the naive timer far too fast"


def test_no_model_of_a_prediction_or_exercise_is_public_in_the_package():
    for gone in ("linear_model", "compute_bound_from", "matmul_intensity", "add_model", "linear_ratio_model",
                 "crossover_model"):
        assert not hasattr(lesson01, gone), gone


# --- fourth edition: the outside copy test of lessons 01 and 02 (ct0102) --------------------------------------------


def _code_cells_after(grade_id: str) -> str:
    """The plain code cells below the check `grade_id` (readable before it runs, so holding no answer's formula)."""
    cells = read_notebook(SOLUTION).cells
    start = _at(graded(grade_id))
    return "\n".join(c.source for c in cells[start:] if c.cell_type == "code"
                     and not c.get("metadata", {}).get("nbgrader"))


@pytest.mark.parametrize("grade_id,formula", [
    ("matmul_bytes_check", "3 * n * n"),  # the roofline explorer wrote matmul_bytes out (ct0102: cell 56)
    ("CROSSOVER_PREDICTION_check", "** (1 / 3)"),  # the reveal cell solved the crossover in closed form (cell 47)
    ("ADD_PREDICTION_check", "3 * 4"),  # the add's 12 bytes per FLOP, on the roofline
    ("COMPUTE_BOUND_N_check", "range(1, 8193)"),  # the reveal cell's search, a copy test ran it before guessing
    ("LINEAR_PREDICTION_check", "2 * batch * linear_d * linear_d"),  # the GPU model's terms: a Linear's FLOPs ...
    ("LINEAR_PREDICTION_check", "linear_d * linear_d * 4 / gpu.bandwidth"),  # ... and its weight read
])
def test_later_cells_do_not_spell_out_an_answer(grade_id, formula):
    assert formula not in _code_cells_after(grade_id)


def test_the_widget_draws_no_add_of_its_own():
    """widgets.roofline_explorer drew the add at 1 / (3 × width) FLOP/byte: ADD_PREDICTION's answer, in the package."""
    import inspect

    from grader import widgets

    assert "3 * width" not in inspect.getsource(widgets.roofline_explorer)


def test_the_dead_intensity_model_is_gone():
    """_matmul_intensity ("an n×n matmul does 2n³ FLOPs and moves three n×n matrices once") answered exercises 1 and 2
    and nothing called it."""
    assert not hasattr(lesson01, "_matmul_intensity")


def test_the_page_does_not_give_the_linear_prediction_away():
    """Section 8's title said batch 8 costs about what batch 1 does: a copy test could read LINEAR_PREDICTION off it.
    The prediction is batch 64 against batch 1, where this machine's own balance point decides."""
    above = _markdown_before("LINEAR_PREDICTION")
    assert "batch 1 costs about what batch 8" not in above and "batch 8 costs about" not in above
    assert lesson01.LINEAR_KEY == "batch 64 / batch 1"
    assert "linear_batches = [1, 8, 512]" not in "\n".join(_sources("code")), "demo mode must time batch 64 too"
    assert "48 MiB" not in _markdown_before("ADD_PREDICTION"), "the add's bytes, printed above its prediction"


def test_what_to_remember_states_principles_not_formulas():
    closing = _markdown().split("## What to remember")[1]
    for rule in ("peak / bandwidth", "synchronize before you read the clock", "median", "batch 8 costs about"):
        assert rule not in closing, rule


@pytest.mark.parametrize("call,prediction", [
    ("lesson01.add_intensity()", "ADD_PREDICTION"),
    ("lesson01.crossover_n_at(100e9, 8.1e12)", "CROSSOVER_PREDICTION"),
    ("lesson01.scores_rows()", "COMPUTE_BOUND_N"),
])
def test_the_reveal_cells_helpers_count_as_asking(fresh_predictions, call, prediction):
    """The reveal cells' helpers compute a prediction's answer: called from a cell before the first guess, recorded as
    a reveal (no guess taken after it: 0), and silent after it."""
    from grader import predictions

    exec(compile(f"from grader.checks import lesson01\n{call}\n", "<cell>", "exec"), {})
    assert predictions.entry(LESSON, prediction)["revealed"], f"{call} before the first guess is not a reveal"


def test_bound_is_tried_at_a_tie():
    """The page defines memory-bound as the bytes taking *longer*; the cases did not try the tie (ct0102)."""
    ties = [(x, p, b) for x, p, b in lesson01._BOUND_CASES if x * b == p]
    assert ties and all(x / p == 1 / b for x, p, b in ties), "the tie must be exact in every arrangement"


def test_linear_forecast_is_tried_on_layers_whose_widths_differ():
    assert any(d_in != d_out for _, d_in, d_out, _ in lesson01._LINEAR_CASES)


def test_the_gpu_terms_come_from_the_learners_forecast_with_one_roof_taken_away():
    """The modelled GPU's table wrote a Linear's FLOPs and weight read out (LINEAR_PREDICTION's two terms, readable
    before it): it takes each from linear_forecast on a chip with the other roof infinite, which the reference gives."""
    ns: dict = {}
    for name in ("intensity", "attainable_flops", "bound"):
        ns[name] = _defined(name)
    forecast = _defined("linear_forecast", ns)
    assert "math.inf" in _cell_with("def call_time")
    chip, d = specs.chip("T4"), 2048
    for batch in (1, 64):
        moving = forecast(batch, d, d, torch.float32, math.inf, chip.bandwidth)["seconds_per_sample"] * batch
        arithmetic = forecast(batch, d, d, torch.float32, chip.peak("fp32"), math.inf)["seconds_per_sample"] * batch
        assert math.isclose(moving, (d * d + 2 * batch * d) * 4 / chip.bandwidth, rel_tol=1e-12)
        assert math.isclose(arithmetic, 2 * batch * d * d / chip.peak("fp32"), rel_tol=1e-12)


def test_the_crossover_question_does_not_say_where_its_answer_lies():
    """Copy test r31: "near the answer section 3's roofline puts the GPU's matmul just on the memory side", with section
    3's T4 balance, put n just under the balance point, inside the band, with no reasoning."""
    text = _markdown()
    assert "near the answer" not in text and "work out whether that term changes it" in text


def _fixed_warmup_timer(k: int, plus: bool):
    """A time_op whose warm-up is k × repeats untimed calls (after the given warmup when `plus`), decided in advance."""
    import time

    def time_op(fn, sync, warmup, repeats):
        for _ in range(warmup + k * repeats if plus else max(warmup, k * repeats)):
            fn()
        sync()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            sync()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    return time_op


@pytest.mark.parametrize("plus", [False, True], ids=["max(warmup, k·repeats)", "warmup + k·repeats"])
def test_no_warmup_fixed_as_a_multiple_of_repeats_passes_the_timer_check(plus):
    """An outside test passed check_time_op with 3 × repeats untimed calls: every multiple now fails, by name."""
    from grader.checks._common import CheckFailed

    for k in range(0, 31):
        with pytest.raises(CheckFailed, match="fixed its warm-up in advance"):
            lesson01.check_time_op(_fixed_warmup_timer(k, plus))


# --- what the show cells say of their own measurements -------------------------------------------


def test_a_first_call_no_slower_than_the_warm_ones_is_called_noise_not_little_setup():
    """An outside test read "the first call cost 0.6× a warm one: this cpu had little to set up"."""
    said = _defined("first_call_said")
    faster = said(0.6e-3, [1.0e-3, 1.1e-3, 0.9e-3, 1.0e-3, 1.2e-3], "cpu")
    assert "not slower than the warm ones" in faster and "noise" in faster and "set up" not in faster, faster
    within = said(1.15e-3, [1.0e-3, 1.1e-3, 0.9e-3, 1.0e-3, 1.2e-3], "cpu")
    assert "not slower than the warm ones" in within, within
    slow = said(5e-3, [1.0e-3, 1.1e-3, 0.9e-3, 1.0e-3, 1.2e-3], "cpu")
    assert "**5.0×**" in slow and "setup a warm-up keeps out" in slow, slow
    little = said(1.3e-3, [1.0e-3, 1.1e-3, 0.9e-3, 1.0e-3, 1.2e-3], "cpu")
    assert "little to set up" in little and "slower than every warm call" in little, little


def _measured_said():
    return _defined("measured_said", {"BUSY_SPREAD": 0.5, "lesson01": lesson01})


_MIB = 2**20


def test_a_row_called_untrustworthy_is_not_then_used_without_saying_so():
    """An outside test saw batch 1's row called too busy to trust, then batch 64 / batch 1 in bold from it, and a
    cache explanation of batch 1's speed stated as the measured cause."""
    said = _measured_said()
    per_call = {1: 1e-3, 8: 1.5e-3, 64: 25e-3, 512: 0.2}
    busy = said(per_call, {1: 0.9, 8: 0.1, 64: 0.1, 512: 0.1}, 4.5e-3, 16 * _MIB, 32 * _MIB, "cpu", "the model says x")
    assert "cannot be compared" in busy and "**" not in busy, busy
    assert "rests on the batch 1 row" in busy and "faster than its forecast" not in busy, busy
    backwards = said({1: 2e-3, 8: 1e-3, 64: 25e-3, 512: 0.2}, {b: 0.1 for b in per_call}, 4.5e-3, 16 * _MIB,
                     32 * _MIB, "cpu", "the model says x")
    assert "more work cannot take less time" in backwards and "rests on the batch 1 row" in backwards, backwards
    quiet = said(per_call, {b: 0.1 for b in per_call}, 4.5e-3, 16 * _MIB, 32 * _MIB, "cpu", "the model says x")
    assert "Measured here" in quiet and "**25.00×**" in quiet and "rests on" not in quiet, quiet
    assert "faster than its forecast" in quiet and "consistent with" in quiet and "does not measure" in quiet, quiet
    assert "fit in this" not in quiet, "the cache is a possibility the numbers allow, not a measured cause"
    bigger = said(per_call, {b: 0.1 for b in per_call}, 4.5e-3, 64 * _MIB, 32 * _MIB, "cpu", "the model says x")
    assert "last-level cache" not in bigger, "weights larger than the cache: the cache explains nothing"
    noisy_64 = said(per_call, {1: 0.1, 8: 0.1, 64: 0.9, 512: 0.1}, 4.5e-3, 16 * _MIB, 32 * _MIB, "cpu", "x")
    assert "rests on the batch 64 row" in noisy_64 and "**25.00×**" not in noisy_64, noisy_64


def test_the_balance_sentence_holds_for_each_format_of_the_table():
    """An outside test: "gaming cards sit higher" held for fp32 only; in bf16 the RTX 3090 is below the H100."""
    text = _markdown()
    chips = {c.name: c for c in specs.load_chips()}
    h100 = chips["NVIDIA H100 SXM5 80GB"]
    for name in ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090", "NVIDIA T4", "NVIDIA L4"):
        assert chips[name].balance("fp32") > h100.balance("fp32"), name
    assert "In fp32, cards with less bandwidth per FLOP" in text
    assert chips["NVIDIA L4"].balance("bf16") > 300 and "the L4 sits higher again" in text
    assert 100 <= chips["NVIDIA GeForce RTX 4090"].balance("bf16") <= 300 and "RTX 4090 lands\ninside that range" in text
    assert chips["NVIDIA GeForce RTX 3090"].balance("bf16") < 100 and "RTX 3090 below it" in text


def test_exercise_4_is_asked_in_the_order_of_its_stub_and_checks():
    text = _markdown()
    assert text.index("Write `attainable_flops(") < text.index("`bound(intensity, peak_flops, bandwidth)`: `\"memory\"`")
    stub = _cell_with("def attainable_flops(")
    assert stub.index("def attainable_flops(") < stub.index("def bound(")
    assert _at(graded("attainable_flops_check")) < _at(graded("bound_check"))
