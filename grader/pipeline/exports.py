"""Grades out in the files learning platforms import: a Canvas gradebook CSV and a Moodle grade import CSV.

Both are made from grades.csv (one row per student, lesson and graded cell, the
same scores as nbgrader's gradebook.db): one row per student, one column per
lesson holding the lesson's total points. Student ids are nbgrader's, which on a
shared machine or a hub are the login names.

- Canvas (Grades > Import): the columns of Canvas's own gradebook export, which is
  what its import reads: Student, ID, SIS User ID, SIS Login ID, Section, then one
  column per assignment; a second row "Points Possible" gives each assignment's
  points. Canvas matches a row to a student by ID, SIS User ID or SIS Login ID:
  here the login name goes in SIS Login ID (and in Student, for reading); ID, SIS
  User ID and Section are left empty for Canvas to match on the login. A column
  whose name Canvas does not know becomes a new assignment.
- Moodle (Grade administration > Import > CSV file): any header row; on the
  import page you map a column to the user ("Map from" Username, "Map to"
  username) and each other column to a grade item or "new grade item". The file
  has Username and one column per lesson. A blank grade means no grade.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from grader.pipeline.grades import UNGRADED, csv_text, read_csv

CANVAS_HEAD = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_HEAD = ["Username"]


def lesson_totals(grades_csv: Path) -> tuple[list[str], dict[str, dict[str, float]], dict[str, float]]:
    """(lessons in order, student -> lesson -> points, lesson -> points possible) from grades.csv.

    A lesson's points are its checks' scores less the submission's late penalty
    (on each of its rows, taken once), as nbgrader's own export counts them. A
    lesson with any check the grader could not decide (status UNGRADED: the
    sandbox, the host or the grader failed, not the student) has no total: its
    grade is left blank, never a zero or a part score (see ungraded()).
    """
    scores: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    possible: dict[tuple[str, str], float] = defaultdict(float)
    penalty: dict[tuple[str, str], float] = {}
    rows = read_csv(grades_csv)
    undecided = {(row.student, row.lesson) for row in rows if row.status == UNGRADED}
    for row in rows:
        possible[(row.student, row.lesson)] += row.max_score
        if (row.student, row.lesson) in undecided:
            scores[row.student]  # the student keeps a row, blank for this lesson
            continue
        scores[row.student][row.lesson] += row.score
        penalty[(row.student, row.lesson)] = row.penalty
    for (student, lesson), points in penalty.items():
        scores[student][lesson] = max(0.0, scores[student][lesson] - points)
    lessons = sorted({lesson for _, lesson in possible})
    most = {lesson: max(p for (_, l), p in possible.items() if l == lesson) for lesson in lessons}
    return lessons, {s: dict(v) for s, v in sorted(scores.items())}, most


def ungraded(grades_csv: Path) -> list[str]:
    """'student/lesson' of every submission with a check the grader could not decide (left blank in the exports)."""
    return sorted({f"{row.student}/{row.lesson}" for row in read_csv(grades_csv) if row.status == UNGRADED})


def _number(value: float) -> str:
    return f"{value:g}"


def write_canvas(grades_csv: Path, out: Path) -> Path:
    """A CSV for Canvas's Grades > Import: a Points Possible row, then one row per student."""
    lessons, scores, possible = lesson_totals(grades_csv)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CANVAS_HEAD + lessons)
        writer.writerow(["    Points Possible", "", "", "", ""] + [_number(possible[lesson]) for lesson in lessons])
        for student, got in scores.items():
            name = csv_text(student)  # a spreadsheet never runs a student id as a formula
            writer.writerow([name, "", "", name, ""] + [_number(got[lesson]) if lesson in got else "" for lesson in lessons])
    return out


def write_moodle(grades_csv: Path, out: Path) -> Path:
    """A CSV for Moodle's CSV grade import: Username, then one column per lesson."""
    lessons, scores, _ = lesson_totals(grades_csv)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(MOODLE_HEAD + lessons)
        for student, got in scores.items():
            writer.writerow([csv_text(student)] + [_number(got[lesson]) if lesson in got else "" for lesson in lessons])
    return out


WRITERS = {"canvas": write_canvas, "moodle": write_moodle}
