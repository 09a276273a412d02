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
            self.proc.stdin.write((json.dumps({**request, "nonce": nonce}) + "\n").encode())
            self.proc.stdin.flush()
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


def run_cells(cells: list[Cell], modules: list[str], box: sandboxes.Sandbox, settings: Settings,
              groups=None, verdict=None, record: dict | None = None) -> list[dict]:
    """Run the cells in a sandbox; one reply per cell, each with 'status' ok/error/timeout/died/not run.

    A reply with "outside": True failed for a reason outside the submission
    (the runner did not start, a wall-clock backstop, a judge the grader
    could not run): its submission is graded again on the next run.
    `groups` (grader.pipeline.cgroups.Groups) gives the submission one cgroup
    for all its processes; `verdict` judges each observation
    (grader.pipeline.judging.Isolated; in this process when None); `record`
    is the submission's handed-in predictions (grader.predictions.parse), which
    its prediction checks are judged with.
    """
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-grade-"))
    os.chmod(scratch, 0o711)  # a runner of its own uid (no sandbox, as root) reaches its workspace; nobody lists it
    workspace = scratch / "work"
    uid = sandboxes.take_uid() if box.kind == "bwrap" or box.other_uid() else None
    group = groups.make(_memory_bytes(box, settings), box.max_processes + 8) if groups is not None else None
    if verdict is not None and group is not None:  # its judging runs in its cgroup too
        verdict = functools.partial(verdict, group=group)
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
                runner = _Runner(box, workspace, modules, settings, uid, group)
                oom_before = group.oom_kills() if group else 0
                started = runner.ready(STARTUP_SECONDS)  # starting Python and torch: not the student's time
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
            state, reply, used = runner.ask(cell, limit, verdict, record)
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
        if group is not None:
            group.remove()
        if uid is not None:
            sandboxes.give_uid(uid)
        shutil.rmtree(scratch, ignore_errors=True)
    return replies


def _memory_bytes(box: sandboxes.Sandbox, settings: Settings) -> int:
    """A submission's cgroup memory limit: its memory, and its workspace and /dev/shm, which live in memory."""
    return int(settings.memory_gib * 1024**3) + int(box.disk_bytes) + int(box.shm_bytes)
