"""A warm runner: Python, torch and a lesson's checks imported once, forked and confined for each submission.

    python -I -B -u -m grader.pipeline.zygote --control-fd N MODULE...
    (started by grader.pipeline.runner inside bwrap, as root; never by hand)

Starting the cell runner costs a fresh Python about 3 s of CPU (torch, numpy,
pandas, matplotlib, IPython and the course) before a student's first cell,
most of what a submission costs. The zygote pays that once: it lives in a
bwrap sandbox like any runner's (the same read-only root; no /home, /run,
solutions/ or grades; no network), imports everything, and then only forks.
For each submission the grader hands it, over a Unix socket, the pipes of one
runner (requests, results, log), a control socket and the submission's
cgroup.procs files, and one fork becomes that submission's runner:

    zygote --fork--> holder: joins the cgroup, unshares mount, PID, network,
                     IPC and UTS namespaces, mounts a fresh /tmp, workspace
                     (/tmp/work, the disk quota) and /dev/shm, brings up
                     loopback; tells the grader its child's pid and waits
       --fork--> init: PID 1 of the new PID namespace; mounts a /proc that
                 shows only that namespace, drops every capability, reaps
                 orphans; when the runner ends it exits, and the kernel ends
                 every process left in the namespace
         --fork--> runner: its own session, RLIMIT_NPROC, then the run's own
                   uid (one per submission, take_uid) with no capabilities,
                   no inheritable or bounding set and no_new_privs; memory,
                   CPU and file limits; fresh seeds for random, numpy and
                   torch and its own thread settings; then cells
                   (grader.pipeline.cellrunner.serve), exactly as a cold one.

Nothing of another submission is there: each runner has its own tmpfs, /proc,
PID, network and IPC namespaces and uid; the zygote holds no submission's data
(the grader sends it only file descriptors) and never runs student code. What
a fork shares with the zygote and with every other fork of it is what the
zygote had before forking: the same imported modules, the same address-space
layout (ASLR is per zygote, not per submission), and Python's string hash seed
(hash randomisation is fixed when Python starts and cannot be changed later:
set and dict iteration orders of strings are the same in every submission of
one run, and differ between runs). `random` is reseeded by Python at fork;
numpy's and torch's global generators are reseeded from the OS here.

A fork of a process with more than one thread copies only the forking thread:
a lock another thread held stays locked forever, and an OpenMP or torch
intra-op pool that was started is unusable in the child (GNU libgomp does not
support fork after a parallel region). The zygote never runs a torch op, and
before every fork it checks that it has exactly one thread
(/proc/self/task: a pool that was started keeps its worker threads);
otherwise it refuses to fork, says why, and exits, and the grader starts
runners the cold way. Each runner then starts its own pools, at its own thread
count (`OMP_NUM_THREADS`, 1 by default).

The zygote runs as root with CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID,
CAP_SETGID and CAP_SETPCAP inside its bwrap (nothing else), because each fork
must make namespaces and mounts and change uid before any student code runs;
it reads only what the grader sends on its control socket. It is used only
when the grader is root (so each submission has a uid of its own); otherwise
each runner is started cold in a bwrap of its own, as before.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_READ, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 23, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
WORKDIR = "/tmp/work"
# imported (never run) before any fork: what lessons and their checks import, and what torch imports lazily at the
# first autograd step or optimizer (torch._dynamo and its ~900 modules: seconds in every fork otherwise)
PRELOAD = ("numpy", "pandas", "matplotlib", "matplotlib.pyplot", "IPython.core.interactiveshell", "torch.optim",
           "torch._dynamo")
MAX_FDS = 8  # requests, results, log, control, and at most four cgroup.procs files

_libc = ctypes.CDLL(None, use_errno=True)


class ForkRefused(RuntimeError):
    """The zygote is not in a state a fork is safe from (more than one thread, a started thread pool)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def threads() -> int:
    """How many threads this process has now (/proc/self/task)."""
    return len(os.listdir("/proc/self/task"))


def fork_problem() -> str | None:
    """Why forking this process now would be unsafe, in words; None when it is safe (it has one thread).

    torch's intra-op pool (OpenMP's, or torch's native one) and its inter-op
    pool create their worker threads at the first op that uses them, and keep
    them: a zygote that ran a parallel op, or anything else that started a
    thread, shows more than one task in /proc/self/task. One thread means no
    lock is held by a thread the fork would not copy and no pool exists to be
    broken in the child.
    """
    count = threads()
    if count != 1:
        return (f"the zygote has {count} threads (a fork copies only one: a lock another thread held, or a thread pool "
                "torch or OpenMP started, would be broken in the child)")
    return None


def preload(modules: list[str]) -> None:
    """Import what every runner needs, before any fork: the course's checks and the libraries lessons use."""
    import warnings

    import torch  # noqa: F401

    for name in (*PRELOAD, *modules):
        try:
            __import__(name)
        except ImportError:
            if name in modules:
                raise
    warnings.resetwarnings()


def serve_forks(control_fd: int, modules: list[str]) -> int:
    """The zygote's loop: one fork per request on the control socket, until the grader closes it."""
    control = socket.socket(fileno=control_fd)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    preload(modules)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # holders are reaped by the kernel
    problem = fork_problem()
    control.sendall(json.dumps({"ready": problem is None, "problem": problem}).encode() + b"\n")
    if problem:
        return 3
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 1 << 16, MAX_FDS)
        except OSError:
            return 0
        if not data:
            return 0
        try:
            request = json.loads(data)
            problem = fork_problem()
            if problem:
                raise ForkRefused(problem)
            pid = os.fork()
        except BaseException as exc:  # noqa: BLE001  said to the grader, which then starts runners cold
            for fd in fds:
                os.close(fd)
            control.sendall(json.dumps({"forked": False, "problem": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
            if isinstance(exc, ForkRefused):
                return 3
            continue
        if pid == 0:
            try:
                control.close()
                _holder(request, fds)
            except BaseException as exc:  # noqa: BLE001
                try:
                    os.write(2, f"grader: the warm runner could not be confined: {exc}\n".encode())
                finally:
                    os._exit(125)
            os._exit(0)
        for fd in fds:
            os.close(fd)
        control.sendall(json.dumps({"forked": True}).encode() + b"\n")


def _holder(request: dict, fds: list[int]) -> None:
    """In the fork: join the cgroup, make the namespaces and mounts, start init; then report the runner's end."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    requests, results, log, ctl, *procs = fds
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    for fd in procs:  # before anything else: every process below this one is the submission's, in its cgroup
        os.write(fd, b"0")
        os.close(fd)
    os.dup2(log, 1)
    os.dup2(log, 2)
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID), "unshare")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    disk, shm = int(request["disk_bytes"]), int(request["shm_bytes"])
    _mount_tmpfs("/tmp", "size=1m,mode=0755")  # the zygote's own /tmp is not there; root's, as in a cold bwrap
    os.mkdir(WORKDIR, 0o777)
    _mount_tmpfs(WORKDIR, f"size={disk},mode=0777")
    _mount_tmpfs("/dev/shm", f"size={shm},mode=1777")
    if os.path.isdir("/dev/pts"):  # its own pseudo-terminals (bwrap's /dev/ptmx points into /dev/pts)
        _check(_libc.mount(b"devpts", b"/dev/pts", b"devpts", MS_NOSUID | MS_NOEXEC,
                           b"newinstance,ptmxmode=0666,mode=620"), "mount /dev/pts")
    _loopback_up()
    init = os.fork()
    if init == 0:
        _init(request, requests, results, log, ctl)
    for fd in (requests, results, log):
        os.close(fd)
    control = socket.socket(fileno=ctl)
    control.sendall(f"pid {init}\n".encode())
    _, status = _wait_keeping(init)
    control.sendall(f"exit {status}\n".encode())
    while control.recv(64):  # the grader has killed what it wanted: until then the init's pid is not reused
        pass
    os.waitpid(init, 0)


def _wait_keeping(pid: int) -> tuple[int, int]:
    """Wait for `pid` to end without reaping it (its pid stays taken); (pid, status as bwrap reports it)."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    code = info.si_status if info.si_code == os.CLD_EXITED else 128 + info.si_status
    return pid, code


def _mount_tmpfs(target: str, options: str) -> None:
    _check(_libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()), f"mount {target}")


def _loopback_up() -> None:
    """Bring up `lo` in the fresh network namespace (as bwrap does): loopback only, nothing outside."""
    import fcntl

    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def _drop_capabilities() -> None:
    """No capability left in any set: bounding (needs CAP_SETPCAP, so first), ambient, then the rest."""
    _drop_bounding_set()
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header = struct.pack("II", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)  # effective, permitted, inheritable: all zero, for both 32-bit words
    _check(_libc.capset(ctypes.c_char_p(header), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _drop_bounding_set() -> None:
    """Drop every capability still in the bounding set (PR_CAPBSET_READ), so none can come back by an exec."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        if _libc.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1:
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop the bounding set")


def _init(request: dict, requests: int, results: int, log: int, ctl: int) -> None:
    """PID 1 of the submission's PID namespace: its own /proc, no capabilities, reaps orphans, ends with the runner."""
    try:
        os.close(ctl)
        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        _check(_libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")
        runner = os.fork()
        if runner == 0:
            _runner(request, requests, results, log)
        for fd in (requests, results, log):
            os.close(fd)
        _drop_capabilities()
        os.closerange(3, 1 << 16)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == runner:
                os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    except BaseException as exc:  # noqa: BLE001
        os.write(2, f"grader: the warm runner's init failed: {exc}\n".encode())
        os._exit(125)


def _runner(request: dict, requests: int, results: int, log: int) -> None:
    """The submission's runner: confined, then the cell loop; never returns."""
    code = 1
    try:
        import random
        import resource

        _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        os.setsid()
        os.dup2(requests, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        result_fd = os.dup(results)
        for fd in (requests, results, log):
            os.close(fd)
        keep = {0, 1, 2, result_fd}
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        cap, uid = int(request["max_processes"]), int(request["uid"])
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
        _drop_bounding_set()  # first (it needs CAP_SETPCAP); then the uid: leaving uid 0 clears the other sets
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        _drop_capabilities()  # inheritable and ambient too, and no_new_privs
        if os.getuid() != uid or os.geteuid() != uid or _capabilities() != 0:
            raise PermissionError("the runner did not lose root")
        os.chdir(WORKDIR)
        random.seed()
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed()
        torch = sys.modules["torch"]
        torch.seed()
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS") or 1)))
        from grader.pipeline import cellrunner

        _fits(float(request["memory_gib"]))
        code = cellrunner.serve(result_fd, float(request["memory_gib"]), list(request["modules"]))
    except BaseException as exc:  # noqa: BLE001  said in the runner's log, as a cold runner's traceback would be
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        code = 1 if not isinstance(exc, SystemExit) else exc.code if isinstance(exc.code, int) else 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _fits(gib: float) -> None:
    """MemoryError when the memory limit is smaller than what this fork already holds (Python, torch, the checks).

    A cold runner under such a limit cannot import torch; a fork has it
    already, and would blame every student's cell for the limit instead.
    """
    for line in open("/proc/self/status").read().splitlines():
        if line.startswith("VmSize:"):
            size = int(line.split()[1]) * 1024
            if size >= gib * 1024**3:
                raise MemoryError(f"the memory limit ({gib:g} GiB of address space) is smaller than what Python, "
                                  f"torch and the checks take before any cell ({size / 1024**3:.2f} GiB)")


def _capabilities() -> int:
    """Every capability set of this process, OR-ed (/proc/self/status): 0 when it holds none."""
    found = 0
    for line in open("/proc/self/status").read().splitlines():
        if line.startswith(("CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:")):
            found |= int(line.split()[1], 16)
    return found


if __name__ == "__main__":
    sys.exit(serve_forks(int(sys.argv[2]), sys.argv[3:]))  # --control-fd N MODULE...
