"""Run: execute lessons with papermill, any device, any parameters; and presenter copies for a workshop."""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path
from typing import Iterable

import nbformat

from grader import predictions
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
/* The "white" theme's headings are capitals; the lessons' are written as sentences. */
:root { --r-heading-text-transform: none; }
.reveal .jp-RenderedHTMLCommon { font-size: 19px; line-height: 1.45; }
.reveal .jp-RenderedHTMLCommon h1 { font-size: 1.9em; }
.reveal .jp-RenderedHTMLCommon h2 { font-size: 1.6em; }
.reveal .jp-RenderedHTMLCommon h3 { font-size: 1.3em; }
.reveal .jp-InputArea-editor .cm-content, .reveal .jp-OutputArea-output pre { font-size: 15px; }
/* A long code cell scrolls in its own box, so its subslide opens on the figure (1280×800). */
.reveal .jp-InputArea-editor { max-height: 230px; overflow-y: auto; }
.reveal .jp-OutputArea-output img { max-height: 400px; width: auto; }
/* Text, figures and widgets stay clear of the navigation arrows at the bottom right. */
.reveal .jp-Cell { padding-right: 96px; }
.reveal .slides section section { padding-bottom: 110px; box-sizing: border-box; }
"""


def write_deck_styles(root: Path, folder: Path, decks: Iterable[str]) -> None:
    """rise.css (RISE_CSS after lab-config/custom/custom.css, the course's wrapping of printed text) and, per deck,
    the <deck>.css jupyterlab-rise also asks for (empty: a missing one is a 404 and a console error on every deck)."""
    wrapping = (root / "lab-config" / "custom" / "custom.css").read_text()
    (folder / "rise.css").write_text(wrapping + RISE_CSS)
    for lesson in decks:
        (folder / f"{lesson}.css").write_text("/* this deck's own styles: none; rise.css holds the course's */\n")


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
        record = out_dir / f"{lesson}.{predictions.FILE_NAME}"  # a fresh record per run, beside its output
        record.unlink(missing_ok=True)
        ledger = out_dir / f"{lesson}.ledger.json"  # nor in the ledger of whoever runs it (a presenter's own guesses)
        ledger.unlink(missing_ok=True)
        try:  # the kernel inherits both: nothing written beside the source
            with predictions.environment(**{predictions.ENV_PATH: str(record), predictions.ENV_LEDGER: str(ledger)}):
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


# jupyterlab-rise moves between subslides with the notebook's own ↑/↓ shortcuts, which need the notebook to have
# the keyboard focus: on a fresh /rise/ page nothing has it until the slide is clicked. A trusted (signed) deck runs
# this once its slides are up, on the slides page only, and whenever focus falls back to the page itself.
FOCUS_SLIDES_JS = """\
(function focusSlides(tries) {
  const notebook = document.body.classList.contains('rise-enabled') && document.querySelector('.reveal .jp-Notebook');
  if (!notebook) { if (tries < 150) setTimeout(() => focusSlides(tries + 1), 200); return; }
  const focus = () => {
    if (document.activeElement === document.body || !document.activeElement) {
      (notebook.querySelector('.jp-Cell.jp-mod-active') || notebook.querySelector('.jp-Cell') || notebook).focus();
    }
  };
  [300, 1000, 2500, 5000].forEach(ms => setTimeout(focus, ms));
  document.addEventListener('keydown', focus, true);
})(0);
"""


def focus_cell() -> nbformat.NotebookNode:
    """A code cell that is no slide, whose saved output gives the slides the keyboard focus (FOCUS_SLIDES_JS)."""
    cell = nbformat.v4.new_code_cell(
        "# Presenter copy: this cell is no slide. Its output gives the slides the keyboard focus, so ↑/↓ work at once.",
        outputs=[nbformat.v4.new_output("display_data", data={"application/javascript": FOCUS_SLIDES_JS,
                                                              "text/plain": "(keyboard focus for the slides)"})],
        metadata={"slideshow": {"slide_type": "skip"}}, id="presenter-focus")
    return cell


def with_parameters(nb: nbformat.NotebookNode, parameters: dict) -> nbformat.NotebookNode:
    """`nb` with its parameters cell's own lines set to `parameters` (no papermill cell injected: no extra slide)."""
    cell = next((c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if cell is None or not parameters:
        return nb
    left = dict(parameters)
    lines = []
    for line in cell.source.splitlines():
        name = re.match(r"^([A-Za-z_]\w*) = ", line)
        if name and name.group(1) in left:
            comment = re.search(r"  # .*$", line)
            line = f"{name.group(1)} = {left.pop(name.group(1))!r}" + (comment.group(0) if comment else "")
        lines.append(line)
    lines += [f"{name} = {value!r}" for name, value in left.items()]
    cell.source = "\n".join(lines)
    return nb


def presented(executed: nbformat.NotebookNode, release: nbformat.NotebookNode | None, slides) -> nbformat.NotebookNode:
    """An executed solution notebook as a deck: learners' stubs shown as text, checks off the slides, signed.

    Each exercise cell becomes a markdown cell showing the stub learners start from (so it
    cannot be rerun on a slide and replace the instructor's answer in a live kernel); each
    check cell keeps its visible part but is no slide (its "all checks passed" was the
    instructor's answer's, not the stub's); slides are marked to fit 1280×800 (`slides` is
    scripts/lesson_source.py) and the notebook is signed, so JupyterLab trusts its widget
    outputs (an untrusted notebook shows a widget as its text repr).
    """
    nb = hide_answers(executed, release)
    nb.metadata.pop("papermill", None)
    for k, cell in enumerate(nb.cells):
        cell.metadata.pop("papermill", None)
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            stub = nbformat.v4.new_markdown_cell(
                "*What learners start from (they write the body):*\n\n```python\n" + cell.source.strip() + "\n```",
                metadata=dict(cell.metadata), id=cell.get("id"))
            nb.cells[k] = stub
    slides.mark_presenter_slides(nb)
    nb.cells.append(focus_cell())  # last: ↓ walks the cells in order, and a skipped cell between slides swallows a press
    from nbformat.sign import NotebookNotary

    NotebookNotary().sign(nb)
    return nb


def _release(root: Path, lesson: str) -> nbformat.NotebookNode | None:
    path = root / "notebooks" / lesson / f"{lesson}.ipynb"
    return nbformat.read(str(path), as_version=4) if path.exists() else None


def deck(root: Path, lesson: str, parameters: dict | None = None) -> nbformat.NotebookNode:
    """The solution notebook with demo=True (and `parameters`) written into its parameters cell."""
    nb = nbformat.read(str(root / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    return with_parameters(nb, {"demo": True, **(parameters or {})})


def run_deck(root: Path, lesson: str, parameters: dict | None = None, km=None) -> tuple[nbformat.NotebookNode, str]:
    """Execute a lesson's deck (in `km`'s running kernel, or a new one); returns it and "ok" or what failed."""
    from nbclient.exceptions import CellExecutionError

    from grader.pipeline.kernels import notebook_client

    from grader import predictions

    nb = deck(root, lesson, parameters)
    options = {"km": km} if km is not None else {"kernel_name": "python3"}
    try:
        with predictions.environment(**{predictions.ENV_LEDGER: ""}):  # its kernel: the solutions' answers in no ledger
            notebook_client(nb, timeout=CELL_TIMEOUT_SECONDS,
                            resources={"metadata": {"path": str(root / "solutions" / lesson)}}, **options).execute()
    except CellExecutionError as exc:
        return nb, f"failed: {exc.ename}: {exc.evalue}"
    except CellTimeoutError as exc:
        return nb, f"timed out: a cell ran longer than {CELL_TIMEOUT_SECONDS} s ({str(exc).splitlines()[0]})"
    return nb, "ok"


def presenter_copies(
    root: Path,
    only: Iterable[str] | None = None,
    parameters: dict | None = None,
    out_dir: Path | None = None,
    log=print,
) -> list[tuple[str, float, str]]:
    """Executed copies to present from: the solutions run with demo=True, then shown as learners see them.

    Writes `out_dir`/NN_topic.ipynb (default runs/presenter/): every exercise shows the
    learners' stub, check cells have no hidden tests and are no slides, every other output
    (figures, tables, widgets with their saved state) is kept, the parameters cell says
    demo = True, and slides are marked to fit 1280×800 (scripts/lesson_source.py).
    `make present` serves them, running each deck again in the kernel it presents with.
    """
    out_dir = (out_dir or root / "runs" / "presenter").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    slides = _lesson_source_module(root)
    chosen = list(only or lessons(root))
    results = []
    for i, lesson in enumerate(chosen, 1):
        start = time.perf_counter()
        executed, status = run_deck(root, lesson, parameters)
        nbformat.write(presented(executed, _release(root, lesson), slides), str(out_dir / f"{lesson}.ipynb"))
        seconds = time.perf_counter() - start
        log(f"[{i}/{len(chosen)}] {lesson}: {status} ({seconds:.1f} s) -> {out_dir / f'{lesson}.ipynb'}")
        results.append((lesson, seconds, status))
    write_deck_styles(root, out_dir, chosen)
    log(f"presenter copies in {out_dir}. To present: make present (it serves them and prints each deck's "
        f"slides URL), or .venv/bin/python -m grader lab --presenter {out_dir}")
    return results
