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
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import nbformat

from grader import sandbox as sandboxes
from grader.course import CSV_FIELDS, CellResult, nbgrader, write_course_config, write_csv

NORMAL = ("passed", "failed")
_CHECKS_IMPORT = re.compile(r"^\s*from\s+(grader\.checks)\s+import\s+(\w+)|^\s*import\s+(grader\.checks\.\w+)", re.M)
_HIDDEN = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", re.S)


@dataclass
class Settings:
    """How a class is graded."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    cell_timeout: float = 60.0  # seconds one cell may run
    notebook_timeout: float = 600.0  # seconds all of one submission's cells may run, restarts included
    memory_gib: float = 4.0
    sandbox: str = "auto"  # auto, bwrap or none
    shard: tuple[int, int] = (0, 1)  # (I, N): grade the I-th of N slices, I counted from 0
    regrade: bool = False  # grade again even where a result exists
    hide: list[Path] = field(default_factory=list)  # more folders the sandbox must hide


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


# --- what to run ---------------------------------------------------------------------------


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


# --- running one submission ------------------------------------------------------------------


class _Runner:
    """One cellrunner process in the sandbox, and the pipes to it."""

    def __init__(self, box: sandboxes.Sandbox, workspace: Path, modules: list[str], settings: Settings):
        read_fd, write_fd = os.pipe()
        command = [sys.executable, "-m", "grader.cellrunner", "--result-fd", str(write_fd),
                   "--memory-gib", str(settings.memory_gib), *modules]
        self.log = open(workspace.parent / "runner.log", "ab")
        self.proc = subprocess.Popen(
            box.argv(command, workspace), cwd=workspace, env=box.env(workspace), stdin=subprocess.PIPE,
            stdout=self.log, stderr=self.log, pass_fds=(write_fd,), start_new_session=True,
        )
        os.close(write_fd)
        self.results = read_fd
        self.buffer = b""

    def ready(self, timeout: float) -> str:
        """Wait for the runner to finish its imports: 'ok', 'timeout' or 'died'."""
        return self._reply("ready", timeout)[0]

    def ask(self, cell: Cell, timeout: float) -> tuple[str, dict | None]:
        """Run one cell: ('ok', reply), ('timeout', None) or ('died', None)."""
        nonce = uuid.uuid4().hex
        try:
            self.proc.stdin.write((json.dumps({"kind": cell.kind, "source": cell.source, "nonce": nonce}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return "died", None
        return self._reply(nonce, timeout)

    def _reply(self, nonce: str, timeout: float) -> tuple[str, dict | None]:
        """The reply carrying `nonce`, skipping any line that does not."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue  # not the runner's: something the student's code wrote there
                if isinstance(reply, dict) and reply.get("nonce") == nonce:
                    return "ok", reply
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", None
            ready, _, _ = select.select([self.results], [], [], left)
            if ready:
                chunk = os.read(self.results, 1 << 20)
                if not chunk:
                    return "died", None
                self.buffer = (self.buffer + chunk)[-(8 << 20):]

    def kill(self) -> int:
        """Stop the runner and everything it started; returns its exit status."""
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        return self.stop()

    def stop(self, grace: float = 10.0) -> int:
        """Close its input and wait up to `grace` seconds for it to end, then kill it; returns its exit status."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            code = self.proc.wait()
        os.close(self.results)
        self.log.close()
        return code


def _death(code: int | None, log: Path) -> str:
    """Why the runner process ended, in words."""
    tail = log.read_bytes()[-4000:].decode("utf-8", "replace") if log.is_file() else ""
    if "MemoryError" in tail or "can't allocate memory" in tail:
        return "ran out of memory (the memory limit) and the Python process died"
    if code is not None and code < 0:
        import signal

        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        hint = {"SIGKILL": " (killed: usually the memory limit)", "SIGXCPU": " (the CPU-time limit)",
                "SIGSEGV": " (a crash in native code)"}.get(name, "")
        return f"the Python process was killed by {name}{hint}"
    return f"the Python process exited with status {code} (os._exit, sys.exit outside a cell, or a crash)"


def run_cells(cells: list[Cell], modules: list[str], box: sandboxes.Sandbox, settings: Settings) -> list[dict]:
    """Run the cells in a sandbox; one reply per cell, each with 'status' ok/error/timeout/died/not run."""
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-grade-"))
    workspace = scratch / "work"
    workspace.mkdir()
    replies: list[dict] = []
    ran_ok: list[Cell] = []
    runner: _Runner | None = None
    deadline = time.monotonic() + settings.notebook_timeout
    restarts = 0
    try:
        for cell in cells:
            left = deadline - time.monotonic()
            if left <= 0 or restarts > 8:
                why = (f"not run: the whole-notebook limit of {settings.notebook_timeout:g} s was used up"
                       if left <= 0 else "not run: the process died too many times")
                replies.append({"status": "not run", "ename": "", "evalue": why, "stdout": "", "stderr": "", "notes": []})
                continue
            if runner is None:
                runner = _Runner(box, workspace, modules, settings)
                if runner.ready(max(left, 1)) != "ok":  # starting Python and torch: not the student's time
                    why = _death(runner.kill(), scratch / "runner.log")
                    replies.append({"status": "not run", "ename": "", "stdout": "", "stderr": "", "notes": [],
                                    "evalue": f"not run: the grader's Python did not start ({why})"})
                    runner, restarts = None, restarts + 1
                    continue
                for earlier in ran_ok:  # put back the definitions the dead process held
                    state, _ = runner.ask(earlier, min(settings.cell_timeout, max(left, 1)))
                    if state != "ok":
                        break
            state, reply = runner.ask(cell, min(settings.cell_timeout, max(left, 0.1)))
            if state == "ok":
                reply["status"] = "ok" if reply["ok"] else "error"
                if cell.kind == "student" and reply["ok"]:
                    ran_ok.append(cell)
                replies.append(reply)
                continue
            code = runner.stop(grace=2.0) if state == "died" else runner.kill()
            runner, restarts = None, restarts + 1
            if state == "timeout":
                limit = min(settings.cell_timeout, left)
                why = f"timed out after {limit:g} s (an infinite loop, or far too slow)"
            else:
                why = _death(code, scratch / "runner.log")
            replies.append({"status": state, "ename": "", "evalue": why, "stdout": "", "stderr": "", "notes": []})
    finally:
        if runner is not None:
            runner.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    return replies


# --- scoring ---------------------------------------------------------------------------------


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
        extra = [n for n in notes if any(a in n for a in about)] + list(reply.get("notes", []))
        if reply["status"] == "ok":
            status, got, message = "passed", cell.points, ""
        else:
            got = 0.0
            status = {"error": "failed", "timeout": "timeout", "died": "crashed"}.get(reply["status"], "error")
            message = _reason(reply)
            if reply.get("ename") == "NameError" and failed_before:
                message += " (" + "; ".join(failed_before[-2:]) + ")"
        message = "; ".join([m for m in [message, *extra] if m])
        rows.append(CellResult(student, lesson, cell.grade_id, got, cell.points, status, message))
    return rows


def _reason(reply: dict) -> str:
    """Why a cell did not pass, in the learner's terms."""
    if reply["status"] in ("timeout", "died", "not run"):
        return reply["evalue"]
    if reply.get("ename") == "NotImplementedError":
        return "not attempted: the exercise still raises NotImplementedError"
    return f"{reply.get('ename')}: {reply.get('evalue')}"


def error_rows(student: str, lesson: str, source_nb, reason: str) -> list[CellResult]:
    """Zero on every check of a submission that could not be graded, each row giving the reason."""
    return [CellResult(student, lesson, _nbg(c)["grade_id"], 0.0, float(_nbg(c).get("points", 0) or 0), "error", reason)
            for c in source_nb.cells if c.cell_type == "code" and _nbg(c).get("grade")]


def executed_notebook(cells: list[Cell], replies: list[dict], rows: list[CellResult], notes: list[str]) -> nbformat.NotebookNode:
    """The cells as they ran, with their outputs and a summary on top: the autograded notebook."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    total, best = sum(r.score for r in rows), sum(r.max_score for r in rows)
    lines = [f"# Score: {total:g} / {best:g}", ""] + [
        f"- `{r.grade_id}`: {r.score:g} / {r.max_score:g} ({r.status}){': ' + r.message if r.message else ''}" for r in rows]
    lines += [""] + [f"- note: {n}" for n in notes]
    nb.cells.append(nbformat.v4.new_markdown_cell("\n".join(lines)))
    for cell, reply in zip(cells, replies):
        code = nbformat.v4.new_code_cell(cell.source)
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

    from grader.feedback import HideHiddenTests

    exporter = HTMLExporter()
    exporter.register_preprocessor(HideHiddenTests(), enabled=True)
    body, _ = exporter.from_notebook_node(nb)
    return body


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


# --- a class ---------------------------------------------------------------------------------


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
    box = sandboxes.Sandbox(kind, hide=[root, out_dir, submissions, Path.home(), *settings.hide], keep=keep)
    if kind == "none":
        log("sandbox: none (bwrap not installed or GRADER_SANDBOX=none): student code can read files and use the "
            "network; see grader/sandbox.py")
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


def write_gradebook(root: Path, course: Path, results: list[dict]) -> None:
    """nbgrader's gradebook.db in course/, with every result's scores as autograde scores."""
    from nbgrader.api import Gradebook, MissingEntry

    course.mkdir(parents=True, exist_ok=True)
    write_course_config(course, root / "solutions")
    lessons = sorted({r["lesson"] for r in results})
    for lesson in lessons:
        released = course / "release" / lesson / f"{lesson}.ipynb"
        source = root / "solutions" / lesson / f"{lesson}.ipynb"
        if not released.is_file() or released.stat().st_mtime < source.stat().st_mtime:
            nbgrader(["generate_assignment", lesson, "--force"], cwd=course)
    import warnings

    warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's own add_submission, harmless
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for res in results:
            student, lesson = res["student"], res["lesson"]
            gb.update_or_create_student(student)
            try:
                gb.find_submission(lesson, student)
            except MissingEntry:
                gb.add_submission(lesson, student)
            for row in res["rows"]:
                try:
                    grade = gb.find_grade(row["grade_id"], lesson, lesson, student)
                except MissingEntry:
                    continue
                grade.auto_score = float(row["score"])
            gb.db.commit()


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


__all__ = ["CSV_FIELDS", "Settings", "grade_class", "merge", "finish", "plan", "read_submission", "shard_of"]
