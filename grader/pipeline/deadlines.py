"""Deadlines: a lesson's due date, a submission's trusted time, which submission counts, and the late penalty.

nbgrader's way wherever it has one:

- The due date of a lesson is nbgrader's `Assignment.duedate` in the
  instructor's gradebook (`nbgrader db assignment add LESSON --duedate="2026-12-01 17:00 UTC"`,
  run in the instructor's clone), else the course config's
  `c.Deadlines.duedates = {"LESSON": "2026-12-01 17:00:00 UTC"}`. Times are
  UTC; nbgrader's `parse_utc` reads them.
- A submission's time is what the exchange recorded and the student cannot
  forge (`exchange_time`), never the student's timestamp.txt: see
  grader/pipeline/exchange.py.
- Which submission counts is nbgrader's own `ExchangeCollect.before_duedate`:
  True (the class config's setting) counts the last one made on time, else the
  last one; False counts the last one. The course's collect keeps every one.
- The late penalty is nbgrader's `LateSubmissionPlugin` interface, named by
  `c.AssignLatePenalties.plugin_class`; the course's `LatePenalty` adds
  'per_day' to nbgrader's 'none' and 'zero'.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import stat
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Dict, Enum, Float
from traitlets.config import Config, LoggingConfigurable

TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"  # nbgrader's timestamp.txt format (Exchange.timestamp_format in UTC)


class Deadlines(LoggingConfigurable):
    """Due dates set in the course config, for lessons whose due date is not in nbgrader's gradebook."""

    duedates = Dict(default_value={},
                    help="lesson -> due date, e.g. {'03_float_formats': '2026-12-01 17:00:00 UTC'}").tag(config=True)


class LatePenalty(LateSubmissionPlugin):
    """nbgrader's late penalties ('none', 'zero') and 'per_day': per_day of the score off per day late or part of one."""

    penalty_method = Enum(("none", "zero", "per_day"), default_value="none",
                          help="'none': no penalty; 'zero': the score; 'per_day': per_day x score per started day late"
                          ).tag(config=True)
    per_day = Float(0.1, help="with 'per_day': the fraction of the score taken off per started day late").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float | None:
        if self.penalty_method == "per_day":
            return min(score, score * self.per_day * math.ceil(total_seconds_late / 86400))
        return super().late_submission_penalty(student_id, score, total_seconds_late)


def utc(value) -> datetime | None:
    """A time as nbgrader keeps it (naive UTC), from text nbgrader's parse_utc reads or a datetime; None stays None."""
    from nbgrader.utils import parse_utc

    return None if value in (None, "") else parse_utc(value)


def said(value: datetime | None) -> str:
    """A time as grades.csv, feedback and records say it ('' for none)."""
    return "" if value is None else value.strftime(TIME_FORMAT)


def exchange_time(ctime_ns: int) -> datetime:
    """A submission's trusted time: the latest inode change time (ctime) of its folder and entries, as collect saw them.

    Why ctime: only the kernel sets it, to the clock's time at every change of
    an inode (a write, a rename, a chmod, and utime itself), so a student can
    make their submission later but never earlier: `touch -d`, a forged
    timestamp.txt or a folder name give no earlier time. Setting the clock
    takes root. mtime, the folder name and timestamp.txt are the student's to set.
    """
    return datetime.fromtimestamp(ctime_ns / 1e9, timezone.utc).replace(tzinfo=None)


def course_config(root: Path) -> Config:
    """The nbgrader config the instructor's nbgrader reads: Jupyter's config path, then the course root's nbgrader_config.py."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import PyFileConfigLoader

    config = Config()
    for folder in [*reversed(jupyter_config_path()), str(root)]:
        if (Path(folder) / "nbgrader_config.py").is_file():
            config.merge(PyFileConfigLoader("nbgrader_config.py", path=folder).load_config())
    return config


def gradebook_path(db_url: str, root: Path) -> Path | None:
    """The sqlite file of an nbgrader db_url (a relative one from the course root); None when it is not sqlite."""
    if not db_url.startswith("sqlite:///"):
        return None
    path = Path(db_url[len("sqlite:///"):])
    return path if path.is_absolute() else root / path


def due_date(lesson: str, config: Config, root: Path) -> datetime | None:
    """The lesson's due date (naive UTC): nbgrader's gradebook first, then the course config's Deadlines.duedates."""
    db = gradebook_path(str(config.CourseDirectory.get("db_url", f"sqlite:///{root}/gradebook.db")), root)
    if db is not None and db.is_file():
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:  # read only: never makes or migrates a gradebook
            try:
                found = con.execute("SELECT duedate FROM assignment WHERE name = ?", (lesson,)).fetchone()
            except sqlite3.Error:
                found = None
        if found and found[0]:
            return utc(found[0])
    return utc(Deadlines(config=config).duedates.get(lesson))


def counted(times: list[datetime], due: datetime | None, before_duedate: bool) -> int:
    """Which of a student's submissions (their times) counts: the last on time (before_duedate), else the last."""
    order = sorted(range(len(times)), key=times.__getitem__)
    if due is not None and before_duedate:
        on_time = [i for i in order if times[i] <= due]
        if on_time:
            return on_time[-1]
    return order[-1]


def seconds_late(when: datetime | None, due: datetime | None) -> float:
    """How late a submission was (0 when on time, or without a time or a due date)."""
    return 0.0 if when is None or due is None else max(0.0, (when - due).total_seconds())


def late_penalty(config: Config, student: str, score: float, late: float) -> float:
    """The points off for lateness: the configured LateSubmissionPlugin's answer, kept within 0..score as nbgrader does."""
    if late <= 0:
        return 0.0
    from nbgrader.preprocessors import AssignLatePenalties

    judge = AssignLatePenalties(config=config)
    judge.init_plugin()
    penalty = judge.plugin_inst.late_submission_penalty(student, score, late)
    return 0.0 if penalty is None else float(min(max(penalty, 0.0), score))


SMALL_BYTES = 4096  # timestamp.txt, submission_secret.txt
RECORD_BYTES = 256 * 1024  # collected.json


def read_small(path: Path, limit: int = SMALL_BYTES) -> str | None:
    """A small regular file's text, read without following a symlink; None when it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(limit + 1)
    return data.decode("utf-8", "replace") if len(data) <= limit else None


def record_digest(folder: Path, due: datetime | None) -> str:
    """What of a submission's dating a rerun must notice: its timestamp.txt, collect's record and the due date."""
    parts = [read_small(folder / "timestamp.txt"), read_small(folder / "collected.json", RECORD_BYTES), said(due)]
    if not any(parts):
        return ""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def submission_facts(folder: Path, due: datetime | None) -> tuple[dict, list[str]]:
    """(time, due date and lateness of the submission in `folder`, lines for its feedback).

    The time is nbgrader's timestamp.txt beside the notebook: the course's
    collect writes it from the exchange's record (exchange_time), over any the
    student wrote. The record `collected.json` says which of the student's
    submissions this is; without it (submissions from elsewhere) the time is
    whatever timestamp.txt the instructor put there.
    """
    notes: list[str] = []
    text = read_small(folder / "timestamp.txt")
    try:
        when = utc(text.strip()) if text and text.strip() else None
    except (ValueError, OverflowError):
        when = None
        notes.append("timestamp.txt beside the notebook is not a time: the submission is graded undated")
    late = seconds_late(when, due)
    facts = {"timestamp": said(when), "duedate": said(due), "seconds_late": late, "penalty": 0.0}
    if when is not None:
        how = (f"{late / 3600:.1f} h after the due date {said(due)}" if late > 0
               else f"on time (due {said(due)})" if due is not None else "no due date")
        notes.append(f"graded: your submission of {said(when)}, {how}")
    try:
        record = json.loads(read_small(folder / "collected.json", RECORD_BYTES) or "null")
        others = [s for s in record["submissions"] if not s["counted"]] if isinstance(record, dict) else []
        policy = record.get("policy", "") if isinstance(record, dict) else ""
    except (ValueError, KeyError, TypeError):
        others, policy = [], ""
    for other in others[:20] if isinstance(others, list) else []:
        if isinstance(other, dict) and isinstance(other.get("timestamp"), str):
            late_note = " (after the due date)" if other.get("late") else ""
            notes.append(f"not graded: your submission of {other['timestamp'][:40]}{late_note}, kept; {policy[:120]}")
    return facts, notes
