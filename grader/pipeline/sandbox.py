"""Where a submission's code runs: inside bubblewrap when it is installed, else a limited subprocess.

bwrap (Debian's `bubblewrap`) gives each run: no capabilities (started as
root, bwrap would otherwise keep them all, and the code could unmount what
hides the course); the whole file system read-only,
with the course checkout, the grades folder, the submissions folder and any
other path asked for hidden under empty tmpfs mounts (the course's grader/ and
data/ and the Python environment are put back, read-only); a private /tmp
holding only the run's workspace, which is the one writable place; no network
(a fresh network namespace with only loopback); its own PID namespace, so it
sees and can signal no other process; and it dies with the grader.

The fallback (no bwrap, or GRADER_SANDBOX=none) is a plain subprocess in a
private temporary folder with the same resource limits and a scrubbed
environment. It does NOT hide files: student code can read anything the
grader's user can read (the gradebook, solutions/, hidden tests) and write
wherever that user can, and it keeps the network. The grades still come only
from the grader, so a submission cannot write its own or another student's
grade into the results; but use it only for trusted code or inside a
container that is itself the sandbox.

Both: the runner (grader.cellrunner) limits its own address space (memory),
CPU seconds and file sizes before any student code runs, and starts in a new
session so the grader can kill every process a run started. Neither limits
the number of processes (as root RLIMIT_NPROC does not apply): a fork bomb is
stopped only by the time limits.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

WORKDIR = "/tmp/work"  # where the workspace appears inside bwrap


@dataclass
class Sandbox:
    """How to start a process for one submission: its command line and environment."""

    kind: str  # "bwrap" or "none"
    hide: list[Path] = field(default_factory=list)  # folders student code must not see
    keep: list[Path] = field(default_factory=list)  # folders under a hidden one put back read-only

    def argv(self, command: list[str], workspace: Path) -> list[str]:
        """The full command line that runs `command` with `workspace` as its working folder."""
        if self.kind == "none":
            return list(command)
        args = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/tmp", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--die-with-parent", "--new-session", "--cap-drop", "ALL"]  # as root, bwrap keeps every capability
                # unless told: with them, student code could umount the tmpfs that hides the course
        for path in sorted({p.resolve() for p in self.hide}, key=lambda p: len(p.parts)):
            if path.exists() and path != Path("/"):
                args += ["--tmpfs", str(path)]
        for path in sorted({p.resolve() for p in self.keep}, key=lambda p: len(p.parts)):
            if path.exists():
                args += ["--ro-bind", str(path), str(path)]
        args += ["--bind", str(workspace), WORKDIR, "--chdir", WORKDIR, "--setenv", "HOME", WORKDIR,
                 "--setenv", "TMPDIR", WORKDIR]
        return args + ["--", *command]

    def cwd(self, workspace: Path) -> Path:
        """The folder to start the process in (outside bwrap: the workspace itself)."""
        return workspace

    def env(self, workspace: Path) -> dict[str, str]:
        """A scrubbed environment: no tokens or paths of the grader's own shell leak in."""
        home = WORKDIR if self.kind == "bwrap" else str(workspace)
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ")}
        return {**keep, "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": home, "TMPDIR": home,
                "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
                "MPLCONFIGDIR": home, "IPYTHONDIR": os.path.join(home, ".ipython")}


def bwrap_works() -> bool:
    """True when bwrap is installed and can create the namespaces it needs here."""
    import subprocess

    exe = shutil.which("bwrap")
    if not exe:
        return False
    probe = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
             "--unshare-net", "--unshare-pid", "--", "/bin/true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose(kind: str | None = None) -> str:
    """'bwrap' or 'none': the asked kind, else $GRADER_SANDBOX, else bwrap when it works here."""
    if kind in (None, "auto"):
        kind = os.environ.get("GRADER_SANDBOX") or "auto"
    if kind == "auto":
        return "bwrap" if bwrap_works() else "none"
    if kind == "bwrap" and not bwrap_works():
        raise RuntimeError("--sandbox bwrap asked for, but bwrap is not installed or cannot run here "
                           "(Debian/Ubuntu: apt-get install -y bubblewrap)")
    if kind not in ("bwrap", "none"):
        raise ValueError(f"sandbox must be auto, bwrap or none, not {kind!r}")
    return kind
