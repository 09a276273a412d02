"""The instructor's judges of lesson 09's keyed checks (kv_cache_bytes, max_batch_to_serve): they hold the answers,
so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson09.py) and keeps
only digests and messages in grader/checks/keys/09_serving.json; the learner's checks (grader/checks/lesson09.py)
judge by those. A message names the kind of mistake and the principle, never the expected value nor the formula.
"""

from __future__ import annotations

from grader import serving
from grader.checks._common import call, fail
from grader.checks.lesson09 import _GB, _KV_CASES, _serve_cases

# --- kv_cache_bytes ----------------------------------------------------------------------------------


def _kv_cache_bytes(fn) -> None:
    """kv_cache_bytes: K and V for every layer, KV head and position of every sequence."""
    for args in _KV_CASES:
        shape, context, batch, width = args
        got = call(fn, *args)
        shown = f"kv_cache_bytes({shape['model']}, context={context}, batch={batch}, bytes_per_value={width})"
        if not isinstance(got, int) or isinstance(got, bool):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return a whole number of bytes (an int).")
        want = serving.cache_bytes(*args)
        if got == want:
            continue
        n_heads, kv, layers = shape["n_heads"], shape["n_kv_heads"], shape["n_layers"]
        if got * 2 == want:
            fail(f"{shown}: you kept one of K and V; attention needs both for every past position.")
        if n_heads != kv and got * kv == want * n_heads:
            fail(f"{shown}: you counted the query heads. Grouped-query attention keeps K and V only for its KV "
                 "heads, each shared by several query heads.")
        if got * layers == want:
            fail(f"{shown}: you counted one layer; every layer attends over its own keys and values.")
        if got == want * n_heads:
            fail(f"{shown}: each KV head is head_dim wide (d_model split across the query heads), not d_model.")
        if got * batch == want and batch > 1:
            fail(f"{shown}: every sequence of the batch keeps its own cache.")
        fail(f"{shown}: not the bytes of the cache. What does attention need from each past position, in which "
             "layers and heads, for how many sequences?")


# --- max_batch_to_serve ------------------------------------------------------------------------------


def _serve_variants(args: tuple) -> dict[str, int]:
    card, cards, shape, context, weights, reserve, group, scale = args
    per_seq = serving.cache_bytes(shape, context, 1, 2)
    w = serving.weights_bytes(shape, weights, group, scale)
    free = cards * (card - reserve) - w

    def n(free_bytes, per):
        return max(0, int(free_bytes // per))

    out = {
        "one token": n(free, serving.cache_bytes(shape, 1, 1, 2)),
        "cards once": n(card - reserve - w, per_seq),
        "reserve once": n(cards * card - reserve - w, per_seq),
        "whole model in bf16": n(cards * (card - reserve) - serving.weights_bytes(shape, "bf16"), per_seq),
        "embeddings quantized": n(cards * (card - reserve) - (w - serving.embedding_params(shape) * (
            2 - {"bf16": 2, "int8": 1 + scale / group, "int4": 0.5 + scale / group}[weights])), per_seq),
    }
    if weights != "bf16":
        out["no scales"] = n(free + (int(shape["n_params"]) - serving.embedding_params(shape)) * scale / group, per_seq)
        out["cache like weights"] = n(free, serving.cache_bytes(shape, context, 1, {"int8": 1, "int4": 0.5}[weights]))
    return out


_SERVE_MESSAGES = {
    "one token": "you made room for one token per sequence; each sequence keeps the keys and values of its whole "
                 "context",
    "cards once": "you counted one card's memory; with tensor parallelism the weights and the KV heads are split "
                  "across the cards, so their memories add up",
    "reserve once": "each card keeps its own reserve (runtime, activations, the CUDA context), not one for all",
    "whole model in bf16": "your weights did not shrink with their dtype: count each layer weight's bytes in the "
                           "dtype asked for",
    "embeddings quantized": "the embeddings and the output head stay in bf16 here; only the layers are quantized",
    "no scales": "a quantized weight needs its scales to be read back: one scale per group of weights, and those "
                 "bytes count",
    "cache like weights": "the KV cache holds activations (keys and values), in bf16 whatever the weights' "
                          "dtype: quantizing the weights does not shrink it",
}


def _max_batch_to_serve(fn) -> None:
    """max_batch_to_serve: the sequences whose bf16 KV cache fits beside the weights on `cards` cards."""
    for args in _serve_cases():
        card, cards, shape, context, weights, reserve, group, scale = args
        got = call(fn, *args)
        shown = (f"max_batch_to_serve({card / _GB:g} GB x {cards}, {shape['model']}, context {context}, {weights}, "
                 f"reserve {reserve / _GB:g} GB, group {group})")
        if not isinstance(got, int) or isinstance(got, bool):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return a whole number of sequences (an int).")
        want = serving.serve_batch(*args)
        if got == want:
            continue
        if got < 0:
            fail(f"{shown} returned a negative batch; when the weights alone do not fit, no sequence does: 0.")
        for kind, value in _serve_variants(args).items():
            if got == value and value != want:
                fail(f"{shown}: {_SERVE_MESSAGES[kind]}.")
        fail(f"{shown}: not the number of sequences that fit. Memory holds the weights (layers in the dtype asked "
             "for, with their scales; embeddings and head in bf16) and each sequence's cache, on every card less "
             "its reserve; a sequence fits only whole.")


JUDGES = {"kv_cache_bytes": _kv_cache_bytes, "max_batch_to_serve": _max_batch_to_serve}
