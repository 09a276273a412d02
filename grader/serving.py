"""Lesson 09's instruments and models: a decoder stack to time one generation step, and the serving arithmetic.

Measured here: `DecodeStack`, GPT-shaped blocks (attention with a KV cache, a GELU MLP) with no embedding,
sized at run time against the machine's last-level cache (`layers_for`), so that one decode step reads its
weights from memory and not from a cache; `read_bandwidth` (bytes/s a matrix-vector product reaches over a
matrix larger than that cache) and `matmul_rate` (FLOP/s of a batch-b matmul whose weight stays in cache).

The exercises' answers are not here: the decode step's time, the knee of a step-time curve, the KV cache's
bytes, the largest batch a set of cards serves and int8 rounding live with the instructor
(solutions/judges/lesson09.py, never packaged), and the checks judge them by digests. What is here takes the
learner's own functions (the figures, the will-it-serve widget, the int8 comparison, sealed) or shows what no
exercise asks (the H100's balance batch).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from grader import device as dev
from grader.checks._sealed import sealed
from grader.shortcuts import course_only

GiB, MiB = 2**30, 2**20
WEIGHT_DTYPES = ("bf16", "int8", "int4")  # what max_batch_to_serve stores the layers' weights in
_WEIGHT_BYTES = {"bf16": 2.0, "int8": 1.0, "int4": 0.5}  # bytes per weight before scales


# --- the model that is measured here ------------------------------------------------------------


def _tiled(rows: int, cols: int, block: torch.Tensor) -> torch.Tensor:
    """A (rows, cols) float32 matrix of fresh memory filled by tiling `block` (values repeat, addresses do not)."""
    br, bc = block.shape
    out = block.repeat(math.ceil(rows / br), math.ceil(cols / bc))[:rows, :cols]
    return out.contiguous()


class DecodeBlock(nn.Module):
    """One pre-norm GPT block for generation: q/k/v/out projections, a 4x GELU MLP, and a KV cache per call."""

    def __init__(self, d_model: int, n_heads: int, block: torch.Tensor, offset: int):
        super().__init__()
        self.d, self.h = d_model, n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        shapes = {"qkv": (3 * d_model, d_model), "proj": (d_model, d_model),
                  "fc1": (4 * d_model, d_model), "fc2": (d_model, 4 * d_model)}
        for k, (name, (out_f, in_f)) in enumerate(shapes.items()):
            layer = torch.nn.utils.skip_init(nn.Linear, in_f, out_f, bias=False)  # no slow random init
            rolled = torch.roll(block, shifts=offset + k, dims=0)  # each layer's tiles start elsewhere
            layer.weight.data = _tiled(out_f, in_f, rolled) / math.sqrt(in_f)
            setattr(self, name, layer)

    def forward(self, x: torch.Tensor, cache: dict | None) -> torch.Tensor:
        """x (batch, new, d_model); `cache` {"k", "v"} (batch, heads, past, head_dim), extended in place; None: no cache."""
        b, s, d = x.shape
        h = self.h
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)  # each (b, h, s, d/h)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        causal = s > 1 and k.shape[2] == s
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (b, h, s, d/h)
        x = x + self.proj(out.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class DecodeStack(nn.Module):
    """`n_layers` DecodeBlocks of width `d_model`: the transformer layers of a GPT, no embedding and no head."""

    def __init__(self, n_layers: int, d_model: int = 1024, n_heads: int = 16, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        block = torch.randn(256, 256, generator=g)  # tiled into every weight: fast to build at any size
        self.blocks = nn.ModuleList(DecodeBlock(d_model, n_heads, block, 7 * i) for i in range(n_layers))
        self.d_model, self.n_heads = d_model, n_heads

    def weight_bytes(self) -> int:
        """Bytes of every weight a decode step reads (the Linear layers; the layer norms are a rounding error)."""
        return sum(p.numel() * p.element_size() for p in self.parameters())

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def new_cache(self) -> list[dict]:
        return [{} for _ in self.blocks]

    @torch.no_grad()
    def step(self, x: torch.Tensor, cache: list[dict] | None) -> torch.Tensor:
        """Run new positions x (batch, new, d_model) through every block, extending `cache` (None: no cache)."""
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i])
        return x


def layers_for(cache_bytes: int | None, multiple: float, d_model: int, minimum: int = 2) -> int:
    """Layers of width `d_model` (12·d² float32 weights each) whose weights are at least `multiple` x the cache."""
    per_layer = 12 * d_model * d_model * 4
    want = multiple * (cache_bytes or 32 * MiB)
    return max(minimum, math.ceil(want / per_layer))


def read_bandwidth(device: torch.device | str, nbytes: int, repeats: int = 2) -> float:
    """Bytes/s a float32 matrix-vector product reaches reading a matrix of `nbytes` (median of `repeats`)."""
    cols = 4096
    rows = max(1, nbytes // (4 * cols))
    m = torch.ones(rows, cols, device=device)
    x = torch.ones(cols, device=device)
    times = []
    for _ in range(repeats + 1):
        dev.synchronize(device)
        start = time.perf_counter()
        torch.mv(m, x)
        dev.synchronize(device)
        times.append(time.perf_counter() - start)
    return m.numel() * 4 / statistics.median(times[1:])


def matmul_rate(device: torch.device | str, batch: int, d_model: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of (batch, d) @ (d, 4d) in float32 with a weight small enough to stay in cache (median)."""
    w = torch.randn(4 * d_model, d_model, device=device)
    x = torch.randn(batch, d_model, device=device)
    reps = 8
    times = []
    for _ in range(repeats + 1):
        dev.synchronize(device)
        start = time.perf_counter()
        for _ in range(reps):
            x @ w.T
        dev.synchronize(device)
        times.append((time.perf_counter() - start) / reps)
    return 2 * batch * d_model * 4 * d_model / statistics.median(times[1:])


@course_only("grader.serving.time_steps")
def time_steps(model: DecodeStack, batches: Sequence[int], device: torch.device | str, repeats: int = 3,
               past: int = 16) -> dict[int, list[float]]:
    """Seconds of one decode step (one new position per sequence, `past` positions cached) per batch, interleaved.

    The batches take turns within each repeat, so a busy spell on a shared machine hits them all alike. What lesson
    09's two predictions are about: called from a cell before a prediction's first guess, it is that prediction's
    reveal (recorded; copy test r18 timed a batch-1 step with it before guessing).
    """
    d, h = model.d_model, model.n_heads
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    caches, inputs = {}, {}
    for b in batches:  # a cache as a prompt of `past` tokens leaves it (its values do not change the time)
        caches[b] = [{"k": torch.randn(b, h, past, d // h, device=device, dtype=dtype),
                      "v": torch.randn(b, h, past, d // h, device=device, dtype=dtype)} for _ in model.blocks]
        inputs[b] = torch.randn(b, 1, d, device=device, dtype=dtype)
    times = {b: [] for b in batches}
    for r in range(repeats + 1):
        for b in batches:
            cache = [{k: v[:, :, :past] for k, v in layer.items()} for layer in caches[b]]  # same length each time
            dev.synchronize(device)
            start = time.perf_counter()
            model.step(inputs[b], cache)
            dev.synchronize(device)
            if r:  # the first round warms up
                times[b].append(time.perf_counter() - start)
    return times


def time_per_token(model: DecodeStack, positions: Sequence[int], device: torch.device | str,
                   repeats: int = 3) -> dict[str, dict[int, list[float]]]:
    """Seconds to make the token at each position: with the KV cache (one new row) and recomputing the prefix."""
    d = model.d_model
    x = torch.randn(1, max(positions) + 1, d, device=device)
    out = {"with the KV cache": {p: [] for p in positions}, "recomputing the prefix": {p: [] for p in positions}}
    for r in range(repeats + 1):
        for p in positions:
            cache = model.new_cache()
            model.step(x[:, :p], cache)  # the cache of the first p positions
            for label, run in (("with the KV cache", lambda: model.step(x[:, p:p + 1], cache)),
                               ("recomputing the prefix", lambda: model.step(x[:, :p + 1], None))):
                dev.synchronize(device)
                start = time.perf_counter()
                run()
                dev.synchronize(device)
                if r:
                    out[label][p].append(time.perf_counter() - start)
    return out


# --- shown, not graded ------------------------------------------------------------------------------


def dynamic_int8(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """torch's W8A8 dynamic quantization of every Linear (int8 weights, activations quantized per call), and what
    it warned, as text (the warnings are caught here: a warning in a graded cell would score it 0)."""
    import warnings

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    lines = sorted({f"{w.category.__name__}: {str(w.message).strip().splitlines()[0]}" for w in said})
    return quantized, lines


def quiet(fn: Callable) -> Callable:
    """`fn` with every warning it raises silenced (torch's quantized kernels warn on their first calls)."""
    import functools
    import warnings

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)

    return run


@course_only()
@sealed("09_serving", "BATCH_PREDICTION")
def model_knee_batch(chip, dtype: str = "bf16", bytes_per_weight: float = 2.0) -> float:
    """Model: the batch at which a decode step's weight arithmetic catches up with reading them, on `chip` (sealed,
    grader.checks._sealed: it is BATCH_PREDICTION's principle; called from a cell before that guess, a reveal)."""


# --- figures and the will-it-serve widget (the lesson's shows) ---------------------------------------


def step_figure(sweep: dict[int, list[float]], knee_at: float, weight_bytes: float, bandwidth: float, where: str):
    """Measured step time and tokens/s against batch, the bandwidth floor and the learner's knee marked."""
    import numpy as np
    from matplotlib.figure import Figure

    from grader.plots import FONT

    xs = sorted(sweep)
    fig = Figure(figsize=(9.5, 4.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    mid = np.array([statistics.median(sweep[b]) for b in xs]) * 1e3
    low = np.array([min(sweep[b]) for b in xs]) * 1e3
    high = np.array([max(sweep[b]) for b in xs]) * 1e3
    left.plot(xs, mid, "-o", label="step time, measured (median)")
    left.fill_between(xs, low, high, alpha=0.2, linewidth=0)
    left.axhline(weight_bytes / bandwidth * 1e3, color="0.35", linestyle=":",
                 label="weights / measured bandwidth (model)")
    right.plot(xs, [b / m * 1e3 for b, m in zip(xs, mid)], "-o", color="C1", label="tokens/s, measured")
    right.plot(xs, [b * 1e3 / mid[0] for b in xs], ":", color="C2", label="if every step took batch 1's time (model)")
    for ax in (left, right):
        ax.axvline(knee_at, color="C3", linestyle="--", label=f"knee (your knee_batch): {knee_at:.1f}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(b) for b in xs])
        ax.minorticks_off()
        ax.set_xlabel("batch (sequences per step)")
        ax.grid(True, which="both", alpha=0.3)
    left.set_ylabel("ms per decode step")
    left.set_ylim(bottom=0)
    right.set_ylabel("tokens per second")
    right.set_yscale("log")
    fig.suptitle(f"One decode step against batch, measured on {where}", fontsize=FONT + 2)
    handles = {}
    for ax in (left, right):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=2, fontsize=FONT,
               frameon=False, title="shaded: fastest to slowest run", title_fontsize=FONT)
    return fig


def per_token_figure(per_token: dict[str, dict[int, list[float]]], where: str):
    """Milliseconds to make one token at each position, with the KV cache and recomputing the prefix (measured)."""
    from grader import plots

    series = {f"{label}, measured": (list(times), [[t * 1e3 for t in v] for v in times.values()])
              for label, times in per_token.items()}
    fig = plots.lines(series, "position of the token made (tokens before it)", "ms per token",
                      f"Time per token with and without the KV cache, measured on {where}", marker="o")
    fig.axes[0].set_ylim(bottom=0)
    return fig


def per_card_room(max_batch_to_serve: Callable, card: float, cards: int, shape: dict, context: int,
                  weights: str) -> tuple[float, float] | None:
    """(bytes of weights on one card, bytes of one sequence's cache on one card) that the learner's max_batch_to_serve
    implies, read off where it stops fitting one and two sequences as the reserve grows (bisection); None when it
    never fits or always does. The course keeps no weights model of its own: the figures show the learner's."""
    def threshold(count: int) -> float | None:
        def fits(reserve: float) -> bool:
            return max_batch_to_serve(card, cards, shape, context, weights, reserve) >= count

        lo, hi = -64 * card, card  # a negative reserve is extra memory: enough for any model the course lists
        if not fits(lo) or fits(hi):
            return None
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    one, two = threshold(1), threshold(2)
    if one is None or two is None:
        return None
    sequence = one - two  # one more sequence on the card takes this much more room
    return card - one - sequence, sequence


def weights_room(max_batch_to_serve: Callable, card: float, cards: int, shape: dict, context: int,
                 weights: str) -> float | None:
    """The bytes of weights, on all the cards, that the learner's max_batch_to_serve leaves room for (per_card_room)."""
    found = per_card_room(max_batch_to_serve, card, cards, shape, context, weights)
    return None if found is None else found[0] * cards


def memory_figure(shape: dict, chips: Sequence, kv_cache_bytes: Callable, max_batch_to_serve: Callable,
                  reserve: float, contexts: Sequence[int] = (2048, 4096, 8192)):
    """Model: bf16 weights + cache against batch, for a few contexts, against 2 cards of each chip; capacity and knee."""
    from matplotlib.figure import Figure

    from grader.plots import FONT

    from grader.memory import card_bytes

    fig = Figure(figsize=(9.5, 4.6), layout="constrained")
    axes = fig.subplots(1, len(chips), sharey=True)
    for ax, chip in zip(axes, chips):
        cards = 2
        weights = weights_room(max_batch_to_serve, card_bytes(chip), cards, shape, 4096, "bf16") or 0.0
        room = cards * (card_bytes(chip) - reserve)
        fitting = [max_batch_to_serve(card_bytes(chip), cards, shape, ctx, "bf16", reserve) for ctx in contexts]
        top = max(16, math.ceil(max(fitting) * 1.25 / 8) * 8)
        for j, ctx in enumerate(contexts):
            xs = list(range(0, top + 1, max(1, top // 32)))
            ax.plot(xs, [(weights + kv_cache_bytes(shape, ctx, b, 2)) / GiB for b in xs], ":", color=f"C{j}",
                    label=f"weights + cache, context {ctx} (model)")
            fits = fitting[j]
            ax.plot([fits], [(weights + kv_cache_bytes(shape, ctx, fits, 2)) / GiB], "o", color=f"C{j}")
        ax.axhline(room / GiB, color="0.2", linestyle="--", label="2 cards less their reserve (model: GB read as GiB; assumption)")
        ax.axhline(weights / GiB, color="0.6", linestyle="-", linewidth=1, label="bf16 weights alone (what your max_batch_to_serve leaves room for)")
        ax.set_title(f"2 × {chip.name.removeprefix('NVIDIA ')} (knee, model: batch {model_knee_batch(chip):.0f})",
                     fontsize=FONT + 1)
        ax.set_xlabel("batch (sequences served at once)")
        ax.set_xlim(0, top)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("GiB")
    fig.suptitle(f"{shape['model']} in bf16: memory against batch (dots: the largest batch that fits, your "
                 "max_batch_to_serve)", fontsize=FONT + 1)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=FONT, frameon=False)
    return fig


def int8_figure(fp32: dict[int, list[float]], int8: dict[int, list[float]], where: str):
    """Measured decode step time, float32 against torch's W8A8 dynamic int8, per batch (bars, linear axis)."""
    from grader import plots

    batches = sorted(fp32)
    return plots.grouped_bars([f"batch {b}" for b in batches],
                              {"float32, measured (median)": [statistics.median(fp32[b]) * 1e3 for b in batches],
                               "int8 W8A8 (quantize_dynamic), measured (median)":
                                   [statistics.median(int8[b]) * 1e3 for b in batches]},
                              "ms per decode step", f"float32 against int8 (W8A8) on {where}")


def will_it_serve(models: Sequence[dict], chips: Sequence, max_batch_to_serve: Callable, kv_cache_bytes: Callable,
                  reserve: float):
    """Pick a card, how many, a model, the weights' dtype and a context: what fills memory at the largest batch."""
    import ipywidgets as widgets

    from grader import plots
    from grader.memory import card_bytes
    from grader.widgets import _figure_panel

    chip_box = widgets.Dropdown(options=[(c.name, i) for i, c in enumerate(chips)], description="card")
    cards_box = widgets.Dropdown(options=[1, 2, 4, 8], value=1, description="cards")
    names = [m["model"] for m in models]
    model_box = widgets.Dropdown(options=[(n, i) for i, n in enumerate(names)],
                                 value=names.index("Llama 2 70B") if "Llama 2 70B" in names else 0, description="model")
    dtype_box = widgets.Dropdown(options=list(WEIGHT_DTYPES), value="bf16", description="weights")
    context_box = widgets.Dropdown(options=[1024, 2048, 4096, 8192, 32768], value=4096, description="context")

    def draw():
        chip, cards, shape = chips[chip_box.value], cards_box.value, models[model_box.value]
        kind, context = dtype_box.value, context_box.value
        batch = max_batch_to_serve(card_bytes(chip), cards, shape, context, kind, reserve)
        found = per_card_room(max_batch_to_serve, card_bytes(chip), cards, shape, context, kind)
        weights, sequence = found or (0.0, 0.0)  # None: your max_batch_to_serve never fits one, or always does
        stack = {f"weights, {kind} (what your max_batch_to_serve leaves room for)": weights,
                 f"KV cache, {batch} × {context} tokens, bf16 (the part your max_batch_to_serve puts on a card)":
                     sequence * batch,
                 "reserve (assumption)": reserve}
        verdict = (f"<b>{shape['model']}</b>, {kind} weights, context {context}, on {cards} × {chip.name}: "
                   + (f"serves <b>{batch}</b> sequences at once (your max_batch_to_serve); a decode step there turns "
                      f"compute-bound near batch {model_knee_batch(chip, 'bf16', _WEIGHT_BYTES[kind]):.0f} (model)."
                      if batch else "<b>does not fit</b>: not even the weights and one sequence's cache."))
        fig = plots.memory_stack([(f"per card, batch {batch}", stack)],
                                 [(f"{chip.name} (nvidia-smi's total, model)", card_bytes(chip))],
                                 "Will it fit to serve? (model)")
        return verdict, fig

    return _figure_panel([(chip_box, cards_box, model_box), (dtype_box, context_box)], draw)


@sealed("09_serving")
def int8_error_rows(quantize, weight):
    """Section 6's comparison, for the cell after quantize_int8's check: your `quantize` on `weight` as it is and with
    an outlier put in, against one scale for the whole tensor; per case, the mean error of the weights given back over
    their mean size. Sealed (grader.checks._sealed): copy test r17 read the scales' layout off how it made its
    one-scale comparison."""
