"""The notebooks as stored: release in sync, clean, and running top to bottom under papermill."""

from __future__ import annotations

import json

import pytest

import lesson_outputs
from conftest import ROOT, blank_run_group, lesson_ids, processes_tagged, read_notebook
from grader.pipeline.release import release
from grader.pipeline.run import run

LESSONS = lesson_ids()


def test_there_are_lessons():
    assert LESSONS and LESSONS[0] == "01_crossover"


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_stored_without_outputs(folder, lesson):
    nb = read_notebook(ROOT / folder / lesson / f"{lesson}.ipynb")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{folder}/{lesson} cell {i} has stored outputs"
            assert cell.execution_count is None, f"{folder}/{lesson} cell {i} has an execution count"


@pytest.mark.parametrize("lesson", LESSONS)
def test_one_parameters_cell_near_the_top(lesson):
    nb = read_notebook(ROOT / "solutions" / lesson / f"{lesson}.ipynb")
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and tagged[0] <= 3, f"{lesson}: want one parameters cell near the top, found {tagged}"
    assert "device =" in nb.cells[tagged[0]].source


@pytest.mark.parametrize("lesson", LESSONS)
def test_papermill_reads_every_parameter(lesson):
    """`-p NAME VALUE` and papermill's --help-notebook know every parameter (a ' = ' in a comment hides one)."""
    from papermill.translators import PythonTranslator

    nb = read_notebook(ROOT / "solutions" / lesson / f"{lesson}.ipynb")
    cell = next(c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    assigned = [line.split("=")[0].strip() for line in cell.source.splitlines() if "=" in line and not line.startswith("#")]
    assert [p.name for p in PythonTranslator.inspect(cell)] == assigned


def test_release_matches_notebooks(tmp_path):
    written = release(ROOT, tmp_path)
    assert len(written) == len(LESSONS)
    for lesson in LESSONS:
        fresh = json.loads((tmp_path / lesson / f"{lesson}.ipynb").read_text())
        stored = json.loads((ROOT / "notebooks" / lesson / f"{lesson}.ipynb").read_text())
        assert fresh == stored, f"notebooks/{lesson} differs from a fresh release: run `python -m grader release`"


@pytest.mark.parametrize("lesson", LESSONS)
def test_student_release_holds_no_answers(lesson):
    text = (ROOT / "notebooks" / lesson / f"{lesson}.ipynb").read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "HIDDEN TESTS"):
        assert marker not in text, f"notebooks/{lesson} contains {marker!r}"
    solution = read_notebook(ROOT / "solutions" / lesson / f"{lesson}.ipynb")
    for cell in solution.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            for line in hidden.strip().splitlines():
                if line.strip().startswith("assert"):
                    assert line.strip() not in text, f"a hidden test leaked into notebooks/{lesson}: {line.strip()}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_runs_under_papermill(lesson, tmp_path, process_tag):
    results = run(ROOT, [lesson], {}, tmp_path, log=lambda line: None)
    assert results[0][2] == "ok", results[0][2]
    assert not _left_behind(process_tag), f"{lesson} left processes running: {_left_behind(process_tag)}"
    executed = read_notebook(tmp_path / f"{lesson}.ipynb")
    images = sum(1 for c in executed.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {}))
    assert images >= 1, f"{lesson} ran but showed no figure"
    for cell in executed.cells:
        for out in cell.get("outputs", []):
            assert out.get("name") != "stderr" or "WARNING" in out.get("text", ""), f"{lesson} wrote to stderr: {out.get('text')}"
    lesson_outputs.check(lesson, executed)  # what it must show, not only that it ran


@pytest.mark.parametrize("lesson", [pytest.param(lesson, marks=blank_run_group(lesson)) for lesson in LESSONS])
def test_student_notebook_fails_only_at_checks_with_one_line(lesson, blank_release):
    """A blank release run cell by cell: only check cells fail, each with the one-line 'not done yet', no package frames.

    The run is conftest's `blank_release`, shared with the other tests that read a blank lesson's outputs."""
    nb, record = blank_release(lesson)
    errors = [(i, o) for i, c in enumerate(nb.cells) if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    graded = {i for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    assert errors, f"{lesson}: the blank student notebook raised nothing; are the exercises stubs?"
    shown = [i for i, _ in errors if i not in graded]
    assert not shown, f"{lesson}: cells that only show something failed on a blank notebook: {shown}"
    assert graded <= {i for i, _ in errors}, f"{lesson}: check cells {sorted(graded - {i for i, _ in errors})} passed on stubs"
    for i, out in errors:
        assert out.ename == "NotDone", f"{lesson} cell {i}: {out.ename}: {out.evalue}"
        assert len(out.traceback) == 1 and "grader/" not in out.traceback[0], f"{lesson} cell {i}: {out.traceback}"
        assert "not done yet" in out.traceback[0]
    # A show cell that skips must skip before it runs an instrument a prediction is scored against: run ahead on a
    # blank notebook, a copy test found lesson 02's loop tables stamping SYNC_ANSWERS as revealed, answer unseen.
    stamped = sorted(name for part in record.values() for name, entry in part["entries"].items() if entry.get("revealed"))
    assert not stamped, f"{lesson}: a blank notebook run cell by cell recorded a reveal of {stamped}, showing nothing"


def _presented_in_the_browser_tests() -> set[str]:
    """The lessons tests/test_browser.py's `presenting` fixture runs with demo=True (`make present`, each deck in the
    kernel it is shown with) when Chromium and Playwright are here: there, a demo run of their own is a second one."""
    import importlib.util

    from test_browser import CHROMIUM, DECKS

    return set(DECKS) if CHROMIUM and importlib.util.find_spec("playwright") else set()


@pytest.mark.parametrize("lesson", LESSONS)
def test_demo_mode_runs(lesson, tmp_path, process_tag):
    """Presenter mode: the instructor notebook with demo=True runs top to bottom (its time is reported, not asserted).
    Where the browser tests present every deck, they run it so already (CI: 90 s of a 19-minute run saved)."""
    if lesson in _presented_in_the_browser_tests():
        pytest.skip("tests/test_browser.py presents this lesson's deck, which runs it with demo=True")
    results = run(ROOT, [lesson], {"demo": True}, tmp_path, log=lambda line: None)
    assert results[0][2] == "ok", results[0][2]
    assert not _left_behind(process_tag), f"{lesson} left processes running: {_left_behind(process_tag)}"


def _left_behind(tag: str, wait_s: float = 5.0) -> list[int]:
    """Processes (the kernel, or ranks it started) still alive a few seconds after a run ended."""
    import time

    deadline = time.monotonic() + wait_s
    while (found := processes_tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found
