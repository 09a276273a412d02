"""Every check passes the reference solution, fails the blank stub, and fails each mutant by name."""

from __future__ import annotations

import importlib
import re

import pytest

from conftest import ROOT, lesson_ids
from notebook_cells import check_cells, namespace, prediction_cells, run_check

MUTANT_MODULES = sorted(p.stem for p in (ROOT / "tests" / "mutants").glob("lesson*.py"))


def _load(module: str):
    return importlib.import_module(f"mutants.{module}")


def _cases():
    for module in MUTANT_MODULES:
        mod = _load(module)
        for grade_id, mutants in mod.MUTANTS.items():
            for name, source, pattern in mutants:
                yield pytest.param(mod.LESSON, grade_id, source, pattern, id=f"{mod.LESSON}:{grade_id}:{name}")


def _all_checks():
    for lesson in lesson_ids():
        for grade_id in check_cells(lesson):
            yield pytest.param(lesson, grade_id, id=f"{lesson}:{grade_id}")


def _scored(lesson: str, grade_id: str, ns: dict) -> tuple[float, str]:
    """A prediction's graded cell run as the learner's kernel runs it: (its value, the points, what it printed)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        got = run_check(lesson, grade_id, ns)
    assert type(got) is float, f"{lesson}:{grade_id} ends with {got!r}, not a plain float in points"
    return got, out.getvalue()


@pytest.mark.parametrize("lesson,grade_id", list(_all_checks()))
def test_reference_solution_passes(lesson, grade_id):
    predicted = prediction_cells(lesson)
    if grade_id in predicted:
        got, said = _scored(lesson, grade_id, namespace(lesson))
        assert got == predicted[grade_id].points, said
        return
    run_check(lesson, grade_id, namespace(lesson))


@pytest.mark.parametrize("lesson,grade_id", list(_all_checks()))
def test_blank_stub_fails(lesson, grade_id):
    with pytest.raises((NotImplementedError, AssertionError)):
        run_check(lesson, grade_id, namespace(lesson, student=True))


@pytest.mark.parametrize("lesson,grade_id", list(_all_checks()))
def test_every_check_has_two_mutants(lesson, grade_id):
    found = [m for module in MUTANT_MODULES if _load(module).LESSON == lesson for m in _load(module).MUTANTS.get(grade_id, [])]
    assert len(found) >= 2, f"{lesson}:{grade_id} has {len(found)} mutants; every check needs at least two"


_HIDDEN_BLOCK = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)


def visible_part(source: str) -> str:
    """A check cell as the learner's ✓ sees it: the hidden-tests block taken out."""
    return _HIDDEN_BLOCK.sub("", source)


def test_visible_part_drops_only_the_hidden_block():
    cell = "from grader.checks import x\n\nx.check(f)\n### BEGIN HIDDEN TESTS\nx.expect(f, want=1)\n### END HIDDEN TESTS\n"
    assert visible_part(cell) == "from grader.checks import x\n\nx.check(f)\n"
    assert visible_part("x.check(f)\n") == "x.check(f)\n"


def _failing_line(exc: BaseException, filename: str) -> int | None:
    """The line of the code compiled as `filename` that `exc` was raised through (its innermost frame there)."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _visible_alone_fails(lesson: str, grade_id: str, source: str, pattern: str, visible: str) -> None:
    """The visible part run on its own, after the mutant: it fails, with the message naming the mistake."""
    ns = namespace(lesson)
    exec(compile(source, "<mutant>", "exec"), ns)
    try:
        exec(compile(visible, f"<{lesson} {grade_id}, visible part>", "exec"), ns)
    except AssertionError as exc:
        assert re.search(pattern, str(exc)), f"the visible check failed, but its message does not name the mistake:\n{exc}"
    else:
        pytest.fail(f"the visible part of {grade_id} passes this mutant: only a hidden test would catch it")


@pytest.mark.parametrize("lesson,grade_id,source,pattern", list(_cases()))
def test_mutant_fails_with_its_message_in_the_visible_part(lesson, grade_id, source, pattern):
    """The check cell fails each mutant with the message that names its mistake, and so does the part of it the learner
    sees: no mutant passes the ✓ and loses points only in a hidden test, so the ✓ means the grade.

    One run of the whole cell shows both where the hidden block ends the cell (every cell today): the visible part is
    then the cell's first lines, and a failure at one of them is the visible part's own. Elsewhere the visible part
    is also run on its own."""
    ns = namespace(lesson)
    exec(compile(source, "<mutant>", "exec"), ns)
    cell = check_cells(lesson)[grade_id]
    visible = visible_part(cell)
    assert "HIDDEN" not in visible
    if grade_id in prediction_cells(lesson):  # a prediction: less than full credit, its feedback naming the mistake
        try:
            got, message = _scored(lesson, grade_id, ns)
        except AssertionError as exc:
            got, message = 0.0, str(exc)
        assert got < prediction_cells(lesson)[grade_id].points, message
        assert re.search(pattern, message), f"the prediction's feedback does not name the mistake:\n{message}"
        return
    with pytest.raises(AssertionError) as caught:
        run_check(lesson, grade_id, ns)
    message = str(caught.value)
    assert re.search(pattern, message), f"the check failed, but its message does not name the mistake:\n{message}"
    if cell.startswith(visible):  # the hidden block ends the cell
        line = _failing_line(caught.value, f"<{lesson} {grade_id}>")
        assert line is not None and line <= len(visible.splitlines()), (
            f"the visible part of {grade_id} passes this mutant: only a hidden test (cell line {line}) catches it")
    else:
        _visible_alone_fails(lesson, grade_id, source, pattern, visible)


# --- the same checks as the class grader runs them: observe beside the code, judge in the grader --------------


def _ask_in_process(ns: dict):
    """What the sandbox's runner does for an observe request, done here on `ns` (the learner's namespace)."""
    from grader.pipeline.cellrunner import _observe

    def ask(request):
        try:
            return "ok", {"ok": True, "observation": _observe(request, ns), "stdout": "", "stderr": ""}
        except BaseException as exc:  # noqa: BLE001  as the runner replies
            return "ok", {"ok": False, "ename": type(exc).__name__, "evalue": str(exc), "stdout": "", "stderr": ""}

    return ask


def _judged(lesson: str, grade_id: str, ns: dict) -> dict:
    """The class grader's reply; a prediction is judged with the record this test's kernel-side run wrote."""
    from grader import predictions
    from grader.pipeline.judging import judge_cell

    record = predictions.read()
    state, reply = judge_cell(check_cells(lesson)[grade_id], _ask_in_process(ns), record=record)
    assert state == "ok"
    return reply


@pytest.mark.parametrize("lesson,grade_id", list(_all_checks()))
def test_every_check_cell_is_a_list_of_check_calls(lesson, grade_id):
    from grader.pipeline.judging import plan_cell

    steps = plan_cell(check_cells(lesson)[grade_id])
    assert not steps[0].hidden, "a check cell starts with the check the learner sees"


@pytest.mark.parametrize("lesson,grade_id", list(_all_checks()))
def test_class_grader_passes_the_solution_and_fails_the_stub(lesson, grade_id):
    predicted = prediction_cells(lesson)
    if grade_id in predicted:  # recorded by the learner's own run first, then graded from that record
        got, _ = _scored(lesson, grade_id, namespace(lesson))
        assert _judged(lesson, grade_id, namespace(lesson)).get("score") == got == predicted[grade_id].points
    assert _judged(lesson, grade_id, namespace(lesson))["ok"] is True
    stub = _judged(lesson, grade_id, namespace(lesson, student=True))
    assert stub["ok"] is False and stub["ename"] in ("NotImplementedError", "CheckFailed"), stub


@pytest.mark.parametrize("lesson,grade_id,source,pattern", list(_cases()))
def test_class_grader_fails_each_mutant_with_its_message(lesson, grade_id, source, pattern):
    ns = namespace(lesson)
    exec(compile(source, "<mutant>", "exec"), ns)
    if grade_id in prediction_cells(lesson):  # the same score as the learner's kernel, from the same record
        try:
            got, _ = _scored(lesson, grade_id, ns)
        except AssertionError:
            got = 0.0
        reply = _judged(lesson, grade_id, ns)
        assert reply.get("score", 0.0) == got and (reply["ok"] is False or re.search(pattern, reply["stdout"])), reply
        return
    reply = _judged(lesson, grade_id, ns)
    assert reply["ok"] is False and re.search(pattern, reply["evalue"]), reply
