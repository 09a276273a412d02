"""The prediction protocol (grader.predictions, _common.Prediction): recorded once, revealed after, scored in points."""

from __future__ import annotations

import json
import re

import pytest

from conftest import quiet_model
from grader import predictions, shortcuts
from grader.checks import _common, lesson01
from grader.notebook import CheckFailed, NotDone
from grader.pipeline.judging import judge_cell

CHECK = lesson01.check_crossover_prediction
RIGHT = quiet_model(lesson01._crossover_n)(*lesson01._crossover_inputs())  # uncounted: no reveal at import
SOURCE = "from grader.checks import lesson01\n\nlesson01.check_crossover_prediction(CROSSOVER_PREDICTION)\n"


@pytest.fixture
def record(tmp_path, monkeypatch):
    """The record in a temporary file, not graded: what a learner's kernel does."""
    path = tmp_path / predictions.FILE_NAME
    monkeypatch.setenv(predictions.ENV_PATH, str(path))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv(predictions.ENV_GRADING, raising=False)
    predictions._MEMORY.clear()
    predictions._SHOWN.clear()
    from grader.checks import _common

    _common._ASKED.clear()  # the models this kernel asked for before a first guess: a fresh kernel asked none
    return path


def _in_class_grader(answer, record_data):
    """What the class grader scores: observe as the sandbox would, judge here with the handed-in record."""
    from grader.checks import _plain

    def ask(request):
        return "ok", {"ok": True, "observation": _plain.dumps(CHECK.observe(answer)), "stdout": "", "stderr": ""}

    state, reply = judge_cell(SOURCE, ask, record=record_data)
    return reply


def test_first_guess_is_kept_and_scores_both_parts(record, capsys):
    got = CHECK({"n": RIGHT, "why": "fixed cost paid back by faster arithmetic"})
    assert type(got) is float and got == CHECK.points
    later = CHECK({"n": RIGHT * 3, "why": "changed my mind"})
    assert later == CHECK.points, "the band is on the first guess: a resubmission changes no score"
    saved = json.loads(record.read_text())["lessons"][lesson01.LESSON]["entries"]["CROSSOVER_PREDICTION"]
    assert saved["first"]["n"] == RIGHT and saved["last"]["n"] == RIGHT * 3 and saved["answers"] == 2


def test_an_honest_half_right_guess_gets_partial_credit_the_same_in_both_graders(record, capsys):
    answer = {"n": RIGHT * 1.3, "why": "a guess from the two rates"}
    here = CHECK(answer)
    assert here == pytest.approx(0.75 * CHECK.points)  # commitment, and half the band (within a factor 1.5)
    reply = _in_class_grader(answer, predictions.read(record))
    assert reply["ok"] and reply["score"] == here


def test_no_record_handed_in_scores_zero_in_both(record, capsys, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # nbgrader: nothing is written while grading
    answer = {"n": RIGHT, "why": "x"}
    assert CHECK(answer) == 0.0 and not record.exists()
    assert _in_class_grader(answer, {})["score"] == 0.0


def test_a_deliberate_reveal_is_recorded_and_costs_the_commitment(record, capsys):
    CHECK.reveal()
    assert "model puts the crossover" in capsys.readouterr().out
    assert CHECK({"n": RIGHT, "why": "read it"}) == 0.0
    table = predictions.table(lesson01.LESSON, {"CROSSOVER_PREDICTION": "model"})
    assert table.loc["CROSSOVER_PREDICTION", "asked to reveal"] != "no"


def test_reveal_after_the_first_guess_says_it_changes_nothing(record, capsys):
    """Copy test r14: reveal() after a first guess printed 'revealed on purpose (recorded ...)' while the record, as
    designed, stamped nothing (a first guess is kept): the line now says what happened."""
    CHECK({"n": RIGHT, "why": "fixed cost paid back by faster arithmetic"})
    capsys.readouterr()
    CHECK.reveal()
    said = capsys.readouterr().out
    assert "revealed on purpose" not in said and "changes nothing" in said and "crossover" in said
    found = predictions.entry(lesson01.LESSON, CHECK.name)
    assert not found.get("revealed") and predictions.committed(found)


@pytest.mark.parametrize("ask", ["model", "ceilings"])
def test_asking_the_model_before_guessing_is_a_reveal(record, capsys, ask):
    """A copy test read the model off check.model() (and lesson 09's ceilings helper) before guessing, unrecorded."""
    from grader.checks import lesson09

    if ask == "model":
        assert "crossover" in CHECK.model()
        assert CHECK({"n": RIGHT, "why": "read it"}) == 0.0
    else:
        from mutants.lesson09 import _step

        ns: dict = {}
        exec(_step(), ns)
        lesson09.check_decode_step_seconds(ns["decode_step_seconds"])  # the ceilings wait for the model's exercise
        capsys.readouterr()
        lesson09.batch1_ceilings()
        found = predictions.entry(lesson09.LESSON, lesson09.check_tokens_per_second.name)
        assert found and found.get("revealed") and not predictions.committed(found)


def test_showing_the_answer_right_after_the_guess_keeps_the_commitment(record, capsys):
    """Run All commits and then shows the model in the same second (lesson 01's add and linear cells): a copy test
    saw an honest learner score 0, because reading the model stamped a reveal that tied with the guess's time."""
    CHECK({"n": RIGHT, "why": "fixed cost paid back by faster arithmetic"})
    with CHECK.revealed() as shown:
        assert shown and "crossover" in CHECK.model()
    found = predictions.entry(lesson01.LESSON, CHECK.name)
    assert not found.get("revealed") and predictions.committed(found)
    assert CHECK({"n": RIGHT, "why": "again"}) == CHECK.points
    table = predictions.table(lesson01.LESSON, {"CROSSOVER_PREDICTION": "model"})
    assert table.loc["CROSSOVER_PREDICTION", "asked to reveal"] == "no"


def test_the_end_table_shows_every_character_of_what_was_measured(record):
    """pandas cuts a cell's text at 50 characters in HTML: lesson 09's end table showed "model: section 1's ceiling
    (H100 datas..." in JupyterLab."""
    said = "model: the crossover where the fixed cost is paid back, fed with this run's three measured figures"
    html = predictions.table(lesson01.LESSON, {"CROSSOVER_PREDICTION": said})._repr_html_()
    assert said in html
    assert ">CROSSOVER_<wbr>PREDICTION<" in html  # a long name may break, at 1024 px


def test_the_end_table_shows_the_models_answer_once_the_first_guess_is_recorded(record, capsys):
    """COURSE.md: "your first guess, your answer, what was measured". The column held a description of the model
    ("model: where the CPU's arithmetic equals the GPU's fixed cost plus its arithmetic": a rule, on the page before
    the guess). It holds the model's answer now, and only once a first guess is recorded: the table is no reveal."""
    before = predictions.table(lesson01.LESSON, {"CROSSOVER_PREDICTION": ""})
    assert before.loc["CROSSOVER_PREDICTION", "the course's model"] == "shown once your first guess is recorded"
    assert before.loc["CROSSOVER_PREDICTION", "measured here"] == "—"
    assert not predictions.entry(lesson01.LESSON, CHECK.name)  # no reveal stamped
    CHECK({"n": RIGHT, "why": "the fixed cost paid back"})
    after = predictions.table(lesson01.LESSON, {"CROSSOVER_PREDICTION": "12 ms"})
    assert f"{RIGHT:.0f}" in after.loc["CROSSOVER_PREDICTION", "the course's model"]
    assert after.loc["CROSSOVER_PREDICTION", "measured here"] == "12 ms"
    # narrow enough for 1024 px: the same answer is not written twice, the time is to the minute
    assert after.loc["CROSSOVER_PREDICTION", "your answer"] == "your first guess"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", after.loc["CROSSOVER_PREDICTION", "recorded"])
    assert predictions.committed(predictions.entry(lesson01.LESSON, CHECK.name))


def test_a_model_called_then_forgotten_is_still_a_reveal(record, capsys):
    """A copy test called a model through its __wrapped__, or called it and then shortcuts.reset(): both went
    unrecorded. The wrappers carry no __wrapped__, and the reveal is stamped in the record when the call happens."""
    from grader.checks import lesson01 as module

    assert not any(hasattr(getattr(module, n), "__wrapped__") for n in dir(module)
                   if getattr(getattr(module, n), "course_only", None))
    exec(compile("from grader.checks import lesson01\nlesson01._crossover_n(*lesson01._crossover_inputs())\n",
                 "<cell>", "exec"), {})
    shortcuts.reset()
    assert CHECK({"n": RIGHT, "why": "computed it"}) == 0.0
    assert "asked for before any guess" in capsys.readouterr().out


def test_a_model_asked_under_another_record_is_still_a_reveal(record, capsys, tmp_path, monkeypatch):
    """A copy test pointed GRADER_PREDICTIONS at a scratch record, asked the model there, and came back to commit in
    the real one: the kernel remembers it asked, whichever record was in use."""
    monkeypatch.setenv(predictions.ENV_PATH, str(tmp_path / "scratch.json"))
    exec(compile("from grader.checks import lesson01\nlesson01._crossover_n(*lesson01._crossover_inputs())\n",
                 "<cell>", "exec"), {})
    monkeypatch.setenv(predictions.ENV_PATH, str(record))
    predictions._MEMORY.clear()
    shortcuts.reset()
    assert CHECK({"n": RIGHT, "why": "computed it"}) == 0.0


def test_a_kernel_keeps_the_record_it_was_started_with(record, tmp_path):
    """A copy test set GRADER_PREDICTIONS from a cell to a scratch record, to try guesses against the band there and
    then commit the best in the real one: in a kernel, only the record it was started with counts."""
    import nbformat
    from nbclient import NotebookClient

    scratch = tmp_path / "scratch.json"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in (
        f"import os\nos.environ['GRADER_PREDICTIONS'] = {str(scratch)!r}",
        "from grader.checks import lesson01\nlesson01.check_crossover_prediction({'n': 100.0, 'why': 'a probe'})")])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert not scratch.exists() and record.exists()
    assert predictions.entry(lesson01.LESSON, CHECK.name, predictions.read(record))["first"]["n"] == 100.0


@pytest.mark.parametrize("how", ["score", "grading toggled", "laundered"])
def test_other_ways_to_ask_before_guessing_are_reveals(record, capsys, monkeypatch, how):
    """Copy tests asked check.score on made-up records, set GRADER_GRADING from a cell so that asking stamped
    nothing, and handed the model to grader.checks._common.call so that the package seemed to call it."""
    cell = {"score": "check.score({'n': 100.0, 'why': 'probe'}, {})",
            "grading toggled": "import os\nos.environ['GRADER_GRADING'] = '1'\nlesson01._crossover_n(*lesson01._crossover_inputs())"
                               "\ndel os.environ['GRADER_GRADING']",
            "laundered": "from grader.checks._common import call\ncall(lesson01._crossover_n, *lesson01._crossover_inputs())"}
    if how == "grading toggled":  # a kernel reads only what it was started with; here, a test process, pretend so
        monkeypatch.setattr(_common, "_in_a_kernel", lambda: True)
        monkeypatch.setattr(predictions, "_started_with", lambda name: str(record) if name == predictions.ENV_PATH else None)
    exec(compile(cell[how], "<cell>", "exec"), {"check": CHECK, "lesson01": lesson01})
    assert CHECK({"n": RIGHT, "why": "computed it"}) == 0.0


_MADE_UP = {"01_crossover": {"measured": {}, "entries": {"CROSSOVER_PREDICTION": {
    "first": {"n": 100.0, "why": "probe"}, "reason": "probe", "at": "2026-01-01T00:00:00+00:00", "context": {},
    "revealed": None, "shown": None, "answers": 1, "last": {"n": 100.0, "why": "probe"}}}}}


@pytest.mark.parametrize("how", ["judge", "_score", "quiet", "own prediction", "importlib's name", "the course's file",
                                 "expect"])
def test_course_helpers_that_call_the_model_for_a_cell_are_reveals(record, capsys, how):
    """Round-3 copy tests scored guesses against made-up records through the class grader's public judge and
    Prediction._score, called a model through serving.quiet (course code that calls what it is handed), and built a
    Prediction of their own around a course band: the course asking its model is a check asking, nothing else."""
    cell = {"judge": "check.judge({'n': 100.0, 'why': 'probe'}, record=made_up)",
            "_score": "check._score({'n': 100.0, 'why': 'probe'}, made_up)",
            "quiet": "from grader import serving\nserving.quiet(lesson01._crossover_n)(*lesson01._crossover_inputs())",
            "own prediction": "from grader.checks._common import Prediction\n"
                              "mine = Prediction('01_crossover', 'MINE', {'n': 'number'}, 1, band=check.band)\n"
                              "mine({'n': 100.0, 'why': 'probe'})",
            # round 4: a call compiled under importlib's file name passed for a course module's import, and one under
            # the course's own file, run in its module's globals, passes for course code
            "importlib's name": "exec(compile('lesson01._crossover_n(*lesson01._crossover_inputs())', "
                                "'<frozen importlib._bootstrap>', 'exec'), {'lesson01': lesson01})",
            "the course's file": "exec(compile('_crossover_n(*_crossover_inputs())', lesson01.__file__, 'exec'), "
                                 "vars(lesson01))",
            # round 4: the hidden tests' check as a silent oracle (it raises when the model is not what is asked)
            "expect": "try:\n    lesson01.expect(lesson01._crossover_n, args=lesson01._crossover_inputs(), want=1.0, "
                      "why='probe')\nexcept Exception:\n    pass"}
    exec(compile(cell[how], "<cell>", "exec"), {"check": CHECK, "lesson01": lesson01, "made_up": _MADE_UP})
    assert CHECK({"n": RIGHT, "why": "computed it"}) == 0.0
    assert predictions.entry(lesson01.LESSON, CHECK.name)["revealed"]


def test_the_check_itself_and_the_class_grader_ask_the_model_without_a_reveal(record, capsys):
    """The other side: the course's own check, and the class grader judging a course check, are no reveal."""
    assert CHECK({"n": RIGHT, "why": "computed it"}) == CHECK.points
    assert not predictions.entry(lesson01.LESSON, CHECK.name)["revealed"]
    reply = _in_class_grader({"n": RIGHT, "why": "computed it"}, predictions.read(record))
    assert reply["score"] == CHECK.points and not predictions.entry(lesson01.LESSON, CHECK.name)["revealed"]


def test_a_course_only_call_inside_another_counts_once_under_the_outer_name(record):
    """Lesson 02's reveal cell shows probe_rows() (course_only, watched by SYNC_ANSWERS), which enters a SyncCounter
    (course_only, in sync_points' guard): the cell asked for probe_rows, not for the counter on a loop."""
    from grader.checks import lesson02

    shortcuts._fresh_kernel()
    exec(compile("from grader.checks import lesson02\nlesson02.probe_rows()\n", "<cell>", "exec"), {})
    assert "grader.checks.lesson02.probe_rows" in shortcuts.used()
    assert "grader.syncs.SyncCounter" not in shortcuts.used()
    exec(compile("from grader.syncs import SyncCounter\nwith SyncCounter('cuda'):\n    pass\n", "<cell>", "exec"), {})
    assert "grader.syncs.SyncCounter" in shortcuts.used()
    shortcuts._fresh_kernel()
    assert lesson02.probe_rows.course_only


def test_a_thread_started_through_a_partial_is_seen():
    """A copy test started its thread with functools.partial(_thread.start_new_thread): the profiler reports no
    call of a C function made through a partial, so the course puts a Python function in front of it."""
    import _thread
    import functools
    import os
    import threading

    done = threading.Event()
    with shortcuts.watching(shortcuts.ELSEWHERE) as hits:
        functools.partial(_thread.start_new_thread)(done.set, ())
        done.wait(5)
    assert hits == [shortcuts.ELSEWHERE[threading.Thread.start]]
    # threading bound its own name at import, before the course's: it is the same Python function now, as is os.fork
    assert threading._start_new_thread is _thread.start_new_thread and os.fork.__module__ == "grader.shortcuts"


def test_reveal_cell_skips_until_recorded(record, capsys):
    with CHECK.revealed() as shown:
        assert shown is False
    assert capsys.readouterr().out.startswith("⏭ skipped")
    CHECK({"n": RIGHT, "why": "because"})
    with CHECK.revealed() as shown:
        assert shown is True
    assert "your first guess" in capsys.readouterr().out


def test_malformed_predictions_fail_and_record_nothing(record):
    with pytest.raises(NotDone):
        CHECK({})
    for bad in ({"n": RIGHT}, {"n": -1, "why": "x"}, {"n": RIGHT, "why": ""}, {"n": RIGHT, "why": "a\nb"}, [RIGHT]):
        with pytest.raises(CheckFailed):
            CHECK(bad)
    assert not record.exists()


def test_a_malformed_or_huge_record_counts_as_none(tmp_path):
    for text in ("{", json.dumps({"lessons": []}), "x" * (predictions.MAX_BYTES + 1),
                 json.dumps({"lessons": {"01_crossover": {"entries": {"CROSSOVER_PREDICTION": {"first": 3}}}}})):
        (tmp_path / "p.json").write_text(text)
        assert predictions.entry(lesson01.LESSON, "CROSSOVER_PREDICTION", predictions.read(tmp_path / "p.json")) is None


def test_known_mistakes_are_named_without_the_value(record, capsys):
    fixed, cpu, gpu = lesson01._crossover_inputs()
    from grader import shortcuts

    # the mistake computed with the model's own function, not its counted wrapper (a learner's cell calling that
    # wrapper records a reveal)
    squared = quiet_model(lesson01._crossover_n)(fixed, cpu, gpu, 2)
    CHECK({"n": squared, "why": "n² outputs"})
    out = capsys.readouterr().out
    assert "n² outputs" in out and f"{RIGHT:.0f}" not in out


def test_credit_is_a_plain_float_within_the_points():
    for commitment in (True, False):
        for fraction in (0.0, 0.5, 1.0, 7.0, -1.0):
            got = predictions.credit(2, commitment, fraction)
            assert type(got) is float and 0.0 <= got <= 2


def _prediction_cells():
    from conftest import lesson_ids
    from notebook_cells import prediction_cells

    for lesson in lesson_ids():
        for grade_id, check in prediction_cells(lesson).items():
            yield pytest.param(lesson, grade_id, check, id=f"{lesson}:{grade_id}")


@pytest.mark.parametrize("lesson,grade_id,check", list(_prediction_cells()))
def test_a_prediction_cell_scores_in_its_own_points_with_its_call_last(lesson, grade_id, check):
    """nbgrader reads the last expression as points: the check's points are the cell's, and the call is its last line."""
    import ast

    import nbformat

    from conftest import ROOT

    nb = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    assert float(cell.metadata["nbgrader"]["points"]) == check.points
    assert check.lesson == lesson
    last = ast.parse(cell.source).body[-1]
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and "HIDDEN" not in cell.source


def test_the_measured_context_is_frozen_with_the_first_guess(record, capsys):
    """note_measured: what a show cell measured; a first guess keeps the values it was made with, for its band."""
    predictions.note_measured("99_test", bandwidth=1e10)
    first = predictions.commit("99_test", "P", {"x": 1.0, "why": "w"}, "w")
    predictions.note_measured("99_test", bandwidth=2e10)  # a later run measures differently
    again = predictions.commit("99_test", "P", {"x": 2.0, "why": "w"}, "w")
    assert first["context"] == again["context"] == {"bandwidth": 1e10}
    assert predictions.context("99_test") == {"bandwidth": 2e10}
    for bad in (float("nan"), 0.0, -1e9, True):  # a copy test noted bandwidth=0.0: its model fell back to 16x
        with pytest.raises(ValueError):
            predictions.note_measured("99_test", bandwidth=bad)


# --- the model a prediction is scored against, called from a cell before the first guess ---------------------------

# Functions a band reads that are the prediction's inputs, not its answer: the page prints what they return.
_INPUTS = {"gpu_fixed_seconds", "_crossover_inputs", "timing_text", "_near", "_ratio_off", "_seven_b", "_naive",
           "_measured", "_named",
           "snippet_reads", "snippet_waits",  # lesson 02's quiz key: _Quiz fails on it outright
           "_half_frozen_mlp",  # lesson 04: builds the model the page describes, measures nothing
           "_small_transformer"}  # lesson 05: the small transformer section 3 builds


def _reached(module) -> dict[str, set[str]]:
    """Per prediction name: the module's own functions its band, feedback and model reach (read from the source)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(module))
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    found = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) > 1):
            continue
        kinds = {kw.arg: kw.value for kw in node.keywords if kw.arg in ("band", "mistakes", "model")}
        if "band" not in kinds:
            continue
        name = node.args[1].value if isinstance(node.args[1], ast.Constant) else getattr(module, node.args[1].id)
        todo = [n.id for v in kinds.values() for n in ast.walk(v) if isinstance(n, ast.Name) and n.id in funcs]
        seen = set()
        while todo:
            f = todo.pop()
            if f in seen or f in _INPUTS:
                continue
            seen.add(f)
            todo += [n.id for n in ast.walk(funcs[f]) if isinstance(n, ast.Name) and n.id in funcs]
        found[name] = seen
    return found


def _predictions():
    import importlib

    from grader.checks._common import Prediction

    for n in ("01", "02", "03", "04", "05", "07", "08", "09"):
        module = importlib.import_module(f"grader.checks.lesson{n}")
        checks = {v.name: v for v in vars(module).values() if isinstance(v, Prediction)}
        for name, reached in _reached(module).items():
            yield pytest.param(module, checks[name], reached, id=name)


@pytest.mark.parametrize("module,check,reached", list(_predictions()))
def test_every_function_a_prediction_is_scored_with_is_watched(module, check, reached):
    """A copy test read COMPUTE_BOUND_N, CROSSOVER_PREDICTION, ADD_PREDICTION and LINEAR_PREDICTION off the package's
    private models (lesson01._crossover_n, ...) before guessing, unrecorded: each one is now watched."""
    assert reached, "the test found nothing the band reads"
    for name in sorted(reached):
        label = getattr(getattr(module, name), "course_only", None)
        assert label, f"{module.__name__}.{name} is what {check.name} is scored with; mark it @course_only()"
        assert label in check.watched, f"{check.name} does not watch {label}"


def test_the_model_called_from_a_cell_before_the_first_guess_is_a_reveal(record, capsys):
    from grader import shortcuts

    exec(compile("from grader.checks import lesson01\nlesson01._crossover_n(*lesson01._crossover_inputs())\n",
                 "<cell>", "exec"), {})
    assert shortcuts.used("grader.checks.lesson01._crossover_n")
    assert CHECK({"n": RIGHT, "why": "computed it with the course's model"}) == 0.0
    out = capsys.readouterr().out
    assert "called grader.checks.lesson01._crossover_n before your first guess" in out and "reveal" in out
    found = predictions.entry(lesson01.LESSON, CHECK.name)
    assert found.get("revealed") and not predictions.committed(found)
    assert _in_class_grader({"n": RIGHT, "why": "x"}, predictions.read(record))["score"] == 0.0


@pytest.mark.parametrize("how", ["band", "private band", "after the guess", "inside the check"])
def test_what_counts_as_asking_for_the_model(record, capsys, how):
    """The check's band called on purpose counts; the course's own calls, and any call after the first guess, do not."""
    from grader.checks import lesson07

    check = lesson07.check_allreduce_prediction
    guess = {"16 GPUs ms": 3.0, "why": "a ring in each node, then the rails"}
    cell = {"band": "check.band(guess, {})", "private band": "lesson07._allreduce_band(guess, {})",
            "after the guess": "check(guess); lesson07._ring_model(1e9, 16, 0.0, 5e10)", "inside the check": "check(guess)"}
    exec(compile(cell[how], "<cell>", "exec"), {"check": check, "guess": guess, "lesson07": lesson07})
    check(guess)
    found = predictions.entry(lesson07.LESSON, check.name)
    asked = how in ("band", "private band")
    assert bool(found.get("revealed")) == asked and predictions.committed(found) == (not asked)
    assert ("counts as asking for the answer" in capsys.readouterr().out) == asked


def test_mfu_guess_model_reads_nothing_a_cell_can_write(record):
    """MFU_GUESS's band read a kernel count from the record, which any cell could set with note_measured before
    committing (a copy test made 0.3 score full marks that way): its model now counts for itself."""
    from grader.checks import lesson05

    band = quiet_model(lesson05._mfu_guess_band)
    before = band({"mfu": 0.3}, {})
    predictions.note_measured(lesson05.LESSON, launches_per_step=50_331_648 / (0.3 * 1e-5 * 989.5e12))
    assert band({"mfu": 0.3}, predictions.context(lesson05.LESSON)) == before and before[0] == 0.0
    assert predictions.context(lesson05.LESSON) and "mfu" not in json.dumps(predictions.context(lesson05.LESSON))


@pytest.mark.parametrize("cell", [
    "from grader import distributed\nfrom grader.checks import lesson07\n"
    "links = distributed.cluster_links(900, 16, chip='NVIDIA H100 SXM5 80GB')\n"
    "distributed.cluster_allreduce_seconds(1e9, links, lambda b, n, l, bw: 0.0)\n",
    "from grader import distributed\ndistributed.cluster_links(900, 16, chip='NVIDIA H100 SXM5 80GB')\n",
    "from grader import memory, specs, widgets\n"
    "widgets.data_parallel_explorer([{'model': 'x', 'n_params': 2.5e8}], specs.load_chips(), lambda n, w, s, l: 1.0,\n"
    "                               lambda b, n, l, bw: 0.0, memory.card_bytes)\n",
], ids=["cluster_allreduce_seconds", "cluster_links", "data_parallel_explorer"])
def test_the_cluster_allreduce_before_the_guess_is_a_reveal(record, capsys, cell):
    """A copy test ran the reveal cell's distributed.cluster_allreduce_seconds(1e9, cluster_links(...), ...) before
    committing ALLREDUCE_PREDICTION and scored 1 / 1, unrecorded: every course function that prices it is watched."""
    from grader.checks import lesson07

    exec(compile(cell, "<cell>", "exec"), {})
    check = lesson07.check_allreduce_prediction
    assert check({"16 GPUs ms": 6.4, "why": "copied from the reveal cell's calls"}) == 0.0
    assert predictions.entry(lesson07.LESSON, check.name).get("revealed")
    assert "counts as asking for the answer" in capsys.readouterr().out


def test_the_kernel_counter_before_mfu_guess_is_a_reveal(record, capsys):
    """A copy test ran profiling.device_ops and torch's FLOP counter on the small step before committing MFU_GUESS
    and had the launch-bound model's exact figure, unrecorded: device_ops is the model's kernel counter, watched."""
    from grader.checks import lesson05

    exec(compile("from grader import profiling\nimport torch\nx = torch.ones(3)\nprofiling.device_ops(lambda: x * 2)\n",
                 "<cell>", "exec"), {})
    check = lesson05.check_mfu_guess
    assert check({"mfu": 4.5e-5, "why": "counted with the course's kernel counter"}) == 0.0
    assert predictions.entry(lesson05.LESSON, check.name).get("revealed")
    assert "called grader.profiling.device_ops before your first guess" in capsys.readouterr().out


def test_the_two_worker_loader_before_idle_guess_is_a_reveal(record, capsys):
    """A copy test ran IDLE_GUESS's reveal cell's body (the loop profiled with loading.with_workers) before guessing."""
    from grader.checks import lesson05

    exec(compile("from grader import loading\nloading.with_workers(loading.slow_loader(loading.SlowDataset(4), 2), 0)\n",
                 "<cell>", "exec"), {})
    check = lesson05.check_idle_guess
    assert check({"shrinks": "waiting", "GPU idle share": 0.33, "why": "measured it first"}) == 0.0
    assert predictions.entry(lesson05.LESSON, check.name).get("revealed")
    assert "called grader.loading.with_workers before your first guess" in capsys.readouterr().out


@pytest.mark.parametrize("lesson,prediction,check,cells,function", [
    ("01_crossover", "check_compute_bound_n", "check_linear_forecast", ("intensity", "roofline", "linear_forecast"),
     "linear_forecast"),
    ("01_crossover", "check_linear_prediction", "check_linear_forecast", ("intensity", "roofline", "linear_forecast"),
     "linear_forecast"),
    ("03_float_formats", "check_zero_share", "check_predict_vanishing", ("predict_vanishing",), "predict_vanishing"),
    ("07_data_parallel", "check_zero_prediction", "check_bytes_per_rank", ("bytes_per_rank",), "bytes_per_rank"),
    ("08_inside_a_kernel", "check_tile_prediction", "check_best_tiles", ("tile_traffic",), "best_tiles"),
])
def test_a_later_function_that_answers_a_prediction_is_a_reveal_if_it_passes_first(lesson, prediction, check, cells,
                                                                                    function, monkeypatch):
    """Copy tests r22 to r25 wrote a later exercise first (linear_forecast, best_tiles, predict_vanishing), ran its check,
    and read the prediction's answer off their own function: passing that check before the first guess is recorded is
    asking for the answer. After a first guess, passing it changes nothing."""
    import importlib

    from grader import predictions
    from notebook_cells import solution_cells

    monkeypatch.setattr(_common, "_in_a_kernel", lambda: True)  # a learner's kernel: where the stamp is made
    module = importlib.import_module(f"grader.checks.lesson{lesson[:2]}")
    namespace: dict = {}
    sources = solution_cells(lesson)
    for cell in cells:
        exec(sources[cell], namespace)
    getattr(module, check)(namespace[function])
    name = getattr(module, prediction).name
    assert predictions.entry(lesson, name).get("revealed"), "passing the later check first is a reveal"


def test_passing_the_later_check_after_the_first_guess_is_no_reveal(monkeypatch):
    from grader import predictions

    monkeypatch.setattr(_common, "_in_a_kernel", lambda: True)
    from grader.checks import lesson07
    from notebook_cells import solution_cells

    namespace: dict = {}
    exec(solution_cells("07_data_parallel")["ZERO_PREDICTION"], namespace)
    lesson07.check_zero_prediction(namespace["ZERO_PREDICTION"])
    exec(solution_cells("07_data_parallel")["bytes_per_rank"], namespace)
    lesson07.check_bytes_per_rank(namespace["bytes_per_rank"])
    entry = predictions.entry("07_data_parallel", "ZERO_PREDICTION")
    assert entry.get("first") and not entry.get("revealed"), entry


def test_a_later_check_run_in_halves_is_a_reveal_too_and_the_score_says_what_happened(monkeypatch):
    """Copy test r26 ran check.judge(check.observe(fn)) for linear_forecast, which stamped nothing (the hook was in
    __call__), and read the score line "revealed on purpose" after a pass it had not asked to be a reveal."""
    from grader import predictions
    from grader.checks import lesson01
    from notebook_cells import solution_cells

    monkeypatch.setattr(_common, "_in_a_kernel", lambda: True)
    namespace: dict = {}
    for cell in ("intensity", "roofline", "linear_forecast"):
        exec(solution_cells("01_crossover")[cell], namespace)
    check = lesson01.check_linear_forecast
    check.judge(check.observe(namespace["linear_forecast"]))
    assert predictions.entry("01_crossover", "COMPUTE_BOUND_N").get("revealed")
    points, said = lesson01.check_compute_bound_n._score({"fp32": 117, "bf16 ever": False, "why": "x"},
                                                        predictions._load())
    assert points == 0.0 and "on purpose before" not in said and "later exercise" in said, said


def test_a_later_check_passing_outside_a_kernel_stamps_nothing(tmp_path, monkeypatch):
    """Grading a class (stop 47): the class grader judges linear_forecast in its own process, not a kernel, and the
    hook stamped COMPUTE_BOUND_N's reveal into a predictions.json beside the instructor. Outside a kernel it is a no-op."""
    from grader import predictions
    from grader.checks import lesson01
    from notebook_cells import solution_cells

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(predictions.ENV_PATH, raising=False)
    namespace: dict = {}
    for cell in ("intensity", "roofline", "linear_forecast"):
        exec(solution_cells("01_crossover")[cell], namespace)
    lesson01.check_linear_forecast(namespace["linear_forecast"])
    assert not (tmp_path / predictions.FILE_NAME).exists()


# --- the learner's ledger: a first guess and a reveal follow the learner from one copy of a lesson to another -------

@pytest.fixture
def ledger(record, tmp_path, monkeypatch):
    """The learner's ledger, as a kernel started in their home would have it (the tests run with none)."""
    path = tmp_path / "home" / ".local" / "share" / predictions.LEDGER_DIR / "ledger.json"
    monkeypatch.setenv(predictions.ENV_LEDGER, str(path))
    return path


def _copy(monkeypatch, folder):
    """Work in another copy of the lesson: its own predictions.json, the same learner's ledger."""
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv(predictions.ENV_PATH, str(folder / predictions.FILE_NAME))
    predictions._MEMORY.clear()
    predictions._SHOWN.clear()
    _common._ASKED.clear()
    shortcuts.reset()


def test_an_answer_revealed_in_another_copy_is_revealed_here(ledger, capsys, tmp_path, monkeypatch):
    """A copy test revealed CROSSOVER_PREDICTION's answer in a scratch copy of the lesson, whose predictions.json the
    graded notebook never read, then committed that answer in the real one for full marks."""
    _copy(monkeypatch, tmp_path / "scratch")
    CHECK.reveal()
    _copy(monkeypatch, tmp_path / "real")
    assert CHECK({"n": RIGHT, "why": "the model's answer"}) == 0.0
    assert "another copy of this lesson" in capsys.readouterr().out
    handed_in = predictions.read(tmp_path / "real" / predictions.FILE_NAME)
    assert _in_class_grader({"n": RIGHT, "why": "x"}, handed_in)["score"] == 0.0, "the handed-in file says so"


def test_a_first_guess_follows_the_learner_to_a_fresh_copy(ledger, capsys, tmp_path, monkeypatch):
    """A learner who starts the lesson again in a fresh folder keeps the first guess made in the old one: it is
    scored, and the answer now is the new one."""
    _copy(monkeypatch, tmp_path / "old")
    assert CHECK({"n": RIGHT * 1.3, "why": "a first guess"}) == pytest.approx(0.75 * CHECK.points)
    _copy(monkeypatch, tmp_path / "new")
    assert CHECK({"n": RIGHT, "why": "having seen the answer"}) == pytest.approx(0.75 * CHECK.points)
    out = capsys.readouterr().out
    assert "in another copy of this lesson" in out and str(tmp_path / "old") in out
    found = predictions.entry(lesson01.LESSON, CHECK.name, predictions.read(tmp_path / "new" / predictions.FILE_NAME))
    assert found["first"]["n"] == pytest.approx(RIGHT * 1.3) and found["last"]["n"] == RIGHT


def test_a_model_called_in_another_copy_is_a_reveal_here(ledger, capsys, tmp_path, monkeypatch):
    _copy(monkeypatch, tmp_path / "scratch")
    exec(compile("from grader.checks import lesson01\nlesson01._crossover_n(*lesson01._crossover_inputs())\n",
                 "<cell>", "exec"), {})
    _copy(monkeypatch, tmp_path / "real")
    assert CHECK({"n": RIGHT, "why": "computed it"}) == 0.0


def test_the_ledger_is_neither_read_nor_written_while_grading(ledger, capsys, tmp_path, monkeypatch):
    _copy(monkeypatch, tmp_path / "scratch")
    CHECK.reveal()
    ledger = predictions.ledger_path()
    before = ledger.read_bytes()
    monkeypatch.setenv(predictions.ENV_GRADING, "1")
    monkeypatch.chdir(tmp_path)  # a grader's folder, with no record handed in
    predictions._MEMORY.clear()
    assert predictions.ledger_path() is None and predictions._load() == {}
    monkeypatch.delenv(predictions.ENV_GRADING)
    _copy(monkeypatch, tmp_path / "other")
    monkeypatch.setenv(predictions.ENV_LEDGER, "")  # none at all: each folder on its own
    assert predictions.ledger_path() is None
    assert CHECK({"n": RIGHT, "why": "no ledger"}) == CHECK.points
    assert ledger.read_bytes() == before


@pytest.mark.parametrize("bad", [b"{", b"[]", b'{"lessons": {"01_crossover": {"entries": {"CROSSOVER_PREDICTION": 3}}}}',
                                 b"x" * (predictions.MAX_BYTES + 1), "symlink"],
                         ids=["cut short", "a list", "a bad entry", "too big", "symlink"])
def test_a_broken_ledger_is_no_ledger_and_says_nothing(record, capfd, tmp_path, monkeypatch, bad):
    ledger = tmp_path / "led" / "ledger.json"
    ledger.parent.mkdir()
    if bad == "symlink":
        (tmp_path / "elsewhere.json").write_text("{}")
        ledger.symlink_to(tmp_path / "elsewhere.json")
    else:
        ledger.write_bytes(bad)
    monkeypatch.setenv(predictions.ENV_LEDGER, str(ledger))
    assert CHECK({"n": RIGHT, "why": "a guess"}) == CHECK.points
    assert capfd.readouterr().err == ""
    if bad == "symlink":
        assert (tmp_path / "elsewhere.json").read_text() == "{}", "a symlinked ledger is never written through"


def test_the_default_ledger_is_in_the_learners_home(monkeypatch, tmp_path):
    monkeypatch.delenv(predictions.ENV_LEDGER, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert predictions.ledger_path() == tmp_path / ".local" / "share" / predictions.LEDGER_DIR / "ledger.json"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert predictions.ledger_path() == tmp_path / "data" / predictions.LEDGER_DIR / "ledger.json"


def test_a_kernel_reveal_in_a_scratch_folder_follows_the_learner_home(record, tmp_path, monkeypatch):
    """End to end, in Jupyter kernels started as `make lab` starts them (no GRADER_LEDGER, the learner's HOME): the
    answer revealed in a scratch copy costs the real copy its prediction, and a cell that moves HOME does not help."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.delenv(predictions.ENV_LEDGER)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()

    def run(folder, *sources):
        folder.mkdir()
        monkeypatch.setenv(predictions.ENV_PATH, str(folder / predictions.FILE_NAME))
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        NotebookClient(nb, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute()
        return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))

    run(tmp_path / "scratch", "from grader.checks import lesson01\nlesson01.check_crossover_prediction.reveal()")
    ledger = tmp_path / "home" / ".local" / "share" / predictions.LEDGER_DIR / "ledger.json"
    assert ledger.is_file() and ledger.stat().st_mode & 0o077 == 0 and ledger.parent.stat().st_mode & 0o077 == 0
    out = run(tmp_path / "real", f"import os\nos.environ['HOME'] = {str(tmp_path / 'elsewhere')!r}",
              f"from grader.checks import lesson01\nprint(lesson01.check_crossover_prediction({{'n': {RIGHT!r}, "
              "'why': 'the answer I saw'}))")
    assert "0.0" in out and "another copy of this lesson" in out


@pytest.mark.parametrize("how", ["_opened", "_INNER", "unseal by hand"])
def test_the_sealed_models_back_doors_are_reveals(record, capsys, how):
    """Copy test r31 opened CROSSOVER_PREDICTION's sealed model from a cell through the package's own opener
    (_sealed._opened), through the course_only wrapper's inner function (shortcuts._INNER) and by unsealing its text
    with _keys.unseal: each gave the answer, none was recorded."""
    cell = {"_opened": "from grader.checks import _sealed\n_sealed._opened('01_crossover', '_crossover_n')"
                       "(*lesson01._crossover_inputs())",
            "_INNER": "from grader import shortcuts\nshortcuts._INNER[lesson01._crossover_n](*lesson01._crossover_inputs())",
            "unseal by hand": "from grader.checks import _keys, _sealed\n"
                              "_keys.unseal('01_crossover', 'sealed function _crossover_n', '_crossover_n', "
                              "_sealed._file('01_crossover')['functions']['_crossover_n'])"}
    exec(compile(cell[how], "<cell>", "exec"), {"lesson01": lesson01})
    assert CHECK({"n": RIGHT, "why": "opened it"}) == 0.0
    assert "recorded as a reveal" in capsys.readouterr().out


def test_a_reveal_while_grading_does_not_say_it_is_recorded(record, capsys, monkeypatch):
    """Copy test r31: in a process started with GRADER_GRADING, reveal() said "recorded" and wrote nothing."""
    monkeypatch.setenv(predictions.ENV_GRADING, "1")
    CHECK.reveal()
    out = capsys.readouterr().out
    assert "nothing is recorded while a grader runs" in out and "recorded:" not in out and not record.exists()


def test_a_forged_other_folder_is_one_short_line_in_the_class_grader(record, capsys):
    """The handed-in record names the other copy's folder; a student can write anything there: the message keeps one
    line of at most 120 characters of it."""
    data = {lesson01.LESSON: {"measured": {}, "entries": {"CROSSOVER_PREDICTION": {
        "first": {"n": RIGHT, "why": "x"}, "reason": "x", "at": "2026-01-01T00:00:00+00:00", "context": {},
        "revealed": None, "shown": None, "answers": 1, "last": {"n": RIGHT, "why": "x"},
        "elsewhere": "=HYPERLINK(\"x\")\n<script>" + "a" * 100_000}}}}
    reply = _in_class_grader({"n": RIGHT, "why": "x"}, data)
    assert reply["ok"] and reply["score"] == CHECK.points
    said = reply["stdout"]
    assert "in another copy of this lesson, …aaa" in said and "<script>" not in said and "a" * 121 not in said
