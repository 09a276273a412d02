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
import struct
import warnings
from typing import Any, Callable

import numpy as np
import torch

from grader.checks._common import Check, Prediction, Replay, call, fail, guard, is_number, record, require_callable, same
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson03.expect
from grader.checks._keys import Keyed, outcomes
from grader.floats import FORMATS, value_of
from grader.notebook import CheckFailed, NotDone
from grader.shortcuts import course_only

LESSON = "03_float_formats"  # the lesson's name in the predictions record (grader.predictions)

_WIDTHS = {name: (f.exponent_bits, f.mantissa_bits) for name, f in FORMATS.items()}

# Values every bit-level check tries: normal, negative, subnormal, zero, inf, nan, overflow, ties.
_EDGE = [1.0, -2.5, 0.1, 3.140625, -1234.5678, 65504.0, 1e-5, -6e-8, 1e-8, 0.0, -0.0,
         math.inf, -math.inf, math.nan, 1e30, 1e-40, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-12]


def _fp32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _reference_bits(x: float, fmt: str) -> int:
    """Raw bit pattern of x stored in fp32, fp16 or bf16, from libraries that already know."""
    if fmt == "fp32":
        return _fp32_bits(x)
    if fmt == "fp16":
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return int(np.array([x], dtype=np.float32).astype(np.float16).view(np.uint16)[0])
    return int(torch.tensor([x], dtype=torch.float32).to(torch.bfloat16).view(torch.int16)[0]) & 0xFFFF


def _split(bits: int, exponent_bits: int, mantissa_bits: int) -> tuple[int, int, int]:
    return (bits >> (exponent_bits + mantissa_bits)) & 1, (bits >> mantissa_bits) & (2**exponent_bits - 1), bits & (2**mantissa_bits - 1)


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

_DECODE_CASES = [(x, fmt) for fmt in ("fp32", "fp16", "bf16", "tf32") for x in _EDGE]


def _public_decode(decode: Replay) -> None:
    """What can be said of decode without its answer: three ints."""
    for x, fmt in _DECODE_CASES:
        _fields(decode, x, fmt)


def _hints_decode(decode: Replay) -> None:
    """An unknown answer whose tf32 fields do not fit tf32's widths."""
    for x, fmt in _DECODE_CASES:
        got = _fields(decode, x, fmt)
        if fmt == "tf32" and not (got[0] in (0, 1) and 0 <= got[1] < 256 and 0 <= got[2] < 1024):
            fail(f"decode({x!r}, 'tf32') returned {got}: tf32 fields are 1 sign bit, 8 exponent bits, 10 mantissa bits.")


check_decode = Keyed(
    LESSON, "decode", "decode", _DECODE_CASES, public=_public_decode, hints=_hints_decode,
    unknown="decode returns fields that are not what each format stores, nor a mistake the course knows. Go back to "
            "section 1: the sign bit, the exponent field with its bias, the stored mantissa bits, and what an all-zero "
            "or all-ones exponent field means; tf32 is fp32 rounded to nearest even at 10 mantissa bits.")


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


_BY_HAND = [-2.5, 1e-5, 65520.0]  # fp16, worked out on paper


def _judge_fields_by_hand(answers: Any) -> None:
    """FIELDS_BY_HAND: the fp16 fields of -2.5, 1e-5 and 65520, worked out by hand."""
    got_all = _answers(answers, "FIELDS_BY_HAND", _BY_HAND, "{-2.5: (1, 16, 0), ...}")
    fp16 = FORMATS["fp16"]
    for x in _BY_HAND:
        got = got_all[x]
        if not isinstance(got, (tuple, list)) or len(got) != 3 or not all(_is_int(v) for v in got):
            fail(f"FIELDS_BY_HAND[{x!r}] is {got!r}; write three integers (sign, exponent, mantissa).")
        got = tuple(int(v) for v in got)
        want = _split(_reference_bits(x, "fp16"), 5, 10)
        if got == want:
            continue
        sign, exponent, mantissa = got
        if not (0 <= exponent < 32 and 0 <= mantissa < 1024 and sign in (0, 1)):
            if exponent < 0:
                fail(f"FIELDS_BY_HAND[{x!r}] has exponent {exponent}: the stored field is an unsigned integer, the power "
                     "of two plus the bias (15 in fp16). A number below the smallest normal (2⁻¹⁴ ≈ 6.1e-5) has no "
                     "exponent to spare: it is stored as a subnormal, with the exponent field all zeros.")
            if mantissa >= 1024:
                fail(f"FIELDS_BY_HAND[{x!r}] has mantissa {mantissa}, more than 10 bits hold: the hidden leading 1 "
                     "is not stored, only the 10 bits after it.")
            fail(f"FIELDS_BY_HAND[{x!r}] is {got}: fp16 fields are 1 sign bit (0 or 1), 5 exponent bits (0 to 31) and "
                 "10 mantissa bits (0 to 1023).")
        if x == 65520.0 and got == (0, 30, 1023):
            fail("FIELDS_BY_HAND[65520.0] is fp16's largest finite number, 65,504: a cast does not stop at the largest "
                 "number. How far apart are fp16's numbers up there, where does 65,520 fall between its neighbours "
                 "(one of them past the largest exponent), and which way does a cast send a tie?")
        if x == 1e-5 and exponent == 0 and abs(mantissa - 2 * 167.77) < 1.5:
            fail(f"FIELDS_BY_HAND[1e-5] is {got}: that reads a zero exponent field as 2⁰⁻¹⁵. An all-zero exponent "
                 "field stands for the same power of two as the smallest normal number, without the hidden 1.")
        if x == 1e-5 and exponent == 0 and abs(mantissa - 167.77) < 1.5:
            fail(f"FIELDS_BY_HAND[1e-5] is {got}: a cast rounds to the nearest mantissa, not down.")
        if x == 1e-5 and exponent != 0:
            fail(f"FIELDS_BY_HAND[1e-5] has exponent field {exponent}, but 1e-5 is below fp16's smallest normal number "
                 "(2⁻¹⁴ ≈ 6.1e-5): it is a subnormal, stored with the exponent field all zeros and no hidden 1.")
        if x == -2.5 and sign == 0:
            fail("FIELDS_BY_HAND[-2.5] has sign 0: the sign bit is 1 for a negative number; the other fields hold "
                 "the magnitude, 2.5.")
        if x == -2.5 and exponent == 1:
            fail("FIELDS_BY_HAND[-2.5] has exponent 1, the power of two itself: the stored field adds the bias, 15.")
        if x == -2.5 and mantissa in (1, 25, 5):
            fail(f"FIELDS_BY_HAND[-2.5] has mantissa {mantissa}: the mantissa field is the binary fraction after the "
                 "leading 1, read as a 10-bit integer. 2.5 = 1.25 × 2¹ and .25 is binary .01, so the bits are "
                 "0100000000.")
        fail(f"FIELDS_BY_HAND[{x!r}] is {got}, fields that store {value_of(*got, fp16)!r} in fp16; that is not the fp16 "
             f"value nearest to {x!r}. Find the power of two first, then the 10 bits after the leading 1 (section 1 "
             "says what an all-zero or all-ones exponent field means).")


check_fields_by_hand = Check("FIELDS_BY_HAND", _prediction("FIELDS_BY_HAND"), _judge_fields_by_hand)


# --- round_to -------------------------------------------------------------------------------


def _round_input() -> torch.Tensor:
    """The edge values, exact ties of tf32 and bf16 either side of zero, and 200 random values over 14 decades (fixed)."""
    g = torch.Generator().manual_seed(3)
    ties = [1.0 + 2.0**-11, 3.0 + 2.0**-10, 1.0 + 2.0**-8, 3.0 + 2.0**-7, 3.4028234663852886e38]
    return torch.cat([torch.tensor(_EDGE + ties + [-t for t in ties], dtype=torch.float32),
                      torch.randn(200, generator=g) * 10.0 ** torch.randint(-9, 5, (200,), generator=g)])


# (format, tie rule): every cast the check asks for; ties away only where the format is fp32's top bits
_ROUND_CASES = (("fp16", "even"), ("bf16", "even"), ("fp32", "even"), ("tf32", "even"), ("tf32", "away"), ("bf16", "away"))
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
            "Rounding to nearest works on the magnitude, keeps the sign, and settles an exact tie by the rule asked "
            "for (to even: the neighbour whose last mantissa bit is 0; away: the one of larger magnitude).")


_ROUNDED = {"1 + 2**-8 in bf16": (1 + 2.0**-8, torch.bfloat16), "1 + 3 * 2**-8 in bf16": (1 + 3 * 2.0**-8, torch.bfloat16),
            "2049 in fp16": (2049.0, torch.float16), "65519 in fp16": (65519.0, torch.float16)}


def _judge_rounded_by_hand(answers: Any) -> None:
    """ROUNDED_BY_HAND: four casts predicted before any is run."""
    got_all = _answers(answers, "ROUNDED_BY_HAND", list(_ROUNDED), '{"2049 in fp16": 2048.0, ...}')
    for label, (x, dtype) in _ROUNDED.items():
        got = got_all[label]
        if not is_number(got):
            fail(f"ROUNDED_BY_HAND[{label!r}] is {got!r}; write the number you expect the cast to give.")
        got = float(got)
        want = float(torch.tensor([x]).to(dtype).float())
        if got == want:
            continue
        fmt = "bf16" if dtype == torch.bfloat16 else "fp16"
        if got == x and label != "65519 in fp16":
            fail(f"ROUNDED_BY_HAND[{label!r}] is {got!r}, the value itself, but {fmt} cannot hold it: it has "
                 f"{FORMATS[fmt].mantissa_bits} mantissa bits, so near {x:g} its numbers are "
                 f"{2.0 ** (math.floor(math.log2(x)) - FORMATS[fmt].mantissa_bits):g} apart. Which two neighbours "
                 "is it between, and which is nearer?")
        if label == "65519 in fp16":
            if math.isinf(got):
                fail("ROUNDED_BY_HAND['65519 in fp16'] is inf, but a cast does not overflow as soon as a value passes "
                     "the largest number: it keeps the nearest, and inf stands where the next power of two would be. "
                     "How far past fp16's largest number is 65,519, against the gap between numbers there?")
            fail(f"ROUNDED_BY_HAND['65519 in fp16'] is {got!r}, which fp16 does not hold. Near 65,504 (its largest "
                 "number) fp16 numbers are 32 apart.")
        if got > want and (x - want) == (got - x):
            fail(f"ROUNDED_BY_HAND[{label!r}] is {got!r}: {x!r} is exactly halfway between two {fmt} numbers, and "
                 "you sent the tie up (away from zero). A cast sends a tie to the neighbour whose last mantissa bit "
                 "is 0 (to even), so that ties round up as often as down and a long sum is not biased.")
        if got < x < want:
            fail(f"ROUNDED_BY_HAND[{label!r}] is {got!r}: that drops the bits that do not fit (truncation). {x!r} is "
                 "exactly halfway between two numbers; a cast sends the tie to the neighbour whose last mantissa bit "
                 "is 0, which is not always the one below.")
        fail(f"ROUNDED_BY_HAND[{label!r}] is {got!r}; a cast to {fmt} keeps the {fmt} number nearest to {x!r} "
             "(at a tie, the one whose last mantissa bit is 0).")


check_rounded_by_hand = Check("ROUNDED_BY_HAND", _prediction("ROUNDED_BY_HAND"), _judge_rounded_by_hand)


# --- predict, then measure: which gradients vanish -----------------------------------------------


def _half_subnormal(e: int, m: int) -> float:
    return 2.0 ** (-(2 ** (e - 1) - 1) - m)


# (values, exponent bits, mantissa bits): fp16, bf16, fp8 e4m3, fp8 e5m2 and a made-up (6, 5) format, each with the
# exact tie at half the smallest subnormal, values just either side, one between that and the smallest normal, zero, a big one.
def _vanishing_cases() -> list[tuple]:
    cases = []
    for e, m in ((5, 10), (8, 7), (4, 3), (5, 2), (6, 5)):
        h = _half_subnormal(e, m)
        normal = 2.0 ** (1 - (2 ** (e - 1) - 1))
        cases.append(([h, h * 1.25, -h * 0.75, h * 0.5, -h * 1.5, h * 2, normal * 0.5, 0.0, 1.0, -h], e, m))
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


def _bools_read(observation: Any) -> list:
    """The answers with a bool tensor read as a list of bools (a tensor of the right bools is as right as a list)."""
    return [_as_bools(v, len(v)) if isinstance(v, torch.Tensor) and v.dim() == 1 else v for v in outcomes(observation)]


check_predict_vanishing = Keyed(
    LESSON, "predict_vanishing", "predict_vanishing", _VANISH_CASES, public=_public_predict_vanishing,
    hints=_hints_predict_vanishing, accept=(_bools_read,),
    unknown="predict_vanishing is not which values a cast to that format turns into 0, nor a mistake the course "
            "knows. Go back to section 1: the smallest number each format holds comes from its field widths (the "
            "bias, and what an all-zero exponent field stands for), and a cast rounds to the nearest number it holds, "
            "a tie to the one whose last mantissa bit is 0.")


# --- underflow ------------------------------------------------------------------------------

_UNDERFLOW_CASES = {
    torch.float16: [1e-8, 3e-8, -1e-8, 1e-7, 1e-5, -1e-5, 1e-4, 0.0, -0.0, math.inf, math.nan, 1.0, 7e4],
    torch.bfloat16: [1e-40, 1e-45, -1e-45, 1e-30, 0.0, 2e-8, math.nan, 1.0],
}


# --- predict the share that vanishes ---------------------------------------------------------------

_SPREAD = (-12, -2, 10001)  # torch.logspace(-12, -2, 10001): made-up magnitudes over ten decades
_SHARE_TOLERANCE = 0.02


@course_only()
def _zero_share(dtype: torch.dtype) -> float:
    """Share of torch.logspace(-12, -2, 10001) that a cast to dtype turns into 0 (measured)."""
    spread = torch.logspace(*_SPREAD)
    return float((spread.to(dtype) == 0).float().mean())


@course_only()
def _share_below(threshold: float, inclusive: bool = True) -> float:
    spread = torch.logspace(*_SPREAD).double()
    return float(((spread <= threshold) if inclusive else (spread < threshold)).double().mean())




@course_only()
def _zero_share_mistake(answer: dict) -> str | None:
    """ZERO_SHARE's known mistakes, in words with no value in them; None when the answer matches none."""
    fp16, bf16 = answer["fp16"], answer["bf16"]
    if fp16 > 1:
        return "a share is a fraction between 0 and 1 (0.25 for a quarter, not 25)"
    if bf16 != "none":
        return ("bf16 has fewer mantissa bits, but those set its precision, not its range: its 8 exponent bits are "
                "fp32's, so its smallest numbers lie far below anything in these ten decades")
    if abs(fp16 - _share_below(2.0**-14, inclusive=False)) <= _SHARE_TOLERANCE:
        return ("the fp16 share is the share below its smallest normal number; below it come the subnormals, which "
                "keep small values nonzero with fewer digits")
    if abs(fp16 - _share_below(2.0**-24, inclusive=False)) <= _SHARE_TOLERANCE:
        return ("the fp16 share stops at the smallest subnormal; a value between half of it and it is nearer to the "
                "subnormal than to 0, so the cast keeps it")
    if abs(fp16 - _zero_share(torch.float16)) > _SHARE_TOLERANCE:
        return ("the magnitudes are spread evenly in log scale, so the share is the part of the ten decades below "
                "fp16's cut-off, the value nearer to 0 than to its smallest number")
    return None


@course_only()
def _zero_share_band(first: dict, context: dict) -> tuple[float, str]:
    """ZERO_SHARE's first guess: one half for each format (fp16 within 0.02 of the measured cast, bf16 'none')."""
    right16 = first["fp16"] <= 1 and abs(first["fp16"] - _zero_share(torch.float16)) <= _SHARE_TOLERANCE
    right_bf = first["bf16"] == "none"
    mistake = _zero_share_mistake(first)
    return (right16 + right_bf) / 2, ("your first guess matches the casts" if right16 and right_bf
                                      else f"your first guess: {mistake}")


check_zero_share = Prediction(LESSON, "ZERO_SHARE", {"fp16": "number", "bf16": ("none", "some", "most")}, points=1,
                              band=_zero_share_band, mistakes=lambda answer, context: _zero_share_mistake(answer),
                              model=lambda context: (f"a cast turns {_zero_share(torch.float16):.1%} of the spread into 0 "
                                                     "in fp16, none of it in bf16"), watch=(_share_below, _zero_share, _zero_share_mistake,))


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
]

# The answer of choose_loss_scale is not here: it is judged by digests (grader.checks._keys), made by
# scripts/build_keys.py from the instructor's judge (solutions/judges/lesson03.py, never released).


def _scale_label(grads: torch.Tensor, dtype: torch.dtype) -> str:
    return f"choose_loss_scale([{', '.join(f'{v:.3g}' for v in grads.tolist())}], {dtype})"


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


def _hints_choose_loss_scale(choose_loss_scale: Replay) -> None:
    """An unknown answer that raised, is not positive and finite, or is not a power of two."""
    for grads, dtype in _SCALE_CASES:
        label = _scale_label(grads, dtype)
        got = float(_scale_of(call(choose_loss_scale, grads, dtype, label=label)))
        if not math.isfinite(got) or got <= 0:
            fail(f"{label} returned {got!r}; return the scale as a positive float (a power of two, 2.0 ** k).")
        if got != 2.0 ** round(math.log2(got)):
            fail(f"{label} returned {got!r}; the scale is a power of two (2.0 ** k), so scaling changes no digit of a "
                 "gradient.")


def _scales_read(observation: Any) -> list:
    """The answers with every number a float and a one-element tensor read as its number."""
    return [float(v) if is_number(v) else v for v in map(_scale_of, outcomes(observation))]


check_choose_loss_scale = Keyed(
    LESSON, "choose_loss_scale", "choose_loss_scale", public=_public_choose_loss_scale,
    hints=_hints_choose_loss_scale, accept=(_scales_read,), floats=True,
    observe=_on_copies("choose_loss_scale", lambda: [(g.clone(), d) for g, d in _SCALE_CASES]),
    unknown="choose_loss_scale is not the scale these gradients call for, nor a mistake the course knows. Weigh what "
            "each choice costs: a scaled gradient that overflows costs the whole step, one that underflows costs "
            "its own small share of the update, and a power of two costs a finite gradient no digit; and a cast "
            "overflows only where its nearest number is past the largest.")


# --- stall point ----------------------------------------------------------------------------


_STALL_RUN = ((torch.float16, 1.0), (torch.float16, 0.01), (torch.bfloat16, 1.0), (torch.bfloat16, 0.01), (torch.float16, 3.0))
_STALL_FP32 = (1.0, 2.0**-10, 0.01, 3.0)


def _as_float(got: Any, label: str) -> float:
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        return float(got)
    if not is_number(got):
        fail(f"{label} returned {got!r}; return the value as a float.")
    return float(got)


_STALL_CASES = [*_STALL_RUN, *((torch.float32, s) for s in _STALL_FP32)]


def _public_stall_point(stall_point: Replay) -> None:
    """What can be said of stall_point without its answer: a float."""
    for dtype, step in _STALL_CASES:
        label = f"stall_point({dtype}, {step})"
        _as_float(call(stall_point, dtype, step, label=label), label)


def _hints_stall_point(stall_point: Replay) -> None:
    """An unknown answer that ignores the dtype."""
    for dtype, step in _STALL_RUN:
        got, fp32 = call(stall_point, dtype, step), call(stall_point, torch.float32, step)
        if float(got) == float(fp32):
            fail(f"stall_point({dtype}, {step}) returned {float(got):g}, the same as for torch.float32: use the eps of "
                 "the dtype you were given.")


check_stall_point = Keyed(
    LESSON, "stall_point", "stall_point", _STALL_CASES, public=_public_stall_point, hints=_hints_stall_point,
    unknown="stall_point is not where adding the step over and over in that dtype stops growing, nor a mistake the "
            "course knows: the sum stops where the step is at most half the gap to the next number.")


# --- the scaler -----------------------------------------------------------------------------

_OVERFLOWS = [False, False, False, True, False, False, True, True, False, False, False, False,
              False, False, False, True, False, False, False, False, False, False, False]
_SCALER_CASES = (
    (dict(init_scale=1024.0, growth_interval=3), _OVERFLOWS),
    (dict(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2),
     [False, True, False, False, False, True, False, False]),
)


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
def _forecast_reference() -> tuple[int, float]:
    """GradScaler itself on the forecast's case: steps skipped before the first applied one, and the long-run share."""
    skipped = _gradscaler_with_ceiling(FORECAST_CEILING, _FORECAST_STEPS, **FORECAST_SETTINGS)
    tail = skipped[_FORECAST_FROM:]
    return next(i for i, s in enumerate(skipped) if not s), sum(tail) / len(tail)


_FORECAST_KEYS = {"skipped at start": "number", "share skipped in the long run": "number"}


@course_only()
def _forecast_mistakes(answer: dict) -> list[str]:
    """What is off in a SCALER_FORECAST, in words with no value in them (empty when both parts are right)."""
    want_start, want_share = _forecast_reference()
    start, share = answer["skipped at start"], answer["share skipped in the long run"]
    interval = FORECAST_SETTINGS["growth_interval"]
    said = []
    if start != want_start:
        said.append("count the start again: each skipped step halves the scale from 2³⁰, and the first step applied "
                    "is the first whose scale fits; is 2²⁴ itself one that overflows?" if abs(start - want_start) == 1
                    else "the start: the scaler begins far above the ceiling, and each overflow halves it")
    if share > 1:
        said.append("a share is a fraction between 0 and 1")
    elif abs(share - want_share) > 0.003:
        if abs(share - 1 / interval) <= 0.003:
            said.append("the long run: the skipped step is not one of the good steps in a row that make the scale grow; "
                        "after an overflow the count starts again")
        elif abs(share - 0.5) <= 0.01:
            said.append("the long run: the scale grows only after growth_interval good steps in a row, not after each")
        else:
            said.append("the long run: the scaler never stops probing; follow the scale once it is at the ceiling, "
                        "through one growth and the overflow that follows")
    return said


@course_only()
def _forecast_band(first: dict, context: dict) -> tuple[float, str]:
    """SCALER_FORECAST's first guess against GradScaler run on the case: one half for each part."""
    said = _forecast_mistakes(first)
    fraction = max(0, 2 - len(said)) / 2  # one half for each part that is right
    return fraction, "your first guess is what GradScaler does" if not said else "your first guess: " + "; ".join(said)


@course_only()
def _forecast_said(context: dict) -> str:
    start, share = _forecast_reference()
    return f"GradScaler skips {start} steps at the start and {share:.3f} of the steps in the long run"


check_scaler_forecast = Prediction(LESSON, "SCALER_FORECAST", _FORECAST_KEYS, points=1, band=_forecast_band,
                                   mistakes=lambda answer, context: "; ".join(_forecast_mistakes(answer)) or None,
                                   model=_forecast_said, watch=(_drive_gradscaler, _forecast_mistakes, _forecast_reference, _gradscaler_with_ceiling,))


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
    return {"default_scale": _attr(default, "scale"),
            "runs": [_drive(LossScaler, settings, flags) for settings, flags in _SCALER_CASES]}


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
        good_run, before = 0, float(run["init"])
        for i, (found_inf, (applied, scale), (got, mine_scale)) in enumerate(zip(flags, want, steps)):
            where = f"at step {i} (overflows so far: {[j for j in range(i + 1) if flags[j]]}, settings {settings})"
            if not _same_flag(got, applied):
                if found_inf:
                    fail(f"update(found_inf=True) returned {got!r} {where}: skip the step on overflow, return False.")
                fail(f"update(found_inf=False) returned {got!r} {where}: a step without overflow is applied, return True.")
            if not is_number(mine_scale):
                fail(f"after update() your LossScaler's scale is {mine_scale!r}; keep a number in self.scale.")
            mine_scale = float(mine_scale)
            if mine_scale != scale:
                if found_inf and mine_scale >= before:
                    fail(f"On an overflow {where} your scale stayed at {mine_scale:g}; multiply it by backoff_factor "
                         "or the next step overflows again.")
                if not found_inf and scale > before and mine_scale == before:
                    fail(f"After {settings['growth_interval']} good steps in a row {where}, GradScaler grows the scale; "
                         f"yours stayed at {mine_scale:g}. A scaler that never grows back leaves the scale "
                         "low after one early overflow, and small gradients underflow again.")
                if not found_inf and mine_scale > before and scale == before:
                    if good_run < settings["growth_interval"] and any(flags[:i]):
                        fail(f"Your scale grew to {mine_scale:g} {where} after only {good_run + 1} good step(s) since the "
                             "last overflow: an overflow resets the count of good steps to zero.")
                    fail(f"Your scale grew to {mine_scale:g} {where}; GradScaler grows only after growth_interval good steps in a row.")
                fail(f"Your scale is {mine_scale:g} {where}, not GradScaler's: grow by growth_factor after growth_interval good "
                     "steps in a row, multiply by backoff_factor on an overflow.")
            good_run = 0 if found_inf else good_run + 1
            if good_run == settings["growth_interval"]:
                good_run = 0
            before = mine_scale


check_loss_scaler = guard(Check("LossScaler", _observe_loss_scaler, _judge_loss_scaler), "LossScaler",
                          {gradscaler_trace: "grader.checks.lesson03.gradscaler_trace",
                           _drive_gradscaler: "the course's own GradScaler driver",
                           torch.amp.GradScaler: "torch.amp.GradScaler (the scaler it is compared with)"})


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
