"""What a class handed in: finding submissions, reading one notebook safely, and planning the cells to run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import nbformat
from nbgrader.utils import compute_checksum, is_grade, is_solution

MAX_NOTEBOOK_BYTES = 20 * 1024**2  # a notebook bigger than this is not read: 0 with the reason
MAX_DEPTH = 64  # JSON nested deeper than this is not a notebook
MAX_ADDED_CELLS = 40  # code cells a student added that are run, over the whole notebook; the rest are not (a note says so)
MAX_NOTES = 30  # notes kept on one submission; the rest are counted
_SURROGATE = re.compile("[\ud800-\udfff]")
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
    """A cell's nbgrader metadata ({} for an ordinary cell); read_submission has checked its shape."""
    meta = cell.get("metadata", {})
    found = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return found if isinstance(found, dict) else {}


def clean_text(text: str) -> str:
    """Text any file can hold: lone surrogates (from JSON escapes or undecodable file names) become U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """Text that cannot start a line of its own in a line-oriented file: every line break shown as its escape."""
    return _LINE_BREAKS.sub(lambda m: ascii(m.group())[1:-1], clean_text(str(text)))


def clean(value):
    """A JSON-like value with every string cleaned (clean_text), keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return type(value)((clean(k), clean(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(clean(v) for v in value)
    return value


def shown(name: str) -> str:
    """A file or folder name as it can be shown anywhere: escaped where it is not valid UTF-8."""
    if not _SURROGATE.search(name):
        return name
    try:
        return repr(os.fsencode(name))[2:-1]  # the bytes on disk, as \xNN
    except UnicodeError:
        return ascii(name)[1:-1]


def notebook_digest(path: Path) -> str:
    """sha256 of a submission's notebook without following a symlink or reading past the size cap ('' if missing)."""
    try:
        info = os.lstat(path)
    except OSError:
        return ""
    if stat.S_ISLNK(info.st_mode):
        return "symlink:" + hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()
    digest = hashlib.sha256(f"{info.st_size}:".encode())
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
            digest.update(f.read(MAX_NOTEBOOK_BYTES + 1))
    except OSError:
        return f"unreadable:{info.st_size}:{info.st_mtime_ns}"
    return digest.hexdigest()


def _depth_ok(value, limit: int = MAX_DEPTH) -> bool:
    """True when lists and dicts in `value` are nested at most `limit` deep (checked without recursion)."""
    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            if depth >= limit:
                return False
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return True


def _shape_problem(raw) -> str | None:
    """What makes this JSON not a notebook the grader can read, in words; None when its shape is fine."""
    if not isinstance(raw, dict) or not isinstance(raw.get("cells", []), list):
        return "the JSON is not a notebook (no list of cells)"
    if not isinstance(raw.get("metadata", {}), dict):
        return f"the notebook's metadata is a {type(raw['metadata']).__name__}, not an object"
    for i, cell in enumerate(raw.get("cells", []), 1):
        where = f"cell {i}"
        if not isinstance(cell, dict):
            return f"{where} is a {type(cell).__name__}, not an object"
        if cell.get("cell_type") not in ("code", "markdown", "raw"):
            return f"{where} has no cell_type (or an unknown one)"
        source = cell.get("source", "")
        if not isinstance(source, str) and not (isinstance(source, list) and all(isinstance(x, str) for x in source)):
            return f"{where} has a source that is not text"
        if "id" in cell and not isinstance(cell["id"], str):
            return f"{where} has an id that is not text"
        meta = cell.get("metadata", {})
        if not isinstance(meta, dict):
            return f"{where}'s metadata is a {type(meta).__name__}, not an object"
        nbg = meta.get("nbgrader", {})
        if not isinstance(nbg, dict):
            return f"{where}'s nbgrader metadata is a {type(nbg).__name__}, not an object"
        if "grade_id" in nbg and not isinstance(nbg["grade_id"], str):
            return f"{where}'s grade_id is a {type(nbg['grade_id']).__name__}, not text"
        for key in ("grade", "solution", "locked", "task"):
            if key in nbg and not isinstance(nbg[key], bool):
                return f"{where}'s nbgrader '{key}' is a {type(nbg[key]).__name__}, not true or false"
        if "points" in nbg and (isinstance(nbg["points"], bool) or not isinstance(nbg["points"], (int, float))):
            return f"{where}'s nbgrader points is a {type(nbg['points']).__name__}, not a number"
        if not isinstance(cell.get("outputs", []), list):
            return f"{where}'s outputs are not a list"
    return None


def read_submission(path: Path) -> nbformat.NotebookNode:
    """The student's notebook as nbformat 4, or SubmissionError saying why it cannot be read.

    Never follows a symlink, reads at most MAX_NOTEBOOK_BYTES, and checks the
    shape of everything the grader looks at (metadata, nbgrader metadata,
    grade ids, sources) before nbformat or nbgrader's helpers touch it.
    """
    try:
        info = os.lstat(path)
    except OSError:
        info = None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise SubmissionError(f"{shown(path.name)} is a symlink, not followed")
    if info is None or not stat.S_ISREG(info.st_mode):
        try:
            found = sorted(shown(p.name) for p in path.parent.glob("*.ipynb"))
        except OSError:
            found = []
        what = "no" if info is None else "not a file:"
        raise SubmissionError(f"{what} {shown(path.name)} in the submission (found: {', '.join(found) or 'no notebooks'})")
    if info.st_size > MAX_NOTEBOOK_BYTES:
        raise SubmissionError(f"the notebook is {info.st_size / 1024**2:.0f} MB, over the grader's limit of "
                              f"{MAX_NOTEBOOK_BYTES / 1024**2:.0f} MB (clear its outputs and hand it in again)")
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SubmissionError(f"unreadable notebook: {type(exc).__name__}: {exc}") from exc
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise SubmissionError(f"the notebook is over the grader's limit of {MAX_NOTEBOOK_BYTES / 1024**2:.0f} MB")
    try:
        raw = json.loads(text)
    except RecursionError:
        raise SubmissionError("malformed notebook: the JSON is nested too deeply to be a notebook") from None
    except ValueError as exc:
        raise SubmissionError(f"malformed notebook: not valid JSON ({exc})") from exc
    if not _depth_ok(raw):
        raise SubmissionError(f"malformed notebook: the JSON is nested more than {MAX_DEPTH} deep")
    raw = clean(raw)  # lone surrogates from JSON escapes would stop the executed notebook from being written
    if isinstance(raw, dict) and raw.get("nbformat") != 4:
        try:
            nb = nbformat.reads(json.dumps(raw), as_version=4)
        except Exception as exc:  # noqa: BLE001  nbformat raises many kinds for a bad version
            raise SubmissionError(f"unsupported notebook format nbformat={shown(repr(raw.get('nbformat')))[:40]}: "
                                  f"{type(exc).__name__}: {exc}") from exc
        raw = json.loads(nbformat.writes(nb))
    problem = _shape_problem(raw)
    if problem:
        raise SubmissionError(f"malformed notebook: {problem}")
    try:
        for cell in raw.get("cells", []):
            cell.setdefault("metadata", {})
            cell.setdefault("source", "")
            if isinstance(cell["source"], list):
                cell["source"] = "".join(cell["source"])
        return nbformat.from_dict(raw)
    except Exception as exc:  # noqa: BLE001
        raise SubmissionError(f"malformed notebook: {type(exc).__name__}: {exc}") from exc


def plan(source_nb: nbformat.NotebookNode, student_nb: nbformat.NotebookNode,
         release_nb: nbformat.NotebookNode | None = None) -> tuple[list[Cell], list[str]]:
    """The cells to run, in the instructor source's order, and notes on what the student's notebook changed.

    `student_nb` comes from read_submission (shapes checked), so nbgrader's own
    helpers can read it. With the release (`release_nb`), an edited check cell
    is found by nbgrader's checksum of the cell, as `nbgrader autograde` does.
    """
    notes: list[str] = []
    known_sources = {c.source for c in source_nb.cells}
    by_id = {c.get("id"): c for c in source_nb.cells if c.get("id")}
    source_ids = {_nbg(c).get("grade_id") for c in source_nb.cells if _nbg(c).get("grade_id")}
    released = {_nbg(c)["grade_id"]: _nbg(c).get("checksum") for c in (release_nb.cells if release_nb else [])
                if _nbg(c).get("grade_id") and _nbg(c).get("checksum")}
    exercises: dict[str, str] = {}
    added: dict[str, list[str]] = {}
    pending: list[str] = []
    student_checks: dict[str, str] = {}
    edited: set[str] = set()
    added_count = [0]
    for cell in student_nb.cells:
        if cell.get("cell_type") != "code":
            continue
        meta = _nbg(cell)
        gid = meta.get("grade_id")
        if is_solution(cell):
            if gid not in source_ids:
                twin = by_id.get(cell.get("id"))
                if twin is not None and is_solution(twin):
                    notes.append(f"exercise cell '{_nbg(twin)['grade_id']}' had its grade_id changed to {_quote(gid)}; "
                                 f"graded as '{_nbg(twin)['grade_id']}'")
                    gid = _nbg(twin)["grade_id"]
                else:
                    notes.append(f"an exercise cell with unknown grade_id {_quote(gid)} was not graded")
                    continue
            if gid in exercises:
                notes.append(f"exercise cell '{gid}' appears more than once; the last one was graded")
            exercises[gid] = cell.source
            added.setdefault(gid, []).extend(pending)
            pending = []
        elif is_grade(cell):
            student_checks[gid] = cell.source
            if gid in released and "grade_id" in meta and _checksum(cell) != released[gid]:
                edited.add(gid)
        elif not meta and cell.source.strip() and cell.source not in known_sources:
            if added_count[0] < MAX_ADDED_CELLS:
                pending.append(cell.source)
            added_count[0] += 1
    cells: list[Cell] = []
    for cell in source_nb.cells:
        meta = _nbg(cell)
        gid = meta.get("grade_id")
        if cell.cell_type != "code" or not gid:
            continue
        if is_solution(cell):
            for extra in added.get(gid, []):
                cells.append(Cell("student", gid, extra, note="a cell you added"))
            if gid in exercises:
                cells.append(Cell("student", gid, exercises[gid]))
            else:
                notes.append(f"exercise cell '{gid}' is missing from the submission")
                cells.append(Cell("student", gid, "raise NotImplementedError('exercise cell missing')", note="missing"))
        if is_grade(cell):
            if gid not in student_checks:
                notes.append(f"check cell '{gid}' was missing; the course's own was run")
            elif student_checks[gid] == cell.source:  # the instructor's own cell, hidden tests and all: not an edit
                pass
            elif gid in edited or (gid not in released and _bare(student_checks[gid]) != _bare(cell.source)):
                notes.append(f"check cell '{gid}' was edited; the course's own was run")
            cells.append(Cell("check", gid, cell.source, float(meta.get("points", 0) or 0)))
    if added_count[0] > MAX_ADDED_CELLS:
        notes.append(f"{added_count[0] - MAX_ADDED_CELLS} of the {added_count[0]} code cells you added were not run: "
                     f"the grader runs at most {MAX_ADDED_CELLS} added cells (put helpers in fewer cells)")
    return cells, bounded_notes(notes)


def bounded_notes(notes: list[str]) -> list[str]:
    """Each note once, on one line, at most MAX_NOTES of them (and how many more there were)."""
    unique = list(dict.fromkeys(one_line(n)[:500] for n in notes))
    extra = [f"and {len(unique) - MAX_NOTES} more notes like these"] if len(unique) > MAX_NOTES else []
    return unique[:MAX_NOTES] + extra


def _quote(grade_id) -> str:
    """A student's grade_id in a note: quoted, cut short."""
    return repr(grade_id)[:80]


def _checksum(cell) -> str:
    """nbgrader's checksum of a cell (its source, type, grade_id, points and flags); '' where it cannot be made."""
    try:
        return compute_checksum(cell)
    except Exception:  # noqa: BLE001  a grade cell without points, say
        return ""


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


def submissions_of(submissions: Path, only: Iterable[str] | None = None, skipped: list[str] | None = None,
                   course_lessons: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(student, lesson) pairs under SUBMISSIONS/<student>/<lesson>/, sorted.

    What is not a submission is left out, with a line in `skipped` saying why:
    a file where a folder is expected, a folder whose name starts with a dot or
    is not valid UTF-8. A lesson folder that is a symlink is kept (grading it
    says it is not followed); so is a student folder that is a symlink, with
    one pair per lesson in `course_lessons`, without looking inside it (else
    it is left out too).
    """
    wanted = set(only) if only else None
    skipped = skipped if skipped is not None else []
    pairs = []
    for student_dir in sorted(submissions.iterdir()):
        why = _not_a_folder(student_dir, "student")
        if why and student_dir.is_symlink() and course_lessons is not None and not _SURROGATE.search(student_dir.name):
            pairs += [(student_dir.name, lesson) for lesson in course_lessons if wanted is None or lesson in wanted]
            continue
        if why:
            skipped.append(why)
            continue
        for lesson_dir in sorted(student_dir.iterdir()):
            if wanted is not None and lesson_dir.name not in wanted:
                continue
            why = None if lesson_dir.is_symlink() else _not_a_folder(lesson_dir, "lesson")
            if why:
                skipped.append(why)
                continue
            pairs.append((student_dir.name, lesson_dir.name))
    return sorted(pairs)


def _not_a_folder(path: Path, what: str) -> str | None:
    """Why `path` is not a <what> folder to grade, or None when it is one."""
    name = shown(path.name) if what == "student" else f"{shown(path.parent.name)}/{shown(path.name)}"
    if _SURROGATE.search(path.name):
        return f"{name}: skipped: the {what} folder's name is not valid UTF-8 (rename it)"
    if path.name.startswith("."):
        return f"{name}: skipped: a hidden entry where a {what} folder is expected"
    if path.is_symlink():
        return f"{name}: not graded: the {what} folder is a symlink, not followed"
    if not path.is_dir():
        return f"{name}: skipped: a file where a {what} folder is expected"
    return None


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
