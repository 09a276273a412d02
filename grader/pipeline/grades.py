"""Grade rows: the CSV a class's grades are written to, and nbgrader's course folder and gradebook."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from grader.pipeline.submissions import one_line
from grader.pipeline.tools import lessons as course_lessons
from grader.pipeline.tools import nbgrader


CSV_FIELDS = ["student", "lesson", "grade_id", "score", "max_score", "status", "message"]
TEXT_FIELDS = ("student", "lesson", "grade_id", "status", "message")  # score and max_score are written as numbers
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")  # OWASP's CSV-injection starts, and the escape itself


FIELD_CHARS = 10_000  # the longest text field grades.csv holds (csv's own reader refuses fields over 131,072)


def csv_text(value: str) -> str:
    """A text field as grades.csv holds it: at most FIELD_CHARS, no NUL, and one starting like a formula gets a leading apostrophe."""
    value = one_line(value.replace("\0", "\ufffd"))  # a line-oriented reader sees one row per line
    if len(value) > FIELD_CHARS:
        value = value[:FIELD_CHARS // 3] + " ... " + value[-(FIELD_CHARS - FIELD_CHARS // 3 - 5):]
    return "'" + value if value.startswith(FORMULA_START) else value


def csv_untext(value: str) -> str:
    """The text csv_text was given back (its apostrophe off)."""
    return value[1:] if value.startswith("'") and value[1:].startswith(FORMULA_START) else value


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


def write_csv(rows: Iterable[CellResult], path: Path) -> None:
    """Write grade rows atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8", errors="replace") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in rows:
            row = r.row()
            writer.writerow({k: csv_text(str(v)) if k in TEXT_FIELDS else float(v) for k, v in row.items()})
    os.replace(tmp, path)


def read_csv(path: Path) -> list[CellResult]:
    """Grade rows back from a CSV written by write_csv (or by an older grader, whose fields were not capped)."""
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
    with open(path, newline="", encoding="utf-8") as f:
        return [
            CellResult(*(csv_untext(r[k]) for k in ("student", "lesson", "grade_id")), float(r["score"]),
                       float(r["max_score"]), csv_untext(r["status"]), csv_untext(r["message"]))
            for r in csv.DictReader(f)
        ]


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
# formgrader's Autograde button (plain `nbgrader autograde`) without the widget-cell stall (nbclient#312)
c.Autograde.autograde_preprocessors = {autograde!r}
# Feedback shows each check's message, never the hidden tests or their tracebacks.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "grader.pipeline.feedback.HideHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
"""


def write_course_config(course: Path, source: Path) -> Path:
    """nbgrader_config.py for a grading folder: where everything is, and how feedback is made."""
    path = course / "nbgrader_config.py"
    from grader.pipeline.nbgrader_plain import AUTOGRADE_PREPROCESSORS

    path.write_text(COURSE_CONFIG.format(root=str(course), source=str(source), db=str(course / "gradebook.db"),
                                         autograde=AUTOGRADE_PREPROCESSORS))
    return path


def write_gradebook(root: Path, course: Path, results: list[dict]) -> None:
    """nbgrader's gradebook.db in course/, with every result's scores as autograde scores."""
    from nbgrader.api import Gradebook, MissingEntry

    course.mkdir(parents=True, exist_ok=True)
    write_course_config(course, root / "solutions")
    lessons = sorted({r["lesson"] for r in results})
    stale = []
    for lesson in lessons:
        released = course / "release" / lesson / f"{lesson}.ipynb"
        source = root / "solutions" / lesson / f"{lesson}.ipynb"
        if not released.is_file() or released.stat().st_mtime < source.stat().st_mtime:
            stale.append(lesson)
    # every lesson of the course (a whole class merged): one nbgrader run for all, not one start per lesson;
    # otherwise only those graded, so the gradebook holds no lesson nobody submitted
    for pattern in ["*"] if len(stale) > 1 and stale == course_lessons(root) else stale:
        nbgrader(["generate_assignment", pattern, "--force"], cwd=course)
    import warnings

    warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's own add_submission, harmless
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for res in results:
            student, lesson = res["student"], res["lesson"]
            gb.update_or_create_student(student)
            try:
                gb.find_submission(lesson, student)
            except MissingEntry:
                gb.add_submission(lesson, student)
            for row in res["rows"]:
                try:
                    grade = gb.find_grade(row["grade_id"], lesson, lesson, student)
                except MissingEntry:
                    continue
                grade.auto_score = float(row["score"])
            gb.db.commit()
