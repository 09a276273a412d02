"""Mutants for lesson 03 (float formats): the mistakes learners make with bits, rounding and scalers."""

LESSON = "03_float_formats"

_DECODE_HEAD = """
import torch
WIDTHS = {"fp32": (8, 23), "tf32": (8, 10), "fp16": (5, 10), "bf16": (8, 7)}
def _bits(x, fmt):
    t = torch.tensor([x], dtype=torch.float32)
    if fmt == "fp16": return int(t.half().view(torch.int16)[0]) & 0xFFFF
    if fmt == "bf16": return int(t.bfloat16().view(torch.int16)[0]) & 0xFFFF
    return int(t.view(torch.int32)[0]) & 0xFFFFFFFF
import math
def _general(x, e, m, chop=False, overflow=True):
    bias, top = 2 ** (e - 1) - 1, 2 ** e - 1
    sign = 1 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        return sign, top, 1
    if math.isinf(x):
        return sign, top, 0
    a = abs(x)
    p = max(math.frexp(a)[1] - 1, 1 - bias) if a else 1 - bias
    n = (math.floor if chop else round)(a / 2.0 ** (p - m))
    if n == 2 ** (m + 1):
        p, n = p + 1, 2 ** m
    exponent = p + bias if n >= 2 ** m else 0
    if exponent >= top:
        return (sign, top, 0) if overflow else (sign, top - 1, 2 ** m - 1)
    return sign, exponent, n - 2 ** m if exponent else n
"""

_SCALER_HEAD = """
class LossScaler:
    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 accumulation_steps=1):
        self.scale, self.growth_factor, self.backoff_factor = init_scale, growth_factor, backoff_factor
        self.growth_interval, self.good = growth_interval, 0
        self.accumulation_steps, self.seen, self.bad, self.infs = accumulation_steps, 0, False, 0
"""

_GROW = """
        self.good += 1
        if self.good == self.growth_interval:
            self.scale *= self.growth_factor
            self.good = 0
        return True
"""

_STALL_HEAD = """
import math, torch
def _held(dtype, step):
    # (the step as the format holds it, the gap after 1.0), for a torch dtype or a made-up format's widths
    if isinstance(dtype, torch.dtype):
        return float(torch.tensor(step, dtype=dtype)), torch.finfo(dtype).eps
    e, m = dtype
    spacing = 2.0 ** (max(math.frexp(step)[1] - 1, 2 - 2 ** (e - 1)) - m)
    return round(step / spacing) * spacing, 2.0 ** -m
"""

_ROUND_REFERENCE = """
import math
import torch
def round_to(x, fmt, ties="even"):
    x = x.float()
    if fmt == "fp32":
        return x.clone()
    if fmt == "fp16" and ties == "away":
{fp16_away}    if ties == "even" and fmt != "tf32":
        return x.to({"fp16": torch.float16, "bf16": torch.bfloat16}[fmt]).float()
    drop = 13 if fmt == "tf32" else 16
    bits = x.view(torch.int32)
    half = 1 << (drop - 1)
    bits = bits + (half - 1) + ((bits >> drop) & 1) if ties == "even" else bits + half
    return torch.where(torch.isnan(x), x, (bits & ~((1 << drop) - 1)).view(torch.float32))
"""


MUTANTS = {
    "decode_check": [
        (
            "by hand: 65280 stored as the format's largest number instead of inf",
            "FIELDS_BY_HAND = {-2.5: (1, 16, 16), 2e-5: (0, 0, 21), 65280.0: (0, 30, 63)}",
            r"a cast does not stop at the largest",
        ),
        (
            "by hand: a zero exponent field read as 2^(0 - bias)",
            "FIELDS_BY_HAND = {-2.5: (1, 16, 16), 2e-5: (0, 0, 42), 65280.0: (0, 31, 0)}",
            r"all-zero exponent field stand for",
        ),
        (
            "by hand: the subnormal truncated",
            "FIELDS_BY_HAND = {-2.5: (1, 16, 16), 2e-5: (0, 0, 20), 65280.0: (0, 31, 0)}",
            r"keeps the nearest number, not the one below",
        ),
        (
            "by hand: the exponent without the bias",
            "FIELDS_BY_HAND = {-2.5: (1, 1, 16), 2e-5: (0, 0, 21), 65280.0: (0, 31, 0)}",
            r"added to it before it is stored",
        ),
        (
            "by hand: 2e-5 as a normal number with a negative exponent",
            "FIELDS_BY_HAND = {-2.5: (1, 16, 16), 2e-5: (0, -2, 20), 65280.0: (0, 31, 0)}",
            r"negative exponent field",
        ),
        (
            "by hand: fp16's own fields (a cast torch can run) instead of the (5, 6) format's",
            "FIELDS_BY_HAND = {-2.5: (1, 16, 256), 2e-5: (0, 0, 336), 65280.0: (0, 30, 1016)}",
            r"wider than the format's 6 bits",
        ),
        (
            "bf16 read with fp16's field widths",
            _DECODE_HEAD + """
def decode(x, fmt):
    if not isinstance(fmt, str):
        return _general(x, *fmt)
    e, m = (5, 10) if fmt in ("fp16", "bf16") else WIDTHS[fmt]
    bits = _bits(x, fmt)
    if fmt == "tf32":
        bits = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000) >> 13
    return bits >> (e + m), (bits >> m) & ((1 << e) - 1), bits & ((1 << m) - 1)
""",
            r"fp16's field widths",
        ),
        (
            "tf32 by truncation",
            _DECODE_HEAD + """
def decode(x, fmt):
    if not isinstance(fmt, str):
        return _general(x, *fmt)
    e, m = WIDTHS[fmt]
    bits = _bits(x, fmt)
    if fmt == "tf32":
        bits >>= 13
    return bits >> (e + m), (bits >> m) & ((1 << e) - 1), bits & ((1 << m) - 1)
""",
            r"truncated the mantissa",
        ),
        (
            "unbiased exponent",
            _DECODE_HEAD + """
def decode(x, fmt):
    if not isinstance(fmt, str):
        return _general(x, *fmt)
    e, m = WIDTHS[fmt]
    bits = _bits(x, fmt)
    if fmt == "tf32":
        bits = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000) >> 13
    return bits >> (e + m), ((bits >> m) & ((1 << e) - 1)) - (2 ** (e - 1) - 1), bits & ((1 << m) - 1)
""",
            r"not exponent − bias",
        ),
        (
            "hidden bit in the mantissa",
            _DECODE_HEAD + """
def decode(x, fmt):
    if not isinstance(fmt, str):
        return _general(x, *fmt)
    e, m = WIDTHS[fmt]
    bits = _bits(x, fmt)
    if fmt == "tf32":
        bits = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000) >> 13
    return bits >> (e + m), (bits >> m) & ((1 << e) - 1), (bits & ((1 << m) - 1)) | (1 << m)
""",
            r"hidden leading 1",
        ),
        (
            "made-up formats: the bits that do not fit dropped (rounded down)",
            _DECODE_HEAD + """
def decode(x, fmt):
    if not isinstance(fmt, str):
        return _general(x, *fmt, chop=True)
    e, m = WIDTHS[fmt]
    bits = _bits(x, fmt)
    if fmt == "tf32":
        bits = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000) >> 13
    return bits >> (e + m), (bits >> m) & ((1 << e) - 1), bits & ((1 << m) - 1)
""",
            r"check how you handle",
        ),
        (
            "made-up formats: a value past the largest number kept as the largest",
            _DECODE_HEAD + """
def decode(x, fmt):
    if not isinstance(fmt, str):
        return _general(x, *fmt, overflow=False)
    e, m = WIDTHS[fmt]
    bits = _bits(x, fmt)
    if fmt == "tf32":
        bits = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000) >> 13
    return bits >> (e + m), (bits >> m) & ((1 << e) - 1), bits & ((1 << m) - 1)
""",
            r"past the format's largest number",
        ),
    ],
    "round_to_check": [
        (
            "by hand: ties away from zero",
            "ROUNDED_BY_HAND = {'1 + 2**-7 in (5, 6)': 1 + 2**-6, '1 + 3 * 2**-7 in (5, 6)': 1 + 2**-5, "
            "'129 in (5, 6)': 130.0, '65100 in (5, 6)': 65024.0}",
            r"sent the tie up",
        ),
        (
            "by hand: anything past the format's largest number is inf",
            "ROUNDED_BY_HAND = {'1 + 2**-7 in (5, 6)': 1.0, '1 + 3 * 2**-7 in (5, 6)': 1 + 2**-5, "
            "'129 in (5, 6)': 128.0, '65100 in (5, 6)': float('inf')}",
            r"[Hh]ow far past the format.s largest number",
        ),
        (
            "by hand: truncation",
            "ROUNDED_BY_HAND = {'1 + 2**-7 in (5, 6)': 1.0, '1 + 3 * 2**-7 in (5, 6)': 1 + 2**-6, "
            "'129 in (5, 6)': 128.0, '65100 in (5, 6)': 65024.0}",
            r"truncation",
        ),
        (
            "by hand: fp16's casts (2049 to 2048 read off the page) instead of the (5, 6) format's",
            "ROUNDED_BY_HAND = {'1 + 2**-7 in (5, 6)': 1 + 2**-7, '1 + 3 * 2**-7 in (5, 6)': 1 + 3 * 2**-7, "
            "'129 in (5, 6)': 129.0, '65100 in (5, 6)': 65088.0}",
            r"the value itself, but the format cannot hold it",
        ),
        (
            "rounding by truncation",
            """
import torch
def round_to(x, fmt, ties="even"):
    drop = {"fp32": 0, "tf32": 13, "bf16": 16}.get(fmt)
    if drop is None:
        return x.half().float()
    return (x.float().view(torch.int32) & ~((1 << drop) - 1)).view(torch.float32)
""",
            r"truncation",
        ),
        (
            "tf32 by truncation",
            """
import torch
def round_to(x, fmt, ties="even"):
    if fmt == "tf32":
        return (x.float().view(torch.int32) & ~0x1FFF).view(torch.float32)
    return x.to({"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[fmt]).float()
""",
            r"chopped off the low 13",
        ),
        (
            "ties round up, not to even",
            """
import torch
def round_to(x, fmt, ties="even"):
    if fmt == "tf32":
        return torch.where(torch.isnan(x), x, ((x.float().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32))
    return x.to({"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[fmt]).float()
""",
            r"to even",
        ),
        (
            "returns the low-precision dtype",
            """
import torch
def round_to(x, fmt, ties="even"):
    return x.to({"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}[fmt])
""",
            r"return float32",
        ),
        (
            "ties='away' ignored: every tie to even",
            """
import torch
def round_to(x, fmt, ties="even"):
    x = x.float()
    if fmt == "tf32":
        bits = x.view(torch.int32)
        return torch.where(torch.isnan(x), x, ((bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32))
    return x.to({"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[fmt]).float()
""",
            r"neighbour of larger magnitude|toward zero",
        ),
        (
            "ties away done on the value: half a step added, so negative ties go toward zero",
            """
import torch
def round_to(x, fmt, ties="even"):
    x = x.float()
    if fmt == "fp32" or fmt == "fp16" or (fmt == "bf16" and ties == "even"):
        return x.to({"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[fmt]).float()
    drop = 13 if fmt == "tf32" else 16
    bits = x.view(torch.int32)
    if ties == "even":
        bits = bits + (1 << (drop - 1)) - 1 + ((bits >> drop) & 1)
        return torch.where(torch.isnan(x), x, (bits & ~((1 << drop) - 1)).view(torch.float32))
    mantissa_bits = 10 if fmt == "tf32" else 7
    step = torch.ldexp(torch.ones_like(x), torch.frexp(x)[1] - 1 - mantissa_bits)  # one kept step at x
    rounded = torch.floor(x / step + 0.5) * step  # half a step up, on the value: ties go toward +inf
    even = x.to(torch.bfloat16).float() if fmt == "bf16" else round_to(x, fmt)
    return torch.where(torch.isfinite(x) & (x.abs() >= 2.0**-126), rounded, even)  # normal numbers only
""",
            r"toward zero|positive values and wrong for negative",
        ),
        (  # the tf32 rule (fp32's bits rounded off), right for a format that is fp32's top bits, applied to fp16
            "fp16 ties away done on fp32's bits, as for tf32",
            """
import torch
def round_to(x, fmt, ties="even"):
    x = x.float()
    if fmt == "fp32":
        return x.clone()
    if ties == "even" and fmt != "tf32":
        return x.to({"fp16": torch.float16, "bf16": torch.bfloat16}[fmt]).float()
    drop = {"tf32": 13, "fp16": 13, "bf16": 16}[fmt]
    bits = x.view(torch.int32)
    half = 1 << (drop - 1)
    bits = bits + (half - 1) + ((bits >> drop) & 1) if ties == "even" else bits + half
    return torch.where(torch.isnan(x), x, (bits & ~((1 << drop) - 1)).view(torch.float32))
""",
            r"a number fp16 does not hold",
        ),
        (
            "fp16 ties away ignored: torch's cast",
            _ROUND_REFERENCE.replace("{fp16_away}", "        return x.to(torch.float16).float()\n"),
            r"no\s+cast does that for you",
        ),
        (
            "fp16 ties found with the spacing of normal numbers only",
            _ROUND_REFERENCE.replace("{fp16_away}", """        r = x.to(torch.float16).float()
        spacing = torch.ldexp(torch.ones_like(x), torch.frexp(x)[1] - 1 - 10)  # fp16's spacing at x, if x is normal
        tie = (x - r).abs() == spacing / 2
        return torch.where(tie & (r.abs() < x.abs()), r + torch.copysign(spacing, x), r)
"""),
            r"wrong below its smallest normal number",
        ),
    ],
    "predict_vanishing_check": [
        (
            "the smallest subnormal itself vanishes (<= the smallest subnormal)",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [x != 0 and abs(x) <= 2.0 ** (1 - bias - mantissa_bits) for x in values]
""",
            r"the cast keeps it",
        ),
        (
            "a zero exponent field read as 2^(0 - bias)",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [x != 0 and abs(x) <= 2.0 ** (0 - bias - mantissa_bits) / 2 for x in values]
""",
            r"within a factor\s+of two",
        ),
        (
            "everything below the smallest normal vanishes",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [x != 0 and abs(x) < 2.0 ** (1 - bias) for x in values]
""",
            r"\(a subnormal\)",
        ),
        (
            "the smallest subnormal itself as the threshold",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [x != 0 and abs(x) < 2.0 ** (1 - bias - mantissa_bits) for x in values]
""",
            r"rounds\s+to the nearest number the format holds",
        ),
        (
            "a tie at exactly half kept (< for <=)",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [x != 0 and abs(x) < 2.0 ** (1 - bias - mantissa_bits) / 2 for x in values]
""",
            r"which of the two does a cast keep at a tie\?",
        ),
        (
            "bias off by one",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1)
    return [x != 0 and abs(x) <= 2.0 ** (1 - bias - mantissa_bits) / 2 for x in values]
""",
            r"within a factor\s+of two",
        ),
        (
            "negative values never vanish",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [0 < x <= 2.0 ** (1 - bias - mantissa_bits) / 2 for x in values]
""",
            r"negative value vanishes too",
        ),
        (
            "zero counted as vanishing",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [abs(x) <= 2.0 ** (1 - bias - mantissa_bits) / 2 for x in values]
""",
            r"zero already",
        ),
    ],
    "ZERO_SHARE_check": [
        (
            "share: bf16 loses more (fewer mantissa bits)",
            "ZERO_SHARE = {'e5m6': 0.57, 'bf16': 'most'}",
            r"precision, not its range",
        ),
        (
            "share: fp16 loses everything below its smallest normal",
            "ZERO_SHARE = {'e5m6': 0.78, 'bf16': 'none'}",
            r"what it holds below its\s+smallest normal number",
        ),
        (
            # 0 is a share like any other: scored as a guess, never refused (the refusal told a learner it is not 0)
            "share: nothing vanishes in e5m6 either",
            "ZERO_SHARE = {'e5m6': 0.0, 'bf16': 'none'}",
            r"what a cast does with a value smaller than all of them",
        ),
        (
            "share: fp16 loses everything below its smallest subnormal",
            "ZERO_SHARE = {'e5m6': 0.598, 'bf16': 'none'}",
            r"what a cast does with a value smaller than all of them",
        ),
    ],
    "choose_loss_scale_check": [
        (
            "the old contract: the smallest scale that rescues the smallest gradient",
            """
import torch
def choose_loss_scale(grads, dtype):
    g = grads[grads != 0].abs().double()
    scale = 1.0
    while ((g * scale).to(dtype) == 0).any():
        scale *= 2
    if not torch.isfinite((g * scale).to(dtype)).all():
        raise ValueError("no scale fits")
    return scale
""",
            r"the old aim",
        ),
        (
            "one power too high: returns the first scale that overflows",
            """
import torch
def choose_loss_scale(grads, dtype):
    g = grads.abs().max().double()
    scale = 2.0 ** -40
    while torch.isfinite((g * scale).to(dtype)):
        scale *= 2
    return scale
""",
            r"turns the largest gradient into inf",
        ),
        (
            "one power too low: keeps a spare factor of two",
            """
import math, torch
def choose_loss_scale(grads, dtype):
    return 2.0 ** (math.floor(math.log2(torch.finfo(dtype).max / float(grads.abs().max()))) - 1)
""",
            r"leaves room unused",
        ),
        (
            "never goes below 1",
            """
import math, torch
def choose_loss_scale(grads, dtype):
    k = math.floor(math.log2(torch.finfo(dtype).max / float(grads.abs().max())))
    return 2.0 ** max(k, 0)
""",
            r"may go below 1",
        ),
        (
            "signed maximum, not the largest magnitude",
            """
import math, torch
def choose_loss_scale(grads, dtype):
    k = math.floor(math.log2(torch.finfo(dtype).max / float(grads.max())))
    return 2.0 ** k
""",
            r"largest magnitude is negative",
        ),
        (
            "returns the exponent",
            """
import math, torch
def choose_loss_scale(grads, dtype):
    return float(math.floor(math.log2(torch.finfo(dtype).max / float(grads.abs().max()))))
""",
            r"the exponent k",
        ),
        (
            "the largest finite number taken as the overflow line (a cast rounds to nearest)",
            """
import math, torch
def choose_loss_scale(grads, dtype):
    return 2.0 ** math.floor(math.log2(torch.finfo(dtype).max / float(grads.abs().max())))
""",
            r"third number is the case to remember",
        ),
        (
            # an outside tester's first try: section 7's fp8 rule, S = 2^floor(log2(max/amax)), made-up formats too
            "section 7's fp8 scale copied: the largest finite number as the line, in every format",
            """
import math, torch
def choose_loss_scale(grads, dtype):
    if isinstance(dtype, torch.dtype):
        largest = torch.finfo(dtype).max
    else:
        e, m = dtype
        largest = (2 - 2.0 ** -m) * 2.0 ** (2 ** e - 2 - (2 ** (e - 1) - 1))
    return 2.0 ** math.floor(math.log2(largest / float(grads.abs().max())))
""",
            r"not where overflow starts",
        ),
    ],
    "stall_point_check": [
        (
            "stops only once the step is less than half the spacing (a tie thought to grow)",
            _STALL_HEAD + """
def stall_point(dtype, step):
    step, eps = _held(dtype, step)
    return 2.0 ** (math.floor(math.log2(2 * step / eps)) + 1)
""",
            r"in every case section 2 names, the rare one too",
        ),
        (
            "step/eps",
            _STALL_HEAD + """
def stall_point(dtype, step):
    return step / _held(dtype, step)[1]
""",
            r"still reaches the next number up",
        ),
        (
            # an outside tester passed the check this way before it asked about made-up formats: no idea of the format
            "a search in the dtype: doubling until x + step == x, then halving back",
            """
import torch
def stall_point(dtype, step):
    s, x = torch.tensor(step, dtype=dtype), torch.tensor(1.0, dtype=dtype)
    while x + s != x:
        x = x * 2
    while x / 2 + s == x / 2:
        x = x / 2
    return float(x)
""",
            r"made-up one, given by its widths",
        ),
        (
            "the step taken as it is, not as the format holds it",
            _STALL_HEAD + """
def stall_point(dtype, step):
    eps = _held(dtype, step)[1]
    if isinstance(dtype, torch.dtype):
        step = float(torch.tensor(step, dtype=dtype))
    return 2.0 ** math.ceil(math.log2(2 * step / eps))
""",
            r"The step is stored in the format too",
        ),
        (
            "float32's eps for every dtype",
            """
import math, torch
def stall_point(dtype, step):
    return 2.0 ** math.ceil(math.log2(2 * step / torch.finfo(torch.float32).eps))
""",
            r"does not depend on the format",
        ),
    ],
    "LossScaler_check": [
        (
            "forecast: the scale settles and nothing is skipped once it has come down",
            "SCALER_FORECAST = {'skipped at start': 6, 'share skipped in the long run': 0.002}",
            r"one whole cycle",
        ),
        (
            "forecast: one skip every growth_interval steps",
            "SCALER_FORECAST = {'skipped at start': 6, 'share skipped in the long run': 0.1}",
            r"one whole cycle",
        ),
        (
            "forecast: 2^24 counted among the overflowing scales",
            "SCALER_FORECAST = {'skipped at start': 7, 'share skipped in the long run': 1 / 11}",
            r"one step off",
        ),
        (
            "never grows back",
            _SCALER_HEAD + """
    def update(self, found_inf):
        if found_inf:
            self.scale *= self.backoff_factor
            return False
        return True
""",
            r"scale grew and yours stayed",
        ),
        (
            "run of good steps survives an overflow",
            _SCALER_HEAD + """
    def update(self, found_inf):
        if found_inf:
            self.scale *= self.backoff_factor
            return False
        self.good += 1
        if self.good == self.growth_interval:
            self.scale *= self.growth_factor
            self.good = 0
        return True
""",
            r"what has the evidence\s+said since",
        ),
        (
            "never backs off",
            _SCALER_HEAD + """
    def update(self, found_inf):
        if found_inf:
            self.good = 0
            return False
        self.good += 1
        if self.good == self.growth_interval:
            self.scale *= self.growth_factor
            self.good = 0
        return True
""",
            r"stayed at \S+ or rose",
        ),
        (
            "applies the step on overflow",
            _SCALER_HEAD + """
    def update(self, found_inf):
        if found_inf:
            self.scale *= self.backoff_factor
            self.good = 0
            return True
        self.good += 1
        if self.good == self.growth_interval:
            self.scale *= self.growth_factor
            self.good = 0
        return True
""",
            r"worth applying",
        ),
        (
            "grows one step late",
            _SCALER_HEAD + """
    def update(self, found_inf):
        if found_inf:
            self.scale *= self.backoff_factor
            self.good = 0
            return False
        self.good += 1
        if self.good > self.growth_interval:
            self.scale *= self.growth_factor
            self.good = 0
        return True
""",
            r"scale grew and yours stayed|not GradScaler's",
        ),
        (  # GradScaler's rule, right with one micro-batch a step, run on every micro-batch of a window
            "accumulation ignored: GradScaler's rule on every micro-batch",
            _SCALER_HEAD + """
    def update(self, found_inf):
        if found_inf:
            self.scale *= self.backoff_factor
            self.good = 0
            return False
""" + _GROW,
            r"step the optimizer after micro-batch 1 of a window",
        ),
        (
            "backs off at once, at the micro-batch that overflowed",
            _SCALER_HEAD + """
    def update(self, found_inf):
        self.seen += 1
        if found_inf:
            self.scale *= self.backoff_factor
            self.good, self.bad = 0, True
        if self.seen < self.accumulation_steps:
            return False
        bad, self.seen, self.bad = self.bad, 0, False
        if bad:
            return False
""" + _GROW,
            r"changed its scale after micro-batch 1 of a window",
        ),
        (
            "only the window's last micro-batch decides",
            _SCALER_HEAD + """
    def update(self, found_inf):
        self.seen += 1
        if self.seen < self.accumulation_steps:
            return False
        self.seen = 0
        if found_inf:
            self.scale *= self.backoff_factor
            self.good = 0
            return False
""" + _GROW,
            r"whose micro-batch 1\s+overflowed",
        ),
        (
            "backs off once per overflowing micro-batch",
            _SCALER_HEAD + """
    def update(self, found_inf):
        self.seen += 1
        self.infs += bool(found_inf)
        if self.seen < self.accumulation_steps:
            return False
        infs, self.seen, self.infs = self.infs, 0, 0
        if infs:
            self.scale *= self.backoff_factor ** infs
            self.good = 0
            return False
""" + _GROW,
            r"lowered its scale more than once",
        ),
        (
            "growth counted in micro-batches",
            _SCALER_HEAD + """
    def update(self, found_inf):
        self.seen += 1
        if found_inf:
            self.bad, self.good = True, 0
        else:
            self.good += 1
        if self.seen < self.accumulation_steps:
            return False
        bad, self.seen, self.bad = self.bad, 0, False
        if bad:
            self.scale *= self.backoff_factor
            return False
        if self.good >= self.growth_interval:
            self.scale *= self.growth_factor
            self.good = 0
        return True
""",
            r"grew its scale sooner",
        ),
    ],
}

# Shortcuts (issue 29): the course's own code called instead of the reasoning; each check notices and says so.
MUTANTS["LossScaler_check"].append((
    "shortcut: GradScaler's trace replayed",
    """
from grader.checks import lesson03 as _course
class LossScaler:
    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.settings = dict(init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                             growth_interval=growth_interval)
        self.scale, self.flags = init_scale, []
    def update(self, found_inf):
        self.flags.append(bool(found_inf))
        applied, self.scale = _course.gradscaler_trace(self.flags, **self.settings)[-1]
        return applied
""",
    r"calls grader.checks.lesson03.gradscaler_trace",
))

MUTANTS["LossScaler_check"].append((
    "shortcut: torch's own scale update (a C function) called from update",
    """
import torch
class LossScaler:
    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale, self.growth_factor, self.backoff_factor = init_scale, growth_factor, backoff_factor
        self.growth_interval = growth_interval
        self._scale, self._tracker = torch.full((), float(init_scale)), torch.zeros((), dtype=torch.int32)
    def update(self, found_inf):
        torch._amp_update_scale_(self._scale, self._tracker, torch.full((), float(found_inf)), self.growth_factor,
                                 self.backoff_factor, self.growth_interval)
        self.scale = float(self._scale)
        return not found_inf
""",
    r"calls torch\._amp_update_scale_",
))


# A prediction's wrong value is scored, not failed (issue 29: a graded cell of its own, banded credit on the first
# guess): those mutants move to PREDICTION_MUTANTS, run by tests/test_prediction_scores.py in both graders. What
# fails a prediction's cell is a malformed answer.
PREDICTION_MUTANTS = {}
for _check, _name, _cell in (("ZERO_SHARE_check", "ZERO_SHARE", "ZERO_SHARE_check"),
                             ("LossScaler_check", "SCALER_FORECAST", "SCALER_FORECAST_check")):
    PREDICTION_MUTANTS[_cell] = [(n, src + f"\n{_name}['why'] = 'a guess with a reason'", pattern)
                                 for n, src, pattern in MUTANTS[_check] if src.startswith(f"{_name} =")]
    MUTANTS[_check] = [m for m in MUTANTS[_check] if not m[1].startswith(f"{_name} =")]
    MUTANTS[_cell] = [
        ("prediction without a reason", f"{_name}.pop('why')", r"needs exactly the keys"),
        ("prediction as a bare number", f"{_name} = 0.5", r"should be a dict"),
    ]
# A share above 1 is malformed, not a wrong guess: refused before it is recorded, as a share (0 to 1, 0 included: an
# outside tester read "the share is not 0" off the refusal of 0.0 when e5m6 was a positive number)
MUTANTS["ZERO_SHARE_check"].append(("share: a percentage, not a fraction", "ZERO_SHARE['e5m6'] = 56.8",
                                    r"share from 0 to 1 \(0\.2 for 20%\)"))
MUTANTS["SCALER_FORECAST_check"].append(("share: a percentage, not a fraction",
                                         "SCALER_FORECAST['share skipped in the long run'] = 9.1",
                                         r"share from 0 to 1 \(0\.2 for 20%\)"))
