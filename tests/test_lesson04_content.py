"""Lesson 04's text and cells against issue 11 and 12: each correction is pinned so the old wording cannot come back.

Reads solutions/04_memory (and its release); no kernel is started. The figures the corrected
sentences give are checked in tests/test_memory.py against the model functions.
"""

from __future__ import annotations

import ast
import re
import sys

import nbformat
import pytest
import torch
from conftest import ROOT, quiet_model

LESSON = "04_memory"
LEARNER = {"state_bytes", "training_bytes", "predict_saved_bytes", "activation_bytes", "max_batch", "BYTES_PER_PARAM"}


def _cells(student: bool = False):
    folder = "notebooks" if student else "solutions"
    return nbformat.read(str(ROOT / folder / LESSON / f"{LESSON}.ipynb"), as_version=4).cells


def _markdown() -> str:
    """Every markdown cell, whitespace collapsed (a sentence may wrap)."""
    return " ".join(" ".join(c.source for c in _cells() if c.cell_type == "markdown").split())


def _code() -> str:
    return "\n".join(c.source for c in _cells() if c.cell_type == "code")


def _outside_skip(tree: ast.AST) -> set[str]:
    """Learner names a cell uses outside `with skip_if_not_done():` (a def's body counts where the def is called)."""
    found: set[str] = set()

    def visit(node, guarded: bool):
        if isinstance(node, ast.With) and any(
                isinstance(i.context_expr, ast.Call) and getattr(i.context_expr.func, "id", "") == "skip_if_not_done"
                for i in node.items):
            guarded = True
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            return  # a definition runs nothing; where it is called decides
        if isinstance(node, ast.Name) and node.id in LEARNER and not guarded:
            found.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return found


def test_opening_says_where_run_all_stops_and_setup_imports_skip():
    first = " ".join(next(c.source for c in _cells() if c.cell_type == "markdown").split())
    assert "Run All stops at the first exercise you have not done yet, with one" in first
    assert "from grader.notebook import needs, skip_if_not_done" in _code()


def test_every_show_cell_uses_the_learners_functions_only_under_skip():
    for index, cell in enumerate(_cells()):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("solution") or meta.get("grade"):
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith("%"))
        outside = _outside_skip(ast.parse(source))
        assert not outside, f"cell {index} uses {sorted(outside)} outside `with skip_if_not_done():`"


def test_inference_is_weights_plus_kv_cache_not_no_activation_memory():
    text = _markdown()
    assert "inference needs no activation memory" not in text
    assert "KV cache" in text and "memory.inference_bytes" in _code()


def test_optimizer_share_is_stated_for_fp32_and_mixed():
    text = _markdown()
    assert "The optimizer is three quarters of it" not in text
    # ct0304: the page gave the shares' arithmetic (the bytes per parameter) before the check; a cell now prints
    # both shares from the learner's training_bytes, after it
    assert "The optimizer's share: {shares['mixed']:.0%} in mixed precision" in _code()
    assert "{shares['fp32']:.0%} in fp32" in _code()


def test_autocast_layout_is_reconciled_with_lesson_03():
    text = _markdown()
    # the two layouts are named, and the learner counts autocast's (ct0304: the page had given both sums)
    assert "it keeps the weights in float32 and makes bfloat16 copies only to compute with" in text
    assert "2 + 2 + 4 + 8 = 16" not in text


def test_checkpointing_names_the_peak_during_recompute():
    text = _markdown()
    assert "peak during backward" in text
    assert "checkpointing=True" in _code() and "peak during backward MiB" in _code()


def test_chip_lines_are_card_memory_less_the_context_reserve_not_datasheet_decimal_gb():
    code = _code()
    assert "(datasheet)\", c.memory_bytes" not in code and "plots.memory_stack(" not in code
    assert "memory.usable_bytes" in code and "memory.chip_label" in code
    assert "81,920 MiB" in _markdown()


def test_no_figure_is_drawn_with_the_small_legend_helpers():
    assert "plots.bytes_vs(" not in _code()  # its legend font is 8 pt; mib_lines draws at 9 pt, off the data


def test_nothing_relies_on_the_grader_undoing_changes_to_torch():
    checks = (ROOT / "grader" / "checks" / "lesson04.py").read_text()
    for text in (checks, _code(), _markdown()):
        assert "undid" not in text and "restore" not in text.lower()


def test_five_graded_exercises_with_the_prediction_among_them():
    graded = [c.metadata["nbgrader"]["grade_id"] for c in _cells() if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    assert graded == ["BYTES_PER_PARAM_check", "state_bytes_check", "training_bytes_check", "predict_saved_bytes_check",
                      "activation_bytes_check", "max_batch_check"]
    text = _markdown()
    assert "predict, then measure" in text.lower()


# --- issue 20: predict, derive, diagnose; the text gives the principle, not the answer --------------------------------


def _code_cells():
    return [c for c in _cells() if c.cell_type == "code"]


def _grade_ids():
    return [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in _code_cells()]


def test_bytes_per_param_is_predicted_before_state_bytes_and_judged_by_its_check():
    ids, cells = _grade_ids(), _code_cells()
    assert ids.index("BYTES_PER_PARAM") < ids.index("BYTES_PER_PARAM_check") < ids.index("state_bytes")
    assert cells[ids.index("BYTES_PER_PARAM_check")].source.strip().splitlines()[-1] == \
        "lesson04.check_bytes_per_param(BYTES_PER_PARAM)"  # a graded cell of its own (issue 29)
    assert "BYTES_PER_PARAM" not in cells[ids.index("state_bytes_check")].source
    measured = next(i for i, c in enumerate(cells) if "before_step = state_bytes(" in c.source)
    assert measured > ids.index("state_bytes_check")
    assert "lesson04.check_bytes_per_param.revealed()" in cells[measured].source
    assert "predictions.table(lesson04.LESSON" in cells[-1].source


def test_the_text_no_longer_gives_the_answers_away():
    text = _markdown()
    for given in ("`numel() × element_size()` bytes", "Adam creates them lazily", "**on the first `step()`**",
                  "momentum one float32 per parameter, Adam two", "keyed by `t.untyped_storage().data_ptr()`",
                  "The largest batch is what is left over divided by the bytes per sample"):
        assert given not in text, given
    release = "\n".join(c.source for c in _cells(student=True))
    for docstring in ("Bytes of distinct storages autograd saves", "fixed_bytes + batch * per_sample_bytes <= memory_bytes"):
        assert docstring not in release, docstring


def test_the_naive_recorder_comes_before_activation_bytes_and_the_explanation_after_its_check():
    ids, cells = _grade_ids(), _code_cells()
    naive = next(i for i, c in enumerate(cells) if "def naive_saved_bytes" in c.source)
    rows = next(i for i, c in enumerate(cells) if "saved.rows" in c.source)
    assert ids.index("predict_saved_bytes_check") < naive < ids.index("activation_bytes") < ids.index("activation_bytes_check") < rows


def test_max_batch_works_from_step_peaks_measured_at_several_batch_sizes():
    cells = _code_cells()
    source = cells[_grade_ids().index("max_batch")].source
    assert "def max_batch(memory_bytes: int, peaks: dict[int, int]) -> int:" in source
    shown = next(c.source for c in cells if "largest = max_batch(budget, tried)" in c.source)
    assert "max(at_step, backward_at(b)) for b in (largest, largest + 1)" in shown  # worked out after it is given


def test_max_batch_cases_peak_at_the_optimizers_step_at_small_batches():
    """Wave 2: max_batch was a two-point line, stated on the page. Its cases are step peaks now, the higher of the
    backward pass (a line in the batch) and the optimizer's step (flat): the textbook line through the two smallest
    batches is wrong on them, and on one the step's flat part alone does not fit."""
    from grader.checks import lesson04

    sys.path.insert(0, str(ROOT / "scripts"))
    import build_keys

    judges = build_keys.instructor_judges(LESSON)
    flat = [(m, p) for m, p in lesson04._MAX_BATCH_CASES if judges._step_peak(p) > 0]
    assert len(flat) >= 3
    assert any(judges._step_peak(p) > m for m, p in flat)
    assert any(judges._fits(m, p, judges._line_through(sorted(p.items())[:2])) != judges._want(m, p)
               for m, p in flat if len(set(sorted(p.values())[:2])) == 2)
    for memory_bytes, peaks in lesson04._MAX_BATCH_CASES:  # the two largest batches lie on the backward pass's line
        (b1, p1), (b2, p2) = sorted(peaks.items())[-2:]
        assert p2 > p1 and all(p >= p1 + (b - b1) * (p2 - p1) / (b2 - b1) - 1e-9 for b, p in peaks.items())


# --- third edition (issue 29) -------------------------------------------------------------------------------------


def test_peak_allocated_is_not_called_the_only_thing_that_decides_an_out_of_memory_error():
    text = _markdown()
    assert "which is what decides an out-of-memory crash" not in text
    assert "**peak** allocated decides the crash" not in text
    for named in ("fragmentation", "CUDA context", "cuBLAS", "inactive_split_bytes"):
        assert named in text, named
    assert 'memory_stats(DEVICE).get("inactive_split_bytes.all.current"' in _code()


def test_activations_depend_on_the_shape_and_a_cell_measures_two_shapes():
    text = _markdown()
    assert "which has nothing to do with the parameter count" not in text
    assert "depth × width" in text
    assert '"deep and narrow"' in _code() and '"shallow and wide"' in _code()


def test_the_opening_does_not_give_bytes_per_param_away():
    opening = _cells()[0].source
    assert "eight times" not in opening and "8×" not in opening and "16" not in opening


def test_predict_saved_bytes_is_derived_from_what_each_backward_needs_not_transcribed():
    """Issue 29: the text no longer says 'a ReLU keeps its output'; the exercise covers tanh, sigmoid and GELU, whose
    backward needs its input (measured: a GELU stack keeps one more tensor per hidden layer)."""
    import torch

    from grader import memory

    text = _markdown()
    assert "a ReLU keeps its **output**" not in text and "each Linear keeps its input" not in text.lower().replace("**", "")
    relu, gelu = (memory.saved_bytes(memory.mlp([8, 16, 4], a), torch.randn(3, 8)) for a in ("relu", "gelu"))
    assert gelu - relu == 4 * 3 * 16


def test_training_bytes_text_gives_the_principle_not_each_copy_and_its_width():
    """Issue 29: the text above training_bytes listed every copy and its width (a transcription of 2 + 2 + 4 + ...)."""
    import nbformat

    from conftest import ROOT

    nb = nbformat.read(str(ROOT / "solutions" / "04_memory" / "04_memory.ipynb"), as_version=4)
    ex = next(i for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "training_bytes")
    section = "\n".join(c.source for c in nb.cells[:ex] if c.cell_type == "markdown").split("## 2 ·")[-1]
    flat = " ".join(section.replace("#", " ").split())
    for told in ("2-byte copies", "keeps its own buffers at the master's precision", "float32 **master copy**"):
        assert told not in flat, told


def test_state_bytes_is_a_diagnosis_the_naive_count_gets_wrong():
    """Issue 29: state_bytes was a lookup (sum numel × element_size over the three places the text named). Now the
    model holds buffers and a shared weight, and the notebook's first try (the state_dicts) overcounts both."""
    from grader.checks import lesson04

    model, opt = lesson04.demo_model()
    assert list(model.buffers()) and model[0].weight is model[5].weight
    assert len(model.state_dict()) > len(list(model.parameters()))


# --- the outside copy test of the third edition (ct0304): each shortcut it took, each bug it found -----------------


def test_the_measured_layout_table_keeps_each_optimizers_name():
    """ct0304 (a bug): cell 19's rows were {"optimizer": name, **probe}, so the probe's "optimizer" bytes overwrote the
    optimizer's name: the index read 0.0/4.0/8.0 instead of sgd/momentum/adam, and the bytes column was gone."""
    import pandas as pd

    from grader import memory

    cell = next(c.source for c in _cells() if "memory.probe_bytes_per_parameter(precision, optimizer)" in c.source)
    shown = []
    from grader.notebook import needs, skip_if_not_done

    from types import SimpleNamespace

    passed = SimpleNamespace(check_training_bytes=SimpleNamespace(passed=[True], what="training_bytes"))
    ns = {"memory": memory, "pd": pd, "display": shown.append, "training_bytes": lambda n, p, o: 0,
          "skip_if_not_done": skip_if_not_done, "needs": needs, "lesson04": passed}  # its check has passed
    exec(compile(cell, "<cell>", "exec"), ns)
    table = shown[0]
    assert list(table.index.get_level_values("optimizer")) == list(memory.OPTIMIZERS) * len(memory.PRECISIONS)
    assert any("optimizer" in str(column) for column in table.columns)  # the optimizer's bytes are a column


def test_no_page_states_the_bytes_per_parameter_the_exercises_ask_for():
    """ct0304: cells 20 and 59 gave 16 bytes per parameter (and 2 + 2 + 4 + 4 + 4), readable before the checks."""
    text = _markdown()
    for told in ("16 bytes", "2 + 2 + 4", "4 + 4 + 8", "4 + 4 + 4 + 4", "master copy, m and v", "12 of 16", "8 of 16"):
        assert told not in text, told
    code = _code()
    for told in ('"fp32 master weights"', '"bf16 weights"', '"Adam m (fp32)"', "(master copy, m and v)"):
        assert told not in code, told


def test_bytes_per_param_asks_for_a_layout_no_page_gives():
    """ct0304: BYTES_PER_PARAM's 16 after step() was on lesson 03's page and this one's; with half the model frozen the
    answer is in neither, and the course's probe of full layers is watched."""
    from grader import memory, shortcuts
    from grader.checks import lesson04

    want = quiet_model(lesson04._measured_bytes_per_param)()
    assert abs(want["before step()"] - 6) < 0.01 and abs(want["after step()"] - 10) < 0.01
    watched = lesson04.check_bytes_per_param.watched
    assert memory.probe_bytes_per_parameter.course_only in watched and memory.training_terms.course_only in watched


def test_predict_saved_bytes_has_cases_no_machine_can_measure():
    """ct0304: a hand-built stack measured with a copied recorder passed predict_saved_bytes; cases of terabytes of
    activations cannot be measured, and the judges' model of them agrees with the recorder where it can run."""
    import sys

    import torch

    from grader import memory
    from grader.checks import lesson04

    sys.path.insert(0, str(ROOT / "scripts"))
    import build_keys

    judges = build_keys.instructor_judges(LESSON)
    big = [case for case in lesson04._PREDICT_CASES if case[0] * max(case[1]) > judges._MEASURABLE]
    assert big and all(4 * b * w[0] > 2**40 for b, w, _ in big)  # over a TiB: no measurement
    for batch, widths, activation in lesson04._PREDICT_CASES:
        if (batch, widths, activation) not in big:
            measured = memory.saved_bytes(memory.mlp(widths, activation), torch.randn(batch, widths[0]))
            assert judges._model_saved(batch, widths, activation) == measured


def test_activation_bytes_is_asked_about_a_model_whose_buffers_batch_norm_saves():
    """Wave 2: activation_bytes passed as a copy of the course's recorder with the parameters excluded. A BatchNorm in
    training mode saves its running statistics (buffers, not parameters) for backward: that copy counts them."""
    import torch

    from grader import memory
    from grader.checks import lesson04

    make, shape, _ = lesson04._ACTIVATION_CASES["batchnorm"]
    model = make()
    buffers = {b.untyped_storage().data_ptr() for b in model.buffers() if b.dtype.is_floating_point}  # the running stats
    seen = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t.untyped_storage().data_ptr()) or t, lambda t: t):
        model(torch.randn(*shape))
    assert buffers and buffers <= set(seen)
    with memory.SavedTensors(exclude=[*model.parameters(), *model.buffers()]) as right:
        model(torch.randn(*shape))
    assert memory.saved_bytes(model, torch.randn(*shape)) - right.nbytes == sum(b.nbytes for b in model.buffers()
                                                                                 if b.dtype.is_floating_point)


def test_training_bytes_asks_for_a_layout_no_probe_measures():
    """Wave 2: training_bytes passed with a copy of memory._probe. 8-bit Adam is not a torch optimizer: no probe in
    the package measures it, and its bytes (a byte a value, a float32 scale per block of 256, float32 under 4096
    values) are on no table."""
    from grader import memory
    from grader.checks import lesson04

    assert "adam8bit" not in memory.OPTIMIZERS
    assert {o for _, _, o in lesson04._8BIT_CASES} == {"adam8bit"}
    assert any(n % 256 for n, _, _ in lesson04._8BIT_CASES if n >= 4096) and any(n < 4096 for n, _, _ in lesson04._8BIT_CASES)
    text = _markdown()
    assert "256 consecutive values" in text and "fewer than 4096 values" in text and "Optimizer2State.init_state" in text


def test_the_activation_measurements_wait_for_predict_saved_bytes_to_pass():
    """Copy test r22 replaced the stub with `return 0`, ran the measuring cell, and read every measurement the check's
    cases are made of. The cell now waits for the check to pass in this kernel (needs), before any recorder runs."""
    from conftest import ROOT, read_notebook
    from grader.checks import lesson04

    assert isinstance(getattr(lesson04.check_predict_saved_bytes, "passed", None), list)
    cell = next(c.source for c in read_notebook(ROOT / "solutions" / "04_memory" / "04_memory.ipynb").cells
                if "memory.ACTIVATIONS" in c.source and "SavedTensors" in c.source)
    assert cell.index("needs(lesson04.check_predict_saved_bytes)") < cell.index("memory.SavedTensors"), cell
    # r26: the naive recorder's cell printed the course recorder's figure for one stack before the check passed
    naive = next(c.source for c in read_notebook(ROOT / "solutions" / "04_memory" / "04_memory.ipynb").cells
                 if "the naive recorder reports" in c.source)
    assert naive.index("needs(lesson04.check_predict_saved_bytes)") < naive.index("memory.saved_bytes"), naive


def test_the_page_does_not_spell_out_activation_bytes_rules():
    """Copy test r22 restated activation_bytes from the page: the markdown after the check listed the rules (a weight
    is not an activation, one storage counted once, a view keeps its whole storage) and the BatchNorm cell's source
    named the buffers. The contract stays (only activations, each byte once); the rules are the learner's."""
    from conftest import ROOT, read_notebook

    text = " ".join(" ".join(c.source for c in read_notebook(ROOT / "notebooks" / "04_memory" / "04_memory.ipynb").cells)
                    .split())
    for told in ("buffers, held by the model", "a saved view keeps its whole storage alive",
                 "saved by the ReLU and again by the next Linear, one storage"):
        assert told not in text, told


@pytest.mark.parametrize("cell", ["memory.saved_bytes(memory.mlp([8, 6, 4], 'gelu'), torch.randn(3, 8))",
                                  "with memory.SavedTensors() as s:\n    memory.mlp([8, 6, 4])(torch.randn(3, 8))"])
def test_recording_activations_before_predict_saved_bytes_fails_it(cell):
    """Copy test r22 measured predict_saved_bytes's cases with the course's recorder in a scratch cell, then fitted them.
    A recording from a cell before the check passed now fails it; once it passed, the lesson's cells record freely."""
    from grader import memory, shortcuts
    from grader.checks import lesson04
    from grader.notebook import CheckFailed
    from notebook_cells import solution_cells

    namespace: dict = {}
    exec(solution_cells("04_memory")["predict_saved_bytes"], namespace)
    shortcuts._fresh_kernel()
    try:
        exec(compile(cell, "<cell>", "exec"), {"memory": memory, "torch": torch})
        with pytest.raises(CheckFailed, match="before your predict_saved_bytes was checked"):
            lesson04.check_predict_saved_bytes(namespace["predict_saved_bytes"])
    finally:
        shortcuts._fresh_kernel()
    lesson04.check_predict_saved_bytes(namespace["predict_saved_bytes"])
    exec(compile(cell, "<cell>", "exec"), {"memory": memory, "torch": torch})
    lesson04.check_predict_saved_bytes(namespace["predict_saved_bytes"])
