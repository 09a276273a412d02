"""Grades out for Canvas and Moodle, from grades.csv: the columns their import pages read."""

from __future__ import annotations

import csv

from grader.cli import main
from grader.pipeline.grades import CellResult, write_csv


def _class(tmp_path):
    rows = [CellResult("ann", "01_crossover", "a", 2, 2, "passed", ""),
            CellResult("ann", "01_crossover", "b", 0, 3, "failed", "wrong"),
            CellResult("ann", "02_transfers", "c", 1, 1, "passed", ""),
            CellResult("=cmd", "01_crossover", "a", 2, 2, "passed", ""),
            CellResult("=cmd", "01_crossover", "b", 3, 3, "passed", "")]
    write_csv(rows, tmp_path / "grades.csv")
    return tmp_path


def _read(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_canvas_has_its_export_columns_points_possible_and_one_row_per_student(tmp_path):
    assert main(["export", str(_class(tmp_path)), "--to", "canvas"]) == 0
    head, points, *students = _read(tmp_path / "canvas.csv")
    assert head == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "01_crossover", "02_transfers"]
    assert points[0].strip() == "Points Possible" and points[5:] == ["5", "1"]
    by_login = {row[3]: row[5:] for row in students}
    assert by_login == {"ann": ["2", "1"], "'=cmd": ["5", ""]}  # no grade where nothing was submitted; no formula


def test_moodle_has_a_username_column_and_a_column_per_lesson(tmp_path):
    assert main(["export", str(_class(tmp_path) / "grades.csv"), "--to", "moodle", "--out", str(tmp_path / "m.csv")]) == 0
    head, *students = _read(tmp_path / "m.csv")
    assert head == ["Username", "01_crossover", "02_transfers"]
    assert {row[0]: row[1:] for row in students} == {"ann": ["2", "1"], "'=cmd": ["5", ""]}


def test_a_lesson_the_grader_could_not_decide_is_left_blank_in_both_exports(tmp_path, capsys):
    rows = [CellResult("ann", "01_crossover", "a", 2, 2, "passed", ""),
            CellResult("ann", "01_crossover", "b", 0, 3, "ungraded", "not run: the grader's Python did not start"),
            CellResult("ann", "02_transfers", "c", 1, 1, "passed", ""),
            CellResult("ben", "01_crossover", "a", 0, 2, "ungraded", "the grader failed on this submission"),
            CellResult("ben", "01_crossover", "b", 0, 3, "ungraded", "the grader failed on this submission")]
    write_csv(rows, tmp_path / "grades.csv")
    assert main(["export", str(tmp_path), "--to", "canvas"]) == 0
    assert "left blank: 2 submissions" in capsys.readouterr().out
    head, points, *students = _read(tmp_path / "canvas.csv")
    assert points[5:] == ["5", "1"]
    assert {row[3]: row[5:] for row in students} == {"ann": ["", "1"], "ben": ["", ""]}
    assert main(["export", str(tmp_path), "--to", "moodle"]) == 0
    assert {row[0]: row[1:] for row in _read(tmp_path / "moodle.csv")[1:]} == {"ann": ["", "1"], "ben": ["", ""]}
