"""The course's collect and deadlines with real Unix users and nbgrader's exchange (issues 28 and 31).

Each attack on collect sits beside a correct student's submission: a folder
named for another student, a notebook that is a symlink to the instructor's
solutions, a file that is a symlink to an instructor-only file, folder names
collect cannot take, a FIFO and a file over the size limit in a submission. Then a class of four against
a due date set the nbgrader way: an honest solution, a blank, a half-done one
with a wrong answer (handed in late), and a late resubmission after an on-time
partial one whose late folder carries a forged timestamp.txt and mtime.
Needs root (useradd); skipped elsewhere with the reason.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pwd
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest

from notebook_cells import honest_predictions
from grader.pipeline.grades import read_csv

from infra_machine import ROOT, needs_root
from test_infra_exchange import _solved_release, shared_machine  # noqa: F401  (shared_machine is a fixture)

pytestmark = [pytest.mark.xdist_group("infra"), pytest.mark.skipif(bool(needs_root()), reason=needs_root() or "")]

LESSON = "01_crossover"  # the cheapest lesson to grade
COURSE = "why-slow-will-it-fit"
WRONG_BYTES = "def matmul_bytes(n, dtype, out_dtype=None):\n    return 3 * n * n\n"  # counts elements, not bytes


def _class(users, scratch: Path, extra: str = ""):
    """An exchange, the shipped class config (plus `extra`), an instructor with a clone, lesson 01 released."""
    exchange = scratch / "exchange"
    exchange.mkdir()
    exchange.chmod(0o1777)
    config = scratch / "jupyter-config"
    config.mkdir(mode=0o755)
    shipped = (ROOT / "lab-config" / "class" / "nbgrader_config.py").read_text()
    (config / "nbgrader_config.py").write_text(shipped + f"\nc.Exchange.root = {str(exchange)!r}\n{extra}")
    env = {"JUPYTER_CONFIG_PATH": str(config)}
    teacher = users.add("teach")
    course = users.home(teacher) / "gpu-course"
    users.run(teacher, ["mkdir", str(course)])
    users.run(teacher, ["cp", "-r", str(ROOT / "solutions"), str(ROOT / "notebooks"), str(ROOT / "nbgrader_config.py"),
                        str(course)])
    nbgrader = [str(users.python), "-m", "nbgrader"]
    users.run(teacher, [*nbgrader, "release_assignment", LESSON], cwd=course, env=env)
    return env, nbgrader, teacher, course, exchange / COURSE / "inbound"


def _notebook(solved: set[str], wrong: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """The student release with the exercises in `solved` filled in from the solution, those in `wrong` with that code."""
    good, blank = _solved_release(LESSON), nbformat.read(str(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"), 4)
    for mine, right in zip(blank.cells, good.cells):
        gid = mine.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in solved:
            mine.source = right.source
        elif wrong and gid in wrong:
            mine.source = wrong[gid]
    return blank


def _hand_in(users, student: str, nb: nbformat.NotebookNode, nbgrader, env, guesses: bool = False) -> None:
    """The student writes the notebook in ~/01_crossover/ (with the first guesses their run recorded, if `guesses`)
    and runs `nbgrader submit` as themselves."""
    folder = users.home(student) / LESSON
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, str(folder / f"{LESSON}.ipynb"))
    made = [honest_predictions(LESSON, folder)] if guesses else []
    ids = pwd.getpwnam(student)
    for path in (folder, folder / f"{LESSON}.ipynb", *made):
        os.chown(path, ids.pw_uid, ids.pw_gid)
    users.run(student, [*nbgrader, "submit", LESSON], env=env)


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


def test_collect_takes_the_owner_never_a_symlink_and_goes_on(shared_machine):  # noqa: F811
    users, scratch = shared_machine
    env, nbgrader, teacher, course, inbound = _class(users, scratch)
    ann, forger, linker, leaker, odd, piper = (users.add(r) for r in ("ann", "forger", "linker", "leaker", "odd", "piper"))
    secret = users.home(teacher) / "secret.txt"
    users.run(teacher, ["sh", "-c", f"umask 077; echo instructor-only-{users.tag} > {secret}"])
    blank = scratch / "blank.ipynb"
    nbformat.write(_notebook(set()), str(blank))
    blank.chmod(0o644)
    _hand_in(users, ann, _notebook({"matmul_flops"}), nbgrader, env)
    ann_bytes = next(p for p in inbound.iterdir() if p.name.startswith(f"{ann}+")).joinpath(f"{LESSON}.ipynb").read_bytes()

    later = (datetime.now(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    made = {  # each attacker writes straight into inbound/ (write and enter: any student may)
        forger: f"{ann}+{LESSON}+{later}+forged",  # a blank under ann's name, with a later time
        linker: f"{linker}+{LESSON}+{later}+x",  # the notebook: a symlink to the instructor's solutions
        leaker: f"{leaker}+{LESSON}+{later}+x",  # notes.txt: a symlink to an instructor-only file
        odd: f"{odd}+{LESSON}+not-a-time",  # nbgrader cannot parse this time: its collect stopped here
        piper: f"{piper}+{LESSON}+{later}+x",  # a FIFO beside the notebook
    }
    for who, name in made.items():
        users.run(who, ["mkdir", str(inbound / name)])
        if who != linker:
            users.run(who, ["cp", str(blank), str(inbound / name / f"{LESSON}.ipynb")])
    users.run(linker, ["ln", "-s", str(course / "solutions" / LESSON / f"{LESSON}.ipynb"),
                       str(inbound / made[linker] / f"{LESSON}.ipynb")])
    users.run(leaker, ["ln", "-s", str(secret), str(inbound / made[leaker] / "notes.txt")])
    users.run(piper, ["mkfifo", str(inbound / made[piper] / "pipe")])
    users.run(piper, ["truncate", "-s", "21M", str(inbound / made[piper] / "big.bin")])  # over the 20 MB a file
    users.run(odd, ["mkdir", str(inbound / f"junk\nfake summary line {odd}")])  # no student+lesson+time at all

    users.run(teacher, [*nbgrader, "collect", LESSON], cwd=course, env=env, timeout=120)
    submitted = course / "course" / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted([ann, linker, leaker, odd, piper])
    assert (submitted / ann / LESSON / f"{LESSON}.ipynb").read_bytes() == ann_bytes, "ann's work was replaced"
    assert not (submitted / linker / LESSON / f"{LESSON}.ipynb").exists(), "a symlink to the solutions was collected"
    taken = _files(course / "course" / "submitted") + _files(course / "course" / "collected")
    assert not [p for p in taken if b"BEGIN HIDDEN TESTS" in p.read_bytes()], "hidden tests were collected"
    assert not [p for p in taken if f"instructor-only-{users.tag}".encode() in p.read_bytes()]
    assert (submitted / piper / LESSON / f"{LESSON}.ipynb").is_file()
    assert not (submitted / piper / LESSON / "pipe").exists() and not (submitted / piper / LESSON / "big.bin").exists()
    assert (submitted / odd / LESSON / f"{LESSON}.ipynb").is_file(), "an odd folder name stopped its owner's collect"
    summary = (course / "course" / "collected" / f"summary-{LESSON}.txt").read_text()
    for words in (f"claims '{ann}' but {forger} made it", f"'{LESSON}.ipynb': a symlink, not followed",
                  "'notes.txt': a symlink, not followed", "'pipe': not a regular file or folder",
                  "'big.bin': 22020096 bytes, over the limit",
                  "not a submission's name"):
        assert words in summary, f"{words!r} is not in the summary:\n{summary}"
    assert not [line for line in summary.splitlines() if line.startswith("fake summary line")], summary


def test_deadlines_four_students(shared_machine):  # noqa: F811
    users, scratch = shared_machine
    penalty_config = 'c.LatePenalty.penalty_method = "per_day"\nc.LatePenalty.per_day = 0.5\n'
    env, nbgrader, teacher, course, inbound = _class(users, scratch, penalty_config)
    honest, blank, half, late = (users.add(r) for r in ("honest", "blank", "half", "late"))
    everyone = ThreadPoolExecutor(3)
    list(everyone.map(lambda job: _hand_in(users, job[0], job[1], nbgrader, env, guesses=job[0] == honest),
                      [(honest, _solved_release(LESSON)), (blank, _notebook(set())), (late, _notebook({"matmul_flops"}))]))
    time.sleep(1.5)
    due = datetime.now(timezone.utc).replace(tzinfo=None)
    time.sleep(1.5)
    list(everyone.map(lambda job: _hand_in(users, job[0], job[1], nbgrader, env),
                      [(late, _solved_release(LESSON)), (half, _notebook({"matmul_flops"}, {"matmul_bytes": WRONG_BYTES}))]))
    early = (due - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    dated_back = 0
    for folder in inbound.iterdir():  # the late student dates their late folder back: timestamp.txt and mtime
        solved = "n * n * (2 * dtype.itemsize + out.itemsize)"  # the solution's matmul_bytes: the late hand-in
        if folder.name.startswith(f"{late}+") and solved in (folder / f"{LESSON}.ipynb").read_text():
            back = (due - timedelta(hours=1)).replace(tzinfo=timezone.utc).timestamp()
            users.run(late, ["sh", "-c", f"printf '{early}' > '{folder}/timestamp.txt'; "
                                         f"touch -d '@{back:.0f}' '{folder}' '{folder}'/*"])
            dated_back += 1
    assert dated_back == 1
    users.run(teacher, [*nbgrader, "db", "assignment", "add", LESSON, f"--duedate={due} UTC"], cwd=course, env=env)

    users.run(teacher, [*nbgrader, "collect", LESSON], cwd=course, env=env)
    submitted = course / "course" / "submitted"
    assert len(list((course / "course" / "collected" / late / LESSON).glob("*.json"))) == 2, "a submission was not kept"
    users.run(teacher, [str(users.python), "-m", "grader", "autograde", str(submitted), "--out", "grades",
                        "--workers", "2"], cwd=course, env=env)
    rows = read_csv(course / "grades" / "grades.csv")
    got = {s: sum(r.score for r in rows if r.student == s) for s in (honest, blank, half, late)}
    best = sum(r.max_score for r in rows if r.student == honest)
    first = {r.student: r for r in rows}
    assert got[honest] == best and got[blank] == 0 and 0 < got[half] < best, got
    assert 0 < got[late] < best, f"the late resubmission was graded, not the on-time one: {got}"
    assert {s: first[s].late for s in got} == {honest: "no", blank: "no", half: "yes", late: "no"}
    assert first[half].penalty == got[half] / 2 and not any(first[s].penalty for s in (honest, blank, late))
    for student in got:  # grades.csv's time is collect's, which the student could not date back
        assert first[student].timestamp == (submitted / student / LESSON / "timestamp.txt").read_text()
        assert first[student].duedate.startswith(str(due)[:19])
    record = json.loads((submitted / late / LESSON / "collected.json").read_text())
    assert [(s["late"], s["counted"]) for s in record["submissions"]] == [(False, True), (True, False)], record

    exported = users.run(teacher, [*nbgrader, "export", "--to", "export.csv"], cwd=course / "grades" / "course", env=env)
    table = {r["student_id"]: r for r in csv.DictReader(io.StringIO((course / "grades" / "course" / "export.csv").read_text()))}
    assert table[half]["duedate"] and table[half]["timestamp"], exported.stderr[-2000:]
    assert float(table[half]["late_submission_penalty"]) == got[half] / 2
    assert float(table[half]["score"]) == got[half] / 2 and float(table[late]["late_submission_penalty"]) == 0
    users.run(teacher, [str(users.python), "-m", "grader", "export", "grades", "--to", "moodle"], cwd=course, env=env)
    moodle = {r["Username"]: r for r in csv.DictReader(io.StringIO((course / "grades" / "moodle.csv").read_text()))}
    assert float(moodle[half][LESSON]) == got[half] / 2

    users.run(teacher, [*nbgrader, "release_feedback", LESSON], cwd=course / "grades" / "course", env=env)
    released = list((inbound.parent / "feedback").iterdir())
    assert len(released) == 4 and all(p.stat().st_mode & 0o777 == 0o644 for p in released)
    for student, words in ((late, "not graded: your submission of"), (half, "late penalty")):
        users.run(student, [*nbgrader, "fetch_feedback", LESSON], env=env)
        pages = list((users.home(student) / LESSON / "feedback").glob(f"*/{LESSON}.html"))
        assert len(pages) == 1, pages
        assert pages[0].read_bytes() == (course / "grades" / "course" / "feedback" / student / LESSON
                                         / f"{LESSON}.html").read_bytes(), "a student got another's feedback"
        assert words in pages[0].read_text(), f"{student}'s feedback does not say {words!r}"
