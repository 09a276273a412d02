"""The course's own code called from a learner's: one module that notices it, for every lesson's checks.

Some of the course's functions must compute what an exercise asks for (a
timer the lesson uses elsewhere, the model a check compares with, an answer
key). A check notices a learner's code that calls one and fails with one
message (`message`) naming it. It is a deterrent, as COURSE.md says, not a
wall: copying the function's source defeats it, and costs about as much as
the exercise.

Two ways to ask, one registry of names:

- `guard(check, name, {function or class: its name})`: the check, failing
  first when the learner's code it runs calls one of them (directly or through
  other code; every method of a class counts). Most checks use this.
- `course_only(name)` marks a course function whose calls from outside the
  `grader` package are counted since the kernel started (`used`, `reset`):
  for an answer a learner could compute in a cell of its own before the check
  runs (a quiz's answer key), where no learner function is there to watch.
  `guard` sees a marked function too (by the function it wraps).
- A prediction (grader.checks._common.Prediction) marks the model it is
  scored against this way (`watch=`, with its own band, feedback and reveal):
  one of them called from a cell before the first guess is recorded makes
  that guess count as asked-for (a reveal), as COURSE.md's protocol says of
  an answer asked for on purpose.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_USED: dict[str, int] = {}
_ON_CALL: dict[str, list[Callable[[str], None]]] = {}  # label -> what to do when code outside the package calls it
_INNER: dict[Callable, Callable] = {}  # a course_only wrapper -> the function it counts calls of


def course_only(name: str | None = None) -> Callable:
    """Decorator: count calls of the function from outside the grader package under `name` (default: its
    module and name, e.g. grader.checks.lesson07._ring).

    The wrapper carries no `__wrapped__` (functools.wraps would add one, and calling that skips the count)."""

    def wrap(fn: Callable) -> Callable:
        label = name or f"{fn.__module__}.{fn.__qualname__}"

        def counted(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename  # "<string>", a cell's file: outside, whatever the cwd
            if not (os.path.isabs(caller) and caller.startswith(_PACKAGE + os.sep)):
                _USED[label] = _USED.get(label, 0) + 1
                for then in _ON_CALL.get(label, ()):
                    then(label)
            return fn(*args, **kwargs)

        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(counted, attr, getattr(fn, attr, None))
        counted.course_only = label
        _INNER[counted] = fn
        return counted

    return wrap


def on_call(label: str, then: Callable[[str], None]) -> None:
    """Run `then(label)` whenever code outside the package calls the course_only function `label` (a prediction records
    a reveal this way, in its record on disk, which no count reset undoes)."""
    _ON_CALL.setdefault(label, []).append(then)


_PASSED: list[list] = []  # each guard's record of its check having passed in this kernel (guard(earlier=...))


def reset(*names: str) -> None:
    """Forget the calls counted under `names` (all names when none is given); with no names, also forget which
    guarded checks have passed (a fresh kernel: the course's tests start each test so). A prediction's reveal is
    stamped in its record when the model is called, so no reset undoes that."""
    for name in names or list(_USED):
        _USED.pop(name, None)
    if not names:
        for passed in _PASSED:
            passed.clear()


def used(*names: str) -> list[str]:
    """The names among `names` (all when none is given) that code outside the package has called, sorted."""
    return sorted(n for n in _USED if not names or n in names)


def message(name: str, called: str) -> str:
    """What a check says when the learner's `name` calls the course's `called`."""
    return (f"your {name} calls {called}, the course's own code that this check compares with: write {name} "
            "yourself, from the principle the text gives.")


# --- watching a learner's code while a check runs it -------------------------------------------------


def _marks(target: Any) -> tuple[list, list]:
    """What identifies a call of `target`: (code objects of Python functions, C functions by identity). A course_only
    function is watched by the function it wraps; a class, by every function it defines; a C function (a torch op,
    a builtin), by itself, as the profiler reports it in a "c_call" event."""
    found = vars(target).values() if isinstance(target, type) else [target]
    codes, builtins = [], []
    for f in found:
        f = getattr(f, "__func__", f)
        f = _INNER.get(f, f) if getattr(f, "course_only", None) else f
        code = getattr(f, "__code__", None)
        if code is not None:
            codes.append(code)
        elif callable(f) and not isinstance(target, type):
            builtins.append(f)
    return codes, builtins


_ACTIVE: list["watching"] = []  # the watchings in force, innermost last


class watching:  # noqa: N801  used as `with watching(targets) as hits:`
    """While active, notes (in order, once each) which of `targets` ({function, class or C function: name}) are
    called. Watchings nest: each hands every event on to the profile function in force before it."""

    def __init__(self, targets: dict):
        self.labels, self.builtins = {}, {}
        for target, label in targets.items():
            codes, builtins = _marks(target)
            self.labels.update({code: label for code in codes})
            self.builtins.update({id(f): (f, label) for f in builtins})  # the object kept: its id stays its own
        self.hits: list[str] = []

    def _profile(self, frame, event, arg):
        label = None
        if event == "call":
            label = self.labels.get(frame.f_code)
        elif event == "c_call" and self.builtins:
            found = self.builtins.get(id(arg))
            label = found[1] if found is not None and found[0] is arg else None
        if label is not None and label not in self.hits:
            self.hits.append(label)
        if self.before is not None:
            self.before(frame, event, arg)

    def __enter__(self) -> list[str]:
        self.before = sys.getprofile()
        sys.setprofile(self._profile)
        _ACTIVE.append(self)
        return self.hits

    def __exit__(self, *exc) -> bool:
        sys.setprofile(self.before)
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
        return False


def seen() -> list[str]:
    """What the innermost watching in force has seen called so far ([] when none is): a check can stop early once
    the learner's code has been caught measuring instead of counting."""
    return list(_ACTIVE[-1].hits) if _ACTIVE else []


_EARLIER = " (in an earlier cell)"


def guard(check, name: str, targets: dict, earlier: tuple[str, ...] = ()):
    """`check`, failing first when the learner's code it runs calls one of `targets` ({function or class: its name}).

    `earlier` names course_only functions whose answer a learner could take in a cell of its own before the check
    runs (a measurement that prints the answer): called from a cell of this kernel before the check first passed,
    they count too. Once the check has passed, the lesson's own later cells may call them freely."""
    from grader.checks._common import Check, fail

    passed: list = []
    _PASSED.append(passed)

    def observe(*learner: Any, **inputs: Any) -> dict:
        with watching(targets) as hits:
            observed = check.observe(*learner, **inputs)
        before = [f"{n}{_EARLIER}" for n in used(*earlier)] if earlier and not passed else []
        return {"observed": observed, "shortcuts": list(hits) + before}

    def judge(observation: Any, **kwargs: Any):
        if not isinstance(observation, dict) or not isinstance(observation.get("shortcuts"), list):
            fail(f"the check could not read what your {name} did (not an observation of this check)")
        if observation["shortcuts"]:
            first = str(observation["shortcuts"][0])
            if first.endswith(_EARLIER):
                fail(f"a cell of this kernel called {first.removesuffix(_EARLIER)} before your {name} was checked: "
                     f"that measures the answer. Restart the kernel and write {name} from the principle the text "
                     "gives; the lesson's own cells measure it after your check passes.")
            fail(message(name, first))
        result = check.judge(observation.get("observed"), **kwargs)
        passed.append(True)
        return result

    guarded = Check(check.what, observe, judge, inputs=check.inputs, announce=check.announce)
    guarded.__doc__ = check.__doc__
    guarded.inner = check  # scripts/build_keys.py finds a keyed check under its guard
    return guarded
