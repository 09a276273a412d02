"""Thin ipywidgets wrappers over the plot functions: controls in, a Figure out.

Every panel fits a 1024-pixel-wide window: controls sit in rows that wrap, each control
is at most as wide as the panel, and descriptions take the width their words need.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import ipywidgets as widgets
from IPython.core.pylabtools import print_figure

from grader import floats, plots
from grader.shortcuts import course_only
from grader.specs import Chip


# One control's box: a fixed comfortable width that shrinks to the panel's, never wider.
_CONTROL_WIDTH = "280px"  # two to a row in a 1024-px window with the file browser open


def _fit(control: widgets.Widget) -> widgets.Widget:
    """Size `control` to wrap with its neighbours: at most the panel's width, its label as wide as its words."""
    control.layout.width = _CONTROL_WIDTH
    control.layout.max_width = "100%"
    control.layout.flex = "0 1 auto"
    if hasattr(control.style, "description_width"):
        control.style.description_width = "initial"
    return control


# CSS for a table in a widget: as wide as its panel at most, cells wrapping anywhere when they must.
_FIT_TABLE = (".grader-fit-table{max-width:100%;overflow-x:auto}"
              ".grader-fit-table table{width:100%;max-width:100%;table-layout:auto;border-collapse:collapse}"
              ".grader-fit-table td{overflow-wrap:anywhere;padding:2px 6px}.grader-fit-table th{padding:2px 6px}")


def controls_row(controls: Sequence[widgets.Widget]) -> widgets.HBox:
    """A row of controls that wraps onto more lines in a narrow window instead of clipping them."""
    return widgets.HBox([_fit(c) for c in controls],
                        layout=widgets.Layout(flex_flow="row wrap", width="100%", max_width="100%",
                                              grid_gap="4px 12px", align_items="center"))


VERDICT_FONT = "15px"  # the verdict line under a widget's controls


def _figure_panel(rows: Sequence[Sequence[widgets.Widget]], draw: Callable[[], tuple[str, object]]) -> widgets.Widget:
    """Rows of controls, then a verdict line and a figure; `draw()` returns both and runs on every change.

    The figure is an Image widget holding the PNG the inline backend would show, not an Output
    widget: an Output widget's contents live only in the front end that captured them, so a
    notebook run by our client (it does not mimic Output widgets) saved the first figure as a
    plain image above the controls, and a slide opened on a live kernel showed that stale image
    while each redraw went below it, off the slide. An Image's PNG is widget state, held by the
    kernel and saved with the notebook, so every front end shows the current figure in its place.
    """
    # 15 px, not the widgets' 13 px (about 11 px on a slide scaled to a projector's window): read from the back row
    verdict = widgets.HTML(layout=widgets.Layout(max_width="100%"), style={"font_size": VERDICT_FONT})
    # Its own shape (not stretched to the panel's width), at most the panel's width (no margin beside it).
    figure = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", width="auto", height="auto",
                                                               align_self="flex-start", margin="0"))

    def redraw(*_):
        verdict.value, fig = draw()
        figure.value = print_figure(fig, "png", bbox_inches="tight")

    for row in rows:
        for control in row:
            control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([*(controls_row(row) for row in rows), verdict, figure],
                        layout=widgets.Layout(width="100%", max_width="100%", overflow="hidden"))


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

    def draw():
        chip = chips[chip_box.value]
        dtype = dtype_box.value if dtype_box.value in chip.peak_flops else "fp32"
        width = 4 if dtype in ("fp32", "tf32") else 2
        n = 2 ** size.value
        peak = chip.peak(dtype)
        x = intensity_of(n, width)
        html = (
            f"<b>{n}×{n} matmul in {dtype}</b> on {chip.name}: {x:.0f} FLOP/byte, "
            f"balance point {peak / chip.bandwidth:.0f} FLOP/byte → <b>{bound(x, peak, chip.bandwidth)}-bound</b>, "
            f"at most {attainable(x, peak, chip.bandwidth) / 1e12:.1f} TFLOP/s "
            f"(source: {chip.source.split(';')[0]})"
        )
        fig = plots.roofline(
            [(f"{chip.name} {dtype} (datasheet)", peak, chip.bandwidth)],
            [(f"matmul n={n}", x)],  # the add's point is the ADD_PREDICTION's answer: lesson 01 draws it after
            attainable,
        )
        return html, fig

    return _figure_panel([(chip_box, dtype_box, size)], draw)


def transfer_explorer(chips: Sequence[Chip], transfer_seconds: Callable[[float, float, float], float],
                      latency: float) -> widgets.Widget:
    """Pick a chip, a batch size and reads per step; see the modelled host-link time per step against device memory.

    `transfer_seconds(nbytes, bandwidth, latency)` is the learner's cost model; only chips with a
    host link and a memory bandwidth in data/chips.csv are offered.
    """
    usable = [c for c in chips if c.host_link_bandwidth and c.bandwidth]
    chip_box = widgets.Dropdown(options=[(c.name, i) for i, c in enumerate(usable)], description="chip")
    size = widgets.IntSlider(value=20, min=10, max=30, description="log2 bytes")
    reads = widgets.IntSlider(value=1, min=0, max=16, description="reads/step")

    def draw():
        chip = usable[chip_box.value]
        nbytes = 2 ** size.value
        copy = transfer_seconds(nbytes, chip.host_link_bandwidth, latency)
        waits = reads.value * transfer_seconds(4, chip.host_link_bandwidth, latency)
        on_device = nbytes / chip.bandwidth
        html = (
            f"<b>{nbytes / 2**20:.3g} MiB batch</b> on {chip.name} (model): copy over {chip.host_link} "
            f"{copy * 1e6:.1f} µs, {reads.value} read(s) {waits * 1e6:.1f} µs, "
            f"reading it once from device memory {on_device * 1e6:.2f} µs"
        )
        fig = plots.bars(
            ["copy batch in (model)", "reads back (model)", "device memory read (model)"],
            [copy, waits, on_device],
            "seconds per step",
            title=f"{chip.name}: host link vs device memory (model from data/)",
            log=True,
        )
        return html, fig

    return _figure_panel([(chip_box, size, reads)], draw)


def will_it_fit(
    models: Sequence[dict],
    chips: Sequence[Chip],
    training_bytes: Callable[[int, str, str], int],
    max_batch: Callable[[int, dict[int, int]], int],
    activation_bytes_of: Callable[[dict, int, int, str, bool], int],
) -> widgets.Widget:
    """Pick a model shape, precision, optimizer, batch, sequence, checkpointing and GPUs; see the four terms.

    `training_bytes` and `max_batch` are the learner's; `activation_bytes_of(row, batch, seq,
    precision, checkpointing)` is the activation model (drawn hatched and labelled "model").
    The optimizer state is sharded across the GPUs (ZeRO stage 1); everything else is per GPU.
    """
    from grader.memory import chip_label, fit, usable_bytes

    model_box = widgets.Dropdown(options=[(m["model"], i) for i, m in enumerate(models)], description="model")
    precision = widgets.Dropdown(options=["mixed", "fp32"], value="mixed", description="precision")
    optimizer = widgets.Dropdown(options=["adam", "momentum", "sgd"], value="adam", description="optimizer")
    batch = widgets.IntSlider(value=8, min=1, max=256, description="batch")
    seq = widgets.Dropdown(options=[256, 512, 1024, 2048, 4096], value=1024, description="seq len")
    ckpt = widgets.Checkbox(value=False, description="checkpointing")
    gpus = widgets.Dropdown(options=[1, 2, 4, 8, 16, 64], value=1, description="GPUs (shard opt.)")
    chip_box = widgets.Dropdown(options=[(c.name, i) for i, c in enumerate(chips)], description="chip")

    def draw():
        row, chip = models[model_box.value], chips[chip_box.value]
        usable = usable_bytes(chip)  # nvidia-smi's total less the CUDA context reserve (a model)
        got = fit(row, usable, precision.value, optimizer.value, batch.value, seq.value, ckpt.value, gpus.value,
                  training_bytes, max_batch, activation_bytes_of)
        stack, total, fits, per_sample = got["stack"], got["total"], got["largest_batch"], got["per_sample"]
        html = (
            f"<b>{row['model']}</b>, {precision.value}, {optimizer.value}, batch {batch.value} × {seq.value} tokens: "
            f"<b>{total / 2**30:.1f} GiB</b> per GPU; {chip_label(chip)} → "
            f"<b>{'fits' if got['fits'] else 'does not fit'}</b>. Largest batch that fits: "
            f"<b>{fits}</b> (activations {per_sample / 2**20:.0f} MiB per sample, a model)."
        )
        fig = plots.memory_stack([(row["model"], stack)], [(f"{chip.name} usable (model)", usable)],
                                 "Will it fit? (activations: model)")
        return html, fig

    return _figure_panel([(model_box, chip_box, precision, optimizer), (batch, seq, ckpt, gpus)], draw)


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
        # The table shrinks to its panel: long bit strings and numbers wrap rather than run off the side.
        table.value = (f"<style>{_FIT_TABLE}</style><div class='grader-fit-table'>"
                       + floats.fields_html(x, {**floats.FORMATS, **floats.FP8}, decode) + "</div>")

    box.observe(redraw, names="value")
    redraw()
    table.layout.max_width = "100%"
    table.layout.overflow = "auto"  # a wide table scrolls inside the panel rather than pushing it wider
    return widgets.VBox([controls_row([box]), table], layout=widgets.Layout(width="100%", max_width="100%"))


@course_only()  # it prices an all-reduce over a cluster: ALLREDUCE_PREDICTION watches it
def data_parallel_explorer(
    models: Sequence[dict],
    chips: Sequence[Chip],
    bytes_per_rank: Callable[[float, int, str, str], float],
    allreduce_seconds: Callable[[float, int, float, float], float],
    card_bytes: Callable[[Chip], int],
) -> widgets.Widget:
    """Pick a model shape, a chip with NVLink and a number of GPUs: training state per GPU under DDP and ZeRO, and the
    gradient all-reduce's time over NVLink, and beyond one node's 8 GPUs hierarchically over the nodes' network adapters
    (distributed.cluster_allreduce_seconds; bandwidth terms only: a model).

    `bytes_per_rank` and `allreduce_seconds` are the learner's; `card_bytes(chip)` is the chip's memory in bytes.
    """
    linked = [c for c in chips if c.nvlink_gbs and c.memory_bytes]
    def first(names: list[str], wanted: str) -> int:
        return next((i for i, name in enumerate(names) if name.startswith(wanted)), 0)

    model_box = widgets.Dropdown(options=[(m["model"], i) for i, m in enumerate(models)], description="model",
                                 value=first([m["model"] for m in models], "LLaMA-13B"))
    chip_box = widgets.Dropdown(options=[(c.name, i) for i, c in enumerate(linked)], description="chip",
                                value=first([c.name for c in linked], "NVIDIA H100"))
    gpus = widgets.Dropdown(options=[2, 4, 8, 16, 32, 64, 128, 256], value=8, description="GPUs")
    stages = ("ddp", "zero1", "zero2", "zero3")

    def draw():
        row, chip, n = models[model_box.value], linked[chip_box.value], gpus.value
        params = float(row["n_params"])
        bars = {}
        for stage in stages:
            # torch autocast with Adam: the layout whose gradients the all-reduce below prices, section 6's question
            one, many = bytes_per_rank(params, 1, stage, "autocast"), bytes_per_rank(params, n, stage, "autocast")
            shard = (one - many) * n / (n - 1)
            bars[stage] = {"kept whole on every GPU": one - shard, f"this GPU's 1/{n} of the sharded part": shard / n}
        memory = card_bytes(chip)
        fitting = [s for s in stages if sum(bars[s].values()) <= memory]
        from grader.distributed import cluster_allreduce_seconds, cluster_links  # NVLink in a node, NICs beyond

        links = cluster_links(chip.nvlink_gbs, n, chip=chip.name)
        # DDP under torch autocast all-reduces the fp32 gradients: 4 bytes per parameter (no compression hook)
        seconds = cluster_allreduce_seconds(4.0 * params, links, allreduce_seconds)
        html = (f"<b>{row['model']}</b> on {n} × {chip.name}: training state fits with "
                f"<b>{', '.join(fitting) if fitting else 'no stage'}</b> (before activations). DDP averaging its "
                f"{4 * params / 1e9:.3g} GB of fp32 gradients over {links['link']}"
                + (f" (across {links['nodes']} nodes, every NIC of a node at once: the schedule of section 2's "
                   "reveal)" if links["nodes"] > 1 else "")
                + f": the course's model gives <b>{seconds * 1e3:.3g} ms</b> per step (bandwidth terms only, phases "
                "priced one after another). A real NCCL run may overlap the phases and be faster, or lose time to "
                "latency and to links below their line rate.")
        fig = plots.memory_per_rank({row["model"]: bars}, [(chip.name, memory)],
                                    f"Training state per GPU on {n} GPUs (torch autocast + Adam)")
        return html, fig

    return _figure_panel([(model_box, chip_box, gpus)], draw)


@course_only()  # it says what stops a tile on a chip: TILE_PREDICTION's answer, so lesson 08's prediction watches it
def tile_explorer(tile_traffic: Callable[..., float], chips: Sequence[tuple[Chip, dict]],
                  start_tile: int = 128) -> widgets.Widget:
    """Lesson 08: pick a matmul size, tiles, stages and a chip: traffic (the learner's tile_traffic), the tiles'
    shared-memory footprint against the chip's per-SM limit, the float32 accumulator against its register file,
    programs against SMs, and a roofline time (a model).

    `chips` pairs each chip with its data/sm.csv row (sms, shared_kb_per_sm, registers_kb_per_sm).
    """
    size = widgets.Dropdown(options=[1024, 2048, 4096, 8192, 16384], value=8192, description="M = N = K")
    sizes = [16, 32, 64, 128, 256, 512]
    tile = widgets.Dropdown(options=sizes, value=start_tile if start_tile in sizes else 128, description="BM = BN")
    bk = widgets.Dropdown(options=[16, 32, 64, 128], value=64, description="BK")
    stages = widgets.Dropdown(options=[1, 2, 3, 4, 5], value=3, description="stages")
    chip_box = widgets.Dropdown(options=[(c.name, i) for i, (c, _) in enumerate(chips)], value=0, description="chip")

    def draw():
        n, t, k, s = size.value, tile.value, bk.value, stages.value
        chip, sm = chips[chip_box.value]
        b = 2  # fp16 / bf16
        traffic = [tile_traffic(n, n, n, x, x, k, b) / 1e9 for x in sizes]
        footprint = [s * (x * k + k * x) * b / 1024 for x in sizes]
        limit = sm["shared_kb_per_sm"]
        mine = s * (t * k + k * t) * b / 1024
        programs = math.ceil(n / t) ** 2
        memory_s = tile_traffic(n, n, n, t, t, k, b) / chip.bandwidth
        flop_s = 2 * n**3 / chip.peak("fp16")
        fits = "fits" if mine <= limit else "<b>does not fit</b>: the compiler refuses it (out of resources)"
        acc, regs = t * t * 4 / 1024, sm["registers_kb_per_sm"]  # KB: the float32 tile of C, and the register file
        held = "fits" if acc < regs else "<b>spills</b> to local memory (no error: the kernel is just slow)"
        html = (f"{t}×{t} tiles, BK {k}, {s} stages: {mine:.0f} KB of shared memory, {fits} in {limit:.0f} KB per SM; "
                f"a float32 accumulator of {acc:.0f} KB in a {regs:.0f} KB register file: {held}; "
                f"{programs:,} programs for {sm['sms']:.0f} SMs. Model on {chip.name}: memory "
                f"{memory_s * 1e3:.3g} ms if every requested byte came from HBM "
                f"({3 * n * n * b / chip.bandwidth * 1e3:.3g} ms if L2 served every re-read), tensor-core FLOPs "
                f"{flop_s * 1e3:.3g} ms: <b>{'memory' if memory_s > flop_s else 'compute'}-bound</b> without a cache "
                "(roofline; a model, not a measurement).")
        fig = plots.tile_tradeoff(sizes, traffic, footprint, limit, 3 * n * n * b / 1e9, f"{limit:.0f} KB per SM",
                                  f"Traffic of an fp16 {n}³ matmul", chosen=t)
        return html, fig

    return _figure_panel([(size, tile, bk), (stages, chip_box)], draw)
