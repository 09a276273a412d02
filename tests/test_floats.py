"""Unit tests of grader.floats, the lesson 03 plots and widget, and the GradScaler trace the checks compare with."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from grader import floats, plots, widgets
from grader.checks import lesson03


def _fields_by_torch(x: float, fmt: str) -> tuple[int, int, int]:
    """A decode for the widget tests: fp32/fp16/bf16 by torch casts, tf32 read as fp32 cut short."""
    f = floats.FORMATS[fmt]
    t = torch.tensor([x], dtype=torch.float32)
    if fmt in ("fp16", "bf16"):
        bits = int(t.to(f.dtype).view(torch.int16)[0]) & 0xFFFF
    else:
        bits = (int(t.view(torch.int32)[0]) & 0xFFFFFFFF) >> (23 - f.mantissa_bits)
    return bits >> (f.bits - 1), (bits >> f.mantissa_bits) & (2**f.exponent_bits - 1), bits & (2**f.mantissa_bits - 1)


@pytest.mark.parametrize("fmt", [f for f in (*floats.FORMATS.values(), *floats.FP8.values()) if f.dtype is not None],
                         ids=lambda f: f.name)
def test_limits_agree_with_finfo(fmt):
    info = torch.finfo(fmt.dtype)
    assert fmt.max == info.max and fmt.smallest_normal == info.smallest_normal and fmt.eps == info.eps
    assert fmt.smallest_subnormal == info.smallest_normal * info.eps


def test_tf32_limits():
    tf32 = floats.FORMATS["tf32"]
    assert tf32.bits == 19 and tf32.eps == 2.0**-10 and tf32.smallest_normal == torch.finfo(torch.float32).smallest_normal
    assert tf32.max == (2 - 2.0**-10) * 2.0**127


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_value_of_every_16_bit_pattern(fmt):
    f = floats.FORMATS[fmt]
    patterns = np.arange(2**16, dtype=np.uint16)
    if fmt == "fp16":
        want = patterns.view(np.float16).astype(np.float64)
    else:
        want = torch.from_numpy(patterns.view(np.int16)).view(torch.bfloat16).double().numpy()
    got = np.array([floats.value_of(int(p) >> 15, (int(p) >> f.mantissa_bits) & (2**f.exponent_bits - 1),
                                    int(p) & (2**f.mantissa_bits - 1), f) for p in patterns])
    assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("fmt", list(floats.FP8.values()), ids=lambda f: f.name)
def test_value_of_and_fields_of_every_fp8_pattern(fmt):
    values = torch.arange(256, dtype=torch.uint8).view(fmt.dtype).float()
    for byte, value in enumerate(values.tolist()):
        fields = (byte >> 7, (byte >> fmt.mantissa_bits) & (2**fmt.exponent_bits - 1), byte & (2**fmt.mantissa_bits - 1))
        stored = floats.value_of(*fields, fmt)
        assert stored == value or (math.isnan(stored) and math.isnan(value)), (fmt.name, byte)
        if math.isfinite(value) and value != 0:
            assert floats.fp8_fields(value, fmt) == fields


def test_kind_of():
    fp16 = floats.FORMATS["fp16"]
    assert [floats.kind_of(e, m, fp16) for e, m in ((0, 0), (0, 5), (15, 0), (31, 0), (31, 1))] == \
        ["zero", "subnormal", "normal", "inf", "nan"]


def test_fields_html_colours_fields_and_shows_error():
    page = floats.fields_html(0.1, floats.FORMATS, _fields_by_torch)
    for colour in floats.FIELD_COLOURS.values():
        assert colour in page
    assert "0.0999755859375" in page  # 0.1 as fp16 stores it
    assert "relative" in page


def test_fields_html_shows_a_crash_and_passes_the_stub_error():
    def broken(x, fmt):
        raise KeyError(fmt)

    assert "decode raised KeyError" in floats.fields_html(1.0, floats.FORMATS, broken)

    def stub(x, fmt):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        floats.fields_html(1.0, floats.FORMATS, stub)


def test_bit_explorer_responds():
    w = widgets.bit_explorer(_fields_by_torch, value="1.0")
    row, table = w.children
    box = row.children[0]  # the controls sit in a row that wraps at narrow widths
    before = table.value
    box.value = "65520"
    assert table.value != before and "inf" in table.value
    box.value = "not a number"
    assert "is not a number" in table.value


def test_lesson03_plots_return_figures():
    ranges = [(f.name, f.smallest_subnormal, f.smallest_normal, f.max) for f in floats.FORMATS.values()]
    assert isinstance(plots.format_ranges(ranges, [1e-8, 1e-3, 0.0]), Figure)
    assert isinstance(plots.lines({"a": ([1, 2], [3, 4])}, "x", "y", hlines={"h": 3.5}, logx=True, logy=True), Figure)


def test_gradscaler_trace_grows_and_backs_off():
    trace = lesson03.gradscaler_trace([False, False, True, False], init_scale=4.0, growth_interval=2)
    assert trace == [(True, 4.0), (True, 8.0), (False, 4.0), (True, 4.0)]


def test_lesson03_checks_do_not_write_to_stderr(capfd):
    lesson03.check_predict_vanishing(lambda values, e, m: [v != 0 and abs(v) <= 2.0 ** (2 - 2 ** (e - 1) - m) / 2
                                                           for v in values])
    captured = capfd.readouterr()
    assert captured.err == "" and "✓" in captured.out


def test_lesson03_check_rejects_a_wrong_underflow_by_name():
    with pytest.raises(AssertionError, match="subnormal"):
        lesson03.check_predict_vanishing(lambda values, e, m: [v != 0 and abs(v) < 2.0 ** (2 - 2 ** (e - 1)) for v in values])
