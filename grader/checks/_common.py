"""The shape every check has, and small helpers shared by every lesson's checks.

A check is two halves (`Check`):

- `observe(*learner_objects, **inputs)` runs the learner's code on the check's
  own cases and returns plain data (grader.checks._plain): numbers, strings,
  lists, dicts, dtypes, small tensors. It never sees an expected answer.
- `judge(observation, **kwargs)` reads that data (and every keyword the
  check cell passed) and raises `CheckFailed` with a message naming the
  mistake. It never calls the learner's code.

In a learner's notebook both halves run in the kernel: `check(fn)` observes,
sends the observation through the same plain-data round trip, judges, and
prints one ✓ line. When a class is graded, only `observe` runs in the sandbox
beside the submission; the grader's own process judges, and a hidden test's
expected values (the keyword arguments a check does not list as `inputs`)
never leave it (grader.pipeline.judging).

Most checks call a learner's function on fixed arguments. `recorded` builds
such a check from a list of argument tuples and a judge written as if it
could call the function: it receives a `Replay` that answers each recorded
call with what the learner's function returned (or raised) in observe.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
from typing import Any, Callable, Iterable

from grader.checks import _plain
from grader.notebook import CheckFailed, NotDone


def fail(message: str) -> None:
    """Raise the CheckFailed a learner sees; the message names their mistake (cut to MESSAGE_CHARS, see short)."""
    raise CheckFailed(short(message))


class Raised(Exception):
    """What a learner's function raised during observe, replayed for the judge."""

    def __init__(self, label: str, ename: str, message: str):
        super().__init__(f"{label} raised {ename}: {message}")


def call(fn: Callable, *args: Any, label: str | None = None, **kwargs: Any) -> Any:
    """Call the learner's `fn`; an unfinished stub becomes NotDone, a crash a message that says which call crashed."""
    shown = label or f"{getattr(fn, '__name__', 'your function')}{_args_text(args)}"
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        if isinstance(exc, NotDone):
            raise
        raise NotDone(getattr(fn, "__name__", "the function")) from None
    except (CheckFailed, Raised) as exc:
        raise CheckFailed(str(exc)) from None
    except Exception as exc:  # the learner's code crashed: say where, keep the cause
        raise CheckFailed(f"{shown} raised {type(exc).__name__}: {_text(exc)}") from None


def _args_text(args: tuple) -> str:
    text = repr(args) if len(args) != 1 else f"({args[0]!r})"
    return text if len(text) < 200 else text[:200] + "…)"


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except Exception:  # noqa: BLE001  a learner's exception whose __str__ raises
        return f"<{type(exc).__name__}>"


def require_callable(fn: Any, name: str) -> None:
    """Fail clearly when the learner passed something that is not a function."""
    if not callable(fn):
        fail(f"{name} should be a function, but it is {type(fn).__name__}. Did you overwrite it with a value?")


def is_number(value: Any) -> bool:
    """True for real numbers (ints, floats, numpy scalars), False for bools, tensors and the rest."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    """Relative closeness that treats two zeros as equal."""
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0) or (a == 0 and b == 0)


def passed(what: str) -> None:
    """The one line a learner sees when every check of an exercise passed."""
    print(f"✓ {what}: all checks passed")


class Check:
    """A check in two halves: observe (runs the learner's code, returns plain data) and judge (names the mistake)."""

    def __init__(self, what: str, observe: Callable, judge: Callable, inputs: Iterable[str] = (), announce: bool = True):
        self.what = what
        self.observe = observe
        self.judge = judge
        self.inputs = frozenset(inputs)  # keyword arguments that go to observe; every other keyword stays with judge
        self.announce = announce

    def observed(self, kwargs: dict) -> dict:
        """observe's keyword arguments: those named in `inputs`. The judge gets them all; the rest never reach observe."""
        return {k: v for k, v in kwargs.items() if k in self.inputs}

    def __call__(self, *learner: Any, **kwargs: Any) -> None:
        observation = _plain.roundtrip(self.observe(*learner, **self.observed(kwargs)))
        self.judge(observation, **kwargs)
        if self.announce:
            passed(self.what)

    def __repr__(self) -> str:
        return f"<check {self.what}>"


# --- record and replay -------------------------------------------------------------------------


def _key(args: tuple) -> str:
    """A recorded call's arguments as a canonical string (the same on both sides of the round trip)."""
    return json.dumps(_plain.encode(tuple(args)), sort_keys=True)


def record(fn: Callable, name: str, cases: Iterable[tuple]) -> dict:
    """Call `fn` on every argument tuple; what each returned or raised, keyed by the arguments."""
    require_callable(fn, name)
    calls = []
    for args in cases:
        key = _key(args)  # before the call: a function that changes its arguments in place is judged on what it was given
        try:
            outcome = {"value": _plain.encode(fn(*copy.deepcopy(args)))}  # a copy: changing it changes no later case
        except NotImplementedError:
            raise NotDone(name) from None
        except Exception as exc:  # noqa: BLE001  the judge says which call raised what
            outcome = {"raised": type(exc).__name__, "message": _text(exc)}
        calls.append([key, outcome])
    return {"name": name, "calls": calls}


class Replay:
    """Stands in for the learner's function in a judge: answers each recorded call as the function did."""

    def __init__(self, observation: dict):
        if not isinstance(observation, dict) or not isinstance(observation.get("calls"), list):
            raise CheckFailed("the check could not read what your code returned (not a recording of calls)")
        self.__name__ = str(observation.get("name", "your function"))
        self.calls = {}
        for entry in observation["calls"]:
            if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], dict):
                self.calls[entry[0]] = entry[1]

    def __call__(self, *args: Any) -> Any:
        outcome = self.calls.get(_key(args))
        if outcome is None:
            raise CheckFailed(f"the check has no recorded answer for {self.__name__}{_args_text(args)}: its calls did not "
                              "reach your function as the check made them (did your code change torch, grader or the check?)")
        if "raised" in outcome:
            raise Raised(f"{self.__name__}{_args_text(args)}", str(outcome.get("raised")), str(outcome.get("message")))
        return _plain.decode(outcome.get("value"))


def recorded(what: str, name: str, cases: Callable[[], Iterable[tuple]] | Iterable[tuple],
             judge: Callable[[Replay], None]) -> Check:
    """A check that calls the learner's function `name` on `cases` and judges the answers through a Replay."""

    def observe(fn):
        return record(fn, name, cases() if callable(cases) else cases)

    return Check(what, observe, lambda observation: judge(Replay(observation)))


# --- hidden tests --------------------------------------------------------------------------------


def same(got: Any, want: Any, rel: float = 1e-9, abs_tol: float = 0.0) -> bool:
    """Grading equality: the same plain type and value (floats within rel/abs), tensors by dtype, shape and values."""
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return type(got) is type(want) and got == want
    if isinstance(want, int) and not isinstance(want, bool):
        return type(got) is int and got == want
    if isinstance(want, float):
        if not is_number(got):
            return False
        if math.isnan(want):
            return math.isnan(float(got))
        return math.isclose(float(got), want, rel_tol=rel, abs_tol=abs_tol)
    if isinstance(want, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(want)
                and all(same(g, w, rel, abs_tol) for g, w in zip(got, want)))
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(same(got[k], want[k], rel, abs_tol) for k in want)
    import torch

    if isinstance(want, torch.dtype):
        return got is want
    if isinstance(want, torch.Tensor):
        return (isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape
                and bool(torch.allclose(got.double(), want.double(), rtol=rel, atol=abs_tol, equal_nan=True)))
    raise TypeError(f"a hidden test's expected value of type {type(want).__name__} cannot be compared")


def _judge_expect(observation: dict, want: Any, why: str, args: tuple = (), rel: float = 1e-9, abs_tol: float = 0.0) -> None:
    replay = Replay(observation)
    try:
        got = replay(*args)
    except Raised as exc:
        fail(f"{exc}; {why}")
    if not same(got, want, rel, abs_tol):
        fail(why)


def _observe_expect(fn: Any, args: tuple = ()) -> dict:
    name = getattr(fn, "__name__", "your function")
    return record(fn, name if isinstance(name, str) else "your function", [tuple(args)])


expect = Check("hidden test", _observe_expect, _judge_expect, inputs=("args",), announce=False)
expect.__doc__ = """Hidden test: `expect(fn, args=(...), want=..., why="...")` passes when fn(*args) is `want` (same type; floats within rel)."""


# --- messages of bounded size ----------------------------------------------------------------------

MESSAGE_CHARS = 2000  # the longest message a check makes; a longer one keeps its start and its end


def short(text: str, cap: int = MESSAGE_CHARS) -> str:
    """`text` cut to at most `cap` characters: its start and its end (where a message says what to do), joined by '...'."""
    text = str(text)
    if len(text) <= cap:
        return text
    head = cap // 3
    tail = cap - head - 5
    return f"{text[:head]} ... {text[-tail:]}"


def quote(value: Any, cap: int = 200) -> str:
    """repr(value) for a message, cut with '...' past `cap` characters: a learner's long answer is never quoted whole."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  a value whose repr raises
        text = f"<{type(value).__name__}>"
    return text if len(text) <= cap else text[:cap - 3] + "..."
