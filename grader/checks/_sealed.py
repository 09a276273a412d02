"""Sealed functions: course code a learner's package runs but does not show.

A prediction is banded against a model fed with what the run measured, in the learner's own kernel (a learner alone
on a laptop has no grader to do it), and its reveal shows the model's answer once the first guess is recorded. So the
model runs in the learner's process. Kept as plain source it was the answer, readable before the guess: copy tests
read `_batch_model` and `_tps_targets` (lesson 09) and wrote their predictions from them.

So a model, and the messages that name its mistakes, is kept here as a stub: its name, its signature and a docstring
that says what it is for. The body is the instructor's (solutions/sealed/lessonNN.py, never packaged nor released);
scripts/build_keys.py seals each function of that file into grader/checks/keys/NN_topic.sealed.json, and the stub opens
it on its first call. `@sealed(LESSON, "PREDICTION")` names the prediction it is the model of: opening one directly
from a cell (`_sealed.open`, `_sealed.source`) before that prediction's first guess is asking for the answer, recorded
as the deliberate reveal, as calling the model is (grader.checks._common.Prediction).

What this is not: secret. The key is derived from names the package holds (it has to open the function in the
learner's process), so a learner who reproduces the opening by hand reads the model: that is reading the course's
internals, COURSE.md's documented limit, and it takes a deliberate effort that copying a function does not. The first
guess's record is an honour system for the same reason.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable

KEYS = Path(__file__).with_name("keys")


def _what(name: str) -> str:
    return f"sealed function {name}"


def seal(lesson: str, name: str, source: str) -> str:
    """`source` (one function's definition) sealed for `lesson`'s `name`: a keyed message (grader.checks._keys.seal)
    whose summary is the function's own name, which the package holds."""
    from grader.checks import _keys

    return _keys.seal(lesson, _what(name), name, source)


def _unseal(lesson: str, name: str, sealed_text: str) -> str:
    from grader.checks import _keys

    _asked_before_guess(lesson, _STUBS.get((lesson, name), (None, None))[1], sys._getframe(1))
    return _keys.unseal(lesson, _what(name), name, sealed_text)


def path(lesson: str) -> Path:
    return KEYS / f"{lesson}.sealed.json"


@functools.lru_cache(maxsize=None)
def _file(lesson: str) -> dict:
    try:
        return json.loads(path(lesson).read_text())
    except (OSError, ValueError):
        return {}


def functions(source: str) -> dict[str, str]:
    """The top-level functions of an instructor's file, each as its own source text (what build_keys seals)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            if node.decorator_list:
                raise ValueError(f"{node.name}: a sealed function carries no decorator (its stub in the package does)")
            out[node.name] = "".join(lines[node.lineno - 1:node.end_lineno])
    return out


_STUBS: dict[tuple[str, str], tuple[Any, str | None]] = {}  # (lesson, name) -> (module, prediction)
_OPENED: dict[tuple[str, str], Callable] = {}


def stubs() -> dict[tuple[str, str], tuple[Any, str | None]]:
    """Every sealed stub of the imported course modules: (lesson, name) -> (module, prediction)."""
    return dict(_STUBS)


def _asked_before_guess(lesson: str, prediction: str | None, caller: Any) -> None:
    """Opened from `caller`, a frame: outside the package and before `prediction`'s first guess, that is the
    deliberate reveal."""
    from grader import predictions, shortcuts

    if prediction is None or shortcuts.module_code(caller, (shortcuts.PACKAGE,)) or predictions.grading():
        return
    found = predictions.entry(lesson, prediction)
    if found and (found.get("first") or found.get("revealed")):
        return
    predictions.mark(lesson, prediction, "revealed")
    print(f"{prediction}: a cell opened the sealed model this prediction is scored against before your first guess "
          f"was recorded: recorded as a reveal: {predictions.REVEAL_COST}.")


def _function(lesson: str, name: str) -> Callable:
    """The opened function; called from a cell before its prediction's first guess, a reveal."""
    _asked_before_guess(lesson, _STUBS.get((lesson, name), (None, None))[1], sys._getframe(1))
    return _opened(lesson, name)


def _opened(lesson: str, name: str) -> Callable:
    """The opened function, cached. The package's own way in: called from a cell before its prediction's first guess,
    a reveal (copy test r31 called it from a cell, unrecorded)."""
    _asked_before_guess(lesson, _STUBS.get((lesson, name), (None, None))[1], sys._getframe(1))
    key = (lesson, name)
    if key not in _OPENED:
        module, _ = _STUBS[key]
        sealed_text = _file(lesson).get("functions", {}).get(name)
        if sealed_text is None:
            raise RuntimeError(f"{module.__name__}.{name} is sealed and {path(lesson).name} has no entry for it: "
                               "run python scripts/build_keys.py")
        local: dict = {}
        # compiled as the module's own code (its file, its globals): the course's guards tell course code by its file
        exec(compile(_unseal(lesson, name, sealed_text), module.__file__, "exec"), module.__dict__, local)
        _OPENED[key] = local[name]
    return _OPENED[key]


def open(lesson: str, name: str) -> Callable:  # noqa: A001  (the module's word for it)
    """The sealed function `name` of `lesson`, opened; from a cell before its prediction's first guess, a reveal."""
    _asked_before_guess(lesson, _STUBS.get((lesson, name), (None, None))[1], sys._getframe(1))
    return _function(lesson, name)


def source(lesson: str, name: str) -> str:
    """The sealed function's source; from a cell before its prediction's first guess, a reveal."""
    _asked_before_guess(lesson, _STUBS.get((lesson, name), (None, None))[1], sys._getframe(1))
    return _unseal(lesson, name, _file(lesson)["functions"][name])


def sealed(lesson: str, prediction: str | None = None) -> Callable:
    """Decorator for a stub (a def whose body is its docstring): calls run the sealed function of the same name."""

    def wrap(stub: Callable) -> Callable:
        module = sys.modules[stub.__module__]
        name = stub.__name__
        _STUBS[(lesson, name)] = (module, prediction)

        def opened(*args: Any, **kwargs: Any) -> Any:
            # the package's own call, or a cell's through the course_only wrapper's inner function (shortcuts._INNER;
            # copy test r31): from a cell before the prediction's first guess, a reveal
            _asked_before_guess(lesson, prediction, sys._getframe(1))
            return _opened(lesson, name)(*args, **kwargs)

        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(opened, attr, getattr(stub, attr, None))
        opened.sealed = (lesson, name)
        return opened

    return wrap
