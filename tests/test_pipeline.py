"""End to end through nbgrader on a temporary course: full marks, zero, and a named mistake."""

from __future__ import annotations

import pytest

from conftest import ROOT, lesson_ids
from grader.course import autograde, read_csv
from notebook_cells import three_submissions


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """alice submits the reference solution, bob the blank release, carol a timer that never synchronizes."""
    subs = three_submissions(
        tmp_path_factory.mktemp("submissions"),
        "01_crossover",
        "time_op",
        "import statistics, time\n\ndef time_op(fn, sync, warmup, repeats):\n"
        "    for _ in range(warmup):\n        fn()\n    out = []\n    for _ in range(repeats):\n"
        "        t = time.perf_counter()\n        fn()\n        out.append(time.perf_counter() - t)\n"
        "    return statistics.median(out)\n",
    )
    out = tmp_path_factory.mktemp("grades")
    csv_path = autograde(ROOT, subs, out, log=lambda line: None)
    return out, read_csv(csv_path)


def test_reference_solution_gets_full_marks(graded):
    _, rows = graded
    alice = [r for r in rows if r.student == "alice"]
    assert alice and all(r.score == r.max_score and r.status == "passed" for r in alice), alice


def test_blank_release_gets_zero_on_every_exercise(graded):
    _, rows = graded
    bob = [r for r in rows if r.student == "bob"]
    assert bob and all(r.score == 0 for r in bob), bob
    assert all("not attempted" in r.message for r in bob)


def test_a_mistake_is_named_in_the_csv(graded):
    _, rows = graded
    carol = {r.grade_id: r for r in rows if r.student == "carol"}
    assert carol["time_op_check"].score == 0
    assert "never called sync()" in carol["time_op_check"].message
    assert carol["matmul_flops_check"].score == 0  # her other exercises are still blank


def test_one_row_per_student_lesson_and_graded_cell(graded):
    _, rows = graded
    keys = [(r.student, r.lesson, r.grade_id) for r in rows]
    assert len(keys) == len(set(keys)) == 3 * 7


def test_feedback_html_has_no_hidden_tests(graded):
    out, _ = graded
    pages = list((out / "course" / "feedback").rglob("*.html"))
    assert len(pages) == 3
    for page in pages:
        assert "BEGIN HIDDEN TESTS" not in page.read_text(encoding="utf-8")


def test_lessons_are_known():
    assert "01_crossover" in lesson_ids()
