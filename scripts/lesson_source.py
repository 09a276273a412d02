"""Edit a lesson as plain Python: convert between a notebook and jupytext's percent format.

    python scripts/lesson_source.py to-py solutions/01_crossover/01_crossover.ipynb /tmp/01.py
    python scripts/lesson_source.py to-ipynb /tmp/01.py solutions/01_crossover/01_crossover.ipynb
    python scripts/lesson_source.py slides solutions/*/*.ipynb     # re-mark slides in place

`mark_presenter_slides` (finer slides for presenting: a slide per heading, a subslide per
code cell with its lead-in and its explanation) is applied only to presenter copies, by
`python -m grader run --demo` and `make present`.

Cell metadata (nbgrader's, tags) travels in the `# %%` header lines. The
notebook written is normalised the way the repository stores notebooks: no
outputs, no execution counts, no jupytext metadata, the python3 kernelspec.
Then run `python -m grader release` to regenerate the student version.
"""

from __future__ import annotations

import sys

import jupytext
import nbformat

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def mark_slides(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Presenter slides (jupyterlab-rise): every markdown cell that opens with a # or ## heading starts one."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith(("# ", "## ")):
            cell.metadata["slideshow"] = {"slide_type": "slide"}
        else:
            cell.metadata.pop("slideshow", None)
    return nb


# jupyterlab-rise's notebook settings for presenting: a 1280×800 slide that scrolls where a part is long. The "white"
# theme's font ships with jupyterlab-rise ("simple", its default, asks Google's font service: a room offline waits).
RISE = {"scroll": True, "width": 1280, "height": 800, "minScale": 0.5, "center": False, "theme": "white",
        "transition": "none", "start_slideshow_at": "beginning", "enable_chalkboard": False}


def _is_heading(cell) -> bool:
    return cell.cell_type == "markdown" and cell.source.lstrip().startswith("#")


def _is_check(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


def _is_stub(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


# Prose this short (characters) shares a slide with the code it introduces or the output it explains.
LEAD_IN_CHARS = 500


def _is_code(cell) -> bool:
    return cell.cell_type == "code" or _is_stub(cell)


def _is_short_prose(cell) -> bool:
    return cell.cell_type == "markdown" and not _is_stub(cell) and len(cell.source) <= LEAD_IN_CHARS


def mark_presenter_slides(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Slides that carry one thought each, for presenter copies (`python -m grader run --demo`), not the stored lessons.

    Every heading (any level) starts a slide. Each code cell (or exercise stub) starts a
    subslide with its output, unless the prose right before it is short (LEAD_IN_CHARS): then
    that lead-in and the cell it introduces share one. Prose right after a code cell opens the
    next code cell's subslide when it leads into it (short, and code comes next); otherwise, when
    short, it stays with the output it explains; long, it has a subslide of its own. Prose after
    prose or a heading stays on that slide. Check cells are no slide ("skip": what they printed was
    the instructor's answer's). Sets jupyterlab-rise's settings (RISE) too.
    """
    shown = [cell for cell in nb.cells if not _is_check(cell)]
    for cell in nb.cells:
        if _is_check(cell):
            cell.metadata["slideshow"] = {"slide_type": "skip"}
    for k, cell in enumerate(shown):
        previous = shown[k - 1] if k else None
        following = shown[k + 1] if k + 1 < len(shown) else None
        if _is_heading(cell):
            kind = "slide"
        elif _is_code(cell):
            kind = "-" if previous is not None and _is_short_prose(previous) else "subslide"
        elif previous is not None and _is_code(previous):
            leads_in = _is_short_prose(cell) and following is not None and _is_code(following)
            kind = "-" if _is_short_prose(cell) and not leads_in else "subslide"
        else:
            kind = "-"
        cell.metadata["slideshow"] = {"slide_type": kind}
    nb.metadata["rise"] = dict(RISE)
    return nb


def normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip outputs, counts and editor metadata; keep nbgrader metadata and tags; mark slides."""
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    for cell in nb.cells:
        keep = {k: v for k, v in cell.metadata.items() if k in ("nbgrader", "tags", "slideshow")}
        cell.metadata = keep
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    mark_slides(nb)
    # Stable ids (the cell's position), so regenerating an unchanged lesson changes nothing.
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
    return nb


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "slides":
        for path in argv[1:]:
            nbformat.write(mark_slides(nbformat.read(path, as_version=4)), path)
        return 0
    if len(argv) != 3 or argv[0] not in ("to-py", "to-ipynb"):
        print(__doc__)
        return 2
    verb, src, dest = argv
    if verb == "to-py":
        jupytext.write(jupytext.read(src), dest, fmt="py:percent")
    else:
        nb = jupytext.read(src, fmt="py:percent")
        nb.nbformat, nb.nbformat_minor = 4, 5
        nbformat.write(normalise(nb), dest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
