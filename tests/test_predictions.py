"""The prediction protocol (grader.predictions, _common.Prediction): recorded once, revealed after, scored in points."""

from __future__ import annotations

import json

import pytest

from grader import predictions
from grader.checks import lesson01
from grader.notebook import CheckFailed, NotDone
from grader.pipeline.judging import judge_cell

CHECK = lesson01.check_crossover_prediction
RIGHT = lesson01._crossover_n(*lesson01._crossover_inputs())
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


@pytest.mark.parametrize("ask", ["model", "ceilings"])
def test_asking_the_model_before_guessing_is_a_reveal(record, capsys, ask):
    """A copy test read the model off check.model() (and lesson 09's ceilings helper) before guessing, unrecorded."""
    from grader.checks import lesson09

    if ask == "model":
        assert "crossover" in CHECK.model()
        assert CHECK({"n": RIGHT, "why": "read it"}) == 0.0
    else:
        lesson09.batch1_ceilings()
        found = predictions.entry(lesson09.LESSON, lesson09.check_tokens_per_second.name)
        assert found and found.get("revealed") and not predictions.committed(found)


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
    squared = lesson01._crossover_n(fixed, cpu, gpu, 2)
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
    with pytest.raises(ValueError):
        predictions.note_measured("99_test", bandwidth=float("nan"))
