"""Pull a lesson's exercise and check cells out of its notebooks, and build submissions from them, to test outside Jupyter."""

from __future__ import annotations

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


def measured(lesson: str, what: str = "MEASURED") -> dict:
    """What `lesson`'s show cells note for its predictions (grader.predictions.note_measured), on a made-up machine:
    its mutants module's MEASURED (test data, not a measurement), or with what="SHOWN" the show cells' variables
    that hold those figures; {} for a lesson whose predictions need none."""
    import importlib

    try:
        mod = importlib.import_module(f"mutants.lesson{lesson[:2]}")
    except ImportError:
        return {}
    return dict(getattr(mod, what, {}))


def namespace(lesson: str, student: bool = False) -> dict:
    """A fresh namespace holding every exercise cell's definitions (the reference or the stubs), after the figures
    the lesson's show cells would have measured are noted in the current record (`measured`)."""
    from grader import predictions

    if measured(lesson):
        predictions.note_measured(lesson, **measured(lesson))
    ns: dict = {"__name__": "__lesson__", **measured(lesson, "SHOWN")}
    for source in solution_cells(lesson, student).values():
        exec(compile(source, f"<{lesson} exercise>", "exec"), ns)
    return ns


def run_check(lesson: str, grade_id: str, ns: dict):
    """Execute one check cell in `ns`, as nbgrader would after the learner's cells; the value of its last expression.

    A prediction's cell (grader.checks._common.Prediction) ends with its call: that value is its score in points.
    """
    import ast

    source = check_cells(lesson)[grade_id]
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, f"<{lesson} {grade_id}>", "exec"), ns)
    if last is not None:
        return eval(compile(ast.Expression(last.value), f"<{lesson} {grade_id}>", "eval"), ns)
    return None


def prediction_cells(lesson: str) -> dict[str, object]:
    """grade_id -> the Prediction check of every graded prediction cell of `lesson` (its one call)."""
    from grader.checks._common import Prediction
    from grader.pipeline.judging import plan_cell

    found = {}
    for grade_id, source in check_cells(lesson).items():
        steps = plan_cell(source)
        if any(isinstance(s.target(), Prediction) for s in steps):
            assert len(steps) == 1, f"{lesson}:{grade_id}: a prediction's graded cell holds its one call, nothing else"
            found[grade_id] = steps[0].target()
    return found


def honest_predictions(lesson: str, folder: Path) -> Path:
    """Write `folder`/predictions.json as a learner's run of the reference solution would: each prediction's
    reference answer recorded as its first guess, with the context its show cells would note (`measured`)."""
    from grader import predictions

    path = folder / predictions.FILE_NAME
    predictions._MEMORY.clear()
    # each student's own first guesses: none carried from another's folder through a ledger
    with predictions.environment(**{predictions.ENV_PATH: str(path), predictions.ENV_LEDGER: ""}):
        try:
            # namespace() notes what the show cells measured in the record in use: here, the one being written (called
            # first, from a module-scoped fixture with no record of its own, it wrote predictions.json in the repository)
            ns = namespace(lesson)
            if measured(lesson):
                predictions.note_measured(lesson, **measured(lesson))
            for grade_id, check in prediction_cells(lesson).items():
                answer = ns[check.name]
                predictions.commit(check.lesson, check.name, check.valid(answer), answer["why"])
        finally:
            predictions._MEMORY.clear()
    return path


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
    honest_predictions(lesson, folder / "alice" / lesson)  # alice ran her notebook: her first guesses are recorded
    carol = with_exercise(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", grade_id, mistake)
    (folder / "carol" / lesson).mkdir(parents=True)
    nbformat.write(carol, str(folder / "carol" / lesson / f"{lesson}.ipynb"))
    return folder


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
