"""Deadlines without a class: which submission counts, the late penalty, due dates from config or db, the exports.

The end-to-end case with Unix users and nbgrader's exchange is tests/test_infra_collect.py.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta

from traitlets.config import Config

from grader.pipeline import deadlines
from grader.pipeline.exports import lesson_totals
from grader.pipeline.grades import CellResult, read_csv, write_csv

DUE = datetime(2026, 12, 1, 17, 0)


def test_the_last_on_time_submission_counts_else_the_last():
    early, on_time, late = DUE - timedelta(hours=2), DUE - timedelta(seconds=1), DUE + timedelta(minutes=5)
    assert deadlines.counted([late, early, on_time], DUE, before_duedate=True) == 2
    assert deadlines.counted([late, early, on_time], DUE, before_duedate=False) == 0
    assert deadlines.counted([late, late + timedelta(1)], DUE, before_duedate=True) == 1
    assert deadlines.counted([early, late], None, before_duedate=True) == 1
    assert deadlines.seconds_late(late, DUE) == 300 and deadlines.seconds_late(early, DUE) == 0


def test_late_penalty_is_nbgraders_plugin_kept_within_the_score():
    config = Config()
    assert deadlines.late_penalty(config, "ann", 8.0, 3600) == 0  # nbgrader's default plugin: 'none'
    config.AssignLatePenalties.plugin_class = "grader.pipeline.deadlines.LatePenalty"
    config.LatePenalty.penalty_method = "per_day"
    config.LatePenalty.per_day = 0.25
    assert deadlines.late_penalty(config, "ann", 8.0, 3600) == 2.0  # one started day
    assert deadlines.late_penalty(config, "ann", 8.0, 86400 + 1) == 4.0  # two
    assert deadlines.late_penalty(config, "ann", 8.0, 10 * 86400) == 8.0  # never more than the score
    assert deadlines.late_penalty(config, "ann", 8.0, 0) == 0
    config.LatePenalty.penalty_method = "zero"
    assert deadlines.late_penalty(config, "ann", 8.0, 1) == 8.0


def test_due_date_from_nbgraders_gradebook_first_then_the_course_config(tmp_path):
    config = Config()
    config.CourseDirectory.db_url = "sqlite:///course/gradebook.db"
    config.Deadlines.duedates = {"01_crossover": "2026-12-01 18:00:00 UTC", "02_transfers": "2026-12-02 09:00:00 CET"}
    assert deadlines.due_date("01_crossover", config, tmp_path) == datetime(2026, 12, 1, 18, 0)
    assert deadlines.due_date("02_transfers", config, tmp_path) == datetime(2026, 12, 2, 8, 0)  # in UTC
    assert deadlines.due_date("03_float_formats", config, tmp_path) is None
    (tmp_path / "course").mkdir()
    with sqlite3.connect(tmp_path / "course" / "gradebook.db") as db:  # the column nbgrader's Assignment.duedate is
        db.execute("CREATE TABLE assignment (name TEXT, duedate DATETIME)")
        db.execute("INSERT INTO assignment VALUES ('01_crossover', '2026-12-01 17:00:00.000000')")
    assert deadlines.due_date("01_crossover", config, tmp_path) == DUE


def test_grades_csv_carries_the_dating_and_exports_take_the_penalty_once(tmp_path):
    dating = {"timestamp": "2026-12-01 18:00:00.000000 UTC", "duedate": "2026-12-01 17:00:00.000000 UTC",
              "late": "yes", "penalty": 1.5}
    rows = [CellResult("ann", "01_crossover", "a", 2, 2, "passed", "", **dating),
            CellResult("ann", "01_crossover", "b", 1, 3, "failed", "wrong", **dating),
            CellResult("ben", "01_crossover", "a", 2, 2, "passed", "")]
    write_csv(rows, tmp_path / "grades.csv")
    back = read_csv(tmp_path / "grades.csv")
    assert back == rows
    _, scores, possible = lesson_totals(tmp_path / "grades.csv")
    assert scores["ann"]["01_crossover"] == 1.5 and scores["ben"]["01_crossover"] == 2 and possible["01_crossover"] == 5
    old = tmp_path / "old.csv"  # a grades.csv from before the dating columns still reads
    old.write_text("student,lesson,grade_id,score,max_score,status,message\nann,01_crossover,a,2.0,2.0,passed,\n")
    assert read_csv(old) == [CellResult("ann", "01_crossover", "a", 2.0, 2.0, "passed", "")]
