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
import sys
from typing import Any, Callable, Iterable

from grader import shortcuts
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

        def judged(*args: Any, **kwargs: Any) -> Any:
            result = judge(*args, **kwargs)
            for then in self.__dict__.get("on_pass", ()):  # answered_by: a prediction this check's function answers
                then()  # here, not in __call__: copy test r26 ran check.judge(check.observe(fn)) and stamped nothing
            return result

        self.judge = judged
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


shortcuts.transparent(call, record)  # they call what they are given: a model passed to them is called by their caller


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


# --- predictions: a graded cell of its own, credit in points ---------------------------------------

SCORED = "Scored"  # judge_here's name for a prediction's verdict: (SCORED, json {"points": ..., "feedback": ...})


_ASKED: set[tuple[str, str]] = set()  # (lesson, name) whose model this kernel called before a first guess
PREDICTIONS: dict[tuple[str, str], "Prediction"] = {}  # (lesson, name) -> its check, for the end-of-lesson table


# what "asked for" covers (copy test r26 read "revealed on purpose" after passing a later exercise's check)
_ASKED_HOW = "a reveal on purpose, a cell that called its model, or a later exercise that computes it passing its check"


def _folder(found: dict) -> str:
    """The other copy's folder a record names, as one short line (the record is the learner's: a handed-in file can
    say anything there)."""
    text = " ".join(str(found.get("elsewhere", "")).split())
    return text if len(text) <= 120 else f"…{text[-119:]}"


class Prediction(Check):
    """A prediction's graded cell: validates the dict, records the first guess, returns credit in points.

    `lessonNN.check_x = Prediction(lesson, name, keys, points, band, mistakes, model)`:

    - `keys`: {key: "number" (above 0), "count" (0 or more), "share" (0 to 1), "bool" or a tuple of allowed
      words}; "why" (one line of reasoning) is added to every prediction and required.
    - `band(first, context) -> (fraction, message)`: the first guess (a dict
      of `keys`, numbers as floats) against the lesson's model fed with
      `context` (what the run measured when the guess was recorded,
      grader.predictions.note_measured); fraction 1.0, 0.5 or 0.0; the message
      names a kind of mistake, never the model's value nor its distance.
    - `mistakes(answer, context) -> str | None`: feedback on the final answer
      that names a known mistake; it gives no credit and no distance.
    - `model(context) -> str`: the answer in words, for the deliberate reveal.

    Called in a notebook (`check(PREDICTION)` as the cell's last line) it
    returns the score, a plain float in points (nbgrader's partial credit),
    and prints its feedback; a malformed dict fails (0 in both graders).  The
    class grader calls `judge(observation, record=<handed-in predictions.json,
    parsed>)` in its own process and gets (points, feedback): the same score.
    """

    def __init__(self, lesson: str, name: str, keys: dict, points: float, band: Callable, mistakes: Callable | None = None,
                 model: Callable | None = None, share: float = 0.5, watch: tuple[Callable, ...] = (),
                 needs: tuple[str, ...] = (), waits: Callable | None = None):
        from grader.shortcuts import course_only

        super().__init__(name, self._observe, self._judge)
        self.lesson, self.name, self.points, self.share = lesson, name, float(points), share
        PREDICTIONS[(lesson, name)] = self
        self.needs = tuple(needs)  # what this run must have measured (note_measured) before a first guess is taken
        # Raises grader.notebook.NotPassed while the answer may not be shown, whatever the record says: lesson 09's
        # predictions are decode_step_seconds's model, so their answers wait for that check (copy test r17 rebuilt the
        # function from the two reveals' figures)
        self.waits = waits
        self.keys = {**keys, "why": "reason"}

        def counted(fn: Callable | None, role: str) -> Callable | None:
            if fn is None or getattr(fn, "course_only", None):
                return fn
            return course_only(f"{name}'s {role}")(fn)

        self.band, self.mistakes, self._model = counted(band, "band"), counted(mistakes, "feedback"), counted(model, "model")
        unmarked = [getattr(f, "__name__", f) for f in watch if not getattr(f, "course_only", None)]
        if unmarked:
            raise TypeError(f"{name}: watch= takes course_only functions (grader.shortcuts); not {unmarked}")
        # The model this prediction is scored against, and what reads it: called from a cell before the first guess,
        # they make that guess one made after asking for the answer (grader.shortcuts).
        self.watched = tuple(dict.fromkeys(f.course_only for f in (self.band, self.mistakes, self._model, *watch)
                                           if f is not None))
        from grader import shortcuts

        for label in self.watched:
            shortcuts.on_call(label, self._called_before_guess)

    def _called_before_guess(self, label: str, said: str | None = None) -> None:
        """A cell called the model this prediction is scored against: before a first guess, that is asking for the
        answer, stamped in the record at once (a later reset of the kernel's counts, or a restart, keeps it)."""
        from grader import predictions

        if predictions.grading():
            return
        found = predictions.entry(self.lesson, self.name)
        if found and (found.get("first") or found.get("revealed")):
            return
        _ASKED.add((self.lesson, self.name))  # this kernel asked, whichever record was in use (GRADER_PREDICTIONS)
        predictions.mark(self.lesson, self.name, "revealed")
        print(said or self._asked_message(f"a cell called {label}"))

    def _asked_message(self, who: str) -> str:
        from grader import predictions

        return (f"{self.name}: {who} before your first guess was recorded. That is the model this prediction is scored "
                f"against, so it counts as asking for the answer: recorded as a reveal: {predictions.REVEAL_COST}.")

    def _observe(self, answer: Any) -> Any:
        if isinstance(answer, dict) and not answer:
            raise NotDone(self.name)
        return answer

    def valid(self, answer: Any) -> dict:
        """The prediction dict with exactly its keys, numbers as floats; a failure naming what is off."""
        if not isinstance(answer, dict):
            fail(f"{self.name} should be a dict with the keys {list(self.keys)}; it is {type(answer).__name__}.")
        missing = [k for k in self.keys if k not in answer]
        extra = sorted(map(quote, set(answer) - set(self.keys)))
        if missing or extra:
            fail(f"{self.name} needs exactly the keys {list(self.keys)}; missing {missing}, unexpected [{', '.join(extra)}].")
        out = {}
        for key, kind in self.keys.items():
            value = answer[key]
            if kind == "reason":
                if not isinstance(value, str) or not value.strip() or "\n" in value.strip() or len(value) > 300:
                    fail(f"{self.name}['why'] is your reason in one line of words (at most 300 characters): what "
                         "principle your number comes from. A prediction without one earns no commitment credit.")
                out[key] = value.strip()
            elif kind == "bool":
                if not isinstance(value, bool):
                    fail(f"{self.name}[{key!r}] is {quote(value)}; write True or False.")
                out[key] = value
            elif kind == "number":
                if not is_number(value) or not math.isfinite(float(value)) or float(value) <= 0:
                    fail(f"{self.name}[{key!r}] is {quote(value)}; write a positive number.")
                out[key] = float(value)
            elif kind == "count":  # how many: 0 (none) is an answer too, and refusing it would say it is not the answer
                if not is_number(value) or not math.isfinite(float(value)) or float(value) < 0:
                    fail(f"{self.name}[{key!r}] is {quote(value)}; write how many, 0 or more.")
                out[key] = float(value)
            elif kind == "share":  # a share of a whole: 0 (none) is an answer too
                if not is_number(value) or not 0 <= float(value) <= 1:
                    fail(f"{self.name}[{key!r}] is {quote(value)}; write a share from 0 to 1 (0.2 for 20%).")
                out[key] = float(value)
            else:
                if value not in kind:
                    fail(f"{self.name}[{key!r}] is {quote(value)}; write one of {', '.join(map(repr, kind))}.")
                out[key] = value
        return out

    def score(self, answer: Any, record: dict) -> tuple[float, str]:
        """(points, feedback) for `answer` given a parsed record of first guesses (grader.predictions.parse). Asked
        from a cell before a first guess is recorded, that is asking for the band's verdict on a guess (a copy test
        tried guesses against made-up records this way): recorded as a reveal, as asking the model is."""
        if not shortcuts.module_code(sys._getframe(1), (shortcuts.PACKAGE,)):
            self._called_before_guess(f"{self.name}'s score")
        return self._score(answer, record)

    def _score(self, answer: Any, record: dict) -> tuple[float, str]:
        """score(), as the course's own code asks it: the check itself, the class grader's judge."""
        from grader import predictions

        final = self.valid(answer)
        found = predictions.entry(self.lesson, self.name, record if isinstance(record, dict) else {})
        lines = []
        if not found or not found.get("first"):
            where = f" in another copy of this lesson, {_folder(found)}," if found and found.get("elsewhere") else ""
            why = (f"its answer was asked for{where} before any guess ({_ASKED_HOW})" if found and found.get("revealed") else
                   "no first guess is recorded (predictions.json, written beside the notebook when its check first "
                   "runs, was not handed in, or the check never ran before grading)")
            return 0.0, f"{self.name}: 0 / {self.points:g}: {why}."
        try:
            first = self.valid(found["first"])
        except CheckFailed:
            return 0.0, f"{self.name}: 0 / {self.points:g}: the recorded first guess is not a valid prediction."
        commitment = predictions.committed(found)
        context = found.get("context") if isinstance(found.get("context"), dict) else {}
        fraction, message = self.band(first, context)
        if not commitment:
            fraction = 0.0
            lines.append("your first guess came after you asked for the answer: no credit for it")
        elif message:
            lines.append(message)
        if self.mistakes is not None and final != first:
            about = self.mistakes(final, context)
            if about:
                lines.append(f"your answer now: {about}")
        got = predictions.credit(self.points, commitment, fraction, self.share)
        where = f" in another copy of this lesson, {_folder(found)}" if found.get("elsewhere") else ""
        head = (f"{self.name}: {got:g} / {self.points:g} (first guess {predictions.describe(first)}, recorded "
                f"{found['at']}{where})")
        return got, "; ".join([head, *lines])

    def _judge(self, observation: Any, record: dict | None = None) -> tuple[float, str]:
        return self._score(observation, record if record is not None else {})

    def __call__(self, answer: Any, **kwargs: Any) -> float:
        from grader import predictions

        observation = _plain.roundtrip(self.observe(answer))
        value = self.valid(observation)
        if not predictions.grading():
            self._needs_measured()
            self._asked_first()
            predictions.commit(self.lesson, self.name, value, value["why"])
        points, feedback = self._score(observation, predictions._load())
        print(feedback)
        return points

    def _needs_measured(self) -> None:
        """A prediction scored against this run's measurements takes no first guess before they are recorded (a copy
        test committed before the measuring cell ran, and was scored against the model's fallback)."""
        from grader import predictions

        found = predictions.entry(self.lesson, self.name)
        if not self.needs or (found and found.get("first")):
            return
        context = predictions.context(self.lesson)
        missing = [k for k in self.needs if not (is_number(context.get(k)) and context.get(k) > 0)]
        if missing:
            fail(f"{self.name} is judged against what this run measures, and the lesson's measuring cell has not run "
                 f"in this notebook yet (nothing recorded for {', '.join(missing)}). Run the cells above in order, "
                 "then this one: your guess is not recorded yet.")

    def _asked_first(self) -> None:
        """Before a first guess is recorded: the model called from a cell of this kernel counts as the reveal."""
        from grader import predictions, shortcuts

        found = predictions.entry(self.lesson, self.name)
        if found and (found.get("first") or found.get("revealed")):
            return
        took = shortcuts.used(*self.watched) or (["the model"] if (self.lesson, self.name) in _ASKED else [])
        if took:
            predictions.mark(self.lesson, self.name, "revealed")
            print(self._asked_message(f"a cell of this kernel called {took[0]}"))

    def _wait(self) -> None:
        if self.waits is not None:
            self.waits()

    def revealed(self, shown: str = ""):
        """`with check.revealed():` around the cell that shows the answer: skips with one line until recorded (and,
        with `waits`, until what it waits for has passed: NotPassed, which skip_if_not_done shows as one line)."""
        from grader import predictions

        self._wait()
        return predictions.revealed(self.lesson, self.name, shown)

    def after_guess(self):
        """`with check.after_guess() as ready:` around a cell that runs what the prediction is scored against but shows
        no answer: skips with one line until a first guess is recorded (grader.predictions.after_guess)."""
        from grader import predictions

        return predictions.after_guess(self.lesson, self.name)

    def reveal(self) -> None:
        """The deliberate reveal: prints the model's answer and records that it was asked for. While `waits` holds the
        answer back, it records the choice (before a first guess) and says when the answer will be shown."""
        from grader import predictions
        from grader.notebook import NotPassed

        found = predictions.entry(self.lesson, self.name)
        guessed = bool(found and found.get("first"))  # predictions.mark stamps no reveal once a first guess is recorded
        on_purpose = (f"{self.name}, revealed on purpose (nothing is recorded while a grader runs the notebook)"
                      if predictions.grading() else  # r31: the message said "recorded" where nothing was written
                      f"{self.name}, revealed on purpose (recorded: {predictions.REVEAL_COST})")
        try:
            self._wait()
        except NotPassed as waiting:
            later = f"its answer is shown once `{waiting.name}` has passed in this kernel."
            if guessed:
                print(f"{self.name}: your first guess is recorded; {later}")
            else:  # the choice not to guess is recorded now (lesson 09's model waits for it), the answer shown later
                predictions.mark(self.lesson, self.name, "revealed")
                print(f"{on_purpose}: {later}")
            return
        if guessed:
            print(f"{self.name}: your first guess is recorded, so seeing the model now changes nothing: {self.model()}")
            return
        print(f"{on_purpose}: {self.model()}")

    def model(self, context: dict | None = None) -> str:
        """What the model says, in words: asking for it counts as the deliberate reveal, and is recorded as one."""
        from grader import predictions

        self._wait()
        predictions.mark(self.lesson, self.name, "revealed")
        if self._model is None:
            return "run the cell that shows it"
        return self._model(predictions.context(self.lesson) if context is None else context)


shortcuts.entries(Check.__call__, Prediction.__call__)  # a course check asking its own models counts as no reveal
shortcuts.runs_what_it_is_handed(expect)  # ... but not the hidden tests' check, which calls whatever it is handed


# --- shortcuts: the course's own code called from a learner's function (grader.shortcuts, the one place) ---------

from grader.shortcuts import guard  # noqa: E402,F401  lessons call _common.guard; it lives in grader.shortcuts


def _in_a_kernel() -> bool:
    """Whether this process is a Jupyter kernel (a learner's; a grader's kernel records nothing anyway)."""
    from grader import predictions

    return predictions._in_kernel()


def answered_by(prediction: "Prediction", *checks: Check) -> None:
    """Count each of `checks` passing, before `prediction`'s first guess is recorded, as asking for its answer: each
    check's function, once it passes, computes that answer (a copy test wrote a later exercise first, ran its check,
    and read the prediction off its own function, r22 to r25). After a first guess, passing changes nothing."""
    for check in checks:
        label = f"your {check.what}"

        def then(prediction: Prediction = prediction, label: str = label) -> None:
            from grader import predictions

            if not _in_a_kernel():  # a learner's kernel only: the class grader judges in its own process, where a
                return  # stamp wrote a record beside the instructor (found grading a class, stop 47)
            prediction._called_before_guess(label, said=(
                f"{prediction.name}: {label} passed its check before your first guess of {prediction.name} was recorded. "
                f"Once it passes, that function computes {prediction.name}'s answer, so this counts as asking for it: "
                f"recorded as a reveal: {predictions.REVEAL_COST}. (Predict first, then write the function: the "
                "lesson is in that order.)"))

        check.__dict__.setdefault("on_pass", []).append(then)
