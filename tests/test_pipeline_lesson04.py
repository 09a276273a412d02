"""Lesson 04 end to end through nbgrader: full marks, zero, and a forgotten master copy named in the CSV."""

from __future__ import annotations

import pytest

from conftest import ROOT
from grader.course import autograde, read_csv
from notebook_cells import three_submissions

pytestmark = pytest.mark.xdist_group("pipeline-04")  # the graded class is built once, on one worker

LESSON = "04_memory"
GRADED = 4  # state_bytes, training_bytes, activation_bytes, max_batch


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """alice submits the reference, bob the blank release, carol mixed precision without the fp32 master copy."""
    subs = three_submissions(
        tmp_path_factory.mktemp("submissions"),
        LESSON,
        "training_bytes",
        "def training_bytes(n_params, precision, optimizer):\n"
        "    moments = {'sgd': 0, 'momentum': 1, 'adam': 2}[optimizer]\n"
        "    per = 4 + 4 + 4 * moments if precision == 'fp32' else 2 + 2 + 4 * moments\n"
        "    return n_params * per\n",
    )
    out = tmp_path_factory.mktemp("grades")
    return read_csv(autograde(ROOT, subs, out, log=lambda line: None))


def test_reference_solution_gets_full_marks(graded):
    alice = [r for r in graded if r.student == "alice"]
    assert len(alice) == GRADED and all(r.score == r.max_score and r.status == "passed" for r in alice), alice


def test_blank_release_gets_zero(graded):
    bob = [r for r in graded if r.student == "bob"]
    assert len(bob) == GRADED and all(r.score == 0 for r in bob), bob


def test_forgotten_master_copy_is_named(graded):
    carol = {r.grade_id: r for r in graded if r.student == "carol"}
    assert carol["training_bytes_check"].score == 0
    assert "master copy" in carol["training_bytes_check"].message
