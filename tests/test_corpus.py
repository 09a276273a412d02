"""The adversarial corpus (tests/corpus/manifest.json) graded as a class: every case gets what it deserves.

Graded once in bwrap when it is installed (every case) and once with the
fallback forced (GRADER_SANDBOX=none: the cases marked "fallback", since
the fallback does not hide files). Small time limits keep it short.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest

from build_corpus import MANIFEST, ROOT, build
from grader.classroom import Settings, grade_class
from grader.course import read_csv
from grader.sandbox import bwrap_works

CASES = json.loads(MANIFEST.read_text(encoding="utf-8"))
FAST = dict(workers=2, cell_timeout=4.0, notebook_timeout=60.0, memory_gib=3.0)


def _grade(tmp_path_factory, sandbox: str, names: list[str]):
    subs = tmp_path_factory.mktemp(f"corpus-{sandbox}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build(subs)
    for case in [p for p in subs.iterdir() if p.name not in names]:
        import shutil

        shutil.rmtree(case)
    out = tmp_path_factory.mktemp(f"grades-{sandbox}")
    csv_path = grade_class(ROOT, subs, out, Settings(sandbox=sandbox, **FAST), log=lambda line: None)
    return out, read_csv(csv_path)


@pytest.fixture(scope="module")
def bwrap_graded(tmp_path_factory):
    if not bwrap_works():
        pytest.skip("bwrap is not installed here (the fallback test still runs)")
    return _grade(tmp_path_factory, "bwrap", list(CASES))


@pytest.fixture(scope="module")
def fallback_graded(tmp_path_factory):
    return _grade(tmp_path_factory, "none", [name for name, case in CASES.items() if case.get("fallback")])


def _expect(case: dict, rows, results_dir, name: str, fallback: bool) -> None:
    want = case["fallback"] if fallback and isinstance(case.get("fallback"), dict) else case
    mine = {r.grade_id: r for r in rows if r.student == name}
    assert mine, f"{name}: no rows"
    total = sum(r.score for r in mine.values())
    assert total == want["total"], (name, total, [(r.grade_id, r.status, r.message) for r in mine.values()])
    row = mine[want["check"]]
    assert row.status == want["status"], (name, row)
    assert re.search(want["message"], row.message), (name, row.message)
    if "note" in case:
        notes = json.loads((results_dir / "results" / name / "01_crossover.json").read_text())["notes"]
        assert any(case["note"] in n for n in notes), notes


def test_corpus_has_enough_cases():
    assert len(CASES) >= 25


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_in_bwrap(bwrap_graded, name):
    out, rows = bwrap_graded
    _expect(CASES[name], rows, out, name, fallback=False)


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.get("fallback")))
def test_case_with_fallback(fallback_graded, name):
    out, rows = fallback_graded
    _expect(CASES[name], rows, out, name, fallback=True)


def test_nothing_escaped_into_the_checkout(bwrap_graded):
    assert not (ROOT / "tests" / "corpus" / ".escape_probe").exists()
    assert not (ROOT / "grader" / ".escape_probe").exists()


def test_summary_names_every_odd_submission(bwrap_graded):
    out, _ = bwrap_graded
    summary = (out / "summary.txt").read_text()
    for name in ("infinite_loop_in_check", "os_exit_in_check", "malformed_json", "missing_notebook", "monkeypatched_check"):
        assert f"- {name}/01_crossover" in summary, summary
    assert "- good/01_crossover" not in summary


def test_feedback_hides_hidden_tests(bwrap_graded):
    out, _ = bwrap_graded
    pages = list((out / "course" / "feedback").rglob("*.html"))
    assert len(pages) >= 25
    for page in pages:
        assert "BEGIN HIDDEN TESTS" not in page.read_text(encoding="utf-8")
