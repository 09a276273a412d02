"""Issue 21: what one submission's data and processes can cost the grader and the submissions graded beside it.

Unit tests of each bound: decoding caps checked before the work they bound,
no cache a submission can grow, judging in a process of its own with a CPU
and memory limit, one cgroup per submission, messages and files of bounded
size, charged time, and resuming what failed for a reason outside the
submission. tests/test_corpus.py grades the corpus cases, each beside a good
submission.
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from grader.checks import _common, _plain
from grader.pipeline import cgroups, judging, sandbox
from grader.pipeline.grades import CellResult, read_csv, write_csv
from grader.pipeline.runner import Clock, run_cells
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import Cell



def _tensor(shape, values, dtype="float32"):
    return json.dumps({"__tensor__": {"dtype": dtype, "shape": shape, "values": values, "device": "cpu", "grad": False}})


@pytest.mark.parametrize("text,words", [
    (_tensor([1000003] * 400_000, [1.0]), "at most 16 dimensions"),
    (_tensor([10**40, 0], []), "bad tensor shape"),
    (_tensor([2], [1000, 1e300], "int8"), "bad tensor: "),
    (_tensor([1], [10**30], "int64"), "bad tensor: "),
    (json.dumps([[0, 0, 0]] * 300_000), "values in one observation"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
    (json.dumps({"__dict__": [[{"__tuple__": [[1]]}, 2]]}), "bad dict key"),
    ("1" * 5000, "not JSON"),
])
def test_a_hostile_observation_is_refused_before_work_that_grows_with_it(text, words):
    start = time.process_time()
    with pytest.raises(_plain.PlainError, match=words):
        _plain.loads(text)
    assert time.process_time() - start < 5  # the 400,000-entry shape took 30-60 s of one core before


def test_legit_tensors_still_round_trip():
    import torch

    for tensor in (torch.tensor([1.0, float("inf"), float("nan")], dtype=torch.float16), torch.tensor(3),
                   torch.zeros(0, 3), torch.tensor([[True], [False]]), torch.arange(6).reshape(1, 2, 3)):
        back = _plain.roundtrip(tensor)
        assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back.isnan(), tensor.isnan())


def test_opaque_type_names_make_no_class_that_outlives_its_decode():
    gc.collect()
    before = len(_plain.Opaque.__subclasses__())
    names = [{"__opaque__": f"m.Type{i}", "repr": "x"} for i in range(20_000)]
    got = _plain.decode(names)
    assert type(got[0]).__name__ == "Type0" and type(got[-1]).__name__ == "object"
    assert len({type(x) for x in got}) == _plain.MAX_TYPE_NAMES + 1
    del got
    gc.collect()
    assert len(_plain.Opaque.__subclasses__()) <= before


def test_messages_are_cut_where_they_are_made():
    with pytest.raises(_common.CheckFailed) as caught:
        _common.fail(f"you returned {[0] * 60000}; return the count of FLOPs")
    assert len(str(caught.value)) <= _common.MESSAGE_CHARS and " ... " in str(caught.value)
    assert str(caught.value).endswith("return the count of FLOPs")
    assert _common.quote("x" * 1000).endswith("...") and len(_common.quote("x" * 1000)) == 200


def test_grades_csv_reads_back_whatever_a_message_holds(tmp_path):
    messages = ["a\0b", "x" * 200_000, "\r\nline", '"quoted"', "\ufeffbom", "tab\tsep", "=cmd", "\u2028"]
    write_csv([CellResult("s", "l", f"g{i}", 1.0, 2.0, "failed", m) for i, m in enumerate(messages)], tmp_path / "g.csv")
    back = read_csv(tmp_path / "g.csv")
    frame = pd.read_csv(tmp_path / "g.csv", keep_default_na=False)
    assert len(back) == len(frame) == len(messages)
    assert max(len(r.message) for r in back) <= 10_000 and back[6].message == "=cmd"


def _reply(observation) -> dict:
    return {"ok": True, "observation": observation if isinstance(observation, str) else json.dumps(observation)}


def test_a_judge_that_spins_or_hogs_memory_fails_its_check_alone():
    isolated = judging.Isolated(cpu_seconds=1, memory_bytes=256 << 20)
    for name, words in (("spins", "more than 1 s of the grader's CPU time"), ("hogs", "could not judge|MemoryError")):
        start = time.monotonic()
        ename, evalue = isolated("", 0, judging.Step("judge_traps", name, ["fn"]), _reply(1))
        assert ename == "CheckFailed" and re.search(words, evalue), evalue
        assert time.monotonic() - start < isolated.wall_seconds
    strict = judging.Step("judge_traps", "strict", ["fn"])
    assert isolated("", 0, strict, _reply(1)) is None
    ename, evalue = isolated("", 0, strict, _reply([0] * 60000))
    assert "you returned [0, 0" in evalue and len(evalue) <= _common.MESSAGE_CHARS


def test_one_judge_per_submission_keeps_each_checks_limits_and_its_verdicts():
    session = judging.Isolated(cpu_seconds=1, memory_bytes=256 << 20).session()
    strict = judging.Step("judge_traps", "strict", ["fn"])
    try:
        assert session("", 0, strict, _reply(1)) is None
        first = session.pid
        for name, words in (("spins", "more than 1 s of the grader's CPU time"), ("hogs", "could not judge|MemoryError")):
            start = time.monotonic()
            ename, evalue = session("", 0, judging.Step("judge_traps", name, ["fn"]), _reply(1))
            assert ename == "CheckFailed" and re.search(words, evalue), evalue
            assert time.monotonic() - start < session.isolated.wall_seconds
            assert session("", 0, strict, _reply(1)) is None  # the next check is judged as if alone
        assert session.pid == first  # one process for all of them: no fork per check
        os.kill(first, 9)  # as a runner restart kills every process of its submission's cgroup
        time.sleep(0.2)
        assert session("", 0, strict, _reply(1)) is None and session.pid != first  # a new judge for the next check
        ename, evalue = session("", 0, strict, _reply([0] * 60000))
        assert "you returned [0, 0" in evalue and len(evalue) <= _common.MESSAGE_CHARS
    finally:
        session.close()


def test_an_observation_that_cannot_be_decoded_fails_only_its_check():
    strict = judging.Step("judge_traps", "strict", ["fn"])
    bad = _tensor([1], [10**6], "int8")
    for verdict in (lambda source, index, step, reply: judging.judge_here(step, reply), judging.Isolated(),
                    judging.Isolated().session()):
        ename, evalue = verdict("", 0, strict, _reply(bad))
        assert ename == "CheckFailed" and "could not read what your code returned: bad tensor" in evalue, evalue


def test_charged_time_leaves_out_what_a_neighbour_took():
    assert Clock.charged((0.0, 1.0, 5.0), (10.0, 7.0, 6.0)) == pytest.approx(4.0)  # 10 s wall, 6 s waiting for a CPU
    assert Clock.charged((0.0, 1.0, 5.0), (10.0, 7.0, 25.0)) == pytest.approx(20.0)  # its processes used 20 s of CPU
    assert Clock.charged((0.0, None, None), (10.0, None, None)) == pytest.approx(10.0)  # nothing known: wall time
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        clock = Clock(busy.pid)
        start = clock.sample()
        time.sleep(1.0)
        assert 0 < Clock.charged(start, clock.sample()) <= 1.5
    finally:
        busy.kill()
        busy.wait()


GROUPS, WHY = cgroups.make_groups(2)


@pytest.mark.skipif(GROUPS is None, reason=f"no cgroup can be made here: {WHY}")
def test_one_cgroup_holds_all_of_a_submissions_processes():
    group = GROUPS.make(256 << 20, 16)
    try:
        code = ("import os, time\nkids = []\nfor i in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
                "        x = b'x' * (120 << 20)\n        time.sleep(2)\n        os._exit(0)\n    kids.append(pid)\n"
                "print(sorted(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids))\n")
        done = subprocess.run(group.wrap([sys.executable, "-c", code]), capture_output=True, text=True, timeout=60)
        assert "-9" in done.stdout and group.oom_kills() >= 1, (done.stdout, done.stderr)  # 3 x 120 MiB > 256 MiB
        assert group.cpu_seconds() > 0
        forks = subprocess.run(group.wrap(["sh", "-c", "for i in $(seq 40); do sleep 3 & done; wait"]),
                               capture_output=True, text=True, timeout=60)
        assert "fork" in forks.stderr.lower() or "resource" in forks.stderr.lower(), forks.stderr
    finally:
        group.remove()


@pytest.mark.skipif(GROUPS is None, reason=f"no cgroup can be made here: {WHY}")
def test_a_setsid_daemon_that_killed_its_keeper_is_still_ended(tmp_path):
    mark = tmp_path / "late"
    os.chmod(tmp_path, 0o777)
    cells = [Cell("student", "a", f"import os, signal, subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 3.71; echo x > {mark}'],"
                  " start_new_session=True)\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n    pass\n"),
             Cell("student", "b", "print('next')")]
    box = sandbox.Sandbox("none")
    replies = run_cells(cells, [], box, Settings(cell_timeout=20, notebook_timeout=60), GROUPS)
    assert [r["status"] for r in replies] == ["ok", "ok"], replies
    time.sleep(4.5)
    assert not mark.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run the submission as another uid")
def test_the_keeper_runs_the_submission_as_another_uid_that_cannot_kill_it():
    done = subprocess.run([sys.executable, "-I", "-m", "grader.pipeline.keeper", "--max-processes", "8", "--uid",
                           str(sandbox.PROBE_UID), "--", "/bin/sh", "-c", "kill -9 $PPID; echo status $?; id -u"],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0 and f"status 1\n{sandbox.PROBE_UID}" in done.stdout, (done.stdout, done.stderr)


def test_a_result_that_failed_outside_the_submission_is_graded_again(tmp_path, monkeypatch):
    from build_corpus import LESSON, ROOT, _good
    import nbformat
    from grader.pipeline import classroom

    subs = tmp_path / "subs"
    (subs / "amy" / LESSON).mkdir(parents=True)
    nbformat.write(_good(), str(subs / "amy" / LESSON / f"{LESSON}.ipynb"))
    calls = []

    def fake_run_cells(cells, modules, box, settings, groups=None, verdict=None, record=None, warm=None, phases=None):
        calls.append(1)
        outside = len(calls) == 1
        return [{"status": "not run" if outside else "ok", "ok": not outside, "ename": "", "evalue": "busy",
                 "stdout": "", "stderr": "", "notes": [], "outside": outside} for _ in cells]

    monkeypatch.setattr(classroom, "run_cells", fake_run_cells)
    monkeypatch.setattr(classroom, "finish", lambda root, out, log=print: out / "grades.csv")
    settings = Settings(sandbox="none", workers=1, cgroups=False)
    with pytest.raises(classroom.NotGraded, match="outside the students"):  # nothing decided: no grade written
        classroom.grade_class(ROOT, subs, tmp_path / "out", settings, log=lambda line: None)
    for _ in range(2):
        classroom.grade_class(ROOT, subs, tmp_path / "out", settings, log=lambda line: None)
    assert len(calls) == 2  # graded again once, then kept
