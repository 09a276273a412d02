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
- anything else: the check's `unknown` message, which says what to go back to.
  There is one key per whole answer, never one per case: a key of one case's
  answer can be reversed by trying every small number (a copy test recovered
  six checks' answers that way in 4 s, from keys this module once kept).

The keys are made by `scripts/build_keys.py` from the instructor's judges
(`solutions/judges/lessonNN.py`: the reference-holding judges, never packaged
or released) run on the reference and on every mutant; a test rebuilds them
and fails when the committed file differs. A key holds no answer, but it can be
found by trying candidates: each try costs a PBKDF2 of ROUNDS rounds, so a
whole answer of several numbers is out of reach, while an answer of a few words
(five cases of "memory" or "compute") is not. That is the oracle every visible
check is; the hidden tests (other cases, answers only in the instructor's
notebook, judged in the grader's process) are what a guessed table fails.

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
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from grader.checks import _plain
from grader.checks._common import Check, Replay, fail, record

KEYS = Path(__file__).with_name("keys")
SALT = "why-is-it-slow/keys/2"
ROUNDS = 20_000  # PBKDF2-HMAC-SHA256 rounds per summary: about 7 ms here, so trying candidates offline costs that each


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


def _text(lesson: str, what: str, summary: Any, sig: int) -> str:
    return json.dumps([SALT, lesson, what, canonical(summary, sig)], sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def _stretched(text: str) -> bytes:
    """The summary's secret-free but slow root key: PBKDF2 makes each candidate a learner tries offline cost ROUNDS
    hashes (a copy test reversed keys of small answers by trying every candidate, thousands a second)."""
    return hashlib.pbkdf2_hmac("sha256", text.encode(), SALT.encode(), ROUNDS)


def digest(lesson: str, what: str, summary: Any, sig: int = 6) -> str:
    """The key of one summary, 32 hex digits: SHA-256 of its slow root key."""
    return hashlib.sha256(b"key:" + _stretched(_text(lesson, what, summary, sig))).hexdigest()[:32]


def _stream(lesson: str, what: str, summary: Any, sig: int, size: int) -> bytes:
    """`size` bytes of a keystream that only `summary` (canonical at `sig` figures) gives: SHA-256 in counter mode
    over its slow root key."""
    root = _stretched(_text(lesson, what, summary, sig))
    out = b""
    for block in range((size + 31) // 32):
        out += hashlib.sha256(b"message:%d:" % block + root).digest()
    return out[:size]


def seal(lesson: str, what: str, summary: Any, message: str, sig: int = 6) -> str:
    """`message` readable only with `summary`: XOR with the summary's keystream, in base64."""
    raw = message.encode("utf-8")
    return base64.b64encode(bytes(a ^ b for a, b in zip(raw, _stream(lesson, what, summary, sig, len(raw))))).decode()


def unseal(lesson: str, what: str, summary: Any, sealed: str, sig: int = 6) -> str:
    """The message `seal` sealed with `summary`; garbage replaced by U+FFFD for any other summary. A sealed model
    opened here from a cell before its prediction's first guess is the deliberate reveal (copy test r31 opened one by
    hand this way, unrecorded)."""
    if isinstance(what, str) and what.startswith("sealed function "):
        from grader.checks import _sealed  # which says nothing when the caller is the package's own code

        name = what.removeprefix("sealed function ")
        _sealed._asked_before_guess(lesson, _sealed.stubs().get((lesson, name), (None, None))[1], sys._getframe(1))
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
    `strict=` says what every right answer also does, answer-free (lesson 09: a knee
    that one far point moves by more than a twelfth is not the robust fit the page
    asks for): it runs on every answer that is not a known mistake, before the keys
    are read, so an answer that lands in the reference's bucket meets it too.
    """

    def __init__(self, lesson: str, what: str, name: str | None = None, cases: Iterable[tuple] | Callable = (), *,
                 unknown: str, public: Callable[[Replay], None] | None = None,
                 hints: Callable[[Replay], None] | None = None, sig: int = 6,
                 observe: Callable | None = None, summary: Callable[[Any], Any] | None = None,
                 accept: Iterable[Callable[[Any], Any]] = (), inputs: Iterable[str] = (), announce: bool = True,
                 floats: bool = False, strict: Callable[[Replay], None] | None = None):
        self._recording = observe is None or summary is None  # judges of a recording read it replayed
        if observe is None:
            def observe(fn):
                return record(fn, name, cases() if callable(cases) else cases)
        super().__init__(what, observe, self._judge, inputs=inputs, announce=announce)
        self.lesson, self.name, self.unknown, self.public, self.hints, self.sig = lesson, name, unknown, public, hints, sig
        self.summary = summary or (as_floats if floats else outcomes)
        self.accept = tuple(accept)  # other readings of an answer that are as right when their key is the pass key
        self.strict = strict

    def key(self, observation: Any) -> str:
        return digest(self.lesson, self.what, self.summary(observation), self.sig)

    def known_mistake(self, observation: Any, key: str | None = None) -> str | None:
        """The message of the known mistake this observation makes (unsealed with its own summary), or None."""
        key = key or self.key(observation)
        sealed = table(self.lesson).get(self.what, {}).get("mistakes", {}).get(key)
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
        passed = found in keys.get("pass", [])
        # A known mistake is told first, before strict= and before the other readings are tried: no mistake is one of
        # them (its mutant would pass, and tests/test_mutants.py fails it), and each reading costs a digest (knee_batch
        # has 255 of them).
        mistake = None if passed else self.known_mistake(observation, found)
        if mistake:
            fail(mistake)
        if self.strict is not None:
            self.strict(self.view(observation))
        if passed:
            return
        if any(digest(self.lesson, self.what, reading(observation), self.sig) in keys.get("pass", [])
               for reading in self.accept):
            return
        if self.hints is not None:  # an unknown answer: what can be said of it without the answer, then the principle
            self.hints(self.view(observation))
        fail(self.unknown)


def keyed_inside(check: Any) -> Keyed | None:
    """The Keyed check a check cell's call reaches (itself, or the one a shortcut guard wraps)."""
    while check is not None and not isinstance(check, Keyed):
        check = getattr(check, "inner", None)
    return check
