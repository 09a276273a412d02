"""formgrader's Autograde button (plain `nbgrader autograde`) grades a widget lesson without nbclient#312's stall."""

from __future__ import annotations

import time

import nbformat
import pytest

from grader.pipeline.classroom import grade_class
from grader.pipeline.grades import read_csv
from grader.pipeline.nbgrader_plain import AUTOGRADE_PREPROCESSORS, autograde_plain
from grader.pipeline.settings import Settings
from infra_machine import ROOT
from test_infra_exchange import _solved_release

# no xdist group: it starts no daemon, so it may run beside the infrastructure tests

LESSON = "03_float_formats"  # a lesson with widget cells


def test_the_course_configs_name_the_patient_executor():
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert list(config.Autograde.autograde_preprocessors) == AUTOGRADE_PREPROCESSORS
    assert AUTOGRADE_PREPROCESSORS[0].endswith("PatientExecute")


def test_nbgraders_own_autograde_gives_the_same_grades_without_a_widget_stall(tmp_path):
    submissions = tmp_path / "submissions"
    (submissions / "ann" / LESSON).mkdir(parents=True)
    nbformat.write(_solved_release(LESSON), str(submissions / "ann" / LESSON / f"{LESSON}.ipynb"))
    start = time.perf_counter()
    ours = read_csv(grade_class(ROOT, submissions, tmp_path / "ours", Settings(workers=1), log=lambda _: None))
    course_seconds = time.perf_counter() - start
    start = time.perf_counter()
    plain = read_csv(autograde_plain(ROOT, submissions, tmp_path / "plain", log=lambda _: None))
    plain_seconds = time.perf_counter() - start
    assert {(r.grade_id, r.score) for r in plain} == {(r.grade_id, r.score) for r in ours}
    assert all(r.score == r.max_score for r in ours)
    report = f"nbgrader autograde {plain_seconds:.1f} s, the course's grader {course_seconds:.1f} s\n"
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "formgrader-vs-course.txt").write_text(report)  # a report: timings are not asserted
    # nbclient#312's stall waits out nbgrader's 300 s cell timeout: a hang, far beyond any difference in speed
    assert plain_seconds < course_seconds + 240, f"plain nbgrader stalled on a widget cell? {report}"
