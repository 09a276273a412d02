"""From the runner's replies to grades: one row per check cell, the autograded notebook and the feedback page."""

from __future__ import annotations

import html
import re

import nbformat

from grader.checks._common import short
from grader.pipeline.grades import UNGRADED, CellResult

MESSAGE_CHARS = 6000  # a row's message: the check's (at most 4,000 characters) and the grader's notes
from grader.pipeline.submissions import Cell, _nbg


def score(student: str, lesson: str, cells: list[Cell], replies: list[dict], notes: list[str]) -> list[CellResult]:
    """One CellResult per check cell, from the runner's replies: the grader's judgement, not the student's."""
    rows, failed_before, exercises, previous = [], [], [], "check"
    for cell, reply in zip(cells, replies):
        if cell.kind == "student":
            exercises = [cell.grade_id] if previous == "check" else exercises + [cell.grade_id]
            previous = "student"
            if reply["status"] != "ok":
                failed_before.append(f"your cell '{cell.grade_id}': {_reason(reply)}")
            continue
        previous = "check"
        about = [f"'{g}'" for g in (cell.grade_id, *exercises)]  # notes on this check or the exercise it checks
        extra = [n for n in notes if any(a in n for a in about)]  # plan()'s notes: what the notebook changed
        if reply["status"] == "ok" and reply.get("score") is not None:  # a prediction's partial credit, in points
            got = min(max(float(reply["score"]), 0.0), cell.points)
            status, message = ("passed" if got >= cell.points else "failed"), _feedback(reply)
        elif reply["status"] == "ok":
            status, got, message = "passed", cell.points, ""
        else:
            got = 0.0
            status = {"error": "failed", "timeout": "timeout", "died": "crashed"}.get(reply["status"], "error")
            if reply.get("ename") == "CourseError":  # the course's fault: not graded, and the summary says so
                status = "error"
            if reply.get("outside"):  # the sandbox, the host or the grader failed, not the student: no grade
                status = UNGRADED
            message = _reason(reply)
            if reply.get("ename") == "NameError" and failed_before:
                message += " (" + "; ".join(failed_before[-2:]) + ")"
        message = short("; ".join([m for m in [message, *extra] if m]), MESSAGE_CHARS)
        rows.append(CellResult(student, lesson, cell.grade_id, got, cell.points, status, message))
    return rows


def _feedback(reply: dict) -> str:
    """A prediction's feedback: the last line its check printed (its score and what it names)."""
    lines = [line for line in str(reply.get("stdout") or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _reason(reply: dict) -> str:
    """Why a cell did not pass, in the learner's terms."""
    if reply["status"] in ("timeout", "died", "not run"):
        return reply["evalue"]
    if reply.get("ename") == "NotImplementedError":
        return "not attempted: the exercise still raises NotImplementedError"
    evalue = str(reply.get("evalue"))
    hint = next((h for words, h in LIMIT_HINTS if words in evalue), "")
    if reply.get("ename") == "CheckFailed":
        return (evalue or "the check failed") + hint
    return f"{reply.get('ename')}: {evalue}{hint}"


LIMIT_HINTS = [  # an error the grader's limits cause, and the words that say so
    ("[Errno 28] No space left on device", " (the disk quota: what a submission may write, in its workspace or /dev/shm, is capped)"),
    ("[Errno 11] Resource temporarily unavailable", " (the process cap: too many processes or threads at once)"),
    ("can't start new thread", " (the process cap or the memory limit: too many threads at once)"),
]


def md_text(text) -> str:
    """Student-controlled text made inert in Markdown: no HTML, links, images, code spans, maths or table cells."""
    text = re.sub(r"([\\`\[\]|$])", r"\\\1", str(text)).replace("\r", " ").replace("\n", " ")
    return html.escape(text, quote=False)


def md_code(text) -> str:
    """Student-controlled text as a Markdown code span: shown as typed, no HTML, and no maths (MathJax skips <code>)."""
    text = str(text).replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def error_rows(student: str, lesson: str, source_nb, reason: str, status: str = "error") -> list[CellResult]:
    """Zero on every check of a submission that could not be graded, each row giving the reason.

    status "error": the submission's own fault (unreadable, malformed); UNGRADED: the grader's, no grade at all.
    """
    return [CellResult(student, lesson, _nbg(c)["grade_id"], 0.0, float(_nbg(c).get("points", 0) or 0), status, reason)
            for c in source_nb.cells if c.cell_type == "code" and _nbg(c).get("grade")]


SOURCE_CHARS = 20_000  # of one cell's source, shown in the autograded notebook and the feedback
SOURCES_TOTAL_CHARS = 400_000  # of all its cells' sources together: with the outputs' 200,000, what a page renders


def _shown_source(source: str, left: int) -> tuple[str, int]:
    """A cell's source as the pages show it: at most SOURCE_CHARS and what is `left` of the total, the cut said."""
    room = min(SOURCE_CHARS, left)
    if len(source) <= room:
        return source, left - len(source)
    return (source[:room] + f"\n# [... {len(source) - room} more characters of this cell not shown: the grader shows at "
            f"most {SOURCE_CHARS:,} per cell and {SOURCES_TOTAL_CHARS:,} in all; all of it ran]"), left - room


def executed_notebook(cells: list[Cell], replies: list[dict], rows: list[CellResult], notes: list[str]) -> nbformat.NotebookNode:
    """The cells as they ran, with their outputs and a summary on top: the autograded notebook.

    Its size is bounded whatever the submission held: at most MAX_ADDED_CELLS
    added cells, SOURCES_TOTAL_CHARS of source and runner.OUTPUT_TOTAL_CHARS
    of output (each cut says so where it is).
    """
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    total, best = sum(r.score for r in rows), sum(r.max_score for r in rows)
    lines = [f"# Score: {total:g} / {best:g}", ""] + [
        f"- `{r.grade_id}`: {r.score:g} / {r.max_score:g} ({r.status}){': ' + md_code(r.message) if r.message else ''}"
        for r in rows]
    lines += [""] + [f"- note: {md_code(n)}" for n in notes]
    nb.cells.append(nbformat.v4.new_markdown_cell("\n".join(lines)))
    left = SOURCES_TOTAL_CHARS
    for cell, reply in zip(cells, replies):
        source, left = (cell.source, left) if cell.kind == "check" else _shown_source(cell.source, left)
        code = nbformat.v4.new_code_cell(source)
        code.metadata["nbgrader"] = {"grade_id": cell.grade_id, "grade": cell.kind == "check", "solution": cell.kind == "student",
                                     "points": cell.points, "locked": cell.kind == "check", "schema_version": 3}
        for name in ("stdout", "stderr"):
            if reply.get(name):
                code.outputs.append(nbformat.v4.new_output("stream", name=name, text=reply[name]))
        if reply["status"] != "ok":
            code.outputs.append(nbformat.v4.new_output("error", ename=reply.get("ename") or reply["status"],
                                                       evalue=_reason(reply), traceback=[_reason(reply)]))
        nb.cells.append(code)
    return nb


def feedback_html(nb: nbformat.NotebookNode) -> str:
    """The student's feedback page: outputs and messages, never the hidden tests (grader.feedback)."""
    from nbconvert import HTMLExporter

    from grader.pipeline.feedback import HideHiddenTests

    exporter = HTMLExporter()
    exporter.register_preprocessor(HideHiddenTests(), enabled=True)
    body, _ = exporter.from_notebook_node(nb)
    return body
