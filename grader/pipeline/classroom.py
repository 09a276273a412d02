"""Grading a whole class: each submission isolated, many at once, resumable, shardable, merged into one result.

For each SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb the grader (never the
student's code) builds the cells to run from the instructor source in
solutions/: the student's exercise cells (matched by grade_id, else by cell
id), any code cells the student added before them, and the course's own
locked check cells with their hidden tests, in the source's order. Demo cells
are not run: by the course's rule exercise and check cells are
self-contained, and no demo cell carries points. Deleted, edited, duplicated
or reordered check cells therefore change nothing.

The cells run one at a time in grader.cellrunner inside grader.sandbox (bwrap
when installed), with a per-cell and a whole-notebook time limit and a memory
limit. A cell that hangs or kills its process costs only that cell: the
runner is started again, the exercise cells that had run are run again, and
grading goes on after the cell that failed. The grader scores each check
cell from the runner's reply (passed when its code finished without an
exception; stderr is allowed) and writes, atomically and as each submission
finishes, results/<student>/<lesson>.json, the executed notebook and the
feedback page. `finish` turns all results into grades.csv, nbgrader's
gradebook and the summary; `merge` does that for the results of many shards.
"""

from __future__ import annotations

import hashlib
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

from grader.pipeline import sandbox as sandboxes
from grader.pipeline.grades import CellResult, write_csv, write_gradebook
from grader.pipeline.runner import run_cells
from grader.pipeline.scoring import error_rows, executed_notebook, feedback_html, score
from grader.pipeline.settings import Settings
from grader.pipeline.submissions import SubmissionError, check_modules, plan, read_submission, shard_of, submissions_of

NORMAL = ("passed", "failed")


def _atomic_write(path: Path, data: str | bytes) -> None:
    """Write a file so that a reader (or a rerun after a kill) sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    os.replace(tmp, path)


def result_path(out_dir: Path, student: str, lesson: str) -> Path:
    """Where one submission's result lives: out_dir/results/<student>/<lesson>.json."""
    return out_dir / "results" / student / f"{lesson}.json"


def grade_one(root: Path, submissions: Path, out_dir: Path, student: str, lesson: str,
              box: sandboxes.Sandbox, settings: Settings) -> dict:
    """Grade one submission and write its result, executed notebook and feedback; returns the result."""
    start = time.perf_counter()
    source_nb = nbformat.read(str(root / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    path = submissions / student / lesson / f"{lesson}.ipynb"
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
    extras = sorted(p.name for p in (submissions / student / lesson).iterdir() if p.name != path.name)
    notes = [f"extra files in the submission were not given to the grader: {', '.join(extras[:10])}"] if extras else []
    try:
        student_nb = read_submission(path)
        cells, plan_notes = plan(source_nb, student_nb)
        notes += plan_notes
        replies = run_cells(cells, check_modules(cells), box, settings)
        rows = score(student, lesson, cells, replies, notes)
        executed = executed_notebook(cells, replies, rows, notes)
        _atomic_write(out_dir / "course" / "autograded" / student / lesson / f"{lesson}.ipynb", nbformat.writes(executed))
        _atomic_write(out_dir / "course" / "feedback" / student / lesson / f"{lesson}.html", feedback_html(executed))
    except SubmissionError as exc:
        rows = error_rows(student, lesson, source_nb, str(exc))
    result = {"student": student, "lesson": lesson, "sha256": digest, "seconds": time.perf_counter() - start,
              "sandbox": box.kind, "notes": notes, "rows": [r.row() for r in rows]}
    _atomic_write(result_path(out_dir, student, lesson), json.dumps(result, indent=1))
    return result


def _done(out_dir: Path, submissions: Path, student: str, lesson: str) -> bool:
    """True when this submission already has a result for the same notebook bytes."""
    path = result_path(out_dir, student, lesson)
    if not path.is_file():
        return False
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    nb = submissions / student / lesson / f"{lesson}.ipynb"
    digest = hashlib.sha256(nb.read_bytes()).hexdigest() if nb.is_file() else ""
    return saved.get("sha256") == digest


def grade_class(root: Path, submissions: Path, out_dir: Path, settings: Settings | None = None,
                only: Iterable[str] | None = None, log: Callable[[str], None] = print) -> Path:
    """Grade every submission (this shard's), in parallel, skipping those already graded; returns grades.csv."""
    settings = settings or Settings()
    root, submissions, out_dir = root.resolve(), submissions.resolve(), out_dir.resolve()
    pairs = shard_of(submissions_of(submissions, only), *settings.shard)
    unknown = sorted({lesson for _, lesson in pairs if not (root / "solutions" / lesson).is_dir()})
    if unknown:
        raise ValueError(f"submissions name lessons the course does not have: {unknown}")
    todo = [p for p in pairs if settings.regrade or not _done(out_dir, submissions, *p)]
    if len(todo) < len(pairs):
        log(f"{len(pairs) - len(todo)} of {len(pairs)} submissions already graded; grading the other {len(todo)}")
    kind = sandboxes.choose(settings.sandbox)
    keep = [root / "grader", root / "data", Path(sys.prefix), Path(sys.base_prefix)]
    box = sandboxes.Sandbox(kind, hide=[root, out_dir, submissions, Path.home(), *settings.hide], keep=keep,
                            disk_bytes=int(settings.disk_mib * 1024**2), shm_bytes=int(settings.shm_mib * 1024**2),
                            max_processes=settings.max_processes)
    if kind == "none":
        log("sandbox: none, as asked: student code can read every file the grader can, write to the disk without a "
            "quota and use the network (processes are still capped and killed); see grader/pipeline/sandbox.py")
    lock, done = threading.Lock(), [0]

    def one(pair):
        """Grade one submission and print its line."""
        result = grade_one(root, submissions, out_dir, *pair, box, settings)
        got = sum(r["score"] for r in result["rows"])
        best = sum(r["max_score"] for r in result["rows"])
        with lock:
            done[0] += 1
            log(f"[{done[0]}/{len(todo)}] {pair[0]}/{pair[1]}: {got:g}/{best:g} ({result['seconds']:.1f} s)")
        return result

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, settings.workers)) as pool:
        list(pool.map(one, todo))
    if todo:
        log(f"graded {len(todo)} submissions in {time.perf_counter() - start:.1f} s with {settings.workers} workers ({kind} sandbox)")
    return finish(root, out_dir, log=log)


def load_results(out_dir: Path) -> list[dict]:
    """Every result file under out_dir/results/, sorted by student and lesson."""
    found = []
    for path in sorted((out_dir / "results").glob("*/*.json")):
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # a half-written file cannot exist (atomic writes); an unreadable one is regraded next run
    return sorted(found, key=lambda r: (r["student"], r["lesson"]))


def finish(root: Path, out_dir: Path, log: Callable[[str], None] = print) -> Path:
    """From out_dir/results/: grades.csv, nbgrader's gradebook in out_dir/course/, and the summary."""
    results = load_results(out_dir)
    rows = [CellResult(**{**r, "score": float(r["score"]), "max_score": float(r["max_score"])})
            for res in results for r in res["rows"]]
    path = out_dir / "grades.csv"
    write_csv(rows, path)
    write_gradebook(root, out_dir / "course", results)
    lines = summary(results)
    _atomic_write(out_dir / "summary.txt", "\n".join(lines) + "\n")
    for line in lines:
        log(line)
    return path


def summary(results: list[dict]) -> list[str]:
    """Every submission that did not get a normal grade, and why."""
    odd = []
    for res in results:
        odd_rows = [r for r in res["rows"] if r["status"] not in NORMAL]
        if odd_rows and all(r["status"] == "error" for r in res["rows"]) and len({r["message"] for r in odd_rows}) == 1:
            reasons = [f"not graded: {odd_rows[0]['message']}"]
        else:
            reasons = sorted({f"{r['grade_id']}: {r['status']}: {r['message']}" for r in odd_rows})
        reasons += [f"note: {n}" for n in res.get("notes", []) if "undid" in n or "grade_id" in n]
        reasons += sorted({f"note: {r['message']}" for r in res["rows"]
                           if r["status"] in NORMAL and re.search(r"undid|timed out|the Python process", r["message"])})
        if reasons:
            odd.append(f"- {res['student']}/{res['lesson']}: " + " | ".join(reasons[:6]))
    head = f"summary: {len(results)} submissions graded; {len(odd)} without a normal grade"
    return [head] + odd


def merge(root: Path, shards: list[Path], out_dir: Path, log: Callable[[str], None] = print) -> Path:
    """Merge the out folders of several shards into out_dir: results, notebooks, feedback, then finish."""
    out_dir = out_dir.resolve()
    seen: dict[tuple[str, str], Path] = {}
    for shard in shards:
        shard = shard.resolve()
        for res_path in sorted((shard / "results").glob("*/*.json")):
            student, lesson = res_path.parent.name, res_path.stem
            if (student, lesson) in seen:
                log(f"merge: {student}/{lesson} is in both {seen[(student, lesson)]} and {shard}; keeping the second")
            seen[(student, lesson)] = shard
            if shard == out_dir:
                continue
            _atomic_write(result_path(out_dir, student, lesson), res_path.read_bytes())
            for part, name in (("autograded", f"{lesson}.ipynb"), ("feedback", f"{lesson}.html")):
                src = shard / "course" / part / student / lesson / name
                if src.is_file():
                    _atomic_write(out_dir / "course" / part / student / lesson / name, src.read_bytes())
    log(f"merged {len(seen)} results from {len(shards)} folders into {out_dir}")
    return finish(root, out_dir, log=log)
