"""Sealed functions (grader.checks._sealed): a prediction's model runs in the learner's kernel, but its source is not
in what the learner reads. Copy tests read lesson 09's `_batch_model` and `_tps_targets` and wrote their predictions
from them (issue 33, r8)."""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from grader import predictions
from grader.checks import _sealed

sys.path.insert(0, str(ROOT / "scripts"))
import build_keys  # noqa: E402

SEALED_LESSONS = sorted(p.stem[len("lesson"):] for p in (ROOT / "solutions" / "sealed").glob("lesson*.py"))
LESSON_IDS = {p.name[:2]: p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit()}


def _instructor(number: str) -> dict[str, str]:
    return _sealed.functions((ROOT / "solutions" / "sealed" / f"lesson{number}.py").read_text())


def _module(number: str):
    return importlib.import_module(f"grader.checks.lesson{number}")


def test_lesson_09s_models_are_sealed():
    assert "09" in SEALED_LESSONS
    assert {"_batch_model", "_tps_targets", "_ceiling"} <= set(_instructor("09"))


@pytest.mark.parametrize("number", SEALED_LESSONS)
def test_the_sealed_file_is_what_the_instructors_source_makes(number):
    """Edit solutions/sealed/lessonNN.py and forget python scripts/build_keys.py: this fails."""
    lesson = LESSON_IDS[number]
    assert _sealed.path(lesson).read_text() == build_keys.text(build_keys.build_sealed(lesson))


@pytest.mark.parametrize("number", SEALED_LESSONS)
def test_every_sealed_function_has_a_stub_with_no_body_and_back(number):
    """A stub is a signature and a docstring: the body is in the sealed file only. And no stub without a sealed body,
    no sealed body without a stub."""
    _module(number)
    lesson = LESSON_IDS[number]
    stubs = {name: module for (les, name), (module, _) in _sealed.stubs().items() if les == lesson}
    assert set(stubs) == set(_instructor(number))
    for name, module in stubs.items():
        tree = ast.parse(Path(module.__file__).read_text())
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        assert any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "sealed" for d in node.decorator_list)
        assert len(node.body) == 1 and isinstance(node.body[0], ast.Expr) \
            and isinstance(node.body[0].value, ast.Constant), f"{name}'s stub has a body"
        assert getattr(module, name).__name__ == name


def _flat(text: str) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


@pytest.mark.parametrize("number", SEALED_LESSONS)
def test_no_statement_of_a_sealed_body_is_in_the_package(number):
    """The point of sealing: none of a sealed function's statements (each whole, a block with what it holds) can be
    read in the installed package. Short ones and imports are anybody's."""
    package = _flat("\n".join(p.read_text() for p in (ROOT / "grader").rglob("*.py")))
    for name, source in _instructor(number).items():
        node = ast.parse(source).body[0]
        body = node.body[1:] if ast.get_docstring(node) else node.body
        for statement in body:
            text = _flat(ast.get_source_segment(source, statement))
            if len(text) > 40 and not isinstance(statement, (ast.Import, ast.ImportFrom)):
                assert text not in package, f"{name}: {text!r} is in the package"


def test_the_sealed_file_reads_as_noise():
    data = json.loads(_sealed.path("09_serving").read_text())
    assert "weight_bytes" not in json.dumps(data) and "bandwidth" not in json.dumps(data)
    assert set(data["functions"]) == set(_instructor("09"))


@pytest.fixture
def record(tmp_path, monkeypatch):
    monkeypatch.setenv(predictions.ENV_PATH, str(tmp_path / predictions.FILE_NAME))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv(predictions.ENV_GRADING, raising=False)
    predictions._MEMORY.clear()
    from grader.checks import _common

    _common._ASKED.clear()
    return tmp_path


@pytest.mark.parametrize("how", ["open", "source", "stub", "private"])
def test_opening_a_model_from_a_cell_before_the_first_guess_is_the_reveal(record, capsys, how):
    """Reading the model on purpose is the deliberate reveal, recorded: through the opener, or calling the stub (a
    course_only model, counted as every model is)."""
    from grader.checks import lesson09

    name = lesson09.check_batch_prediction.name
    if how == "open":
        assert callable(_sealed.open(lesson09.LESSON, "_batch_model"))
    elif how == "source":
        assert "def _batch_model" in _sealed.source(lesson09.LESSON, "_batch_model")
    elif how == "stub":
        lesson09._batch_model({})
    else:  # the module's own helpers, called from a cell
        _sealed._function(lesson09.LESSON, "_batch_model")
    found = predictions.entry(lesson09.LESSON, name)
    assert found and found.get("revealed") and not predictions.committed(found)


def test_after_the_first_guess_the_model_opens_without_a_reveal(record, capsys):
    from grader.checks import lesson09

    predictions.note_measured(lesson09.LESSON, bandwidth=1e10, weight_bytes=1e9, n_params=2.5e8,
                              matmul_rate_1=5e9, matmul_rate_16=4e10)
    check = lesson09.check_batch_prediction
    check({"tokens/s at batch 16 over batch 1": 8.0, "why": "one reading shared by sixteen"})
    assert "def _batch_model" in _sealed.source(lesson09.LESSON, "_batch_model")
    found = predictions.entry(lesson09.LESSON, check.name)
    assert found.get("first") and not found.get("revealed") and predictions.committed(found)


def test_a_sealed_function_runs_as_the_modules_own_code():
    """The course's guards tell course code by its file: a sealed model calling another counts as the course asking,
    not as a cell (else a check's own band would stamp a reveal)."""
    from grader import shortcuts
    from grader.checks import lesson09

    opened = _sealed._function(lesson09.LESSON, "_tps_band")
    assert opened.__code__.co_filename == lesson09.__file__
    assert opened.__globals__ is vars(lesson09)
    assert shortcuts.course_only  # the stubs are course_only-wrapped around the sealed forwarder
    assert getattr(lesson09._batch_model, "course_only", None)


def test_a_decorated_function_cannot_be_sealed():
    with pytest.raises(ValueError, match="decorator"):
        _sealed.functions("@thing\ndef f():\n    return 1\n")
