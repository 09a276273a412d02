"""Release: student notebooks from solutions/ with nbgrader, and a learner's own workspace copy."""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Iterable

import nbformat

from grader.pipeline.tools import lessons, nbgrader


def release(root: Path, out_dir: Path | None = None, only: Iterable[str] | None = None) -> list[Path]:
    """Generate student notebooks from solutions/ with nbgrader; returns the notebooks written.

    `out_dir` defaults to notebooks/. The gradebook nbgrader keeps for this is
    thrown away: releasing never touches a class's grades.
    """
    out_dir = (out_dir or root / "notebooks").resolve()
    wanted = list(only or lessons(root))
    written = []
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-release-"))
    try:
        # One nbgrader process for every lesson (its assignment id is a glob): each process pays nbgrader's start-up,
        # about 3.5 s here, which nine lessons paid nine times (34 s against 5 s for the whole release).
        nbgrader(
            [
                "generate_assignment", wanted[0] if len(wanted) == 1 else "*", "--force",
                f"--CourseDirectory.root={root}",
                f"--CourseDirectory.release_directory={scratch / 'release'}",
                f"--CourseDirectory.db_url=sqlite:///{scratch / 'gradebook.db'}",
            ],
            cwd=root,
        )
        for lesson in wanted:
            made = scratch / "release" / lesson
            if not any(made.glob("*.ipynb")):
                raise RuntimeError(f"nbgrader generate_assignment made no notebook for {lesson} (under {made})")
            target = out_dir / lesson
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(made, target)
            written += sorted(target.glob("*.ipynb"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return written


# What the learner's index says about kernels; grader.pipeline.lab's culling flags use the same numbers.
CULL_IDLE_MINUTES = 30
INDEX = "00_START_HERE.ipynb"


def workspace(root: Path, target: Path) -> list[str]:
    """Copy each student notebook folder into `target` unless it is already there; returns the lessons copied.

    Learners work in their own copies, so their answers never collide with the
    release in notebooks/ (which `git pull` and the tests expect untouched). Every
    call also refreshes `target`/data/ (a read-only copy of data/, for the learner's
    eyes: the lessons read data through the package) and rewrites the course index,
    `target`/00_START_HERE.ipynb.
    """
    copied = []
    target.mkdir(parents=True, exist_ok=True)
    for lesson in lessons(root):
        if not (target / lesson).exists():
            shutil.copytree(root / "notebooks" / lesson, target / lesson)
            copied.append(lesson)
    copy_data(root, target / "data")
    nbformat.write(course_index(root, target), str(target / INDEX))
    return copied


def copy_data(root: Path, target: Path) -> None:
    """Replace `target` with a copy of data/ whose files are read-only (a learner reads them, never edits them)."""
    if target.exists():
        for folder, _, files in os.walk(target):  # make it removable again
            os.chmod(folder, 0o755)
        shutil.rmtree(target)
    shutil.copytree(root / "data", target)
    for folder, _, files in os.walk(target):
        for name in files:
            os.chmod(os.path.join(folder, name), stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


def _lesson_table(root: Path) -> dict[str, tuple[str, str]]:
    """{"01": (the question, what you write)} from the README's lesson table."""
    rows = {}
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    for match in re.finditer(r"^\| (\d\d) \| [^|]+\| ([^|]+)\| ([^|]+)\|\s*$", text, re.M):
        rows[match.group(1)] = (match.group(2).strip(), match.group(3).strip())
    return rows


def _title(notebook: Path) -> str:
    """A lesson's first heading, without the '#'."""
    nb = nbformat.read(str(notebook), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return notebook.stem


def course_index(root: Path, target: Path) -> nbformat.NotebookNode:
    """The page `make lab` opens: the lessons in order with links, where data/ is, resetting a lesson, kernels."""
    table = _lesson_table(root)
    lines = ["# Why is it slow? Will it fit?", "",
             "Your own copies of the lessons are in this folder: your answers stay here, and "
             "`git pull` never overwrites them. Open the lessons in order:", "",
             "| lesson | what it asks | you write |", "|---|---|---|"]
    for lesson in lessons(root):
        notebook = f"{lesson}/{lesson}.ipynb"
        question, you_write = table.get(lesson[:2], ("", ""))
        title = _title(root / "notebooks" / notebook)  # the release, not the learner's copy (which may not parse)
        short, _, rest = title.partition(":")
        lines.append(f"| [{short.strip()}]({notebook}) | {question or rest.strip()} | {you_write} |")
    data_files = sorted(p.relative_to(target / "data").as_posix() for p in (target / "data").rglob("*") if p.is_file())
    lines += [
        "", "## How a lesson works", "",
        "Each exercise is a small function to write, then a **check** cell that says what is wrong in plain "
        "words. Cells that only *show* something skip, with a one-line note, until the exercise they use is done. "
        "**Run All stops at the first unfinished exercise**: finish it, then run again.", "",
        "## The data", "",
        "The figures the lessons cannot measure on this machine (datasheets, model shapes, recorded GPU runs) "
        # A link to a folder opens "data is a directory, not a file" in JupyterLab: link its files only.
        "are in the folder `data/` (in the file browser on the left), each with its source: "
        + ", ".join(f"[{f}](data/{f})" for f in data_files) + ". "
        "They are a read-only copy, refreshed every time you run `make lab`; the lessons read the course's own.", "",
        "## Starting a lesson again", "",
        "Rename or delete its folder here (for example `01_crossover/`), then run `make lab` again: "
        "it copies a fresh blank lesson in. Nothing else is ever overwritten.", "",
        "## Kernels and memory", "",
        "Every open notebook has its own Python process (a *kernel*), and a lesson's kernel can hold 0.5 GB or "
        f"more. A kernel whose notebook tab is closed is shut down after **{CULL_IDLE_MINUTES} minutes** idle; "
        "a kernel whose notebook is still open keeps running. To free memory now: *Kernel ▸ Shut Down All "
        "Kernels*, or the *Running Terminals and Kernels* tab on the left (the square-in-a-circle icon) ▸ "
        "*Shut Down All*. Your saved work is not affected.", "",
        "To stop the course, press Ctrl-C in the terminal where you ran `make lab`.",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("\n".join(lines), id="start-here")]
    # The language_info the kernel reports, so opening the index does not mark it as changed.
    version = ".".join(map(str, sys.version_info[:3]))
    nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                   "language_info": {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                                     "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                                     "pygments_lexer": "ipython3", "version": version}}
    return nb
