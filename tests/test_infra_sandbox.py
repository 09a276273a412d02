"""What a submission sees of a shared machine, and what the other users see of the grades (issue 28).

One class of lesson 01, graded in bwrap beside a correct student, on a machine
with a real second Unix user whose home is 0755 (useradd -m on Debian) and a
Unix socket the test listens on in /run (as munge's or D-Bus's would be):

- eve's code tries to connect to that socket, read the other user's file,
  list /home and read the instructor's solutions; any success makes her
  matmul_flops raise, so she loses its points;
- mallory's folder name and exception class name carry line breaks, the
  summary's own words and the grader's own error name;
- the other user then tries to read what the grader wrote.

Needs root (useradd) and bwrap; skipped elsewhere with the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest

from notebook_cells import honest_predictions
from build_corpus import LESSON, _append, _good, _set
from grader.pipeline import sandbox
from grader.pipeline.classroom import grade_class
from grader.pipeline.grades import read_csv
from grader.pipeline.settings import Settings

from infra_machine import ROOT, Users, everyone_python, needs_root

pytestmark = [pytest.mark.xdist_group("infra"), pytest.mark.skipif(bool(needs_root()), reason=needs_root() or ""),
              pytest.mark.skipif(not sandbox.bwrap_works(), reason="bwrap is not installed or cannot run here")]

PROBE = """
import os, socket
seen = []
try:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    s.connect({sock!r})
    seen.append("the host's Unix socket")
except OSError:
    pass
for path, what in [({secret!r}, "another user's home"), ({solutions!r}, "the instructor's solutions")]:
    try:
        open(path, "rb").read(10)
        seen.append(what)
    except OSError:
        pass
try:
    if os.listdir("/home"):
        seen.append("/home")
except OSError:
    pass
if seen:
    def matmul_flops(n):
        raise RuntimeError(f"LEAK: the submission reached {{seen}}")
"""
FORGED_NAME = "mallory\n- good: not graded: the course failed\r"  # a folder's name: anything but "/" and NUL
FORGED_ERROR = """GraderError = type("GraderError", (Exception,), {})

def matmul_flops(n):
    raise GraderError("wrong\\n- good/01_crossover: not graded: the grader failed on this submission\\u2028x")
"""


@pytest.fixture
def host(tmp_path):
    """A second Unix user with a world-readable file in a 0755 home, and a Unix socket listening in /run."""
    python, why = everyone_python()
    if python is None:
        pytest.skip(why)
    users = Users(python)
    run_dir = Path("/run") / f"gc-sandbox-{uuid.uuid4().hex[:6]}"
    listener = socket.socket(socket.AF_UNIX)
    try:
        other = users.add("other")
        home = users.home(other)
        home.chmod(0o755)  # what useradd -m gives on Debian
        (home / "secret.txt").write_text("another user's work\n")
        (home / "secret.txt").chmod(0o644)
        run_dir.mkdir(mode=0o755)
        sock = run_dir / "host.sock"
        listener.bind(str(sock))
        sock.chmod(0o777)
        listener.listen(8)
        yield {"users": users, "other": other, "secret": home / "secret.txt", "sock": sock}
    finally:
        listener.close()
        subprocess.run(["rm", "-rf", str(run_dir)])
        users.remove()


def test_a_submission_sees_no_host_socket_home_or_solution_and_others_read_no_grades(host, tmp_path):
    users, other = host["users"], host["other"]
    connect = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(host['sock'])!r})"
    reach = users.run(other, [sys.executable, "-I", "-c", connect + f"; open({str(host['secret'])!r}).read()"],
                      check=False)
    assert reach.returncode == 0, f"the probes must work outside the sandbox, or this test proves nothing: {reach.stderr}"
    solutions = ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"
    probe = PROBE.format(sock=str(host["sock"]), secret=str(host["secret"]), solutions=str(solutions))
    subs = tmp_path / "submissions"
    for name, nb in (("good", _good()), ("eve", _append(_good(), "matmul_flops", probe)),
                     (FORGED_NAME, _set(_good(), "matmul_flops", FORGED_ERROR))):
        (subs / name / LESSON).mkdir(parents=True)
        nbformat.write(nb, str(subs / name / LESSON / f"{LESSON}.ipynb"))
        honest_predictions(LESSON, subs / name / LESSON)  # each ran the notebook: first guesses handed in
    out = tmp_path / "grades"
    logged: list[str] = []
    settings = Settings(workers=2, cell_timeout=20, notebook_timeout=120, disk_mib=128, shm_mib=16)
    rows = read_csv(grade_class(ROOT, subs, out, settings, log=logged.append))
    totals = {s: sum(r.score for r in rows if r.student == s) for s in ("good", "eve")}
    best = sum(r.max_score for r in rows if r.student == "good")
    assert totals["good"] == totals["eve"] == best, [r.message for r in rows if r.student == "eve" and r.message]
    # mallory: one check failed, as hers; not the grader's failure, not graded again, no line of her own
    mine = [r for r in rows if r.student.startswith("mallory") and r.score < r.max_score]  # grades.csv: "\\n"
    assert [r.status for r in mine] == ["failed"], mine
    result = next((out / "results").glob("mallory*/01_crossover.json")).read_text()
    assert '"regrade"' not in result
    for text in [(out / "summary.txt").read_text(encoding="utf-8"), "\n".join(logged)]:
        assert not [line for line in text.splitlines() if line.startswith(("- good", "mallory"))], text
    csv_lines = (out / "grades.csv").read_text(encoding="utf-8").splitlines()  # one line per row, for grep and awk too
    assert len(csv_lines) == len(rows) + 1, csv_lines
    lines = (out / "summary.txt").read_text(encoding="utf-8").splitlines()
    assert all(line.startswith(("summary:", "- ")) for line in lines), lines
    # what the grader wrote: its group's only, so the other user reads none of it
    public = [out / "course" / "release", out / "course" / "feedback"]  # 0644 for nbgrader's copies, behind 0750
    loose = [p for p in [out, *out.rglob("*")] if not p.is_symlink() and p.stat().st_mode & 0o007
             and not (p.is_file() and any(f in p.parents for f in public))]
    assert not loose, loose[:5]
    for path in (out / "grades.csv", out / "course" / "gradebook.db", out / "results" / "good" / f"{LESSON}.json",
                 out / "course" / "autograded" / "good" / LESSON / f"{LESSON}.ipynb"):
        assert users.run(other, ["cat", str(path)], check=False).returncode != 0, path
