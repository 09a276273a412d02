"""Each lesson's papermill time against two floors, measured in one run.

    .venv/bin/python scripts/bench_lessons.py              # defaults and demo mode, every lesson
    .venv/bin/python scripts/bench_lessons.py 01_crossover

Prints a table: seconds for each lesson with its defaults and with demo=True, and its ratio to

- the **empty torch notebook**: kernel start plus `import torch`, the floor of any torch notebook;
- the **course floor**: kernel start, the imports every lesson's set-up cell makes (torch, pandas,
  matplotlib, ipywidgets, the course's package) and one `torch.optim` optimizer. Constructing the
  first optimizer of a process imports `torch._dynamo` (torch wraps `Optimizer.add_param_group` in
  `torch._disable_dynamo`, which imports it on first call; DDP's constructor does the same), and
  that import alone takes about as long as `import torch`. Every lesson that trains pays it, so
  "content" (the lesson minus this floor) is what the lesson itself costs.

A report, not a test: timings are noisy. Run it on a quiet machine.
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

EMPTY = ["import torch"]
COURSE_FLOOR = [
    "%matplotlib inline\nimport pandas as pd\nimport torch\nimport ipywidgets\nfrom matplotlib.figure import Figure\n"
    "from grader import device, plots, specs, widgets\nfrom grader.notebook import skip_if_not_done",
    "torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # the first optimizer imports torch._dynamo",
]


def notebook_seconds(folder: Path, name: str, cells: list[str]) -> float:
    """Papermill time of a notebook made of `cells`, run in the course's folder like a lesson."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, str(path))
    start = time.perf_counter()
    papermill.execute_notebook(str(path), str(folder / f"{name}-out.ipynb"), kernel_name="python3",
                               progress_bar=False, cwd=str(ROOT / "solutions"))
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    chosen = argv or lessons(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        notebook_seconds(folder, "warm-up", COURSE_FLOOR)  # the first kernel of a run pays for a cold page cache
        # Each floor is the faster of two runs: a floor that came out high would flatter every lesson.
        empty = min(notebook_seconds(folder, f"empty-{k}", EMPTY) for k in range(2))
        floor = min(notebook_seconds(folder, f"floor-{k}", COURSE_FLOOR) for k in range(2))
        print(f"{'notebook':<22}{'seconds':>9}{'× empty':>9}{'× floor':>9}{'content s':>11}")
        print(f"{'empty (import torch)':<22}{empty:>9.1f}{1.0:>9.1f}{empty / floor:>9.1f}{'':>11}")
        print(f"{'course floor':<22}{floor:>9.1f}{floor / empty:>9.1f}{1.0:>9.1f}{0.0:>11.1f}")
        for lesson in chosen:
            for label, params in (("", {}), (" demo", {"demo": True})):
                (_, seconds, status), = run(ROOT, [lesson], params, folder / "runs", log=lambda line: None)
                note = "" if status == "ok" else f"  {status}"
                print(f"{lesson + label:<22}{seconds:>9.1f}{seconds / empty:>9.1f}{seconds / floor:>9.1f}"
                      f"{seconds - floor:>11.1f}{note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
