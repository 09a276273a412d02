"""Lesson 02 end to end through nbgrader: full marks, zero, and a loop that reads every step named in the CSV."""

from __future__ import annotations

import shutil

import nbformat
import pytest

from conftest import ROOT
from grader.course import autograde, read_csv
from mutants.lesson02 import MUTANTS
from notebook_cells import with_exercise

LESSON = "02_transfers"
pytestmark = pytest.mark.xdist_group("pipeline-02")  # the graded class is built once, on one worker


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """alice submits the reference solution, bob the blank release, carol a loop that calls .item() every step."""
    subs = tmp_path_factory.mktemp("submissions")
    for student, source in (("alice", "solutions"), ("bob", "notebooks")):
        (subs / student / LESSON).mkdir(parents=True)
        shutil.copy(ROOT / source / LESSON / f"{LESSON}.ipynb", subs / student / LESSON)
    item_every_step = dict((name, src) for name, src, _ in MUTANTS["train_fixed_check"])[".item() every step"]
    carol = with_exercise(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb", "train_fixed", item_every_step)
    (subs / "carol" / LESSON).mkdir(parents=True)
    nbformat.write(carol, str(subs / "carol" / LESSON / f"{LESSON}.ipynb"))
    out = tmp_path_factory.mktemp("grades")
    return read_csv(autograde(ROOT, subs, out, log=lambda line: None))


def test_reference_solution_gets_full_marks(graded):
    alice = [r for r in graded if r.student == "alice" and r.lesson == LESSON]
    assert len(alice) == 3 and all(r.score == r.max_score and r.status == "passed" for r in alice), alice


def test_blank_release_gets_zero_on_every_check(graded):
    bob = [r for r in graded if r.student == "bob" and r.lesson == LESSON]
    assert len(bob) == 3 and all(r.score == 0 for r in bob), bob


def test_a_read_every_step_is_named_in_the_csv(graded):
    carol = {r.grade_id: r for r in graded if r.student == "carol" and r.lesson == LESSON}
    assert carol["train_fixed_check"].score == 0
    assert "calls .item() once per step: 16 reads for 16 steps" in carol["train_fixed_check"].message
