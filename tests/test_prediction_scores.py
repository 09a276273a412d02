"""Lessons 01, 03 and 04's predictions, scored (issue 29): the solution, an honest half-right guess and every wrong-value
mutant get the same score from the notebook's check and from the class grader; feedback names the mistake, no value."""

from __future__ import annotations

import importlib
import re

import pytest

from grader import predictions
from grader.checks import _plain
from grader.pipeline.judging import judge_cell
from notebook_cells import check_cells, namespace
from test_predictions import record  # noqa: F401  the protocol's fixture: the record in a temporary file

MODULES = ("lesson01", "lesson02", "lesson03", "lesson04")


def _scored_cells():
    for module in MODULES:
        mod = importlib.import_module(f"mutants.{module}")
        for grade_id in mod.PREDICTION_MUTANTS:
            yield mod.LESSON, grade_id


def _mutants():
    for module in MODULES:
        mod = importlib.import_module(f"mutants.{module}")
        for grade_id, found in mod.PREDICTION_MUTANTS.items():
            for name, source, pattern in found:
                yield pytest.param(mod.LESSON, grade_id, source, pattern, id=f"{mod.LESSON}:{grade_id}:{name}")


def _check(lesson: str, grade_id: str):
    source = check_cells(lesson)[grade_id]
    module, call = re.search(r"^(lesson\d\d)\.(\w+)\(", source, re.M).groups()
    name = re.search(r"\((\w+)\)", source).group(1)
    return source, getattr(importlib.import_module(f"grader.checks.{module}"), call), name


def _both(lesson: str, grade_id: str, ns: dict, record) -> tuple[float, str, float, str]:
    """(score, feedback) in the kernel, then (score, feedback) from the class grader with the record handed in."""
    source, check, name = _check(lesson, grade_id)
    here = check(ns[name])
    answer = ns[name]

    def ask(request):
        return "ok", {"ok": True, "observation": _plain.dumps(check.observe(answer)), "stdout": "", "stderr": ""}

    state, reply = judge_cell(source, ask, record=predictions.read(record))
    assert state == "ok" and reply["ok"], reply
    return here, reply


@pytest.mark.parametrize("lesson,grade_id", list(_scored_cells()))
def test_the_solution_scores_full_marks_in_both_graders(lesson, grade_id, record, capsys):
    here, reply = _both(lesson, grade_id, namespace(lesson), record)
    assert here == _check(lesson, grade_id)[1].points == reply["score"]


@pytest.mark.parametrize("lesson,grade_id,source,pattern", list(_mutants()))
def test_a_wrong_first_guess_scores_less_the_same_in_both_and_is_named(lesson, grade_id, source, pattern, record, capsys):
    ns = namespace(lesson)
    exec(compile(source, "<mutant>", "exec"), ns)
    here, reply = _both(lesson, grade_id, ns, record)
    points = _check(lesson, grade_id)[1].points
    assert here == reply["score"] and 0 < here < points, (here, reply)
    feedback = capsys.readouterr().out
    assert re.search(pattern, feedback), feedback


@pytest.mark.parametrize("lesson,grade_id,source,pattern", list(_mutants()))
def test_honest_guess_is_half_credit_at_least_and_a_resubmission_changes_nothing(lesson, grade_id, source, pattern,
                                                                               record, capsys):
    """A wrong first guess with a reason keeps the commitment half; correcting it afterwards moves no score."""
    ns = namespace(lesson)
    right = dict(ns[_check(lesson, grade_id)[2]])
    exec(compile(source, "<mutant>", "exec"), ns)
    first, _ = _both(lesson, grade_id, ns, record)
    ns[_check(lesson, grade_id)[2]] = right
    again, reply = _both(lesson, grade_id, ns, record)
    points = _check(lesson, grade_id)[1].points
    assert first >= points / 2 and again == first == reply["score"]
