"""One control group per submission: its processes share one CPU share, one memory limit and one process cap.

A sandbox caps each process (RLIMIT_AS, RLIMIT_NPROC), but a submission that
starts many processes gets many scheduler entities and many memory limits.
A cgroup puts all of a submission's processes under one of each:

- CPU: each submission's group has the same weight (cgroup v1 `cpu.shares`,
  v2 `cpu.weight`), so 96 busy processes get the CPU one busy process would;
  the parent group of all submissions weighs as much as `workers` processes.
- memory: `memory.limit_in_bytes` (v1) or `memory.max` (v2) for all its
  processes together, its tmpfs workspace and /dev/shm included (the kernel
  charges shared memory to the group that writes it), so the limit is
  memory + disk + shm per submission.
- processes: `pids.max`.
- CPU time used: `cpuacct.usage` (v1) or `cpu.stat` usage_usec (v2), which the
  runner's deadlines read.

`make_groups` finds what it can use: cgroup v2 where the grader's own cgroup
(root, or delegated to its user) lets it enable cpu, memory and pids below it;
else cgroup v1 hierarchies for cpu, cpuacct, memory and pids that the grader
can write (as root). A process joins a group before it starts the sandbox: the
command is wrapped in `sh -c 'echo $$ > .../cgroup.procs; exec ...'`, so every
process it starts is in the group from the first. Where no group can be made,
`problem` says why, and each submission is bounded only per process.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids")
V2_CONTROLLERS = ("cpu", "memory", "pids")
SHARES = 1024  # v1 default weight of one group (v2: 100)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _own_v1() -> dict[str, Path]:
    """controller -> the folder of this process's own cgroup in that v1 hierarchy (writable), for every controller found."""
    mounts = {}
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        parts = line.split()
        if " - cgroup " not in line:
            continue
        options = parts[-1].split(",")
        for name in V1_CONTROLLERS:
            if name in options:
                mounts.setdefault(name, (Path(parts[4]), parts[3]))
    found = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        number, names, path = line.split(":", 2)
        for name in names.split(","):
            if name in mounts and name in V1_CONTROLLERS:
                mountpoint, root = mounts[name]
                relative = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
                folder = (mountpoint / relative).resolve() if relative not in (".", "") else mountpoint
                if os.access(folder, os.W_OK):
                    found[name] = folder
    return found


def _own_v2() -> Path | None:
    """This process's own cgroup v2 folder, when the unified hierarchy is mounted and it lists cpu, memory and pids."""
    mountpoint = None
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        if " - cgroup2 " in line:
            mountpoint = Path(line.split()[4])
            break
    path = next((line[3:] for line in _read(Path("/proc/self/cgroup")).splitlines() if line.startswith("0::")), None)
    if mountpoint is None or path is None:
        return None
    folder = mountpoint / path.lstrip("/")
    if not set(V2_CONTROLLERS) <= set(_read(folder / "cgroup.controllers").split()):
        return None
    return folder


class Group:
    """One submission's cgroup (in each v1 hierarchy, or one v2 folder)."""

    def __init__(self, folders: dict[str, Path], version: int):
        self.folders = folders  # controller (or "v2") -> folder
        self.version = version

    def procs_files(self) -> list[str]:
        """The cgroup.procs files a process writes its pid to, to join this group."""
        return sorted({str(f / "cgroup.procs") for f in self.folders.values()})

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` started from a shell that first moves itself into this group (then execs, so the pid stays)."""
        procs = self.procs_files()
        script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *procs, "--", *argv]

    def cpu_seconds(self) -> float | None:
        """CPU time all the group's processes have used, in seconds."""
        if self.version == 2:
            for line in _read(self.folders["v2"] / "cpu.stat").splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
            return None
        text = _read(self.folders["cpuacct"] / "cpuacct.usage").strip()
        return int(text) / 1e9 if text.isdigit() else None

    def memory_peak(self) -> int | None:
        """The most memory the group has held at once, in bytes (None where the kernel does not say)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        text = _read(self.folders["v2" if self.version == 2 else "memory"] / name).strip()
        return int(text) if text.isdigit() else None

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for the group's memory limit."""
        if self.version == 2:
            name, key = self.folders["v2"] / "memory.events", "oom_kill"
        else:
            name, key = self.folders["memory"] / "memory.oom_control", "oom_kill"
        for line in _read(name).splitlines():
            if line.split()[:1] == [key]:
                return int(line.split()[1])
        return 0

    def pids(self) -> list[int]:
        folder = self.folders["v2" if self.version == 2 else "pids"]
        return [int(p) for p in _read(folder / "cgroup.procs").split()]

    def kill_all(self, wait: float = 10.0) -> None:
        """SIGKILL every process in the group until none is left."""
        if self.version == 2 and (self.folders["v2"] / "cgroup.kill").exists():
            try:
                _write(self.folders["v2"] / "cgroup.kill", "1")
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            left = self.pids()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left and remove the group's folders."""
        self.kill_all()
        for folder in self.folders.values():
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


class Groups:
    """Where one grader makes its submissions' groups: a parent group below its own cgroup, one child per submission."""

    def __init__(self, parents: dict[str, Path], version: int):
        self.parents = parents
        self.version = version
        self.count = 0

    def make(self, memory_bytes: int, max_processes: int) -> Group:
        """A new group for one submission, with its memory limit and process cap."""
        self.count += 1
        name = f"s{self.count}-{os.urandom(3).hex()}"
        folders = {}
        try:
            for key, parent in self.parents.items():
                folder = parent / name
                folder.mkdir()
                folders[key] = folder
            group = Group(folders, self.version)
            if self.version == 2:
                folder = folders["v2"]
                _write(folder / "cpu.weight", "100")
                _write(folder / "memory.max", str(memory_bytes))
                if (folder / "memory.swap.max").exists():
                    _write(folder / "memory.swap.max", "0")
                _write(folder / "pids.max", str(max_processes))
            else:
                _write(folders["cpu"] / "cpu.shares", str(SHARES))
                _write(folders["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                _write(folders["pids"] / "pids.max", str(max_processes))
            return group
        except OSError:
            Group(folders, self.version).remove()
            raise

    def remove(self) -> None:
        """Remove the parent groups (once every submission's group is gone)."""
        for folder in self.parents.values():
            for child in [p for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []:
                Group({"x": child}, self.version).remove()
            try:
                folder.rmdir()
            except OSError:
                pass


def make_groups(workers: int, v1_first: bool = False) -> tuple[Groups | None, str | None]:
    """(Groups, None) where this grader can make a cgroup per submission; else (None, why not, in words)."""
    problems = []
    for version in ((1, 2) if v1_first else (2, 1)):
        try:
            groups = _try_v2(workers) if version == 2 else _try_v1(workers)
        except OSError as exc:
            problems.append(f"cgroup v{version}: {exc.strerror or exc}")
            continue
        if isinstance(groups, Groups):
            try:  # a trial group: the limits can really be written
                groups.make(1 << 30, 16).remove()
                groups.count = 0
            except OSError as exc:
                groups.remove()
                problems.append(f"cgroup v{version}: a group's limits cannot be set ({exc.strerror or exc})")
                continue
            return groups, None
        problems.append(f"cgroup v{version}: {groups}")
    return None, "; ".join(problems)


def _parent_name() -> str:
    return f"gpu-course-grader-{os.getpid()}-{os.urandom(2).hex()}"


def _sweep(folder: Path) -> None:
    """Remove the empty groups a grader left in `folder` when it was killed (its pid no longer runs)."""
    for stale in folder.glob("gpu-course-grader-*"):
        pid = stale.name.split("-")[3]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            for child in [p for p in stale.iterdir() if p.is_dir()]:
                try:
                    child.rmdir()
                except OSError:
                    pass
            try:
                stale.rmdir()
            except OSError:
                pass


def _try_v1(workers: int) -> Groups | str:
    own = _own_v1()
    missing = [c for c in V1_CONTROLLERS if c not in own]
    if missing:
        return f"no writable v1 hierarchy for {', '.join(missing)}"
    name = _parent_name()
    parents = {}
    try:
        for controller, folder in own.items():
            _sweep(folder)
            parents[controller] = folder / name
            parents[controller].mkdir()
        _write(parents["cpu"] / "cpu.shares", str(SHARES * max(1, workers)))
    except OSError:
        Groups(parents, 1).remove()
        raise
    return Groups(parents, 1)


def _try_v2(workers: int) -> Groups | str:
    own = _own_v2()
    if own is None:
        return "no cgroup v2 here with cpu, memory and pids available"
    if not os.access(own, os.W_OK):
        return f"{own} is not writable (not root, and not delegated to this user)"
    enabled = set(_read(own / "cgroup.subtree_control").split())
    if not set(V2_CONTROLLERS) <= enabled:
        if _read(own / "cgroup.procs").split() and own != own.parent:
            # no internal processes: move this grader's processes into a leaf first, then enable the controllers
            leaf = own / f"grader-{os.getpid()}"
            leaf.mkdir(exist_ok=True)
            for pid in _read(own / "cgroup.procs").split():
                try:
                    _write(leaf / "cgroup.procs", pid)
                except OSError:
                    return f"{own} holds processes this grader cannot move into a leaf group"
        _write(own / "cgroup.subtree_control", " ".join(f"+{c}" for c in V2_CONTROLLERS))
    _sweep(own)
    parent = own / _parent_name()
    parent.mkdir()
    try:
        _write(parent / "cpu.weight", str(min(10000, 100 * max(1, workers))))
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in V2_CONTROLLERS))
    except OSError:
        parent.rmdir()
        raise
    return Groups({"v2": parent}, 2)


def available() -> bool:
    """True when /bin/sh is there to join a group before the sandbox starts."""
    return shutil.which("sh") is not None
