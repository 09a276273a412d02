"""Grade rows: the CSV a class's grades are written to, and nbgrader's course folder and gradebook."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from grader.pipeline.submissions import one_line


GRADE_FIELDS = ["student", "lesson", "grade_id", "score", "max_score", "status", "message"]  # a result file's row
# and the submission's dating, the same on each of its rows: its trusted time and the due date (UTC, '' if none),
# late ('yes', 'no', '' without a time or a due date) and the late penalty (points off the lesson's total, once)
CSV_FIELDS = GRADE_FIELDS + ["timestamp", "duedate", "late", "penalty"]
TEXT_FIELDS = ("student", "lesson", "grade_id", "status", "message")  # of every grades.csv, old ones too
DATING_TEXT = ("timestamp", "duedate", "late")  # score, max_score and penalty are written as numbers
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")  # OWASP's CSV-injection starts, and the escape itself


UNGRADED = "ungraded"  # a row the grader could not decide (the sandbox, the host, the grader failed): no grade
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
    status: str  # "passed", "failed", "timeout", "crashed", "error" (the submission's problem), UNGRADED (not the student's)
    message: str
    timestamp: str = ""  # when the exchange got the submission (UTC), from collect's timestamp.txt
    duedate: str = ""
    late: str = ""
    penalty: float = 0.0  # the submission's late penalty in points (the same on each of its rows)

    def row(self) -> dict:
        """The grade fields, as a result file holds them (the dating is the result's own)."""
        return {k: getattr(self, k) for k in GRADE_FIELDS}


def write_csv(rows: Iterable[CellResult], path: Path) -> None:
    """Write grade rows atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8", errors="replace") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for r in rows:
            row = {k: getattr(r, k) for k in CSV_FIELDS}
            writer.writerow({k: csv_text(str(v)) if k in TEXT_FIELDS + DATING_TEXT else float(v) for k, v in row.items()})
    os.replace(tmp, path)


def read_csv(path: Path) -> list[CellResult]:
    """Grade rows back from a CSV written by write_csv (or by an older grader, whose fields were not capped)."""
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
    with open(path, newline="", encoding="utf-8") as f:
        return [
            CellResult(*(csv_untext(r[k]) for k in ("student", "lesson", "grade_id")), float(r["score"]),
                       float(r["max_score"]), csv_untext(r["status"]), csv_untext(r["message"]),
                       *(csv_untext(r.get(k) or "") for k in ("timestamp", "duedate", "late")),
                       float(r.get("penalty") or 0))
            for r in csv.DictReader(f)
        ]


# nbgrader's autograde preprocessors with the course's PatientExecute (grader.pipeline.nbgrader_plain) first, by
# dotted name: the course's nbgrader_config.py and every grading folder's (COURSE_CONFIG) set this list.
AUTOGRADE_PREPROCESSORS = [
    "grader.pipeline.nbgrader_plain.PatientExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
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
    path.write_text(COURSE_CONFIG.format(root=str(course), source=str(source), db=str(course / "gradebook.db"),
                                         autograde=AUTOGRADE_PREPROCESSORS))
    return path


_alembic_head: list[str] = []


def alembic_head() -> str:
    """The gradebook schema's alembic revision, as nbgrader's get_alembic_version reads it, without its subprocess.

    nbgrader runs `alembic heads` (a Python of its own importing alembic and
    SQLAlchemy: seconds) for every gradebook it opens that has no version
    yet; this reads the same head with alembic's own API, once per process.
    """
    if not _alembic_head:
        from alembic.config import Config
        from alembic.script import ScriptDirectory
        from nbgrader.dbutil import _temp_alembic_ini

        with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
            _alembic_head.append(ScriptDirectory.from_config(Config(ini)).get_current_head())
    return _alembic_head[0]


class in_process_alembic:
    """While inside: nbgrader's gradebooks take the schema's head from alembic_head(), not from a subprocess."""

    def __enter__(self):
        import nbgrader.api

        self.saved = nbgrader.api.get_alembic_version
        nbgrader.api.get_alembic_version = alembic_head
        return self

    def __exit__(self, *exc):
        import nbgrader.api

        nbgrader.api.get_alembic_version = self.saved


def generate_assignments(course: Path, lessons: list[str]) -> None:
    """`nbgrader generate_assignment LESSON --force` for each lesson, in this process (nbgrader's own NbGraderAPI):
    the release in course/release/ and the lesson, its notebooks and graded cells in the gradebook."""
    if not lessons:
        return
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    api = NbGraderAPI(CourseDirectory(config=config), config=config)
    with in_process_alembic():
        for lesson in lessons:
            result = api.generate_assignment(lesson, force=True, create=True)
            if not result.get("success"):
                raise RuntimeError(f"`nbgrader generate_assignment {lesson}` failed in {course}:\n"
                                   f"{result.get('log', '')}\n{result.get('error', '')}")


def write_gradebook(root: Path, course: Path, results: list[dict]) -> None:
    """nbgrader's gradebook.db in course/: every result's scores as autograde scores, and its dating.

    nbgrader's own fields: Assignment.duedate, SubmittedAssignment.timestamp
    and SubmittedNotebook.late_submission_penalty, so `nbgrader export` and
    the formgrader show the due date, the time, the penalty and the score less it.
    """
    from nbgrader.utils import parse_utc

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
    generate_assignments(course, stale)  # only those graded, so the gradebook holds no lesson nobody submitted
    import warnings

    warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's own add_submission, harmless
    with in_process_alembic(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for res in results:
            student, lesson = res["student"], res["lesson"]
            facts = res.get("submission") or {}
            _add_student(gb, student)
            if facts.get("duedate"):
                gb.update_or_create_assignment(lesson, duedate=parse_utc(facts["duedate"]))
            try:
                submission = gb.find_submission(lesson, student)
            except MissingEntry:
                submission = gb.add_submission(lesson, student)
            submission.timestamp = parse_utc(facts["timestamp"]) if facts.get("timestamp") else None
            try:
                notebook = gb.find_submission_notebook(lesson, lesson, student)
                notebook.late_submission_penalty = float(facts.get("penalty", 0.0)) or None
            except MissingEntry:
                pass
            for row in res["rows"]:
                try:
                    grade = gb.find_grade(row["grade_id"], lesson, lesson, student)
                except MissingEntry:
                    continue
                # as nbgrader's own autograde (SaveAutoGrades): a decided score needs no manual grading;
                # a row the grader could not decide (UNGRADED) has no score and waits for a grade
                decided = row["status"] != UNGRADED
                grade.auto_score = float(row["score"]) if decided else None
                grade.needs_manual_grade = not decided or grade.manual_score is not None
            gb.db.commit()


def _add_student(gb, student: str) -> None:
    """The student in the gradebook with a name the formgrader shows (it prints "None, None" for none).

    A name the instructor set (`nbgrader db student add --first-name ...`) is
    kept; else the full name of the Unix account of that login, if any; else
    the id as last name, the way nbgrader's own lists fall back to the id.
    """
    from nbgrader.api import MissingEntry

    try:
        known = gb.find_student(student)
        if known.first_name is not None and known.last_name is not None:
            return
    except MissingEntry:
        pass
    first, last = "", student
    try:
        import pwd

        full = pwd.getpwnam(student).pw_gecos.split(",")[0].strip()
        if full:
            first, _, last = full.rpartition(" ")
            first, last = (first, last) if first else ("", last)
    except (KeyError, ImportError):
        pass
    gb.update_or_create_student(student, first_name=first, last_name=last)
