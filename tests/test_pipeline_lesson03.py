"""Lesson 03 end to end through nbgrader: full marks, zero, and a scaler that never grows back named in the CSV."""

from __future__ import annotations

import pytest

from conftest import ROOT
from grader.course import autograde, read_csv
from mutants.lesson03 import MUTANTS
from notebook_cells import three_submissions

pytestmark = pytest.mark.xdist_group("pipeline-03")  # the graded class is built once, on one worker

LESSON = "03_float_formats"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """alice submits the reference solution, bob the blank release, carol a LossScaler that never grows back."""
    never_grows = dict((name, source) for name, source, _ in MUTANTS["LossScaler_check"])["never grows back"]
    subs = three_submissions(tmp_path_factory.mktemp("submissions"), LESSON, "LossScaler", never_grows)
    out = tmp_path_factory.mktemp("grades")
    csv_path = autograde(ROOT, subs, out, log=lambda line: None)
    return out, [r for r in read_csv(csv_path) if r.lesson == LESSON]


def test_reference_solution_gets_full_marks(graded):
    _, rows = graded
    alice = [r for r in rows if r.student == "alice"]
    assert len(alice) == 6 and all(r.score == r.max_score and r.status == "passed" for r in alice), alice


def test_blank_release_gets_zero_on_every_check(graded):
    _, rows = graded
    bob = [r for r in rows if r.student == "bob"]
    assert len(bob) == 6 and all(r.score == 0 for r in bob), bob


def test_a_scaler_that_never_grows_back_is_named(graded):
    _, rows = graded
    carol = {r.grade_id: r for r in rows if r.student == "carol"}
    assert carol["LossScaler_check"].score == 0
    assert "never grows back" in carol["LossScaler_check"].message
    assert carol["decode_check"].score == 0  # her other exercises are still blank


def test_feedback_has_no_hidden_tests(graded):
    out, _ = graded
    pages = list((out / "course" / "feedback").rglob("*.html"))
    assert len(pages) == 3
    for page in pages:
        assert "BEGIN HIDDEN TESTS" not in page.read_text(encoding="utf-8")
