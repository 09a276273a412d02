"""Pull a lesson's exercise and check cells out of its notebooks, and build submissions from them, to test outside Jupyter."""

from __future__ import annotations

import contextlib
import importlib
import io
import shutil
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def _notebook(lesson: str, student: bool) -> nbformat.NotebookNode:
    folder = "notebooks" if student else "solutions"
    return nbformat.read(str(ROOT / folder / lesson / f"{lesson}.ipynb"), as_version=4)


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def solution_cells(lesson: str, student: bool = False) -> dict[str, str]:
    """grade_id -> source of every exercise (solution) cell; stubs when student=True."""
    return {
        _nbgrader(c)["grade_id"]: c.source
        for c in _notebook(lesson, student).cells
        if c.cell_type == "code" and _nbgrader(c).get("solution")
    }


def check_cells(lesson: str) -> dict[str, str]:
    """grade_id -> source of every graded check cell, hidden tests included (from solutions/)."""
    return {
        _nbgrader(c)["grade_id"]: c.source
        for c in _notebook(lesson, student=False).cells
        if c.cell_type == "code" and _nbgrader(c).get("grade")
    }


def namespace(lesson: str, student: bool = False) -> dict:
    """A fresh namespace holding every exercise cell's definitions (the reference or the stubs)."""
    ns: dict = {"__name__": "__lesson__"}
    for source in solution_cells(lesson, student).values():
        exec(compile(source, f"<{lesson} exercise>", "exec"), ns)
    return ns


def run_check(lesson: str, grade_id: str, ns: dict) -> None:
    """Execute one check cell in `ns`, as nbgrader would after the learner's cells."""
    source = check_cells(lesson)[grade_id]
    exec(compile(source, f"<{lesson} {grade_id}>", "exec"), ns)


def with_exercise(source_nb: Path, grade_id: str, new_source: str) -> nbformat.NotebookNode:
    """The notebook at `source_nb` with the exercise cell `grade_id` replaced by `new_source`."""
    nb = nbformat.read(str(source_nb), as_version=4)
    for cell in nb.cells:
        if _nbgrader(cell).get("grade_id") == grade_id:
            cell.source = new_source
            return nb
    raise KeyError(grade_id)


def three_submissions(folder: Path, lesson: str, grade_id: str, mistake: str) -> Path:
    """alice hands in the reference, bob the blank release, carol the release with `mistake` in exercise `grade_id`."""
    for student, source in (("alice", "solutions"), ("bob", "notebooks")):
        (folder / student / lesson).mkdir(parents=True)
        shutil.copy(ROOT / source / lesson / f"{lesson}.ipynb", folder / student / lesson)
    record_first_guesses(lesson, folder / "alice" / lesson / "predictions.json")
    carol = with_exercise(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", grade_id, mistake)
    (folder / "carol" / lesson).mkdir(parents=True)
    nbformat.write(carol, str(folder / "carol" / lesson / f"{lesson}.ipynb"))
    return folder


def record_first_guesses(lesson: str, path: Path) -> None:
    """Run the reference's prediction checks with the record at `path`: what a learner hands in beside the notebook."""
    import os
    import re

    from grader import predictions
    from grader.checks._common import Prediction

    predictions._MEMORY.clear()  # a fresh record: nothing carried over from another lesson's
    before = os.environ.get("GRADER_PREDICTIONS")
    os.environ["GRADER_PREDICTIONS"] = str(path)
    try:
        ns = None
        for grade_id, source in check_cells(lesson).items():
            found = re.search(r"^(lesson\d\d)\.(\w+)\(", source, re.M)
            module = importlib.import_module(f"grader.checks.{found.group(1)}") if found else None
            if module is not None and isinstance(getattr(module, found.group(2), None), Prediction):
                ns = ns or namespace(lesson)
                with contextlib.redirect_stdout(io.StringIO()):
                    run_check(lesson, grade_id, ns)
    finally:
        if before is None:
            os.environ.pop("GRADER_PREDICTIONS", None)
        else:
            os.environ["GRADER_PREDICTIONS"] = before


def cell_index(lesson: str, predicate) -> int:
    """Index of the one cell of the solution notebook for which `predicate(cell)` holds."""
    found = [i for i, c in enumerate(_notebook(lesson, student=False).cells) if predicate(c)]
    assert len(found) == 1, f"want one cell, found {len(found)}"
    return found[0]


def graded(grade_id: str):
    """A cell predicate: the nbgrader cell named `grade_id`."""
    return lambda c: _nbgrader(c).get("grade_id") == grade_id


def shown_by(text: str):
    """A cell predicate: a plain code cell (no nbgrader role) whose source contains `text`."""
    return lambda c: c.cell_type == "code" and text in c.source and not _nbgrader(c)
