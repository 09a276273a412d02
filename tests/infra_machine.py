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

from conftest import processes_tagged

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
        self.seconds: list[tuple[str, float]] = []  # (command, seconds) of each run, for the report
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
        start = time.perf_counter()
        proc = subprocess.run(["runuser", "-u", name, "--", "env", "-i", *(f"{k}={v}" for k, v in clean.items()), *args],
                              cwd=cwd or home, capture_output=True, text=True, timeout=timeout)
        self.seconds.append((f"{name}: {' '.join(a for a in args[2:5])}", time.perf_counter() - start))
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


def wait_for(predicate, timeout: float, what: str, step: float = 0.1):
    """Poll `predicate` until it returns something true; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")


SLURM_CONF = """\
ClusterName=gpucourse
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={port}
SlurmdPort={dport}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool-%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=class Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class Slurm:
    """A real slurm-wlm on this host: munged, slurmctld and two slurmd, two nodes that are both this host.

    Each node has a name of its own (gcnode1, gcnode2), its address 127.0.0.1 and
    a slurmd port of its own; a job script finds a node's address with
    `scontrol show node` (README's recipes do), as on a real cluster.
    """

    def __init__(self, folder: Path, cpus: int, nodes: int = 2):
        import socket

        self.dir = folder
        host = socket.gethostname()
        self.nodes = [f"gcnode{i + 1}" for i in range(nodes)]
        self.cpus = cpus
        ports = free_ports(2 + nodes)  # slurmctld, the default slurmd port, one per node
        lines = [f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[2 + i]} CPUs={cpus} State=UNKNOWN"
                 for i, name in enumerate(self.nodes)]
        (folder / "state").mkdir()
        (folder / "slurm.conf").write_text(SLURM_CONF.format(host=host, port=ports[0], dport=ports[1], dir=folder,
                                                             nodes="\n".join(lines)))
        self.env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
        self.pids: list[int] = []

    def start(self) -> None:
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        d = self.dir
        subprocess.run(["munged", f"--socket={d}/munge.sock", f"--key-file={key}", f"--pid-file={d}/munged.pid",
                        f"--log-file={d}/munged.log", f"--seed-file={d}/munge.seed", "--force"], check=True,
                       capture_output=True)
        self.pids.append(int(wait_for(lambda: _read(d / "munged.pid"), 10, "munged's pid file")))
        subprocess.run(["slurmctld", "-i"], env=self.env, check=True, capture_output=True)
        self.pids.append(int(wait_for(lambda: _read(d / "slurmctld.pid"), 10, "slurmctld's pid file")))
        for name in self.nodes:
            subprocess.run(["slurmd", "-N", name], env=self.env, check=True, capture_output=True)
            self.pids.append(int(wait_for(lambda: _read(d / f"slurmd-{name}.pid"), 10, f"slurmd {name}'s pid file")))
        wait_for(lambda: self.idle() == len(self.nodes), 30, f"{len(self.nodes)} idle Slurm nodes")

    def idle(self) -> int:
        out = subprocess.run(["sinfo", "-h", "-o", "%D %t"], env=self.env, capture_output=True, text=True).stdout
        return sum(int(n) for n, state in (line.split() for line in out.splitlines()) if state == "idle")

    def ours(self) -> list[int]:
        """Live processes of this cluster: its daemons (by the folder in their command line or pid files) and the
        job steps slurmd started (by the SLURM_CONF they inherit)."""
        found = set(processes_tagged(f"SLURM_CONF={self.env['SLURM_CONF']}")) | {p for p in self.pids if _alive(p)}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and str(self.dir).encode() in _cmdline(entry) and _alive(int(entry.name)):
                found.add(int(entry.name))
        return sorted(found - {os.getpid()})

    def stop(self) -> list[str]:
        """Cancel every job, stop every process of this cluster; returns those still there after 15 s (then killed).

        A job's slurmstepd outlives `sbatch --wait` by a moment: it is waited for first.
        """
        subprocess.run(["scancel", "--full", "--user=root"], env=self.env, capture_output=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and [p for p in self.ours() if _cmdline(Path(f"/proc/{p}")).startswith(b"slurmstepd")]:
            time.sleep(0.1)
        for pid in [*reversed(self.pids), *self.ours()]:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self.ours():
            time.sleep(0.1)
        left = self.ours()
        named = [f"{pid} {_cmdline(Path(f'/proc/{pid}')).decode(errors='replace')}" for pid in left]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10  # a loaded machine takes a moment to end a killed process
        while time.monotonic() < deadline and self.ours():
            time.sleep(0.1)
        return named

    def log(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(self.dir.glob("*.log")))


def free_ports(count: int) -> list[int]:
    """`count` TCP ports free on 127.0.0.1 now (held open together while chosen, so all differ)."""
    import socket

    held = [socket.socket() for _ in range(count)]
    try:
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, dead but not yet reaped by its parent, counts as gone)."""
    try:
        state = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state



def formgrader_shows(get, lesson: str, scores: dict[str, float]) -> None:
    """The formgrader's API (`get(path)` -> JSON) lists `lesson` and each student's score, with a name and no
    "needs manual grading" (every check of the course is autograded); AssertionError naming what is wrong."""
    lessons = [a["name"] for a in get("/formgrader/api/assignments")]
    assert lesson in lessons, f"the formgrader lists no {lesson}: {lessons}"
    rows = {s["student"]: s for s in get(f"/formgrader/api/submissions/{lesson}")}
    assert set(rows) == set(scores), f"the formgrader's submissions: {sorted(rows)}, not {sorted(scores)}"
    for student, want in scores.items():
        row = rows[student]
        assert row["score"] == want, f"{student}: the formgrader shows {row['score']}, the grader gave {want}"
        assert not row["needs_manual_grade"], f"{student}: marked 'needs manual grading', though all is autograded"
        assert row["last_name"] not in (None, "None") and row["first_name"] is not None, f"{student}: no name: {row}"
