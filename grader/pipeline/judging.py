"""Judging a check cell in the grader's own process: the sandbox observes, the grader decides.

A course check cell (from solutions/) is a list of calls to checks:

    from grader.checks import lessonNN

    lessonNN.check_area(area)
    ### BEGIN HIDDEN TESTS
    lessonNN.expect(area, args=(3, 4), want=12, why="a 3 by 4 rectangle has area 12")
    ### END HIDDEN TESTS

`plan_cell` reads that source here, never in the sandbox: each call names a
`Check` (grader.checks._common), the learner's objects by name, and keyword
arguments, which are evaluated here. For each call the sandbox is sent only
the check's name, the learner's names and the keywords the check lists as
`inputs` (a hidden test's arguments); it runs the check's observing half
beside the submission and replies with plain data. `judge_cell` decodes that
strictly (grader.checks._plain) and runs the check's judging half here, with
every keyword, `want` and `why` included. So nothing a submission installs can
see an expected answer or change a verdict: the worst it can do is send an
observation of its own making, which is judged like any other.
"""

from __future__ import annotations

import ast
import importlib
import json
import math
import os
import re
import statistics
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from grader import shortcuts
from grader.checks import _plain
from grader.checks._common import SCORED, Check, Prediction, Raised, short
from grader.notebook import CheckFailed

_HIDDEN_START = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS", re.M)
TEXT_CAP = 4000  # characters of a message or output taken from the sandbox


class CellFormatError(ValueError):
    """A course check cell that is not a list of check calls (a bug in the course, not the student's)."""


@dataclass
class Step:
    """One check call of a check cell."""

    module: str  # grader.checks.lessonNN
    check: str  # the Check's name in that module
    names: list[str]  # the learner's objects, by name in the notebook
    kwargs: dict = field(default_factory=dict)  # evaluated here; only the check's `inputs` are sent
    hidden: bool = False

    def target(self) -> Check:
        """The Check object, from the grader's own import of the course's checks."""
        found = getattr(importlib.import_module(self.module), self.check, None)
        if not isinstance(found, Check):
            raise CellFormatError(f"{self.module}.{self.check} is not a check")
        return found


def plan_cell(source: str) -> list[Step]:
    """The check calls in a course check cell, in order; CellFormatError if it holds anything else."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise CellFormatError(f"the check cell does not parse: {exc}") from None
    hidden_from = _HIDDEN_START.search(source)
    hidden_line = source[:hidden_from.start()].count("\n") + 1 if hidden_from else None
    aliases: dict[str, str] = {}
    steps: list[Step] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "grader.checks" and node.level == 0:
            aliases.update({a.asname or a.name: f"grader.checks.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import) and all(a.name.startswith("grader.checks.") and a.asname for a in node.names):
            aliases.update({a.asname: a.name for a in node.names})
        elif isinstance(node, ast.Import) and all(a.name in ("torch", "math", "statistics") for a in node.names):
            continue
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute) and isinstance(node.value.func.value, ast.Name)
              and node.value.func.value.id in aliases):
            callee = node.value
            if not all(isinstance(a, ast.Name) for a in callee.args) or any(k.arg is None for k in callee.keywords):
                raise CellFormatError(f"line {node.lineno}: pass the learner's objects by name and the rest as keywords")
            module = importlib.import_module(aliases[callee.func.value.id])
            scope = {"torch": importlib.import_module("torch"), "math": math, "statistics": statistics,
                     **{alias: importlib.import_module(name) for alias, name in aliases.items()}}
            kwargs = {k.arg: eval(compile(ast.Expression(k.value), "<check cell>", "eval"), scope)  # noqa: S307  the course's own source
                      for k in callee.keywords}
            step = Step(module.__name__, callee.func.attr, [a.id for a in callee.args], kwargs,
                        hidden=hidden_line is not None and node.lineno >= hidden_line)
            step.target()
            steps.append(step)
        else:
            raise CellFormatError(f"line {node.lineno}: a check cell may only import checks and call them")
    if not steps:
        raise CellFormatError("the check cell calls no check")
    return steps


Ask = Callable[[dict], tuple[str, "dict | None"]]
Verdict = Callable[[str, int, Step, dict], "tuple[str, str] | None"]


def _text(value, cap: int = TEXT_CAP) -> str:
    """A string from the sandbox's reply, whatever it sent, cut to `cap` characters."""
    return value[:cap] if isinstance(value, str) else ""


def judge_cell(source: str, ask: Ask, verdict: Verdict | None = None, record: dict | None = None) -> tuple[str, dict]:
    """Run a check cell: observations from the sandbox through `ask`, verdicts here.

    Returns (state, reply) as the runner does for any cell: state 'ok' with a
    reply whose 'ok' says whether every check passed, or 'timeout'/'died' when
    the sandbox did not answer an observation. `verdict(source, index, step,
    reply)` judges one observation: by default in this process (`judge_here`);
    the class grader passes an `Isolated` one, which judges in a process of its
    own with a CPU-time and a memory limit.
    """
    verdict = verdict or (lambda source, index, step, reply: judge_here(step, reply))
    out, err, notes = [], [], []
    score = None
    for index, step in enumerate(plan_cell(source)):
        check = step.target()
        if isinstance(check, Prediction):
            step = replace(step, kwargs={**step.kwargs, "record": record or {}})
        request = {"kind": "observe", "module": step.module, "check": step.check, "names": step.names,
                   "inputs": _plain.encode(check.observed(step.kwargs))}
        state, reply = ask(request)
        if state != "ok":
            return state, None
        if not step.hidden:
            out.append(_text(reply.get("stdout")))
            err.append(_text(reply.get("stderr")))
        failure = verdict(source, index, step, reply) if reply.get("ok") is True else judge_here(step, reply)
        if failure is not None and failure[0] == SCORED:
            try:
                scored = json.loads(failure[1])
                score, feedback = float(scored["points"]), str(scored["feedback"])
            except (ValueError, KeyError, TypeError):
                failure = ("CheckFailed", "the check's score could not be read")
            else:
                out.append(short(feedback, TEXT_CAP) + "\n")
                continue
        if failure is not None:
            ename, evalue = failure
            return "ok", {"ok": False, "ename": ename, "evalue": short(evalue, TEXT_CAP), "stdout": "".join(out),
                          "stderr": "".join(err), "notes": notes}
        if check.announce:
            out.append(f"✓ {check.what}: all checks passed\n")
    done = {"ok": True, "ename": "", "evalue": "", "stdout": "".join(out), "stderr": "".join(err), "notes": notes}
    if score is not None:
        done["score"] = score
    return "ok", done


def judge_here(step: Step, reply: dict) -> tuple[str, str] | None:
    """None when the check passes on what the sandbox observed, else (error name, message); in this process.

    Whatever the observation holds, this returns: an observation that cannot
    be decoded or judged fails this one check with a message.
    """
    if reply.get("ok") is not True:
        ename = _text(reply.get("ename"), 100) or "Error"
        evalue = _text(reply.get("evalue"))
        if ename in ("NotDone", "NotImplementedError"):
            return "NotImplementedError", evalue or "not done yet"
        if ename in ("CheckFailed", "AssertionError"):
            return "CheckFailed", evalue
        return ename, f"running your code for the check raised {ename}: {evalue}"
    check = step.target()
    try:
        raw = reply.get("observation")
        observation = _plain.loads(raw) if isinstance(raw, (str, bytes)) else _plain.decode(raw)
    except Exception as exc:  # noqa: BLE001  PlainError, RecursionError, MemoryError...: this check fails, alone
        return "CheckFailed", f"the check could not read what your code returned: {short(_safe_str(exc), 300)}"
    try:
        result = check.judge(observation, **step.kwargs)
        if isinstance(check, Prediction):
            points, feedback = result
            return SCORED, json.dumps({"points": float(points), "feedback": str(feedback)})
    except (CheckFailed, Raised) as exc:
        return "CheckFailed", short(_safe_str(exc))
    except Exception as exc:  # noqa: BLE001  an observation of an unexpected shape: the submission's, not the course's
        return "CheckFailed", (f"the check could not read what your code returned ({type(exc).__name__}: "
                               f"{short(_safe_str(exc), 300)})")
    return None


shortcuts.entries(judge_here, check="check")  # the class grader judging a course check asks its models, no learner


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return type(exc).__name__


# --- judging in a process of its own -------------------------------------------------------------

GRADER_ERROR = "GraderError"  # a failure outside the submission (the grader's own limit, an overloaded machine)
_server: dict = {}
_server_lock = threading.Lock()


def start_server() -> None:
    """Start this grader's judge server if none runs (torch and the course's checks imported there, once); do not wait.

    It dies with the *thread* that started it (PR_SET_PDEATHSIG is per
    thread): call this from one that outlives the grading, as the class
    grader does from its main thread.
    """
    import json
    import subprocess
    import sys
    import tempfile

    with _server_lock:
        proc = _server.get("proc")
        if proc is None or proc.poll() is not None:
            folder = tempfile.mkdtemp(prefix="gpu-course-judge-")  # 0700: only this grader's uid connects
            path = os.path.join(folder, "socket")
            code = ("import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
                    "from grader.pipeline.judging import serve; serve(sys.argv[2])")
            # one OpenMP/MKL thread: with more, importing torch starts a thread, and a fork copies only one
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(sys.path), path], stdin=subprocess.DEVNULL,
                                    env=env)
            _server.update(proc=proc, path=path, ready=False)


def _server_path() -> str:
    """The socket of this grader's judge server, started (start_server) if none runs, once it is ready."""
    import time

    start_server()
    with _server_lock:
        proc, path = _server["proc"], _server["path"]
        deadline = time.monotonic() + 300
        while not _server["ready"]:
            if os.path.exists(path + ".ready"):
                _server["ready"] = True
            elif proc.poll() is not None or time.monotonic() > deadline:
                why = Path(path + ".problem").read_text() if os.path.exists(path + ".problem") else "it ended"
                _server.clear()
                raise RuntimeError(f"the grader's judge server did not start ({why})")
            else:
                time.sleep(0.05)
        return path


def serve(path: str) -> None:
    """The judge server: imports torch and the checks, then forks one judge per connection (python -c, see _server_path).

    It forks only while it has one thread (grader.pipeline.zygote.fork_problem:
    it never runs a torch op, and starts with one OpenMP thread), and otherwise
    says why and ends; it ends with the grader (PR_SET_PDEATHSIG).
    """
    import ctypes
    import signal
    import socket

    from grader.pipeline.zygote import fork_problem

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    import torch  # noqa: F401  imported once here, shared by every fork
    import torch._dynamo  # noqa: F401  what a first autograd step or optimizer imports (seconds): once, not per judge

    folder = Path(__file__).resolve().parents[1] / "checks"
    for module in sorted(f"grader.checks.{p.stem}" for p in folder.glob("lesson*.py")):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001  a lesson whose imports are missing here is imported by its judge
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # judges are reaped by the kernel
    problem = fork_problem()
    if problem:
        Path(path + ".problem").write_text(problem)
        return
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    open(path + ".ready", "w").close()
    while True:
        conn, _ = server.accept()
        if fork_problem():  # never fork with a second thread: this judge's client sees the connection end
            conn.close()
            return
        if os.fork() == 0:
            server.close()
            try:
                _judge_child(conn)
            finally:
                os._exit(0)
        conn.close()


def _recv_all(conn, size: int) -> bytes:
    parts, got = [], 0
    while got < size:
        chunk = conn.recv(min(size - got, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _judge_child(conn) -> None:
    """In a forked judge: read the request, set the limits, decode and judge one observation, send the verdict as JSON.

    A request whose step is SESSION opens a session instead: one judge for one
    submission, judging its observations one after another (_session).
    """
    import json
    import pickle
    import resource
    import signal

    size = int.from_bytes(_recv_all(conn, 8), "big")
    step, observation, cpu_seconds, memory_bytes, procs = pickle.loads(_recv_all(conn, size))  # from the grader itself
    if step == SESSION:
        return _session(conn, cpu_seconds, memory_bytes, procs)
    for path in procs:  # the submission's cgroup: its judging shares its CPU weight and its memory limit
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass

    def out_of_time(*args):
        raise _OutOfTime

    signal.signal(signal.SIGXCPU, out_of_time)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 2))  # past the hard limit: SIGKILL
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    size = _vm_size()
    if size:
        resource.setrlimit(resource.RLIMIT_AS, (size + memory_bytes, size + memory_bytes))
    conn.sendall(json.dumps(_judged(step, observation, cpu_seconds)).encode())
    conn.close()


def _judged(step, observation, cpu_seconds: int) -> tuple[str, str] | None:
    """judge_here on one observation in a judge process, its time limit (_OutOfTime) or failure said as a verdict."""
    try:
        if isinstance(step, tuple):  # a step whose keywords do not pickle: planned again from the cell's source
            step = plan_cell(step[0])[step[1]]
        return judge_here(step, {"ok": True, "observation": observation})
    except _OutOfTime:
        return ("CheckFailed", f"judging what your code returned took more than {cpu_seconds} s of the grader's "
                "CPU time (an observation far bigger or odder than the check expects)")
    except BaseException as exc:  # noqa: BLE001  MemoryError while judging, say
        return ("CheckFailed", f"the check could not judge what your code returned ({type(exc).__name__})")


SESSION = "session"  # the step of a request that opens a session (Isolated.session)


def _join(procs: list[str]) -> None:
    """Move this process into the submission's cgroup (its cgroup.procs files)."""
    for path in procs:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass


def _session(conn, cpu_seconds: int, memory_bytes: int, procs: list[str]) -> None:
    """One submission's judge: its observations judged one after another, each within `cpu_seconds` of CPU time.

    Per observation: a profiling timer (user + system CPU time) raises
    _OutOfTime at `cpu_seconds`, and a virtual one kills the process (the
    default action of SIGVTALRM, no Python involved) 2 s later, should the
    judge be stuck where Python cannot raise; both are cleared after each. Its
    memory is this process's address space + `memory_bytes`, for the whole
    session: a MemoryError fails the one check, whose objects are then freed.
    A judge that dies fails its check; the grader opens a new session for the
    next. Only this submission's observations reach this process, so nothing
    one submission sends can touch another's judging.
    """
    import json
    import pickle
    import resource
    import signal

    _join(procs)

    def out_of_time(*args):
        raise _OutOfTime

    signal.signal(signal.SIGPROF, out_of_time)
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    size = _vm_size()
    if size:
        resource.setrlimit(resource.RLIMIT_AS, (size + memory_bytes, size + memory_bytes))
    conn.sendall(os.getpid().to_bytes(8, "big"))
    while True:
        try:
            head = _recv_all(conn, 8)
        except (EOFError, OSError):
            return
        step, observation = pickle.loads(_recv_all(conn, int.from_bytes(head, "big")))  # from the grader itself
        try:
            signal.setitimer(signal.ITIMER_VIRTUAL, cpu_seconds + 2)
            signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
            result = _judged(step, observation, cpu_seconds)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        data = json.dumps(result).encode()
        conn.sendall(len(data).to_bytes(8, "big") + data)


class _OutOfTime(BaseException):
    """Raised in a judge at its CPU-time limit (SIGXCPU); a BaseException, so no judge's `except Exception` keeps it."""


def _vm_size() -> int:
    """This process's address space in bytes (VmSize), 0 when /proc does not say."""
    try:
        with open("/proc/self/status", "rb") as f:
            line = next(x for x in f if x.startswith(b"VmSize:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration, ValueError):
        return 0


def _sendable(source: str, index: int, step: Step):
    """The step as a judge gets it: itself, or (the cell's source, its index) when its keywords do not pickle
    (a lambda in a check cell's keywords, say), to be planned again there."""
    import pickle

    try:
        pickle.dumps(step.kwargs)
        return step
    except Exception:  # noqa: BLE001
        return (source, index)


class Isolated:
    """Judges each observation in a process forked for it, with a CPU-time and a memory limit.

    A hostile observation can then cost at most `cpu_seconds` of one core and
    `memory_bytes` more memory, in a process that ends with its verdict; the
    grader's own process and other submissions' judging never wait on it.
    `wall_seconds` is only a backstop: a judge killed by it was slowed by
    something outside the submission, and says so (GRADER_ERROR).
    """

    def __init__(self, cpu_seconds: float = 10.0, memory_bytes: int = 1 << 30, wall_seconds: float | None = None):
        self.cpu_seconds = max(1, int(cpu_seconds))
        self.memory_bytes = int(memory_bytes)
        self.wall_seconds = wall_seconds or 60 + 6 * self.cpu_seconds

    def __call__(self, source: str, index: int, step: Step, reply: dict, group=None) -> tuple[str, str] | None:
        """The verdict on one observation; with `group` (a submission's cgroup) the judge runs in it."""
        import json
        import pickle
        import socket
        import time

        procs = group.procs_files() if group is not None else []
        request = pickle.dumps((_sendable(source, index, step), reply.get("observation"), self.cpu_seconds,
                                self.memory_bytes, procs))
        deadline = time.monotonic() + self.wall_seconds
        data = b""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(_server_path())
                conn.sendall(len(request).to_bytes(8, "big") + request)
                conn.shutdown(socket.SHUT_WR)
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return GRADER_ERROR, (f"the grader could not judge this check within {self.wall_seconds:g} s "
                                              "of wall time (the grading machine was overloaded); it is graded again "
                                              "on the next run")
                    conn.settimeout(left)
                    try:
                        chunk = conn.recv(1 << 16)
                    except socket.timeout:
                        continue
                    if not chunk:
                        break
                    data += chunk
        except OSError as exc:
            return GRADER_ERROR, f"the grader could not start a judge ({exc}); it is graded again on the next run"
        try:
            result = json.loads(data)
        except ValueError:
            return "CheckFailed", (f"judging what your code returned was stopped: it took more than "
                                   f"{self.cpu_seconds} s of the grader's CPU time or more memory than a judge may have")
        return None if result is None else (str(result[0]), str(result[1]))

    def session(self, group=None) -> "Session":
        """A judge for one submission's observations, one after another, in a process of its own (with `group`, in
        its cgroup): no fork and no connection per check. Close it when the submission is done."""
        return Session(self, group)


class Session:
    """One submission's judge process (judging._session), opened at its first observation; the same verdicts,
    limits and messages as Isolated, without a process per check."""

    def __init__(self, isolated: Isolated, group=None):
        self.isolated, self.group = isolated, group
        self.conn, self.pid = None, None

    def _open(self):
        import pickle
        import socket

        procs = self.group.procs_files() if self.group is not None else []
        request = pickle.dumps((SESSION, None, self.isolated.cpu_seconds, self.isolated.memory_bytes, procs))
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(self.isolated.wall_seconds)
            conn.connect(_server_path())
            conn.sendall(len(request).to_bytes(8, "big") + request)
            self.pid = int.from_bytes(_recv_all(conn, 8), "big")
        except BaseException:
            conn.close()
            raise
        self.conn = conn

    def __call__(self, source: str, index: int, step: Step, reply: dict, group=None) -> tuple[str, str] | None:
        import pickle
        import socket
        import time

        request = pickle.dumps((_sendable(source, index, step), reply.get("observation")))
        try:
            if self.conn is not None and self._ended():  # killed with its submission's processes (a runner restart)
                self.close()
            if self.conn is None:
                self._open()
            deadline = time.monotonic() + self.isolated.wall_seconds
            self.conn.sendall(len(request).to_bytes(8, "big") + request)
            self.conn.settimeout(max(deadline - time.monotonic(), 0.01))
            head = _recv_all(self.conn, 8)
            data = _recv_all(self.conn, int.from_bytes(head, "big"))
        except socket.timeout:
            self.close(kill=True)
            return GRADER_ERROR, (f"the grader could not judge this check within {self.isolated.wall_seconds:g} s "
                                  "of wall time (the grading machine was overloaded); it is graded again on the next run")
        except EOFError:  # the judge died: its CPU or memory limit (the next check gets a new one)
            self.close()
            return "CheckFailed", (f"judging what your code returned was stopped: it took more than "
                                   f"{self.isolated.cpu_seconds} s of the grader's CPU time or more memory than a "
                                   "judge may have")
        except (OSError, RuntimeError) as exc:
            self.close()
            return GRADER_ERROR, f"the grader could not start a judge ({exc}); it is graded again on the next run"
        try:
            result = json.loads(data)
        except ValueError:
            return "CheckFailed", "the check's verdict could not be read"
        return None if result is None else (str(result[0]), str(result[1]))

    def _ended(self) -> bool:
        """True when the judge process is gone: between checks it never writes, so a readable socket is its end.

        It lives in its submission's cgroup, whose processes are all killed
        when a runner is started again; the next check then gets a new judge.
        """
        import select

        readable, _, _ = select.select([self.conn], [], [], 0)
        return bool(readable)

    def close(self, kill: bool = False) -> None:
        """End the judge process: it ends when its connection does; `kill` one still busy past its wall time
        (alive, so its pid is its own)."""
        import signal

        if kill and self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.pid = None
