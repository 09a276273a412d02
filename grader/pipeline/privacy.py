"""Who may read what the grader writes: the instructor and their group, never the other users of the machine.

grades.csv, the results, the autograded notebooks (whose check cells hold the
hidden tests), the feedback pages and gradebook.db are made while
`private_files()` holds the process's umask at 027: files 0640, folders 0750,
whatever the shell's umask (Debian's is 022: world-readable) and wherever
`--out` lives (a shared folder under Slurm included). The out folder itself,
when the grader owns it, loses every bit for other users, so what an older
grader left in it world-readable is closed too. Feedback reaches a student
only through `nbgrader release_feedback`, never by reading the grades folder.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path

UMASK = 0o027  # group: read (and enter); other users: nothing
_lock = threading.Lock()
_depth = [0]


@contextlib.contextmanager
def private_files(*folders: Path):
    """Make `folders` (created if missing) and everything written meanwhile readable by the owner's group only."""
    with _lock:
        if _depth[0] == 0:
            _depth.append(os.umask(UMASK))
        _depth[0] += 1
    try:
        for folder in folders:
            close(folder)
        yield
    finally:
        with _lock:
            _depth[0] -= 1
            if _depth[0] == 0:
                os.umask(_depth.pop())


def close(folder: Path) -> None:
    """Create `folder` (0750) or, when this user owns it, take away what other users may do in it."""
    folder.mkdir(parents=True, exist_ok=True)
    info = folder.stat()
    if info.st_uid == os.geteuid() and info.st_mode & 0o007:
        os.chmod(folder, stat.S_IMODE(info.st_mode) & ~0o007)


def open_to_others(path: Path) -> bool:
    """True when a user who is neither `path`'s owner nor in its group can read it (every folder above enterable)."""
    try:
        if not os.stat(path).st_mode & 0o004:
            return False
        return all(os.stat(p).st_mode & 0o001 for p in Path(os.path.abspath(path)).parents)
    except OSError:
        return False


def exposed(root: Path, home: Path | None = None, homes: Path = Path("/home")) -> list[str]:
    """What of the instructor's, in the checkout and the homes, another user of this machine could read, in words."""
    found = [f"{root / name} ({why})" for name, why in (
        ("solutions", "the hidden tests"), ("tests", "the tests and the corpus"), (".git", "the solutions' history"),
        ("grades", "grades, results and autograded notebooks"), ("course", "the gradebook"))
        if (root / name).exists() and open_to_others(root / name)]
    seen = {home} if home else set()
    try:
        seen |= {p for p in homes.iterdir() if p.is_dir() and not p.is_symlink()}
    except OSError:
        pass
    found += [f"{h} (a home folder other users may enter: chmod 700 it)" for h in sorted(seen)
              if h.is_dir() and os.stat(h).st_mode & 0o005]
    return found
