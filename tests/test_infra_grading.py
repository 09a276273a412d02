"""Grading as any user, next to other graders: no shared state a first grader can lock others out of, real errors said."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.pipeline import runner, sandbox
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import Cell


def test_an_ordinary_user_takes_no_uid_and_touches_no_lock_folder(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sandbox.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(sandbox.os, "access", lambda *a, **k: False)  # /run/lock "not writable": the temp folder
    assert sandbox.take_uid() is None
    assert list(tmp_path.iterdir()) == []  # root's 0700 lock folder can never stand in an ordinary user's way


def test_a_runner_that_cannot_start_says_why(tmp_path):
    """The runner's own last words (here: a module it cannot import), not "killed by SIGKILL"."""
    box = sandbox.Sandbox("none")
    cells = [Cell("student", "a", "x = 1")]
    replies = runner.run_cells(cells, ["no_such_module_for_the_grader"], box, Settings(notebook_timeout=60))
    assert replies[0]["status"] == "not run"
    assert "No module named 'no_such_module_for_the_grader'" in replies[0]["evalue"], replies[0]["evalue"]
    assert "SIGKILL" not in replies[0]["evalue"]


@pytest.mark.skipif(not sandbox.bwrap_works(), reason="bwrap is not installed or cannot run here")
def test_a_checkout_under_tmp_is_visible_to_a_runner_started_as_root(tmp_path):
    """bwrap mounts an empty /tmp: the kept folders under it get parents every uid can enter."""
    kept = Path("/tmp") / tmp_path.name / "course" / "grader"
    kept.mkdir(parents=True, exist_ok=True)
    try:
        (kept / "probe.txt").write_text("seen")
        os.chmod(kept / "probe.txt", 0o644)
        box = sandbox.Sandbox("bwrap", keep=[kept])
        import subprocess

        proc = subprocess.run(box.argv(["/bin/cat", str(kept / "probe.txt")], tmp_path, uid=sandbox.PROBE_UID),
                              capture_output=True, text=True, timeout=60, env=box.env(tmp_path))
        assert proc.stdout == "seen", proc.stderr
    finally:
        import shutil

        shutil.rmtree(Path("/tmp") / tmp_path.name, ignore_errors=True)


def test_a_run_where_no_submission_could_be_graded_stops_and_writes_no_grade(tmp_path):
    """README's autograde, with a limit no Python can start under (outside every student): rc 2, one line, no grade."""
    import subprocess
    import sys

    import nbformat

    from infra_machine import ROOT

    lesson = "01_crossover"
    for student in ("ann", "ben"):
        (tmp_path / "subs" / student / lesson).mkdir(parents=True)
        nbformat.write(nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), 4),
                       str(tmp_path / "subs" / student / lesson / f"{lesson}.ipynb"))
    extra = [] if sandbox.bwrap_works() else ["--sandbox", "none"]
    proc = subprocess.run([sys.executable, "-m", "grader", "autograde", str(tmp_path / "subs"), "--out",
                           str(tmp_path / "grades"), "--memory-gib", "0.1", "--workers", "2", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    said = proc.stderr.strip().splitlines()
    assert len(said) == 1 and "outside the students" in said[0] and "--memory-gib" in said[0], proc.stderr
    grades = tmp_path / "grades"
    assert not (grades / "grades.csv").exists() and not (grades / "course").exists(), sorted(grades.rglob("*"))
    import json

    for path in (grades / "results").glob("*/*.json"):  # kept only to be graded again, every row marked
        result = json.loads(path.read_text())
        assert result["regrade"] is True and {r["status"] for r in result["rows"]} == {"ungraded"}, result["rows"]
