"""What a class handed in: finding submissions, reading one notebook safely, and planning the cells to run."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import nbformat

_CHECKS_IMPORT = re.compile(r"^\s*from\s+(grader\.checks)\s+import\s+(\w+)|^\s*import\s+(grader\.checks\.\w+)", re.M)
_HIDDEN = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", re.S)


@dataclass
class Cell:
    """One cell to run: the student's ('student') or the course's check ('check')."""

    kind: str
    grade_id: str
    source: str
    points: float = 0.0
    note: str = ""


class SubmissionError(Exception):
    """A submission that cannot be graded at all (unreadable, malformed): 0 with this reason."""


def _nbg(cell) -> dict:
    """A cell's nbgrader metadata ({} for an ordinary cell)."""
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def read_submission(path: Path) -> nbformat.NotebookNode:
    """The student's notebook as nbformat 4, or SubmissionError saying why it cannot be read."""
    if not path.is_file():
        found = sorted(p.name for p in path.parent.glob("*.ipynb"))
        raise SubmissionError(f"no {path.name} in the submission (found: {', '.join(found) or 'no notebooks'})")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SubmissionError(f"unreadable notebook: {type(exc).__name__}: {exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"malformed notebook: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("cells", []), list):
        raise SubmissionError("malformed notebook: the JSON is not a notebook (no list of cells)")
    major = raw.get("nbformat")
    if major != 4:
        try:
            return nbformat.reads(text, as_version=4)
        except Exception as exc:  # noqa: BLE001  nbformat raises many kinds for a bad version
            raise SubmissionError(f"unsupported notebook format nbformat={major!r}: {type(exc).__name__}: {exc}") from exc
    try:
        nb = nbformat.from_dict(raw)
        for cell in nb.cells:
            if not isinstance(cell.get("source", ""), (str, list)) or "cell_type" not in cell:
                raise ValueError("a cell has no cell_type or a source that is not text")
            if isinstance(cell.source, list):
                cell.source = "".join(cell.source)
        return nb
    except Exception as exc:  # noqa: BLE001
        raise SubmissionError(f"malformed notebook: {type(exc).__name__}: {exc}") from exc


def plan(source_nb: nbformat.NotebookNode, student_nb: nbformat.NotebookNode) -> tuple[list[Cell], list[str]]:
    """The cells to run, in the instructor source's order, and notes on what the student's notebook changed."""
    notes: list[str] = []
    known_sources = {c.source for c in source_nb.cells}
    by_id = {c.get("id"): c for c in source_nb.cells if c.get("id")}
    source_ids = {_nbg(c).get("grade_id") for c in source_nb.cells if _nbg(c).get("grade_id")}
    exercises: dict[str, str] = {}
    added: dict[str, list[str]] = {}
    pending: list[str] = []
    student_checks: dict[str, str] = {}
    for cell in student_nb.cells:
        if cell.get("cell_type") != "code":
            continue
        meta = _nbg(cell)
        gid = meta.get("grade_id")
        if meta.get("solution"):
            if gid not in source_ids:
                twin = by_id.get(cell.get("id"))
                if twin is not None and _nbg(twin).get("solution"):
                    notes.append(f"exercise cell '{_nbg(twin)['grade_id']}' had its grade_id changed to {gid!r}; graded as '{_nbg(twin)['grade_id']}'")
                    gid = _nbg(twin)["grade_id"]
                else:
                    notes.append(f"an exercise cell with unknown grade_id {gid!r} was not graded")
                    continue
            if gid in exercises:
                notes.append(f"exercise cell '{gid}' appears more than once; the last one was graded")
            exercises[gid] = cell.source
            added.setdefault(gid, []).extend(pending)
            pending = []
        elif meta.get("grade"):
            student_checks[gid] = cell.source
        elif not meta and cell.source.strip() and cell.source not in known_sources:
            pending.append(cell.source)
    cells: list[Cell] = []
    for cell in source_nb.cells:
        meta = _nbg(cell)
        gid = meta.get("grade_id")
        if cell.cell_type != "code" or not gid:
            continue
        if meta.get("solution"):
            for extra in added.get(gid, []):
                cells.append(Cell("student", gid, extra, note="a cell you added"))
            if gid in exercises:
                cells.append(Cell("student", gid, exercises[gid]))
            else:
                notes.append(f"exercise cell '{gid}' is missing from the submission")
                cells.append(Cell("student", gid, "raise NotImplementedError('exercise cell missing')", note="missing"))
        if meta.get("grade"):
            if gid not in student_checks:
                notes.append(f"check cell '{gid}' was missing; the course's own was run")
            elif _bare(student_checks[gid]) != _bare(cell.source):
                notes.append(f"check cell '{gid}' was edited; the course's own was run")
            cells.append(Cell("check", gid, cell.source, float(meta.get("points", 0) or 0)))
    return cells, notes


def _bare(source: str) -> list[str]:
    """A check cell's lines without hidden tests, blank lines or trailing spaces: to spot an edited copy."""
    return [line.rstrip() for line in _HIDDEN.sub("", source).splitlines() if line.strip()]


def check_modules(cells: list[Cell]) -> list[str]:
    """The grader.checks modules the check cells import: imported clean before any student code runs."""
    found = set()
    for cell in cells:
        if cell.kind == "check":
            for pkg, name, dotted in _CHECKS_IMPORT.findall(cell.source):
                found.add(f"{pkg}.{name}" if name else dotted)
    return sorted(found)


def submissions_of(submissions: Path, only: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(student, lesson) pairs under SUBMISSIONS/<student>/<lesson>/, sorted."""
    wanted = set(only) if only else None
    pairs = []
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir()):
        for lesson_dir in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            if wanted is None or lesson_dir.name in wanted:
                pairs.append((student_dir.name, lesson_dir.name))
    return pairs


def shard_of(pairs: list[tuple[str, str]], index: int, count: int) -> list[tuple[str, str]]:
    """The index-th of count slices (index from 0), by a hash of student and lesson: stable as the class grows."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: the index must be 0..{count - 1}")
    return [p for p in pairs if zlib.crc32(f"{p[0]}/{p[1]}".encode()) % count == index]


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' -> (I, N)."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes I/N, e.g. 0/4 (I from 0 to N-1), not {text!r}") from None
    shard_of([], index, count)
    return index, count
