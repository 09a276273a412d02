"""Thin ipywidgets wrappers over the plot functions: controls in, a Figure out."""

from __future__ import annotations

from typing import Callable, Sequence

import ipywidgets as widgets
from IPython.display import display

from grader import floats, plots
from grader.specs import Chip


def roofline_explorer(
    chips: Sequence[Chip],
    attainable: Callable[[float, float, float], float],
    bound: Callable[[float, float, float], str],
    intensity_of: Callable[[int, int], float],
) -> widgets.Widget:
    """Pick a chip, a dtype and a matrix size; see where that matmul sits on the chip's roofline.

    `intensity_of(n, bytes_per_element)` gives a matmul's FLOP per byte;
    `attainable` and `bound` are the learner's functions.
    """
    chip_box = widgets.Dropdown(options=[(c.name, i) for i, c in enumerate(chips)], description="chip")
    dtype_box = widgets.Dropdown(options=["fp32", "fp16", "bf16", "tf32"], value="fp32", description="dtype")
    size = widgets.IntSlider(value=10, min=4, max=14, description="log2 n")
    verdict = widgets.HTML()
    out = widgets.Output()

    def redraw(*_):
        chip = chips[chip_box.value]
        dtype = dtype_box.value if dtype_box.value in chip.peak_flops else "fp32"
        width = 4 if dtype in ("fp32", "tf32") else 2
        n = 2 ** size.value
        peak = chip.peak(dtype)
        x = intensity_of(n, width)
        verdict.value = (
            f"<b>{n}×{n} matmul in {dtype}</b> on {chip.name}: {x:.0f} FLOP/byte, "
            f"balance point {peak / chip.bandwidth:.0f} FLOP/byte → <b>{bound(x, peak, chip.bandwidth)}-bound</b>, "
            f"at most {attainable(x, peak, chip.bandwidth) / 1e12:.1f} TFLOP/s "
            f"(source: {chip.source.split(';')[0]})"
        )
        fig = plots.roofline(
            [(f"{chip.name} {dtype} (datasheet)", peak, chip.bandwidth)],
            [(f"matmul n={n}", x), ("add", 1 / (3 * width))],
            attainable,
        )
        out.clear_output(wait=True)
        with out:
            display(fig)

    for control in (chip_box, dtype_box, size):
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([chip_box, dtype_box, size]), verdict, out])


def bit_explorer(decode: Callable[[float, str], tuple[int, int, int]], value: str = "0.1") -> widgets.Widget:
    """Type a number; see its sign, exponent and mantissa bits in every format, the stored value and its error.

    `decode(x, fmt)` is the learner's function (fp32, tf32, fp16, bf16); fp8 is read by grader.floats.
    """
    box = widgets.Text(value=value, description="number", continuous_update=False)
    table = widgets.HTML()

    def redraw(*_):
        try:
            x = float(box.value)
        except ValueError:
            table.value = f"<p>{box.value!r} is not a number (try 0.1, -3e-8, 65504, inf, nan)</p>"
            return
        table.value = floats.fields_html(x, {**floats.FORMATS, **floats.FP8}, decode)

    box.observe(redraw, names="value")
    redraw()
    return widgets.VBox([box, table])
