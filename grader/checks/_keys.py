"""Keyed checks: a visible check that holds no answer, only salted digests of answers.

A learner's package is readable: a check that computes the expected value (a
reference function, a formula in a judge, a table of answers) hands it to
anyone who opens the source. A keyed check keeps none of that. It runs the
learner's code on its cases (the observing half, as every check does), reduces
what came back to a canonical summary (floats to `sig` significant figures),
and looks the summary's digest up in `keys/lessonNN.json`:

- the digest of the reference solution's summary: ✓;
- the digest of a known mistake's summary (each mutant in tests/mutants): that
  mistake's message, which names the kind of mistake and the principle. The
  message is sealed with the summary itself (`seal`): only an answer that makes
  that mistake can read it, so the file cannot be read as a list of every
  mistake's message (a copy test read the rules of a lesson off them);
- anything else: the check's `unknown` message, which says what to go back to,
  followed by the calls whose answers are not right: a check of calls keeps a
  digest of the reference's answer to each call too (`cases`), so it can say
  which of its cases an unknown answer gets wrong without holding any answer.

The keys are made by `scripts/build_keys.py` from the instructor's judges
(`solutions/judges/lessonNN.py`: the reference-holding judges, never packaged
or released) run on the reference and on every mutant; a test rebuilds them
and fails when the committed file differs. A key cannot be turned back into
its answer, only matched: guessing every candidate and asking the check is the
oracle every visible check is, and the hidden tests (other cases, answers only
in the instructor's notebook, judged in the grader's process) are what a
guessed table fails.

A `public` judge runs first: checks that hold no answer (the return type, a
stub) keep their messages there. `hints` runs only on an answer the keys do
not know, before the `unknown` message: properties a right answer has ("the
same bytes for float16 and float32" ignores the dtype) that hold no answer.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable

from grader.checks import _plain
from grader.checks._common import Check, Replay, fail, record

KEYS = Path(__file__).with_name("keys")
SALT = "why-is-it-slow/keys/1"


def canonical(value: Any, sig: int = 6) -> Any:
    """`value` as JSON-able data that two right answers share: floats to `sig` significant figures, types kept."""
    import torch

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return {"int": str(value)}
    if isinstance(value, float):
        if math.isnan(value):
            return {"float": "nan"}
        if math.isinf(value):
            return {"float": "inf" if value > 0 else "-inf"}
        return {"float": f"{value + 0.0:.{sig}g}"}
    if isinstance(value, (list, tuple)):
        return [canonical(v, sig) for v in value]
    if isinstance(value, dict):
        return {"dict": sorted([str(k), canonical(v, sig)] for k, v in value.items())}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value)}
    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype), "shape": list(value.shape),
                "values": canonical([float(x) for x in value.detach().double().flatten().tolist()], sig)}
    if isinstance(value, _plain.Opaque):
        return {"opaque": type(value).__name__}
    try:
        import numbers

        if isinstance(value, numbers.Integral):
            return canonical(int(value), sig)
        if isinstance(value, numbers.Real):
            return canonical(float(value), sig)
    except (TypeError, ValueError):
        pass
    return {"other": type(value).__name__}


def digest(lesson: str, what: str, summary: Any, sig: int = 6) -> str:
    """The key of one summary: a salted SHA-256 of its canonical form, 32 hex digits."""
    text = json.dumps([SALT, lesson, what, canonical(summary, sig)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _stream(lesson: str, what: str, summary: Any, sig: int, size: int) -> bytes:
    """`size` bytes of a keystream that only `summary` (canonical at `sig` figures) gives: SHA-256 in counter mode."""
    seed = json.dumps([SALT, "message", lesson, what, canonical(summary, sig)], sort_keys=True, separators=(",", ":"))
    out = b""
    for block in range((size + 31) // 32):
        out += hashlib.sha256(f"{block}:{seed}".encode()).digest()
    return out[:size]


def seal(lesson: str, what: str, summary: Any, message: str, sig: int = 6) -> str:
    """`message` readable only with `summary`: XOR with the summary's keystream, in base64."""
    raw = message.encode("utf-8")
    return base64.b64encode(bytes(a ^ b for a, b in zip(raw, _stream(lesson, what, summary, sig, len(raw))))).decode()


def unseal(lesson: str, what: str, summary: Any, sealed: str, sig: int = 6) -> str:
    """The message `seal` sealed with `summary`; garbage replaced by U+FFFD for any other summary."""
    raw = base64.b64decode(sealed.encode())
    return bytes(a ^ b for a, b in zip(raw, _stream(lesson, what, summary, sig, len(raw)))).decode("utf-8", "replace")


def outcomes(observation: Any) -> list:
    """A recording's answers in the order the check made its calls: each value, or ["raised", exception name]."""
    replay = Replay(observation)
    found = []
    for entry in observation["calls"]:
        outcome = replay.calls.get(entry[0], {})
        found.append(["raised", str(outcome.get("raised"))] if "raised" in outcome
                     else _plain.decode(outcome.get("value")))
    return found


def as_floats(observation: Any) -> list:
    """outcomes() with every number (bools aside) as a float."""
    def conv(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [conv(v) for v in value]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return value
    return conv(outcomes(observation))


@functools.lru_cache(maxsize=None)
def _table(lesson: str) -> dict:
    path = KEYS / f"{lesson}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def table(lesson: str) -> dict:
    """The keys of `lesson` ({what: {"sig", "pass", "mistakes"}}); {} when the file is missing."""
    return _table(lesson).get("checks", {})


class Keyed(Check):
    """A check whose judge is a digest lookup (see the module's docstring).

    `Keyed(lesson, what, name, cases, unknown=..., public=None, sig=6)` calls the
    learner's function `name` on `cases` (a list of argument tuples, or a
    function returning one); pass `observe=` and `summary=` instead for a check
    that observes something else (`summary(observation)` is what gets keyed).
    `floats=True` keys every number a recording holds as a float, for answers a
    learner may give as an int or a float (16_000_000_000 and 1.6e10 are one answer).
    `accept=` lists other readings of an answer that are just as right (an
    answer that leaves out what the course lets it leave out, read with it added).
    """

    def __init__(self, lesson: str, what: str, name: str | None = None, cases: Iterable[tuple] | Callable = (), *,
                 unknown: str, public: Callable[[Replay], None] | None = None,
                 hints: Callable[[Replay], None] | None = None, sig: int = 6,
                 observe: Callable | None = None, summary: Callable[[Any], Any] | None = None,
                 accept: Iterable[Callable[[Any], Any]] = (), inputs: Iterable[str] = (), announce: bool = True,
                 floats: bool = False):
        self._recording = observe is None or summary is None  # judges of a recording read it replayed
        if observe is None:
            def observe(fn):
                return record(fn, name, cases() if callable(cases) else cases)
        super().__init__(what, observe, self._judge, inputs=inputs, announce=announce)
        self.lesson, self.name, self.unknown, self.public, self.hints, self.sig = lesson, name, unknown, public, hints, sig
        self.summary = summary or (as_floats if floats else outcomes)
        self.accept = tuple(accept)  # other readings of an answer that are as right when their key is the pass key

    def key(self, observation: Any) -> str:
        return digest(self.lesson, self.what, self.summary(observation), self.sig)

    def known_mistake(self, observation: Any) -> str | None:
        """The message of the known mistake this observation makes (unsealed with its own summary), or None."""
        sealed = table(self.lesson).get(self.what, {}).get("mistakes", {}).get(self.key(observation))
        return unseal(self.lesson, self.what, self.summary(observation), sealed, self.sig) if sealed else None

    def view(self, observation: Any) -> Any:
        """What a judge of this check reads: a Replay of a recording, else the observation itself."""
        return Replay(observation) if self._recording and not isinstance(observation, Replay) else observation

    def _judge(self, observation: Any, **kwargs: Any) -> None:
        if self.public is not None:
            self.public(self.view(observation))
        keys = table(self.lesson).get(self.what)
        if not keys:
            fail(f"the course's keys for {self.what} are missing (grader/checks/keys/{self.lesson}.json): "
                 "reinstall the course, or ask whoever runs it to run scripts/build_keys.py")
        found = self.key(observation)
        others = (digest(self.lesson, self.what, reading(observation), self.sig) for reading in self.accept)
        if found in keys.get("pass", []) or any(other in keys.get("pass", []) for other in others):
            return
        mistake = self.known_mistake(observation)
        if mistake:
            fail(mistake)
        if self.hints is not None:  # an unknown answer: what can be said of it without the answer, then the principle
            self.hints(self.view(observation))
        wrong = self.wrong_calls(observation, keys)
        fail(self.unknown + (f" Not right on {len(wrong)} of {len(keys['cases'])} cases: {', '.join(wrong[:4])}"
                             f"{', …' if len(wrong) > 4 else ''}." if wrong else ""))

    def per_call(self) -> bool:
        """True when this check's summary is one answer per recorded call, in call order (a case by case key)."""
        return self._recording and self.summary in (outcomes, as_floats)

    def case_keys(self, observation: Any) -> list[str]:
        """The key of each recorded call's answer alone (per_call checks)."""
        return [digest(self.lesson, f"{self.what}#{i}", item, self.sig) for i, item in enumerate(self.summary(observation))]

    def wrong_calls(self, observation: Any, keys: dict) -> list[str]:
        """The calls (as `name(args)`) whose answers are not the reference's, where the keys hold a key per case."""
        want = keys.get("cases")
        if not self.per_call() or not isinstance(want, list) or not isinstance(observation, dict):
            return []
        calls = observation.get("calls") or []
        got = self.case_keys(observation)
        if len(got) != len(want) or len(calls) != len(want):
            return []
        name = observation.get("name") or self.name or self.what
        shown = []
        for (key, _), mine, right in zip(calls, got, want):
            if mine != right:
                try:
                    args = _plain.decode(json.loads(key))
                except (ValueError, _plain.PlainError, RecursionError):
                    args = None
                text = repr(tuple(args)) if isinstance(args, (tuple, list)) else "(…)"
                text = text[:-2] + ")" if text.endswith(",)") else text
                shown.append(f"{name}{text if len(text) <= 80 else text[:79] + '…)'}")
        return shown


def keyed_inside(check: Any) -> Keyed | None:
    """The Keyed check a check cell's call reaches (itself, or the one a shortcut guard wraps)."""
    while check is not None and not isinstance(check, Keyed):
        check = getattr(check, "inner", None)
    return check
