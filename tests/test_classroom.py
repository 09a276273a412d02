"""grader.pipeline: classroom, cellrunner, sandbox and report: the pieces, then shards, merge and resume."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import warnings

import nbformat
import pytest

from build_corpus import LESSON, ROOT, _good
from notebook_cells import check_cells, honest_predictions, prediction_cells
from grader.pipeline import sandbox
from grader.checks import _common, _plain
from grader.pipeline.judging import judge_cell, plan_cell
from grader.pipeline.classroom import grade_class, merge, result_path
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import SubmissionError, plan, read_submission, shard_of, submissions_of
from grader.pipeline.grades import read_csv
from grader.pipeline.report import report

CHECKS = len(check_cells(LESSON))  # graded check cells in the lesson these tests grade
SOURCE = nbformat.read(str(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4)
POINTS = sum(float(c.metadata["nbgrader"].get("points", 0)) for c in SOURCE.cells if c.metadata.get("nbgrader", {}).get("grade"))


def _kinds(cells):
    return [(c.kind, c.grade_id) for c in cells]


def test_plan_runs_exercises_then_the_course_checks_in_source_order():
    cells, notes = plan(SOURCE, _good())
    assert _kinds(cells)[:3] == [("student", "matmul_flops"), ("check", "matmul_flops_check"), ("student", "matmul_bytes")]
    assert sum(c.kind == "check" for c in cells) == CHECKS and not notes
    predictions = prediction_cells(LESSON)  # a prediction's cell is its one call: judged on the record, no hidden block
    assert predictions and all("BEGIN HIDDEN TESTS" in c.source for c in cells
                               if c.kind == "check" and c.grade_id not in predictions)


def test_plan_ignores_what_the_student_did_to_check_cells():
    nb = _good()
    nb.cells = [c for c in reversed(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") != "bound_check"]
    cells, notes = plan(SOURCE, nb)
    assert _kinds(cells) == _kinds(plan(SOURCE, _good())[0])
    assert any("'bound_check' was missing" in n for n in notes)


def test_plan_matches_a_renamed_exercise_by_cell_id():
    nb = _good()
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "intensity":
            cell.metadata["nbgrader"]["grade_id"] = "my_intensity"
    cells, notes = plan(SOURCE, nb)
    assert ("student", "intensity") in _kinds(cells)
    assert any("changed to 'my_intensity'" in n for n in notes)


def test_plan_keeps_cells_the_student_added_before_their_exercise():
    nb = _good()
    nb.cells.insert(5, nbformat.v4.new_code_cell("HELPER = 1"))
    cells, _ = plan(SOURCE, nb)
    assert cells[0].source == "HELPER = 1" and cells[0].grade_id == "matmul_flops"


@pytest.mark.parametrize("content, reason", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "not a notebook"),
    (json.dumps({"nbformat": 2, "cells": []}).encode(), "unsupported notebook format"),
])
def test_read_submission_says_why_it_cannot_read(tmp_path, content, reason):
    path = tmp_path / "x.ipynb"
    path.write_bytes(content)
    with pytest.raises(SubmissionError, match=reason):
        read_submission(path)


def test_a_check_cell_is_planned_here_and_only_inputs_are_sent():
    source = check_cells(LESSON)["matmul_flops_check"]
    steps = plan_cell(source)
    assert [s.check for s in steps][:1] == ["check_matmul_flops"] and any(s.hidden for s in steps)
    sent = []

    def ask(request):
        sent.append(request)
        return "ok", {"ok": True, "stdout": "", "stderr": "", "observation": None}

    judge_cell(source, ask)
    text = json.dumps(sent)
    assert "2000000000" not in text and "should be" not in text, "a hidden answer or message was sent to the sandbox"


def test_a_forged_observation_is_judged_like_any_other():
    source = check_cells(LESSON)["matmul_flops_check"]
    wrong = _common.record(lambda n: 0, "matmul_flops", [(4,), (16,), (32,), (1,)])

    def ask(request):
        return "ok", {"ok": True, "stdout": "", "stderr": "", "observation": wrong}

    state, reply = judge_cell(source, ask)
    assert state == "ok" and reply["ok"] is False and reply["ename"] == "CheckFailed"
    for junk in ([1] * 3, {"calls": "x"}, {"__opaque__": 1}, "a" * 10, None, {"calls": [[1, 2]]}):
        state, reply = judge_cell(source, lambda request: ("ok", {"ok": True, "observation": junk}))
        assert reply["ok"] is False and "could not read" in reply["evalue"] or "no recorded answer" in reply["evalue"], (junk, reply)


def test_plain_data_refuses_what_encode_never_writes():
    for bad in ('{"__tensor__": {"dtype": "float32", "shape": [2], "values": [1], "device": "cpu", "grad": false}}',
                '{"__dtype__": "system"}', '{"__float__": "1e999"}', "[" * 100000 + "]" * 100000, '{"__x": 1}', "NaN"):
        with pytest.raises(_plain.PlainError):
            _plain.loads(bad)
    class Lying(int):
        def __eq__(self, other):
            return True
    got = _plain.roundtrip([Lying(3), 2.5, (1, "a"), float("nan")])
    assert isinstance(got[0], _plain.Opaque) and got[0] != 3 and got[1:3] == [2.5, (1, "a")]


def test_shards_split_the_class_without_overlap():
    pairs = [(f"s{i}", LESSON) for i in range(40)]
    slices = [shard_of(pairs, i, 3) for i in range(3)]
    assert sorted(p for s in slices for p in s) == sorted(pairs)
    assert all(slices) and shard_of(pairs, 1, 3) == slices[1]
    with pytest.raises(ValueError):
        shard_of(pairs, 3, 3)


def test_sandbox_choice_follows_the_environment(monkeypatch):
    monkeypatch.setenv("GRADER_SANDBOX", "none")
    assert sandbox.choose("auto") == "none" and sandbox.choose(None) == "none"
    with pytest.raises(ValueError):
        sandbox.choose("docker")


def test_fallback_is_a_plain_command_and_bwrap_hides_the_course(tmp_path):
    box = sandbox.Sandbox("none")
    assert box.argv(["python"], tmp_path)[-2:] == ["--", "python"] and "grader.pipeline.keeper" in box.argv(["python"], tmp_path)
    argv = sandbox.Sandbox("bwrap", hide=[ROOT], keep=[ROOT / "grader"]).argv(["python"], tmp_path)
    binds = [argv[i + 1] for i, a in enumerate(argv) if a in ("--ro-bind", "--bind")]
    assert str(ROOT / "grader") in binds and "/" not in binds and str(ROOT) not in binds, binds  # no host root
    assert "--unshare-net" in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"


@pytest.mark.skipif(not sandbox.bwrap_works(), reason="bwrap is not installed here")
def test_bwrap_hides_solutions_and_has_no_network(tmp_path):
    box = sandbox.Sandbox("bwrap", hide=[ROOT, sandbox.Path.home()],
                          keep=[ROOT / "grader", sandbox.Path(sys.prefix), sandbox.Path(sys.base_prefix)])
    probe = ("import os, socket\nprint(os.path.exists(%r), os.path.exists(%r))\n"
             "s = socket.socket()\ns.settimeout(2)\n"
             "try:\n    s.connect(('1.1.1.1', 53)); print('net')\nexcept OSError:\n    print('no net')\n"
             % (str(ROOT / "solutions"), str(ROOT / "grader" / "checks")))
    out = subprocess.run(box.argv([sys.executable, "-c", probe], tmp_path), capture_output=True, text=True,
                         env=box.env(tmp_path), timeout=60)
    assert out.stdout.split() == ["False", "True", "no", "net"], out


@pytest.fixture(scope="module")
def small_class(tmp_path_factory):
    subs = tmp_path_factory.mktemp("class")
    blank = nbformat.read(str(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    for name, nb in (("ann", _good()), ("ben", blank), ("cat", _good()), ("dan", copy.deepcopy(blank))):
        (subs / name / LESSON).mkdir(parents=True)
        nbformat.write(nb, str(subs / name / LESSON / f"{LESSON}.ipynb"))
        if name in ("ann", "cat"):  # they ran their notebooks: their first guesses are handed in beside them
            honest_predictions(LESSON, subs / name / LESSON)
    return subs


def test_shards_merge_and_resume(small_class, tmp_path):
    fast = dict(workers=2, cell_timeout=20, notebook_timeout=120)
    logs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(2):
            grade_class(ROOT, small_class, tmp_path / f"shard-{i}", Settings(shard=(i, 2), **fast), log=logs.append)
        rows = read_csv(merge(ROOT, [tmp_path / "shard-0", tmp_path / "shard-1"], tmp_path / "all", log=logs.append))
    assert {r.student for r in rows} == {"ann", "ben", "cat", "dan"} and len(rows) == 4 * CHECKS
    assert all((r.score == r.max_score) == (r.student in ("ann", "cat")) for r in rows)
    assert len(list((tmp_path / "all" / "course" / "feedback").rglob("*.html"))) == 4
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp_path / 'all' / 'course' / 'gradebook.db'}") as gb:
        assert gb.find_submission(LESSON, "ann").score == POINTS and gb.find_submission(LESSON, "ben").score == 0
    # a run killed midway: one result missing; the rerun grades only that one
    result_path(tmp_path / "all", "cat", LESSON).unlink()
    logs.clear()
    rows = read_csv(grade_class(ROOT, small_class, tmp_path / "all", Settings(**fast), log=logs.append))
    assert any("3 of 4 submissions already graded; grading the other 1" in line for line in logs), logs
    graded = [line for line in logs if line.startswith("[")]
    assert len(graded) == 1 and graded[0].startswith("[1/1] cat/"), logs
    assert len(rows) == 4 * CHECKS


def test_report_names_the_commonest_mistake(tmp_path):
    csv = tmp_path / "grades.csv"
    lines = ["student,lesson,grade_id,score,max_score,status,message"]
    for i in range(5):
        lines.append(f"s{i},{LESSON},matmul_flops_check,0.0,1.0,failed,AssertionError: returned {i} = n³: counts once")
    lines.append(f"s9,{LESSON},matmul_flops_check,1.0,1.0,passed,")
    csv.write_text("\n".join(lines) + "\n")
    md, png = report(tmp_path)
    text = md.read_text()
    assert "5 × AssertionError: returned N = n³: counts once" in text and png.stat().st_size > 1000
    assert "| 01_crossover | matmul_flops_check | 6 |" in text


def test_cli_knows_the_new_commands():
    from grader.cli import build_parser

    args = build_parser().parse_args(["autograde", "subs", "--shard", "1/4", "--workers", "2", "--sandbox", "none"])
    assert (args.shard, args.workers, args.sandbox) == ("1/4", 2, "none")
    assert build_parser().parse_args(["merge", "a", "b", "--out", "c"]).shards == ["a", "b"]
    assert build_parser().parse_args(["report", "grades"]).grades == "grades"


def test_submissions_are_student_then_lesson_folders(small_class):
    assert submissions_of(small_class) == [(s, LESSON) for s in ("ann", "ben", "cat", "dan")]
