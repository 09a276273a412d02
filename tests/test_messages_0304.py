"""Lessons 03 and 04 (issue 29): no failure message hands over a hidden test's expected value.

Every mutant of the two lessons is run through its check cell (visible check and hidden tests, in the kernel), and
its message is searched for each hidden test's `want` in the forms a learner would copy: the integer (with or without
thousands separators), the float at 2 to 6 significant figures, and a power of two as 2^k. Values below 20 are left
out (the digits of ordinary sentences: 16 bits, 8 exponent bits), and so is a value the message quotes as the
learner's own ("returned 2^24", "stayed at 2048"): a wrong answer may equal another case's right one. Predictions' feedback is searched too.
"""

from __future__ import annotations

import ast
import importlib
import math
import re

import pytest
import torch

from notebook_cells import check_cells, namespace, run_check

MODULES = ("lesson03", "lesson04")


def _numbers(value) -> list[float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, torch.Tensor):
        return [float(v) for v in value.flatten().tolist()] if value.dtype != torch.bool else []
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _numbers(v)]
    return []


def _wanted(lesson: str, grade_id: str) -> set[float]:
    """Every number a hidden test of this check cell expects."""
    found = set()
    for source in [check_cells(lesson)[grade_id]]:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.keyword) and node.arg == "want":
                value = eval(compile(ast.Expression(node.value), "<want>", "eval"), {"torch": torch, "math": math})
                found.update(n for n in _numbers(value) if math.isfinite(n) and abs(n) >= 20)
    return found


def _forms(value: float) -> list[str]:
    forms = {f"{value:.{d}g}" for d in range(2, 7)}
    if value == int(value):
        forms |= {str(int(value)), f"{int(value):,}"}
    k = math.log2(abs(value))
    if k == int(k):
        forms |= {f"2^{int(k)}", f"2**{int(k)}", "2" + str(int(k)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))}
    return sorted(forms)


def _cases():
    for module in MODULES:
        mod = importlib.import_module(f"mutants.{module}")
        for grade_id, mutants in mod.MUTANTS.items():
            for name, source, _ in mutants:
                yield pytest.param(mod.LESSON, grade_id, source, id=f"{mod.LESSON}:{grade_id}:{name}")


_THEIRS = r"(?:returned|is|gave|stayed at|grew to|reported) "


def _leaks(message: str, lesson: str, grade_id: str) -> list[str]:
    found = []
    for form in (f for v in _wanted(lesson, grade_id) for f in _forms(v)):
        for hit in re.finditer(rf"(?<![\w.^*]){re.escape(form)}(?!\.?\d|\w)", message):
            if not re.search(_THEIRS + r"[\w( =.^*]{0,12}$", message[:hit.start()]):
                found.append(form)
    return found


@pytest.mark.parametrize("lesson,grade_id,source", list(_cases()))
def test_no_message_contains_a_hidden_expected_value(lesson, grade_id, source, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_PREDICTIONS", str(tmp_path / "predictions.json"))
    ns = namespace(lesson)
    exec(compile(source, "<mutant>", "exec"), ns)
    with pytest.raises(AssertionError) as caught:
        run_check(lesson, grade_id, ns)
    leaks = _leaks(str(caught.value), lesson, grade_id)
    assert not leaks, (leaks, str(caught.value))


def test_the_search_finds_a_value_in_each_form():
    """The test can fail: a message that quotes a hidden answer is caught (here 2^24, 625 and 266,240)."""
    assert _leaks("the largest scale here: 2^24", "03_float_formats", "choose_loss_scale_check")
    assert _leaks("use 2²⁴", "03_float_formats", "choose_loss_scale_check")
    assert _leaks("the largest batch that fits: 625.", "04_memory", "max_batch_check")
    assert _leaks("it saves 266,240 bytes", "04_memory", "predict_saved_bytes_check")
    assert not _leaks("your max_batch returned 625", "04_memory", "max_batch_check")
