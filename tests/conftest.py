"""Shared fixtures: where the course is, and how to pull cells out of its notebooks."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

# nbgrader runs alembic and papermill starts kernels: both must come from this interpreter's environment.
os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")


def _no_bwrap_means_no_sandbox() -> None:
    """Where bwrap cannot run (a laptop without it), the tests that grade a class ask for no sandbox by name."""
    from grader.pipeline.sandbox import bwrap_works

    if "GRADER_SANDBOX" not in os.environ and not bwrap_works():
        os.environ["GRADER_SANDBOX"] = "none"


_no_bwrap_means_no_sandbox()
# Lesson 08's kernels are decorated in exec'd cells (no source file): only the interpreter's @triton.jit takes them.
os.environ.setdefault("TRITON_INTERPRET", "1")
# No learner's ledger of first guesses (grader.predictions.ledger_path) in what the tests start: one in the tester's
# home would carry one test's guesses into another's folder. The tests of the ledger point GRADER_LEDGER at their own.
os.environ["GRADER_LEDGER"] = ""


def lesson_ids() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def blank_run_group(lesson: str) -> pytest.MarkDecorator:
    """The xdist group of every test that reads `lesson`'s blank release run (`blank_release`): one worker runs it once."""
    return pytest.mark.xdist_group(f"blank-{lesson}")


@pytest.fixture(scope="session")
def blank_release(tmp_path_factory):
    """`blank_release(lesson)`: the blank student notebook (notebooks/, as stored) run cell by cell, errors kept, and
    the predictions record its kernel wrote; run once per lesson for every test that only reads what it showed.

    The kernel starts as `fresh_predictions` leaves a test's: a record of its own, no ledger, no grading.
    """
    from grader import predictions
    from grader.pipeline.kernels import notebook_client

    done: dict[str, tuple[nbformat.NotebookNode, dict]] = {}

    def executed(lesson: str) -> tuple[nbformat.NotebookNode, dict]:
        if lesson not in done:
            path = ROOT / "notebooks" / lesson / f"{lesson}.ipynb"
            record = tmp_path_factory.mktemp(f"blank-{lesson}") / predictions.FILE_NAME
            nb = read_notebook(path)
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv(predictions.ENV_PATH, str(record))
                mp.setenv(predictions.ENV_LEDGER, "")
                for name in ("NBGRADER_EXECUTION", predictions.ENV_GRADING):
                    mp.delenv(name, raising=False)
                notebook_client(nb, timeout=600, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(path.parent)}}).execute()
            done[lesson] = nb, predictions.read(record)
        nb, record = done[lesson]
        return copy.deepcopy(nb), copy.deepcopy(record)  # each test reads its own copy

    return executed


def read_notebook(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def processes_tagged(tag: str) -> list[int]:
    """Pids of live processes whose environment holds `tag` (a kernel, or the ranks it forked, inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = next((line for line in (entry / "status").read_text().splitlines() if line.startswith("State:")), "")
        except OSError:  # gone meanwhile, or not ours
            continue
        if tag.encode() in environ.split(b"\0") and "Z" not in state.split(":", 1)[-1][:3]:
            found.append(int(entry.name))
    return found


@pytest.fixture
def process_tag(monkeypatch) -> str:
    """An environment variable set for this test only: what the test starts inherits it, so leftovers can be found."""
    import uuid

    value = uuid.uuid4().hex
    monkeypatch.setenv("GRADER_TEST_TAG", value)
    return f"GRADER_TEST_TAG={value}"


@pytest.fixture(autouse=True)
def fresh_predictions(tmp_path, monkeypatch):
    """Every test records predictions in a file of its own (grader.predictions): never beside a notebook in the repo."""
    from grader import predictions

    path = tmp_path / predictions.FILE_NAME
    monkeypatch.setenv(predictions.ENV_PATH, str(path))
    monkeypatch.setenv(predictions.ENV_LEDGER, "")  # no ledger (the tests of it make their own): never the tester's
    for name in ("NBGRADER_EXECUTION", predictions.ENV_GRADING):
        monkeypatch.delenv(name, raising=False)
    predictions._MEMORY.clear()
    predictions._SHOWN.clear()
    from grader.checks import _common

    _common._ASKED.clear()  # the models this kernel asked for before a first guess: a fresh kernel asked none
    from grader import shortcuts

    shortcuts._fresh_kernel()  # what a kernel counted (a quiz's answer keys called): each test starts a fresh one
    return path


def quiet_model(wrapper):
    """A course_only model's own function (grader.shortcuts._INNER), called as the grader calls it: uncounted, and no
    reveal stamped in the record in use (a cell that calls it before a first guess records one; a test is no cell)."""
    from grader import predictions, shortcuts

    inner = shortcuts._INNER[wrapper]

    def call(*args, **kwargs):
        with predictions.environment(**{predictions.ENV_GRADING: "1"}):
            return inner(*args, **kwargs)

    return call
