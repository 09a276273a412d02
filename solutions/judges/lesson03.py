"""The instructor's judges of lesson 03's keyed checks: they hold the answers, so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson03.py) and keeps
only digests and messages in grader/checks/keys/03_float_formats.json; the learner's check (grader/checks/lesson03.py)
judges by those. A message here names the kind of mistake and the principle, never the expected value nor the
recipe: it is what a learner who made that mistake reads.

References are independent of the learner's route: struct for fp32 bits, numpy's float16 for fp16 bits, torch's own
casts for bf16, rounding to nearest on the fp32 bits for tf32 and ties away, and a running sum actually run in the
dtype for stall points.
"""

from __future__ import annotations

import math
import struct
from typing import Callable

import torch

import numpy as np
import warnings
from fractions import Fraction

from grader.checks._common import call, close, fail, is_number
from grader.checks.lesson03 import (_BY_HAND, _BY_HAND_WIDTHS, _EDGE, _MADE_UP, _ROUND_CASES, _ROUNDED, _STALL_FP32, _STALL_FP64,
                                    _SCALE_CASES, _STALL_MADE_UP, _STALL_RUN, _ROUNDED_VALUES, _VANISH_CASES, _WIDTHS, _as_bools, _as_float, _fields,
                                    _round_input, _scale_label, _scale_of, _WINDOW_CASES, _public_loss_scaler,
                                    STOPS_AT_THE_LARGEST)
from grader.floats import FORMATS, value_of


class _Widths:
    """A made-up IEEE-style format (a bias, subnormals, an all-ones exponent for inf and nan): the judge's own
    arithmetic, since grader.floats refuses a made-up format's limits and values to a learner (floats.MadeUpFormat)."""

    def __init__(self, exponent_bits: int, mantissa_bits: int):
        self.exponent_bits, self.mantissa_bits = exponent_bits, mantissa_bits
        self.bias = 2 ** (exponent_bits - 1) - 1

    @property
    def max(self) -> float:
        return (2 - 2.0**-self.mantissa_bits) * 2.0 ** (2**self.exponent_bits - 2 - self.bias)


def _value(sign: int, exponent: int, mantissa: int, fmt: _Widths) -> float:
    """The number the fields store in the made-up format `fmt`."""
    if exponent == 2**fmt.exponent_bits - 1:
        return math.nan if mantissa else (-math.inf if sign else math.inf)
    if exponent == 0:  # subnormal or zero: no hidden 1, the smallest normal's power of two
        magnitude = mantissa * 2.0 ** (1 - fmt.bias - fmt.mantissa_bits)
    else:
        magnitude = (1 + mantissa * 2.0**-fmt.mantissa_bits) * 2.0 ** (exponent - fmt.bias)
    return -magnitude if sign else magnitude


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


def _encode(x: float, e: int, m: int) -> tuple[int, int, int] | None:
    """The fields of x (a Python float, rounded once) in an IEEE-style format of e exponent and m mantissa bits, found
    by exact arithmetic: every candidate's value compared with x. None for nan (any nonzero mantissa is right)."""
    if math.isnan(x):
        return None
    sign = 1 if math.copysign(1.0, x) < 0 else 0
    top = 2**e - 1
    if math.isinf(x):
        return sign, top, 0
    a, fmt = Fraction(abs(x)), _Widths(e, m)
    bias = 2 ** (e - 1) - 1
    best = (0, 0)
    for exponent in range(top):  # every finite field pair, found by value: the nearest, a tie to the even mantissa
        step = Fraction(2) ** (max(exponent, 1) - bias - m)
        base = Fraction(2) ** (exponent - bias) if exponent else Fraction(0)
        n = max(0, min(2**m - 1, int((a - base) / step)))
        for mantissa in {n, min(n + 1, 2**m - 1)}:
            v = base + mantissa * step
            b = Fraction(_value(0, *best, fmt))
            if abs(v - a) < abs(b - a) or (abs(v - a) == abs(b - a) and mantissa % 2 == 0 and best[1] % 2):
                best = (exponent, mantissa)
    largest = Fraction(_value(0, top - 1, 2**m - 1, fmt))
    half_gap = Fraction(2) ** (top - 1 - bias - m - 1)
    if a >= largest + half_gap:  # nearer the next power of two than the largest number, or a tie (largest is odd)
        return sign, top, 0
    return sign, *best
def _tf32_problem(x: float, stored: float, mantissa: int) -> str | None:
    """Why `stored` is not x rounded to nearest even in tf32 (None when it is)."""
    if math.isnan(x):
        return None if math.isnan(stored) else "nan must stay nan"
    if math.isinf(x):
        return None if stored == x else "inf must stay inf"
    exponent = (_fp32_bits(x) >> 23) & 0xFF
    ulp = 2.0 ** (max(exponent, 1) - 127 - 10)  # tf32 spacing in x's binade
    gap = abs(stored - x)
    if gap > ulp / 2:
        return "not the nearest tf32 value"
    if gap == ulp / 2 and mantissa % 2:
        return "a tie that went to the odd mantissa"
    return None


def _judge_decode(decode: Callable[[float, str], tuple[int, int, int]]) -> None:
    """decode(x, fmt): the raw (sign, exponent, mantissa) fields of x stored in fmt."""
    got = _fields(decode, 1.0, "fp32")
    if got[1] == 0:
        fail("decode(1.0, 'fp32') returned exponent 0: 1.0 = 1.0·2⁰, and the stored field "
             "adds the bias to the power of two. Return the raw stored field, not exponent − bias.")
    if got[2] == 2**23:
        fail("decode(1.0, 'fp32') put the hidden leading 1 into the mantissa: return the 23 stored bits only.")
    for fmt in ("fp32", "fp16", "bf16"):
        e_bits, m_bits = _WIDTHS[fmt]
        for x in _EDGE:
            got = _fields(decode, x, fmt)
            want = _split(_reference_bits(x, fmt), e_bits, m_bits)
            if math.isnan(x):
                if got[1] != 2**e_bits - 1 or got[2] == 0:
                    fail(f"decode(nan, {fmt!r}) returned {got}: nan has an all-ones exponent field and a nonzero mantissa.")
                continue
            if got == want:
                continue
            if fmt == "bf16" and got == _split(_reference_bits(x, fmt), 5, 10):
                fail(
                    f"decode({x!r}, 'bf16') returned {got}: that reads the 16 bits with fp16's field widths (5, 10). "
                    "bf16 is the top half of fp32: 1 sign bit, 8 exponent bits, 7 mantissa bits."
                )
            if got[1] == want[1] - (2 ** (e_bits - 1) - 1) and want[1] not in (0, 2**e_bits - 1):
                fail(f"decode({x!r}, {fmt!r}) returned exponent {got[1]}: return the raw stored field, not exponent − bias.")
            if got[2] == want[2] + 2**m_bits:
                fail(f"decode({x!r}, {fmt!r}) included the hidden leading 1 in the mantissa: return only the {m_bits} stored bits.")
            what = "zero" if x == 0 else "a subnormal" if want[1] == 0 else "inf" if math.isinf(x) else "a negative number" if x < 0 else "a number"
            fail(
                f"decode({x!r}, {fmt!r}) returned {got}, fields that are not what {fmt} stores for it; check how you handle {what}. "
                f"{fmt} has {e_bits} exponent bits and {m_bits} mantissa bits."
            )
    tf32 = FORMATS["tf32"]
    for x in _EDGE:
        got = _fields(decode, x, "tf32")
        if not (got[0] in (0, 1) and 0 <= got[1] < 256 and 0 <= got[2] < 1024):
            fail(f"decode({x!r}, 'tf32') returned {got}: tf32 fields are 1 sign bit, 8 exponent bits, 10 mantissa bits.")
        stored = value_of(*got, tf32)
        problem = _tf32_problem(x, stored, got[2])
        if problem and got == _split(_fp32_bits(x) >> 13, 8, 10):
            fail(
                f"decode({x!r}, 'tf32') gives fields {got} that store {stored!r}, a value farther from x than the next "
                "tf32 number up: you truncated the mantissa to 10 bits (dropped the low 13 bits of fp32). "
                "tf32 rounds to nearest (ties to even), like every cast."
            )
        if problem:
            fail(f"decode({x!r}, 'tf32') gives fields {got} that are not what tf32 stores for it: {problem}.")
    for e_bits, m_bits in _MADE_UP:
        fmt = (e_bits, m_bits)
        for x in _EDGE:
            got = _fields(decode, x, fmt)
            want = _encode(x, e_bits, m_bits)
            if want is None:
                if got[1] != 2**e_bits - 1 or got[2] == 0:
                    fail(f"decode(nan, {fmt}) returned {got}, fields that do not store a nan in that format.")
                continue
            if got == want:
                continue
            what = ("zero" if x == 0 else "a value past the format's largest number" if want[1] == 2**e_bits - 1
                    else "a value below the format's smallest normal number" if want[1] == 0 else "a number")
            fail(f"decode({x!r}, {fmt}) returned {got}, fields that are not what a format of {e_bits} exponent bits "
                 f"and {m_bits} mantissa bits stores for it: check how you handle {what}.")


def _judge_fields_by_hand(answers: dict) -> None:
    """FIELDS_BY_HAND: the fields of -2.5, 2e-5 and 65280 in the (5, 6) format, worked out by hand."""
    e_bits, m_bits = _BY_HAND_WIDTHS
    for x in _BY_HAND:
        got = tuple(int(v) for v in answers[x])
        want = _encode(x, e_bits, m_bits)
        if got == want:
            continue
        sign, exponent, mantissa = got
        steps = x / 2.0 ** (2 - 2 ** (e_bits - 1) - m_bits)  # 2e-5 in units of the subnormals' spacing
        if x == 65280.0 and got == (0, 2**e_bits - 2, 2**m_bits - 1):
            fail("FIELDS_BY_HAND[65280.0] is the format's largest finite number: a cast does not stop at the largest "
                 "number. How far apart are the format's numbers up there, where does 65,280 fall between its "
                 "neighbours, and which way does a cast send a tie?")
        if x == 2e-5 and exponent == 0 and abs(mantissa - 2 * steps) < 1.5:
            fail("FIELDS_BY_HAND[2e-5] reads an all-zero exponent field as 2 to the power 0 minus the bias. Section 1: "
                 "which power of two does an all-zero exponent field stand for?")
        if x == 2e-5 and exponent == 0 and mantissa == math.floor(steps):
            fail("FIELDS_BY_HAND[2e-5] drops the bits that do not fit: a cast keeps the nearest number, not the one "
                 "below.")
        if x == 2e-5 and exponent != 0:
            fail("FIELDS_BY_HAND[2e-5] is stored as a normal number, but 2e-5 is below the format's smallest normal "
                 "number (its exponent is fp16's: section 1's table): how is a number that small stored?")
        if x == -2.5 and sign == 0:
            fail("FIELDS_BY_HAND[-2.5] has sign 0: which sign bit does a negative number carry?")
        if x == -2.5 and exponent == 1:
            fail("FIELDS_BY_HAND[-2.5] stores the power of two itself as the exponent field: section 1 says what is "
                 "added to it before it is stored.")
        if x == -2.5 and mantissa in (1, 25, 5):
            fail("FIELDS_BY_HAND[-2.5] has a mantissa read as decimal digits: the mantissa field holds the binary "
                 "fraction after the leading 1, read as a 6-bit integer.")
        fail(f"FIELDS_BY_HAND[{x!r}] is not what the (5, 6) format stores for {x!r}. Find the power of two first, "
             "then the 6 bits after the leading 1 (section 1 says what an all-zero or all-ones exponent field means).")


def _judge_rounded_by_hand(answers: dict) -> None:
    """ROUNDED_BY_HAND: four casts into the (5, 6) format, worked out before any is run."""
    e_bits, m_bits = _BY_HAND_WIDTHS
    fmt = _Widths(e_bits, m_bits)
    top = _ROUNDED_VALUES[-1]  # the one past the format's largest number
    for label, x in zip(_ROUNDED, _ROUNDED_VALUES):
        got = float(answers[label])
        sign, exponent, mantissa = _encode(x, e_bits, m_bits)
        want = math.inf if exponent == 2**e_bits - 1 else _value(sign, exponent, mantissa, fmt)
        if got == want:
            continue
        if got == x and x != top:
            fail(f"ROUNDED_BY_HAND[{label!r}] is the value itself, but the format cannot hold it: which two of its "
                 "numbers is it between, and which does a cast keep?")
        if x == top:
            if math.isinf(got):
                fail(f"ROUNDED_BY_HAND[{label!r}] is inf, but a cast does not overflow as soon as a value passes the "
                     "largest number: it keeps the nearest. How far past the format's largest number is 65,100, "
                     "against the gap between numbers there?")
            fail(f"ROUNDED_BY_HAND[{label!r}] is {got!r}, which the format does not hold: how far apart are its "
                 "numbers near its largest?")
        if got > want and (x - want) == (got - x):
            fail(f"ROUNDED_BY_HAND[{label!r}]: {x!r} is exactly halfway between two of the format's numbers, and you "
                 "sent the tie up (away from zero). Section 2: which way does a cast send a tie, and why?")
        if got < x < want:
            fail(f"ROUNDED_BY_HAND[{label!r}] drops the bits that do not fit (truncation), but {x!r} is exactly halfway "
                 "between two numbers: section 2 says where a tie goes.")
        fail(f"ROUNDED_BY_HAND[{label!r}] is {got!r}, not the number a cast into the (5, 6) format keeps for {x!r}.")


def _truncated(x: torch.Tensor, drop_bits: int) -> torch.Tensor:
    bits = x.float().view(torch.int32)
    return (bits & ~(2**drop_bits - 1)).view(torch.float32)


_DROPPED = {"tf32": 13, "bf16": 16}  # the low fp32 bits the format does not keep


def _nearest(x: torch.Tensor, drop: int, ties: str) -> torch.Tensor:
    """x with its low `drop` fp32 bits rounded off to nearest, a tie to even or away from zero (on magnitudes, in ints)."""
    out = []
    for v in x.tolist():
        if not math.isfinite(v):
            out.append(v)
            continue
        bits = _fp32_bits(v)
        magnitude, low = bits & 0x7FFFFFFF, bits & ((1 << drop) - 1)
        down, half = magnitude - low, 1 << (drop - 1)
        up = low > half or (low == half and (ties == "away" or (down >> drop) & 1))
        out.append(struct.unpack("<f", struct.pack("<I", (bits & 0x80000000) | (down + (1 << drop) if up else down)))[0])
    return torch.tensor(out, dtype=torch.float32)


def _fp16_nearest(x: torch.Tensor, ties: str) -> torch.Tensor:
    """x rounded to nearest fp16 number, a tie to even or away from zero, worked out on fp16's own grid: the spacing
    2^(exponent - 10), the exponent never below fp16's smallest normal's (-14: the subnormals keep that spacing), and
    inf past the top (where the unbounded rounding reaches 2^16). In doubles, where every step here is exact."""
    out = []
    for v in x.tolist():
        if not math.isfinite(v) or v == 0:
            out.append(v)
            continue
        spacing = 2.0 ** (max(math.frexp(abs(v))[1] - 1, -14) - 10)
        q = abs(v) / spacing  # exact: a power-of-two scaling
        n = math.floor(q)
        if q - n > 0.5 or q - n == 0.5 and (ties == "away" or n % 2):
            n += 1
        r = n * spacing
        out.append(math.copysign(math.inf if r > 65504.0 else r, v))
    return torch.tensor(out, dtype=torch.float32)


def _round_label(fmt: str, ties: str) -> str:
    return f"round_to(x, {fmt!r})" if ties == "even" else f"round_to(x, {fmt!r}, ties={ties!r})"


def _round_want(x: torch.Tensor, fmt: str, ties: str) -> torch.Tensor:
    """The reference: torch's cast where one exists (ties to even), else the rounding worked out on the bits."""
    if fmt == "fp16" and ties == "away":
        return _fp16_nearest(x, "away")
    return x.to(FORMATS[fmt].dtype).float() if ties == "even" and fmt != "tf32" else _nearest(x, _DROPPED[fmt], ties)


def _judge_round_to(round_to: Callable[..., torch.Tensor]) -> None:
    """round_to(x, fmt, ties): float32 tensor of x rounded to nearest in fmt, ties to even or away from zero."""
    x = _round_input()
    nan = torch.isnan(x)
    for fmt, ties in _ROUND_CASES:
        label = _round_label(fmt, ties)
        got = call(round_to, *((x, fmt) if ties == "even" else (x, fmt, ties)), label=label)
        if not isinstance(got, torch.Tensor):
            fail(f"{label} returned {type(got).__name__}; return a torch.Tensor.")
        if got.dtype != torch.float32:
            fail(f"{label} returned a {got.dtype} tensor; return float32 holding the rounded values (cast back with .float()).")
        if got.shape != x.shape:
            fail(f"{label} returned shape {tuple(got.shape)} for input shape {tuple(x.shape)}.")
        if not torch.equal(torch.isnan(got), nan):
            fail(f"{label}: nan must stay nan and nothing else may become nan.")
        want = _round_want(x, fmt, ties)
        if torch.equal(got[~nan], want[~nan]):
            continue
        if fmt == "fp16":
            _judge_fp16_away(x, got, want, label)
        if fmt in _DROPPED and torch.equal(got[~nan], _truncated(x, _DROPPED[fmt])[~nan]):
            fail(f"{label} chopped off the low {_DROPPED[fmt]} bits (truncation): that always rounds toward zero, so a "
                 "value just below the next number up lands a whole step short of it. Round to the nearest.")
        if fmt in _DROPPED and (got[~nan].view(torch.int32) & ((1 << _DROPPED[fmt]) - 1)).any():
            fail(f"{label} left nonzero bits below {fmt}'s {FORMATS[fmt].mantissa_bits} mantissa bits; each result must "
                 f"be a {fmt} number, its low {_DROPPED[fmt]} fp32 bits 0.")
        bad = [i for i in range(len(x)) if not nan[i] and float(got[i]) != float(want[i])]
        i = bad[0]
        xi, gi = float(x[i]), float(got[i])
        if fmt in _DROPPED:
            low = _fp32_bits(xi) & ((1 << _DROPPED[fmt]) - 1)
            tie = math.isfinite(xi) and low == 1 << (_DROPPED[fmt] - 1)
            if tie and ties == "away" and abs(gi) < abs(xi):
                fail(f"{label} sent {xi!r}, exactly halfway between two {fmt} numbers, toward zero. Ties away from "
                     "zero means the neighbour of larger magnitude, whatever the sign and whatever its last bit.")
            if tie and ties == "even":
                fail(f"{label} sent {xi!r}, exactly halfway between two {fmt} numbers, to {gi!r}, whose last mantissa "
                     "bit is 1: a tie goes to the neighbour whose last mantissa bit is 0 (to even), not always one way.")
            if tie and ties == "away":
                fail(f"{label} sent {xi!r}, exactly halfway, to {gi!r}: with ties='away' a tie goes to the neighbour of "
                     "larger magnitude, even where that neighbour's last bit is 1.")
        if xi < 0 and all(float(got[j]) == float(want[j]) for j in range(len(x)) if not nan[j] and float(x[j]) > 0):
            fail(f"{label} is right for positive values and wrong for negative ones (it gave {gi!r} for {xi!r}): "
                 "rounding to nearest works on the magnitude; the sign is kept as it is.")
        fail(f"{label} gave {gi!r} for {xi!r}, which is not the {fmt} number nearest to it"
             + (" (ties: look at the bits that are dropped)." if fmt in _DROPPED else f": compare with torch's own cast."))


def _judge_fp16_away(x: torch.Tensor, got: torch.Tensor, want: torch.Tensor, label: str) -> None:
    """fp16 with ties away from zero: no torch cast gives it, and fp16's numbers are not fp32's top bits."""
    nan = torch.isnan(x)
    bad = [i for i in range(len(x)) if not nan[i] and float(got[i]) != float(want[i])]
    if torch.equal(got[~nan], x.to(torch.float16).float()[~nan]):
        i = next(j for j in bad)
        fail(f"{label} gave {float(got[i])!r} for {float(x[i])!r}, exactly halfway between two fp16 numbers: torch's "
             "cast sends a tie to even. With ties='away' a tie goes to the neighbour of larger magnitude, and no "
             "cast does that for you.")
    held = got[~nan & torch.isfinite(got)]
    if not torch.equal(held, held.to(torch.float16).float()):
        i = next(j for j in range(len(x)) if not nan[j] and math.isfinite(float(got[j]))
                 and float(got[j]) != float(torch.tensor([float(got[j])]).to(torch.float16).float()))
        fail(f"{label} gave {float(got[i])!r} for {float(x[i])!r}, a number fp16 does not hold: fp16 is not fp32 with "
             "its low bits dropped. Its exponent has 5 bits: section 1 says what that does to its numbers near the "
             "bottom and past the top.")
    small = torch.finfo(torch.float16).tiny
    if all(abs(float(x[i])) < small for i in bad):
        i = bad[0]
        fail(f"{label} is right where fp16's numbers are normal and wrong below its smallest normal number (it gave "
             f"{float(got[i])!r} for {float(x[i])!r}): how far apart are fp16's numbers there?")
    i = bad[0]
    fail(f"{label} gave {float(got[i])!r} for {float(x[i])!r}, which is not the fp16 number nearest to it, a tie going "
         "away from zero.")


def _running_sum_stall(dtype: torch.dtype, step: float, limit: int = 200_000) -> float:
    """Add `step` to a running sum held in `dtype` until the sum stops changing; return where it stopped."""
    total = torch.zeros((), dtype=dtype)
    add = torch.tensor(step, dtype=dtype)
    for _ in range(limit):
        after = total + add
        if after == total:
            return float(total)
        total = after
    raise RuntimeError("the running sum did not stall")


def _cast_to_widths(x: float, widths: tuple[int, int]) -> float:
    """x rounded to nearest (a tie to even) in the made-up IEEE-style format `widths`: inf past its top."""
    return _value(*_encode(x, *widths), _Widths(*widths))


def _widths_sum_stall(widths: tuple[int, int], step: float, limit: int = 200_000) -> float:
    """_running_sum_stall in a made-up format: the sum and the step each rounded into it after every addition (in
    doubles the additions here are exact: both terms hold a few bits)."""
    total, add = 0.0, _cast_to_widths(step, widths)
    for _ in range(limit):
        after = _cast_to_widths(total + add, widths)
        if after == total:
            return total
        total = after
    raise RuntimeError("the running sum did not stall")


def _judge_stall_point(stall_point: Callable[[torch.dtype, float], float]) -> None:
    """stall_point(dtype, step): where a running sum adding `step` in `dtype` (or a made-up format) stops growing."""
    for dtype, step in _STALL_RUN:
        label = f"stall_point({dtype}, {step})"
        got = _as_float(call(stall_point, dtype, step, label=label), label)
        want = _running_sum_stall(dtype, step)
        if close(got, want):
            continue
        eps = torch.finfo(dtype).eps
        if close(got, want / 2) or close(got, step / eps):
            after = float(torch.tensor(got, dtype=dtype) + torch.tensor(step, dtype=dtype))
            fail(
                f"{label} returned {got:g}, but there {got:g} + {step} = {after:g} in {dtype}: the sum still grows. "
                "Where the spacing between numbers equals the step, one addition still reaches the next number up."
            )
        if close(got, 2 * want):
            fail(
                f"{label} returned {got:g}, but the sum already stops growing below it. Below your answer, add the "
                "step once and ask what the cast makes of a result that is not one of the format's numbers, in "
                "every case section 2 names, the rare one too."
            )
        fp32 = call(stall_point, torch.float32, step, label=f"stall_point(torch.float32, {step})")
        if is_number(fp32) and close(got, float(fp32)):
            fail(f"{label} returned {got:g}, the same as for torch.float32: your answer does not depend on the format "
                 "the sum is held in.")
        fail(f"{label} returned {got:g}, which is not where adding {step} in {dtype} over and over stops growing "
             "(section 4).")
    for dtype, steps in ((torch.float32, _STALL_FP32[:2]), (torch.float64, _STALL_FP64)):
        for step in steps:  # too long to run: check that it stalls there and not just below
            label = f"stall_point({dtype}, {step})"
            got = _as_float(call(stall_point, dtype, step, label=label), label)
            s = torch.tensor(got, dtype=dtype)
            below = torch.nextafter(s, torch.zeros((), dtype=dtype))
            if s + step != s or below + step == below:
                fail(f"{label} returned {got:g}; in {dtype} the sum stops growing elsewhere.")
    for widths, step in _STALL_MADE_UP:  # no dtype: the sum run with the judge's own rounding
        label = f"stall_point({widths}, {step})"
        got = _as_float(call(stall_point, widths, step, label=label), label)
        want = _widths_sum_stall(widths, step)
        if got == want:
            continue
        e, m = widths
        fmt = f"a format of {e} exponent bits and {m} mantissa bits"
        unrounded = 2.0 ** math.ceil(math.log2(2 * step * 2.0**m))  # the stall of a step the format held exactly
        if _cast_to_widths(step, widths) != step and got == unrounded:
            fail(f"{label} returned {got:g}: that is where a step of exactly {step} would stop, but {fmt} cannot hold "
                 f"{step}. The step is stored in the format too: section 2, what a cast keeps.")
        if got == 2 * want:
            fail(f"{label} returned {got:g}, but in {fmt} the sum already stops growing below it. Below your answer, "
                 "add the step once and ask what the cast makes of a result that is not one of the format's numbers, "
                 "in every case section 2 names, the rare one too.")
        if got == want / 2:
            fail(f"{label} returned {got:g}, but in {fmt} the sum still grows there: where the spacing between numbers "
                 "equals the step, one addition still reaches the next number up.")
        fail(f"{label} returned {got:g}, which is not where adding {step} over and over in {fmt} stops growing: "
             "section 4, how far apart the format's numbers are in each binade, and what one addition does there.")

# --- predict_vanishing ---------------------------------------------------------------------------------------------


def _vanishing_model(values: list[float], exponent_bits: int, mantissa_bits: int) -> list[bool]:
    """The course's model: a nonzero value vanishes when |x| is at most half the smallest subnormal (a tie goes to even, 0)."""
    bias = 2 ** (exponent_bits - 1) - 1
    half_smallest = 2.0 ** (-bias - mantissa_bits)
    return [x != 0 and abs(x) <= half_smallest for x in values]


def _judge_predict_vanishing(predict_vanishing: Callable) -> None:
    """predict_vanishing(values, e, m): from the field widths alone, which values a cast to zero."""
    for values, e, m in _VANISH_CASES:
        got = call(predict_vanishing, values, e, m, label=f"predict_vanishing(values, {e}, {m})")
        mine = _as_bools(got, len(values))
        if mine is None:
            fail(f"predict_vanishing(values, {e}, {m}) returned {got!r}; return a list of {len(values)} bools, one per value.")
        want = _vanishing_model(values, e, m)
        if mine == want:
            continue
        bias = 2 ** (e - 1) - 1
        half = 2.0 ** (-bias - m)
        smallest, normal = 2 * half, 2.0 ** (1 - bias)
        fmt = f"for a format with {e} exponent bits and {m} mantissa bits"
        if mine == [v != 0 and abs(v) < normal for v in values]:
            fail(f"{fmt} you predicted that values vanish which the cast keeps: every value below the smallest normal "
                 "number. Section 1: what does an all-zero exponent field (a subnormal) store?")
        if mine == [v != 0 and abs(v) <= smallest for v in values]:
            fail(f"{fmt} you predicted that the smallest positive number the format holds vanishes, but the cast "
                 "keeps it: a cast sends a value to 0 only when 0 is the nearest number it holds.")
        # These two name the mistake and the principle only: told together, where the cut-off lies and which way
        # its tie goes would be the rule itself (an outside tester read it off them in two tries).
        if mine == [v != 0 and abs(v) < smallest for v in values]:
            fail(f"{fmt} you predicted that values vanish which the cast keeps: that sends every value below the "
                 "format's smallest positive number down to 0, as if a cast dropped what does not fit. A cast rounds "
                 "to the nearest number the format holds (section 2).")
        if mine == [v != 0 and abs(v) < half for v in values]:
            fail(f"{fmt} your prediction is right except at an exact tie, a value as far from one number the format "
                 "holds as from the next. Section 2: which of the two does a cast keep at a tie?")
        if mine == [v != 0 and abs(v) <= half / 2 for v in values]:
            fail(f"{fmt} you predicted that values survive which the cast turns into 0, all of them within a factor "
                 "of two of your cut-off. Check the bias, and the power of two an all-zero exponent field stands "
                 "for (section 1).")
        if any(v < 0 and w for v, w in zip(values, want)) and mine == [v > 0 and w for v, w in zip(values, want)]:
            fail("predict_vanishing keeps every negative value: a negative value vanishes too, the sign is kept apart "
                 "and the magnitude is what the cast rounds. Compare magnitudes.")
        if any(g and x == 0 for x, g in zip(values, mine)):
            fail("predict_vanishing said 0.0 vanishes: it was zero already. Vanishing means a nonzero value that becomes 0.")
        fail(f"{fmt} your prediction is not what the cast does (section 1, and the paragraph above the exercise).")


# --- choose_loss_scale ---------------------------------------------------------------------------------------------


def _all_finite(grads: torch.Tensor, dtype, scale: float) -> bool:
    """True when every gradient times `scale`, stored in `dtype` (a torch dtype, or the widths of an IEEE-style format),
    is finite (the cast rounds to nearest)."""
    if isinstance(dtype, tuple):
        return all(_encode(g * scale, *dtype)[1] != 2 ** dtype[0] - 1 for g in grads.double().tolist())
    return bool(torch.isfinite((grads.double() * scale).to(dtype)).all())


def _largest(dtype) -> float:
    """The format's largest finite number."""
    return _Widths(*dtype).max if isinstance(dtype, tuple) else torch.finfo(dtype).max


def _largest_finite_scale(grads: torch.Tensor, dtype) -> float:
    """The largest power of two S such that every gradient × S stays finite in dtype (grads finite, one nonzero)."""
    amax = float(grads.abs().max())
    k = math.floor(math.log2(_largest(dtype) / amax))
    while _all_finite(grads, dtype, 2.0 ** (k + 1)):
        k += 1
    while not _all_finite(grads, dtype, 2.0**k):
        k -= 1
    return 2.0**k


def _rescue_scale(grads: torch.Tensor, dtype) -> float | None:
    """The old aim: the smallest power of two ≥ 1 that keeps every nonzero gradient nonzero (None if none does)."""
    nonzero = grads[grads != 0].abs().double()
    for k in range(0, 400):
        if isinstance(dtype, tuple):
            if all(_encode(g * 2.0**k, *dtype)[1:] != (0, 0) for g in nonzero.tolist()):
                return 2.0**k
            continue
        scaled = (nonzero * 2.0**k).to(dtype)
        if (scaled != 0).all():
            return 2.0**k
    return None


def _judge_choose_loss_scale(choose_loss_scale: Callable[[torch.Tensor, torch.dtype], float]) -> None:
    """choose_loss_scale: the largest power of two that keeps every scaled gradient finite in dtype."""
    for grads, dtype in _SCALE_CASES:
        label = _scale_label(grads, dtype)
        got = _scale_of(call(choose_loss_scale, grads, dtype, label=label))
        if not is_number(got) or not math.isfinite(float(got)) or float(got) <= 0:
            fail(f"{label} returned {got!r}; return the scale as a positive float (a power of two, 2.0 ** k).")
        got = float(got)
        want = _largest_finite_scale(grads, dtype)
        if got == want:
            continue
        if got.is_integer() and abs(got) < 400 and got == math.log2(want):
            fail("choose_loss_scale returns what looks like the exponent k; return the scale itself, 2.0 ** k.")
        if got != 2.0 ** round(math.log2(got)):
            fail(f"{label} returned {got!r}; the scale is a power of two (2.0 ** k), so scaling changes no digit of a gradient.")
        largest = float(grads[int(grads.abs().argmax())])
        line = 2.0 ** math.floor(math.log2(_largest(dtype) / abs(largest)))  # the largest finite number as the line
        if not _all_finite(grads, dtype, got):
            if want < 1 and got == 1:
                fail(f"{label} returned 1, but a gradient here overflows {dtype} already at scale 1: the scale may go "
                     "below 1. GradScaler's goes below 1 too after enough overflows.")
            if largest < 0 and _all_finite(grads.clamp(min=0), dtype, got):
                fail(f"{label} returns a scale that turns the largest gradient into -inf: the gradient with the largest "
                     "magnitude is negative. Compare magnitudes (abs), not signed values.")
            if got == _rescue_scale(grads, dtype):
                fail(f"{label} returns the smallest scale that keeps the smallest gradient nonzero, but it turns the "
                     "largest into inf, and an inf costs the whole step. Which gradients carry the update?")
            fail(f"{label} returns a scale that turns the largest gradient into inf in {dtype}.")
        if got == _rescue_scale(grads, dtype):
            fail(f"{label} returns the smallest scale that keeps the smallest gradient nonzero (the old aim). The "
                 "smallest gradients carry almost none of the update, and a bigger scale costs a finite gradient no "
                 "digit: what does a higher scale still buy, and where does it stop being safe?")
        if got == want / 2 and got == line:
            fail(f"{label} returns a scale that leaves room: twice it still keeps every scaled gradient finite in "
                 f"{dtype}, and {STOPS_AT_THE_LARGEST}")
        fail(f"{label} returns a scale that leaves room unused in {dtype}: a bigger power of two still keeps every "
             "scaled gradient finite, and costs none of them a digit.")


# --- LossScaler with gradient accumulation -------------------------------------------------------------------------


def gradscaler_rule(found_infs: list[bool], init_scale: float = 65536.0, growth_factor: float = 2.0,
                    backoff_factor: float = 0.5, growth_interval: int = 2000) -> list[tuple[bool, float]]:
    """GradScaler's update, one optimizer step per flag: (applied, scale after). Written out here rather than asked of
    the course's GradScaler driver, which a prediction watches (tests/test_lesson03_content.py holds them equal)."""
    scale, good, out = float(init_scale), 0, []
    for found_inf in found_infs:
        if found_inf:
            scale, good = scale * backoff_factor, 0
        else:
            good += 1
            if good == growth_interval:
                scale, good = scale * growth_factor, 0
        out.append((not found_inf, scale))
    return out


def window_trace(settings: dict, flags: list[bool]) -> list[tuple[bool, float]]:
    """The answer with accumulation: (step now?, scale after) for every micro-batch. The scale holds through a window
    (its gradients are summed in one .grad and unscaled once), the optimizer steps at the window's end unless some
    micro-batch of it overflowed, and GradScaler's rule runs once a window, on that window's evidence: GradScaler
    driven once per optimizer step, as torch's gradient-accumulation recipe calls update()."""
    settings = dict(settings)
    n = settings.pop("accumulation_steps", 1)
    windows = [flags[i:i + n] for i in range(0, len(flags), n)]
    per_step = gradscaler_rule([any(w) for w in windows], **settings)
    out, scale = [], float(settings["init_scale"])
    for window, (applied, after) in zip(windows, per_step):
        out += [(False, scale)] * (len(window) - 1) + [(applied, after)]
        scale = after
    return out


def _judge_loss_scaler_windows(observation: dict) -> None:
    """LossScaler: GradScaler's rule with one micro-batch a step (the public half), and once a window with more."""
    _public_loss_scaler(observation)
    for (settings, flags), run in zip(_WINDOW_CASES, observation["windows"]):
        want = window_trace(settings, flags)
        got = [(bool(g), float(sc)) for g, sc in run["steps"]]
        if got == want:
            continue
        n = settings["accumulation_steps"]
        before = float(settings["init_scale"])
        for i, ((g, sc), (w, wsc)) in enumerate(zip(got, want)):
            last = (i + 1) % n == 0
            window = flags[i - i % n:i - i % n + n]
            if g and not last:
                fail(f"LossScaler({settings}) said to step the optimizer after micro-batch {i % n + 1} of a window of "
                     f"{n}: what would that step apply, while the rest of the window's gradients are still to come?")
            if not last and sc != before:
                fail(f"LossScaler({settings}) changed its scale after micro-batch {i % n + 1} of a window of {n}, "
                     "where it overflowed: what scale do the gradients already summed in .grad carry, what scale would "
                     "the rest of the window's carry, and how many numbers does the one unscale divide them by?")
            if last and g and not w:
                fail(f"LossScaler({settings}) stepped the optimizer after a window whose micro-batch "
                     f"{window.index(True) + 1} overflowed: what is in .grad once that micro-batch's gradients were "
                     "added to it?")
            if last and sum(window) > 1 and sc < wsc:
                fail(f"LossScaler({settings}) lowered its scale more than once for one window with "
                     f"{sum(window)} overflowing micro-batches: the step skipped is one step. How much does one "
                     "skipped step say about the scale?")
            if last and sc > before and not any(window) and wsc == before:
                fail(f"LossScaler({settings}) grew its scale sooner than a scaler that weighs one optimizer step's "
                     "evidence at a time: what is one step of evidence when the optimizer steps once a window?")
            if (g, sc) != (w, wsc):
                fail(f"LossScaler({settings}) is not the scaler section 5 asks for after micro-batch {i + 1}.")
            before = sc


JUDGES = {"FIELDS_BY_HAND": _judge_fields_by_hand, "ROUNDED_BY_HAND": _judge_rounded_by_hand, "decode": _judge_decode, "round_to": _judge_round_to, "predict_vanishing": _judge_predict_vanishing,
          "stall_point": _judge_stall_point, "choose_loss_scale": _judge_choose_loss_scale,
          "LossScaler": _judge_loss_scaler_windows}
