"""The grader's side of a submission's run: start the cell runner in the sandbox, send cells, read replies."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from grader.checks import _plain
from grader.pipeline import sandbox as sandboxes
from grader.pipeline.judging import GRADER_ERROR, CellFormatError, judge_cell
from grader.pipeline.keeper import TOO_MANY
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import Cell, one_line


HEADER_BYTES = 1 << 20  # a reply line longer than this is not the runner's: skipped unread
SLICE = 0.2  # seconds between looks at a runner's clock while it works


def _schedstat_wait(pid: int | None) -> float | None:
    """Seconds the process's main thread has waited on a run queue for a CPU (/proc/PID/schedstat), None if unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class Clock:
    """The time charged to one submission: its own, not its neighbours'.

    Wall time minus the time the runner's main thread waited for a CPU that
    other processes held (/proc/PID/schedstat), or the CPU time of all its
    processes together (its cgroup), whichever is more: a busy loop is charged
    its CPU time, a sleep its wall time, and a neighbour's load neither.
    """

    def __init__(self, pid: int | None, group=None):
        self.pid, self.group = pid, group

    def sample(self) -> tuple[float, float | None, float | None]:
        return time.monotonic(), _schedstat_wait(self.pid), self.group.cpu_seconds() if self.group else None

    @staticmethod
    def charged(start: tuple, now: tuple) -> float:
        wall = now[0] - start[0]
        own = wall - (now[1] - start[1]) if start[1] is not None and now[1] is not None else wall
        cpu = now[2] - start[2] if start[2] is not None and now[2] is not None else 0.0
        return max(own, cpu, 0.0)


class _Runner:
    """One cellrunner process in the sandbox, and the pipes to it."""

    def __init__(self, box: sandboxes.Sandbox, workspace: Path, modules: list[str], settings: Settings,
                 uid: int | None = None, group=None):
        if workspace.exists():  # nothing a submission wrote survives its runner (bwrap: a fresh tmpfs anyway)
            shutil.rmtree(workspace, ignore_errors=True)
        workspace.mkdir()
        if uid is not None and box.kind == "none":  # the runner's own uid writes here, and nobody else
            os.chown(workspace, uid, uid)
            os.chmod(workspace, 0o700)
        read_fd, write_fd = os.pipe()
        try:  # a 4 MiB observation in a few reads, not 64 KiB at a time (each a round trip through a loaded scheduler)
            fcntl.fcntl(read_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        except OSError:
            pass
        # -I: the runner's own code comes from the installed grader only, never from the workspace or PYTHON* variables
        command = [sys.executable, "-I", "-B", "-u", "-m", "grader.pipeline.cellrunner", "--result-fd", str(write_fd),
                   "--memory-gib", str(settings.memory_gib), *modules]
        self.kind = box.kind
        self.group = group
        self.settings = settings
        self.log = open(os.open(workspace.parent / "runner.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        self.log_start = self.log.tell()  # what this runner wrote to the log starts here
        argv = box.argv(command, workspace, uid=uid)
        self.proc = subprocess.Popen(
            group.wrap(argv) if group else argv, cwd=workspace, env=box.env(workspace), stdin=subprocess.PIPE,
            stdout=self.log, stderr=self.log, pass_fds=(write_fd,), start_new_session=True,
        )
        self.stdin = self.proc.stdin
        os.close(write_fd)
        self.results = read_fd
        self.buffer = b""
        self.skipping = False  # inside a line too long to be the runner's: dropped up to its end
        self.clock = Clock(None, group)
        self.outside = False  # the last wait ended by a limit outside the submission (the wall-clock backstop)

    def ready(self, timeout: float) -> str:
        """Wait for the runner to finish its imports (wall time, not charged): 'ok', 'timeout' or 'died'."""
        state = self._reply("ready", timeout, charged=False)[0]
        if state == "ok":  # before any student code runs: the runner's own pid, whose clock the deadlines read
            self.clock = Clock(_find_runner(self.proc.pid), self.group)
        return state

    def ask(self, cell: Cell, budget: float, verdict=None, record: dict | None = None) -> tuple[str, dict | None, float]:
        """Run one cell within `budget` charged seconds: ('ok', reply, used), ('timeout', None, used) or ('died', None, used).

        A student cell runs in the sandbox as it is. A check cell never goes
        there: the grader sends one observe request per check call and judges
        each observation here (grader.pipeline.judging), in a judge process of
        its own (`verdict`): the judging is not charged to the cell.
        """
        if cell.kind != "check":
            return self.send({"kind": cell.kind, "source": cell.source}, budget)
        spent = [0.0]

        def observe(request):
            state, reply, used = self.send(request, max(budget - spent[0], 0.1))
            spent[0] += used
            return state, reply

        try:
            state, reply = judge_cell(cell.source, observe, verdict, record)
            return state, reply, spent[0]
        except CellFormatError as exc:  # the course's bug, not the student's: say so, grade the rest
            return "ok", {"ok": False, "ename": "CourseError", "evalue": f"the course's check cell is broken ({exc}); "
                          "tell the instructor", "stdout": "", "stderr": "", "notes": []}, spent[0]

    def send(self, request: dict, budget: float) -> tuple[str, dict | None, float]:
        """Send one request to the runner and wait for its reply, made well-formed whatever the runner wrote."""
        nonce = uuid.uuid4().hex
        start = self.clock.sample()
        try:
            self.stdin.write((json.dumps({**request, "nonce": nonce}) + "\n").encode())
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            return "died", None, 0.0
        state, raw = self._reply(nonce, budget)
        used = Clock.charged(start, self.clock.sample())
        if state != "ok":
            return state, None, used
        return "ok", {"ok": raw.get("ok") is True, "ename": _student_name(_field(raw, "ename", 200)), "evalue": _field(raw, "evalue"),
                      "stdout": _field(raw, "stdout"), "stderr": _field(raw, "stderr"),
                      "notes": _changed(raw.get("changed")),
                      "observation": raw.get("observation")}, used

    def _reply(self, nonce: str, budget: float, charged: bool = True) -> tuple[str, dict | None]:
        """The reply carrying `nonce` (and the observation line after it), skipping any line that does not.

        Waits until the submission has been charged `budget` seconds (see
        Clock), or, when not `charged`, `budget` seconds of wall time. A wall
        time of three times the budget (plus 30 s) is a backstop that says the
        machine, not the submission, was too slow (self.outside).
        """
        start = self.clock.sample()
        backstop = start[0] + (3 * budget + 30 if charged else budget)
        self.outside = False
        header, need = None, 0
        while True:
            while header is None and b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if self.skipping or len(line) > HEADER_BYTES:
                    self.skipping = False
                    continue  # not the runner's: too long to parse here
                try:
                    reply = json.loads(line)
                except (ValueError, RecursionError):
                    continue  # not the runner's: something the student's code wrote there
                if isinstance(reply, dict) and reply.get("nonce") == nonce:
                    size = reply.get("observation_bytes")
                    if type(size) is int and 0 < size <= _plain.MAX_BYTES:
                        header, need = reply, size
                    else:
                        return "ok", reply
            if header is None and len(self.buffer) > HEADER_BYTES:
                self.buffer, self.skipping = b"", True
            if header is not None and len(self.buffer) > need:
                # the observation's JSON, as text: parsed only in a judge process (grader.pipeline.judging)
                blob, self.buffer = self.buffer[:need], self.buffer[need + 1:]
                header["observation"] = blob.decode("ascii", "replace")
                return "ok", header
            now = self.clock.sample()
            if now[0] >= backstop:
                self.outside = charged
                return "timeout", None
            if charged and Clock.charged(start, now) >= budget:
                return "timeout", None
            ready, _, _ = select.select([self.results], [], [], min(SLICE, max(backstop - now[0], 0.01)))
            if ready:
                chunk = os.read(self.results, 1 << 20)
                if not chunk:
                    return "died", None
                self.buffer += chunk

    def kill(self) -> int:
        """Stop the runner and everything it started; returns its exit status."""
        if self.kind == "none":  # the keeper kills every process of the run, setsid'd ones too, then exits
            try:
                self.proc.terminate()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, 9)  # bwrap: its PID namespace, and every process in it, ends with it
        except (ProcessLookupError, PermissionError):
            pass
        if self.group is not None:
            self.group.kill_all()
        return self.stop()

    def stop(self, grace: float = 10.0) -> int:
        """Close its input and wait up to `grace` seconds for it to end, then kill it; returns its exit status."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            if self.kind == "none":
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            code = self.proc.wait()
        if self.group is not None:
            self.group.kill_all()
        os.close(self.results)
        self.log.close()
        return code


class ZygoteUnavailable(RuntimeError):
    """The warm runner's zygote did not start, or refused to fork: runners are started cold instead."""


class Zygote:
    """One warm runner's zygote (grader.pipeline.zygote) for one set of lesson modules, in a bwrap of its own.

    Started once; each `fork` hands it a runner's pipes and the submission's
    cgroup.procs files and returns when its fork is made. Forks are made one
    at a time (a lock); the zygote never sees a submission's notebook.
    """

    def __init__(self, box: sandboxes.Sandbox, modules: list[str], startup: float):
        import socket

        self.folder = Path(tempfile.mkdtemp(prefix="gpu-course-zygote-"))
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-I", "-B", "-u", "-m", "grader.pipeline.zygote",
                   "--control-fd", str(child.fileno()), *modules]
        self.log_path = self.folder / "zygote.log"
        with open(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
            self.proc = subprocess.Popen(box.argv(command, self.folder, zygote=True), cwd=self.folder,
                                         env=box.env(self.folder), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         pass_fds=(child.fileno(),), start_new_session=True)
        child.close()
        self.control = parent
        self.lock = threading.Lock()
        hello = self._answer(startup)
        if not hello.get("ready"):
            self.close()
            raise ZygoteUnavailable(str(hello.get("problem") or "it did not start"))

    def _answer(self, timeout: float) -> dict:
        self.control.settimeout(timeout)
        try:
            data = self.control.recv(1 << 16)
        except OSError as exc:
            data = b""
            why = str(exc)
        else:
            why = "it ended"
        try:
            return json.loads(data) if data else {"problem": f"{why}: {self._log_tail()}"}
        except ValueError:
            return {"problem": "it answered garbage"}

    def _log_tail(self) -> str:
        try:
            return one_line(self.log_path.read_bytes()[-300:].decode("utf-8", "replace").strip())
        except OSError:
            return ""

    def fork(self, request: dict, fds: list[int]) -> None:
        """Make one warm runner from `fds` (requests, results, log, control, cgroup.procs...); ZygoteUnavailable if not."""
        import socket

        with self.lock:
            try:
                socket.send_fds(self.control, [json.dumps(request).encode()], fds)
            except OSError as exc:
                raise ZygoteUnavailable(f"the zygote is gone ({exc})") from None
            answer = self._answer(60)
        if not answer.get("forked"):
            raise ZygoteUnavailable(str(answer.get("problem") or "it did not fork"))

    def close(self) -> None:
        """End the zygote (its forks are their own submissions' and end with them)."""
        try:
            self.control.close()
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class Zygotes:
    """The warm runners' zygotes of one class run: one per set of lesson modules, started when first needed (or
    ahead, `prepare`), several at once.

    A zygote that cannot start or refuses to fork is not asked again: its
    lesson's runners are started cold, and the log says why once.
    """

    def __init__(self, box: sandboxes.Sandbox, settings: Settings, log=print, keep: int = 4):
        from concurrent.futures import ThreadPoolExecutor

        self.box, self.settings, self.log, self.keep = box, settings, log, keep
        self.live: dict[tuple[str, ...], object] = {}  # modules -> the Future of its Zygote, most recently used last
        self.broken: set[tuple[str, ...]] = set()
        self.lock = threading.Lock()
        # bwrap's --die-with-parent (PR_SET_PDEATHSIG) fires when the *thread* that started it ends: zygotes are
        # started from these threads, which live until close(), not from a grading thread that may end first
        self.starter = ThreadPoolExecutor(max_workers=keep, thread_name_prefix="zygotes")

    def prepare(self, modules: list[str]) -> None:
        """Start the zygote for `modules` now, in the background, so the first submission does not wait for it."""
        with self.lock:
            self._future(tuple(modules))

    def _future(self, key: tuple[str, ...]):
        if key not in self.live:
            self.live[key] = self.starter.submit(Zygote, self.box, list(key), STARTUP_SECONDS)
            while len(self.live) > self.keep:  # the least recently used lesson's zygote goes: memory is not kept all run
                old = self.live.pop(next(iter(self.live)))
                old.add_done_callback(lambda done: done.exception() is None and done.result().close())
        else:
            self.live[key] = self.live.pop(key)
        return self.live[key]

    def get(self, modules: list[str]) -> Zygote | None:
        key = tuple(modules)
        with self.lock:
            if key in self.broken:
                return None
            future = self._future(key)
        try:
            return future.result()
        except (ZygoteUnavailable, OSError) as exc:
            with self.lock:
                if key not in self.broken:
                    self.broken.add(key)
                    self.live.pop(key, None)
                    self.log(f"runners: cold for {', '.join(modules) or 'no checks'} (the warm runner did not start: "
                             f"{one_line(str(exc))[:300]})")
            return None

    def failed(self, modules: list[str], why: str) -> None:
        key = tuple(modules)
        with self.lock:
            future = self.live.pop(key, None)
            self.broken.add(key)
        if future is not None and future.done() and future.exception() is None:
            future.result().close()
        self.log(f"runners: cold for {', '.join(modules) or 'no checks'} from now on ({one_line(why)[:300]})")

    def close(self) -> None:
        with self.lock:
            futures, self.live = list(self.live.values()), {}
        for future in futures:
            try:
                future.result().close()
            except Exception:  # noqa: BLE001  one that never started has nothing to close
                pass
        self.starter.shutdown()


def warm_problem(box: sandboxes.Sandbox, settings: Settings) -> str | None:
    """Why runners are started cold here, in words; None when they are forked from a warm zygote."""
    if not settings.warm:
        return "not asked for (--cold)"
    if box.kind != "bwrap":
        return "only in bwrap: without a sandbox each runner is a process of its own under the keeper"
    if os.geteuid() != 0:
        return "only when the grader is root, which gives each submission a uid of its own"
    if under_tmp():
        return "the course or its Python lies under /tmp, which each fork's own /tmp would hide"
    return None


def under_tmp() -> bool:
    """True when the course or the Python the runners import from lies in /tmp (a clone there, as CI may make):
    a warm fork mounts a fresh /tmp over it, so those runners start cold."""
    course = Path(__file__).resolve().parents[2]
    return any(str(p) == "/tmp" or str(p).startswith("/tmp/")
               for p in (course, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()))


class _WarmRunner(_Runner):
    """A cellrunner forked from a zygote and confined there (grader.pipeline.zygote); the same pipes as a cold one."""

    def __init__(self, zygote: Zygote, workspace: Path, modules: list[str], settings: Settings, box: sandboxes.Sandbox,
                 uid: int, group=None):
        import socket

        workspace.mkdir(exist_ok=True)  # only its runner.log lives beside it: the workspace itself is the fork's tmpfs
        self.kind, self.group, self.settings = "bwrap", group, settings
        self.log = open(os.open(workspace.parent / "runner.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        self.log_start = self.log.tell()
        request_r, request_w = os.pipe()
        self.results, result_w = os.pipe()
        try:
            fcntl.fcntl(self.results, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        except OSError:
            pass
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        procs = [os.open(p, os.O_WRONLY) for p in (group.procs_files() if group else [])]
        mine = [request_r, result_w, theirs.fileno()]
        try:
            zygote.fork({"uid": uid, "disk_bytes": int(box.disk_bytes), "shm_bytes": int(box.shm_bytes),
                         "max_processes": int(box.max_processes), "memory_gib": settings.memory_gib,
                         "modules": modules}, [request_r, result_w, self.log.fileno(), theirs.fileno(), *procs])
        except BaseException:
            for fd in (request_w, self.results):
                os.close(fd)
            self.control.close()
            self.log.close()
            raise
        finally:
            for fd in procs + mine[:2]:
                os.close(fd)
            theirs.close()
        self.zygote = zygote
        self.stdin = os.fdopen(request_w, "wb")
        self.buffer, self.skipping, self.outside = b"", False, False
        self.clock = Clock(None, group)
        self.init_pid: int | None = None  # the host's pid of the fork's PID 1: killing it ends all the fork's processes
        self.status: int | None = None
        self.said = b""

    def _said(self, timeout: float) -> bool:
        """Read what the fork's holder says (its init's pid, then its exit status) for up to `timeout` s; False at EOF."""
        ready, _, _ = select.select([self.control], [], [], max(timeout, 0))
        if ready:
            chunk = self.control.recv(256)
            if not chunk:
                return False
            self.said += chunk
            for line in self.said.decode("ascii", "replace").splitlines():
                word, _, value = line.partition(" ")
                if word == "pid" and value.isdigit() and self.init_pid is None:
                    self.init_pid = _host_pid(self.zygote.proc.pid, int(value))
                elif word == "exit" and value.lstrip("-").isdigit():
                    self.status = int(value)
        return True

    def ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while self.init_pid is None and time.monotonic() < deadline and self.status is None:
            if not self._said(min(1.0, deadline - time.monotonic())):
                break
        state = self._reply("ready", max(deadline - time.monotonic(), 0.1), charged=False)[0]
        if state == "ok" and self.init_pid is not None:
            self.clock = Clock(_first_child(self.init_pid), self.group)
        return state

    def kill(self) -> int:
        if self.init_pid is not None and self.status is None:
            try:
                os.kill(self.init_pid, 9)  # PID 1 of the fork's namespace: the kernel ends every process in it
            except (ProcessLookupError, PermissionError):
                pass
        return self.stop()

    def stop(self, grace: float = 10.0) -> int:
        try:
            self.stdin.close()
        except OSError:
            pass
        deadline = time.monotonic() + grace
        while self.status is None and time.monotonic() < deadline and self._said(deadline - time.monotonic()):
            pass
        if self.status is None and self.init_pid is not None:
            try:
                os.kill(self.init_pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            deadline = time.monotonic() + 10
            while self.status is None and time.monotonic() < deadline and self._said(deadline - time.monotonic()):
                pass
        self.control.close()  # the holder reaps its init and ends
        if self.group is not None:
            self.group.kill_all()
        os.close(self.results)
        self.log.close()
        return self.status if self.status is not None else 137


def _host_pid(top: int, inner: int) -> int | None:
    """The pid, as this grader sees it, of the process below `top` that the zygote's namespace calls `inner` and that is
    PID 1 of a namespace of its own (/proc/PID/status, NSpid)."""
    from grader.pipeline.keeper import descendants

    for pid in descendants(top):
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                line = next((x for x in f if x.startswith(b"NSpid:")), b"")
        except OSError:
            continue
        ids = line.split()[1:]
        if len(ids) >= 3 and ids[-2] == str(inner).encode() and ids[-1] == b"1":
            return pid
    return None


def _first_child(pid: int) -> int | None:
    """The first child of `pid` (the runner below a fork's init), None if it has none."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except (OSError, ValueError):
        return None


def _find_runner(top: int) -> int | None:
    """The pid (as this grader sees it) of the cellrunner below process `top`: the first one, nearest the top."""
    from grader.pipeline.keeper import descendants

    me = os.fsencode(sys.executable)
    for pid in [top, *descendants(top)]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0] == me and b"grader.pipeline.cellrunner" in argv:
            return pid
    return None


def _field(reply: dict, name: str, cap: int = 20_000) -> str:
    """A text field of a runner reply: a string of at most `cap` characters, whatever was sent."""
    value = reply.get(name)
    return value[:cap] if isinstance(value, str) else ""


RESERVED = (GRADER_ERROR, "CourseError")  # names the grader gives its own failures: never a student's


def _student_name(ename: str) -> str:
    """An exception class name from the sandbox, on one line, never one of the names the grader keeps for its own failures."""
    ename = one_line(ename)
    return f"{ename} (a class of your code)" if ename in RESERVED else ename


OUTPUT_TOTAL_CHARS = 200_000  # stdout, stderr and error text kept of one submission, over all its cells


def _charge_output(reply: dict, left: int) -> int:
    """Cut the reply's stdout, stderr and evalue to the `left` characters the submission has still; returns what is left."""
    for name in ("stdout", "stderr", "evalue"):
        text = reply.get(name) or ""
        if len(text) > left:
            reply[name] = text[:left] + (f"\n[... {len(text) - left} more characters cut: this submission's outputs "
                                         f"reached the grader's limit of {OUTPUT_TOTAL_CHARS:,} characters in all]")
        left = max(left - len(text), 0)
    return left


def _changed(names) -> list[str]:
    """The note on what a student cell replaced in builtins or the course's modules (from the runner's reply)."""
    if not isinstance(names, list):
        return []
    names = [n[:100] for n in names if isinstance(n, str)][:20]
    return [f"your code changed {', '.join(names)} (the verdicts do not depend on it)"] if names else []


def _death(code: int | None, log: Path, start: int = 0, group=None, oom_before: int = 0) -> str:
    """Why the runner process ended, in words (from its exit status and what it wrote to the log after `start`).

    A traceback the runner itself wrote names the cause better than the exit
    status: a runner that cannot import the grader ("No module named
    'grader.pipeline'", when the sandbox cannot see the grader's environment)
    exits, and bwrap, killed while it ends, would only say SIGKILL.
    """
    tail = log.read_bytes()[start:][-4000:].decode("utf-8", "replace") if log.is_file() else ""
    if code == TOO_MANY and "(the process cap)" in tail:
        return "started more processes than the process cap allows (a fork bomb?): every one of them was killed"
    if group is not None and group.oom_kills() > oom_before:
        return ("ran out of memory: its processes together, with the files it wrote, went over the submission's "
                "memory limit, and the kernel killed one")
    if "MemoryError" in tail or "can't allocate memory" in tail:
        return "ran out of memory (the memory limit) and the Python process died"
    raised = tail.rsplit("Traceback (most recent call last):", 1)[1:]
    error = [x.strip() for x in "".join(raised).splitlines() if re.match(r"\w+(Error|Exception|Exit)\b.*?:", x)]
    # `python -m` that cannot find the module writes no traceback: "...: Error while finding module
    # specification for 'grader.pipeline.cellrunner' (ModuleNotFoundError: No module named 'grader.pipeline')"
    error += re.findall(r"Error while finding module specification for \S+ \((\w+Error: [^\n]*)\)", tail)
    if error:
        return f"{error[-1][:300]} (the Python process then ended with status {code})"
    if code is not None and code < 0:
        import signal

        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        hint = {"SIGKILL": " (killed: usually the memory limit)", "SIGXCPU": " (the CPU-time limit)",
                "SIGSEGV": " (a crash in native code)"}.get(name, "")
        return f"the Python process was killed by {name}{hint}"
    return f"the Python process exited with status {code} (os._exit, sys.exit outside a cell, or a crash)"


def _hit_process_cap(reply: dict) -> bool:
    """True when a cell failed because fork or a new thread hit the process cap (EAGAIN)."""
    evalue = str(reply.get("evalue"))
    return not reply.get("ok") and ("[Errno 11] Resource temporarily unavailable" in evalue
                                    or "can't start new thread" in evalue)


STARTUP_SECONDS = 300  # wall time the runner may take to start Python and torch (not the submission's time)


def _not_run(why: str, outside: bool = False) -> dict:
    return {"status": "not run", "ename": "", "evalue": why, "stdout": "", "stderr": "", "notes": [], "outside": outside}


def _start(box: sandboxes.Sandbox, workspace: Path, modules: list[str], settings: Settings, uid: int | None,
           group, warm: Zygotes | None) -> _Runner:
    """A runner: forked from the lesson's warm zygote where there is one, else a fresh Python in a bwrap of its own."""
    if warm is not None and uid is not None:
        zygote = warm.get(modules)
        if zygote is not None:
            try:
                return _WarmRunner(zygote, workspace, modules, settings, box, uid, group)
            except ZygoteUnavailable as exc:
                warm.failed(modules, str(exc))
    return _Runner(box, workspace, modules, settings, uid, group)


PHASES = ("read", "start", "cells", "observe", "judge", "write")  # where one submission's seconds go (wall time)


def run_cells(cells: list[Cell], modules: list[str], box: sandboxes.Sandbox, settings: Settings,
              groups=None, verdict=None, record: dict | None = None, warm: Zygotes | None = None,
              phases: dict | None = None) -> list[dict]:
    """Run the cells in a sandbox; one reply per cell, each with 'status' ok/error/timeout/died/not run.

    A reply with "outside": True failed for a reason outside the submission
    (the runner did not start, a wall-clock backstop, a judge the grader
    could not run): its submission is graded again on the next run.
    `groups` (grader.pipeline.cgroups.Groups) gives the submission one cgroup
    for all its processes; `verdict` judges each observation
    (grader.pipeline.judging.Isolated; in this process when None); `record`
    is the submission's handed-in predictions (grader.predictions.parse), which
    its prediction checks are judged with; `warm` (Zygotes) forks its runners
    from a warm zygote; `phases` gets the wall seconds spent starting runners,
    in student cells, observing and judging (PHASES).
    """
    phases = phases if phases is not None else {}
    for name in ("start", "cells", "observe", "judge"):
        phases.setdefault(name, 0.0)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-grade-"))
    os.chmod(scratch, 0o711)  # a runner of its own uid (no sandbox, as root) reaches its workspace; nobody lists it
    workspace = scratch / "work"
    uid = sandboxes.take_uid() if box.kind == "bwrap" or box.other_uid() else None
    group = groups.make(_memory_bytes(box, settings), box.max_processes + 8) if groups is not None else None
    session = None
    if verdict is not None and hasattr(verdict, "session"):  # one judge process for all this submission's checks
        verdict = session = verdict.session(group)  # in its cgroup too
    elif verdict is not None and group is not None:  # its judging runs in its cgroup too
        verdict = functools.partial(verdict, group=group)
    if verdict is not None:
        verdict = _timed(verdict, phases)
    replies: list[dict] = []
    ran_ok: list[Cell] = []
    runner: _Runner | None = None
    charged = 0.0  # the submission's own seconds, over all its cells and restarts (see Clock)
    output_left = OUTPUT_TOTAL_CHARS  # characters of output it may still leave in its results
    restarts = 0
    failed_starts = 0  # runners that did not start: the sandbox or the host, never the submission
    try:
        for cell in cells:
            left = settings.notebook_timeout - charged
            if left <= 0 or restarts > 8:
                replies.append(_not_run(f"not run: the whole-notebook limit of {settings.notebook_timeout:g} s was used up"
                                        if left <= 0 else "not run: the process died too many times",
                                        outside=left > 0 and failed_starts > 0))
                continue
            if runner is None:
                began = time.perf_counter()
                runner = _start(box, workspace, modules, settings, uid, group, warm)
                oom_before = group.oom_kills() if group else 0
                started = runner.ready(STARTUP_SECONDS)  # starting Python and torch: not the student's time
                phases["start"] += time.perf_counter() - began
                if started != "ok":  # a runner that ended by itself is reaped, not killed: its own status and words
                    code = runner.stop(grace=2.0) if started == "died" else runner.kill()
                    why = _death(code, scratch / "runner.log", runner.log_start)
                    replies.append(_not_run(f"not run: the grader's Python did not start ({why}); graded again on "
                                            "the next run", outside=True))
                    runner, restarts, failed_starts = None, restarts + 1, failed_starts + 1
                    continue
                for earlier in ran_ok:  # put back the definitions the dead process held
                    state, _, used = runner.ask(earlier, min(settings.cell_timeout, max(left, 1)), verdict, record)
                    charged, left = charged + used, left - used
                    if state != "ok":
                        break
            limit = min(settings.cell_timeout, max(left, 0.1))
            began, judged = time.perf_counter(), phases["judge"]
            state, reply, used = runner.ask(cell, limit, verdict, record)
            took = time.perf_counter() - began
            if cell.kind == "check":
                phases["observe"] += took - (phases["judge"] - judged)
            else:
                phases["cells"] += took
            charged += used
            if state == "ok":
                reply["status"] = "ok" if reply["ok"] else "error"
                reply["outside"] = reply.get("ename") == GRADER_ERROR
                if cell.kind == "student" and reply["ok"]:
                    ran_ok.append(cell)
                output_left = _charge_output(reply, output_left)
                replies.append(reply)
                if _hit_process_cap(reply):  # copies of the runner fill the cap: start a fresh one for the next cell
                    runner.kill()
                    runner, restarts = None, restarts + 1
                continue
            outside = runner.outside
            code = runner.stop(grace=2.0) if state == "died" else runner.kill()
            log_start = runner.log_start
            runner, restarts = None, restarts + 1
            if state == "timeout" and outside:
                why = (f"stopped after {3 * limit + 30:g} s of wall time, of which the grader could charge it less than "
                       f"{limit:g} s (the grading machine was overloaded); graded again on the next run")
            elif state == "timeout":
                why = f"timed out after {limit:g} s (an infinite loop, or far too slow)"
            else:
                why = _death(code, scratch / "runner.log", log_start, group, oom_before)
            replies.append({"status": state, "ename": "", "evalue": why, "stdout": "", "stderr": "", "notes": [],
                            "outside": outside})
    finally:
        if runner is not None:
            runner.kill()
        if session is not None:
            session.close()
        if group is not None:
            group.remove()
        if uid is not None:
            sandboxes.give_uid(uid)
        shutil.rmtree(scratch, ignore_errors=True)
    return replies


def _timed(verdict, phases: dict):
    """`verdict`, adding the wall seconds each call takes to phases["judge"]."""
    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return verdict(*args, **kwargs)
        finally:
            phases["judge"] += time.perf_counter() - began
    return timed


def _memory_bytes(box: sandboxes.Sandbox, settings: Settings) -> int:
    """A submission's cgroup memory limit: its memory, and its workspace and /dev/shm, which live in memory."""
    return int(settings.memory_gib * 1024**3) + int(box.disk_bytes) + int(box.shm_bytes)
