"""Grading a whole class: each submission isolated, many at once, resumable, shardable, merged into one result.

For each SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb the grader (never the
student's code) builds the cells to run from the instructor source in
solutions/: the student's exercise cells (matched by grade_id, else by cell
id), any code cells the student added before them, and the course's own
locked check cells with their hidden tests, in the source's order. Demo cells
are not run: by the course's rule exercise and check cells are
self-contained, and no demo cell carries points. Deleted, edited, duplicated
or reordered check cells therefore change nothing.

The cells run one at a time in grader.cellrunner inside grader.sandbox (bwrap;
no sandbox only when asked for by name), with a per-cell and a whole-notebook
time limit, a memory limit, a disk quota and a process cap. A cell that hangs or kills its process costs only that cell: the
runner is started again, the exercise cells that had run are run again, and
grading goes on after the cell that failed. The grader scores each check
cell from the runner's reply (passed when its code finished without an
exception; stderr is allowed) and writes, atomically and as each submission
finishes, results/<student>/<lesson>.json, the executed notebook and the
feedback page. `finish` turns all results into grades.csv, nbgrader's
gradebook and the summary; `merge` does that for the results of many shards.

Whatever the submissions folder holds, the class is graded: a notebook that
cannot be read (any bytes, any shape, a symlink, too big) gets status "error"
on every check with the reason; an entry that is not a submission (a stray
file, a name that is not UTF-8, a lesson the course lacks) is skipped and
named in the summary; and the grader's own failure on one submission becomes
that submission's error rows.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

import nbformat

from grader import predictions
from grader.pipeline import deadlines
from grader.pipeline import sandbox as sandboxes
from grader.pipeline.grades import UNGRADED, CellResult, write_csv, write_gradebook
from grader.pipeline.cgroups import make_groups
from grader.pipeline.judging import Isolated, start_server
from grader.pipeline.privacy import private_files
from grader.pipeline.runner import Zygotes, _memory_bytes, run_cells, warm_problem
from grader.pipeline.scoring import error_rows, executed_notebook, feedback_html, score
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import (SubmissionError, check_modules, clean, clean_text, notebook_digest, plan,
                                         one_line, read_submission, shard_of, shown, submissions_of)
from grader.pipeline.tools import lessons

NORMAL = ("passed", "failed")


FEEDBACK_MODE = 0o644  # nbgrader release_feedback copies it with its mode: its student must read it; the 0750 folders above keep others out


def _atomic_write(path: Path, data: str | bytes, mode: int | None = None) -> None:
    """Write a file so that a reader (or a rerun after a kill) sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(clean_text(data).encode("utf-8") if isinstance(data, str) else data)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def result_path(out_dir: Path, student: str, lesson: str) -> Path:
    """Where one submission's result lives: out_dir/results/<student>/<lesson>.json."""
    return out_dir / "results" / student / f"{lesson}.json"


def grade_one(root: Path, submissions: Path, out_dir: Path, student: str, lesson: str,
              box: sandboxes.Sandbox, settings: Settings, groups=None, verdict=None, term=None, warm=None) -> dict:
    """Grade one submission and write its result, executed notebook and feedback; returns the result.

    Whatever the submission holds, this writes a result: a submission that
    cannot be graded gets status "error" on every check with the reason, and
    an exception in the grader itself becomes that reason too, so one
    submission never stops the class. `term` is (the course's nbgrader config,
    the lesson's due date): the submission is dated by the timestamp.txt the
    course's collect wrote, and a late one gets the configured penalty.
    `warm` (grader.pipeline.runner.Zygotes) forks its runners from a warm
    zygote. The result's "phases" says where its wall seconds went (runner.PHASES).
    """
    start = time.perf_counter()
    phases: dict[str, float] = {}
    config, due = term or (None, None)
    source_nb = nbformat.read(str(root / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    folder = submissions / student / lesson
    path = folder / f"{lesson}.ipynb"
    digest = _digest(submissions, student, lesson, due)
    facts, dated = deadlines.submission_facts(folder, due)
    notes: list[str] = []
    outside = False  # a row failed for a reason outside the submission: graded again on the next run
    try:
        if (submissions / student).is_symlink():
            raise SubmissionError(f"the student folder {shown(student)} is a symlink, not followed")
        if folder.is_symlink():
            raise SubmissionError(f"the lesson folder {shown(lesson)} is a symlink, not followed")
        extras = sorted(shown(p.name) for p in folder.iterdir()
                        if p.name not in (path.name, predictions.FILE_NAME, *EXCHANGE_FILES))
        if extras:
            notes.append(f"extra files in the submission were not given to the grader: {', '.join(extras[:10])}")
        student_nb = read_submission(path)
        cells, plan_notes = plan(source_nb, student_nb, _release(root, lesson))
        notes += plan_notes
        record = predictions.read(folder / predictions.FILE_NAME)  # the first guesses handed in, read here
        phases["read"] = time.perf_counter() - start
        replies = [clean(r) for r in run_cells(cells, check_modules(cells), box, settings, groups, verdict, record,
                                               warm, phases)]
        written = time.perf_counter()
        outside = any(r.get("outside") for r in replies)
        notes += sorted({n for cell, r in zip(cells, replies) if cell.kind == "student" for n in r.get("notes", [])})
        rows = score(student, lesson, cells, replies, notes)
        got = sum(r.score for r in rows)
        if config is not None and facts["seconds_late"] > 0:
            facts["penalty"] = deadlines.late_penalty(config, student, got, facts["seconds_late"])
        notes += dated + ([f"late penalty: {facts['penalty']:g} of your {got:g} points"] if facts["penalty"] else [])
        if not all(r.status == UNGRADED for r in rows):  # nothing decided: no feedback page to release
            executed = executed_notebook(cells, replies, rows, notes)
            _atomic_write(out_dir / "course" / "autograded" / student / lesson / f"{lesson}.ipynb", nbformat.writes(executed))
            _atomic_write(out_dir / "course" / "feedback" / student / lesson / f"{lesson}.html", feedback_html(executed),
                          FEEDBACK_MODE)
            _exchange_files(folder, out_dir / "course" / "feedback" / student / lesson)
        phases["write"] = time.perf_counter() - written
    except SubmissionError as exc:
        rows = error_rows(student, lesson, source_nb, clean_text(str(exc)))
    except Exception as exc:  # noqa: BLE001  the grader's own failure on this submission: said, and the class goes on
        rows = error_rows(student, lesson, source_nb,
                          clean_text(f"the grader failed on this submission: {type(exc).__name__}: {exc}")[:2000], UNGRADED)
        outside = True
    result = {"student": student, "lesson": lesson, "sha256": digest, "seconds": time.perf_counter() - start,
              "sandbox": box.kind, "notes": [clean_text(n) for n in notes], "rows": [clean(r.row()) for r in rows],
              "submission": clean(facts), "phases": {k: round(v, 4) for k, v in phases.items()}}
    if outside:
        result["regrade"] = True
    _atomic_write(result_path(out_dir, student, lesson), json.dumps(result, indent=1))
    return result


EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt", "collected.json")  # what collect puts beside a notebook


def _digest(submissions: Path, student: str, lesson: str, due) -> str:
    """What a result was graded from: the notebook's bytes, and its dating (timestamp.txt, collect's record, due date)."""
    folder = submissions / student / lesson
    dating = deadlines.record_digest(folder, due) if not folder.is_symlink() else ""
    return notebook_digest(folder / f"{lesson}.ipynb") + (f"+{dating}" if dating else "")


def _exchange_files(submitted: Path, feedback: Path) -> None:
    """Copy nbgrader's timestamp and submission secret beside the feedback: `nbgrader release_feedback` needs both.

    Only small regular files are copied (never a symlink a student left there).
    """
    for name in EXCHANGE_FILES:
        src = submitted / name
        if not src.is_symlink() and src.is_file() and src.stat().st_size < 4096:
            _atomic_write(feedback / name, src.read_bytes(), FEEDBACK_MODE)


def _release(root: Path, lesson: str) -> nbformat.NotebookNode | None:
    """The student release of a lesson (notebooks/), whose nbgrader checksums tell an edited check cell; None if absent."""
    path = root / "notebooks" / lesson / f"{lesson}.ipynb"
    return nbformat.read(str(path), as_version=4) if path.is_file() else None


def _done(out_dir: Path, submissions: Path, student: str, lesson: str, due=None) -> bool:
    """True when this submission already has a result for the same notebook bytes and dating."""
    saved = _load(result_path(out_dir, student, lesson))
    return (saved is not None and saved.get("regrade") is not True
            and saved.get("sha256") == _digest(submissions, student, lesson, due))


def grade_class(root: Path, submissions: Path, out_dir: Path, settings: Settings | None = None,
                only: Iterable[str] | None = None, log: Callable[[str], None] = print) -> Path:
    """Grade every submission (this shard's), in parallel, skipping those already graded; returns grades.csv.

    Everything it writes is readable by the grader's group only (grader.pipeline.privacy).
    """
    settings = settings or Settings()
    root, submissions, out_dir = root.resolve(), submissions.resolve(), out_dir.resolve()
    with private_files(out_dir):
        return _grade_class(root, submissions, out_dir, settings, only, log)


def _grade_class(root: Path, submissions: Path, out_dir: Path, settings: Settings, only, log) -> Path:
    kind = sandboxes.choose(settings.sandbox)  # before anything is graded: no sandbox only when asked for by name
    skipped: list[str] = []
    known = set(lessons(root))
    pairs = submissions_of(submissions, only, skipped, course_lessons=sorted(known))
    skipped += [f"{shown(s)}/{shown(lesson)}: skipped: the course has no lesson {shown(lesson)!r}"
                for s, lesson in pairs if lesson not in known]
    pairs = shard_of([p for p in pairs if p[1] in known], *settings.shard)
    _atomic_write(out_dir / "skipped.json", json.dumps(skipped, indent=1))
    for line in skipped:
        log(one_line(line))
    config = deadlines.course_config(root)  # due dates and the late penalty, as the instructor's nbgrader reads them
    dues = {lesson: deadlines.due_date(lesson, config, root) for lesson in {p[1] for p in pairs}}
    todo = [p for p in pairs if settings.regrade or not _done(out_dir, submissions, *p, dues[p[1]])]
    if len(todo) < len(pairs):
        log(f"{len(pairs) - len(todo)} of {len(pairs)} submissions already graded; grading the other {len(todo)}")
    package = Path(__file__).resolve().parents[1]  # the grader that runs now: an editable install may live elsewhere
    keep = [root / "grader", root / "data", package, package.parent / "data", Path(sys.prefix), Path(sys.base_prefix),
            *(Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages")))]  # venvs layered by .pth too
    box = sandboxes.Sandbox(kind, hide=[root, out_dir, submissions, Path.home(), *settings.hide], keep=keep,
                            disk_bytes=int(settings.disk_mib * 1024**2), shm_bytes=int(settings.shm_mib * 1024**2),
                            max_processes=settings.max_processes)
    if kind == "none":
        log("sandbox: none, as asked: student code can read every file the grader can, write to the disk without a "
            "quota and use the network (processes are still capped and killed); see grader/pipeline/sandbox.py")
        problem = sandboxes.other_uid_problem()
        if problem:
            log(f"sandbox: none: the runner shares the grader's uid ({problem}), so it can kill its keeper; "
                "then a process it started in a session of its own outlives it unless a cgroup holds it")
    groups, why = make_groups(settings.workers) if settings.cgroups and todo else (None, "not asked for")
    if todo and groups is not None:
        log(f"cgroups: one per submission (v{groups.version}): a CPU share, {_memory_bytes(box, settings) / 1024**3:.2f} "
            "GiB of memory (its files in memory included) and a process cap for all its processes together")
    elif todo:
        log(f"cgroups: none ({why}): each process of a submission has its own memory limit ({settings.memory_gib:g} GiB "
            f"of address space), so one submission can hold up to {settings.max_processes} x that, and its processes "
            "compete for CPU one by one; see README, 'Grading a real class'")
    verdict = Isolated(settings.judge_seconds, int(settings.judge_memory_gib * 1024**3))
    cold = warm_problem(box, settings)
    warm = Zygotes(box, settings, log=log) if todo and cold is None else None
    if todo:
        log("runners: warm: forked from one zygote per lesson that imported Python, torch and the lesson's checks once, "
            "each confined before the student's code runs (grader/pipeline/zygote.py)" if warm is not None
            else f"runners: cold: a fresh Python in a sandbox of its own for each ({cold})")
    if todo:  # start what every submission needs now, side by side: the judge server and each lesson's zygote
        start_server()  # from this thread, which outlives the grading (the server dies with the thread that started it)
        for lesson in sorted({p[1] for p in todo}) if warm is not None else []:
            warm.prepare(_lesson_modules(root, lesson))
    lock, done, decided, undecided = threading.Lock(), [0], [0], []
    progress = Progress(len(todo), settings.workers)
    stop = threading.Event()  # the first submissions all failed outside the students: the rest would too

    def one(pair):
        """Grade one submission and print its line."""
        if stop.is_set():
            return None
        result = grade_one(root, submissions, out_dir, *pair, box, settings, groups, verdict, (config, dues[pair[1]]),
                           warm)
        got = sum(r["score"] for r in result["rows"])
        best = sum(r["max_score"] for r in result["rows"])
        with lock:
            done[0] += 1
            nothing = bool(result["rows"]) and all(r["status"] == UNGRADED for r in result["rows"])
            if nothing:
                undecided.append(result)
                if not decided[0] and len(undecided) >= min(len(todo), STOP_AFTER):
                    stop.set()
            else:
                decided[0] += 1
            got_text = "not graded" if nothing else f"{got:g}/{best:g}"
            log(f"[{done[0]}/{len(todo)}] {one_line(shown(pair[0]))}/{one_line(pair[1])}: {got_text} "
                f"({result['seconds']:.1f} s) | {progress.line(done[0])}")
        return result

    try:
        with ThreadPoolExecutor(max_workers=max(1, settings.workers)) as pool:
            list(pool.map(one, todo))
    finally:
        if warm is not None:
            warm.close()
        if groups is not None:
            groups.remove()
    if todo and not decided[0]:
        raise NotGraded(not_graded_line(undecided, len(todo)))
    if todo:
        log(f"graded {len(todo)} submissions with {settings.workers} workers ({kind} sandbox, "
            f"{'warm' if warm is not None else 'cold'} runners): {progress.final()}")
    return finish(root, out_dir, log=log)


def _lesson_modules(root: Path, lesson: str) -> list[str]:
    """The check modules a lesson's runners import (its source's check cells: the same for every submission)."""
    source = nbformat.read(str(root / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    release = _release(root, lesson)
    return check_modules(plan(source, release or source, release)[0])


class Progress:
    """The line an instructor reads while a class grades: done/total, rate, and the time left; then the final figure."""

    def __init__(self, total: int, workers: int, clock=time.monotonic):
        self.total, self.workers, self.clock = total, max(1, workers), clock
        self.start = clock()

    def line(self, done: int) -> str:
        """e.g. '12/300 done, 8.1 notebooks/min, about 35 min left'."""
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = done / elapsed * 60
        left = (self.total - done) / (done / elapsed) if done else None
        return f"{done}/{self.total} done, {rate:.1f} notebooks/min, " + (
            "finished" if done >= self.total else f"about {_duration(left)} left" if left is not None else "time left unknown")

    def final(self) -> str:
        """e.g. '300 notebooks in 37.0 min: 8.1 notebooks/min, 4.1 per core (2 cores)'."""
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = self.total / elapsed * 60
        cores = min(self.workers, os.cpu_count() or 1)
        return (f"{self.total} notebooks in {_duration(elapsed)}: {rate:.1f} notebooks/min, "
                f"{rate / cores:.1f} per core ({cores} core{'s' if cores != 1 else ''})")


def _duration(seconds: float) -> str:
    """A duration in the unit an instructor reads it in: '42 s', '12 min', '3.5 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


STOP_AFTER = 3  # this many submissions failing outside the students, and none graded: stop the run


class NotGraded(RuntimeError):
    """Every submission of a run failed for a reason outside the students: no grade is written."""


WHAT_TO_DO = [  # words in the reason, and what the instructor can do about it
    ("No module named", "the sandbox cannot see the course's package or its Python: keep the checkout and its venv "
                        "where every user can read them and outside any --hide folder (README, 'Running a class')"),
    ("MemoryError", "the memory limit is too small for Python and torch: raise --memory-gib"),
    ("ran out of memory (the memory limit)", "the memory limit is too small for Python and torch: raise --memory-gib"),
    ("failed to map segment", "the memory limit is too small for Python and torch: raise --memory-gib"),
    ("Cannot allocate memory", "the host is out of memory: grade with fewer --workers or free memory"),
    ("overloaded", "the machine was too busy: grade with fewer --workers or on a quieter machine"),
]


def not_graded_line(undecided: list[dict], submissions: int) -> str:
    """One line: why no submission could be graded, and what to do (the reason is the grader's, never a student's)."""
    reasons = [r["message"] for res in undecided for r in res["rows"] if r["status"] == UNGRADED and r["message"]]
    reasons = [re.sub(r"^not run: |; graded again on the next run$", "", r) for r in reasons]
    # the cause is the first death, not the rows after it ("the process died too many times"): a reason with a
    # known remedy names it, else the commonest
    known = [(r, hint) for words, hint in WHAT_TO_DO for r in reasons if words in r]
    reason, todo = known[0] if known else (max(set(reasons), key=reasons.count) if reasons else "no reason given",
                                           "fix that")
    return (f"stopped: {len(undecided)} of {submissions} submissions failed for a reason outside the students and none "
            f"was graded ({reason}); no grade was written: {todo}, then run the same command again")


def load_results(out_dir: Path) -> list[dict]:
    """Every well-formed result file under out_dir/results/, sorted by student and lesson.

    A file that is not a result (garbage, a stray copy, one whose student and
    lesson do not match its place) is left out: its submission is graded again
    on the next run, since _done does not count it either.
    """
    found = []
    for path in sorted((out_dir / "results").glob("*/*.json")):
        result = _load(path)
        if result is not None:
            found.append(result)
    return sorted(found, key=lambda r: (r["student"], r["lesson"]))


_ROW_TYPES = {"student": str, "lesson": str, "grade_id": str, "score": (int, float), "max_score": (int, float),
              "status": str, "message": str}


def _load(path: Path) -> dict | None:
    """One result file, or None when it is missing or is not a well-formed result for its place."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(result, dict) or result.get("student") != path.parent.name or result.get("lesson") != path.stem:
        return None
    rows, notes = result.get("rows"), result.get("notes", [])
    if not isinstance(rows, list) or not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return None
    for row in rows:
        if not isinstance(row, dict) or set(row) != set(_ROW_TYPES) or any(
                not isinstance(row[k], t) or isinstance(row[k], bool) for k, t in _ROW_TYPES.items()):
            return None
        if (row["student"], row["lesson"]) != (result["student"], result["lesson"]):
            return None
    facts = result.get("submission")
    if facts is not None and (not isinstance(facts, dict) or set(facts) != set(_FACT_TYPES) or any(
            not isinstance(facts[k], t) or isinstance(facts[k], bool) for k, t in _FACT_TYPES.items())):
        result.pop("submission")  # not a dating this grader wrote: the rows stand, undated
    return result


def finish(root: Path, out_dir: Path, log: Callable[[str], None] = print) -> Path:
    """From out_dir/results/: grades.csv, nbgrader's gradebook in out_dir/course/, and the summary."""
    with private_files(out_dir):
        return _finish(root, out_dir, log)


def _finish(root: Path, out_dir: Path, log: Callable[[str], None]) -> Path:
    results = load_results(out_dir)
    skipped = _load_skipped(out_dir)
    rows = [CellResult(**{**r, "score": float(r["score"]), "max_score": float(r["max_score"])}, **_dating(res))
            for res in results for r in res["rows"]]
    path = out_dir / "grades.csv"
    write_csv(rows, path)
    write_gradebook(root, out_dir / "course", results)
    lines = summary(results, skipped)
    _atomic_write(out_dir / "summary.txt", "\n".join(lines) + "\n")
    for line in lines:
        log(line)
    return path


def _dating(result: dict) -> dict:
    """A result's submission time, due date, late flag and penalty as grades.csv's columns ('' where unknown)."""
    facts = result.get("submission") or {}
    late = "" if not facts.get("timestamp") or not facts.get("duedate") else "yes" if facts["seconds_late"] > 0 else "no"
    return {"timestamp": facts.get("timestamp", ""), "duedate": facts.get("duedate", ""), "late": late,
            "penalty": float(facts.get("penalty", 0.0))}


_FACT_TYPES = {"timestamp": str, "duedate": str, "seconds_late": (int, float), "penalty": (int, float)}


def _load_skipped(out_dir: Path) -> list[str]:
    """What the last grade_class left out of the submissions folder, and why (out_dir/skipped.json)."""
    try:
        found = json.loads((out_dir / "skipped.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return []
    return [clean_text(x) for x in found if isinstance(x, str)] if isinstance(found, list) else []


NOTEWORTHY = re.compile(r"timed out|the Python process|process cap|disk quota|grade_id|symlink")


def summary(results: list[dict], skipped: list[str] | None = None) -> list[str]:
    """Every submission that did not get a normal grade, and why; then what in the submissions folder was skipped.

    Its notes name what the student's notebook changed (edited or deleted check
    cells, renamed grade ids, cells added) as plan() saw it; nothing here
    comes from inside the sandbox, so nothing torch does by itself is blamed
    on the student.
    """
    odd = []
    for res in results:
        odd_rows = [r for r in res["rows"] if r["status"] not in NORMAL]
        if odd_rows and all(r["status"] in ("error", UNGRADED) for r in res["rows"]) and len({r["message"] for r in odd_rows}) == 1:
            reasons = [f"not graded: {odd_rows[0]['message']}"]
        else:
            reasons = sorted({f"{r['grade_id']}: {r['status']}: {r['message']}" for r in odd_rows})
        reasons += [f"note: {n}" for n in res.get("notes", [])
                    if re.search(r"your code changed|grade_id|edited|missing|was not graded", n)]
        reasons += sorted({f"note: {r['message']}" for r in res["rows"]
                           if r["status"] in NORMAL and NOTEWORTHY.search(r["message"])})
        if reasons:
            odd.append(one_line(f"- {res['student']}/{res['lesson']}: " + " | ".join(reasons[:6])))
    skipped = list(skipped or [])
    head = f"summary: {len(results)} submissions graded; {len(odd)} without a normal grade"
    ungraded = sum(any(r["status"] == UNGRADED for r in res["rows"]) for res in results)
    if ungraded:
        head += (f"; {ungraded} with checks not graded for a reason outside the student (status {UNGRADED}: no grade "
                 "exported; the same command grades them again)")
    if skipped:
        head += f"; {len(skipped)} entries in the submissions folder skipped"
    return [head] + odd + [one_line(f"- {line}") for line in skipped]  # no student text makes a line of its own


def merge(root: Path, shards: list[Path], out_dir: Path, log: Callable[[str], None] = print) -> Path:
    """Merge the out folders of several shards into out_dir: results, notebooks, feedback, then finish."""
    out_dir = out_dir.resolve()
    with private_files(out_dir):
        return _merge(root, shards, out_dir, log)


def _merge(root: Path, shards: list[Path], out_dir: Path, log: Callable[[str], None]) -> Path:
    seen: dict[tuple[str, str], Path] = {}
    skipped: list[str] = []
    for shard in shards:
        shard = shard.resolve()
        skipped += [line for line in _load_skipped(shard) if line not in skipped]
        for res_path in sorted((shard / "results").glob("*/*.json")):
            student, lesson = res_path.parent.name, res_path.stem
            if (student, lesson) in seen:
                log(one_line(f"merge: {student}/{lesson} is in both {seen[(student, lesson)]} and {shard}; keeping the second"))
            seen[(student, lesson)] = shard
            if shard == out_dir:
                continue
            _atomic_write(result_path(out_dir, student, lesson), res_path.read_bytes())
            for part, name in (("autograded", f"{lesson}.ipynb"), ("feedback", f"{lesson}.html")):
                src = shard / "course" / part / student / lesson / name
                if src.is_file():
                    _atomic_write(out_dir / "course" / part / student / lesson / name, src.read_bytes(),
                                  FEEDBACK_MODE if part == "feedback" else None)
            _exchange_files(shard / "course" / "feedback" / student / lesson, out_dir / "course" / "feedback" / student / lesson)
    _atomic_write(out_dir / "skipped.json", json.dumps(skipped, indent=1))
    log(f"merged {len(seen)} results from {len(shards)} folders into {out_dir}")
    return finish(root, out_dir, log=log)
