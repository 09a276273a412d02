"""Run: execute lessons with papermill, any device, any parameters."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

from grader.pipeline.tools import lessons


def run(
    root: Path,
    only: Iterable[str] | None = None,
    parameters: dict | None = None,
    out_dir: Path | None = None,
    student: bool = False,
    log=print,
) -> list[tuple[str, float, str]]:
    """Execute lessons with papermill; returns (lesson, seconds, status) for each, printing a line per notebook."""
    import papermill

    out_dir = (out_dir or root / "runs").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    source = root / ("notebooks" if student else "solutions")
    chosen = list(only or lessons(root))
    results = []
    for i, lesson in enumerate(chosen, 1):
        notebook = source / lesson / f"{lesson}.ipynb"
        output = out_dir / f"{lesson}.ipynb"
        start = time.perf_counter()
        status = "ok"
        try:
            papermill.execute_notebook(
                str(notebook),
                str(output),
                parameters=parameters or {},
                cwd=str(notebook.parent),
                kernel_name="python3",
                progress_bar=False,
                log_output=False,
            )
        except papermill.PapermillExecutionError as exc:
            status = f"failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue}"
        seconds = time.perf_counter() - start
        log(f"[{i}/{len(chosen)}] {lesson}: {status} ({seconds:.1f} s) -> {output}")
        results.append((lesson, seconds, status))
    return results
