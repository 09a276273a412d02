"""Checks for lesson 03 (float formats): decode, round_to, underflows, choose_loss_scale, stall_point, LossScaler.

References are independent of the learner's route: struct for fp32 bits, numpy's
float16 for fp16 bits, torch's own casts for bf16, a running sum actually run in
the dtype for stall points, and torch.amp.GradScaler itself for the scaler. tf32
has no storage type to compare with, so it is checked by what rounding to
nearest even means: the stored value is the nearer neighbour, ties go to even.
"""

from __future__ import annotations

import math
import numbers
import struct
import warnings
from typing import Callable

import numpy as np
import torch

from grader.checks._common import call, close, fail, is_number, passed, require_callable
from grader.floats import FORMATS, value_of

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


# --- decode ---------------------------------------------------------------------------------


def _fields(decode: Callable, x: float, fmt: str) -> tuple[int, int, int]:
    """The learner's decode(x, fmt), required to be three ints."""
    got = call(decode, x, fmt, label=f"decode({x!r}, {fmt!r})")
    if not isinstance(got, (tuple, list)) or len(got) != 3 or not all(_is_int(v) for v in got):
        fail(f"decode({x!r}, {fmt!r}) returned {got!r}; return a tuple of three ints (sign, exponent, mantissa).")
    return tuple(int(v) for v in got)


def check_decode(decode: Callable[[float, str], tuple[int, int, int]]) -> None:
    """decode(x, fmt): the raw (sign, exponent, mantissa) fields of x stored in fmt."""
    require_callable(decode, "decode")
    got = _fields(decode, 1.0, "fp32")
    if got[1] == 0:
        fail("decode(1.0, 'fp32') returned exponent 0: 1.0 = 1.0·2⁰ is stored with the biased exponent 0 + 127 = 127. "
             "Return the raw stored field, not exponent − bias.")
    if got[2] == 2**23:
        fail("decode(1.0, 'fp32') put the hidden leading 1 into the mantissa: return the 23 stored bits only.")
    for fmt in ("fp32", "fp16", "bf16"):
        e_bits, m_bits = _WIDTHS[fmt]
        for x in _EDGE:
            got = _fields(decode, x, fmt)
            want = _split(_reference_bits(x, fmt), e_bits, m_bits)
            if math.isnan(x):
                if got[1] != 2**e_bits - 1 or got[2] == 0:
                    fail(f"decode(nan, {fmt!r}) returned {got}: nan has an all-ones exponent ({2**e_bits - 1}) and a nonzero mantissa.")
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
                f"decode({x!r}, {fmt!r}) returned {got}, but {fmt} stores it as {want} "
                f"(bits {_split(_reference_bits(x, fmt), e_bits, m_bits)}); check how you handle {what}. "
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
            fail(f"decode({x!r}, 'tf32') gives fields {got} that store {stored!r}: {problem}. "
                 "tf32 is fp32 rounded to nearest even at 10 mantissa bits; the exponent stays 8 bits.")
    passed("decode")


# --- round_to -------------------------------------------------------------------------------


def _truncated(x: torch.Tensor, drop_bits: int) -> torch.Tensor:
    bits = x.float().view(torch.int32)
    return (bits & ~(2**drop_bits - 1)).view(torch.float32)


def check_round_to(round_to: Callable[[torch.Tensor, str], torch.Tensor]) -> None:
    """round_to(x, fmt): float32 tensor of x rounded to nearest even in fmt."""
    require_callable(round_to, "round_to")
    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.tensor(_EDGE, dtype=torch.float32), torch.randn(200, generator=g) * 10.0 ** torch.randint(-9, 5, (200,), generator=g)])
    for fmt in ("fp16", "bf16", "fp32", "tf32"):
        got = call(round_to, x.clone(), fmt, label=f"round_to(x, {fmt!r})")
        if not isinstance(got, torch.Tensor):
            fail(f"round_to(x, {fmt!r}) returned {type(got).__name__}; return a torch.Tensor.")
        if got.dtype != torch.float32:
            fail(f"round_to(x, {fmt!r}) returned a {got.dtype} tensor; return float32 holding the rounded values (cast back with .float()).")
        if got.shape != x.shape:
            fail(f"round_to(x, {fmt!r}) returned shape {tuple(got.shape)} for input shape {tuple(x.shape)}.")
        nan = torch.isnan(x)
        if not torch.equal(torch.isnan(got), nan):
            fail(f"round_to(x, {fmt!r}): nan must stay nan and nothing else may become nan.")
        if fmt in ("fp16", "bf16", "fp32"):
            want = x.to(FORMATS[fmt].dtype).float()
            if torch.equal(got[~nan], want[~nan]):
                continue
            if fmt == "bf16" and torch.equal(got[~nan], _truncated(x, 16)[~nan]):
                fail("round_to(x, 'bf16') chopped off the low 16 bits (truncation). Casts round to nearest, ties to even: "
                     "truncation always rounds toward zero and biases every result.")
            bad = int((got != want).logical_and(~nan).nonzero()[0])
            fail(f"round_to(x, {fmt!r}) gave {got[bad].item()!r} for {x[bad].item()!r}; "
                 f"torch's own cast to {FORMATS[fmt].dtype} gives {want[bad].item()!r}.")
        else:
            if torch.equal(got[~nan], _truncated(x, 13)[~nan]):
                fail("round_to(x, 'tf32') chopped off the low 13 mantissa bits (truncation): "
                     f"1 + 3·2⁻¹² became {_truncated(torch.tensor([1 + 3 * 2.0**-12]), 13).item()!r}, "
                     "but 1 + 2⁻¹⁰ is nearer. Round to nearest, ties to even.")
            bits = got[~nan].view(torch.int32)
            if (bits & 0x1FFF).any():
                fail("round_to(x, 'tf32') left nonzero bits below tf32's 10 mantissa bits; the low 13 bits of each fp32 result must be 0.")
            for xi, gi in zip(x.tolist(), got.tolist()):
                problem = _tf32_problem(xi, gi, (_fp32_bits(gi) >> 13) & 0x3FF if math.isfinite(gi) else 0)
                if problem == "a tie that went to the odd mantissa":
                    fail(f"round_to(x, 'tf32') sent {xi!r}, exactly halfway between two tf32 values, to {gi!r}: "
                         "a tie goes to the neighbour whose last mantissa bit is 0 (to even), not always up.")
                if problem:
                    fail(f"round_to(x, 'tf32') gave {gi!r} for {xi!r}: {problem}.")
    passed("round_to")


# --- underflow ------------------------------------------------------------------------------


def check_underflows(underflows: Callable[[torch.Tensor, torch.dtype], torch.Tensor]) -> None:
    """underflows(values, dtype): nonzero values that become zero when cast to dtype."""
    require_callable(underflows, "underflows")
    cases = {
        torch.float16: [1e-8, 3e-8, -1e-8, 1e-7, 1e-5, -1e-5, 1e-4, 0.0, -0.0, math.inf, math.nan, 1.0, 7e4],
        torch.bfloat16: [1e-40, 1e-45, -1e-45, 1e-30, 0.0, 2e-8, math.nan, 1.0],
    }
    for dtype, values in cases.items():
        v = torch.tensor(values, dtype=torch.float32)
        got = call(underflows, v.clone(), dtype, label=f"underflows(values, {dtype})")
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool:
            fail(f"underflows returned {type(got).__name__} {getattr(got, 'dtype', '')}; return a bool tensor, one entry per value.")
        if got.shape != v.shape:
            fail(f"underflows returned shape {tuple(got.shape)} for {len(values)} values.")
        want = (v != 0) & (v.to(dtype) == 0)
        if torch.equal(got, want):
            continue
        tiny = torch.finfo(dtype).tiny
        for value, g, w in zip(values, got.tolist(), want.tolist()):
            if g == w:
                continue
            if value == 0:
                fail(f"underflows flagged {value!r}: it was zero already. Underflow means a nonzero value that becomes zero.")
            if g and abs(value) < tiny:
                fail(
                    f"underflows flagged {value!r} in {dtype}, but casting it gives {v.new_tensor([value]).to(dtype).item()!r}: "
                    f"below the smallest normal ({tiny:.3g}) there are subnormals, which keep small values nonzero "
                    "with fewer digits. Only values that become exactly 0 underflow."
                )
            if value < 0:
                fail(f"underflows missed {value!r}: a negative value underflows too. Compare magnitudes, or compare the cast with 0.")
            if not w and (math.isnan(value) or math.isinf(value) or abs(value) > 1):
                fail(f"underflows flagged {value!r}: inf, nan and large values do not become zero.")
            fail(f"underflows gave {g} for {value!r} in {dtype}; casting it gives {v.new_tensor([value]).to(dtype).item()!r}.")
    passed("underflows")


# --- loss scale -----------------------------------------------------------------------------


def check_choose_loss_scale(choose_loss_scale: Callable[[torch.Tensor, torch.dtype], float]) -> None:
    """choose_loss_scale: the smallest power of two ≥ 1 that saves every nonzero gradient without overflow."""
    require_callable(choose_loss_scale, "choose_loss_scale")

    def fits(grads: torch.Tensor, dtype: torch.dtype, scale: float) -> tuple[bool, bool]:
        scaled = (grads.double() * scale).to(dtype)
        nonzero = grads != 0
        return bool((scaled[nonzero] != 0).all()), bool(torch.isfinite(scaled).all())

    cases = [
        (torch.tensor([1e-10, 1e-3, -4e-6]), torch.float16),
        (torch.tensor([0.0, 3e-9, 0.5, 0.0]), torch.float16),
        (torch.tensor([1e-12, 1e-3]), torch.bfloat16),
        (torch.tensor([2e-3, 1.0]), torch.float16),
    ]
    for grads, dtype in cases:
        label = f"choose_loss_scale({grads.tolist()}, {dtype})"
        try:
            got = choose_loss_scale(grads.clone(), dtype)
        except ValueError:
            zero = " It holds zeros: a zero gradient stays zero at any scale, so leave zeros out." if (grads == 0).any() else ""
            fail(f"{label} raised ValueError, but a scale exists.{zero}")
        except (NotImplementedError, AssertionError):
            raise
        except Exception as exc:
            fail(f"{label} raised {type(exc).__name__}: {exc}")
        if not is_number(got):
            fail(f"{label} returned {got!r}; return the scale as a float.")
        got = float(got)
        if got < 1 or got != 2.0 ** round(math.log2(got)):
            fail(f"{label} returned {got!r}; the scale is a power of two, at least 1 (2.0**k, k ≥ 0).")
        saved, finite = fits(grads, dtype, got)
        if not finite:
            fail(f"{label} returned {got:g}, but that turns the largest gradient into inf in {dtype}: "
                 "a scale must also keep the largest one finite.")
        if not saved:
            fail(f"{label} returned {got:g}, but the smallest nonzero gradient still becomes 0 at that scale.")
        smaller = got / 2
        if smaller >= 1 and fits(grads, dtype, smaller)[0]:
            tiny = torch.finfo(dtype).tiny
            if bool(((grads.abs() * got >= tiny) | (grads == 0)).all()):
                fail(f"{label} returned {got:g}, but {smaller:g} already keeps every gradient nonzero: "
                     f"below the smallest normal ({tiny:.3g}) subnormals still hold them. Aim for nonzero, not normal.")
            fail(f"{label} returned {got:g}, but {smaller:g} already keeps every gradient nonzero; return the smallest such scale.")
    for grads, dtype, why in (
        (torch.tensor([1e-10, 200.0]), torch.float16, "1e-10 needs at least 512, which turns 200 into inf"),
        (torch.tensor([1e5]), torch.float16, "1e5 is beyond fp16's 65504 even at scale 1"),
    ):
        label = f"choose_loss_scale({grads.tolist()}, {dtype})"
        try:
            got = choose_loss_scale(grads.clone(), dtype)
        except ValueError:
            continue
        except (NotImplementedError, AssertionError):
            raise
        except Exception as exc:
            fail(f"{label} raised {type(exc).__name__}: {exc}; raise ValueError when no scale works.")
        fail(f"{label} returned {got!r}, but no scale works: {why}. Check for overflow too, and raise ValueError.")
    passed("choose_loss_scale")


# --- stall point ----------------------------------------------------------------------------


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


def check_stall_point(stall_point: Callable[[torch.dtype, float], float]) -> None:
    """stall_point(dtype, step): where a running sum adding `step` in `dtype` stops growing."""
    require_callable(stall_point, "stall_point")
    for dtype, step in ((torch.float16, 1.0), (torch.float16, 0.01), (torch.bfloat16, 1.0), (torch.bfloat16, 0.01), (torch.float16, 3.0)):
        label = f"stall_point({dtype}, {step})"
        got = call(stall_point, dtype, step, label=label)
        if not is_number(got) and not (isinstance(got, torch.Tensor) and got.numel() == 1):
            fail(f"{label} returned {got!r}; return the value as a float.")
        got = float(got)
        want = _running_sum_stall(dtype, step)
        if close(got, want):
            continue
        eps = torch.finfo(dtype).eps
        if close(got, want / 2) or close(got, step / eps):
            after = float(torch.tensor(got, dtype=dtype) + torch.tensor(step, dtype=dtype))
            fail(
                f"{label} returned {got:g}, but there {got:g} + {step} = {after:g} in {dtype}: the sum still grows. "
                "At step/eps the spacing between numbers equals the step; the sum stops once the step is at most "
                "half the spacing, because a + step then rounds back to a (round to nearest, ties to even)."
            )
        if close(got, float(call(stall_point, torch.float32, step))):
            fail(f"{label} returned {got:g}, the same as for torch.float32: use the eps of the dtype you were given.")
        fail(f"{label} returned {got:g}; adding {step} in {dtype} over and over stops growing at {want:g}.")
    for step in (1.0, 2.0**-10):  # too long to run in fp32: check that it stalls there and not just below
        got = float(call(stall_point, torch.float32, step))
        s = torch.tensor(got, dtype=torch.float32)
        below = torch.nextafter(s, torch.tensor(0.0))
        if s + step != s or below + step == below:
            fail(f"stall_point(torch.float32, {step}) returned {got:g}; in float32 the sum stops growing elsewhere.")
    passed("stall_point")


# --- the scaler -----------------------------------------------------------------------------

_OVERFLOWS = [False, False, False, True, False, False, True, True, False, False, False, False,
              False, False, False, True, False, False, False, False, False, False, False]


def gradscaler_trace(found_infs: list[bool], **settings) -> list[tuple[bool, float]]:
    """torch.amp.GradScaler on the CPU fed a given sequence of overflows: (step applied, scale after) per step."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = torch.amp.GradScaler("cpu", **settings)
        weight = torch.nn.Parameter(torch.ones(1))
        optimizer = torch.optim.SGD([weight], lr=0.1)
        trace = []
        for found_inf in found_infs:
            scaler.scale(torch.ones(()))  # GradScaler sets up its scale on the first scale() call
            weight.grad = torch.full((1,), math.inf if found_inf else 1.0)
            before = weight.detach().clone()
            scaler.step(optimizer)
            scaler.update()
            trace.append((not torch.equal(before, weight.detach()), float(scaler.get_scale())))
    return trace


def check_loss_scaler(LossScaler: type) -> None:
    """LossScaler's scale and skipped steps match GradScaler's on the same overflows."""
    require_callable(LossScaler, "LossScaler")
    default = call(LossScaler, label="LossScaler()")
    if not is_number(getattr(default, "scale", None)) or float(default.scale) != 65536.0:
        fail(f"LossScaler().scale is {getattr(default, 'scale', 'missing')!r}; it should start at init_scale (65536.0 by default).")
    for settings, flags in (
        (dict(init_scale=1024.0, growth_interval=3), _OVERFLOWS),
        (dict(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2), [False, True, False, False, False, True, False, False]),
    ):
        want = gradscaler_trace(flags, **settings)
        mine = call(LossScaler, label=f"LossScaler({settings})", **settings)
        if not callable(getattr(mine, "update", None)):
            fail("LossScaler has no update(found_inf) method; add one that returns True when the step is applied.")
        if not is_number(getattr(mine, "scale", None)) or float(mine.scale) != settings["init_scale"]:
            fail(f"LossScaler(init_scale={settings['init_scale']}).scale is {getattr(mine, 'scale', 'missing')!r}; "
                 "keep the current scale in self.scale, starting at init_scale.")
        good_run = 0
        for i, (found_inf, (applied, scale)) in enumerate(zip(flags, want)):
            before = float(mine.scale)
            got = call(mine.update, found_inf, label=f"update(found_inf={found_inf})")
            where = f"at step {i} (overflows so far: {[j for j in range(i + 1) if flags[j]]}, settings {settings})"
            if got is not applied and got != applied:
                if found_inf:
                    fail(f"update(found_inf=True) returned {got!r} {where}: skip the step on overflow, return False.")
                fail(f"update(found_inf=False) returned {got!r} {where}: a step without overflow is applied, return True.")
            if not is_number(getattr(mine, "scale", None)):
                fail(f"after update() your LossScaler's scale is {getattr(mine, 'scale', 'missing')!r}; keep a number in self.scale.")
            mine_scale = float(mine.scale)
            if mine_scale != scale:
                if found_inf and mine_scale >= before:
                    fail(f"On an overflow {where} your scale stayed at {mine_scale:g}; multiply it by backoff_factor "
                         f"(GradScaler goes to {scale:g}), or the next step overflows again.")
                if not found_inf and scale > before and mine_scale == before:
                    fail(f"After {settings['growth_interval']} good steps in a row {where}, GradScaler grows the scale "
                         f"to {scale:g}; yours stayed at {mine_scale:g}. A scaler that never grows back leaves the scale "
                         "low after one early overflow, and small gradients underflow again.")
                if not found_inf and mine_scale > before and scale == before:
                    if good_run < settings["growth_interval"] and any(flags[:i]):
                        fail(f"Your scale grew to {mine_scale:g} {where} after only {good_run + 1} good step(s) since the "
                             "last overflow: an overflow resets the count of good steps to zero.")
                    fail(f"Your scale grew to {mine_scale:g} {where}; GradScaler grows only after growth_interval good steps in a row.")
                fail(f"Your scale is {mine_scale:g} {where}; GradScaler's is {scale:g}.")
            good_run = 0 if found_inf else good_run + 1
            if good_run == settings["growth_interval"]:
                good_run = 0
    passed("LossScaler")
