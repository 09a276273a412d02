"""Predictions: a first guess is a commitment, recorded beside the notebook, shown beside what was measured.

The protocol every lesson uses (COURSE.md, "Predictions, messages and shortcuts"):

1. A prediction cell (an exercise cell) sets a dict: the prediction's own keys
   and "why", one line of reasoning.  The stub raises NotImplementedError.
2. Its graded cell, right after, holds one call and nothing else, so the
   call's value is the cell's last expression::

       from grader.checks import lesson01

       lesson01.check_batch_prediction(BATCH_PREDICTION)

   The check (grader.checks._common.Prediction) validates the dict, records it
   the first time a valid one is checked (`commit`: value, reason, time and the
   values this run measured, `context`), and returns the credit as a plain
   Python float in points: part for a first guess with a reason recorded before
   any deliberate reveal, the rest banded on that *first* guess against the
   lesson's model fed with the values recorded with it.  Resubmitting changes
   no band: the final answer gets feedback that names a kind of mistake, never
   its distance.  nbgrader (0.9.6 `utils.determine_grade`) reads the float as
   the cell's partial credit; the class grader judges the same record outside
   the sandbox and gives the same score.
3. The cell that reveals the answer runs inside `with check.revealed():` and
   skips with one line until the prediction is recorded (or deliberately
   revealed); it then says "your first guess, your answer" beside what it shows.
4. `check.reveal()` is the deliberate reveal: it prints the model's answer and
   records that it was asked for.  A first guess made after it earns no
   commitment credit; the end table says so.
5. The lesson ends with `predictions.table(LESSON, {name: "what this run measured"})`:
   first guess, when, final answer, the measurement ("" where there is none) and the
   model's answer in its own words, shown once the first guess is recorded.

Where the record lives: `predictions.json` in the working folder, which is the
notebook's folder when Jupyter, papermill (grader.pipeline.run) or nbgrader
autograde runs it; GRADER_PREDICTIONS names another path (tests, `grader run`).
A learner hands it in with the notebook (nbgrader collects the assignment
folder).  While grading (nbgrader sets NBGRADER_EXECUTION; the class grader
reads the handed-in file in its own process and never runs the sandbox's
copy) nothing is written, so a submission without the file has no first
guess and scores 0 on its predictions in both graders.

A copy follows the learner (`ledger_path()`: a ledger in their home, GRADER_LEDGER
elsewhere, "" for none): each first guess and each reveal before a guess is added
to it once, and a folder that has no entry for a prediction takes the ledger's.  A
fresh copy of a lesson so keeps the first guess made in the old one, and an answer
revealed in a scratch copy counts as revealed in the real one (a copy test revealed
answers in a second folder whose record the graded notebook never read).  While
grading the ledger is neither read nor written: the grade comes from the handed-in
file alone.

This is an honour system: the file is the learner's own and they can edit it.
It is plain JSON read with a size cap and strict shapes (a malformed file
counts as none); it keeps nothing a check needs to be secret.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

FILE_NAME = "predictions.json"
ENV_PATH = "GRADER_PREDICTIONS"  # another path for the record (tests, grader run)
ENV_LEDGER = "GRADER_LEDGER"  # the learner's ledger of first guesses and reveals elsewhere ("": none; tests, grader run)
LEDGER_DIR = "why-is-it-slow"  # under $XDG_DATA_HOME or ~/.local/share
ENV_GRADING = "GRADER_GRADING"  # set (to anything but "") while a grader runs a submission: nothing is written
MAX_BYTES = 256 * 1024  # a record larger than this is not read
MAX_REASON = 300  # characters of a reason kept
_SHOWN: set[tuple[str, str]] = set()  # (lesson, name) revealed in this kernel


_AT_IMPORT = {name: os.environ.get(name) for name in (ENV_PATH, ENV_GRADING, ENV_LEDGER, "NBGRADER_EXECUTION",
                                                      "HOME", "XDG_DATA_HOME")}


def _started_with(name: str) -> str | None:
    """The environment variable `name` as the process was started with it (graders and `grader run` start their
    kernels so): Linux keeps the starting environment in /proc/self/environ, which setting os.environ from a cell does
    not change; elsewhere, its value when this module was first imported."""
    try:
        for item in Path("/proc/self/environ").read_bytes().split(b"\0"):
            if item.startswith(name.encode() + b"="):
                return item.split(b"=", 1)[1].decode(errors="replace")
        return None
    except OSError:
        return _AT_IMPORT.get(name)


def _in_kernel() -> bool:
    """True inside a running Jupyter kernel (a learner's, or one papermill started)."""
    app = sys.modules.get("ipykernel.kernelapp")
    return bool(app is not None and app.IPKernelApp.initialized())


def path() -> Path:
    """Where the record is: predictions.json in the working folder (the notebook's); GRADER_PREDICTIONS elsewhere,
    except while grading, when it is always the file handed in beside the notebook. In a kernel only the value it was
    started with counts: a copy test set it from a cell to a scratch record, to try guesses against the band there."""
    if grading():
        return Path(FILE_NAME)
    return Path((_started_with(ENV_PATH) if _in_kernel() else os.environ.get(ENV_PATH)) or FILE_NAME)


def _env(name: str) -> str | None:
    """An environment variable as a record's location reads it: in a kernel, as the kernel was started."""
    return _started_with(name) if _in_kernel() else os.environ.get(name)


def ledger_path() -> Path | None:
    """The learner's ledger: GRADER_LEDGER when set ("" for none), else $XDG_DATA_HOME (or ~/.local/share)/
    why-is-it-slow/ledger.json. None while grading. In a kernel only what it was started with counts (a cell that sets
    HOME or GRADER_LEDGER does not move it)."""
    if grading():
        return None
    chosen = _env(ENV_LEDGER)
    if chosen is not None:
        return Path(chosen) if chosen.strip() else None
    base = _env("XDG_DATA_HOME") or ""
    if not base:
        home = _env("HOME")
        if not home:
            try:
                home = str(Path.home())
            except (RuntimeError, KeyError):
                return None
        base = str(Path(home) / ".local" / "share")
    return Path(base) / LEDGER_DIR / "ledger.json"


@contextlib.contextmanager
def environment(**values: str):
    """os.environ with `values` set inside, as it was after: what a kernel started inside inherits (the course's own
    runs of the solutions set their record and no learner's ledger; tests set a record of their own, or grading)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _ledger() -> dict:
    file = ledger_path()
    return read(file) if file is not None else {}


def _adopt(data: dict) -> dict:
    """`data` (this folder's record) with every prediction it lacks taken from the ledger: a first guess made, or an
    answer revealed, in another copy of the lesson."""
    for lesson, part in _ledger().items():
        entries = part.get("entries", {})
        if not entries:
            continue
        mine = data.setdefault(lesson, {"measured": {}, "entries": {}})["entries"]
        for name, found in entries.items():
            if name not in mine and (found.get("first") or found.get("revealed")):
                kept = {k: v for k, v in found.items() if k != "folder"}
                mine[name] = {**kept, "last": found.get("first"), "answers": 0, "shown": None,
                              "elsewhere": str(found.get("folder") or "another folder")[:300]}
    return data


def _ledger_add(data: dict) -> None:
    """Add to the ledger, once each, the first guesses and the reveals before a guess that it does not hold yet."""
    file = ledger_path()
    if file is None:
        return
    held = read(file)
    changed = False
    for lesson, part in data.items():
        for name, found in part.get("entries", {}).items():
            if not (found.get("first") or found.get("revealed")):
                continue
            mine = held.setdefault(lesson, {"measured": {}, "entries": {}})["entries"]
            if name in mine:
                continue
            mine[name] = {k: found.get(k) for k in ("first", "reason", "at", "context", "revealed")}
            mine[name]["folder"] = str(path().absolute().parent)
            changed = True
    if not changed:
        return
    try:  # the learner's own: their first guesses and reasons, readable by no other user even in a 0755 home
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if file.is_symlink():
            return
        tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            out.write(json.dumps({"version": 1, "lessons": held}, indent=1, sort_keys=True))
        os.replace(tmp, file)
    except OSError:  # no home to write in: the folder's record still holds it
        pass


def grading() -> bool:
    """True while a grader runs the notebook (nbgrader autograde or validate, or GRADER_GRADING): nothing is recorded.
    In a kernel, only what the process was started with counts (graders start their kernels so): a copy test set
    GRADER_GRADING from a cell so that asking for a model stamped no reveal."""
    if _in_kernel():
        return bool(_started_with("NBGRADER_EXECUTION") or _started_with(ENV_GRADING))
    return bool(os.environ.get("NBGRADER_EXECUTION") or os.environ.get(ENV_GRADING))


def now() -> str:
    """The time a record is stamped with: UTC, to the second, ISO 8601."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON-plain: numbers (finite), strings, bools, None, lists and str-keyed dicts, not too deep."""
    if depth > 6:
        return False
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    if isinstance(value, list):
        return len(value) <= 64 and all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return len(value) <= 64 and all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def parse(text: str | bytes) -> dict:
    """The record in `text`: {lesson: {"measured": {...}, "entries": {name: entry}}}; {} for anything malformed."""
    if len(text) > MAX_BYTES:
        return {}
    try:
        data = json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    except (ValueError, RecursionError):
        return {}
    lessons = data.get("lessons") if isinstance(data, dict) else None
    if not isinstance(lessons, dict):
        return {}
    out = {}
    for lesson, part in list(lessons.items())[:32]:
        if not isinstance(lesson, str) or not isinstance(part, dict):
            continue
        measured = part.get("measured") if _plain(part.get("measured")) and isinstance(part.get("measured"), dict) else {}
        entries = {name: entry for name, entry in (part.get("entries") or {}).items()
                   if isinstance(name, str) and _entry_ok(entry)} if isinstance(part.get("entries"), dict) else {}
        out[lesson] = {"measured": measured, "entries": entries}
    return out


def _entry_ok(entry: Any) -> bool:
    return (isinstance(entry, dict) and _plain(entry) and isinstance(entry.get("first"), dict)
            and isinstance(entry.get("reason"), str) and isinstance(entry.get("at"), str)
            and isinstance(entry.get("context", {}), dict) and isinstance(entry.get("last", {}), dict)
            and all(isinstance(entry.get(k), (str, type(None))) for k in ("revealed", "shown")))


def read(file: Path | None = None) -> dict:
    """The record at `file` (default `path()`), parsed strictly; {} when it is absent, too big or malformed."""
    file = Path(file) if file is not None else path()
    try:
        if file.is_symlink() or not file.is_file() or file.stat().st_size > MAX_BYTES:
            return {}
        return parse(file.read_bytes())
    except OSError:
        return {}


def _write(data: dict) -> None:
    """Save the record (atomically); while grading, or where the folder is not writable, nothing is saved."""
    if grading():
        return
    file = path()
    text = json.dumps({"version": 1, "lessons": data}, indent=1, sort_keys=True)
    try:
        tmp = file.with_name(file.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, file)
    except OSError:  # a read-only folder: the record lives for this kernel only (_MEMORY)
        pass
    _MEMORY.clear()
    _MEMORY.update(data)
    _ledger_add(data)


_MEMORY: dict = {}  # the last record written by this kernel, for a folder that cannot be written


def _load() -> dict:
    """The live record: this folder's, with what it lacks from the learner's ledger (none while grading)."""
    data = read() or dict(_MEMORY)
    return data if grading() else _adopt(data)


def _part(data: dict, lesson: str) -> dict:
    return data.setdefault(lesson, {"measured": {}, "entries": {}})


def entry(lesson: str, name: str, data: dict | None = None) -> dict | None:
    """The recorded entry of prediction `name` of `lesson` (in `data`, default the record on disk), or None."""
    data = _load() if data is None else data
    return (data.get(lesson) or {}).get("entries", {}).get(name)


def note_measured(lesson: str, **values: float) -> None:
    """A show cell's measured figures (plain numbers), recorded as the context later first guesses are judged with."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
               for v in values.values()):  # a zero bandwidth made a model fall back to the naive answer (a copy test)
        raise ValueError("note_measured takes what a run measured: finite positive numbers (a rate, a size, a count)")
    data = _load()
    _part(data, lesson)["measured"].update({k: float(v) for k, v in values.items()})
    _write(data)


def context(lesson: str, data: dict | None = None) -> dict:
    """What this lesson's show cells last measured (note_measured), as plain numbers."""
    data = _load() if data is None else data
    return dict((data.get(lesson) or {}).get("measured", {}))


def commit(lesson: str, name: str, value: dict, reason: str, measured: dict | None = None) -> dict:
    """Record `value` as prediction `name`'s answer: as its first guess (with reason, time, context) if none is recorded.

    Later calls only update the final answer ("last") and the count; the first
    guess never changes. While grading nothing is written.
    """
    data = _load()
    part = _part(data, lesson)
    found = part["entries"].get(name)
    if found is None:
        found = {"first": value, "reason": reason[:MAX_REASON], "at": now(),
                 "context": dict(measured if measured is not None else part["measured"]),
                 "revealed": None, "shown": None, "answers": 0}
        part["entries"][name] = found
    found["last"] = value
    found["answers"] = int(found.get("answers", 0) or 0) + 1
    _write(data)
    return found


# What a reveal before a first guess costs, as every message that records one says it (a first guess is never taken
# after it: a copy test read "no commitment credit" and found the prediction scored 0)
REVEAL_COST = "no guess after it is taken, and the prediction scores 0"


def mark(lesson: str, name: str, what: str) -> None:
    """Stamp prediction `name` as 'revealed' (asked for on purpose) or 'shown' (its reveal cell ran), once each.

    'revealed' means asked for before any first guess: once a first guess is recorded, reading the model (the cell
    that shows the answer does) stamps nothing, so a Run All that commits and shows within one second keeps its
    commitment credit."""
    data = _load()
    part = _part(data, lesson)
    found = part["entries"].get(name)
    if what == "revealed" and found is not None and found.get("first"):
        return
    if found is None:  # revealed before any guess: an entry with no first guess
        found = part["entries"][name] = {"first": {}, "reason": "", "at": "", "context": dict(part["measured"]),
                                         "last": {}, "revealed": None, "shown": None, "answers": 0}
    if not found.get(what):
        found[what] = now()
    _write(data)


def committed(found: dict | None) -> bool:
    """A first guess with a reason, recorded before any deliberate reveal: what the commitment credit is for."""
    if not found or not found.get("first") or not str(found.get("reason", "")).strip() or not found.get("at"):
        return False
    revealed = found.get("revealed")  # stamped only while no first guess existed (mark); older records compare times
    return not revealed or str(found["at"]) < str(revealed)


@contextlib.contextmanager
def revealed(lesson: str, name: str, shown: str = ""):
    """The reveal cell's body runs only once `name` is recorded (or deliberately revealed); else one line, and skip.

    Use as `with check.revealed(): ...` (the check knows its lesson and name).
    A body that is skipped is not run at all.
    """
    found = _guessed_or_said(lesson, name, "shows the answer to")
    if found is None:
        yield False
        return
    if (lesson, name) not in _SHOWN:
        _SHOWN.add((lesson, name))
        mark(lesson, name, "shown")
    if found.get("first"):
        print(f"your first guess for {name}: {describe(found['first'])} (recorded {found['at']}); "
              f"your answer now: {describe(found.get('last') or found['first'])}" + (f". {shown}" if shown else ""))
    else:
        print(f"{name}: its answer was asked for before any guess" + (f". {shown}" if shown else ""))
    yield True


@contextlib.contextmanager
def after_guess(lesson: str, name: str):
    """`with after_guess(lesson, name) as ready:` around a cell that runs what `name` is scored against without showing
    its answer (lesson 05's loader table and op count): its body runs once a first guess is recorded (or the answer was
    revealed on purpose), else one line and skip. Run before the guess, the cell would count as asking for the answer
    (copy test r33: running section 6 first zeroed MFU_GUESS, whose answer it never shows)."""
    yield _guessed_or_said(lesson, name, "runs what is scored against") is not None


def _guessed_or_said(lesson: str, name: str, what: str) -> dict | None:
    """`name`'s record when it has a first guess or a deliberate reveal; else None, after the one line a cell that
    waits for it prints ("this cell <what> `name`")."""
    found = entry(lesson, name)
    if found is None or not (found.get("first") or found.get("revealed")):
        print(f"⏭ skipped: this cell {what} `{name}`; write your prediction and run its check cell first (it records "
              "your first guess)")
        return None
    return found


def describe(value: dict) -> str:
    """A prediction's value in one line, its reason left out."""
    parts = []
    for key, v in value.items():
        if key == "why":
            continue
        parts.append(f"{key} {v:.4g}" if isinstance(v, float) else f"{key} {v}")
    return ", ".join(parts) or "—"


def table(lesson: str, measured: dict[str, str], data: dict | None = None):
    """The end-of-lesson table: per prediction, the first guess and when, the final answer, what this run measured
    (`measured`, the lesson's words; "" where nothing is measured) and what the course's model says, in its own words.
    The model is shown once a first guess is recorded (or it was revealed on purpose): the table is not a reveal."""
    import importlib

    data = _load() if data is None else data
    try:
        importlib.import_module(f"grader.checks.lesson{lesson[:2]}")  # its predictions register as it is imported
    except ImportError:
        pass
    from grader.checks._common import PREDICTIONS

    rows = []
    for name, what in measured.items():
        found = entry(lesson, name, data) or {}
        check = PREDICTIONS.get((lesson, name))
        waiting = _waiting_for(check)
        if check is None or check._model is None:
            model = "—"
        elif waiting:
            model = f"shown once `{waiting}` has passed"
        elif found.get("first") or found.get("revealed"):
            context = found.get("context") if isinstance(found.get("context"), dict) else {}
            model = check._model(context)
        else:
            model = "shown once your first guess is recorded"
        rows.append({
            "prediction": name,
            "your first guess": describe(found["first"]) if found.get("first") else "—",
            "recorded": _when(found.get("at")),
            "your answer": ("—" if not found.get("last") else "your first guess" if found.get("last") == found.get("first")
                            else describe(found["last"])),
            "measured here": what or "—",
            "the course's model": model,
            "asked to reveal": found.get("revealed") or "no",
        })
    return _full_text_frame()(rows).set_index("prediction")


def _waiting_for(check) -> str:
    """The exercise a prediction's answer waits for (Prediction's `waits`), or "" when it may be shown."""
    from grader.notebook import NotPassed

    try:
        if check is not None:
            check._wait()
    except NotPassed as waiting:
        return waiting.name
    return ""


def _when(at: Any) -> str:
    """A record's time as the table shows it, to the minute ("2026-12-05 11:53 UTC"); the record keeps the second."""
    try:
        return _dt.datetime.fromisoformat(str(at)).astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return str(at) if at else "—"


@functools.cache
def _full_text_frame():
    """A DataFrame whose HTML keeps every character: pandas cuts a cell at 50 ("model: section 1's ceiling (H100
    datas..." in lesson 09's table, seen in JupyterLab). Made on first use: pandas is not imported with this module."""
    import pandas as pd

    class FullText(pd.DataFrame):
        @property
        def _constructor(self):
            return FullText

        def _repr_html_(self):
            with pd.option_context("display.max_colwidth", None):
                html = super()._repr_html_()
            for name in map(str, self.index):  # TOKENS_PER_SECOND_PREDICTION may break after an underscore: at
                html = html.replace(f">{name}<", ">" + name.replace("_", "_<wbr>") + "<")  # 1024 px it ran off the page
            return html

    return FullText


def keys_band(parts: list[tuple[str, float, str | None, str | None]], all_right: str) -> tuple[float, str]:
    """A prediction whose keys count equally: `parts` holds, per key, (label, band fraction, the known mistake it
    makes or None, what to say instead when none is known). Their mean, and `all_right` when every key is in its band,
    else "your first guess, label: mistake; ..." over the keys that are not."""
    fraction = sum(part[1] for part in parts) / len(parts)
    if fraction == 1.0:
        return fraction, all_right
    said = [f"{label}: {mistake}" if mistake else otherwise for label, f, mistake, otherwise in parts if f < 1.0]
    return fraction, "your first guess, " + "; ".join(s for s in said if s)


def band(value: float, target: float, tight: float = 0.25, loose: float = 1.0) -> float:
    """1.0 within a factor 1+tight of `target`, 0.5 within 1+loose, else 0.0 (both positive; a ratio band)."""
    if not (value > 0 and target > 0 and math.isfinite(value) and math.isfinite(target)):
        return 0.0
    off = abs(math.log(value / target))
    return 1.0 if off <= math.log1p(tight) else 0.5 if off <= math.log1p(loose) else 0.0


def credit(points: float, commitment: bool, fraction: float, share: float = 0.5) -> float:
    """The score in points, a plain float: `share` of it for the commitment, the rest times the band fraction."""
    fraction = min(max(float(fraction), 0.0), 1.0)
    got = points * share * (1.0 if commitment else 0.0) + points * (1 - share) * fraction
    return float(round(min(max(got, 0.0), points), 4))
