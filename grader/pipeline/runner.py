"""The grader's side of a submission's run: start the cell runner in the sandbox, send cells, read replies."""

from __future__ import annotations

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

from grader.pipeline import sandbox as sandboxes
from grader.pipeline.judging import CellFormatError, judge_cell
from grader.pipeline.keeper import TOO_MANY
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import Cell


class _Runner:
    """One cellrunner process in the sandbox, and the pipes to it."""

    def __init__(self, box: sandboxes.Sandbox, workspace: Path, modules: list[str], settings: Settings,
                 uid: int | None = None):
        if workspace.exists():  # nothing a submission wrote survives its runner (bwrap: a fresh tmpfs anyway)
            shutil.rmtree(workspace, ignore_errors=True)
        workspace.mkdir()
        read_fd, write_fd = os.pipe()
        # -I: the runner's own code comes from the installed grader only, never from the workspace or PYTHON* variables
        command = [sys.executable, "-I", "-B", "-u", "-m", "grader.pipeline.cellrunner", "--result-fd", str(write_fd),
                   "--memory-gib", str(settings.memory_gib), *modules]
        self.kind = box.kind
        self.log = open(workspace.parent / "runner.log", "ab")
        self.log_start = self.log.tell()  # what this runner wrote to the log starts here
        self.proc = subprocess.Popen(
            box.argv(command, workspace, uid=uid), cwd=workspace, env=box.env(workspace), stdin=subprocess.PIPE,
            stdout=self.log, stderr=self.log, pass_fds=(write_fd,), start_new_session=True,
        )
        os.close(write_fd)
        self.results = read_fd
        self.buffer = b""

    def ready(self, timeout: float) -> str:
        """Wait for the runner to finish its imports: 'ok', 'timeout' or 'died'."""
        return self._reply("ready", timeout)[0]

    def ask(self, cell: Cell, timeout: float) -> tuple[str, dict | None]:
        """Run one cell: ('ok', reply), ('timeout', None) or ('died', None).

        A student cell runs in the sandbox as it is. A check cell never goes
        there: the grader sends one observe request per check call and judges
        each observation here (grader.pipeline.judging).
        """
        if cell.kind != "check":
            return self.send({"kind": cell.kind, "source": cell.source}, timeout)
        deadline = time.monotonic() + timeout
        try:
            return judge_cell(cell.source, lambda request: self.send(request, max(deadline - time.monotonic(), 0.1)))
        except CellFormatError as exc:  # the course's bug, not the student's: say so, grade the rest
            return "ok", {"ok": False, "ename": "CourseError", "evalue": f"the course's check cell is broken ({exc}); "
                          "tell the instructor", "stdout": "", "stderr": "", "notes": []}

    def send(self, request: dict, timeout: float) -> tuple[str, dict | None]:
        """Send one request to the runner and wait for its reply, made well-formed whatever the runner wrote."""
        nonce = uuid.uuid4().hex
        try:
            self.proc.stdin.write((json.dumps({**request, "nonce": nonce}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return "died", None
        state, raw = self._reply(nonce, timeout)
        if state != "ok":
            return state, None
        return "ok", {"ok": raw.get("ok") is True, "ename": _field(raw, "ename", 200), "evalue": _field(raw, "evalue"),
                      "stdout": _field(raw, "stdout"), "stderr": _field(raw, "stderr"),
                      "notes": _changed(raw.get("changed")),
                      "observation": raw.get("observation")}

    def _reply(self, nonce: str, timeout: float) -> tuple[str, dict | None]:
        """The reply carrying `nonce`, skipping any line that does not."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except (ValueError, RecursionError):
                    continue  # not the runner's: something the student's code wrote there
                if isinstance(reply, dict) and reply.get("nonce") == nonce:
                    return "ok", reply
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", None
            ready, _, _ = select.select([self.results], [], [], left)
            if ready:
                chunk = os.read(self.results, 1 << 20)
                if not chunk:
                    return "died", None
                self.buffer = (self.buffer + chunk)[-(8 << 20):]

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
        os.close(self.results)
        self.log.close()
        return code


def _field(reply: dict, name: str, cap: int = 20_000) -> str:
    """A text field of a runner reply: a string of at most `cap` characters, whatever was sent."""
    value = reply.get(name)
    return value[:cap] if isinstance(value, str) else ""


def _changed(names) -> list[str]:
    """The note on what a student cell replaced in builtins or the course's modules (from the runner's reply)."""
    if not isinstance(names, list):
        return []
    names = [n[:100] for n in names if isinstance(n, str)][:20]
    return [f"your code changed {', '.join(names)} (the verdicts do not depend on it)"] if names else []


def _death(code: int | None, log: Path, start: int = 0) -> str:
    """Why the runner process ended, in words (from its exit status and what it wrote to the log after `start`).

    A traceback the runner itself wrote names the cause better than the exit
    status: a runner that cannot import the grader ("No module named
    'grader.pipeline'", when the sandbox cannot see the grader's environment)
    exits, and bwrap, killed while it ends, would only say SIGKILL.
    """
    tail = log.read_bytes()[start:][-4000:].decode("utf-8", "replace") if log.is_file() else ""
    if code == TOO_MANY and "(the process cap)" in tail:
        return "started more processes than the process cap allows (a fork bomb?): every one of them was killed"
    if "MemoryError" in tail or "can't allocate memory" in tail:
        return "ran out of memory (the memory limit) and the Python process died"
    raised = tail.rsplit("Traceback (most recent call last):", 1)[1:]
    error = [x.strip() for x in "".join(raised).splitlines() if re.match(r"\w+(Error|Exception|Exit)\b.*?:", x)]
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


def run_cells(cells: list[Cell], modules: list[str], box: sandboxes.Sandbox, settings: Settings) -> list[dict]:
    """Run the cells in a sandbox; one reply per cell, each with 'status' ok/error/timeout/died/not run."""
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-grade-"))
    workspace = scratch / "work"
    uid = sandboxes.take_uid() if box.kind == "bwrap" else None
    replies: list[dict] = []
    ran_ok: list[Cell] = []
    runner: _Runner | None = None
    deadline = time.monotonic() + settings.notebook_timeout
    restarts = 0
    try:
        for cell in cells:
            left = deadline - time.monotonic()
            if left <= 0 or restarts > 8:
                why = (f"not run: the whole-notebook limit of {settings.notebook_timeout:g} s was used up"
                       if left <= 0 else "not run: the process died too many times")
                replies.append({"status": "not run", "ename": "", "evalue": why, "stdout": "", "stderr": "", "notes": []})
                continue
            if runner is None:
                runner = _Runner(box, workspace, modules, settings, uid)
                if runner.ready(max(left, 1)) != "ok":  # starting Python and torch: not the student's time
                    why = _death(runner.kill(), scratch / "runner.log", runner.log_start)
                    replies.append({"status": "not run", "ename": "", "stdout": "", "stderr": "", "notes": [],
                                    "evalue": f"not run: the grader's Python did not start ({why})"})
                    runner, restarts = None, restarts + 1
                    continue
                for earlier in ran_ok:  # put back the definitions the dead process held
                    state, _ = runner.ask(earlier, min(settings.cell_timeout, max(left, 1)))
                    if state != "ok":
                        break
            state, reply = runner.ask(cell, min(settings.cell_timeout, max(left, 0.1)))
            if state == "ok":
                reply["status"] = "ok" if reply["ok"] else "error"
                if cell.kind == "student" and reply["ok"]:
                    ran_ok.append(cell)
                replies.append(reply)
                if _hit_process_cap(reply):  # copies of the runner fill the cap: start a fresh one for the next cell
                    runner.kill()
                    runner, restarts = None, restarts + 1
                continue
            code = runner.stop(grace=2.0) if state == "died" else runner.kill()
            log_start = runner.log_start
            runner, restarts = None, restarts + 1
            if state == "timeout":
                limit = min(settings.cell_timeout, left)
                why = f"timed out after {limit:g} s (an infinite loop, or far too slow)"
            else:
                why = _death(code, scratch / "runner.log", log_start)
            replies.append({"status": state, "ename": "", "evalue": why, "stdout": "", "stderr": "", "notes": []})
    finally:
        if runner is not None:
            runner.kill()
        if uid is not None:
            sandboxes.give_uid(uid)
        shutil.rmtree(scratch, ignore_errors=True)
    return replies
