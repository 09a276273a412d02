"""Throughput of the course's autograde against plain `nbgrader autograde`, on the same submissions, in one run.

    .venv/bin/python scripts/bench_autograde.py [--students 6] [--workers 1 2]

Makes a class of lesson 01 submissions (half the reference answers, half the
blank release), grades it with plain nbgrader (one after another, every cell
of the notebook, as the course did before) and with `grader.pipeline.classroom` at
each worker count (sandboxed, exercise and check cells only), each into a
fresh folder, and prints seconds, submissions per minute and the ratio to
plain nbgrader. Both must agree on every score. Not a test: timings depend
on the machine and its load.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def make_class(folder: Path, students: int) -> None:
    """students submissions: even ones the reference answers, odd ones the blank release."""
    import nbformat
    from build_corpus import LESSON, _good

    good = _good()
    blank = nbformat.read(str(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    for i in range(students):
        target = folder / f"student{i:03d}" / LESSON
        target.mkdir(parents=True)
        nbformat.write(good if i % 2 == 0 else blank, str(target / f"{LESSON}.ipynb"))


def main(argv: list[str] | None = None) -> int:
    """Grade the same class three ways and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"])
    args = parser.parse_args(argv)

    from grader.pipeline.classroom import grade_class
    from grader.pipeline.grades import read_csv
    from grader.pipeline.nbgrader_plain import autograde_plain
    from grader.pipeline.sandbox import choose
    from grader.pipeline.settings import Settings

    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-bench-"))
    try:
        subs = scratch / "submissions"
        make_class(subs, args.students)
        quiet = lambda line: None  # noqa: E731
        start = time.perf_counter()
        plain = read_csv(autograde_plain(ROOT, subs, scratch / "plain", log=quiet))
        plain_seconds = time.perf_counter() - start
        want = {(r.student, r.grade_id): r.score for r in plain}
        lines = [f"{args.students} submissions of lesson 01 on {__import__('os').cpu_count()} cores; "
                 f"sandbox: {choose(args.sandbox)}",
                 f"{'grader':<28}{'seconds':>9}{'subs/min':>10}{'vs nbgrader':>13}",
                 f"{'plain nbgrader autograde':<28}{plain_seconds:>9.1f}{60 * args.students / plain_seconds:>10.1f}{1.0:>12.2f}x"]
        for workers in args.workers:
            start = time.perf_counter()
            rows = read_csv(grade_class(ROOT, subs, scratch / f"ours-{workers}",
                                        Settings(workers=workers, sandbox=args.sandbox), log=quiet))
            seconds = time.perf_counter() - start
            got = {(r.student, r.grade_id): r.score for r in rows}
            agree = "" if got == want else "  (scores DIFFER from nbgrader's)"
            lines.append(f"{f'course autograde, {workers} worker(s)':<28}{seconds:>9.1f}"
                         f"{60 * args.students / seconds:>10.1f}{plain_seconds / seconds:>12.2f}x{agree}")
        print("\n".join(lines))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
