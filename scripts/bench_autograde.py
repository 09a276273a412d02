"""Throughput of `python -m grader autograde` against plain `nbgrader autograde`: the whole commands, one run, same cores.

    .venv/bin/python scripts/bench_autograde.py [--students 12] [--lessons 01_crossover 04_memory]
                                                [--workers 1 2] [--cpus 0,1] [--cold] [--around]

Makes a class: each student hands in every lesson named, even students the
reference answers (with the first guesses a learner's run records), odd ones
the blank release. Then, on the same CPUs (`--cpus`, default every CPU this
process may use) and in one run, it times what a person waits for until
grades.csv, the gradebook and the feedback are written:

- plain nbgrader, through its command lines in a course folder (the course's
  nbgrader_config.py, with PatientExecute, so no widget stall): for each
  lesson `nbgrader generate_assignment`, `nbgrader autograde`, `nbgrader
  generate_feedback`, then `nbgrader export` (its grades.csv);
- `python -m grader autograde SUBMISSIONS --out OUT --workers N` for each N
  (with --cold also `--cold`, every runner a fresh Python), into a fresh folder.

It prints seconds, notebooks per minute (and per core) and the ratio to
plain nbgrader; the commands' own phases (plain: each nbgrader command;
ours: start-up until the first submission is graded, grading, and writing
grades.csv, the gradebook and the summary, read from the time each log line
came); and the per-submission breakdown (median wall seconds of reading,
starting its runner, the student's cells, observing, judging, writing its
pages) of solved and blank submissions of each lesson, from the result files.
Both graders must agree on every score (per cell, from nbgrader's gradebook).
Not a test: timings depend on the machine and its load, which it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
PYTHON = sys.executable


def solved(lesson: str):
    """The student release with every exercise answered by the reference solution."""
    import nbformat

    release = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    solution = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell.source = answers[meta["grade_id"]]
    return release


def make_class(folder: Path, students: int, lessons: list[str]) -> list[tuple[str, str, str]]:
    """Every student hands in every lesson: even ones solved (predictions recorded), odd ones blank."""
    import nbformat
    from notebook_cells import honest_predictions

    made = []
    for lesson in lessons:
        good = solved(lesson)
        blank = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
        for i in range(students):
            target = folder / f"student{i:03d}" / lesson
            target.mkdir(parents=True)
            nbformat.write(good if i % 2 == 0 else blank, str(target / f"{lesson}.ipynb"))
            if i % 2 == 0:
                honest_predictions(lesson, target)
            made.append((f"student{i:03d}", lesson, "solved" if i % 2 == 0 else "blank"))
    return made


def timed(command: list[str], cwd: Path, env: dict) -> tuple[float, list[tuple[float, str]]]:
    """Run a command; its wall seconds and its output lines, each with the second it came."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(time.perf_counter() - start, line.rstrip("\n")) for line in proc.stdout]
    if proc.wait() != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n" + "\n".join(line for _, line in lines[-30:]))
    return time.perf_counter() - start, lines


def plain_nbgrader(subs: Path, out: Path, lessons: list[str], env: dict) -> tuple[float, dict[str, float]]:
    """Plain nbgrader's command lines in a fresh course folder: seconds in all, and per command."""
    from grader.pipeline.grades import write_course_config

    course = out / "course"
    course.mkdir(parents=True)
    write_course_config(course, ROOT / "solutions")
    shutil.copytree(subs, course / "submitted")  # where collect would have put them: not timed
    phases: dict[str, float] = {}
    start = time.perf_counter()
    for lesson in lessons:
        for verb in ("generate_assignment", "autograde", "generate_feedback"):
            args = [verb, lesson, "--force"] + (["--create"] if verb == "autograde" else [])
            seconds, _ = timed([PYTHON, "-m", "nbgrader", *args], course, env)
            phases[verb] = phases.get(verb, 0.0) + seconds
    seconds, _ = timed([PYTHON, "-m", "nbgrader", "export"], course, env)  # course/grades.csv
    phases["export"] = seconds
    return time.perf_counter() - start, phases


def ours(subs: Path, out: Path, workers: int, cold: bool, env: dict) -> tuple[float, dict[str, float]]:
    """`python -m grader autograde`: seconds in all, and its start-up, grading and writing, from its log lines."""
    command = [PYTHON, "-m", "grader", "autograde", str(subs), "--out", str(out), "--workers", str(workers),
               *(["--cold"] if cold else [])]
    seconds, lines = timed(command, ROOT, env)
    graded = [t for t, line in lines if line.startswith("[") and "done," in line]
    first, last = (graded[0], graded[-1]) if graded else (seconds, seconds)
    return seconds, {"start-up and the first submission": first, "the other submissions": last - first,
                     "grades.csv, gradebook, summary": seconds - last}


def breakdown(out: Path, made: list[tuple[str, str, str]]) -> list[str]:
    """Median wall seconds per phase of one submission, for solved and blank ones of each lesson."""
    from grader.pipeline.runner import PHASES

    kinds = {(s, lesson): kind for s, lesson, kind in made}
    groups: dict[tuple[str, str], list[dict]] = {}
    for path in sorted((out / "results").glob("*/*.json")):
        result = json.loads(path.read_text())
        key = (result["lesson"], kinds.get((result["student"], result["lesson"]), "?"))
        groups.setdefault(key, []).append({**result.get("phases", {}), "total": result["seconds"]})
    lines = [f"{'one submission (median s)':<28}" + "".join(f"{p:>9}" for p in (*PHASES, "total"))]
    for (lesson, kind), found in sorted(groups.items()):
        lines.append(f"{f'{lesson} {kind}':<28}" + "".join(
            f"{statistics.median(x.get(p, 0.0) for x in found):>9.2f}" for p in (*PHASES, "total")))
    return lines


def agree(plain_out: Path, ours_out: Path, made) -> str:
    """'' when both graders gave every cell the same score, else the first difference."""
    from grader.pipeline.grades import read_csv
    from grader.pipeline.nbgrader_plain import gradebook_rows

    pairs = sorted({(s, lesson) for s, lesson, _ in made})
    want = {(r.student, r.lesson, r.grade_id): r.score for r in gradebook_rows(plain_out / "course", pairs)}
    got = {(r.student, r.lesson, r.grade_id): r.score for r in read_csv(ours_out / "grades.csv")}
    diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    return "" if not diff else f"  (scores DIFFER from nbgrader's, e.g. {diff[0]}: {want.get(diff[0])} vs {got.get(diff[0])})"


def main(argv: list[str] | None = None) -> int:
    """Grade the same class with both graders and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=12)
    parser.add_argument("--lessons", nargs="+", default=["01_crossover", "04_memory"])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cpus", help="CPUs both graders run on, e.g. 0,1 (default: all this process may use)")
    parser.add_argument("--cold", action="store_true", help="also time `--cold` (every runner a fresh Python)")
    parser.add_argument("--skip-plain", action="store_true", help="time only the course's grader")
    parser.add_argument("--around", action="store_true",
                        help="time the course's grader both before and after plain nbgrader (a load that changes "
                             "during the run shows as the difference)")
    args = parser.parse_args(argv)

    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    cpus = sorted(os.sched_getaffinity(0))
    from grader.pipeline.sandbox import choose
    from grader.pipeline.tools import tool_env

    env = {**tool_env(), "PYTHONPATH": str(ROOT)}
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-bench-"))
    try:
        subs = scratch / "submissions"
        made = make_class(subs, args.students, args.lessons)
        n = len(made)
        load = os.getloadavg()
        lines = [f"{n} submissions ({', '.join(args.lessons)}; half solved, half blank) on CPUs {cpus} "
                 f"of {os.cpu_count()}; sandbox: {choose('auto')}; load average before: {load[0]:.1f} {load[1]:.1f}",
                 f"{'command':<40}{'seconds':>9}{'nb/min':>9}{'per core':>10}{'vs nbgrader':>13}"]

        def row(name, seconds, cores, base):
            rate = 60 * n / seconds
            ratio = f"{base / seconds:>12.2f}x" if base else f"{'':>13}"
            return f"{name:<40}{seconds:>9.1f}{rate:>9.1f}{rate / cores:>10.1f}{ratio}"

        runs = [(w, False) for w in args.workers] + ([(w, True) for w in args.workers] if args.cold else [])
        timings = []  # (name, seconds, cores, out folder, phases), ours before plain nbgrader, then (--around) after
        rounds = ["before", "after"] if args.around and not args.skip_plain else ["before"]
        base, phases_all = None, []
        for when in rounds:
            if when == "after":
                base, phases = plain_nbgrader(subs, scratch / "plain", args.lessons, env)
                phases_all.append(("plain nbgrader", phases))
            for workers, cold in runs:
                out = scratch / f"ours-{workers}{'-cold' if cold else ''}-{when}"
                seconds, phases = ours(subs, out, workers, cold, env)
                name = f"python -m grader autograde -w {workers}{' --cold' if cold else ''}"
                name += f" ({when} nbgrader)" if len(rounds) > 1 else ""
                timings.append((name, seconds, min(workers, len(cpus)), out, phases))
                phases_all.append((name, phases))
        if not args.skip_plain and base is None:
            base, phases = plain_nbgrader(subs, scratch / "plain", args.lessons, env)
            phases_all.insert(0, ("plain nbgrader", phases))
        if base is not None:
            lines.append(row("plain nbgrader (its command lines)", base, 1, base))
        for name, seconds, cores, out, _ in timings:
            same = agree(scratch / "plain", out, made) if base else ""
            lines.append(row(name, seconds, cores, base) + same)
            lines += [f"  {line}" for line in breakdown(out, made)]
        lines.append("where each command's seconds went:")
        for name, phases in phases_all:
            lines.append(f"  {name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()))
        after = os.getloadavg()
        lines.append(f"load average after: {after[0]:.1f} {after[1]:.1f} (other processes share these CPUs: ratios "
                     "from one run, on the same load, are what compare)")
        print("\n".join(lines))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
