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
