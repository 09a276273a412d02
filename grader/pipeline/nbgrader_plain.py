"""Plain nbgrader autograde, one submission after another, student code run as the grader: the benchmark's baseline."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Iterable

import nbformat
from nbgrader.preprocessors import Execute

from grader.pipeline.grades import CellResult, write_course_config, write_csv
from grader.pipeline.submissions import submissions_of
from grader.pipeline.kernels import _Sliced
from grader.pipeline.tools import lessons, nbgrader


class PatientExecute(_Sliced, Execute):
    """nbgrader's Execute preprocessor (what `nbgrader autograde` and formgrader's Autograde button run), polling
    the kernel in slices: a widget cell's reply is read when it comes, not after the cell timeout (nbclient#312).

    nbgrader_config.py names it in place of nbgrader's own Execute (grades.AUTOGRADE_PREPROCESSORS).
    """


def autograde_plain(root: Path, submissions: Path, out_dir: Path, only: Iterable[str] | None = None, log=print) -> Path:
    """Plain nbgrader, one submission after another, student code run as the grader: the benchmark's baseline.

    out_dir gets course/ (nbgrader's course folder with gradebook.db, autograded
    notebooks and feedback HTML) and grades.csv, one row per student, lesson and
    graded cell with the check's message.
    """
    submissions, out_dir = submissions.resolve(), out_dir.resolve()
    course = out_dir / "course"
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
