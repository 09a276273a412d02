"""Float formats bit by bit: field widths, limits, and drawing a number's fields.

What lesson 03's bit explorer and range picture need. It never decides how a
number is rounded into fp32, tf32, fp16 or bf16: that is the learner's `decode`,
passed in. It does read fp8 bit patterns (torch casts, then the raw byte), since
no exercise asks for them, and it turns fields back into the value they store.
It knows the limits and values of the formats the course names only: a made-up
format's are what lessons 03 and 06 ask for, and it refuses them (MadeUpFormat).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Callable

import torch


class MadeUpFormat(ValueError):
    """Raised for the limits or the values of a format the course does not name."""


def _made_up(fmt: "Format") -> None:
    """Refuse a made-up format's limits and values: they are what lessons 03 and 06 ask a learner to work out from the
    widths (copy tests r14-r23 read them off Format(...).smallest_subnormal, value_of and max, in a cell, another
    process or a function). The instructor's judges compute their own (solutions/judges/lesson03.py)."""
    raise MadeUpFormat(f"grader.floats knows the limits and values of the formats the course names (fp32, tf32, fp16, "
                       f"bf16, fp8 e4m3 and e5m2), not of a made-up one ({fmt.exponent_bits} exponent and "
                       f"{fmt.mantissa_bits} mantissa bits): working those out from the bits is the exercise.")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: its field widths and how it spends its top exponent."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    dtype: torch.dtype | None  # the torch dtype, None for tf32 (a matmul mode, not a storage type)
    ieee_specials: bool = True  # all-ones exponent means inf/nan; False for e4m3fn (nan only, no inf)

    def _limits_asked(self) -> None:
        # inside a check's watch (grader.shortcuts.guard) the check names a learner's function that asked, by its call
        if (self.exponent_bits, self.mantissa_bits, self.ieee_specials) not in _NAMED_WIDTHS:
            _made_up(self)

    @property
    def bits(self) -> int:
        """Total width: sign + exponent + mantissa (tf32 is 19 bits stored in 32)."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def eps(self) -> float:
        """Gap between 1 and the next representable number."""
        return 2.0**-self.mantissa_bits

    @property
    def smallest_normal(self) -> float:
        self._limits_asked()
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        self._limits_asked()
        return 2.0 ** (1 - self.bias - self.mantissa_bits)

    @property
    def max(self) -> float:
        """Largest finite value."""
        self._limits_asked()
        if self.ieee_specials:
            top = 2**self.exponent_bits - 2
            return (2 - 2.0**-self.mantissa_bits) * 2.0 ** (top - self.bias)
        top = 2**self.exponent_bits - 1  # e4m3fn: the top exponent holds numbers; only S.1111.111 is nan
        return (2 - 2.0 ** (1 - self.mantissa_bits)) * 2.0 ** (top - self.bias)


FORMATS: dict[str, Format] = {
    "fp32": Format("fp32", 8, 23, torch.float32),
    "tf32": Format("tf32", 8, 10, None),
    "fp16": Format("fp16", 5, 10, torch.float16),
    "bf16": Format("bf16", 8, 7, torch.bfloat16),
}
FP8: dict[str, Format] = {}
if hasattr(torch, "float8_e4m3fn"):
    FP8["fp8 e4m3"] = Format("fp8 e4m3", 4, 3, torch.float8_e4m3fn, ieee_specials=False)
if hasattr(torch, "float8_e5m2"):
    FP8["fp8 e5m2"] = Format("fp8 e5m2", 5, 2, torch.float8_e5m2)


# the formats the course names (FORMATS, and fp8's two whether or not this torch has them): their limits are what
# lesson 03's section 1 shows. An IEEE-style (4, 3), which lesson 03's decode check tries, is not e4m3fn.
_NAMED_WIDTHS = frozenset({(4, 3, False), (5, 2, True),
                           *((f.exponent_bits, f.mantissa_bits, f.ieee_specials) for f in FORMATS.values())})


def fp8_dtypes() -> list[torch.dtype]:
    """Every 8-bit float dtype this torch has (names start with float8_)."""
    return [getattr(torch, n) for n in sorted(dir(torch)) if n.startswith("float8_") and isinstance(getattr(torch, n), torch.dtype)]


def fp8_fields(x: float, fmt: Format) -> tuple[int, int, int]:
    """(sign, exponent, mantissa) of `x` cast to an fp8 format by torch (round to nearest even)."""
    byte = int(torch.tensor([x], dtype=torch.float32).to(fmt.dtype).view(torch.uint8)[0])
    return byte >> 7, (byte >> fmt.mantissa_bits) & (2**fmt.exponent_bits - 1), byte & (2**fmt.mantissa_bits - 1)


def value_of(sign: int, exponent: int, mantissa: int, fmt: Format) -> float:
    """The number that raw fields (sign, exponent, mantissa) store in `fmt`."""
    fmt._limits_asked()  # a made-up format's values are refused (copy test r15 read ZERO_SHARE's off them)
    top = 2**fmt.exponent_bits - 1
    full = 2**fmt.mantissa_bits - 1
    if fmt.ieee_specials and exponent == top:
        return math.nan if mantissa else (-math.inf if sign else math.inf)
    if not fmt.ieee_specials and exponent == top and mantissa == full:
        return math.nan
    if exponent == 0:  # subnormal (or zero): no hidden 1, exponent fixed at 1 - bias
        magnitude = mantissa * 2.0 ** (1 - fmt.bias - fmt.mantissa_bits)
    else:
        magnitude = (1 + mantissa * 2.0**-fmt.mantissa_bits) * 2.0 ** (exponent - fmt.bias)
    return -magnitude if sign else magnitude


def kind_of(exponent: int, mantissa: int, fmt: Format) -> str:
    """'zero', 'subnormal', 'normal', 'inf' or 'nan' from raw fields."""
    value = value_of(0, exponent, mantissa, fmt)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if exponent == 0:
        return "zero" if mantissa == 0 else "subnormal"
    return "normal"


FIELD_COLOURS = {"sign": "#d62728", "exponent": "#1f77b4", "mantissa": "#2ca02c"}


def _bits(value: int, width: int) -> str:
    return format(value, f"0{width}b") if width else ""


def _stored_text(stored: float, exponent: int, mantissa: int, fmt: Format) -> str:
    """The stored value with its kind below it (normal, subnormal, zero); inf and nan are their own kind, named once."""
    if not math.isfinite(stored):
        return repr(stored)
    return f"{stored!r}<br><small>{kind_of(exponent, mantissa, fmt)}</small>"


def fields_html(x: float, formats: dict[str, Format], decode: Callable[[float, str], tuple[int, int, int]]) -> str:
    """An HTML table: each format's bits coloured by field, the stored value and its error.

    `decode(x, name)` gives the raw fields for fp32/tf32/fp16/bf16 (the learner's
    function); fp8 formats are read by `fp8_fields`.
    """
    rows = []
    for name, fmt in formats.items():
        try:
            sign, exponent, mantissa = fp8_fields(x, fmt) if name in FP8 else decode(x, name)
            stored = value_of(sign, exponent, mantissa, fmt)
        except NotImplementedError:
            raise
        except Exception as exc:  # show the learner's crash in the table, not a traceback
            rows.append(f"<tr><td><b>{name}</b></td><td colspan=5>decode raised {html.escape(repr(exc))}</td></tr>")
            continue
        bits = (
            f"<span style='color:{FIELD_COLOURS['sign']}'>{_bits(sign, 1)}</span> "
            f"<span style='color:{FIELD_COLOURS['exponent']}'>{_bits(exponent, fmt.exponent_bits)}</span> "
            f"<span style='color:{FIELD_COLOURS['mantissa']}'>{_bits(mantissa, fmt.mantissa_bits)}</span>"
        )
        if math.isfinite(stored) and math.isfinite(x):
            error = stored - x
            relative = f"{abs(error) / abs(x):.1e}" if x else "0"
            error_text = f"{error:+.2e}<br><small>relative {relative}</small>"  # two short lines keep the table narrow
        else:
            error_text = "—"
        rows.append(
            f"<tr><td><b>{name}</b> ({fmt.exponent_bits}, {fmt.mantissa_bits})</td>"
            f"<td style='font-family:monospace'>{bits}</td><td>{sign}</td><td>{exponent}</td><td>{mantissa}</td>"
            f"<td>{_stored_text(stored, exponent, mantissa, fmt)}</td><td>{error_text}</td></tr>"
        )
    head = (
        "<tr><th>format (exp, man)</th><th>bits: "
        f"<span style='color:{FIELD_COLOURS['sign']}'>sign</span> "
        f"<span style='color:{FIELD_COLOURS['exponent']}'>exponent</span> "
        f"<span style='color:{FIELD_COLOURS['mantissa']}'>mantissa</span></th>"
        "<th>sign</th><th>exponent</th><th>mantissa</th><th>stored value</th><th>error</th></tr>"
    )
    return f"<p>x = {x!r}</p><table>{head}{''.join(rows)}</table>"
