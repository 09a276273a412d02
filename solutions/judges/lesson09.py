"""The instructor's judges of lesson 09's keyed checks (decode_step_seconds, knee_batch, kv_cache_bytes,
max_batch_to_serve): they hold the answers, and the models that make them, so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson09.py) and keeps
only digests and messages in grader/checks/keys/09_serving.json; the learner's checks (grader/checks/lesson09.py)
judge by those. A message names the kind of mistake and the principle, never the expected value nor the formula.
"""

from __future__ import annotations

import math
import random

from grader.checks._common import call, fail
from grader.checks.lesson09 import (_GB, _KNEE_CURVES, _KNEE_FAR, _KV_CASES, _STEP_CASES, _kv_shown, _ratio_off,
                                    _serve_cases, _without_far_point)

_WEIGHT_BYTES = {"bf16": 2.0, "int8": 1.0, "int4": 0.5}  # bytes per weight before scales

# --- the models (what grader.serving held before the answers left the package) -------------------------


def _step_seconds(n_params: float, bytes_per_param: float, batch: int, kv_bytes: float, bandwidth: float,
                  peak_flops: float) -> float:
    """Model: one decode step's seconds, weight FLOPs only; the slower of moving the bytes and doing the arithmetic."""
    return max((n_params * bytes_per_param + kv_bytes) / bandwidth, 2.0 * n_params * batch / peak_flops)


def _head_dim(shape: dict) -> int:
    return int(shape["d_model"]) // int(shape["n_heads"])


def _layer_positions(context: int, window: int, batch: int, shared: int, window_always: bool = False,
                     mistake: str = "") -> int:
    """Positions one layer keeps for the whole batch: the last `window` of each sequence's context; of those, the ones
    in the first `shared` tokens are the same in every sequence (a position's keys and values come from the tokens up
    to it), so they are kept once. The flags make the mistakes."""
    seen = window if window_always else min(context, window)
    once = max(0, min(shared, context) - (context - seen))  # the shared tokens still in the window
    if mistake == "unshared":
        return batch * seen
    if mistake == "twice":
        return once + batch * seen
    if mistake == "prefix whole":  # the shared tokens kept in every layer, however far back the window reaches
        whole = min(shared, context)
        return whole + batch * max(0, seen - whole)
    return once + batch * (seen - once)


def _positions(shape: dict, context: int, batch: int = 1, shared: int = 0, window_all: bool = False,
               window_always: bool = False, window_none: bool = False, sharing: str = "") -> int:
    """Positions kept, summed over the layers and the batch: a sliding-window layer keeps no more than its window.
    The flags make the mistakes: every layer windowed, a window kept even past the context, the window ignored, and
    (`sharing`) the shared tokens kept per sequence, twice, or whole in window layers."""
    layers, windowed = int(shape["n_layers"]), int(shape.get("window_layers") or 0)
    if window_none or not windowed:
        windowed = 0
    elif window_all:
        windowed = layers
    window = int(shape["window"]) if windowed else context
    return ((layers - windowed) * _layer_positions(context, context, batch, shared, mistake=sharing)
            + windowed * _layer_positions(context, window, batch, shared, window_always, sharing))


def _cache_bytes(shape: dict, context: int, batch: int, bytes_per_value: float, shared: int = 0, **mistake) -> int:
    """Model: K and V of every layer, KV head and position it keeps, for `batch` sequences of `context` tokens whose
    first `shared` tokens are the same."""
    kv_heads = int(shape.get("n_kv_heads") or shape["n_heads"])
    return int(2 * kv_heads * _head_dim(shape) * _positions(shape, context, batch, shared, **mistake) * bytes_per_value)


def _embedding_params(shape: dict) -> int:
    """Parameters of the token embedding and the output head (one matrix when they are tied)."""
    tied = str(shape.get("tied_embeddings", "")).lower() == "true"
    return int(shape["vocab_size"]) * int(shape["d_model"]) * (1 if tied else 2)


def _weights_bytes(shape: dict, weights: str, group_size: int = 128, scale_bytes: float = 2) -> float:
    """Model: bytes of the weights; layers in `weights` with one scale per `group_size` if quantized, embeddings bf16."""
    embed = _embedding_params(shape)
    layers = int(shape["n_params"]) - embed
    per = _WEIGHT_BYTES[weights] + (scale_bytes / group_size if weights != "bf16" else 0.0)
    return embed * 2.0 + layers * per


def _kv_heads_per_card(shape: dict, cards: int) -> int:
    """KV heads one card keeps under tensor parallelism: its share, and never less than the one its query heads use
    (with more cards than KV heads, each head is kept on every card whose query heads attend with it)."""
    return max(1, int(shape["n_kv_heads"]) // cards)


def _per_card_sequence(shape: dict, context: int, cards: int, width: float = 2, heads: float | None = None) -> float:
    """Bytes of one sequence's cache on one card (bf16 keys and values unless `width` says otherwise)."""
    heads = _kv_heads_per_card(shape, cards) if heads is None else heads
    return _cache_bytes(shape, context, 1, width) * heads / int(shape["n_kv_heads"])


def _serve_batch(card_bytes: float, cards: int, shape: dict, context: int, weights: str, reserve_bytes: float,
                 group_size: int = 128, scale_bytes: float = 2) -> int:
    """Model: the most sequences of `context` tokens that fit on every card beside its share of the weights, each card
    keeping the whole KV heads its query heads use (bf16 cache); the weights split evenly."""
    room = card_bytes - reserve_bytes - _weights_bytes(shape, weights, group_size, scale_bytes) / cards
    return max(0, int(room // _per_card_sequence(shape, context, cards)))


# --- decode_step_seconds -----------------------------------------------------------------------------

def _step_variants(args: tuple) -> dict[str, float]:
    n, w, b, kv, bw, peak = args
    memory, compute = (n * w + kv) / bw, 2 * n * b / peak
    return {
        "per sequence": max((n * w * b + kv) / bw, compute),
        "added": memory + compute,
        "no cache": max(n * w / bw, compute),
        "one FLOP": max(memory, n * b / peak),
        "cache per sequence": max((n * w + kv * b) / bw, compute),
        "memory only": memory,
        "compute only": compute,
    }


def _decode_step_seconds(fn) -> None:
    """decode_step_seconds: the slower of reading the bytes once per step and doing the weight arithmetic."""
    # Each names what the answer did, on the case that shows it, and the section to go back to: never the fix.
    messages = {
        "per sequence": "your step takes longer with the batch even where reading sets the time: how many times does "
                        "one step bring a weight from memory? (sections 1 and 2)",
        "added": "your step adds the reading's time to the arithmetic's: does the chip finish one before it starts "
                 "the other? (lesson 01's roofline)",
        "no cache": "your step does not change with kv_bytes: what does a step read? (section 3)",
        "one FLOP": "where the arithmetic sets the time, your step is shorter than that arithmetic takes: what does "
                    "one weight do for one sequence? (section 1)",
        "cache per sequence": "your step grows with the batch through kv_bytes, which is the cache of the whole batch "
                              "already (the exercise's words)",
        "memory only": "far past the balance point your step still does not grow with the batch: go back to lesson "
                       "01's roofline",
        "compute only": "your step is shorter than reading the weights takes (section 1: the chip's two rates)",
    }
    for label, args in _STEP_CASES.items():
        got = call(fn, *args)
        want = _step_seconds(*args)
        if math.isclose(float(got), want, rel_tol=1e-6):
            continue
        for kind, value in _step_variants(args).items():
            if math.isclose(float(got), value, rel_tol=1e-6) and not math.isclose(value, want, rel_tol=1e-6):
                fail(f"decode_step_seconds, case '{label}': {messages[kind]}.")
        fail(f"decode_step_seconds, case '{label}': not the time of one step (sections 1 to 3, and lesson 01's roofline).")


# --- knee_batch ------------------------------------------------------------------------------------------

def _knee_curves() -> dict[str, tuple[list[int], list[float], float]]:
    """Synthetic step-time curves with a known knee: flat T0, then c·b; noise of a few per cent on each point, and on
    the last three one point far off (a warm-up paid by the first step, a busy or a quiet moment), so that reading an
    asymptote off one or two points misses the knee by more than 20 % (a copy test passed with t[0] / (t[-1] / b[-1]))."""
    rng = random.Random(9)
    curves = {}
    for label, knee, batches, soft, odd in (
            ("a sharp knee", 11.3, [1, 2, 4, 8, 16, 32, 64], None, {}),
            ("a rounded knee", 24.0, [1, 2, 4, 8, 16, 32, 64, 128], 3.0, {}),
            ("a knee at a small batch, odd batches", 3.1, [1, 3, 5, 9, 17, 33], None, {}),
            ("a first step that paid a warm-up", 18.0, [1, 2, 4, 8, 16, 32, 64, 128], None, {1: 1.45}),
            ("a quick point in the flat part", 7.0, [1, 2, 3, 4, 6, 8, 12, 16, 24, 32], None, {3: 0.74}),
            ("a last point at a quiet moment", 9.0, [1, 2, 4, 8, 16, 32, 64], None, {64: 0.72}),
            # knees near either end of the sweep, one point past the knee (copy tests r18 and r19 passed with fixed
            # splits: the medians of the first half's (or three's) times and of the last half's (or three's) times per
            # sequence, right only when the knee lies well inside the sweep)
            ("a knee before the last batch", 180.0, [1, 2, 4, 8, 16, 32, 64, 128, 256], None, {}),
            ("a knee before the second batch", 1.5, [1, 2, 4, 8, 16, 32, 64, 128], None, {})):
        t0 = 0.05
        c = t0 / knee
        seconds = []
        for b in batches:
            ideal = max(t0, c * b) if soft is None else (t0**soft + (c * b) ** soft) ** (1 / soft)
            seconds.append(ideal * (1 + rng.uniform(-0.04, 0.04)) * odd.get(b, 1.0))
        curves[label] = (batches, seconds, knee)
    return curves


def _first_rise(batches, seconds) -> float:
    for k in range(1, len(batches)):
        if seconds[k] > seconds[k - 1]:
            return batches[k]
    return batches[-1]


def _best_throughput(batches, seconds) -> float:
    return max(zip(batches, seconds), key=lambda p: p[0] / p[1])[0]


def _read_off_points(batches, seconds) -> list[float]:
    """Asymptotes read off one point each, the ways a copy test did: the first (or the fastest) time as the flat one,
    the last point's (or the least) time per sequence as the rising one."""
    pairs = sorted(zip(batches, seconds))
    first, fastest = pairs[0][1], min(seconds)
    last, least = pairs[-1][1] / pairs[-1][0], min(s / b for b, s in pairs)
    return [first / last, fastest / least, fastest / last, first / least]


def _knee_batch(fn) -> None:
    """knee_batch: where the flat (memory-bound) and rising (compute-bound) asymptotes of the curve cross, by a fit
    that one far point moves by a twelfth at most (the package's check asks the same of every answer: strict=)."""
    curves = _knee_curves()
    off = []
    for label, (batches, seconds) in _KNEE_CURVES.items():
        _, made, knee = curves[label]
        assert all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(made, seconds)), f"{label}: the package's curve moved"
        got = call(fn, batches, seconds)
        if _ratio_off(float(got), knee) <= 1.2:
            continue
        off.append(label)
        if float(got) == _first_rise(batches, seconds):
            fail(f"knee_batch on {label}: you returned the first batch whose time rose at all. A few per cent of "
                 "noise makes the flat part rise and fall; the knee is where the fitted asymptotes cross.")
        if float(got) == _best_throughput(batches, seconds):
            fail(f"knee_batch on {label}: you returned the batch with the highest tokens/s, a point of the curve; "
                 "past the knee tokens/s is flat, so noise picks that batch (the knee is where the asymptotes cross).")
        if any(math.isclose(float(got), v, rel_tol=1e-9) for v in _read_off_points(batches, seconds)):
            fail(f"knee_batch on {label}: your asymptotes each rest on a single point, and on this curve that point is "
                 "far off the others: one measurement should not be able to move an asymptote.")
    for label in _KNEE_FAR:
        whole, without = call(fn, *_KNEE_CURVES[label]), call(fn, *_without_far_point(label))
        if _ratio_off(float(whole), float(without)) > 1 + 1 / 12:
            fail(f"knee_batch on {label}: leaving out the one point that is far off the rest moves your knee by more "
                 "than a twelfth. One measurement should not be able to move an asymptote (section 3).")
    for label in off:
        fail(f"knee_batch on {label}: not where the curve's two asymptotes cross (section 3: which points belong to "
             "each, and how much can one bad point move it?).")


# --- kv_cache_bytes ----------------------------------------------------------------------------------


def _kv_cache_bytes(fn) -> None:
    """kv_cache_bytes: K and V for every layer, KV head and position attention will read again, each kept once."""
    for args in _KV_CASES:
        shape, context, batch, width = args[:4]
        shared = args[4] if len(args) > 4 else 0
        got = call(fn, *args)
        shown = _kv_shown(args)
        if not isinstance(got, int) or isinstance(got, bool):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return a whole number of bytes (an int).")
        want = _cache_bytes(*args)
        if got == want:
            continue
        n_heads, kv, layers = shape["n_heads"], shape["n_kv_heads"], shape["n_layers"]
        # Each names what the answer did on this case, and the section: not the factor that fixes it.
        if got * 2 == want:
            fail(f"{shown}: you kept one of K and V (section 4).")
        if n_heads != kv and got * kv == want * n_heads:
            fail(f"{shown}: your cache grows with the query heads (section 4, grouped-query attention).")
        if not shared and got * layers == want:
            fail(f"{shown}: you counted one layer's cache (section 4).")
        if got == want * n_heads:
            fail(f"{shown}: your heads are each as wide as the whole model (section 4).")
        if not shared and got * batch == want and batch > 1:
            fail(f"{shown}: your cache does not grow with the batch.")
        if shared and batch > 1:
            if got == _cache_bytes(*args, sharing="unshared"):
                fail(f"{shown}: your cache holds the shared tokens' keys and values once per sequence: is anything in "
                     "them different from one sequence to the next? (section 4)")
            if got == _cache_bytes(*args, sharing="twice"):
                fail(f"{shown}: your cache keeps the shared tokens once for the batch and again in every sequence.")
            if shape.get("window_layers") and got == _cache_bytes(*args, sharing="prefix whole"):
                fail(f"{shown}: your window layers keep shared tokens that are further back than they will look "
                     "again.")
        if shape.get("window_layers"):
            if got == _cache_bytes(*args, window_none=True):
                fail(f"{shown}: your window layers keep every position of the context, further back than they will "
                     "ever look again.")
            if got == _cache_bytes(*args, window_all=True):
                fail(f"{shown}: your cache treats every layer as a window layer; this shape has layers that attend "
                     "to the whole context too.")
            if got == _cache_bytes(*args, window_always=True):
                fail(f"{shown}: at a context shorter than the window, your window layers keep more positions than "
                     "there are tokens.")
        fail(f"{shown}: not the bytes of the cache (section 4: what will attention still use, and how many copies of "
             "it does the batch need?).")


# --- max_batch_to_serve ------------------------------------------------------------------------------


def _serve_variants(args: tuple) -> dict[str, int]:
    card, cards, shape, context, weights, reserve, group, scale = args
    per_seq = _per_card_sequence(shape, context, cards)
    w = _weights_bytes(shape, weights, group, scale)
    room = card - reserve - w / cards

    def n(free_bytes, per):
        return max(0, int(free_bytes // per))

    out = {
        "one token": n(room, _per_card_sequence(shape, 1, cards)),
        "cards once": n(card - reserve - w, per_seq),
        "reserve once": n(card - reserve / cards - w / cards, per_seq),
        "whole model in bf16": n(card - reserve - _weights_bytes(shape, "bf16") / cards, per_seq),
        "embeddings quantized": n(card - reserve - (w - _embedding_params(shape) * (
            2 - {"bf16": 2, "int8": 1 + scale / group, "int4": 0.5 + scale / group}[weights])) / cards, per_seq),
        "pooled": max(0, int((cards * (card - reserve) - w) // _cache_bytes(shape, context, 1, 2))),
    }
    if weights != "bf16":
        out["no scales"] = n(room + (int(shape["n_params"]) - _embedding_params(shape)) * scale / group / cards, per_seq)
        out["cache like weights"] = n(room, _per_card_sequence(shape, context, cards, {"int8": 1, "int4": 0.5}[weights]))
    return out


# Each names what the answer did on the case shown, and the section: not the term that fixes it.
_SERVE_MESSAGES = {
    "one token": "each of your sequences keeps the cache of one token, not of its context",
    "cards once": "you counted one card's memory for the weights of all the cards",
    "reserve once": "you kept one reserve for all the cards together (section 5)",
    "whole model in bf16": "your weights take the same bytes whatever their dtype",
    "embeddings quantized": "you quantized the embeddings and the output head too (section 5 says which weights are)",
    "no scales": "your quantized weights have no scales (section 5)",
    "cache like weights": "your cache shrinks with the weights' dtype (section 5: what the cache holds)",
    "pooled": "with more cards than KV heads, your cards share out the cache as evenly as they share the weights "
              "(section 5: what must each card hold in its own memory for its own query heads?)",
}


def _max_batch_to_serve(fn) -> None:
    """max_batch_to_serve: the sequences whose bf16 KV cache fits on every card beside its share of the weights."""
    for args in _serve_cases():
        card, cards, shape, context, weights, reserve, group, scale = args
        got = call(fn, *args)
        shown = (f"max_batch_to_serve({card / _GB:g} GB x {cards}, {shape['model']}, context {context}, {weights}, "
                 f"reserve {reserve / _GB:g} GB, group {group})")
        if not isinstance(got, int) or isinstance(got, bool):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return a whole number of sequences (an int).")
        want = _serve_batch(*args)
        if got == want:
            continue
        if got < 0:
            fail(f"{shown} returned a negative batch; when the weights alone do not fit, no sequence does: 0.")
        for kind, value in _serve_variants(args).items():
            if got == value and value != want:
                fail(f"{shown}: {_SERVE_MESSAGES[kind]}.")
        fail(f"{shown}: not the number of sequences that fit (section 5, card by card).")


JUDGES = {"decode_step_seconds": _decode_step_seconds, "knee_batch": _knee_batch, "kv_cache_bytes": _kv_cache_bytes,
          "max_batch_to_serve": _max_batch_to_serve}
