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
"""

_SCALER_HEAD = """
class LossScaler:
    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale, self.growth_factor, self.backoff_factor = init_scale, growth_factor, backoff_factor
        self.growth_interval, self.good = growth_interval, 0
"""

MUTANTS = {
    "decode_check": [
        (
            "by hand: 65520 stored as fp16's largest number instead of inf",
            "FIELDS_BY_HAND = {-2.5: (1, 16, 256), 1e-5: (0, 0, 168), 65520.0: (0, 30, 1023)}",
            r"a cast does not stop at the largest",
        ),
        (
            "by hand: a zero exponent field read as 2^(0 - bias)",
            "FIELDS_BY_HAND = {-2.5: (1, 16, 256), 1e-5: (0, 0, 336), 65520.0: (0, 31, 0)}",
            r"same power of two as the smallest normal",
        ),
        (
            "by hand: the exponent without the bias",
            "FIELDS_BY_HAND = {-2.5: (1, 1, 256), 1e-5: (0, 0, 168), 65520.0: (0, 31, 0)}",
            r"adds the bias",
        ),
        (
            "by hand: 1e-5 as a normal number with a negative exponent",
            "FIELDS_BY_HAND = {-2.5: (1, 16, 256), 1e-5: (0, -2, 320), 65520.0: (0, 31, 0)}",
            r"unsigned integer",
        ),
        (
            "bf16 read with fp16's field widths",
            _DECODE_HEAD + """
def decode(x, fmt):
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
    e, m = WIDTHS[fmt]
    bits = _bits(x, fmt)
    if fmt == "tf32":
        bits = ((bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000) >> 13
    return bits >> (e + m), (bits >> m) & ((1 << e) - 1), (bits & ((1 << m) - 1)) | (1 << m)
""",
            r"hidden leading 1",
        ),
    ],
    "round_to_check": [
        (
            "by hand: ties away from zero",
            "ROUNDED_BY_HAND = {'1 + 2**-8 in bf16': 1 + 2**-7, '1 + 3 * 2**-8 in bf16': 1 + 2**-6, "
            "'2049 in fp16': 2050.0, '65519 in fp16': 65504.0}",
            r"sent the tie up",
        ),
        (
            "by hand: anything past fp16's largest number is inf",
            "ROUNDED_BY_HAND = {'1 + 2**-8 in bf16': 1.0, '1 + 3 * 2**-8 in bf16': 1 + 2**-6, "
            "'2049 in fp16': 2048.0, '65519 in fp16': float('inf')}",
            r"[Hh]ow far past fp16.s largest number",
        ),
        (
            "by hand: truncation",
            "ROUNDED_BY_HAND = {'1 + 2**-8 in bf16': 1.0, '1 + 3 * 2**-8 in bf16': 1 + 2**-7, "
            "'2049 in fp16': 2048.0, '65519 in fp16': 65504.0}",
            r"truncation",
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
            r"not 2\^\(0 − bias\)",
        ),
        (
            "everything below the smallest normal vanishes",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [x != 0 and abs(x) < 2.0 ** (1 - bias) for x in values]
""",
            r"subnormals",
        ),
        (
            "the smallest subnormal itself as the threshold",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [x != 0 and abs(x) < 2.0 ** (1 - bias - mantissa_bits) for x in values]
""",
            r"rounds it up",
        ),
        (
            "a tie at exactly half kept (< for <=)",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1) - 1
    return [x != 0 and abs(x) < 2.0 ** (1 - bias - mantissa_bits) / 2 for x in values]
""",
            r"tie rounds to the even neighbour",
        ),
        (
            "bias off by one",
            """
def predict_vanishing(values, exponent_bits, mantissa_bits):
    bias = 2 ** (exponent_bits - 1)
    return [x != 0 and abs(x) <= 2.0 ** (1 - bias - mantissa_bits) / 2 for x in values]
""",
            r"off by a factor of two",
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
            "ZERO_SHARE = {'fp16': 0.45, 'bf16': 'most'}",
            r"precision, not its range",
        ),
        (
            "share: fp16 loses everything below its smallest normal",
            "ZERO_SHARE = {'fp16': 0.78, 'bf16': 'none'}",
            r"below its smallest normal",
        ),
        (
            "share: fp16 loses everything below its smallest subnormal",
            "ZERO_SHARE = {'fp16': 0.478, 'bf16': 'none'}",
            r"nearer to the subnormal than to 0",
        ),
        (
            "share: a percentage, not a fraction",
            "ZERO_SHARE = {'fp16': 44.7, 'bf16': 'none'}",
            r"not 25",
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
            r"one power of two too high",
        ),
        (
            "one power too low: keeps a spare factor of two",
            """
import math, torch
def choose_loss_scale(grads, dtype):
    return 2.0 ** (math.floor(math.log2(torch.finfo(dtype).max / float(grads.abs().max()))) - 1)
""",
            r"one power of two too low",
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
            r"round down to it",
        ),
    ],
    "stall_point_check": [
        (
            "stops only once the step is less than half the spacing (a tie thought to grow)",
            """
import math, torch
def stall_point(dtype, step):
    step = float(torch.tensor(step, dtype=dtype))
    return 2.0 ** (math.floor(math.log2(2 * step / torch.finfo(dtype).eps)) + 1)
""",
            r"at most half the spacing, not only",
        ),
        (
            "step/eps",
            """
import torch
def stall_point(dtype, step):
    return step / torch.finfo(dtype).eps
""",
            r"half the spacing",
        ),
        (
            "float32's eps for every dtype",
            """
import math, torch
def stall_point(dtype, step):
    return 2.0 ** math.ceil(math.log2(2 * step / torch.finfo(torch.float32).eps))
""",
            r"eps of the dtype you were given",
        ),
    ],
    "LossScaler_check": [
        (
            "forecast: the scale settles and nothing is skipped once it has come down",
            "SCALER_FORECAST = {'skipped at start': 6, 'share skipped in the long run': 0.002}",
            r"never\s+stops probing",
        ),
        (
            "forecast: one skip every growth_interval steps",
            "SCALER_FORECAST = {'skipped at start': 6, 'share skipped in the long run': 0.1}",
            r"count starts\s+again",
        ),
        (
            "forecast: 2^24 counted among the overflowing scales",
            "SCALER_FORECAST = {'skipped at start': 7, 'share skipped in the long run': 1 / 11}",
            r"count the start again",
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
            r"never grows back",
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
            r"resets the count of good steps",
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
            r"multiply it by backoff_factor",
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
            r"skip the step on overflow",
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
            r"GradScaler grows the scale|GradScaler's is",
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
