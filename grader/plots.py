"""Plot functions: each takes data and returns a matplotlib Figure (nothing is shown or saved).

Figures are built with matplotlib.figure.Figure, not pyplot, so they appear
exactly once, where the notebook displays them, and never leak between cells.
Labels say where each series came from: measured here, recorded, or modelled.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

# How a series was obtained decides how it is drawn: measured solid, recorded dashed, modelled dotted.
_STYLE = {"measured": "-", "recorded": "--", "model": ":"}


def _series_style(label: str) -> str:
    low = label.lower()
    if "model" in low:
        return _STYLE["model"]
    if "recorded" in low:
        return _STYLE["recorded"]
    return _STYLE["measured"]


def time_vs_size(sizes: Sequence[int], seconds: Mapping[str, Sequence[float]], title: str = "") -> Figure:
    """Log-log seconds per call against problem size, one line per series."""
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for label, values in seconds.items():
        ax.loglog(sizes[: len(values)], values, _series_style(label), marker="o", label=label)
    ax.set_xlabel("matrix size n (n×n @ n×n)")
    ax.set_ylabel("seconds per call")
    ax.set_title(title or "Time against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


def rate_vs_size(sizes: Sequence[int], flops_per_second: Mapping[str, Sequence[float]], title: str = "") -> Figure:
    """GFLOP/s against problem size, one line per series (log x, log y)."""
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for label, values in flops_per_second.items():
        ax.loglog(sizes[: len(values)], np.asarray(values) / 1e9, _series_style(label), marker="o", label=label)
    ax.set_xlabel("matrix size n")
    ax.set_ylabel("GFLOP/s achieved")
    ax.set_title(title or "Throughput against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


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
    fig = Figure(figsize=(7, 4.6), layout="constrained")
    ax = fig.add_subplot()
    intensities = np.logspace(-2, 4, 200)
    colors = [f"C{i}" for i in range(10)]
    for i, (label, peak, bandwidth) in enumerate(machines):
        color = colors[i % len(colors)]
        roof = [attainable(float(x), peak, bandwidth) for x in intensities]
        ax.loglog(intensities, np.asarray(roof) / 1e9, _series_style(label), color=color, label=label)
        for point_label, x in points:
            y = attainable(float(x), peak, bandwidth) / 1e9
            ax.plot([x], [y], "o", color=color, markersize=5)
            if i == 0:
                ax.annotate(point_label, (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("attainable GFLOP/s")
    ax.set_title(title or "Roofline: attainable = min(peak, intensity × bandwidth)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def bars(labels: Sequence[str], values: Sequence[float], ylabel: str, title: str = "", log: bool = False) -> Figure:
    """A plain labelled bar chart."""
    fig = Figure(figsize=(6.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(labels, values, color=[f"C{i % 10}" for i in range(len(labels))])
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=20)
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
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        xs = np.arange(len(groups)) + (i - (len(series) - 1) / 2) * width
        ax.bar(xs, values, width, label=label, color=f"C{i % 10}")
    ax.set_xticks(np.arange(len(groups)), groups)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def memory_stack(
    stacks: Sequence[tuple[str, Mapping[str, float]]],
    chips: Sequence[tuple[str, float]] = (),
    title: str = "",
) -> Figure:
    """Stacked bars of bytes by term (one bar per (label, {term: bytes})), chip memory as horizontal lines, in GiB.

    A term whose name contains "model" is hatched, so a modelled figure never looks measured.
    """
    fig = Figure(figsize=(7, 4.4), layout="constrained")
    ax = fig.add_subplot()
    terms = list(dict.fromkeys(term for _, stack in stacks for term in stack))
    bottoms = np.zeros(len(stacks))
    xs = np.arange(len(stacks))
    for i, term in enumerate(terms):
        heights = np.array([stack.get(term, 0.0) for _, stack in stacks]) / 2**30
        ax.bar(xs, heights, bottom=bottoms, color=f"C{i % 10}", label=term,
               hatch="//" if "model" in term.lower() else None, edgecolor="white")
        bottoms += heights
    for j, (name, nbytes) in enumerate(chips):
        ax.axhline(nbytes / 2**30, linestyle="--", color=f"C{(j + len(terms)) % 10}", linewidth=1)
        ax.annotate(f"{name} ({nbytes / 2**30:.0f} GiB)", (len(stacks) - 0.5, nbytes / 2**30), fontsize=7,
                    ha="right", va="bottom")
    ax.set_xticks(xs, [label for label, _ in stacks])
    ax.tick_params(axis="x", labelrotation=10)
    ax.set_ylabel("GiB")
    ax.set_title(title or "What is in memory during training")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def bytes_vs(xs: Sequence[float], series: Mapping[str, Sequence[float]], xlabel: str, title: str = "") -> Figure:
    """MiB against a size (batch or sequence length), one line per series; linear axes, so a line looks straight."""
    fig = Figure(figsize=(6.5, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for label, values in series.items():
        ax.plot(xs[: len(values)], np.asarray(values) / 2**20, _series_style(label), marker="o", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("MiB saved for backward")
    ax.set_title(title)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
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
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, _series_style(label), marker=marker, label=label)
    for label, y in (hlines or {}).items():
        ax.axhline(y, color="0.35", linestyle=":", linewidth=1)
        ax.annotate(label, (0.01, y), xycoords=("axes fraction", "data"), textcoords="offset points",
                    xytext=(0, 3), fontsize=8, color="0.25")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
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
    fig = Figure(figsize=(8, 1.2 + 0.55 * len(formats)), layout="constrained")
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
        top.legend(loc="upper right", fontsize=8)
    ax.legend(loc="upper left", fontsize=8, ncols=4)
    ax.set_title(title or "Where each format can hold a number")
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
