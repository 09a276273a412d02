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
            "rounding by truncation",
            """
import torch
def round_to(x, fmt):
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
def round_to(x, fmt):
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
def round_to(x, fmt):
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
def round_to(x, fmt):
    return x.to({"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}[fmt])
""",
            r"return float32",
        ),
    ],
    "predict_vanishing_check": [
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
    "underflows_check": [
        (
            "judged against the smallest normal",
            """
import torch
def underflows(values, dtype):
    return (values != 0) & (values.abs() < torch.finfo(dtype).tiny)
""",
            r"subnormals",
        ),
        (
            "counts zeros",
            """
import torch
def underflows(values, dtype):
    return values.to(dtype) == 0
""",
            r"was zero already",
        ),
        (
            "forgets negative values",
            """
import torch
def underflows(values, dtype):
    return (values > 0) & (values.to(dtype) == 0)
""",
            r"negative value underflows",
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
    ],
    "stall_point_check": [
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
