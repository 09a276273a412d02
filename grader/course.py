"""The course pipeline: release, run and autograde, driven as nbgrader and papermill intend.

Every step shells out to the tools' own entry points (nbgrader's commands,
papermill's execute_notebook) with the course's settings, so an instructor can
reproduce any step by hand. The command-line interface is in grader.cli.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import nbformat


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


# --- release ----------------------------------------------------------------------------------


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


# --- a learner's workspace -------------------------------------------------------------------


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


# --- run --------------------------------------------------------------------------------------


def run(
    root: Path,
    only: Iterable[str] | None = None,
    parameters: dict | None = None,
    out_dir: Path | None = None,
    student: bool = False,
    log=print,
) -> list[tuple[str, float, str]]:
    """Execute lessons with papermill; returns (lesson, seconds, status) for each, printing a line per notebook."""
    import papermill

    out_dir = (out_dir or root / "runs").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    source = root / ("notebooks" if student else "solutions")
    chosen = list(only or lessons(root))
    results = []
    for i, lesson in enumerate(chosen, 1):
        notebook = source / lesson / f"{lesson}.ipynb"
        output = out_dir / f"{lesson}.ipynb"
        start = time.perf_counter()
        status = "ok"
        try:
            papermill.execute_notebook(
                str(notebook),
                str(output),
                parameters=parameters or {},
                cwd=str(notebook.parent),
                kernel_name="python3",
                progress_bar=False,
                log_output=False,
            )
        except papermill.PapermillExecutionError as exc:
            status = f"failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
        seconds = time.perf_counter() - start
        log(f"[{i}/{len(chosen)}] {lesson}: {status} ({seconds:.1f} s) -> {output}")
        results.append((lesson, seconds, status))
    return results


# --- autograde --------------------------------------------------------------------------------

CSV_FIELDS = ["student", "lesson", "grade_id", "score", "max_score", "status", "message"]


@dataclass
class CellResult:
    """One graded cell of one student's notebook."""

    student: str
    lesson: str
    grade_id: str
    score: float
    max_score: float
    status: str  # "passed", "failed", "error" (submission-level problem)
    message: str

    def row(self) -> dict:
        return {k: getattr(self, k) for k in CSV_FIELDS}


def cell_messages(notebook_path: Path) -> dict[str, str]:
    """grade_id -> the error a graded cell raised in an autograded notebook ('' where it passed)."""
    nb = nbformat.read(str(notebook_path), as_version=4)
    found = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or cell.cell_type != "code":
            continue
        message = ""
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                if out.get("ename") == "NotImplementedError":
                    message = "not attempted: the exercise still raises NotImplementedError"
                else:
                    message = f"{out.get('ename')}: {out.get('evalue')}"
        found[meta["grade_id"]] = message
    return found


def write_csv(rows: Iterable[CellResult], path: Path) -> None:
    """Write grade rows atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow(r.row())
    os.replace(tmp, path)


def read_csv(path: Path) -> list[CellResult]:
    """Grade rows back from a CSV written by write_csv."""
    with open(path, newline="", encoding="utf-8") as f:
        return [
            CellResult(r["student"], r["lesson"], r["grade_id"], float(r["score"]), float(r["max_score"]), r["status"], r["message"])
            for r in csv.DictReader(f)
        ]


def autograde(root: Path, submissions: Path, out_dir: Path, only: Iterable[str] | None = None, log=print,
              settings=None) -> Path:
    """Grade SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb; returns the grades CSV.

    out_dir gets grades.csv (one row per student, lesson and graded cell, with
    the check's message), course/ (nbgrader's course folder: gradebook.db,
    autograded notebooks, feedback HTML), results/ and summary.txt. Each
    submission runs isolated and in parallel: see grader.classroom.
    """
    from grader.classroom import grade_class

    return grade_class(root, submissions, out_dir, settings, only, log=log)


def autograde_plain(root: Path, submissions: Path, out_dir: Path, only: Iterable[str] | None = None, log=print) -> Path:
    """Plain nbgrader, one submission after another, student code run as the grader: the benchmark's baseline.

    out_dir gets course/ (nbgrader's course folder with gradebook.db, autograded
    notebooks and feedback HTML) and grades.csv, one row per student, lesson and
    graded cell with the check's message.
    """
    submissions, out_dir = submissions.resolve(), out_dir.resolve()
    course = out_dir / "course"
    from grader.classroom import submissions_of

    pairs = submissions_of(submissions, only)
    chosen_lessons = sorted({lesson for _, lesson in pairs})
    unknown = [lesson for lesson in chosen_lessons if not (root / "solutions" / lesson).is_dir()]
    if unknown:
        raise ValueError(f"submissions name lessons the course does not have: {unknown}; known: {lessons(root)}")
    course.mkdir(parents=True, exist_ok=True)
    write_course_config(course, root / "solutions")
    for lesson in chosen_lessons:
        nbgrader(["generate_assignment", lesson, "--force"], cwd=course)
    for student, lesson in pairs:
        target = course / "submitted" / student / lesson
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(submissions / student / lesson, target)
    rows: list[CellResult] = []
    for lesson in chosen_lessons:
        start = time.perf_counter()
        nbgrader(["autograde", lesson, "--force", "--create"], cwd=course)
        nbgrader(["generate_feedback", lesson, "--force"], cwd=course)
        log(f"autograded {lesson}: {sum(1 for _, l in pairs if l == lesson)} submissions in {time.perf_counter() - start:.1f} s")
    rows = gradebook_rows(course, pairs)
    path = out_dir / "grades.csv"
    write_csv(rows, path)
    return path


COURSE_CONFIG = """\
# Written by `python -m grader autograde`; nbgrader reads it from this folder.
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.source_directory = {source!r}
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///" + {db!r}
c.ExecutePreprocessor.timeout = 300
# Feedback shows each check's message, never the hidden tests or their tracebacks.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "grader.feedback.HideHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
"""


def write_course_config(course: Path, source: Path) -> Path:
    """nbgrader_config.py for a grading folder: where everything is, and how feedback is made."""
    path = course / "nbgrader_config.py"
    path.write_text(COURSE_CONFIG.format(root=str(course), source=str(source), db=str(course / "gradebook.db")))
    return path


def gradebook_rows(course: Path, pairs: list[tuple[str, str]]) -> list[CellResult]:
    """Scores from nbgrader's gradebook joined with the messages in the autograded notebooks."""
    from nbgrader.api import Gradebook, MissingEntry

    rows = []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student, lesson in pairs:
            notebook = course / "autograded" / student / lesson / f"{lesson}.ipynb"
            messages = cell_messages(notebook) if notebook.is_file() else {}
            assignment = gb.find_assignment(lesson)
            for nb in assignment.notebooks:
                for cell in nb.grade_cells:
                    try:
                        grade = gb.find_grade(cell.name, nb.name, lesson, student)
                        score = grade.score
                    except MissingEntry:
                        rows.append(CellResult(student, lesson, cell.name, 0.0, cell.max_score, "error",
                                               "not graded: the submission could not be autograded"))
                        continue
                    message = messages.get(cell.name, "")
                    status = "passed" if score >= cell.max_score else "failed"
                    if cell.name not in messages and notebook.is_file():
                        message = "graded cell missing from the submission"
                    rows.append(CellResult(student, lesson, cell.name, score, cell.max_score, status, message))
    return rows
