"""Where a submission's code runs: inside bubblewrap, or (only when asked for by name) a plain subprocess.

bwrap (Debian's `bubblewrap`) gives each run of the cell runner:

- an empty root with only what a run needs, read-only: /usr (and the
  merged-/usr links /bin, /lib...), the dynamic loader's files and fonts of
  /etc, the course's grader/ and data/, and the Python it runs (its prefix,
  venv and site-packages). No /home, /root, /run, /var, /srv, /opt or /mnt:
  no other user's files and no Unix socket of the host (munge's, D-Bus's, a
  database's), which a fresh network namespace does not cover. A folder
  asked to be hidden inside one of these is an empty tmpfs;
- a workspace (/tmp/work, also HOME and TMPDIR) that is a size-limited tmpfs of
  its own: nothing a submission writes lands on the host's disk, it can write
  no more than the disk quota, and it is gone when its runner ends (a restarted
  runner starts from an empty one); /dev/shm is a small tmpfs of its own too;
- no network (a fresh network namespace with only loopback), its own PID
  namespace, so it sees and can signal no other process, and when its first
  process ends (or the grader dies) the kernel kills every process in it: no
  child, double-forked or not, outlives its submission;
- no capabilities, and a process cap: started as root, the runner is switched
  (setpriv) to a uid of its own, one per run, that owns nothing on the host, so
  RLIMIT_NPROC (which root ignores) holds and root-only files are unreadable;
  started as an ordinary user, bwrap makes a user namespace and the cap counts
  only the processes in it.

The fallback ("none") is a plain subprocess in a private temporary folder
with the same memory and time limits and a scrubbed environment. A keeper
process (grader.pipeline.keeper) between the grader and the runner caps the
number of processes and kills every process the run started, setsid'd or
double-forked ones included, when the run ends. It does NOT hide files, cap
disk use or stop the network: student code can read anything the grader's
user can read (the gradebook, solutions/, hidden tests) and write wherever
that user can. It is used only when asked for by name (`--sandbox none`,
Settings(sandbox="none") or GRADER_SANDBOX=none): `auto` without a working
bwrap is an error, not a silent fallback.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

WORKDIR = "/tmp/work"  # where the workspace appears inside bwrap
UID_BASE = 1_900_000_000  # the runner's uid when the grader is root: UID_BASE + a slot, one per run at a time
PROBE_UID = UID_BASE - 1  # the uid bwrap_problem's probe runs as: never a run's
_slots: dict[int, int] = {}  # slot -> the descriptor holding its flock
_slots_lock = threading.Lock()


class SandboxUnavailable(RuntimeError):
    """No sandbox that gives the promised guarantees can run here, and none was asked for by name."""


@dataclass
class Sandbox:
    """How to start a process for one submission: its command line and environment."""

    kind: str  # "bwrap" or "none"
    hide: list[Path] = field(default_factory=list)  # folders student code must not see
    keep: list[Path] = field(default_factory=list)  # folders under a hidden one put back read-only
    disk_bytes: int = 512 * 1024**2  # the workspace's size (bwrap: a tmpfs)
    shm_bytes: int = 64 * 1024**2  # /dev/shm's size (bwrap)
    max_processes: int = 128  # processes (threads count too) a run may have at once

    def other_uid(self) -> bool:
        """True when (no sandbox) the runner gets a uid of its own, so it cannot signal the grader or its keeper.

        Only as root, and only where another uid can run the grader's Python
        (a Python under /root, mode 0700, cannot): see other_uid_problem.
        """
        return self.kind == "none" and other_uid_problem() is None

    def argv(self, command: list[str], workspace: Path, uid: int | None = None, zygote: bool = False) -> list[str]:
        """The full command line that runs `command` with `workspace` as its working folder.

        `zygote` (bwrap, as root): the warm runner's zygote (grader.pipeline.zygote), which stays root with only
        the capabilities each fork needs to confine itself (namespaces, mounts, its uid) and drops before any
        student code runs; no setpriv and no prlimit around it.
        """
        if self.kind == "none":  # as root, the keeper stays root and starts the runner as `uid`: it cannot be killed
            who = ["--uid", str(uid)] if uid is not None else []
            return [sys.executable, "-I", "-m", "grader.pipeline.keeper", "--max-processes", str(self.max_processes),
                    *who, "--", *command]
        root = os.geteuid() == 0
        if zygote and not root:
            raise ValueError("the warm runner's zygote is used only when the grader is root")
        # an empty root (bwrap's own tmpfs), then only what the runner needs: no host file is there unless named
        args = [shutil.which("bwrap") or "bwrap", *_system_mounts(), "--dev", "/dev",
                "--perms", "1777", "--size", str(int(self.shm_bytes)), "--tmpfs", "/dev/shm",
                "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-net", "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if root:  # only what setpriv needs to become the run's own uid; it drops them and can never get them back
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
            if zygote:  # and what each fork needs to make its namespaces, mounts and loopback first
                args += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_NET_ADMIN"]
        else:
            args += ["--unshare-user"]  # the process cap then counts this namespace's processes only
        args += _kept_mounts([p for p in self.keep if p.exists()], [p for p in self.hide if p.exists()])
        args += ["--perms", "0777", "--size", str(int(self.disk_bytes)), "--tmpfs", WORKDIR,
                 "--remount-ro", "/", "--chdir", WORKDIR, "--setenv", "HOME", WORKDIR, "--setenv", "TMPDIR", WORKDIR,
                 "--"]
        if zygote:
            return args + command
        if root:
            who = str(UID_BASE if uid is None else uid)
            args += [shutil.which("setpriv") or "setpriv", "--reuid", who, "--regid", who, "--clear-groups",
                     "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        cap = str(int(self.max_processes))
        return args + [shutil.which("prlimit") or "prlimit", f"--nproc={cap}:{cap}", "--", *command]

    def cwd(self, workspace: Path) -> Path:
        """The folder to start the process in (outside bwrap: the workspace itself)."""
        return workspace

    def env(self, workspace: Path) -> dict[str, str]:
        """A scrubbed environment: no tokens or paths of the grader's own shell leak in."""
        home = WORKDIR if self.kind == "bwrap" else str(workspace)
        keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ")}
        return {**keep, "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": home, "TMPDIR": home,
                "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
                "MPLCONFIGDIR": home, "IPYTHONDIR": os.path.join(home, ".ipython")}


SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # programs, libc, the dynamic loader
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/fonts")  # ld.so, time, fonts


def _system_mounts() -> list[str]:
    """bwrap arguments for the system's programs and libraries, read-only: a merged-/usr link stays a link.

    Nothing else of the host is there: no /home, /root, /run, /var, /srv,
    /opt or /mnt, so no other user's files and no Unix socket of the host
    (munge's, D-Bus's, a database's): a fresh network namespace does not
    cover a socket file, only an empty file system does.
    """
    args = ["--perms", "0755", "--dir", "/etc"]  # made with the grader's umask otherwise: the run's uid could not enter
    for name in (*SYSTEM_DIRS, *SYSTEM_FILES):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.exists(name):
            args += ["--ro-bind", name, name]
    return args


def _kept_mounts(keep: list[Path], hide: list[Path]) -> list[str]:
    """bwrap arguments that put back the kept folders, read-only, with any hidden folder inside one made empty.

    Outermost first, a hidden folder before a kept one at the same depth (a
    folder both kept and hidden is kept); each folder made on the way gets
    mode 0755, whatever the grader's umask, so the run's own uid can enter it.
    """
    kept = {p.resolve() for p in keep}
    hidden = {p.resolve() for p in hide if p.resolve() != Path("/")} - kept
    system = {Path(os.path.realpath(d)) for d in SYSTEM_DIRS if os.path.exists(d)}
    shown = kept | system
    hidden = {h for h in hidden if any(k in h.parents for k in shown)}  # elsewhere nothing is there to hide

    def nearest(path: Path) -> str:
        """'keep' or 'hide': what the innermost folder above `path` that is either does to it ('hide' if none)."""
        above = [(len(p.parts), kind) for p, kind in [*((k, "keep") for k in shown), *((h, "hide") for h in hidden)]
                 if p in path.parents]
        return max(above)[1] if above else "hide"

    kept = {k for k in kept if nearest(k) == "hide" and k not in system}  # one inside a shown folder is there already
    args: list[str] = []
    made: set[Path] = {Path("/tmp")}  # an empty tmpfs already
    for path, kind in sorted([(p, "keep") for p in kept] + [(h, "hide") for h in hidden],
                             key=lambda x: (len(x[0].parts), x[1] == "keep", str(x[0]))):
        for parent in reversed(path.parents):  # folders bwrap would make with the grader's umask: 0755
            inside_shown = any(k == parent or k in parent.parents for k in shown if k != path)
            if parent != Path("/") and not inside_shown and parent not in made:
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        if kind == "hide":
            args += ["--tmpfs", str(path)]
        else:
            args += ["--ro-bind", str(path), str(path)]
    return args


def take_uid() -> int | None:
    """A uid no other run uses now, on this machine (when the grader is root, each run gets its own process cap).

    Runs in other grader processes (another class, pytest-xdist workers) count
    too: slot N is held with flock on a file in /run/lock (or the temporary
    folder), which the kernel lets go of when its holder dies. Only root needs
    (or may switch to) such a uid: for anyone else this returns None and
    touches nothing, so graders of other users never meet root's lock folder.
    """
    if os.geteuid() != 0:
        return None
    folder = Path("/run/lock" if os.access("/run/lock", os.W_OK) else tempfile.gettempdir()) / "gpu-course-grader-uids"
    folder.mkdir(mode=0o700, exist_ok=True)
    with _slots_lock:
        for slot in itertools.count():
            if slot in _slots:
                continue
            fd = os.open(folder / str(slot), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if uid_in_use(UID_BASE + slot):  # left behind by a grader that died: not this one
                os.close(fd)
                continue
            _slots[slot] = fd
            return UID_BASE + slot


def give_uid(uid: int, wait: float = 5.0) -> None:
    """Give back a uid from take_uid once no process runs as it (the kernel takes a moment to end a PID namespace).

    A uid still in use after `wait` seconds stays taken while this grader
    runs, so the next run's process cap never counts another run's processes.
    """
    deadline = time.monotonic() + wait
    while uid_in_use(uid):
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)
    with _slots_lock:
        fd = _slots.pop(uid - UID_BASE, None)
    if fd is not None:
        os.close(fd)  # closing the only descriptor lets go of the flock


def uid_in_use(uid: int) -> bool:
    """True when some process runs as `uid` (from /proc)."""
    wanted = f"\t{uid}\t".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status", "rb") as f:
                    status = f.read()
            except OSError:
                continue
            line = next((x for x in status.splitlines() if x.startswith(b"Uid:")), b"")
            if wanted in line + b"\t":
                return True
    return False


_other_uid_problem: list[str | None] = []


def other_uid_problem() -> str | None:
    """Why a runner without bwrap cannot run as a uid of its own here, in words; None when it can (probed once)."""
    import subprocess

    if not _other_uid_problem:
        if os.geteuid() != 0:
            _other_uid_problem.append("the grader is not root")
        else:
            def become():
                os.setgroups([])
                os.setgid(PROBE_UID)
                os.setuid(PROBE_UID)

            try:
                probe = subprocess.run([sys.executable, "-I", "-c", "import grader.pipeline.cellrunner"], cwd="/",
                                       capture_output=True, timeout=60, preexec_fn=become)
                why = None if probe.returncode == 0 else probe.stderr.decode("utf-8", "replace").strip()[-200:]
            except (OSError, subprocess.SubprocessError) as exc:
                why = str(exc)
            _other_uid_problem.append(f"another uid cannot run the grader's Python ({why})" if why else None)
    return _other_uid_problem[0]


def bwrap_works() -> bool:
    """True when bwrap (and setpriv, prlimit) are installed and can do here all that Sandbox asks of them."""
    return bwrap_problem() is None


def bwrap_problem() -> str | None:
    """Why bwrap cannot run a submission here, in words; None when it can."""
    import subprocess

    for tool in ("bwrap", "prlimit", *(["setpriv"] if os.geteuid() == 0 else [])):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    box = Sandbox("bwrap", disk_bytes=1 << 20, shm_bytes=1 << 20)
    try:
        probe = subprocess.run(box.argv(["/bin/true"], Path("/"), uid=PROBE_UID), capture_output=True, timeout=30, env=box.env(Path("/")))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not start: {exc}"
    if probe.returncode != 0:
        why = probe.stderr.decode("utf-8", "replace").strip()[-300:]
        return f"bwrap failed here ({why or f'exit status {probe.returncode}'})"
    return None


NO_SANDBOX = ("Without bubblewrap, student code could read solutions/ and the gradebook, write to the disk and "
              "leave processes behind. Install it (0.8 or newer, for tmpfs sizes; Debian/Ubuntu: apt-get install -y "
              "bubblewrap; it needs setpriv and prlimit from util-linux, and user namespaces), or, for trusted code or inside a container "
              "that is itself the sandbox, ask for no sandbox by name: --sandbox none (Settings(sandbox='none'), "
              "GRADER_SANDBOX=none)")


def choose(kind: str | None = None) -> str:
    """'bwrap' or 'none': the asked kind, else $GRADER_SANDBOX, else bwrap; 'none' only when asked for by name."""
    if kind in (None, "auto"):
        kind = os.environ.get("GRADER_SANDBOX") or "auto"
    if kind not in ("auto", "bwrap", "none"):
        raise ValueError(f"sandbox must be auto, bwrap or none, not {kind!r}")
    problem = bwrap_problem() if kind in ("auto", "bwrap") else None
    if problem:
        raise SandboxUnavailable(f"cannot grade a class with sandbox {kind!r}: {problem}. {NO_SANDBOX}")
    return "bwrap" if kind == "auto" else kind
