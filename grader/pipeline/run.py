"""Run: execute lessons with papermill, any device, any parameters; and presenter copies for a workshop."""

from __future__ import annotations

import importlib.util
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterable

import nbformat

from grader.pipeline.feedback import _HIDDEN
from nbclient.exceptions import CellTimeoutError

from grader.pipeline.kernels import execute_notebook
from grader.pipeline.tools import lessons

CELL_TIMEOUT_SECONDS = 900  # a cell still running after this fails its run, so nothing waits forever

_SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION.*?### END SOLUTION[ \t]*$", re.S | re.M)
# What nbgrader leaves in place of a solution (its ClearSolutions stub for Python).
_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
# jupyterlab-rise reads rise.css beside the notebook: type big enough for a projector on a 1280×800 slide.
RISE_CSS = """\
.reveal .jp-RenderedHTMLCommon { font-size: 19px; line-height: 1.45; }
.reveal .jp-RenderedHTMLCommon h1 { font-size: 1.9em; }
.reveal .jp-RenderedHTMLCommon h2 { font-size: 1.6em; }
.reveal .jp-RenderedHTMLCommon h3 { font-size: 1.3em; }
.reveal .jp-InputArea-editor .cm-content, .reveal .jp-OutputArea-output pre { font-size: 15px; }
"""


def run(
    root: Path,
    only: Iterable[str] | None = None,
    parameters: dict | None = None,
    out_dir: Path | None = None,
    student: bool = False,
    log=print,
) -> list[tuple[str, float, str]]:
    """Execute lessons with papermill; returns (lesson, seconds, status) for each, printing a line per notebook."""
    import papermill

    out_dir = (out_dir or root / "runs").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    source = root / ("notebooks" if student else "solutions")
    chosen = list(only or lessons(root))
    results = []
    for i, lesson in enumerate(chosen, 1):
        notebook = source / lesson / f"{lesson}.ipynb"
        output = out_dir / f"{lesson}.ipynb"
        start = time.perf_counter()
        status = "ok"
        try:
            execute_notebook(
                str(notebook),
                str(output),
                parameters=parameters or {},
                cwd=str(notebook.parent),
                kernel_name="python3",
                progress_bar=False,
                log_output=False,
                execution_timeout=CELL_TIMEOUT_SECONDS,
            )
        except papermill.PapermillExecutionError as exc:
            status = f"failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
        except CellTimeoutError as exc:
            status = f"timed out: a cell ran longer than {CELL_TIMEOUT_SECONDS} s ({str(exc).splitlines()[0]})"
        seconds = time.perf_counter() - start
        log(f"[{i}/{len(chosen)}] {lesson}: {status} ({seconds:.1f} s) -> {output}")
        results.append((lesson, seconds, status))
    return results


def _lesson_source_module(root: Path):
    """scripts/lesson_source.py, which owns how slides are marked."""
    spec = importlib.util.spec_from_file_location("lesson_source", root / "scripts" / "lesson_source.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nbgrader_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def hide_answers(executed: nbformat.NotebookNode, release: nbformat.NotebookNode | None) -> nbformat.NotebookNode:
    """An executed solution notebook as learners would see its code: stubs, no hidden tests, other outputs kept.

    Each exercise (nbgrader solution) cell gets the source the release shows learners (by
    grade_id) and loses its outputs; each check cell loses its hidden tests (the regex
    feedback pages use). Without a release cell to copy, solution regions become nbgrader's stub.
    """
    released = {_nbgrader_id(c): c.source for c in (release.cells if release else []) if _nbgrader_id(c)}
    for cell in executed.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            stub = released.get(meta.get("grade_id"))
            cell.source = stub if stub is not None else _SOLUTION.sub(
                lambda m: "\n".join(m.group(1) + line for line in _STUB.splitlines()), cell.source)
            cell.outputs = []
            cell.execution_count = None
        if "BEGIN HIDDEN TESTS" in cell.source:
            cell.source = _HIDDEN.sub("", cell.source)
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":  # a traceback would print check code
                out["traceback"] = [f"{out.get('ename')}: {out.get('evalue')}"]
    return executed


def presenter_copies(
    root: Path,
    only: Iterable[str] | None = None,
    parameters: dict | None = None,
    out_dir: Path | None = None,
    log=print,
) -> list[tuple[str, float, str]]:
    """Executed copies to present from: the solutions run with demo=True, then shown as learners see them.

    Writes `out_dir`/NN_topic.ipynb (default runs/presenter/): every exercise cell shows the
    learners' stub, check cells have no hidden tests, every other output is kept, and
    slides are marked to fit 1280×800 and scroll (scripts/lesson_source.py).
    """
    out_dir = (out_dir or root / "runs" / "presenter").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    slides = _lesson_source_module(root)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-presenter-"))
    try:
        def say(line: str) -> None:  # each line names the copy it will become, not the scratch file
            log(line.replace(str(scratch.resolve()), str(out_dir)).replace(str(scratch), str(out_dir)))

        results = run(root, only, {"demo": True, **(parameters or {})}, scratch, log=say)
        for lesson, _, status in results:
            executed = scratch / f"{lesson}.ipynb"
            if not executed.exists():
                continue
            release_path = root / "notebooks" / lesson / f"{lesson}.ipynb"
            release = nbformat.read(str(release_path), as_version=4) if release_path.exists() else None
            nb = hide_answers(nbformat.read(str(executed), as_version=4), release)
            nb.metadata.pop("papermill", None)
            for cell in nb.cells:
                cell.metadata.pop("papermill", None)
            slides.mark_presenter_slides(nb)
            nbformat.write(nb, str(out_dir / f"{lesson}.ipynb"))
        (out_dir / "rise.css").write_text(RISE_CSS)
        log(f"presenter copies in {out_dir}: open them with `jupyter lab {out_dir}`, then Alt+R for slides")
        return results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
