"""Checks for lesson 03 (float formats): decode, round_to, predict_vanishing, stall_point,
choose_loss_scale, LossScaler, and the predictions recorded before four of them (FIELDS_BY_HAND,
ROUNDED_BY_HAND, ZERO_SHARE, SCALER_FORECAST).

Each check is two halves (grader.checks._common.Check): observe calls the
learner's code on the check's own cases and returns plain data; judge reads
that data and names the mistake. decode, round_to, predict_vanishing,
stall_point and choose_loss_scale are keyed (grader.checks._keys): their
judges, which hold the answers, are the instructor's
(solutions/judges/lesson03.py), and this module keeps only their cases, the
checks that hold no answer and digests. The scaler is compared with
torch.amp.GradScaler itself.
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from typing import Any, Callable

import torch

from grader.checks._common import (Check, Prediction, Replay, answered_by, call, fail, guard, is_number, record,
                                   require_callable, same)
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson03.expect
from grader.checks._keys import Keyed, outcomes
from grader.floats import FORMATS, Format, fp8_fields
from grader.floats import kind_of as floats_kind_of
from grader.floats import value_of as floats_value_of
from grader.notebook import CheckFailed, NotDone
from grader import shortcuts
from grader.checks._sealed import sealed
from grader.shortcuts import course_only

LESSON = "03_float_formats"  # the lesson's name in the predictions record (grader.predictions)

_WIDTHS = {name: (f.exponent_bits, f.mantissa_bits) for name, f in FORMATS.items()}

# Values every bit-level check tries: normal, negative, subnormal, zero, inf, nan, overflow, ties.
_EDGE = [1.0, -2.5, 0.1, 3.140625, -1234.5678, 65504.0, 1e-5, -6e-8, 1e-8, 0.0, -0.0,
         math.inf, -math.inf, math.nan, 1e30, 1e-40, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-12]


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


# --- decode ---------------------------------------------------------------------------------


def _fields(decode: Callable, x: float, fmt: str) -> tuple[int, int, int]:
    """The learner's decode(x, fmt), required to be three ints."""
    got = call(decode, x, fmt, label=f"decode({x!r}, {fmt!r})")
    if not isinstance(got, (tuple, list)) or len(got) != 3 or not all(_is_int(v) for v in got):
        fail(f"decode({x!r}, {fmt!r}) returned {got!r}; return a tuple of three ints (sign, exponent, mantissa).")
    return tuple(int(v) for v in got)


# The answers of decode, round_to and stall_point are not here: each is judged by digests (grader.checks._keys),
# made by scripts/build_keys.py from the instructor's judges (solutions/judges/lesson03.py, never released).

# The four named formats, and two made up, given by their widths (IEEE-style: an all-ones exponent field is inf or
# nan): no library has them, so their fields follow from the principle alone.
_MADE_UP = ((6, 5), (4, 3))
_DECODE_CASES = [(x, fmt) for fmt in ("fp32", "fp16", "bf16", "tf32", *_MADE_UP) for x in _EDGE]


def _public_decode(decode: Replay) -> None:
    """What can be said of decode without its answer: three ints."""
    for x, fmt in _DECODE_CASES:
        _fields(decode, x, fmt)


def _hints_decode(decode: Replay) -> None:
    """An unknown answer whose fields do not fit the format's widths."""
    for x, fmt in _DECODE_CASES:
        got = _fields(decode, x, fmt)
        e, m = _WIDTHS[fmt] if isinstance(fmt, str) else fmt
        if not (got[0] in (0, 1) and 0 <= got[1] < 2**e and 0 <= got[2] < 2**m):
            fail(f"decode({x!r}, {fmt!r}) returned {got}: its fields are 1 sign bit, {e} exponent bits and {m} "
                 "mantissa bits.")


def _summary_decode(observation: Any) -> list:
    """decode's answers, each nan's fields written one way: any sign and any nonzero mantissa under an all-ones
    exponent field store a nan (a cast keeps one payload; a decode worked out from the bits may pick another)."""
    found = outcomes(observation)
    for i, (x, fmt) in enumerate(_DECODE_CASES):
        got = found[i] if i < len(found) else None
        e = (_WIDTHS[fmt] if isinstance(fmt, str) else fmt)[0]
        if (math.isnan(x) and isinstance(got, (list, tuple)) and len(got) == 3 and all(_is_int(v) for v in got)
                and got[1] == 2**e - 1 and got[2] != 0):
            found[i] = ["nan", e]
    return found


check_decode = Keyed(
    LESSON, "decode", "decode", _DECODE_CASES, public=_public_decode, hints=_hints_decode,
    summary=_summary_decode,
    unknown="decode returns fields that are not what each format stores, nor a mistake the course knows. Go back to "
            "section 1 (the fields, the bias, what an all-zero or all-ones exponent field means) and to what a cast "
            "does to the bits that do not fit.")


# --- predictions: a dict the learner fills in by hand before the cell that measures it -------------


def _prediction(name: str) -> Callable[[Any], Any]:
    """Observe: the learner's dict as it is (NotDone while it is still empty). The judge is attached below."""

    def observe(answers):
        if answers is None or (isinstance(answers, dict) and not answers):
            raise NotDone(name)
        return answers

    return observe


def _answers(answers: Any, name: str, keys: list, example: str) -> dict:
    """The learner's prediction dict, required to hold exactly `keys`."""
    if not isinstance(answers, dict):
        fail(f"{name} should be a dict, like {example}; it is {type(answers).__name__}.")
    missing = [k for k in keys if k not in answers]
    extra = [k for k in answers if k not in keys]
    if missing or extra:
        fail(f"{name} needs exactly the keys {keys!r}; missing {missing!r}, unexpected {extra!r}.")
    return {k: answers[k] for k in keys}


# Worked out on paper in a 12-bit format no library has (fp16's 5 exponent bits, 6 mantissa bits): a cast a
# learner could run (fp16's own, which the page also walks through later) would answer it without the reasoning.
_BY_HAND_WIDTHS = (5, 6)
_BY_HAND = [-2.5, 2e-5, 65280.0]


def _public_fields_by_hand(answers: Any) -> None:
    """FIELDS_BY_HAND without its answer: three ints per number, each within the (5, 6) format's field widths."""
    got_all = _answers(answers, "FIELDS_BY_HAND", _BY_HAND, "{-2.5: (sign, exponent, mantissa), ...}")
    for x in _BY_HAND:
        got = got_all[x]
        if not isinstance(got, (tuple, list)) or len(got) != 3 or not all(_is_int(v) for v in got):
            fail(f"FIELDS_BY_HAND[{x!r}] is {got!r}; write three integers (sign, exponent, mantissa).")
        sign, exponent, mantissa = (int(v) for v in got)
        if exponent < 0:
            fail(f"FIELDS_BY_HAND[{x!r}] has a negative exponent field: the stored field is an unsigned integer "
                 "(section 1 says how the power of two is stored, and what a number too small for any normal "
                 "exponent is stored as).")
        if mantissa >= 1024:
            fail(f"FIELDS_BY_HAND[{x!r}] has a mantissa wider than the 10 bits even fp16 stores: which bit is never "
                 "stored?")
        if mantissa >= 64:
            fail(f"FIELDS_BY_HAND[{x!r}] has a mantissa wider than the format's 6 bits (fp16 has 10; this format "
                 "keeps 6, so the bits after them are rounded away).")
        if not (0 <= exponent < 32 and 0 <= mantissa < 64 and sign in (0, 1)):
            fail(f"FIELDS_BY_HAND[{x!r}] is {tuple(got)}: the format's fields are 1 sign bit (0 or 1), 5 exponent "
                 "bits (0 to 31) and 6 mantissa bits (0 to 63).")


def _summary_fields_by_hand(answers: Any) -> list:
    return [[int(v) for v in answers[x]] for x in _BY_HAND]


def _hints_fields_by_hand(answers: Any) -> None:
    """An unknown answer: what can be said of each number without its fields."""
    sign, exponent, _ = answers[-2.5]
    if sign != 1:
        fail("FIELDS_BY_HAND[-2.5] has sign 0: which sign bit does a negative number carry?")
    if answers[2e-5][1] != 0:
        fail("FIELDS_BY_HAND[2e-5] has a nonzero exponent field, but 2e-5 lies below the format's smallest normal "
             "number (its exponent is fp16's: section 1's table): how is a number that small stored?")
    if answers[65280.0][1] < 30:
        fail("FIELDS_BY_HAND[65280.0] has an exponent field far below the top of the format's range, where 65,280 "
             "lies.")


check_fields_by_hand = Keyed(
    LESSON, "FIELDS_BY_HAND", observe=_prediction("FIELDS_BY_HAND"), summary=_summary_fields_by_hand,
    public=_public_fields_by_hand, hints=_hints_fields_by_hand,
    unknown="FIELDS_BY_HAND holds fields that are not what the (5, 6) format stores for one of the numbers, nor a "
            "mistake the course knows. For each: the power of two first, then the 6 bits after the leading 1, then "
            "what a cast does to the bits that do not fit (section 1 says what an all-zero or all-ones exponent "
            "field means).")


# --- round_to -------------------------------------------------------------------------------


def _round_input() -> torch.Tensor:
    """The edge values, exact ties of tf32, bf16 and fp16 either side of zero (fp16's among its subnormals and at its
    top too), and 200 random values over 14 decades (fixed)."""
    g = torch.Generator().manual_seed(3)
    ties = [1.0 + 2.0**-11, 3.0 + 2.0**-10, 1.0 + 2.0**-8, 3.0 + 2.0**-7, 3.4028234663852886e38,
            2049.0, 65520.0, 2.0**-25, 3 * 2.0**-25, 5 * 2.0**-25, 2.0**-14 + 2.0**-25, 1000 * 2.0**-24 + 2.0**-25]
    return torch.cat([torch.tensor(_EDGE + ties + [-t for t in ties], dtype=torch.float32),
                      torch.randn(200, generator=g) * 10.0 ** torch.randint(-9, 5, (200,), generator=g)])


# (format, tie rule): every cast the check asks for; ties away where no torch cast gives them
_ROUND_CASES = (("fp16", "even"), ("bf16", "even"), ("fp32", "even"), ("tf32", "even"), ("tf32", "away"), ("bf16", "away"),
                ("fp16", "away"))
_DROPPED = {"tf32": 13, "bf16": 16}  # the low fp32 bits the format does not keep


def _on_copies(name: str, cases: Callable[[], list[tuple]]) -> Callable:
    """Like `record`, but every tensor argument is handed to the learner as a copy, so an in-place edit cannot change the case."""

    def observe(fn):
        require_callable(fn, name)

        def on_copies(*args):
            return fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))

        return record(on_copies, name, cases())

    return observe


def _round_label(fmt: str, ties: str) -> str:
    return f"round_to(x, {fmt!r})" if ties == "even" else f"round_to(x, {fmt!r}, ties={ties!r})"


def _public_round_to(round_to: Replay) -> None:
    """What can be said of round_to without its answer: a float32 tensor of x's shape, nan kept where x is nan."""
    x = _round_input()
    for fmt, ties in _ROUND_CASES:
        label = _round_label(fmt, ties)
        got = call(round_to, *((x, fmt) if ties == "even" else (x, fmt, ties)), label=label)
        if not isinstance(got, torch.Tensor):
            fail(f"{label} returned {type(got).__name__}; return a torch.Tensor.")
        if got.dtype != torch.float32:
            fail(f"{label} returned a {got.dtype} tensor; return float32 holding the rounded values (cast back with .float()).")
        if got.shape != x.shape:
            fail(f"{label} returned shape {tuple(got.shape)} for input shape {tuple(x.shape)}.")
        if not torch.equal(torch.isnan(got), torch.isnan(x)):
            fail(f"{label}: nan must stay nan and nothing else may become nan.")


def _hints_round_to(round_to: Replay) -> None:
    """An unknown answer whose values are not numbers of the format at all."""
    x = _round_input()
    nan = torch.isnan(x)
    for fmt, ties in _ROUND_CASES:
        if fmt not in _DROPPED:
            continue
        got = call(round_to, *((x, fmt) if ties == "even" else (x, fmt, ties)))
        if (got[~nan].view(torch.int32) & ((1 << _DROPPED[fmt]) - 1)).any():
            fail(f"{_round_label(fmt, ties)} left nonzero bits below {fmt}'s {FORMATS[fmt].mantissa_bits} mantissa bits; "
                 f"each result must be a {fmt} number, its low {_DROPPED[fmt]} fp32 bits 0.")


check_round_to = Keyed(
    LESSON, "round_to", "round_to", public=_public_round_to, hints=_hints_round_to,
    observe=_on_copies("round_to", lambda: [(_round_input(), fmt) if ties == "even" else (_round_input(), fmt, ties)
                                            for fmt, ties in _ROUND_CASES]),
    unknown="round_to does not give the format's number nearest to each value, nor a mistake the course knows. "
            "Go back to section 2: what \"nearest\" means for the bits that are dropped, and what each tie rule "
            "asks for.")


# four casts by hand, into exercise 1's (5, 6) format: no library casts to it (the page later shows fp16's own)
_ROUNDED = ["1 + 2**-7 in (5, 6)", "1 + 3 * 2**-7 in (5, 6)", "129 in (5, 6)", "65100 in (5, 6)"]
_ROUNDED_VALUES = (1 + 2.0**-7, 1 + 3 * 2.0**-7, 129.0, 65100.0)


def _public_rounded_by_hand(answers: Any) -> None:
    """ROUNDED_BY_HAND without its answer: a number for each cast."""
    got_all = _answers(answers, "ROUNDED_BY_HAND", _ROUNDED, '{"2049 in fp16": <the value you expect>, ...}')
    for label in _ROUNDED:
        if not is_number(got_all[label]):
            fail(f"ROUNDED_BY_HAND[{label!r}] is {got_all[label]!r}; write the number you expect the cast to give.")


def _summary_rounded_by_hand(answers: Any) -> list:
    return [float(answers[label]) for label in _ROUNDED]


def _hints_rounded_by_hand(answers: Any) -> None:
    """An unknown answer: a value the format cannot hold is named, without the one it should be."""
    for label, x in zip(_ROUNDED, _ROUNDED_VALUES):
        if float(answers[label]) == x:
            fail(f"ROUNDED_BY_HAND[{label!r}] is the value itself, but the format cannot hold it: which two of its "
                 "numbers is it between, and which does a cast keep?")


check_rounded_by_hand = Keyed(
    LESSON, "ROUNDED_BY_HAND", observe=_prediction("ROUNDED_BY_HAND"), summary=_summary_rounded_by_hand,
    public=_public_rounded_by_hand, hints=_hints_rounded_by_hand,
    unknown="ROUNDED_BY_HAND holds a value that is not what that cast gives, nor a mistake the course knows. For "
            "each: how far apart the format's numbers are near the value, which two it lies between, and, at a "
            "tie, which way section 2 says a cast goes.")


# --- predict, then measure: which gradients vanish -----------------------------------------------


# (values, exponent bits, mantissa bits): fp16, bf16, fp8 e4m3, fp8 e5m2 and a made-up (6, 5) format. Each format is
# tried on a ladder of magnitudes, every power of two over a stretch of exponents (each exactly, 1.25 times it and
# -1.5 times it), far enough either side that its cut-off, the ties at it and its neighbours are all on the ladder,
# with zero and ±1 beside them.
_LADDERS = {(5, 10): (-31, -11), (8, 7): (-141, -121), (4, 3): (-15, -3), (5, 2): (-23, -10), (6, 5): (-43, -27)}


def _vanishing_cases() -> list[tuple]:
    cases = []
    for (e, m), (low, high) in _LADDERS.items():
        values = [v for k in range(low, high + 1) for v in (2.0**k, 1.25 * 2.0**k, -1.5 * 2.0**k)]
        cases.append((values + [0.0, 1.0, -1.0], e, m))
    return cases


_VANISH_CASES = _vanishing_cases()


def _as_bools(got: Any, n: int) -> list[bool] | None:
    if isinstance(got, torch.Tensor) and got.dtype == torch.bool:
        got = got.reshape(-1).tolist()
    if isinstance(got, (list, tuple)) and len(got) == n and all(isinstance(v, bool) for v in got):
        return list(got)
    return None


# The answer of predict_vanishing is not here: it is judged by digests (grader.checks._keys), made by
# scripts/build_keys.py from the instructor's judge (solutions/judges/lesson03.py, never released).


def _public_predict_vanishing(predict_vanishing: Replay) -> None:
    """What can be said of predict_vanishing without its answer: one bool per value."""
    for values, e, m in _VANISH_CASES:
        got = call(predict_vanishing, values, e, m, label=f"predict_vanishing(values, {e}, {m})")
        if _as_bools(got, len(values)) is None:
            fail(f"predict_vanishing(values, {e}, {m}) returned {got!r}; return a list of {len(values)} bools, one per value.")


def _hints_predict_vanishing(predict_vanishing: Replay) -> None:
    """An unknown answer that says zero vanishes, or keeps a value while a smaller one of the same format vanishes."""
    for values, e, m in _VANISH_CASES:
        mine = _as_bools(call(predict_vanishing, values, e, m), len(values))
        if any(g and x == 0 for x, g in zip(values, mine)):
            fail("predict_vanishing said 0.0 vanishes: it was zero already. Vanishing means a nonzero value that becomes 0.")
        kept = [abs(x) for x, g in zip(values, mine) if x != 0 and not g]
        lost = [abs(x) for x, g in zip(values, mine) if g]
        if kept and lost and min(kept) < max(lost):
            fail(f"for a format with {e} exponent bits and {m} mantissa bits you predicted that a value vanishes while a "
                 "smaller one (in magnitude) survives: a cast rounds each magnitude to the nearest number the format "
                 "holds, so whether a value vanishes depends on its magnitude alone, and only on which side of one "
                 "cut-off it lies.")
    casts = {(5, 10): torch.float16, (8, 7): torch.bfloat16, (4, 3): getattr(torch, "float8_e4m3fn", None),
             (5, 2): getattr(torch, "float8_e5m2", None)}  # fp8 e4m3fn flushes like an IEEE (4, 3) format does
    for values, e, m in _VANISH_CASES:
        dtype = casts.get((e, m))
        if dtype is None:
            continue
        mine = _as_bools(call(predict_vanishing, values, e, m), len(values))
        cast = ((torch.tensor(values, dtype=torch.float64).to(dtype) == 0) & (torch.tensor(values) != 0)).tolist()
        if any(p and not c for p, c in zip(mine, cast)):
            fail(f"for the format with {e} exponent bits and {m} mantissa bits ({dtype}) you predicted that values "
                 "vanish which torch's cast keeps.")
        if any(c and not p for p, c in zip(mine, cast)):
            fail(f"for the format with {e} exponent bits and {m} mantissa bits ({dtype}) you predicted that values "
                 "survive which torch's cast turns into 0.")


def _bools_read(observation: Any) -> list:
    """The answers with a bool tensor read as a list of bools (a tensor of the right bools is as right as a list)."""
    return [_as_bools(v, len(v)) if isinstance(v, torch.Tensor) and v.dim() == 1 else v for v in outcomes(observation)]


check_predict_vanishing = Keyed(
    LESSON, "predict_vanishing", "predict_vanishing", _VANISH_CASES, public=_public_predict_vanishing,
    hints=_hints_predict_vanishing, accept=(_bools_read,),
    unknown="predict_vanishing is not which values a cast to that format turns into 0, nor a mistake the course "
            "knows. Go back to section 1 and to the paragraph above the exercise.")


# --- underflow ------------------------------------------------------------------------------

_UNDERFLOW_CASES = {
    torch.float16: [1e-8, 3e-8, -1e-8, 1e-7, 1e-5, -1e-5, 1e-4, 0.0, -0.0, math.inf, math.nan, 1.0, 7e4],
    torch.bfloat16: [1e-40, 1e-45, -1e-45, 1e-30, 0.0, 2e-8, math.nan, 1.0],
}


# --- predict the share that vanishes ---------------------------------------------------------------

_SPREAD = (-12, -2, 10001)  # torch.logspace(-12, -2, 10001): made-up magnitudes over ten decades
_SHARE_TOLERANCE = 0.02


ZERO_SHARE_FORMAT = (5, 6)  # the made-up format the prediction asks about: fp16's exponent, 6 mantissa bits


@course_only()
@sealed(LESSON, "ZERO_SHARE")
def _zero_share(exponent_bits: int, mantissa_bits: int) -> float:
    """Part of ZERO_SHARE's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ZERO_SHARE")
def _zero_share_mistake(answer: dict) -> str | None:
    """Part of ZERO_SHARE's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ZERO_SHARE")
def _zero_share_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of ZERO_SHARE's model or its feedback: sealed (grader.checks._sealed)."""


# e5m6 is a share: any value from 0 to 1 is an answer (0 included: refusing it told a learner the share is not 0),
# and one above 1 (a percentage) is refused as malformed, for the first guess and the final answer alike
check_zero_share = Prediction(LESSON, "ZERO_SHARE", {"e5m6": "share", "bf16": ("none", "some", "most")}, points=1,
                              band=_zero_share_band, mistakes=lambda answer, context: _zero_share_mistake(answer),
                              model=lambda context: (f"a cast turns {_zero_share(*ZERO_SHARE_FORMAT):.1%} of the spread "
                                                     "into 0 in e5m6, none of it in bf16"),
                              watch=(_zero_share, _zero_share_mistake))


# grader.floats (the explorer's and the range picture's arithmetic) knows each format's limits; a learner's function
# that asks it is noticed, and so is one that asks the model ZERO_SHARE is scored against.
_FORMAT_SHORTCUTS = {**{prop.fget: f"grader.floats.Format.{name}" for name, prop in vars(Format).items()
                        if isinstance(prop, property)},
                     floats_value_of: "grader.floats.value_of", floats_kind_of: "grader.floats.kind_of"}
check_predict_vanishing = guard(check_predict_vanishing, "predict_vanishing",
                                {**_FORMAT_SHORTCUTS, _zero_share: "the course's model of ZERO_SHARE"})
# decode of a made-up format: a copy test searched every field for the one whose floats.value_of is nearest x
check_decode = guard(check_decode, "decode", {**_FORMAT_SHORTCUTS, fp8_fields: "grader.floats.fp8_fields"})
check_round_to = guard(check_round_to, "round_to", _FORMAT_SHORTCUTS)  # copy test r4: value_of searched, as for decode


# --- loss scale -----------------------------------------------------------------------------


_SCALE_CASES = [
    (torch.tensor([1e-10, 1e-3, -4e-6]), torch.float16),
    (torch.tensor([0.0, 3e-9, 0.5, 0.0]), torch.float16),
    (torch.tensor([1e-12, 4.0]), torch.bfloat16),  # bf16's range is fp32's
    (torch.tensor([1e5, 1.0]), torch.float16),  # overflows fp16 even unscaled
    (torch.tensor([-3000.0, 2.0, 1e-6]), torch.float16),  # the largest magnitude is negative
    (torch.tensor([1.0]), torch.float16),
    (torch.tensor([65519.0 / 1024]), torch.float16),  # a scaled value can land just past fp16's largest number
    (torch.tensor([3.39e38 / 2.0**100, 1.0]), torch.bfloat16),  # and just past bf16's
    # made-up formats given by their widths, IEEE-style (an all-ones exponent field is inf or nan): no cast to try
    (torch.tensor([0.7, 1e-3]), (4, 3)),
    (torch.tensor([244.0 / 128, -0.01]), (4, 3)),
    (torch.tensor([248.0 / 256]), (4, 3)),
    (torch.tensor([1e-3, 5.0, -7e-9]), (6, 5)),
    (torch.tensor([-2.0**-40, 1e-12]), (6, 5)),
]

# The answer of choose_loss_scale is not here: it is judged by digests (grader.checks._keys), made by
# scripts/build_keys.py from the instructor's judge (solutions/judges/lesson03.py, never released).


def _scale_label(grads: torch.Tensor, dtype: torch.dtype) -> str:
    # 6 figures: a case just past a format's top (65519 / 1024 in fp16) must not read as a round number (64)
    return f"choose_loss_scale([{', '.join(f'{v:.6g}' for v in grads.tolist())}], {dtype})"


def _scale_of(got: Any) -> Any:
    """A one-element float tensor read as its number (as right as the float itself)."""
    if isinstance(got, torch.Tensor) and got.numel() == 1 and got.dtype.is_floating_point:
        return float(got)
    return got


def _public_choose_loss_scale(choose_loss_scale: Replay) -> None:
    """What can be said of choose_loss_scale without its answer: a number (a call that raised is judged with the rest)."""
    for grads, dtype in _SCALE_CASES:
        label = _scale_label(grads, dtype)
        try:
            got = _scale_of(call(choose_loss_scale, grads, dtype, label=label))
        except CheckFailed:
            continue  # it raised: a known mistake may (the old aim gives up where no scale rescues every gradient)
        if not is_number(got):
            fail(f"{label} returned {got!r}; return the scale as a positive float (a power of two, 2.0 ** k).")


# Said of a scale that stops where the scaled gradients would pass the format's largest number: the instructor's judge
# says it of that known mistake (exercise 1's third number), and the hints of any answer that does it in a torch dtype.
STOPS_AT_THE_LARGEST = ("the largest finite number is not where overflow starts. A cast rounds to the nearest number the "
                        "format holds, so a scaled gradient a little past the largest one still rounds back down to it: "
                        "where does inf become the nearest? Exercise 1's third number is the case to remember.")


def _hints_choose_loss_scale(choose_loss_scale: Replay) -> None:
    """An unknown answer that raised, is not positive and finite, or is not a power of two; or one that stops short of
    a torch dtype's largest number where a cast to that dtype (public: torch's own) still keeps twice the scale finite."""
    for grads, dtype in _SCALE_CASES:
        label = _scale_label(grads, dtype)
        got = float(_scale_of(call(choose_loss_scale, grads, dtype, label=label)))
        if not math.isfinite(got) or got <= 0:
            fail(f"{label} returned {got!r}; return the scale as a positive float (a power of two, 2.0 ** k).")
        if got != 2.0 ** round(math.log2(got)):
            fail(f"{label} returned {got!r}; the scale is a power of two (2.0 ** k), so scaling changes no digit of a "
                 "gradient.")
    for grads, dtype in _SCALE_CASES:
        if not isinstance(dtype, torch.dtype):
            continue  # a made-up format: no cast to try, and its limits are the exercise
        label = _scale_label(grads, dtype)
        doubled = grads.double() * (2 * float(_scale_of(call(choose_loss_scale, grads, dtype, label=label))))
        if float(doubled.abs().max()) > torch.finfo(dtype).max and bool(torch.isfinite(doubled.to(dtype)).all()):
            fail(f"{label} returns a scale that leaves room: twice it still keeps every scaled gradient finite in "
                 f"{dtype}, though it would take the largest of them past the format's largest finite number: "
                 f"{STOPS_AT_THE_LARGEST}")


def _scales_read(observation: Any) -> list:
    """The answers with every number a float and a one-element tensor read as its number."""
    return [float(v) if is_number(v) else v for v in map(_scale_of, outcomes(observation))]


check_choose_loss_scale = Keyed(
    LESSON, "choose_loss_scale", "choose_loss_scale", public=_public_choose_loss_scale,
    hints=_hints_choose_loss_scale, accept=(_scales_read,), floats=True,
    observe=_on_copies("choose_loss_scale", lambda: [(g.clone(), d) for g, d in _SCALE_CASES]),
    unknown="choose_loss_scale is not the scale these gradients call for, nor a mistake the course knows. Go back "
            "to section 5's weighing of what each choice costs, and to what a cast does at the top of a format's "
            "range (exercise 1's third number).")
check_choose_loss_scale = guard(check_choose_loss_scale, "choose_loss_scale", _FORMAT_SHORTCUTS)  # copy test r4 too


# --- stall point ----------------------------------------------------------------------------


_STALL_RUN = ((torch.float16, 1.0), (torch.float16, 0.01), (torch.bfloat16, 1.0), (torch.bfloat16, 0.01), (torch.float16, 3.0))
_STALL_FP32 = (1.0, 2.0**-10, 0.01, 3.0)


def _as_float(got: Any, label: str) -> float:
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        return float(got)
    if not is_number(got):
        fail(f"{label} returned {got!r}; return the value as a float.")
    return float(got)


_STALL_FP64 = (1.0, 0.01)  # float64: billions of years of additions to run, so only reasoning answers these
# Made-up formats given by their widths, laid out as fp16 is (as decode and choose_loss_scale take them): no dtype
# holds them, so no sum can be run and no search over a dtype answers them; only the format's gaps do. A step that
# is a normal number, one the format must round (1.05 in (4, 3)) and one among the subnormals (2**-16 in (5, 2)).
_STALL_MADE_UP = (((5, 4), 1.0), ((4, 3), 1.05), ((6, 5), 0.01), ((3, 2), 0.25), ((5, 2), 2.0**-16))
_STALL_CASES = [*_STALL_RUN, *((torch.float32, s) for s in _STALL_FP32), *((torch.float64, s) for s in _STALL_FP64),
                *_STALL_MADE_UP]


def _public_stall_point(stall_point: Replay) -> None:
    """What can be said of stall_point without its answer: a float, for a torch dtype and for a made-up format."""
    for dtype, step in _STALL_CASES:
        label = f"stall_point({dtype}, {step})"
        try:
            got = call(stall_point, dtype, step, label=label)
        except CheckFailed as exc:
            if isinstance(dtype, torch.dtype):
                raise
            fail(f"{exc}. Here the format is a made-up one, given by its widths (exponent bits, mantissa bits) and "
                 "laid out as fp16 is, as in exercises 1 and 6: no dtype holds it, so no sum can be run in it. Work "
                 "out from the format itself where the sum stops.")
        _as_float(got, label)


def _hints_stall_point(stall_point: Replay) -> None:
    """An unknown answer: a case whose value still grows when the step is added, or one already stalled below it."""
    for dtype, step in _STALL_CASES:
        got = _as_float(call(stall_point, dtype, step), f"stall_point({dtype}, {step})")
        if (dtype != torch.float32 and step in _STALL_FP32
                and got == _as_float(call(stall_point, torch.float32, step), "fp32")):
            fail(f"stall_point({dtype}, {step}) returned the same as for torch.float32: your answer does not depend "
                 "on the format the sum is held in.")
        if not math.isfinite(got) or got <= 0:
            fail(f"stall_point({dtype}, {step}) returned {got!r}: a running sum of a positive step stops at a "
                 "positive number.")
        if not isinstance(dtype, torch.dtype):
            continue  # a made-up format: no cast to try it with
        total, add = torch.tensor(got, dtype=dtype), torch.tensor(step, dtype=dtype)
        if not math.isfinite(float(total)) or float(total + add) != float(total):
            fail(f"stall_point({dtype}, {step}) returned {got:g}, and there the sum still grows: adding the step "
                 f"to it, in {dtype}, gives a different number.")
        below = torch.nextafter(total, torch.zeros((), dtype=dtype))
        if float(below + add) == float(below):
            fail(f"stall_point({dtype}, {step}) returned {got:g}, but the sum stops growing before it gets there: "
                 f"the {dtype} number just below it does not grow either.")


check_stall_point = Keyed(
    LESSON, "stall_point", "stall_point", _STALL_CASES, public=_public_stall_point, hints=_hints_stall_point,
    unknown="stall_point is not where adding the step over and over in that format stops growing, nor a mistake the "
            "course knows. Go back to section 4: what decides whether one addition changes the sum.")
# record: the cell after the check measures running sums, which are its answers: it waits until the check has passed
check_stall_point = guard(check_stall_point, "stall_point", _FORMAT_SHORTCUTS, record=True)


# --- the scaler -----------------------------------------------------------------------------

_OVERFLOWS = [False, False, False, True, False, False, True, True, False, False, False, False,
              False, False, False, True, False, False, False, False, False, False, False]
_SCALER_CASES = (
    (dict(init_scale=1024.0, growth_interval=3), _OVERFLOWS),
    (dict(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2),
     [False, True, False, False, False, True, False, False]),
)
F, T = False, True
# Gradient accumulation: update(found_inf) after every micro-batch, the optimizer stepping once a window. Windows clean,
# overflowing first, last, twice, and growth that needs several clean windows. What each should give is in the keys.
_WINDOW_CASES = (
    (dict(init_scale=1024.0, growth_interval=2, accumulation_steps=2),
     [F, F, F, F, F, F, T, F, F, F, F, T, T, T, F, F, F, F, F, F, F, F]),
    (dict(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=1, accumulation_steps=3),
     [F, F, F, T, F, F, F, F, F, F, T, T, F, F, F]),
)
del F, T


@course_only()
def _drive_gradscaler(steps: int, overflows, **settings) -> list[tuple[bool, float]]:
    """torch.amp.GradScaler on the CPU for `steps` steps, step i overflowing when overflows(i, scale): (applied, scale after)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = torch.amp.GradScaler("cpu", **settings)
        weight = torch.nn.Parameter(torch.ones(1))
        optimizer = torch.optim.SGD([weight], lr=0.1)
        trace = []
        for i in range(steps):
            scaler.scale(torch.ones(()))  # GradScaler sets up its scale on the first scale() call
            scale = float(scaler.get_scale())
            weight.grad = torch.full((1,), math.inf if overflows(i, scale) else scale)  # unscaled: 1.0, a step that shows
            before = weight.detach().clone()
            scaler.step(optimizer)
            scaler.update()
            trace.append((not torch.equal(before, weight.detach()), float(scaler.get_scale())))
    return trace


@course_only()
def gradscaler_trace(found_infs: list[bool], **settings) -> list[tuple[bool, float]]:
    """torch.amp.GradScaler on the CPU fed a given sequence of overflows: (step applied, scale after) per step."""
    return _drive_gradscaler(len(found_infs), lambda i, scale: found_infs[i], **settings)


FORECAST_SETTINGS = dict(init_scale=2.0**30, growth_interval=10)  # the notebook's section 6 settings
FORECAST_CEILING = 2.0**24  # the largest scale that keeps the gradients finite, the same at every step
_FORECAST_STEPS, _FORECAST_FROM = 210, 100  # run this long; the long run is counted from here on (ten 11-step cycles)


@course_only()
def _gradscaler_with_ceiling(ceiling: float, steps: int, **settings) -> list[bool]:
    """torch.amp.GradScaler on the CPU when a step overflows exactly when its scale exceeds `ceiling`: skipped, per step."""
    return [not applied for applied, _ in _drive_gradscaler(steps, lambda i, scale: scale > ceiling, **settings)]


@course_only()
@functools.lru_cache(maxsize=1)
@sealed(LESSON, "SCALER_FORECAST")
def _forecast_reference() -> tuple[int, float]:
    """Part of SCALER_FORECAST's model or its feedback: sealed (grader.checks._sealed)."""


_FORECAST_KEYS = {"skipped at start": "count", "share skipped in the long run": "share"}


@course_only()
@sealed(LESSON, "SCALER_FORECAST")
def _forecast_mistakes(answer: dict) -> list[str]:
    """Part of SCALER_FORECAST's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "SCALER_FORECAST")
def _forecast_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of SCALER_FORECAST's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "SCALER_FORECAST")
def _forecast_said(context: dict) -> str:
    """Part of SCALER_FORECAST's model or its feedback: sealed (grader.checks._sealed)."""


check_scaler_forecast = Prediction(LESSON, "SCALER_FORECAST", _FORECAST_KEYS, points=1, band=_forecast_band,
                                   mistakes=lambda answer, context: "; ".join(_forecast_mistakes(answer)) or None,
                                   model=_forecast_said, watch=(_drive_gradscaler, _forecast_mistakes, _forecast_reference, _gradscaler_with_ceiling,
                                          gradscaler_trace))


def _same_flag(got: Any, want: bool) -> bool:
    """update()'s answer read as a bool: True/False, or 1/0 (a plain int is accepted, anything else is not)."""
    return got is want or (type(got) is int and got == int(want))


def _attr(obj: Any, name: str) -> Any:
    """obj.name, or the string 'missing' when the learner's object has no such attribute (or reading it raises)."""
    try:
        return getattr(obj, name)
    except Exception:  # noqa: BLE001  a learner's property may raise
        return "missing"


def _drive(LossScaler: type, settings: dict, flags: list[bool]) -> dict:
    """Make a LossScaler with `settings`, call update(flag) for each flag: its start scale and (returned, scale) per step."""
    mine = call(LossScaler, label=f"LossScaler({settings})", **settings)
    update = _attr(mine, "update")
    run = {"init": _attr(mine, "scale"), "has_update": callable(update), "steps": []}
    if callable(update):
        for flag in flags:
            got = call(update, flag, label=f"update(found_inf={flag})")
            run["steps"].append([got, _attr(mine, "scale")])
    return run


def _observe_loss_scaler(LossScaler: type) -> dict:
    require_callable(LossScaler, "LossScaler")
    default = call(LossScaler, label="LossScaler()")
    windows = []
    for settings, flags in _WINDOW_CASES:
        try:  # a scaler without accumulation_steps still hears what the check says of its other runs first
            windows.append(_drive(LossScaler, settings, flags))
        except CheckFailed as exc:
            windows.append({"raised": str(exc)})
    return {"default_scale": _attr(default, "scale"),
            "runs": [_drive(LossScaler, settings, flags) for settings, flags in _SCALER_CASES], "windows": windows}


def _judge_loss_scaler(observation: dict) -> None:
    """LossScaler's scale and skipped steps match GradScaler's on the same overflows."""
    default = observation["default_scale"]
    if not is_number(default) or float(default) != 65536.0:
        fail(f"LossScaler().scale is {default!r}; it should start at init_scale (65536.0 by default).")
    runs = observation["runs"]
    if len(runs) != len(_SCALER_CASES):
        fail("the check could not read what your LossScaler did (a recording of the wrong length)")
    for (settings, flags), run in zip(_SCALER_CASES, runs):
        if not run["has_update"]:
            fail("LossScaler has no update(found_inf) method; add one that returns True when the step is applied.")
        if not is_number(run["init"]) or float(run["init"]) != settings["init_scale"]:
            fail(f"LossScaler(init_scale={settings['init_scale']}).scale is {run['init']!r}; "
                 "keep the current scale in self.scale, starting at init_scale.")
        want = gradscaler_trace(flags, **settings)
        steps = run["steps"]
        if len(steps) != len(flags):
            fail("the check could not read what your LossScaler did (a recording of the wrong length)")
        before = float(run["init"])
        for i, (found_inf, (applied, scale), (got, mine_scale)) in enumerate(zip(flags, want, steps)):
            where = f"at step {i} (overflows so far: {[j for j in range(i + 1) if flags[j]]}, settings {settings})"
            if not _same_flag(got, applied):
                fail(f"update(found_inf={found_inf}) returned {got!r} {where}: is the step this update follows "
                     "worth applying?")
            if not is_number(mine_scale):
                fail(f"after update() your LossScaler's scale is {mine_scale!r}; keep a number in self.scale.")
            mine_scale = float(mine_scale)
            if mine_scale != scale:
                if found_inf and mine_scale >= before:
                    fail(f"On an overflow {where} your scale stayed at {mine_scale:g} or rose: what does an overflow "
                         "say about the scale?")
                if not found_inf and scale > before and mine_scale == before:
                    fail(f"{where} GradScaler's scale grew and yours stayed at {mine_scale:g}. A scaler that does "
                         "not grow there leaves the scale low after an early overflow, and small gradients underflow "
                         "again.")
                if not found_inf and mine_scale > before and scale == before:
                    fail(f"Your scale grew to {mine_scale:g} {where}, and GradScaler's did not: what has the evidence "
                         "said since the scale last changed?")
                fail(f"Your scale is {mine_scale:g} {where}, not GradScaler's: go back to what each kind of evidence "
                     "says, and when a run of it starts again.")
            before = mine_scale


def _public_loss_scaler(observation: dict) -> None:
    """What the check can say without the answer of the windows: GradScaler's own rule with one micro-batch a step
    (torch's behaviour, public), then that every run with accumulation answered every update with a number kept."""
    if not isinstance(observation, dict) or not isinstance(observation.get("windows"), list) \
            or len(observation["windows"]) != len(_WINDOW_CASES):
        fail("the check could not read what your LossScaler did (a recording of the wrong shape)")
    _judge_loss_scaler(observation)
    for (settings, flags), run in zip(_WINDOW_CASES, observation["windows"]):
        if not isinstance(run, dict) or "raised" in run:
            fail(str(run.get("raised")) if isinstance(run, dict) else "the check could not read your LossScaler")
        steps = run.get("steps")
        if not run.get("has_update") or not isinstance(steps, list) or len(steps) != len(flags):
            fail("the check could not read what your LossScaler did (a recording of the wrong length)")
        if not is_number(run.get("init")) or float(run["init"]) != settings["init_scale"]:
            fail(f"LossScaler({settings}).scale is {run.get('init')!r}; keep the current scale in self.scale, "
                 "starting at init_scale.")
        for got, scale in steps:
            if not (isinstance(got, bool) or type(got) is int) or not is_number(scale):
                fail(f"LossScaler({settings}): update() returned {got!r} and left scale {scale!r}; return a bool and "
                     "keep a number in self.scale.")


def _windows_summary(observation: dict) -> list:
    """The keyed part: (applied, scale) after every micro-batch of the runs with accumulation."""
    return [[[bool(got), float(scale)] for got, scale in run["steps"]] for run in observation["windows"]]


def _hints_loss_scaler(observation: dict) -> None:
    """An unknown answer with accumulation: what a right one has, without its values."""
    for (settings, flags), run in zip(_WINDOW_CASES, observation["windows"]):
        n = settings["accumulation_steps"]
        before = float(run["init"])
        for i, (got, scale) in enumerate(run["steps"]):
            last = (i + 1) % n == 0
            if got and not last:
                fail(f"LossScaler({settings}) said to step the optimizer after micro-batch {i % n + 1} of a window of "
                     f"{n}: what would that step apply, while the rest of the window's gradients are still to come?")
            if not last and float(scale) != before:
                fail(f"LossScaler({settings}) changed its scale after micro-batch {i % n + 1} of a window of {n}: "
                     "what scale do the gradients already summed in .grad carry, what scale would the rest of the "
                     "window's carry, and how many numbers does the one unscale divide them by?")
            before = float(scale)


# torch's own scale update and unscale, C functions: a guard watches them by identity, as the profiler reports them
_TORCH_SCALER_OPS = {torch._amp_update_scale_: "torch._amp_update_scale_ (GradScaler's own scale update)",
                     torch._amp_foreach_non_finite_check_and_unscale_:
                         "torch._amp_foreach_non_finite_check_and_unscale_ (GradScaler's own unscale)"}
for _name in ("_amp_update_scale_", "_amp_foreach_non_finite_check_and_unscale_"):  # and through torch.ops.aten
    _TORCH_SCALER_OPS.update(shortcuts.aten_targets(_name, f"torch.ops.aten.{_name} (GradScaler's own)"))

check_loss_scaler = guard(Keyed(
    LESSON, "LossScaler", observe=_observe_loss_scaler, summary=_windows_summary, public=_public_loss_scaler,
    hints=_hints_loss_scaler,
    unknown="LossScaler with accumulation_steps is not the scaler section 5 asks for, nor a mistake the course knows. "
            "Go back to what one optimizer step's evidence is when it sums a window of micro-batches: when the scale "
            "may change, which windows are worth a step, and what a run of evidence counts."), "LossScaler",
                          {gradscaler_trace: "grader.checks.lesson03.gradscaler_trace",
                           _drive_gradscaler: "the course's own GradScaler driver",
                           torch.amp.GradScaler: "torch.amp.GradScaler (the scaler it is compared with)",
                           **_TORCH_SCALER_OPS})


def _observe_scaler_on(LossScaler: type, settings: dict, flags: list) -> dict:
    require_callable(LossScaler, "LossScaler")
    return _drive(LossScaler, dict(settings), [bool(f) for f in flags])


def _judge_scaler_on(observation: dict, settings: dict, flags: list, want: list, why: str) -> None:
    steps = observation.get("steps") if isinstance(observation, dict) else None
    if not observation.get("has_update") or not isinstance(steps, list) or len(steps) != len(want):
        fail(f"{why} (your LossScaler did not answer every update)")
    for (got, scale), (applied, want_scale) in zip(steps, want):
        if not _same_flag(got, applied) or not is_number(scale) or not same(float(scale), float(want_scale)):
            fail(f"{why} (your LossScaler gave {[(g, s) for g, s in steps]!r})")


scaler_on = Check("LossScaler on given overflows", _observe_scaler_on, _judge_scaler_on, inputs=("settings", "flags"),
                  announce=False)
scaler_on.__doc__ = "Hidden test: LossScaler(**settings) fed `flags`; its (returned, scale) after each update must be `want`."

# Later exercises whose functions answer a prediction once their checks pass (copy test r10 read ZERO_SHARE off its
# own predict_vanishing): passing them before the first guess counts as asking for the answer.
answered_by(check_zero_share, check_predict_vanishing)
answered_by(check_scaler_forecast, check_loss_scaler)
