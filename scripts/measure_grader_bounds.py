"""What one hostile submission costs the grader's own process: peak memory and bytes written (issue 28).

    .venv/bin/python scripts/measure_grader_bounds.py flood 4000     # 0.8 MB: 4,000 cells, each 90,000 characters out
    .venv/bin/python scripts/measure_grader_bounds.py cells 45000    # 4.5 MB: 45,000 one-line cells
    .venv/bin/python scripts/measure_grader_bounds.py good 0         # the reference answers, for comparison

Grades one submission of lesson 01 (built by tests/build_corpus.py) with the
real sandbox in this process, then prints the notebook's size, the grader's
peak RSS (ru_maxrss: this process; the sandbox's processes are not in it), its
CPU seconds, and the bytes it wrote under the out folder.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import nbformat  # noqa: E402

from build_corpus import LESSON, _good, many_one_line_cells, output_flood  # noqa: E402
from grader.pipeline import classroom, sandbox  # noqa: E402
from grader.pipeline.settings import Settings  # noqa: E402


def main(kind: str, count: int) -> None:
    nb = {"flood": output_flood, "cells": many_one_line_cells, "good": lambda n: _good()}[kind](count)
    with tempfile.TemporaryDirectory() as tmp:
        subs, out = Path(tmp) / "subs", Path(tmp) / "out"
        (subs / "eve" / LESSON).mkdir(parents=True)
        path = subs / "eve" / LESSON / f"{LESSON}.ipynb"
        nbformat.write(nb, str(path))
        kind_box = sandbox.choose(None)
        keep = [ROOT / "grader", ROOT / "data", Path(sys.prefix), Path(sys.base_prefix),
                *(Path(p) for p in sys.path if p.endswith("site-packages"))]
        box = sandbox.Sandbox(kind_box, hide=[ROOT, out, subs, Path.home()], keep=keep)
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        result = classroom.grade_one(ROOT, subs, out, "eve", LESSON, box, Settings(notebook_timeout=1800))
        after = resource.getrusage(resource.RUSAGE_SELF)
        written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        got = sum(r["score"] for r in result["rows"])
        print(f"{kind} {count}: notebook {path.stat().st_size / 1e6:.2f} MB; score {got:g}; "
              f"grader peak RSS {after.ru_maxrss / 1024:.0f} MiB; grader CPU "
              f"{after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime:.1f} s; "
              f"wall {time.perf_counter() - start:.1f} s; written {written / 2**20:.1f} MiB")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
