"""Plot functions: each takes data and returns a matplotlib Figure (nothing is shown or saved).

Figures are built with matplotlib.figure.Figure, not pyplot, so they appear
exactly once, where the notebook displays them, and never leak between cells.
Labels say where each series came from: measured here, recorded, or modelled.
"""

from __future__ import annotations

import textwrap
from typing import Callable, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

# How a series was obtained decides how it is drawn: measured solid, recorded dashed, modelled dotted.
_STYLE = {"measured": "-", "recorded": "--", "model": ":"}
# Every label, note and legend entry is at least this big (points), so it reads on a projector.
FONT = 9
TITLE_COLUMNS = 70  # a title wraps here to stay inside a 6.4-in figure at 11 pt
# Two series coincide when every shared point agrees within this fraction.
COINCIDE_RTOL = 0.02


def spread(values) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(middle, low, high) of a series: each value a number, a Timing or a sequence of samples.

    A Timing or a sequence of samples gives its median, fastest and slowest; a plain number
    has no spread (low and high are None when no value in the series has one).
    """
    mids, lows, highs, any_spread = [], [], [], False
    for v in values:
        samples = getattr(v, "samples", v)
        if np.ndim(samples) == 0:
            x = float(samples)
            mids.append(x), lows.append(x), highs.append(x)
        else:
            arr = np.asarray(samples, dtype=float)
            mids.append(float(np.median(arr))), lows.append(float(arr.min())), highs.append(float(arr.max()))
            any_spread = True
    mid = np.asarray(mids, dtype=float)
    return (mid, np.asarray(lows), np.asarray(highs)) if any_spread else (mid, None, None)


def coinciding(series: Mapping[str, Sequence[float]], rtol: float = COINCIDE_RTOL) -> dict[str, str]:
    """{label: the earlier label it coincides with} for series drawn on top of one another.

    Two series coincide when they have the same length and every point agrees within `rtol`
    (relative; exact zeros must match), so the later one hides under the earlier one.
    """
    hidden: dict[str, str] = {}
    items = [(label, np.asarray(values, dtype=float)) for label, values in series.items()]
    for j, (label, ys) in enumerate(items):
        for first, xs in items[:j]:
            if first in hidden or len(xs) != len(ys) or not len(ys):
                continue
            if np.allclose(ys, xs, rtol=rtol, atol=0.0, equal_nan=True):
                hidden[label] = first
                break
    return hidden


def _coincide_labels(mids: Mapping[str, Sequence[float]]) -> dict[str, str]:
    """Each label as the legend shows it: "B (coincides with A)" for a series drawn over another."""
    hidden = coinciding(mids)
    return {label: f"{label} (coincides with {hidden[label]})" if label in hidden else label for label in mids}


def _legend(fig: Figure, ax, columns: int = 1, note: str | None = None) -> None:
    """The legend below the axes, off the data; `note` is a line under it (a coincidence, a busy machine)."""
    handles, labels = ax.get_legend_handles_labels()
    note = "\n".join(textwrap.fill(line, 90) for line in note.splitlines()) if note else None
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=columns, fontsize=FONT, frameon=False,
                   title=note, title_fontsize=FONT)
    elif note:
        fig.supxlabel(note, fontsize=FONT, color="0.25")


def _draw_series(ax, xs, values, label, fmt, marker="o", color=None):
    """One series: its middle as a line, its spread (fastest to slowest run) as a band around it."""
    mid, low, high = spread(values)
    xs = np.asarray(xs[: len(mid)], dtype=float)
    (line,) = ax.plot(xs, mid, fmt, marker=marker, label=label, color=color)
    if low is not None:
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    return mid, low is not None


def _series_style(label: str) -> str:
    low = label.lower()
    if "model" in low:
        return _STYLE["model"]
    if "recorded" in low:
        return _STYLE["recorded"]
    return _STYLE["measured"]


def _measured_lines(xs, series, xlabel, ylabel, title, scale=1.0, logx=True, logy=True, note=None) -> Figure:
    """Lines with their spread as bands, coinciding series named, the legend and any note below the axes."""
    fig = Figure(figsize=(6.5, 4.6), layout="constrained")
    ax = fig.add_subplot()
    shown = _coincide_labels({label: spread(values)[0] for label, values in series.items()})
    banded = False
    for label, values in series.items():
        scaled = [np.asarray(getattr(v, "samples", v), dtype=float) / scale for v in values]
        banded |= _draw_series(ax, xs, scaled, shown[label], _series_style(label))[1]
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    notes = [n for n in (note, "shaded: fastest to slowest run; line: median" if banded else None) if n]
    _legend(fig, ax, columns=1, note="\n".join(notes) or None)
    return fig


def time_vs_size(sizes: Sequence[int], seconds: Mapping[str, Sequence], title: str = "", note: str | None = None) -> Figure:
    """Log-log seconds per call against problem size, one line per series.

    Each value is seconds, a Timing or a sequence of samples; the last two draw their
    spread (fastest to slowest run) as a band. `note` is a sentence under the legend
    (e.g. `timing.trust_note(...)`).
    """
    return _measured_lines(sizes, seconds, "matrix size n (n×n @ n×n)", "seconds per call",
                           title or "Time against size", note=note)


def rate_vs_size(sizes: Sequence[int], flops_per_second: Mapping[str, Sequence], title: str = "",
                 note: str | None = None) -> Figure:
    """GFLOP/s against problem size, one line per series (log x, log y); values as in `time_vs_size`."""
    return _measured_lines(sizes, flops_per_second, "matrix size n", "GFLOP/s achieved",
                           title or "Throughput against size", scale=1e9, note=note)


def roofline(
    machines: Sequence[tuple[str, float, float]],
    points: Sequence[tuple[str, float]],
    attainable: Callable[[float, float, float], float],
    title: str = "",
) -> Figure:
    """Rooflines for (label, peak FLOP/s, bandwidth bytes/s) machines, with (label, intensity) points.

    `attainable(intensity, peak, bandwidth)` draws the roof; lessons pass the
    learner's own function, so the plot is only as right as their code.
    """
    fig = Figure(figsize=(7, 5.0), layout="constrained")
    ax = fig.add_subplot()
    intensities = np.logspace(-2, 4, 200)
    colors = [f"C{i}" for i in range(10)]
    roofs = {label: np.asarray([attainable(float(x), peak, bandwidth) for x in intensities]) / 1e9
             for label, peak, bandwidth in machines}
    shown = _coincide_labels(roofs)
    for i, (label, peak, bandwidth) in enumerate(machines):
        color = colors[i % len(colors)]
        ax.loglog(intensities, roofs[label], _series_style(label), color=color, label=shown[label])
        for point_label, x in points:
            y = attainable(float(x), peak, bandwidth) / 1e9
            ax.plot([x], [y], "o", color=color, markersize=5)
            if i == 0:
                ax.annotate(point_label, (x, y), textcoords="offset points", xytext=(4, -12), fontsize=FONT)
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("attainable GFLOP/s")
    ax.set_title(title or "Roofline (your attainable_flops)")
    ax.grid(True, which="both", alpha=0.3)
    _legend(fig, ax, columns=1 if len(machines) < 4 else 2)
    return fig


def _value_text(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def _log_floor(*value_lists) -> float:
    """Where a zero is drawn on a log axis: a tenth of the smallest positive value."""
    values = np.concatenate([np.asarray(v, dtype=float).ravel() for v in value_lists])
    positive = values[values > 0]
    return float(positive.min() / 10) if positive.size else 1e-12


def _points_on_log(ax, xs: np.ndarray, values: np.ndarray, floor: float, color, label=None, marker="o") -> None:
    """Points, not bars, on a log axis (a bar has no bottom there): a zero sits at `floor`, marked "0"."""
    values = np.asarray(values, dtype=float)
    shown = np.where(values > 0, values, floor)
    ax.scatter(xs, shown, s=60, color=color, marker=marker, label=label, zorder=3)
    ax.vlines(xs, floor, shown, color=color, linewidth=1, alpha=0.5)
    for x, v, y in zip(xs, values, shown):
        ax.annotate(_value_text(v), (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=FONT)


def bars(labels: Sequence[str], values: Sequence[float], ylabel: str, title: str = "", log: bool = False) -> Figure:
    """A labelled bar chart; with `log` the values are points on a log axis (bars on a log axis mislead)."""
    fig = Figure(figsize=(6.5, 4.0), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(labels))
    colors = [f"C{i % 10}" for i in range(len(labels))]
    if log:
        ax.set_yscale("log")
        floor = _log_floor(values)
        _points_on_log(ax, xs, np.asarray(values, dtype=float), floor, colors)
        ax.set_ylim(floor / 2, max(floor, max(values)) * 4)
    else:
        drawn = ax.bar(xs, values, color=colors)
        ax.bar_label(drawn, labels=[_value_text(v) for v in values], fontsize=FONT, padding=2)
    ax.set_xticks(xs, labels)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=15)
    return fig


def series_vs_x(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    log: bool = False,
) -> Figure:
    """One line per series against a shared x (log-log when `log`), with a marker on each point."""
    return lines({label: (x[: len(values)], values) for label, values in series.items()},
                 xlabel, ylabel, title, logx=log, logy=log, marker="o")


def grouped_bars(
    groups: Sequence[str], series: Mapping[str, Sequence[float]], ylabel: str, title: str = "", log: bool = False
) -> Figure:
    """Bars for each group (x), one bar per series side by side, e.g. loop versions × chips."""
    fig = Figure(figsize=(7, 4.6), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / max(len(series), 1)
    if log:
        ax.set_yscale("log")
    markers = "osD^vP*X"
    floor = _log_floor(*series.values()) if series else 1e-12
    for i, (label, values) in enumerate(series.items()):
        xs = np.arange(len(groups)) + (i - (len(series) - 1) / 2) * width
        if log:  # points, not bars: a bar on a log axis has no bottom, and a zero vanishes
            _points_on_log(ax, xs, np.asarray(values, dtype=float), floor, f"C{i % 10}", label=label,
                           marker=markers[i % 8])
        else:
            ax.bar(xs, values, width, label=label, color=f"C{i % 10}")
    if log:
        top = max([floor] + [float(np.max(v)) for v in series.values() if len(v)])
        ax.set_ylim(floor / 2, top * 4)
    ax.set_xticks(np.arange(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    _legend(fig, ax, columns=min(len(series), 3))
    return fig


def _stacked_gib(ax, xs, stacks: Sequence[Mapping[str, float]], legend: bool = True) -> tuple[np.ndarray, list[str]]:
    """Stacked bars at `xs`, one per {term: bytes}, drawn in GiB, one colour per term; returns (tops, terms).

    A term whose name contains "model" is hatched, so a modelled figure never looks measured.
    """
    terms = list(dict.fromkeys(term for stack in stacks for term in stack))
    bottoms = np.zeros(len(stacks))
    for i, term in enumerate(terms):
        heights = np.array([stack.get(term, 0.0) for stack in stacks]) / 2**30
        ax.bar(xs, heights, bottom=bottoms, color=f"C{i % 10}", label=term if legend else None,
               hatch="//" if "model" in term.lower() else None, edgecolor="white")
        bottoms += heights
    return bottoms, terms


def memory_stack(
    stacks: Sequence[tuple[str, Mapping[str, float]]],
    chips: Sequence[tuple[str, float]] = (),
    title: str = "",
) -> Figure:
    """Stacked bars of bytes by term (one bar per (label, {term: bytes})), chip memory as horizontal lines, in GiB.

    A term whose name contains "model" is hatched, so a modelled figure never looks measured.
    """
    fig = Figure(figsize=(7, 4.8), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(stacks))
    bottoms, terms = _stacked_gib(ax, xs, [stack for _, stack in stacks])
    for j, (name, nbytes) in enumerate(chips):
        gib = nbytes / 2**30
        ax.axhline(gib, linestyle="--", color=f"C{(j + len(terms)) % 10}", linewidth=1.5,
                   label=f"{name}: {gib:.0f} GiB of memory")
        # In the margin right of the axes, never on a bar that reaches past the line.
        ax.annotate(f"{textwrap.fill(name, 18)}\n{gib:.0f} GiB", (1.01, gib), xycoords=("axes fraction", "data"),
                    fontsize=FONT, ha="left", va="center", color=f"C{(j + len(terms)) % 10}", annotation_clip=False)
    top = max([float(bottoms.max()) if len(bottoms) else 0.0] + [nbytes / 2**30 for _, nbytes in chips])
    ax.set_ylim(0, top * 1.12 if top > 0 else 1)
    ax.set_xticks(xs, [label for label, _ in stacks])
    ax.tick_params(axis="x", labelrotation=10)
    ax.set_ylabel("GiB")
    ax.set_title(title or "What is in memory during training")
    _legend(fig, ax, columns=2)
    return fig


def bytes_vs(xs: Sequence[float], series: Mapping[str, Sequence[float]], xlabel: str, title: str = "") -> Figure:
    """MiB against a size (batch or sequence length), one line per series; linear axes, so a line looks straight."""
    fig = _measured_lines(xs, {label: np.asarray(values, dtype=float) for label, values in series.items()},
                          xlabel, "MiB saved for backward", title, scale=2**20, logx=False, logy=False)
    ax = fig.axes[0]
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    return fig


def lines(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    hlines: Mapping[str, float] | None = None,
    marker: str | None = None,
) -> Figure:
    """One line per (label -> (xs, ys)) series, with optional labelled horizontal reference lines."""
    fig = Figure(figsize=(6.5, 4.6), layout="constrained")
    ax = fig.add_subplot()
    # Two series coincide only where their xs agree too: compare xs and middles together.
    shown = _coincide_labels({label: np.concatenate([np.asarray(xs, dtype=float), spread(ys)[0]])
                              for label, (xs, ys) in series.items()})
    banded = False
    for label, (xs, ys) in series.items():
        banded |= _draw_series(ax, xs, ys, shown[label], _series_style(label), marker=marker)[1]
    for label, y in (hlines or {}).items():
        ax.axhline(y, color="0.35", linestyle=":", linewidth=1)
        ax.annotate(label, (0.01, y), xycoords=("axes fraction", "data"), textcoords="offset points",
                    xytext=(0, 3), fontsize=FONT, color="0.25")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    _legend(fig, ax, columns=1 if len(series) < 4 else 2,
            note="shaded: fastest to slowest run; line: median" if banded else None)
    return fig


def format_ranges(
    formats: Sequence[tuple[str, float, float, float]],
    magnitudes: Sequence[float] | None = None,
    magnitudes_label: str = "",
    title: str = "",
) -> Figure:
    """Each (name, smallest subnormal, smallest normal, max) format as a bar on a log10 axis, values drawn over it.

    Regions: flushed to zero (below half the smallest subnormal), subnormal, normal, overflow (above max).
    `magnitudes` (absolute values, e.g. gradients) are drawn as a histogram over the bars.
    """
    fig = Figure(figsize=(8, 1.8 + 0.55 * len(formats)), layout="constrained")
    ax = fig.add_subplot()
    lo, hi = -50.0, 42.0  # log10 span of the axis
    colours = {"zero": "#bbbbbb", "subnormal": "#fdae61", "normal": "#66bd63", "overflow": "#d73027"}
    for row, (name, subnormal, normal, biggest) in enumerate(formats):
        edges = [lo, np.log10(subnormal / 2), np.log10(normal), np.log10(biggest), hi]
        for (start, stop), region in zip(zip(edges[:-1], edges[1:]), colours):
            ax.barh(row, stop - start, left=start, height=0.6, color=colours[region],
                    label=region if row == 0 else None)
    ax.set_yticks(range(len(formats)), [f[0] for f in formats])
    ax.set_xlim(lo, hi)
    ax.set_xlabel("log10 |value|")
    if magnitudes is not None:
        values = np.asarray(magnitudes, dtype=float)
        values = values[(values > 0) & np.isfinite(values)]
        top = ax.twinx()
        top.hist(np.log10(values), bins=80, color="black", alpha=0.55, label=magnitudes_label or "values")
        top.set_ylabel("count")
    handles, labels = ax.get_legend_handles_labels()
    if magnitudes is not None:
        more_h, more_l = top.get_legend_handles_labels()
        handles, labels = handles + more_h, labels + more_l
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5), fontsize=FONT, frameon=False)
    ax.set_title(title or "Where each format can hold a number")
    return fig


def memory_stack_labelled(
    stacks: Sequence[tuple[str, Mapping[str, float]]],
    lines: Sequence[tuple[str, float]] = (),
    title: str = "",
) -> Figure:
    """Stacked bars of bytes by term in GiB (linear axis), each chip's memory a dashed line named in the legend, legend beside the axes.

    `lines` are (label, bytes); the label should say what the line is (e.g. "H200: 140 GiB usable
    (model)"). A term whose name contains "model" is hatched, so a modelled figure never looks measured.
    """
    fig = Figure(figsize=(9.5, 4.4), layout="constrained")
    ax = fig.add_subplot()
    xs = np.arange(len(stacks))
    _stacked_gib(ax, xs, [stack for _, stack in stacks])
    styles = ["--", "-.", ":", (0, (5, 1, 1, 1))]
    for j, (label, nbytes) in enumerate(lines):
        ax.axhline(nbytes / 2**30, linestyle=styles[j % len(styles)], color="0.25", linewidth=1.2, label=label)
    ax.set_xticks(xs, [label for label, _ in stacks], fontsize=9)
    ax.tick_params(axis="y", labelsize=9)
    ax.set_ylabel("GiB (2³⁰ bytes)", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.set_title(title or "What is in memory during training", fontsize=11)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def mib_lines(xs: Sequence[float], series: Mapping[str, Sequence[float]], xlabel: str, ylabel: str = "MiB saved for backward",
              title: str = "") -> Figure:
    """Bytes (drawn in MiB) against a size on linear axes, one line per series, legend beside the axes; fonts >= 9 pt."""
    fig = Figure(figsize=(8.5, 4.0), layout="constrained")
    ax = fig.add_subplot()
    markers = "os^vD<>"
    for i, (label, values) in enumerate(series.items()):
        ax.plot(xs[: len(values)], np.asarray(values) / 2**20, _series_style(label), marker=markers[i % len(markers)],
                markersize=7 - i % 3, label=label)
    ax.set_xlabel(xlabel, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.tick_params(labelsize=9)
    ax.set_title(title, fontsize=11)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig
def with_spread(
    xs: Sequence[float],
    series: Mapping[str, Sequence[float | Sequence[float]]],
    xlabel: str,
    ylabel: str,
    title: str = "",
) -> Figure:
    """Log-log lines of the median at each x, with a min–max bar where a point holds several samples.

    Each series maps a label to one entry per x: a number (a model or a
    recorded figure: a plain point) or a sequence of samples (measured: the
    median drawn, the range from the smallest to the largest sample as a bar).
    The legend sits below the axes, off the data.
    """
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.add_subplot()
    for i, (label, entries) in enumerate(series.items()):
        color = f"C{i % 10}"
        mids, lows, highs = [], [], []
        for entry in entries:
            values = [float(v) for v in entry] if isinstance(entry, (list, tuple)) else [float(entry)]
            mid = float(np.median(values))
            mids.append(mid)
            lows.append(mid - min(values))
            highs.append(max(values) - mid)
        x = list(xs[: len(mids)])
        ax.plot(x, mids, _series_style(label), marker="o", color=color, label=label)
        if any(lows) or any(highs):
            ax.errorbar(x, mids, yerr=[lows, highs], fmt="none", ecolor=color, capsize=4, linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [f"{x:g}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(xlabel, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.tick_params(labelsize=9)
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=9, ncols=1, frameon=False)
    return fig


def timeline(lanes: Mapping[str, Sequence[tuple[str, float, float]]], title: str = "", label_min_share: float = 0.06) -> Figure:
    """Ranges on a time axis: one lane per key, each (name, start_us, end_us) a bar; wide bars carry their name."""
    fig = Figure(figsize=(6.4, 1.2 + 0.8 * len(lanes)), layout="constrained")
    ax = fig.add_subplot()
    ends = [end for spans in lanes.values() for _, _, end in spans]
    starts = [start for spans in lanes.values() for _, start, _ in spans]
    width_ms = ((max(ends) - min(starts)) / 1e3) if ends else 1.0
    colours = ["#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb"]
    names = sorted({name for spans in lanes.values() for name, _, _ in spans})
    colour = {name: colours[i % len(colours)] for i, name in enumerate(names)}
    for row, (lane, spans) in enumerate(lanes.items()):
        for name, start, end in spans:
            ax.barh(row, (end - start) / 1e3, left=start / 1e3, height=0.6, color=colour[name], edgecolor="white",
                    linewidth=0.3)
            text = name[:20]
            if (end - start) / 1e3 >= max(label_min_share, 0.016 * (len(text) + 2)) * width_ms:  # room for the name
                ax.text((start + end) / 2e3, row, text, ha="center", va="center", fontsize=11, color="white",
                        clip_on=True)
    ax.set_yticks(range(len(lanes)), list(lanes), fontsize=11)
    ax.invert_yaxis()
    ax.set_xlabel("time since the step started (ms)", fontsize=11)
    ax.tick_params(axis="x", labelsize=10)
    ax.set_title(textwrap.fill(title, TITLE_COLUMNS), fontsize=11)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def smi_traces(traces: Mapping[str, Sequence[dict]], power_limit_w: float | None, title: str = "") -> Figure:
    """nvidia-smi traces, one above the other: utilisation (%) and power (W) against time, one line per workload."""
    fig = Figure(figsize=(6.4, 6.0), layout="constrained")
    util_ax, power_ax = fig.subplots(2, 1, sharex=True)
    for label, rows in traces.items():
        t = [r["t_s"] for r in rows]
        style = _series_style(label)
        util_ax.plot(t, [r["util_pct"] for r in rows], style, label=label, linewidth=2)
        power_ax.plot(t, [r["power_w"] for r in rows], style, label=label, linewidth=2)
    if power_limit_w:
        power_ax.axhline(power_limit_w, color="0.3", linestyle="--", linewidth=1)
        power_ax.annotate(f"power limit {power_limit_w:g} W", (0.01, power_limit_w), xycoords=("axes fraction", "data"),
                          textcoords="offset points", xytext=(0, -14), fontsize=11, color="0.2")
        power_ax.set_ylim(0, power_limit_w * 1.12)
    util_ax.set_ylim(0, 105)
    util_ax.set_ylabel("utilization.gpu (%)", fontsize=11)
    power_ax.set_xlabel("time (s)", fontsize=11)
    power_ax.set_ylabel("power.draw (W)", fontsize=11)
    for ax in (util_ax, power_ax):
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=10)
    handles, labels = util_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=10)
    fig.suptitle(textwrap.fill(title, TITLE_COLUMNS), fontsize=11)
    return fig


def loader_timelines(runs: Mapping[str, tuple[Sequence[tuple[float, float]], float, float]], title: str = "") -> Figure:
    """One lane per loader: the whole run as a red bar (waiting), each step's compute drawn over it in green.

    `runs` maps a label to (compute intervals in s, start s, end s); the green share of a lane is its busy share.
    """
    fig = Figure(figsize=(6.4, 1.4 + 0.75 * len(runs)), layout="constrained")
    ax = fig.add_subplot()
    for row, (label, (intervals, start, end)) in enumerate(runs.items()):
        ax.barh(row, (end - start) * 1e3, left=start * 1e3, height=0.6, color="#ee6677",
                label="waiting for the next batch" if row == 0 else None)
        for i, (a, b) in enumerate(intervals):
            ax.barh(row, (b - a) * 1e3, left=a * 1e3, height=0.6, color="#228833",
                    label="computing" if row == 0 and i == 0 else None)
    ax.set_yticks(range(len(runs)), list(runs), fontsize=10)
    ax.invert_yaxis()
    ax.set_xlabel("time since the first request for a batch (ms)", fontsize=10)
    ax.tick_params(axis="x", labelsize=10)
    ax.set_title(textwrap.fill(title, TITLE_COLUMNS), fontsize=11)
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend(loc="outside lower center", ncols=2, fontsize=10)
    return fig


def format_bars(rows: Sequence[Mapping[str, object]], title: str = "", memory_bytes: float | None = None,
                memory_label: str = "") -> Figure:
    """Lesson 06: ms per step, tokens/s and peak GiB per number format, side by side (linear axes).

    Each row holds "format", "step_seconds", "tokens_per_second" and "peak_bytes"; with
    `memory_bytes` a labelled line marks the device's memory on the peak-memory panel.
    """
    fig = Figure(figsize=(9.5, 3.3), layout="constrained")
    names = [str(r["format"]) for r in rows]
    colours = ["0.4", "0.7", "tab:blue", "tab:green", "tab:orange"][: len(rows)]
    panels = (("step_seconds", "ms per step", 1e3), ("tokens_per_second", "tokens/s (thousands)", 1e-3),
              ("peak_bytes", "peak memory (GiB)", 1 / 2**30))
    for k, (key, unit, scale) in enumerate(panels):
        ax = fig.add_subplot(1, 3, k + 1)
        ax.bar(names, [float(r[key]) * scale for r in rows], color=colours)
        ax.set_ylabel(unit, fontsize=10)
        ax.tick_params(labelsize=9)
        if key == "peak_bytes" and memory_bytes:
            ax.axhline(memory_bytes / 2**30, color="tab:red", ls="--", lw=1.5,
                       label=memory_label or f"device memory {memory_bytes / 2**30:.0f} GiB")
            ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=9, frameon=False)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def memory_per_rank(
    panels: Mapping[str, Mapping[str, Mapping[str, float]]],
    lines: Sequence[tuple[str, float]] = (),
    title: str = "",
) -> Figure:
    """One panel per model: a stacked bar of bytes per rank for each strategy, chip memory as labelled lines, in GiB.

    `panels` maps a model's name to {strategy: {term: bytes}}; `lines` are (chip, bytes of memory).
    Each panel has its own linear GiB axis, tall enough for its bars and every line.
    """
    # 6.6 in for two panels: at its natural size (100 dpi) in a 1024-px window with the file browser open
    fig = Figure(figsize=(min(10.0, 2.0 + 2.3 * len(panels)), 4.6), layout="constrained")
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
    styles = ["--", "-.", ":", (0, (5, 1, 1, 1))]
    for ax, (model, bars) in zip(axes, panels.items()):
        names = list(bars)
        bottoms, _ = _stacked_gib(ax, np.arange(len(names)), list(bars.values()), legend=ax is axes[0])
        ax.set_xticks(np.arange(len(names)), names)
        for j, (chip, nbytes) in enumerate(lines):
            ax.axhline(nbytes / 2**30, linestyle=styles[j % len(styles)], color="0.25", linewidth=1.1,
                       label=f"{chip}: {nbytes / 2**30:.0f} GiB" if ax is axes[0] else None)
        top = max([float(bottoms.max()) if len(bottoms) else 0.0] + [nbytes / 2**30 for _, nbytes in lines])
        ax.set_ylim(0, top * 1.08 if top > 0 else 1)
        ax.set_title(model, fontsize=11)
        ax.tick_params(labelsize=10)
        ax.tick_params(axis="x", labelrotation=30)
    axes[0].set_ylabel("GiB per rank (2³⁰ bytes)", fontsize=10)
    fig.suptitle(textwrap.fill(title, TITLE_COLUMNS), fontsize=11)
    fig.legend(loc="outside lower center", fontsize=10, ncols=2 if len(panels) >= 3 else 1, frameon=False)
    return fig


def tile_tradeoff(sizes: Sequence[int], traffic_gb: Sequence[float], footprint_kb: Sequence[float], limit_kb: float,
                  floor_gb: float, limit_label: str, title: str, chosen: int | None = None) -> Figure:
    """Lesson 08: a matmul's traffic and its tiles' on-chip footprint against a square tile size, the limit marked."""
    fig = Figure(figsize=(9, 4.4), layout="constrained")
    ax, ax2 = fig.subplots(1, 2)
    ticks = [str(t) for t in sizes]
    ax.plot(sizes, traffic_gb, marker="o", label="requested by the programs")
    ax.axhline(floor_gb, color="grey", ls="--", label="each matrix once (a perfect cache)")
    ax.set_ylabel("GB requested")
    ax.set_title(title, fontsize=10)
    ax2.plot(sizes, footprint_kb, marker="o", color="#DD8452", label="tiles on chip")
    ax2.axhline(limit_kb, color="black", ls="--", label=limit_label)
    ax2.set_ylabel("KB of shared memory")
    ax2.set_title("On-chip footprint of those tiles", fontsize=10)
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xticks(list(sizes), ticks)
        a.set_xlabel("square tile BM = BN")
        if chosen is not None:
            a.axvline(chosen, color="#55A868", lw=1, label=f"BM = BN = {chosen}")
        # under its panel, off the data: inside, it covered the dashed floor line it names
        a.legend(fontsize=FONT, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    return fig
