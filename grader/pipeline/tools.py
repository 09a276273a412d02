"""Shared by the pipeline's steps: where the course is, its lessons, and running nbgrader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def find_root(start: Path | None = None) -> Path:
    """The course checkout: the nearest folder at or above `start` holding nbgrader_config.py and solutions/."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "nbgrader_config.py").is_file() and (folder / "solutions").is_dir():
            return folder
    raise FileNotFoundError(
        f"no course checkout at or above {here}: run this from the course folder (the one with "
        "nbgrader_config.py and solutions/), or pass --root."
    )


def lessons(root: Path) -> list[str]:
    """Lesson ids (NN_topic) in order, from solutions/."""
    return sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())


def tool_env() -> dict[str, str]:
    """The environment for nbgrader and papermill: this interpreter's bin first on PATH (nbgrader runs alembic)."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def nbgrader(args: list[str], cwd: Path, quiet: bool = True) -> subprocess.CompletedProcess:
    """Run one nbgrader command in `cwd`; raise with nbgrader's own log if it fails."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=tool_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`nbgrader {' '.join(args)}` failed in {cwd}:\n{proc.stdout}\n{proc.stderr}")
    if not quiet:
        sys.stdout.write(proc.stdout)
    return proc
