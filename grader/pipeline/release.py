"""Release: student notebooks from solutions/ with nbgrader, and a learner's own workspace copy."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from grader.pipeline.tools import lessons, nbgrader


def release(root: Path, out_dir: Path | None = None, only: Iterable[str] | None = None) -> list[Path]:
    """Generate student notebooks from solutions/ with nbgrader; returns the notebooks written.

    `out_dir` defaults to notebooks/. The gradebook nbgrader keeps for this is
    thrown away: releasing never touches a class's grades.
    """
    out_dir = (out_dir or root / "notebooks").resolve()
    written = []
    for lesson in only or lessons(root):
        scratch = Path(tempfile.mkdtemp(prefix="gpu-course-release-"))
        try:
            nbgrader(
                [
                    "generate_assignment", lesson, "--force",
                    f"--CourseDirectory.root={root}",
                    f"--CourseDirectory.release_directory={scratch / 'release'}",
                    f"--CourseDirectory.db_url=sqlite:///{scratch / 'gradebook.db'}",
                ],
                cwd=root,
            )
            target = out_dir / lesson
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(scratch / "release" / lesson, target)
            written += sorted(target.glob("*.ipynb"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return written


def workspace(root: Path, target: Path) -> list[str]:
    """Copy each student notebook folder into `target` unless it is already there; returns the lessons copied.

    Learners work in their own copies, so their answers never collide with the
    release in notebooks/ (which `git pull` and the tests expect untouched).
    """
    copied = []
    target.mkdir(parents=True, exist_ok=True)
    for lesson in lessons(root):
        if not (target / lesson).exists():
            shutil.copytree(root / "notebooks" / lesson, target / lesson)
            copied.append(lesson)
    return copied
