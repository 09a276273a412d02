"""Make grader/checks/keys/lessonNN.json: the digests a keyed check judges by (grader.checks._keys).

For every check cell of a lesson whose visible check is keyed, this runs its observing half on the
reference solution (solutions/NN_topic) and on each of its mutants (tests/mutants/lessonNN.py), judges
each observation with the instructor's judge (solutions/judges/lessonNN.py, JUDGES[what], which may
hold the answer: it is never packaged nor released), and keeps only digests: the reference's as the
pass key, each mutant's with the message the instructor's judge gave it.

It refuses a reference the instructor's judge fails, a mutant it passes, a mutant whose summary is
the reference's (the visible cases cannot tell them apart), and a float that sits so near a rounding
edge of `sig` figures that a right answer computed in another order could round the other way.

It also seals each function of solutions/sealed/lessonNN.py (a prediction's model and its messages) into
grader/checks/keys/NN_topic.sealed.json (grader.checks._sealed).

    python scripts/build_keys.py            # every lesson with keyed checks; writes the files
    python scripts/build_keys.py --check    # exit 1 if a committed file differs from what it would write
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import math
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from grader.checks import _keys, _plain, _sealed  # noqa: E402
from grader.notebook import CheckFailed, NotDone  # noqa: E402


def instructor_judges(lesson: str):
    """solutions/judges/lessonNN.py as a module (None when the lesson has none)."""
    path = ROOT / "solutions" / "judges" / f"lesson{lesson[:2]}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"_instructor_judges_{lesson[:2]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _near_edge(value, sig: int) -> bool:
    """Whether a float of `value` lies within 1e-9 (relative) of a rounding edge at `sig` significant figures."""
    if isinstance(value, float) and math.isfinite(value) and value != 0:
        for nudge in (1 + 1e-9, 1 - 1e-9):
            if f"{value:.{sig}g}" != f"{value * nudge:.{sig}g}":
                return True
        return False
    if isinstance(value, (list, tuple)):
        return any(_near_edge(v, sig) for v in value)
    if isinstance(value, dict):
        return any(_near_edge(v, sig) for v in value.values())
    return False


def _observe(check, step, ns: dict):
    """`check`'s observation of the objects the check cell's call `step` passes, after the plain-data round trip."""
    from grader import shortcuts

    learner = [ns[a] for a in step.names]
    inputs = {k: v for k, v in step.kwargs.items() if k in check.inputs}
    shortcuts._fresh_kernel()  # the course's own cells run to make `ns` are not the learner's earlier cells
    with contextlib.redirect_stdout(io.StringIO()):
        return _plain.roundtrip(check.observe(*learner, **inputs))


_GUARDED = object()


def _unguarded(target, keyed, observation):
    """The keyed check's own observation inside a guard's ({"observed", "shortcuts"} per guard), or _GUARDED when a
    guard caught a shortcut (its message, not a key, is what the learner reads)."""
    while target is not keyed:
        if not isinstance(observation, dict) or observation.get("shortcuts"):
            return _GUARDED
        observation, target = observation.get("observed"), getattr(target, "inner", None)
    return observation


def _entry(lesson: str, grade_id: str, step, keyed, judges, mutants: list, alone: bool) -> dict:
    """The keys of one keyed check: its judge run on the reference and on each of its cell's mutants. A mutant the
    judge passes is refused, unless another step of the same cell (`alone` False) is the one it gets wrong."""
    from notebook_cells import namespace

    if judges is None or keyed.what not in getattr(judges, "JUDGES", {}):
        raise SystemExit(f"{lesson}:{grade_id}: {keyed.what} is keyed but solutions/judges/lesson{lesson[:2]}.py "
                         "has no JUDGES entry for it")
    judge = judges.JUDGES[keyed.what]
    target = step.target()

    def verdict(observation):
        try:
            judge(keyed.view(observation))
        except CheckFailed as exc:
            return str(exc)
        return None

    reference = _observe(keyed, step, namespace(lesson))  # the keyed check's own: a guard is not part of the key
    said = verdict(reference)
    if said is not None:
        raise SystemExit(f"{lesson}:{grade_id}: the instructor's judge fails the reference solution: {said}")
    if _near_edge(keyed.summary(reference), keyed.sig):
        raise SystemExit(f"{lesson}:{grade_id}: a reference value lies on a rounding edge at {keyed.sig} "
                         "significant figures; change the check's cases or its sig")
    entry = {"sig": keyed.sig, "pass": [keyed.key(reference)], "mistakes": {}}
    for name, mutant, _pattern in mutants:
        ns = namespace(lesson)
        exec(compile(mutant, f"<mutant {name}>", "exec"), ns)  # noqa: S102  the course's own test data
        try:
            observation = _observe(target, step, ns)  # through any guard: one that names the mutant is its judge
        except (NotDone, CheckFailed, NotImplementedError):
            continue  # stopped before the key: the public checks or the stub say so
        observation = _unguarded(target, keyed, observation)
        if observation is _GUARDED:
            continue  # a shortcut guard names it (it called the course's own instrument); no key is looked up
        if keyed.public is not None:
            try:
                keyed.public(keyed.view(observation))
            except CheckFailed:
                continue  # the public judge names it; its key would never be looked up
        message = verdict(observation)
        if message is None and not alone:
            continue  # a mistake in another step of this cell (its prediction), judged there
        if message is None:
            raise SystemExit(f"{lesson}:{grade_id}: the instructor's judge passes the mutant {name!r}")
        key = keyed.key(observation)
        if key in entry["pass"]:
            raise SystemExit(f"{lesson}:{grade_id}: the mutant {name!r} gives the reference's answers on the "
                             "visible cases: add a case that tells them apart")
        entry["mistakes"].setdefault(key, _keys.seal(lesson, keyed.what, keyed.summary(observation), message, keyed.sig))
    return entry


def build(lesson: str) -> dict | None:
    """The keys file's content for `lesson`, or None when no visible check of it is keyed."""
    from grader.pipeline.judging import plan_cell
    from notebook_cells import check_cells

    judges = instructor_judges(lesson)
    try:
        mutants = importlib.import_module(f"mutants.lesson{lesson[:2]}").MUTANTS
    except ImportError:
        mutants = {}
    checks: dict = {}
    for grade_id, source in check_cells(lesson).items():
        steps = plan_cell(source)
        for step in steps:  # a cell may check a prediction first, then the function (lesson 03's decode_check)
            keyed = _keys.keyed_inside(step.target())
            if keyed is not None:
                checks[keyed.what] = _entry(lesson, grade_id, step, keyed, judges, mutants.get(grade_id, []),
                                            alone=len(steps) == 1)
    if not checks:
        return None
    return {"about": "digests, and each mistake's message sealed with that mistake's answer (grader/checks/_keys.py); "
                     "made by scripts/build_keys.py, do not edit",
            "salt": _keys.SALT, "checks": dict(sorted(checks.items()))}


def build_sealed(lesson: str) -> dict | None:
    """grader/checks/keys/NN_topic.sealed.json's content: each function of solutions/sealed/lessonNN.py, sealed
    (grader.checks._sealed); None when the lesson has no such file."""
    source = ROOT / "solutions" / "sealed" / f"lesson{lesson[:2]}.py"
    if not source.exists():
        return None
    found = _sealed.functions(source.read_text())
    return {"about": "grader/checks/_sealed.py: course functions a learner's package runs but does not show",
            "salt": _keys.SALT, "functions": {name: _sealed.seal(lesson, name, text) for name, text in sorted(found.items())}}


def text(content: dict) -> str:
    return json.dumps(content, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    from conftest import lesson_ids
    from grader import predictions

    # the mutants' predictions are recorded somewhere of their own, never as predictions.json where this is run
    os.environ[predictions.ENV_PATH] = str(Path(tempfile.mkdtemp(prefix="build-keys-")) / predictions.FILE_NAME)
    os.environ[predictions.ENV_LEDGER] = ""  # nor in the ledger of whoever runs it: each mutant's guesses its own

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files; write nothing")
    parser.add_argument("lessons", nargs="*", help="lesson ids (default: every lesson)")
    args = parser.parse_args(argv)
    stale = []
    for lesson in args.lessons or lesson_ids():
        sealed = build_sealed(lesson)
        sealed_path = _sealed.path(lesson)
        if sealed is not None:
            if args.check:
                if not sealed_path.exists() or sealed_path.read_text() != text(sealed):
                    stale.append(f"{lesson} (sealed)")
            else:
                sealed_path.write_text(text(sealed))
                print(f"{sealed_path.relative_to(ROOT)}: {len(sealed['functions'])} sealed functions")
        elif sealed_path.exists():
            stale.append(f"{lesson} (sealed, no solutions/sealed file)")
        content = build(lesson)
        path = _keys.KEYS / f"{lesson}.json"
        if content is None:
            continue
        if args.check:
            if not path.exists() or path.read_text() != text(content):
                stale.append(lesson)
            continue
        path.parent.mkdir(exist_ok=True)
        path.write_text(text(content))
        print(f"{path.relative_to(ROOT)}: {len(content['checks'])} keyed checks")
    if stale:
        print("stale keys (run python scripts/build_keys.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
