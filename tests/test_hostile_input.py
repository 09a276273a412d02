"""Issue 10: a class no submission can game or stop. Unit tests of what a hostile submission can hand in.

Each test here feeds one kind of hostile input (bytes, shapes, names, links,
text meant for a browser or a spreadsheet, processes and files) to the piece
of the pipeline that meets it first, and checks that it is graded or skipped
with a reason, never a crash, and never obeyed. The sandbox tests run cells
with no lesson imported (about half a second each); those that need bwrap skip
without it.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from build_corpus import LESSON, ROOT, _good
from notebook_cells import check_cells
from grader.pipeline import classroom, sandbox
from grader.pipeline.grades import CellResult, read_csv, write_csv
from grader.pipeline.report import report
from grader.pipeline.runner import run_cells, under_tmp
from grader.pipeline.scoring import executed_notebook, feedback_html, score
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import (MAX_NOTEBOOK_BYTES, Cell, SubmissionError, plan, read_submission,
                                         submissions_of)

SOURCE = nbformat.read(str(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4)
RELEASE = nbformat.read(str(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"), as_version=4)
SCRIPT = "<script>alert(1)</script><img src=x onerror=alert(2)>"
HAS_BWRAP = sandbox.bwrap_works()


def _good_json() -> dict:
    return json.loads(nbformat.writes(_good()))


def _first(raw: dict, grade_id: str) -> dict:
    return next(c for c in raw["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _shapes() -> dict[str, bytes]:
    """name -> notebook bytes with one part the wrong shape."""
    out = {}
    raw = _good_json()
    raw["metadata"] = ["not", "a", "dict"]
    out["notebook metadata is a list"] = json.dumps(raw).encode()
    raw = _good_json()
    raw["metadata"] = "a string"
    out["notebook metadata is a str"] = json.dumps(raw).encode()
    raw = _good_json()
    _first(raw, "matmul_flops")["metadata"] = ["x"]
    out["cell metadata is a list"] = json.dumps(raw).encode()
    raw = _good_json()
    _first(raw, "matmul_flops")["metadata"]["nbgrader"] = "solution"
    out["nbgrader metadata is a str"] = json.dumps(raw).encode()
    raw = _good_json()
    _first(raw, "matmul_flops")["metadata"]["nbgrader"]["grade_id"] = ["matmul_flops"]
    out["grade_id is a list"] = json.dumps(raw).encode()
    raw = _good_json()
    _first(raw, "matmul_flops_check")["metadata"]["nbgrader"]["grade_id"] = {"a": 1}
    out["grade_id is a dict"] = json.dumps(raw).encode()
    raw = _good_json()
    _first(raw, "matmul_flops")["source"] = 42
    out["source is not text"] = json.dumps(raw).encode()
    raw = _good_json()
    _first(raw, "matmul_flops_check")["metadata"]["nbgrader"]["points"] = "8"
    out["points is a str"] = json.dumps(raw).encode()
    out["JSON nested 100,000 deep"] = b"[" * 100_000 + b"]" * 100_000
    raw = _good_json()
    raw["metadata"]["deep"] = json.loads("[" * 500 + "]" * 500)
    out["metadata nested 500 deep"] = json.dumps(raw).encode()
    out["not UTF-8"] = b'{"cells": [], "nbformat": 4, "metadata": {"x": "\xff\xfe"}}'
    out["cells is a dict"] = b'{"cells": {}, "nbformat": 4, "nbformat_minor": 5, "metadata": {}}'
    return out


@pytest.mark.parametrize("name", list(_shapes()))
def test_any_shape_is_a_submission_error_with_the_reason(tmp_path, name):
    path = tmp_path / f"{LESSON}.ipynb"
    path.write_bytes(_shapes()[name])
    with pytest.raises(SubmissionError) as err:
        read_submission(path)
    assert "malformed" in str(err.value) or "unreadable" in str(err.value), str(err.value)


def test_a_symlinked_or_oversized_notebook_is_not_read(tmp_path):
    target = ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"
    link = tmp_path / "link.ipynb"
    link.symlink_to(target)
    with pytest.raises(SubmissionError, match="a symlink, not followed"):
        read_submission(link)
    big = tmp_path / "big.ipynb"
    with open(big, "wb") as f:
        f.truncate(MAX_NOTEBOOK_BYTES + 1)
    with pytest.raises(SubmissionError, match="over the grader's limit of 20 MB"):
        read_submission(big)
    fifo = tmp_path / "fifo.ipynb"
    os.mkfifo(fifo)  # reading it would wait forever
    with pytest.raises(SubmissionError, match="not a file: fifo.ipynb"):
        read_submission(fifo)


def test_lone_surrogates_in_a_notebook_and_in_outputs_are_written(tmp_path):
    raw = _good_json()
    _first(raw, "matmul_flops")["source"] = "print('\ud800')\ndef matmul_flops(n):\n    return 2 * n**3\n"
    path = tmp_path / f"{LESSON}.ipynb"
    path.write_text(json.dumps(raw))  # ensure_ascii: the surrogate travels as the JSON escape \ud800
    nb = read_submission(path)
    cells, notes = plan(SOURCE, nb)
    assert any("\ufffd" in c.source for c in cells)
    classroom._atomic_write(tmp_path / "out.txt", "a lone surrogate: \udcff")  # crashed with UnicodeEncodeError
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "a lone surrogate: \ufffd"


def test_plan_uses_nbgraders_checksum_to_see_an_edited_check_cell():
    nb = copy.deepcopy(RELEASE)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "bound_check":
            cell.metadata.nbgrader["points"] = 100  # same source, more points
    cells, notes = plan(SOURCE, nb, RELEASE)
    assert "check cell 'bound_check' was edited; the course's own was run" in notes
    assert [c.points for c in cells if c.grade_id == "bound_check"] == [1.0]
    assert not plan(SOURCE, copy.deepcopy(RELEASE), RELEASE)[1]


def _stray_class(tmp_path: Path) -> Path:
    subs = tmp_path / "subs"
    (subs / "ann" / "99_no_such_lesson").mkdir(parents=True)
    (subs / "ann" / "99_no_such_lesson" / "99_no_such_lesson.ipynb").write_text("{}")
    (subs / "README.txt").write_text("a file where a student folder is expected")
    (subs / ".DS_Store").write_bytes(b"\0")
    (subs / "ann" / "notes.txt").write_text("a file where a lesson folder is expected")
    os.mkdir(os.fsencode(subs) + b"/bad\xffname")
    os.mkdir(os.fsencode(subs) + b"/bad\xffname/" + LESSON.encode())
    (subs / "bob").symlink_to(ROOT / "solutions")
    return subs


def test_stray_entries_are_skipped_with_a_note(tmp_path):
    subs = _stray_class(tmp_path)
    skipped = []
    pairs = submissions_of(subs, skipped=skipped)
    assert pairs == [("ann", "99_no_such_lesson")]
    text = "\n".join(skipped)
    assert "README.txt: skipped: a file where a student folder is expected" in text
    assert "bad\\xffname: skipped: the student folder's name is not valid UTF-8" in text
    assert "bob: not graded: the student folder is a symlink, not followed" in text
    assert submissions_of(subs, course_lessons=[LESSON, "02_x"], only=[LESSON]) == [("bob", LESSON)]
    assert "ann/notes.txt: skipped: a file where a lesson folder is expected" in text
    text.encode("utf-8")  # printable and writable anywhere


def test_a_class_with_stray_entries_is_still_graded(tmp_path, monkeypatch):
    monkeypatch.setattr(classroom, "write_gradebook", lambda *args: None)  # nbgrader's database: slow, and not the point
    subs = _stray_class(tmp_path)
    out = tmp_path / "grades"
    path = classroom.grade_class(ROOT, subs, out, Settings(sandbox="none", workers=1), log=lambda line: None)
    rows = read_csv(path)  # bob -> solutions/: 0 on every lesson, not followed
    assert {r.student for r in rows} == {"bob"} and sum(r.score for r in rows) == 0
    assert all(r.status == "error" and r.message == "the student folder bob is a symlink, not followed" for r in rows)
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    assert "ann/99_no_such_lesson: skipped: the course has no lesson '99_no_such_lesson'" in summary
    assert "bob/01_crossover: not graded: the student folder bob is a symlink, not followed" in summary
    assert "bad\\xffname" in summary
    classroom.merge(ROOT, [out], tmp_path / "merged", log=lambda line: None)
    assert "bad\\xffname" in (tmp_path / "merged" / "summary.txt").read_text(encoding="utf-8")


def _one(tmp_path: Path, student: str = "ann") -> Path:
    subs = tmp_path / "subs"
    (subs / student / LESSON).mkdir(parents=True)
    return subs


def test_symlinks_to_solutions_or_another_student_score_nothing(tmp_path):
    subs = _one(tmp_path, "ann")
    nbformat.write(_good(), str(subs / "ann" / LESSON / f"{LESSON}.ipynb"))
    (subs / "cat" / LESSON).mkdir(parents=True)
    (subs / "cat" / LESSON / f"{LESSON}.ipynb").symlink_to(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb")
    (subs / "dan").mkdir()
    (subs / "dan" / LESSON).symlink_to(subs / "ann" / LESSON)
    box = sandbox.Sandbox("none")
    for student, words in (("cat", f"{LESSON}.ipynb is a symlink, not followed"),
                           ("dan", f"the lesson folder {LESSON} is a symlink, not followed")):
        result = classroom.grade_one(ROOT, subs, tmp_path / "out", student, LESSON, box, Settings(sandbox="none"))
        assert result["rows"] and {r["status"] for r in result["rows"]} == {"error"}
        assert sum(r["score"] for r in result["rows"]) == 0 and all(words in r["message"] for r in result["rows"])


def test_any_grader_failure_on_one_submission_becomes_its_error_rows(tmp_path, monkeypatch):
    subs = _one(tmp_path)
    nbformat.write(_good(), str(subs / "ann" / LESSON / f"{LESSON}.ipynb"))

    def boom(*args, **kwargs):
        raise KeyError("the runner's reply had no 'ok'")

    monkeypatch.setattr(classroom, "run_cells", boom)
    result = classroom.grade_one(ROOT, subs, tmp_path / "out", "ann", LESSON, sandbox.Sandbox("none"), Settings())
    assert len(result["rows"]) == len(check_cells(LESSON)) and {r["status"] for r in result["rows"]} == {"ungraded"}
    assert result["rows"][0]["message"].startswith("the grader failed on this submission: KeyError:")
    assert classroom.load_results(tmp_path / "out")[0]["rows"] == result["rows"]


def test_garbage_result_files_are_left_out_and_graded_again(tmp_path):
    good = {"student": "ann", "lesson": LESSON, "sha256": "x", "notes": [],
            "rows": [CellResult("ann", LESSON, "bound_check", 1.0, 1.0, "passed", "").row()]}
    results = tmp_path / "results"
    for student, body in (("ann", json.dumps(good)), ("ben", "not json"), ("cat", "[1, 2]"),
                          ("dan", json.dumps({**good, "student": "dan", "rows": [{"score": "x"}]})),
                          ("eve", json.dumps({**good, "student": "someone else"})),
                          ("fay", "[" * 100_000), ("gus", json.dumps({**good, "student": "gus", "rows": "no"}))):
        (results / student).mkdir(parents=True)
        (results / student / f"{LESSON}.json").write_text(body)
    assert [r["student"] for r in classroom.load_results(tmp_path)] == ["ann"]
    assert not classroom._done(tmp_path, tmp_path / "subs", "ben", LESSON)


def test_grades_csv_guards_formulas_and_reads_back_what_it_wrote(tmp_path):
    rows = [CellResult("=cmd|' /C calc'!A0", LESSON, "bound_check", -1.0, 1.0, "failed",
                       "=HYPERLINK(\"http://evil\", \"click\"): your bound"),
            CellResult("ann", LESSON, "bound_check", 0.0, 1.0, "failed", "+1 @x \t-2 'quoted"),
            CellResult("'=already", LESSON, "bound_check", 1.0, 1.0, "passed", "")]
    path = tmp_path / "grades.csv"
    write_csv(rows, path)
    text = path.read_text(encoding="utf-8")
    assert "'=cmd" in text and "\"'=HYPERLINK" in text and "'+1 @x" in text and ",-1.0," in text
    assert read_csv(path) == rows


def test_student_text_is_shown_as_text_in_feedback_and_the_score_summary():
    cells = [Cell("student", "matmul_flops", "print('hi')"), Cell("check", "matmul_flops_check", "check()", 1.0)]
    replies = [{"status": "ok", "stdout": SCRIPT, "stderr": SCRIPT, "ename": "", "evalue": "", "notes": []},
               {"status": "error", "ename": "AssertionError", "evalue": SCRIPT, "stdout": "", "stderr": "", "notes": []}]
    maths = "$\\href{javascript:alert(3)}{click}$ ``` `"
    notes = [f"an exercise cell with unknown grade_id '{SCRIPT}' was not graded", f"grade_id {maths!r}"]
    rows = score("ann", LESSON, cells, replies, notes)
    nb = executed_notebook(cells, replies, rows, notes)
    page = feedback_html(nb)
    assert "<script>alert" not in page and "<img src=x" not in page
    assert page.count("&lt;script&gt;alert(1)") >= 4  # stdout, stderr, the error, the summary (markdown renders HTML)
    assert f"<code>grade_id {maths!r}</code>" in page  # in <code>: shown as typed, and MathJax leaves it alone


def test_report_md_escapes_student_text(tmp_path):
    rows = [CellResult(f"s{i}", LESSON, "bound_check", 0.0, 1.0, "failed", f"AssertionError: a | b {SCRIPT} [x](javascript:1)")
            for i in range(3)]
    write_csv(rows, tmp_path / "grades.csv")
    md, _ = report(tmp_path)
    text = md.read_text(encoding="utf-8")
    assert "<script>" not in text and "<img" not in text and "a \\| b" in text and "\\[x\\]" in text


def test_summary_does_not_blame_the_student_for_what_torch_does():
    row = CellResult("ann", "04_memory", "peak_check", 1.0, 1.0, "passed",
                     "the grader undid changes your code made to torch._C._lazy_patch").row()
    edited = {"student": "ben", "lesson": LESSON, "notes": ["check cell 'bound_check' was edited; the course's own was run"],
              "rows": [CellResult("ben", LESSON, "bound_check", 1.0, 1.0, "passed", "").row()]}
    lines = classroom.summary([{"student": "ann", "lesson": "04_memory", "notes": [], "rows": [row]}, edited])
    assert not any("ann/" in line for line in lines)
    assert any("ben/" in line and "was edited" in line for line in lines)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a grader running as root switches each run to a uid of its own")
def test_each_run_has_a_uid_of_its_own_across_grader_processes():
    code = ("import sys, time; sys.path[:0] = [%r]\nfrom grader.pipeline import sandbox\n"
            "print(sandbox.take_uid(), flush=True)\ntime.sleep(3)\n" % str(ROOT))
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    theirs = int(other.stdout.readline())
    mine = sandbox.take_uid()
    try:
        assert mine != theirs and sandbox.UID_BASE <= min(mine, theirs)
    finally:
        sandbox.give_uid(mine)
        other.kill()
        other.wait()


def test_no_sandbox_only_when_asked_for_by_name(monkeypatch):
    monkeypatch.delenv("GRADER_SANDBOX", raising=False)
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    for kind in ("auto", None, "bwrap"):
        with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap.*--sandbox none"):
            sandbox.choose(kind)
    assert sandbox.choose("none") == "none"
    monkeypatch.setenv("GRADER_SANDBOX", "none")
    assert sandbox.choose("auto") == "none"


# What a submission's processes and files can do: cells run with no lesson imported, so each run is short.

FAST = Settings(cell_timeout=20, notebook_timeout=60, memory_gib=2)
CAN_WARM = HAS_BWRAP and os.geteuid() == 0 and not under_tmp()  # warm runners: bwrap, as root, not from /tmp
WARM = pytest.param("warm", marks=pytest.mark.skipif(not CAN_WARM, reason="warm runners need bwrap, root and a course outside /tmp"))
KINDS = [pytest.param("bwrap", marks=pytest.mark.skipif(not HAS_BWRAP, reason="bwrap is not installed here")), "none",
         WARM]
BWRAP_KINDS = [KINDS[0], WARM]


def _box(kind: str) -> sandbox.Sandbox:
    return sandbox.Sandbox("bwrap" if kind == "warm" else kind, hide=[ROOT, Path.home()],
                           keep=[ROOT / "grader", ROOT / "data", Path(sys.prefix), Path(sys.base_prefix)],
                           disk_bytes=256 * 1024**2, shm_bytes=16 * 1024**2, max_processes=64)


def _run(cells: list[Cell], kind: str, settings: Settings | None = None, modules=()) -> list[dict]:
    """run_cells in a sandbox of `kind`: bwrap, none, or warm (bwrap runners forked from a zygote, which must be used)."""
    settings = settings or FAST
    if kind != "warm":
        return run_cells(cells, list(modules), _box(kind), settings)
    from grader.pipeline.runner import Zygotes

    said: list[str] = []
    warm = Zygotes(_box(kind), settings, log=said.append)
    try:
        return run_cells(cells, list(modules), _box(kind), settings, warm=warm)
    finally:
        warm.close()
        assert not said, said  # a zygote that did not start would have run them cold


def _live(marker: str) -> list[str]:
    """Command lines of live processes that contain `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in line and "pytest" not in line:
            found.append(line)
    return found


ORPHAN = """import os, subprocess
subprocess.Popen(["sh", "-c", "sleep 3.71; echo late > {path}"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", "sleep 3.72; echo late > {path}2"])
    os._exit(0)
os.wait()
print("left two children behind")
"""


@pytest.mark.parametrize("kind", KINDS)
def test_no_process_outlives_its_submission(tmp_path, kind):
    path = tmp_path / "orphan"
    cells = [Cell("student", "a", ORPHAN.format(path=path)), Cell("student", "b", "print('next')")]
    replies = _run(cells, kind)
    assert [r["status"] for r in replies] == ["ok", "ok"], replies
    time.sleep(0.3)
    assert not _live("sleep 3.7"), _live("sleep 3.7")


@pytest.mark.parametrize("kind", KINDS)
def test_the_runner_comes_from_the_course_not_the_workspace(kind):
    evil = ("import os\nos.makedirs('grader/pipeline', exist_ok=True)\n"
            "for name in ('grader/__init__.py', 'grader/pipeline/__init__.py', 'sitecustomize.py'):\n"
            "    open(name, 'w').write('')\n"
            "open('grader/pipeline/cellrunner.py', 'w').write('import sys; print(\"EVIL\"); sys.exit(0)')\n"
            "open('left_behind', 'w').write('x')\nos._exit(1)\n")
    cells = [Cell("student", "a", evil), Cell("student", "b", "import os, grader\nprint(sorted(os.listdir('.')), grader.__file__)")]
    replies = _run(cells, kind)
    assert replies[0]["status"] == "died" and replies[1]["status"] == "ok", replies
    assert "left_behind" not in replies[1]["stdout"] and str(ROOT / "grader") in replies[1]["stdout"]


@pytest.mark.parametrize("kind", KINDS)
def test_garbage_on_the_result_pipe_is_skipped(kind):
    garbage = ("import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'[' * 100_000 + b'\\n{\"nonce\": 1}\\n')\n"
               "    except OSError:\n        pass\n")
    replies = _run([Cell("student", "a", garbage), Cell("student", "b", "print('next')")], kind)
    assert [r["status"] for r in replies] == ["ok", "ok"] and replies[1]["stdout"] == "next\n", replies


@pytest.mark.parametrize("kind", BWRAP_KINDS)
def test_disk_shm_and_processes_are_capped_in_bwrap(tmp_path, monkeypatch, kind):
    cells = [
        Cell("student", "disk", "for i in range(32):\n    open(f'hog{i}', 'wb').write(b'x' * 64 * 1024**2)\n"),
        Cell("student", "shm", "open('/dev/shm/hog', 'wb').write(b'x' * 64 * 1024**2)\n"),
        Cell("student", "tmp", "open('/tmp/hog', 'w').write('x')\n"),
        Cell("student", "bomb", "import os\nwhile True:\n    os.fork()\n"),
        Cell("student", "ro", f"open({str(ROOT / 'grader' / '.probe')!r}, 'w')\n"),
        Cell("student", "where", "import os\nst = os.statvfs('.')\nprint(st.f_blocks * st.f_frsize, os.getcwd())\n"
                                 "print([line.split()[4] for line in open('/proc/self/mountinfo') if ' tmpfs ' in line])"),
    ]
    taken = []

    def take_uid():
        taken.append(real_take_uid())
        return taken[-1]

    real_take_uid = sandbox.take_uid
    monkeypatch.setattr(sandbox, "take_uid", take_uid)
    start = time.monotonic()
    replies = _run(cells, kind)
    assert time.monotonic() - start < 60
    assert "No space left on device" in replies[0]["evalue"] and "No space left on device" in replies[1]["evalue"]
    assert replies[2]["ename"] == "PermissionError"
    assert replies[3]["status"] != "ok" and "Resource temporarily unavailable" in replies[3]["evalue"], replies[3]
    assert replies[4]["ename"] in ("PermissionError", "OSError") and not (ROOT / "grader" / ".probe").exists()
    size, cwd = replies[5]["stdout"].split()[:2]  # the workspace is a tmpfs of the quota: nothing on the host's disk
    assert int(size) == 256 * 1024**2 and cwd == sandbox.WORKDIR and f"'{sandbox.WORKDIR}'" in replies[5]["stdout"]
    rows = score("ann", LESSON, cells + [Cell("check", "disk_check", "", 1.0)], replies + [replies[0]], [])
    assert "(the disk quota" in rows[0].message
    assert taken and not sandbox.uid_in_use(taken[0]), _processes_of(taken[0])  # run_cells waits for the kernel to end the run's processes


def _processes_of(uid: int) -> list[str]:
    """'pid state command' of each process running as `uid`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"\t{uid}\t" in status.split("Uid:")[1].split("\n")[0] + "\t":
            found.append(f"{pid} {status.split('State:')[1].split()[0]} {line[:100]}")
    return found


def test_the_fallback_caps_processes_too():
    bomb = "import os, time\nfor i in range(400):\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)\n"
    cells = [Cell("student", "bomb", bomb), Cell("student", "b", "print('after')")]
    replies = run_cells(cells, [], _box("none"), FAST)
    if sandbox.other_uid_problem() is None:  # root, and another uid can run this Python: RLIMIT_NPROC stops the fork
        assert replies[0]["status"] != "ok" and "Resource temporarily unavailable" in replies[0]["evalue"], replies[0]
    else:  # one shared uid: the keeper counts the processes and kills them all
        assert replies[0]["status"] == "died" and "process cap" in replies[0]["evalue"], replies[0]
    assert replies[1]["status"] == "ok"

