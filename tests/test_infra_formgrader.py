"""formgrader's Autograde button (plain `nbgrader autograde`) grades a widget lesson without nbclient#312's stall."""

from __future__ import annotations

import time

import nbformat
import pytest

from notebook_cells import honest_predictions
from grader.pipeline.classroom import grade_class
from grader.pipeline.grades import AUTOGRADE_PREPROCESSORS, read_csv
from grader.pipeline.nbgrader_plain import autograde_plain
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
    honest_predictions(LESSON, submissions / "ann" / LESSON)  # she ran it: her first guesses are handed in
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


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory):
    """A course checkout whose grades/ README's autograde wrote: ann's lesson 01 solved, ben's blank."""
    import shutil

    from test_infra_exchange import _solved_release

    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    lesson = "01_crossover"
    for part in ("solutions", "notebooks"):
        shutil.copytree(ROOT / part / lesson, course / part / lesson)
    subs = course / "submitted"
    for student, nb in (("ann", _solved_release(lesson)),
                        ("ben", nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), 4))):
        (subs / student / lesson).mkdir(parents=True)
        nbformat.write(nb, str(subs / student / lesson / f"{lesson}.ipynb"))
    grade_class(course, subs, course / "grades", Settings(workers=2), log=lambda _: None)
    return course


def _start_lab(args: list[str], tag: str):
    """`python -m grader lab ARGS --no-browser`, started as README says; (process, base URL, token) once it prints the URL."""
    import os
    import re
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "grader", *args, "--no-browser"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "GRADER_TEST_TAG": tag})
    seen = []
    for line in proc.stdout:
        seen.append(line)
        found = re.search(r"(http://127\.0\.0\.1:\d+)/\S*token=(\w+)", line)
        if found:
            return proc, found.group(1), found.group(2)
    raise AssertionError("`grader lab` printed no URL:\n" + "".join(seen)[-3000:])


def _stops_with_its_kernels(proc, base: str, token: str, tag: str, how) -> None:
    """Start a kernel, send the launcher `how`, and every process it started (server, kernel) must end."""
    import requests

    from conftest import processes_tagged
    from infra_machine import wait_for

    kernel = requests.post(f"{base}/api/kernels?token={token}", json={"name": "python3"}, timeout=60)
    assert kernel.status_code == 201, kernel.text[:500]
    before = processes_tagged(f"GRADER_TEST_TAG={tag}")
    assert len(before) >= 3, before  # launcher, server, kernel
    proc.send_signal(how)
    try:
        proc.wait(timeout=60)
        wait_for(lambda: not processes_tagged(f"GRADER_TEST_TAG={tag}"), 30, f"the server and kernel to end on {how!r}")
    finally:
        import os

        for pid in processes_tagged(f"GRADER_TEST_TAG={tag}"):
            os.kill(pid, 9)


def test_the_instructors_lab_formgrader_shows_the_graded_class_and_stops_on_sigint(graded_course):
    import signal
    import uuid

    import requests

    from infra_machine import formgrader_shows

    tag = uuid.uuid4().hex
    proc, base, token = _start_lab(["--root", str(graded_course), "lab", "--instructor"], tag)
    try:
        formgrader_shows(lambda path: requests.get(f"{base}{path}?token={token}", timeout=60).json(), "01_crossover",
                         {"ann": 10.0, "ben": 0.0})
    finally:
        _stops_with_its_kernels(proc, base, token, tag, signal.SIGINT)


def test_a_learners_lab_stops_with_its_kernels_on_sigterm(tmp_path):
    import signal
    import uuid

    tag = uuid.uuid4().hex
    proc, base, token = _start_lab(["--root", str(ROOT), "lab", str(tmp_path / "mine")], tag)
    _stops_with_its_kernels(proc, base, token, tag, signal.SIGTERM)
