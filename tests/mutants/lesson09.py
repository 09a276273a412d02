"""Mutants for lesson 09 (serving a model): the mistakes learners make reasoning about a decode step and its memory."""

LESSON = "09_serving"

_H100_BW, _H100_BF16, _N7 = 3.35e12, 989.5e12, 6.738e9

# What section 1's first cell notes for the predictions (predictions.note_measured), on a made-up machine (test data,
# not a measurement): the predictions take no first guess before it. Here 10 tokens/s at batch 1 either way, and 8x
# for batch 16 (the arithmetic at batch 16 takes twice the reading).
MEASURED = {"bandwidth": 10e9, "weight_bytes": 1e9, "n_params": 2.5e8, "matmul_rate_1": 5e9, "matmul_rate_16": 40e9}

_STEP = """
def decode_step_seconds(n_params, bytes_per_param, batch, kv_bytes, bandwidth, peak_flops):
    memory = {memory}
    compute = {compute}
    return {combine}
"""



def _step(memory="(n_params * bytes_per_param + kv_bytes) / bandwidth", compute="2 * n_params * batch / peak_flops",
          combine="max(memory, compute)") -> str:
    return _STEP.format(memory=memory, compute=compute, combine=combine)


_KV = """
def kv_cache_bytes(shape, context, batch, bytes_per_value, shared=0):
    head_dim = {head_dim}
    windowed = shape.get("window_layers") or 0

    def layer(looks_back):
        seen = {seen}
        same = {same}
        return {kept}

    total = {total}
    return int({k_and_v} * {heads} * head_dim * total * bytes_per_value)
"""
_TOTAL = "(shape['n_layers'] - windowed) * layer(context) + windowed * layer(shape.get('window', context))"


def _kv(head_dim="shape['d_model'] // shape['n_heads']", k_and_v="2", total=_TOTAL, heads="shape['n_kv_heads']",
        seen="min(context, looks_back)", same="max(0, min(shared, context) - (context - seen))",
        kept="same + batch * (seen - same)") -> str:
    return _KV.format(head_dim=head_dim, k_and_v=k_and_v, total=total, heads=heads, seen=seen, same=same, kept=kept)


_SERVE = """
def max_batch_to_serve(card_bytes, cards, shape, context, weights, reserve_bytes, group_size=128, scale_bytes=2):
    tied = str(shape["tied_embeddings"]).lower() == "true"
    embed = shape["vocab_size"] * shape["d_model"] * (1 if tied else 2)
    per_weight = {{"bf16": 2, "int8": 1, "int4": 0.5}}[weights] + ({scales})
    weight_bytes = embed * 2 + (shape["n_params"] - embed) * per_weight
    room = {room}
    heads = {heads}
    head_dim = shape["d_model"] // shape["n_heads"]
    per_sequence = 2 * shape["n_layers"] * heads * head_dim * {tokens} * {cache_width}
    return max(0, int(room // per_sequence))
"""


def _serve(scales="0 if weights == 'bf16' else scale_bytes / group_size",
           room="card_bytes - reserve_bytes - weight_bytes / cards", heads="max(1, shape['n_kv_heads'] // cards)",
           tokens="context", cache_width="2") -> str:
    return _SERVE.format(scales=scales, room=room, heads=heads, tokens=tokens, cache_width=cache_width)


_QUANT = """
import torch
def quantize_int8(weight):
    amax = {amax}
    scale = torch.where(amax > 0, amax / {levels}, torch.ones_like(amax))
    q = torch.clamp({rounding}(weight / {scale_view}), -127, 127).to(torch.int8)
    return q, scale
"""


def _quant(amax="weight.abs().amax(dim=1).float()", levels="127", rounding="torch.round", scale_view="scale[:, None]"):
    return _QUANT.format(amax=amax, levels=levels, rounding=rounding, scale_view=scale_view)


MUTANTS = {
    "TOKENS_PER_SECOND_PREDICTION_check": [
        ("the H100 ceiling from its FLOP/s, not its bandwidth",
         f"TOKENS_PER_SECOND_PREDICTION = {{'H100, 7B in bf16': {_H100_BF16} / (2 * {_N7}), 'here, batch 1': 10.0, "
         "'why': 'peak FLOP/s over 2 FLOPs per weight'}",
         r"the arithmetic sets"),
        ("bf16 weights counted as 4 bytes",
         f"TOKENS_PER_SECOND_PREDICTION = {{'H100, 7B in bf16': {_H100_BW} / ({_N7} * 4), 'here, batch 1': 10.0, "
         "'why': 'bandwidth over the bytes of the weights'}",
         r"how many bytes does one bf16 weight take"),
        ("bits, not bytes",
         f"TOKENS_PER_SECOND_PREDICTION = {{'H100, 7B in bf16': {_H100_BW} / ({_N7} * 16), 'here, batch 1': 10.0, "
         "'why': 'bandwidth over the size of the weights'}",
         r"bits instead of bytes"),
    ],
    "decode_step_seconds_check": [
        ("the weights read once per sequence", _step(memory="(n_params * bytes_per_param * batch + kv_bytes) / bandwidth"),
         r"how many times does one step bring a weight"),
        ("the two times added", _step(combine="memory + compute"), r"adds the reading's time to the arithmetic's"),
        ("the cache left out", _step(memory="n_params * bytes_per_param / bandwidth"), r"does not change with kv_bytes"),
        ("one FLOP per weight", _step(compute="n_params * batch / peak_flops"), r"shorter than that arithmetic takes"),
        ("memory only", _step(compute="0", combine="memory"), r"still does not grow with the batch"),
    ],
    "BATCH_PREDICTION_check": [
        ("no gain from the batch: the weights read per sequence",
         "BATCH_PREDICTION = {'tokens/s at batch 16 over batch 1': 1.0, 'why': 'each sequence needs the weights'}",
         r"about no gain from the batch"),
        ("more than the batch",
         "BATCH_PREDICTION = {'tokens/s at batch 16 over batch 1': 256.0, 'why': 'batch squared'}",
         r"more than the batch"),
    ],
    "knee_batch_check": [
        ("the first batch whose time rose at all",
         """
def knee_batch(batches, step_seconds):
    pairs = sorted(zip(batches, step_seconds))
    for (b0, s0), (b1, s1) in zip(pairs, pairs[1:]):
        if s1 > s0:
            return float(b1)
    return float(pairs[-1][0])
""",
         r"first batch whose time rose"),
        ("the batch of the highest throughput",
         """
def knee_batch(batches, step_seconds):
    return float(max(zip(batches, step_seconds), key=lambda p: p[0] / p[1])[0])
""",
         r"highest tokens/s"),
        ("each asymptote read off one point: the first time, the last time per sequence",
         """
def knee_batch(batches, step_seconds):
    pairs = sorted(zip(batches, step_seconds))
    return pairs[0][1] / (pairs[-1][1] / pairs[-1][0])
""",
         r"each rest on a single point"),
        ("each asymptote read off one point: the fastest time, the least time per sequence",
         """
def knee_batch(batches, step_seconds):
    return min(step_seconds) / min(s / b for b, s in zip(batches, step_seconds))
""",
         r"each rest on a single point"),
        ("two points each, averaged",
         """
import statistics
def knee_batch(batches, step_seconds):
    pairs = sorted(zip(batches, step_seconds))
    return statistics.mean(s for _, s in pairs[:2]) / statistics.mean(s / b for b, s in pairs[-2:])
""",
         r"leaving out the one point that is far off the rest moves your knee"),
        ("each asymptote from a fixed half of the points (copy test r18)",
         """
import statistics
def knee_batch(batches, step_seconds):
    pairs = sorted(zip(batches, step_seconds))
    half = len(pairs) // 2
    return statistics.median(s for _, s in pairs[:half]) / statistics.median(s / b for b, s in pairs[half:])
""",
         r"not where the curve's two asymptotes cross"),
        ("the flat level taken as the mean of every point",
         """
def knee_batch(batches, step_seconds):
    pairs = sorted(zip(batches, step_seconds))
    flat = sum(s for _, s in pairs) / len(pairs)
    return flat / (pairs[-1][1] / pairs[-1][0])
""",
         r"moves your knee by more than a twelfth"),
    ],
    "kv_cache_bytes_check": [
        ("K or V missing", _kv(k_and_v="1"), r"one of K and V"),
        ("query heads instead of KV heads", _kv(heads="shape['n_heads']"), r"grows with the query heads"),
        ("one layer only", _kv(total="layer(context)"), r"counted one layer"),
        ("head_dim taken as d_model", _kv(head_dim="shape['d_model']"), r"as wide as the whole model"),
        ("the window ignored (lesson 04's formula, as grader.memory has it)",
         _kv(total="shape['n_layers'] * layer(context)"), r"window layers keep every position of the context"),
        ("every layer windowed",
         _kv(total="shape['n_layers'] * (layer(shape['window']) if windowed else layer(context))"),
         r"treats every layer as a window layer"),
        ("a window layer keeps its whole window, however short the context", _kv(seen="looks_back"),
         r"more positions than there are tokens"),
        ("the shared tokens kept per sequence (the cache without sharing)", _kv(kept="batch * seen"),
         r"once per sequence: is anything in them different"),
        ("the shared tokens kept once and again per sequence", _kv(kept="same + batch * seen"),
         r"once for the batch and again in every sequence"),
        ("window layers keep the whole shared prefix",
         _kv(same="min(shared, context)", kept="same + batch * max(0, seen - same)"),
         r"keep shared tokens that are further back than they will look again"),
    ],
    "max_batch_to_serve_check": [
        ("the cache of one token per sequence", _serve(tokens="1"), r"keeps the cache of one token"),
        ("int4 without its scales", _serve(scales="0"), r"have no scales"),
        ("the cache in the weights' dtype", _serve(cache_width="{'bf16': 2, 'int8': 1, 'int4': 0.5}[weights]"),
         r"your cache shrinks with the weights' dtype"),
        ("the cards' memory counted once", _serve(room="card_bytes - reserve_bytes - weight_bytes"),
         r"you counted one card's memory"),
        ("KV heads split below one per card", _serve(heads="shape['n_kv_heads'] / cards"),
         r"share out the cache as evenly as they share the weights"),
        ("every card's memory pooled (the cache split as evenly as the weights)",
         """
def max_batch_to_serve(card_bytes, cards, shape, context, weights, reserve_bytes, group_size=128, scale_bytes=2):
    tied = str(shape["tied_embeddings"]).lower() == "true"
    embed = shape["vocab_size"] * shape["d_model"] * (1 if tied else 2)
    per_weight = {"bf16": 2, "int8": 1, "int4": 0.5}[weights] + (0 if weights == "bf16" else scale_bytes / group_size)
    weight_bytes = embed * 2 + (shape["n_params"] - embed) * per_weight
    free = cards * (card_bytes - reserve_bytes) - weight_bytes
    per_sequence = 2 * shape["n_layers"] * shape["n_kv_heads"] * (shape["d_model"] // shape["n_heads"]) * context * 2
    return max(0, int(free // per_sequence))
""",
         r"share out the cache as evenly as they share the weights"),
    ],
    "quantize_int8_check": [
        ("one scale for the whole tensor",
         _quant(amax="weight.abs().amax().float().reshape(1)", scale_view="scale"),
         r"one scale for the whole tensor"),
        ("scale amax / 128", _quant(levels="128"), r"your levels stop short of it"),
        ("rounding toward zero", _quant(rounding="torch.trunc"), r"always nearer zero than they were"),
        ("a scale per input column",
         _quant(amax="weight.abs().amax(dim=0).float()", scale_view="scale[None, :]"),
         r"your scales change inside the sums an int8 matmul makes"),
        ("the all-zero row divided by a zero scale",
         """
import torch
def quantize_int8(weight):
    scale = weight.abs().amax(dim=1).float() / 127
    q = torch.clamp(torch.round(torch.nan_to_num(weight / scale[:, None])), -127, 127).to(torch.int8)
    return q, scale
""",
         r"a scale is zero"),
    ],
}
