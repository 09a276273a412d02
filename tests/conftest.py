"""Shared fixtures: where the course is, and how to pull cells out of its notebooks."""

from __future__ import annotations

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


def lesson_ids() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def read_notebook(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)
