"""What every lesson's text and show cells must respect, read from the solutions' sources (no kernel)."""

from __future__ import annotations

import ast
import re

import pytest

from conftest import ROOT, lesson_ids, read_notebook
from notebook_cells import solution_cells

LESSONS = lesson_ids()
# A code block in the text wider than this scrolls sideways in a 1024-px window with the file browser
# open: the end of the line (the nvidia-smi fields, a comment saying why) is out of sight.
CODE_BLOCK_COLUMNS = 72


def _solution(lesson: str):
    return read_notebook(ROOT / "solutions" / lesson / f"{lesson}.ipynb")


@pytest.mark.parametrize("lesson", LESSONS)
def test_code_in_the_text_fits_a_1024_px_window(lesson):
    long = []
    for i, cell in enumerate(_solution(lesson).cells):
        if cell.cell_type == "markdown":
            for block in re.findall(r"```[^\n]*\n(.*?)```", cell.source, re.S):
                long += [(i, len(line), line) for line in block.splitlines() if len(line) > CODE_BLOCK_COLUMNS]
    assert not long, f"{lesson}: code lines in the text over {CODE_BLOCK_COLUMNS} characters: {long}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_show_cell_calls_the_learners_function_before_it_starts_ranks(lesson):
    """An unfinished exercise skips the cell at once, not after seconds of DDP in forked ranks."""
    exercises = [name for source in solution_cells(lesson).values() for name in re.findall(r"^def (\w+)\(", source, re.M)]
    for i, cell in enumerate(_solution(lesson).cells):
        source = cell.source
        if cell.cell_type != "code" or "skip_if_not_done()" not in source:
            continue
        starts = [source.index(call) for call in ("distributed.launch(", "distributed.bucket_trace(") if call in source]
        if not starts:
            continue
        body = source[source.index("skip_if_not_done()"):]
        used = [m.start() for name in exercises for m in re.finditer(rf"\b{name}\(", body)]
        first_start = min(starts) - source.index("skip_if_not_done()")
        assert used and min(used) < first_start, (
            f"{lesson} cell {i}: starts ranks before it calls any of the learner's functions {exercises}: "
            "a blank exercise would run DDP for seconds before the cell says it skipped")


# What a formula or a recipe looks like in a docstring (a slash alone is a unit there: FLOP/byte, bytes/s).
_FORMULA = re.compile(
    r"[\w)]\s*(\*\*|\*|//|·|\^)\s*[\w(]"  # a product or a power
    r"|\)\s*/|/\s*\("  # a bracketed expression divided or dividing
    r"|\d\(|\(\s*\w+\s*[-−+]\s*\d+\s*\)|\(\s*\d+\s*[-−+]\s*\w+\s*\)"  # 2(n-1), (p - 1), (1 - beta)
    r"|\b\w+\s*=\s*\w"  # v_t = ...
    r"|\b\d+ per\b"  # "16 per parameter": the figure the learner should derive
    r"|\bthen\b|\bin order\b"  # a recipe's steps
    r"|\b(sorted|reversed|ceil|floor|sum|max|min)\(|\bscaler\.\w+\(|\bautocast\("
)


@pytest.mark.parametrize("lesson", LESSONS)
def test_stub_docstrings_state_the_contract_not_the_answer(lesson):
    """Every function and class of the release's stubs has a docstring, and none gives a formula or recipe."""
    for source in solution_cells(lesson, student=True).values():
        for node in ast.parse(source).body:  # the functions and classes the learner writes
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node) or ""
                assert doc, f"{lesson}: {node.name} has no docstring stating its contract"
                assert not _FORMULA.search(doc), f"{lesson}: {node.name}'s docstring gives a formula or recipe: {doc!r}"


def test_exercises_are_numbered_once_each_in_order():
    """Copy test r22: lesson 02 had two exercise 3s (the quiz and sync_points), so its "five things" read as four."""
    import json

    for path in sorted((ROOT / "solutions").glob("0*/*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        seq = [(int(m.group(1)), m.group(2)) for c in cells
               for m in re.finditer(r"\*\*Exercise (\d+)([a-z]?)\b", "".join(c["source"]))]
        assert seq == sorted(set(seq)), (path.name, seq)
        assert sorted({n for n, _ in seq}) == list(range(1, max(n for n, _ in seq) + 1)), (path.name, seq)
