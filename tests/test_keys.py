"""Keyed checks (grader.checks._keys): the learner's package judges by digests; the answers stay with the instructor."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT
from grader.checks import _keys, lesson01
from grader.notebook import CheckFailed

sys.path.insert(0, str(ROOT / "scripts"))
import build_keys  # noqa: E402

KEYED_LESSONS = sorted(p.name for p in (ROOT / "solutions").iterdir()
                       if p.is_dir() and (ROOT / "solutions" / "judges" / f"lesson{p.name[:2]}.py").exists())


def test_some_lesson_is_keyed():
    assert "01_crossover" in KEYED_LESSONS


@pytest.mark.parametrize("lesson", KEYED_LESSONS)
def test_committed_keys_are_what_the_instructors_judges_make(lesson):
    """Edit a judge, a mutant or a case and forget to rebuild: this fails (python scripts/build_keys.py)."""
    content = build_keys.build(lesson)
    assert content is not None, f"{lesson} has instructor judges but no keyed check"
    assert (_keys.KEYS / f"{lesson}.json").read_text() == build_keys.text(content)


@pytest.mark.parametrize("lesson", KEYED_LESSONS)
def test_a_keys_file_holds_digests_and_sealed_messages_only(lesson):
    """A copy test read every mistake's message off the keys file before answering, and the messages together were
    the lesson's rules: each is sealed with its mistake's answer, so the file reads as noise."""
    data = json.loads((_keys.KEYS / f"{lesson}.json").read_text())
    for what, entry in data["checks"].items():
        # one key per whole answer: a key per case was reversed by trying every small number (copy test r2_0102)
        assert set(entry) == {"sig", "pass", "mistakes"}, what
        assert all(len(k) == 32 and int(k, 16) >= 0 for k in [*entry["pass"], *entry["mistakes"]]), what
        for sealed in entry["mistakes"].values():
            opened = _keys.unseal(lesson, what, "a summary that is not the mistake's", sealed, entry["sig"])
            words = sum(w.isascii() and w.isalpha() and w.islower() and len(w) > 2 for w in opened.split())
            assert words <= 1, f"{what}: a message opened without its mistake's answer reads {opened!r}"


def test_a_sealed_message_opens_with_its_own_answer_only():
    sealed = _keys.seal("01_crossover", "x", [1.0, 2], "you counted bits, not bytes")
    assert _keys.unseal("01_crossover", "x", [1.0, 2], sealed) == "you counted bits, not bytes"
    assert "bytes" not in _keys.unseal("01_crossover", "x", [1.0, 3], sealed)
    assert "bytes" not in _keys.unseal("01_crossover", "y", [1.0, 2], sealed)


def test_the_instructors_judges_are_neither_packaged_nor_in_the_package():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'packages = ["grader"]' in pyproject  # solutions/ is not in the wheel
    for lesson in KEYED_LESSONS:
        judges = build_keys.instructor_judges(lesson)
        package = (ROOT / "grader" / "checks" / f"lesson{lesson[:2]}.py").read_text()
        for what, judge in judges.JUDGES.items():
            assert judge.__code__.co_filename.startswith(str(ROOT / "solutions")), what
            assert f"def {judge.__name__}(" not in package, f"{what}: the package still defines the instructor's judge"


def test_a_right_answer_computed_another_way_passes_and_a_near_miss_does_not(capsys):
    lesson01.check_intensity(lambda flops, nbytes: flops * (1.0 / nbytes) * (1 + 1e-12))
    assert "✓" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="nor a mistake the course knows"):
        lesson01.check_intensity(lambda flops, nbytes: flops / nbytes * 1.001)


def test_a_known_mistake_gets_its_message_from_the_keys_and_an_unknown_one_the_principle():
    with pytest.raises(CheckFailed, match="nothing that goes back out"):
        lesson01.check_matmul_bytes(lambda n, dtype, out_dtype=None: 2 * n * n * dtype.itemsize)
    with pytest.raises(CheckFailed, match="dtype was ignored"):  # unknown to the keys; the hint names it
        lesson01.check_matmul_bytes(lambda n, dtype, out_dtype=None: 7 * n * n)
    with pytest.raises(CheckFailed, match="what must\\s+cross memory at the very least"):
        lesson01.check_matmul_bytes(lambda n, dtype, out_dtype=None: 7 * n * n * dtype.itemsize + n * n * (out_dtype or dtype).itemsize)


def test_missing_keys_say_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(_keys, "KEYS", tmp_path)
    _keys._table.cache_clear()
    try:
        with pytest.raises(CheckFailed, match="build_keys.py"):
            lesson01.check_intensity(lambda flops, nbytes: flops / nbytes)
    finally:
        _keys._table.cache_clear()


def test_a_float_on_a_rounding_edge_is_refused_by_the_builder():
    assert build_keys._near_edge(1.000005, 6) and not build_keys._near_edge(1.23456789, 6)
    assert build_keys._near_edge([1, {"x": 2.500005}], 6)


def test_canonical_keeps_types_apart():
    assert _keys.digest("l", "w", 8) != _keys.digest("l", "w", 8.0)
    assert _keys.digest("l", "w", True) != _keys.digest("l", "w", 1)
    assert _keys.digest("l", "w", 2.0000001) == _keys.digest("l", "w", 2.0)
    assert _keys.digest("l", "w", 2.0) != _keys.digest("l2", "w", 2.0)


def test_an_answer_read_another_accepted_way_passes_once_judged_publicly(capsys):
    """lesson 04's state_bytes accepts AdamW's step counters left out (accept=): one public judgement, then ✓."""
    import torch
    from grader.checks import lesson04
    from notebook_cells import namespace

    reference = namespace("04_memory")["state_bytes"]

    def without_counters(model, optimizer):
        got = dict(reference(model, optimizer))
        got["optimizer"] -= sum(s["step"].numel() * s["step"].element_size() for s in optimizer.state.values()
                                if torch.is_tensor(s.get("step")))
        return got

    lesson04.check_state_bytes(reference)
    lesson04.check_state_bytes(without_counters)
    assert capsys.readouterr().out.count("✓") == 2
