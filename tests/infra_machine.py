"""A shared machine for the infrastructure tests: Unix users, a Python every user can run, daemons stopped after.

Imported by tests/test_infra_*.py. Everything here needs root (useradd, runuser);
`needs_root()` is the skip reason elsewhere, so a laptop without root still
passes `make test`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def needs_root() -> str | None:
    """Why the shared-machine tests cannot run here (None when they can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (it makes Unix users and starts daemons); CI runs it as root"
    for tool in ("useradd", "userdel", "runuser"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


def readable_by_all(path: Path) -> bool:
    """True when `nobody` can read `path` (and enter every folder above it)."""
    return subprocess.run(["runuser", "-u", "nobody", "--", "test", "-r", str(path)], capture_output=True).returncode == 0


def everyone_python() -> tuple[Path | None, str]:
    """(this venv's python, if every user can run it and its packages, else None; why not).

    A class needs the course's venv made from a Python every user can run
    (README, "Running a class": `make PYTHON=/usr/bin/python3`), not one in a
    home folder others cannot enter (a pyenv Python in /root); .ci/run makes it so.
    """
    purelib = Path(sysconfig.get_paths()["purelib"])
    for path in (Path(os.path.realpath(sys.executable)), purelib / "torch" / "__init__.py", ROOT / "grader" / "__init__.py"):
        if not readable_by_all(path):
            return None, (f"{path} is not readable by other users: a class needs the checkout and its venv where "
                          "everyone can read them, the venv made with `make PYTHON=/usr/bin/python3`")
    return Path(sys.executable), ""


class Users:
    """Unix users made for one test (unique names), removed with their home folders and processes afterwards."""

    def __init__(self, python: Path):
        self.python = python  # the Python every user runs (everyone_python)
        self.names: list[str] = []
        self.tag = uuid.uuid4().hex[:6]

    def add(self, role: str) -> str:
        name = f"gc{role[:6]}{self.tag}"
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, capture_output=True)
        Path(pwd.getpwnam(name).pw_dir).chmod(0o700)
        self.names.append(name)
        return name

    def home(self, name: str) -> Path:
        return Path(pwd.getpwnam(name).pw_dir)

    def run(self, name: str, args: list[str], cwd: Path | None = None, env: dict | None = None, check: bool = True,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """Run a command as user `name` with a clean environment (HOME, PATH, LANG and `env`)."""
        home = self.home(name)
        clean = {"HOME": str(home), "USER": name, "LOGNAME": name, "LANG": "C.UTF-8",
                 "PATH": f"{self.python.parent}:/usr/local/bin:/usr/bin:/bin", **(env or {})}
        if os.environ.get("GRADER_SANDBOX"):
            clean.setdefault("GRADER_SANDBOX", os.environ["GRADER_SANDBOX"])
        proc = subprocess.run(["runuser", "-u", name, "--", "env", "-i", *(f"{k}={v}" for k, v in clean.items()), *args],
                              cwd=cwd or home, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"as {name}: {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def remove(self) -> None:
        for name in self.names:
            kill_user_processes(name)
            subprocess.run(["userdel", "--remove", name], capture_output=True)


def kill_user_processes(name: str) -> None:
    """End every process user `name` still runs (a test's leftovers)."""
    uid = pwd.getpwnam(name).pw_uid
    for pid in processes_of_uid(uid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def processes_of_uid(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            line = next((x for x in status.splitlines() if x.startswith("Uid:")), "")
            if line.split()[1:2] == [str(uid)]:
                found.append(int(entry.name))
    return found


def processes_named(*names: str) -> list[str]:
    """'pid name' of live processes whose command name is one of `names` (daemons a test may leave behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
                state = next(x for x in (entry / "status").read_text().splitlines() if x.startswith("State:"))
            except (OSError, StopIteration):
                continue
            if comm in names and "Z" not in state:
                found.append(f"{entry.name} {comm}")
    return found


def wait_for(predicate, timeout: float, what: str, step: float = 0.1):
    """Poll `predicate` until it returns something true; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
