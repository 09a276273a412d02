"""Issue 32: warm runners, forked from a zygote that imported torch once, confined before any student code runs.

Each test runs cells through grader.pipeline.runner.run_cells with a Zygotes
(the class grader's own path as root with bwrap) and reads, from inside the
submission, what it can see and hold: its uid and capabilities, its /proc,
/tmp, workspace and /dev/shm, the network, another submission's files,
processes and random streams. test_hostile_input.py runs its sandbox tests
(orphans, the runner's own code, garbage on the result pipe, the disk, shm
and process caps) on warm runners too. The fork-safety guard is tested on its
own: a zygote with a second thread (torch's pool started) refuses to fork.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from build_corpus import ROOT
from grader.pipeline import sandbox
from grader.pipeline.runner import Zygotes, run_cells
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import Cell
from test_hostile_input import CAN_WARM, FAST, _box

pytestmark = pytest.mark.skipif(not CAN_WARM, reason="warm runners need bwrap, root and a course outside /tmp")

LOOK = r"""
import json, os, socket
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
def connects(address):
    try:
        socket.create_connection(address, timeout=1).close()
        return True
    except OSError:
        return False
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
seen = {
    "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "caps": {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
    "no_new_privs": status["NoNewPrivs"].strip(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "tmp": sorted(os.listdir("/tmp")), "work": sorted(os.listdir(".")), "shm": sorted(os.listdir("/dev/shm")),
    "pts": sorted(os.listdir("/dev/pts")),
    "home": os.path.exists("/home"), "solutions": os.path.exists(%(solutions)r),
    "outside": connects(("1.1.1.1", 53)), "loopback": connects(server.getsockname()),
    "threads": len(os.listdir("/proc/self/task")), "cwd": os.getcwd(),
    "python_threads": sorted(type(t).__name__ for t in __import__("threading").enumerate()),
}
print(json.dumps(seen))
"""


def _warm(cells, settings: Settings = FAST, said: list | None = None) -> list[dict]:
    said = [] if said is None else said
    warm = Zygotes(_box("warm"), settings, log=said.append)
    try:
        return run_cells(cells, [], _box("warm"), settings, warm=warm)
    finally:
        warm.close()
        assert not said, said


def _seen(reply: dict) -> dict:
    assert reply["status"] == "ok", reply
    return json.loads(reply["stdout"].strip().splitlines()[-1])


def test_a_warm_runner_is_confined_before_the_students_code_runs():
    seen = _seen(_warm([Cell("student", "look", LOOK % {"solutions": str(ROOT / "solutions")})])[0])
    assert seen["uid"] == seen["euid"] == seen["gid"] >= sandbox.UID_BASE and seen["groups"] == []
    assert seen["caps"] == dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), 0), seen["caps"]
    assert seen["no_new_privs"] == "1"
    assert seen["pids"] == [1, 2], seen["pids"]  # its init and itself: no zygote, no other submission
    assert seen["tmp"] == ["work"] and seen["shm"] == [] and seen["cwd"] == sandbox.WORKDIR
    assert seen["pts"] == ["ptmx"]  # its own pseudo-terminals: none of another submission's
    assert seen["work"] == [".ipython"]  # what its own IPython made: a fresh workspace
    assert not seen["home"] and not seen["solutions"]
    assert not seen["outside"] and seen["loopback"]
    # when its first cell runs, its threads are its own IPython's (the history saver): no native pool from the zygote
    assert seen["threads"] == len(seen["python_threads"]), seen


def test_two_submissions_see_nothing_of_each_other_and_draw_their_own_random_numbers():
    write = ("import random, numpy, torch\nopen('mine', 'w').write('secret')\nopen('/dev/shm/mine', 'w').write('x')\n"
             "print(random.random(), numpy.random.rand(), torch.rand(1).item())")
    replies: dict[str, list] = {}
    barrier = threading.Barrier(2)
    wait = f"import os, time\n{write}\nprint(sorted(os.listdir('/proc')))\ntime.sleep(3)\n"
    said: list[str] = []
    warm = Zygotes(_box("warm"), FAST, log=said.append)

    def one(name):
        barrier.wait()
        replies[name] = run_cells([Cell("student", "a", wait), Cell("student", "b", LOOK % {"solutions": "/nowhere"})],
                                  [], _box("warm"), FAST, warm=warm)

    try:
        threads = [threading.Thread(target=one, args=(n,)) for n in ("ann", "bob")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        later = run_cells([Cell("student", "c", LOOK % {"solutions": "/nowhere"})], [], _box("warm"), FAST, warm=warm)
    finally:
        warm.close()
    assert not said, said
    draws = {name: r[0]["stdout"].splitlines()[0] for name, r in replies.items()}
    assert draws["ann"] != draws["bob"] and all(a != b for a, b in zip(*(d.split() for d in draws.values())))
    seen = {name: _seen(r[1]) for name, r in replies.items()}
    assert seen["ann"]["uid"] != seen["bob"]["uid"]  # graded at once: a uid each
    assert all(s["pids"][:2] == [1, 2] for s in seen.values())
    assert _seen(later[0])["work"] == [".ipython"] and _seen(later[0])["shm"] == []  # the next fork starts empty


def test_a_warm_runners_parallel_op_works_at_its_own_thread_count():
    cell = ("import os, numpy, torch\ntorch.set_num_threads(2)\na = torch.randn(400, 400, dtype=torch.float64)\n"
            "same = numpy.allclose((a @ a).numpy(), a.numpy() @ a.numpy())\n"
            "print(same, torch.get_num_threads(), len(os.listdir('/proc/self/task')))")
    reply = _warm([Cell("student", "par", cell)])[0]
    assert reply["status"] == "ok", reply
    same, count, threads = reply["stdout"].split()
    assert same == "True" and count == "2" and int(threads) >= 2  # its own pool, started in the fork


def test_a_warm_runner_that_dies_is_forked_again_and_its_cells_put_back():
    cells = [Cell("student", "a", "x = 41"), Cell("student", "b", "import os\nos._exit(3)"),
             Cell("student", "c", "print(x + 1)"), Cell("student", "d", "import os, signal\nos.kill(os.getpid(), 9)"),
             Cell("student", "e", "print(x)")]
    replies = _warm(cells)
    assert [r["status"] for r in replies] == ["ok", "died", "ok", "died", "ok"], replies
    assert "status 3" in replies[1]["evalue"] and replies[2]["stdout"] == "42\n" and replies[4]["stdout"] == "41\n"


REFUSE = r"""
import json, socket, sys, threading, time
import torch
from grader.pipeline import zygote
print(json.dumps({"before": zygote.fork_problem()}))
torch.set_num_threads(2)
a = torch.randn(512, 512)
a @ a  # torch's intra-op pool starts and keeps its threads
print(json.dumps({"after": zygote.fork_problem()}))
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
code = zygote.serve_forks(theirs.fileno(), [])
print(json.dumps({"hello": json.loads(ours.recv(4096)), "code": code}))
"""


def test_a_zygote_whose_thread_pool_started_refuses_to_fork():
    proc = subprocess.run([sys.executable, "-c", REFUSE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["before"] is None  # torch imported, no op run: one thread, safe to fork
    assert "threads" in lines[1]["after"]
    assert lines[2]["hello"]["ready"] is False and "threads" in lines[2]["hello"]["problem"] and lines[2]["code"] == 3


def test_a_zygote_that_cannot_start_leaves_its_lesson_to_cold_runners():
    said: list[str] = []
    warm = Zygotes(_box("warm"), FAST, log=said.append)
    try:
        replies = run_cells([Cell("student", "a", "print(1)")], ["grader.checks.no_such_lesson"], _box("warm"), FAST,
                            warm=warm)
    finally:
        warm.close()
    assert any("runners: cold for grader.checks.no_such_lesson" in line for line in said), said
    assert replies[0]["status"] == "not run" and replies[0]["outside"], replies  # the cold runner fails the same way


def test_runners_are_warm_only_in_bwrap_as_root_and_when_not_asked_cold():
    from grader.pipeline.runner import warm_problem

    assert warm_problem(_box("warm"), FAST) is None
    assert "not asked for" in warm_problem(_box("warm"), Settings(warm=False))
    assert "only in bwrap" in warm_problem(_box("none"), FAST)


def test_the_progress_line_says_done_rate_and_time_left():
    from grader.pipeline.classroom import Progress

    now = [100.0]
    progress = Progress(300, workers=2, clock=lambda: now[0])
    now[0] += 60
    assert progress.line(12) == "12/300 done, 12.0 notebooks/min, about 24 min left"
    now[0] += 1440
    assert progress.line(300) == "300/300 done, 12.0 notebooks/min, finished"
    cores = min(2, os.cpu_count() or 1)
    assert progress.final() == (f"300 notebooks in 25 min: 12.0 notebooks/min, {12 / cores:.1f} per core "
                                f"({cores} core{'s' if cores != 1 else ''})")
