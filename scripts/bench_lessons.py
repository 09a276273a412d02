"""Each lesson's papermill time against a notebook that only imports torch, in one run.

    .venv/bin/python scripts/bench_lessons.py              # defaults and demo mode, every lesson
    .venv/bin/python scripts/bench_lessons.py 01_crossover

Prints a table: seconds for the empty torch notebook (the floor every lesson
pays: kernel start plus `import torch`), each lesson with its defaults and with
demo=True, and the ratio to the floor. A report, not a test: timings are noisy.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import nbformat
import papermill

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.pipeline.run import run  # noqa: E402
from grader.pipeline.tools import lessons  # noqa: E402


def empty_torch_seconds(folder: Path) -> float:
    """Papermill time of a one-cell notebook that imports torch."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "empty.ipynb"
    nbformat.write(nb, str(path))
    start = time.perf_counter()
    papermill.execute_notebook(str(path), str(folder / "empty-out.ipynb"), kernel_name="python3", progress_bar=False)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    chosen = argv or lessons(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        floor = empty_torch_seconds(folder)
        print(f"{'notebook':<22}{'seconds':>9}{'× empty':>9}")
        print(f"{'empty (import torch)':<22}{floor:>9.1f}{1.0:>9.1f}")
        for lesson in chosen:
            for label, params in (("", {}), (" demo", {"demo": True})):
                (_, seconds, status), = run(ROOT, [lesson], params, folder / "runs", log=lambda line: None)
                note = "" if status == "ok" else f"  {status}"
                print(f"{lesson + label:<22}{seconds:>9.1f}{seconds / floor:>9.1f}{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
