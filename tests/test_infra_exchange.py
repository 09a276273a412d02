"""A class on one machine, end to end, with real Unix users and nbgrader's exchange.

The instructor (an ordinary user) releases a lesson through the exchange, two
students fetch and submit it as themselves, the instructor collects, grades
with the course's autograde and releases feedback through the exchange, and a
student fetches it and finds no hidden test in it. On the way: a student
cannot list the inbound folder nor read another's submission, and the
instructor's course folder is the instructor's alone. Needs root (useradd);
skipped elsewhere with the reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from notebook_cells import honest_predictions
from grader.pipeline import sandbox
from grader.pipeline.grades import read_csv

from infra_machine import ROOT, Users, everyone_python, needs_root, processes_of_uid

pytestmark = [pytest.mark.xdist_group("infra"), pytest.mark.skipif(bool(needs_root()), reason=needs_root() or "")]

LESSON = "03_float_formats"


def _solved_release(lesson: str) -> nbformat.NotebookNode:
    """The student release with every exercise cell filled in from the instructor's solution (a good student's work)."""
    release = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    solution = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and grade_id in answers:
            cell.source = answers[grade_id]
    return release


def _hidden_lines(lesson: str) -> list[str]:
    """The lines of the solution's hidden-test blocks (what no student may ever see)."""
    solution = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    found = []
    for cell in solution.cells:
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) > 12:
                found.append(line.strip())
    return found


@pytest.fixture
def shared_machine():
    python, why = everyone_python()
    if python is None:
        pytest.skip(why)
    users = Users(python)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-class-"))
    scratch.chmod(0o755)
    try:
        yield users, scratch
    finally:
        uids = [pwd.getpwnam(n).pw_uid for n in users.names]
        users.remove()
        shutil.rmtree(scratch, ignore_errors=True)
        assert not [p for uid in uids for p in processes_of_uid(uid)], "a test user's process outlived the test"


def test_a_class_through_nbgraders_exchange(shared_machine):
    users, scratch = shared_machine
    start = time.perf_counter()
    root_graded = sandbox.take_uid()  # root grades first: its uid lock folder (0700) must not stop an instructor
    sandbox.give_uid(root_graded)
    exchange = scratch / "exchange"
    exchange.mkdir(mode=0o1777)
    exchange.chmod(0o1777)  # as README says: install -d -m 1777 /srv/nbgrader/exchange
    config = scratch / "jupyter-config"
    config.mkdir(mode=0o755)
    shipped = (ROOT / "lab-config" / "class" / "nbgrader_config.py").read_text()
    (config / "nbgrader_config.py").write_text(shipped + f"\nc.Exchange.root = {str(exchange)!r}\n")
    env = {"JUPYTER_CONFIG_PATH": str(config)}
    nbgrader = [str(users.python), "-m", "nbgrader"]

    teacher, ann, ben = users.add("teach"), users.add("ann"), users.add("ben")
    course = users.home(teacher) / "gpu-course"
    users.run(teacher, ["mkdir", str(course)])
    users.run(teacher, ["cp", "-r", str(ROOT / "solutions"), str(ROOT / "notebooks"), str(ROOT / "nbgrader_config.py"),
                        str(course)])

    # release: nbgrader's course/ folder (gitignored, so absent from a fresh clone) is made by nbgrader_config.py
    users.run(teacher, [*nbgrader, "release_assignment", LESSON], cwd=course, env=env)
    both = ThreadPoolExecutor(2)  # the two students at once, as in a class
    list(both.map(lambda student: users.run(student, [*nbgrader, "fetch_assignment", LESSON], env=env), (ann, ben)))
    fetched = users.home(ann) / LESSON / f"{LESSON}.ipynb"
    assert fetched.is_file()
    nbformat.write(_solved_release(LESSON), str(fetched))
    guesses = honest_predictions(LESSON, fetched.parent)  # she ran it: her first guesses are handed in beside it
    for path in (fetched, guesses):
        os.chown(path, pwd.getpwnam(ann).pw_uid, pwd.getpwnam(ann).pw_gid)
    list(both.map(lambda student: users.run(student, [*nbgrader, "submit", LESSON], env=env), (ann, ben)))

    # a shared machine's permissions: inbound/ not listable, a submission closed to other students
    inbound = exchange / "why-slow-will-it-fit" / "inbound"
    assert users.run(ben, ["ls", str(inbound)], check=False).returncode != 0, "a student could list inbound/"
    anns = [p for p in inbound.iterdir() if p.name.startswith(f"{ann}+")]
    assert len(anns) == 1 and stat.S_IMODE(anns[0].stat().st_mode) & 0o007 == 0, oct(anns[0].stat().st_mode)
    peek = users.run(ben, ["cat", str(anns[0] / f"{LESSON}.ipynb")], check=False)
    assert peek.returncode != 0, "a student could read another student's submission"

    users.run(teacher, [*nbgrader, "collect", LESSON], cwd=course, env=env)
    submitted = course / "course" / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted([ann, ben])
    graded = users.run(teacher, [str(users.python), "-m", "grader", "autograde", str(submitted), "--out", "grades",
                                 "--workers", "2"], cwd=course, env=env)
    scores = {}
    for row in read_csv(course / "grades" / "grades.csv"):
        scores.setdefault(row.student, []).append((row.score, row.max_score))
    assert scores[ann] and all(s == m for s, m in scores[ann]), graded.stdout[-2000:]
    assert scores[ben] and all(s == 0 for s, _ in scores[ben])
    assert users.run(ben, ["ls", str(course)], check=False).returncode != 0, "a student could see the instructor's course"

    users.run(teacher, [*nbgrader, "release_feedback", LESSON], cwd=course / "grades" / "course", env=env)
    users.run(ann, [*nbgrader, "fetch_feedback", LESSON], env=env)
    pages = list((users.home(ann) / LESSON / "feedback").glob(f"*/{LESSON}.html"))
    assert len(pages) == 1, list((users.home(ann) / LESSON).rglob("*"))
    page = pages[0].read_text()
    assert "BEGIN HIDDEN TESTS" not in page
    leaked = [line for line in _hidden_lines(LESSON) if line in page]
    assert not leaked, f"the feedback shows hidden tests: {leaked[:3]}"
    assert users.run(ben, ["ls", str(exchange / "why-slow-will-it-fit" / "feedback")], check=False).returncode != 0
    steps = "; ".join(f"{what} {t:.1f} s" for what, t in users.seconds)
    print(f"exchange round trip: {time.perf_counter() - start:.1f} s ({steps})")
