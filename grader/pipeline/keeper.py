"""Between the grader and a runner started without bwrap: a process cap, and no process left behind.

    python -I -m grader.pipeline.keeper --max-processes N [--uid U] -- COMMAND...   (started by grader.pipeline.sandbox)

Without bwrap there is no PID namespace whose end kills everything, and a
child can leave its process group (setsid), so killing the group is not
enough. The keeper makes itself a child subreaper (PR_SET_CHILD_SUBREAPER):
every process COMMAND starts, orphaned or double-forked, stays its
descendant. It starts COMMAND, counts its descendants every few
milliseconds, and kills them all when there are more than N (a fork bomb),
when COMMAND ends, or when the grader asks (SIGTERM, or the grader dying:
PR_SET_PDEATHSIG). It exits as COMMAND did (killed by the same signal).

With --uid U (the grader is root), COMMAND runs as uid and gid U with no
other groups and RLIMIT_NPROC of N, while the keeper stays root: the
submission cannot signal the keeper (or the grader), so it cannot kill its
way out of the watch. Without it (the grader is an ordinary user), COMMAND
runs as the keeper's own user and can kill the keeper; it then dies with it
(PR_SET_PDEATHSIG), but a process it started in a session of its own may be
left behind (README says so).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
TOO_MANY = 117  # exit status when the process cap was hit


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`: from /proc/PID/task/TID/children when the kernel has it, else all of /proc."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            kids = [int(k) for tid in os.listdir(f"/proc/{parent}/task")
                    for k in _read(f"/proc/{parent}/task/{tid}/children").split()]
        except (OSError, ValueError):
            return _descendants_from_stat(pid) if parent == pid else found
        found += kids
        todo += kids
    return found


def _read(path: str) -> str:
    """A /proc file's text ('' when the process is gone)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode()
    except OSError:
        return ""


def _descendants_from_stat(pid: int) -> list[int]:
    """Every live process below `pid`, from the parent pids in all of /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        if stat:
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_all(pid: int) -> None:
    """SIGKILL every descendant of `pid` until none is left (a fork bomb forks while it is being killed)."""
    for _ in range(200):
        left = descendants(pid)
        if not left:
            return
        for child in left:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    """Run the command under the keeper's watch."""
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]  # --max-processes N [--uid U] -- COMMAND...
    cap = int(options[options.index("--max-processes") + 1])
    uid = int(options[options.index("--uid") + 1]) if "--uid" in options else None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    me = os.getpid()
    if uid is not None:
        def become():  # in the child, before exec: the cap counts this uid's processes (one uid per run)
            import resource

            resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

        child = subprocess.Popen(command, close_fds=False, preexec_fn=become)
    else:
        child = subprocess.Popen(command, close_fds=False)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.closerange(3, 1 << 16)  # the result pipe is the runner's alone: the grader sees its end when the runner dies
    status, too_many = None, False
    while status is None and not stop:
        status = child.poll()
        if status is None:
            too_many = len(descendants(me)) > cap
            if too_many:
                break
            time.sleep(0.02)
    kill_all(me)
    if status is None:
        status = child.wait()
    if too_many:
        sys.stdout.write(f"grader: more than {cap} processes at once (the process cap); all were killed\n")
        sys.stdout.flush()
        return TOO_MANY
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(me, -status)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
