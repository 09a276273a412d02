"""Checks for lesson 09 (serving a model): tokens/s predicted from bandwidth, the decode step's time, the batch
lever predicted, the knee of a measured curve, the KV cache's bytes, the batch a set of cards serves, int8 rows.

Each check is two halves (grader.checks._common.Check): observe calls the learner's function on the check's
own cases and returns plain numbers and small tensors. The functions' answers are not in the package: each
numeric check is keyed (grader.checks._keys: digests made by scripts/build_keys.py from the instructor's judges,
solutions/judges/lesson09.py), and quantize_int8 is judged by properties any right rounding has, so no answer is
needed to judge it. The two predictions are graded cells of their own (Prediction): half for a first guess with a
reason, half banded against the model fed with what this run measured when the guess was recorded
(grader.predictions.note_measured). The models, and the messages that name their mistakes, are sealed
(grader.checks._sealed): opened once a first guess is recorded, or on purpose as the reveal.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import torch

from grader import serving, shortcuts, specs
from grader.checks._common import Check, Prediction, Replay, call, fail, guard, is_number, require_callable
from grader.checks import _keys
from grader.checks._keys import Keyed
from grader.checks._sealed import sealed
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson09.expect
from grader.shortcuts import course_only

LESSON = "09_serving"  # the lesson's name in the predictions record (grader.predictions)



def _ratio_off(value: float, target: float) -> float:
    """How far `value` is from `target` as a factor (1.0: equal)."""
    return math.exp(abs(math.log(value / target)))


def _near(value: float, target: float, within: float = 0.15) -> bool:
    return value > 0 and target > 0 and _ratio_off(value, target) <= 1 + within


# --- TOKENS_PER_SECOND_PREDICTION ------------------------------------------------------------------

_H100_KEY, _HERE_KEY = "H100, 7B in bf16", "here, batch 1"
# What section 1's first cell measures (predictions.note_measured): both predictions take a first guess only after it
_MEASURED_FIRST = ("bandwidth", "weight_bytes", "n_params", "matmul_rate_1", "matmul_rate_16")


def _seven_b() -> int:
    return next(int(m["n_params"]) for m in specs.load_models() if m["model"] == "LLaMA-7B")


@course_only()
@sealed(LESSON, "TOKENS_PER_SECOND_PREDICTION")
def _tps_targets(context: dict) -> dict[str, tuple[float, float, float]]:
    """The model TOKENS_PER_SECOND_PREDICTION is scored against, per key, fed with this run's record (sealed)."""


def _after_the_model() -> None:
    """Both predictions' answers are decode_step_seconds's model (at batch 1, and at 16 over 1): copy test r13 recorded
    a throwaway guess, read the batch-1 ceiling's two limits off its reveal and wrote exercise 3 from them; r17 did it
    from the two answers' figures alone. So the reveal cells, the deliberate reveals, the models' words and the end
    table's model column wait until decode_step_seconds has passed in this kernel (its check comes before them);
    before, nothing is shown and nothing recorded."""
    from grader.notebook import NotPassed

    if not check_decode_step_seconds.passed:
        raise NotPassed("decode_step_seconds", "this shows a prediction's answer, and both predictions are "
                        "`decode_step_seconds`'s model: it is shown once that check has passed in this kernel")


def batch1_ceilings() -> dict[str, tuple[float, float, float]]:
    """For the cell that shows the answer, once your guess is recorded and decode_step_seconds has passed: per key,
    (the course's ceiling, the tokens/s reading the weights allows, the tokens/s the arithmetic allows; 0: not known)
    at batch 1, from this run's record and the datasheet. Asked for before a first guess is recorded, it counts as the
    deliberate reveal (recorded, as check_tokens_per_second.reveal())."""
    from grader import predictions

    _after_the_model()
    found = predictions.entry(LESSON, check_tokens_per_second.name)
    if not (found and found.get("first")):
        predictions.mark(LESSON, check_tokens_per_second.name, "revealed")
    return {key: (_ceiling(t, f), t, f) for key, (t, _, f) in _tps_targets(predictions.context(LESSON)).items()}


def show_batch1(one: list[float]) -> None:
    """Section 3's measurement of section 1's prediction, once your guess is recorded and decode_step_seconds has
    passed: the batch-1 step timed here (`one`, seconds per repeat) beside the course's model, and what sets it.
    Called before a first guess, it is the deliberate reveal."""
    _after_the_model()
    _show_batch1(one)


@sealed(LESSON, "TOKENS_PER_SECOND_PREDICTION")
def _show_batch1(one: list[float]) -> None:
    """show_batch1's table and words (sealed: a copy test read the model's rule off the cell's source before
    guessing)."""


@course_only()
@sealed(LESSON, "TOKENS_PER_SECOND_PREDICTION")
def _ceiling(reading: float, arithmetic: float) -> float:
    """Part of TOKENS_PER_SECOND_PREDICTION's model (sealed)."""


@course_only()
@sealed(LESSON, "TOKENS_PER_SECOND_PREDICTION")
def _tps_mistake(key: str, value: float, reading: float, width: float, flop_bound: float) -> str | None:
    """The kind of mistake a tokens/s figure shows, in words with no value; None when it is within the band."""


@course_only()
@sealed(LESSON, "TOKENS_PER_SECOND_PREDICTION")
def _tps_band(first: dict, context: dict) -> tuple[float, str]:
    """TOKENS_PER_SECOND_PREDICTION's band: (fraction, message) for a first guess (sealed)."""


@course_only()
@sealed(LESSON, "TOKENS_PER_SECOND_PREDICTION")
def _tps_final(answer: dict, context: dict) -> str | None:
    """The known mistake a final TOKENS_PER_SECOND_PREDICTION makes, or None (sealed)."""


@course_only()
@sealed(LESSON, "TOKENS_PER_SECOND_PREDICTION")
def _tps_said(context: dict) -> str:
    """The model's answer in words, for the deliberate reveal (sealed)."""


check_tokens_per_second = Prediction(LESSON, "TOKENS_PER_SECOND_PREDICTION", {_H100_KEY: "number", _HERE_KEY: "number"},
                                     points=2, band=_tps_band, mistakes=_tps_final, model=_tps_said,
                                     watch=(_tps_mistake, _tps_targets, _ceiling, serving.time_steps),
                                     needs=_MEASURED_FIRST,
                                     waits=_after_the_model)


# --- decode_step_seconds ----------------------------------------------------------------------------

# (n_params, bytes_per_param, batch, kv_bytes, bandwidth, peak_flops): the cases and what each one separates.
_STEP_CASES = {
    "memory-bound, big cache": (7e9, 2, 8, 6e9, 3.35e12, 989.5e12),  # the cache is a third of the bytes
    "compute-bound": (7e9, 2, 2048, 1e9, 3.35e12, 989.5e12),  # far past the balance point
    "near balance": (1e9, 1, 150, 0.0, 2e12, 600e12),
    "batch 1, no cache": (2e9, 4, 1, 0.0, 1e11, 1e12),
}


def _in_a_learners_kernel() -> bool:
    from grader import predictions

    return predictions._in_kernel() and not predictions.grading()


def _after_the_predictions() -> None:
    """decode_step_seconds is the model both predictions are scored against, so in a learner's kernel its check waits
    for both to be answered (a first guess, or a deliberate reveal): copy test r18 noted that a learner could build the
    function first, with the check's messages, and then predict with it. Graders, and code outside a kernel (the
    course's tests), run the check as it is: no grade depends on this order."""
    from grader import predictions

    if not _in_a_learners_kernel():
        return
    waiting = [check.name for check in (check_tokens_per_second, check_batch_prediction)
               if not (found := predictions.entry(LESSON, check.name)) or not (found.get("first") or found.get("revealed"))]
    if waiting:
        fail(f"make {' and '.join(waiting)} first (run {'their check cells' if len(waiting) > 1 else 'its check cell'}): "
             "decode_step_seconds is the model they are scored against, so its check waits for your first guesses.")


def _public_decode_step(fn: Replay) -> None:
    """What can be said of decode_step_seconds without its answer: seconds, as a positive finite number (once both
    predictions are answered, in a learner's kernel)."""
    _after_the_predictions()
    for label, args in _STEP_CASES.items():
        got = call(fn, *args)
        if not is_number(got):
            fail(f"decode_step_seconds{args} returned {got!r} ({type(got).__name__}); return seconds as a float.")
        if not math.isfinite(float(got)) or float(got) <= 0:
            fail(f"decode_step_seconds, case '{label}': {got!r} is not a time a step can take (positive and finite).")


# The answer is not here: it is judged by digests (grader.checks._keys) made from the instructor's judge. Its guard
# watches nothing; it keeps the record (.passed) that section 1's reveal waits for (_after_the_model).
check_decode_step_seconds = guard(Keyed(
    LESSON, "decode_step_seconds", "decode_step_seconds", list(_STEP_CASES.values()), public=_public_decode_step,
    floats=True,
    unknown="decode_step_seconds is not the time of one step, nor a mistake the course knows: each case is named for "
            "the regime it is in. Go back to sections 1 to 3, and to lesson 01's roofline for the chip."),
    "decode_step_seconds", {}, record=True)


# --- BATCH_PREDICTION -----------------------------------------------------------------------------

_BATCH_KEY = "tokens/s at batch 16 over batch 1"


@course_only()
@sealed(LESSON, "BATCH_PREDICTION")
def _batch_model(context: dict) -> float:
    """The model BATCH_PREDICTION is scored against, fed with this run's measurements (sealed)."""


@course_only()
@sealed(LESSON, "BATCH_PREDICTION")
def _batch_mistake(value: float) -> str | None:
    """The mistake of principle a BATCH_PREDICTION shows, or None (sealed)."""


@course_only()
@sealed(LESSON, "BATCH_PREDICTION")
def _batch_band(first: dict, context: dict) -> tuple[float, str]:
    """BATCH_PREDICTION's band: (fraction, message) for a first guess (sealed)."""


@course_only()
@sealed(LESSON, "BATCH_PREDICTION")
def _batch_said(context: dict) -> str:
    """The model's answer in words, for the deliberate reveal (sealed)."""


check_batch_prediction = Prediction(LESSON, "BATCH_PREDICTION", {_BATCH_KEY: "number"}, points=2, band=_batch_band,
                                    mistakes=lambda answer, context: _batch_mistake(answer[_BATCH_KEY]),
                                    model=_batch_said,
                                    watch=(_batch_mistake, _batch_model, serving.model_knee_batch, serving.time_steps),
                                    needs=_MEASURED_FIRST, waits=_after_the_model)


# --- knee_batch -----------------------------------------------------------------------------------

# Step times (seconds) measured on made-up machines, a few per cent of noise on each point and, on some, one point far
# off the rest (as a real sweep has); where each knee lies is the instructor's to know (solutions/judges/lesson09.py).
_KNEE_CURVES = {
    "a sharp knee": ([1, 2, 4, 8, 16, 32, 64],
                     [0.049852, 0.049493, 0.048554, 0.051466, 0.068001, 0.14162, 0.29221]),
    "a rounded knee": ([1, 2, 4, 8, 16, 32, 64, 128],
                       [0.048324, 0.050227, 0.050544, 0.048751, 0.05399, 0.076186, 0.13512, 0.27206]),
    "a knee at a small batch, odd batches": ([1, 3, 5, 9, 17, 33],
                                             [0.048629, 0.048952, 0.078135, 0.14523, 0.28349, 0.53611]),
    "a first step that paid a warm-up": ([1, 2, 4, 8, 16, 32, 64, 128],
                                         [0.07409, 0.049535, 0.050984, 0.048407, 0.049165, 0.090128, 0.18099, 0.35333]),
    "a quick point in the flat part": ([1, 2, 3, 4, 6, 8, 12, 16, 24, 32],
                                       [0.048351, 0.049067, 0.036141, 0.049125, 0.051238, 0.055769, 0.088364, 0.11775,
                                        0.16532, 0.22636]),
    "a last point at a quiet moment": ([1, 2, 4, 8, 16, 32, 64],
                                       [0.049967, 0.048094, 0.049699, 0.051626, 0.08613, 0.17916, 0.24824]),
    "a knee before the last batch": ([1, 2, 4, 8, 16, 32, 64, 128, 256],
                                     [0.050315, 0.051581, 0.048812, 0.048033, 0.048334, 0.050159, 0.04807, 0.048339,
                                      0.071093]),
    "a knee before the second batch": ([1, 2, 4, 8, 16, 32, 64, 128],
                                       [0.051684, 0.066241, 0.13225, 0.26963, 0.51599, 1.0735, 2.0774, 4.3038]),
}
_KNEE_FAR = {"a first step that paid a warm-up": 0, "a quick point in the flat part": 2,
             "a last point at a quiet moment": 6}  # which point of these curves is far off the rest


def _without_far_point(label: str) -> tuple[list, list]:
    batches, seconds = _KNEE_CURVES[label]
    k = _KNEE_FAR[label]
    return batches[:k] + batches[k + 1:], seconds[:k] + seconds[k + 1:]


# The learner's knee_batch is called on every curve, then on each curve with a far point with that point left out: how
# far one point moves the knee is asked of every answer without any answer held (strict=), and only the first calls
# are keyed.
_KNEE_CASES = [(b, s) for b, s in _KNEE_CURVES.values()] + [_without_far_point(label) for label in _KNEE_FAR]
_KNEE_STEP = math.log(1.15)  # a knee is keyed to its bucket on a log scale, 15 % wide


def _knee_position(value):
    """Where a knee lies on the buckets' scale (a float), or the value itself when it is no positive number."""
    return math.log(float(value)) / _KNEE_STEP if is_number(value) and math.isfinite(float(value)) \
        and float(value) > 0 else value


def _knee_summary(observation) -> list:
    return [round(p) if isinstance(p, float) else p
            for p in map(_knee_position, _keys.outcomes(observation)[:len(_KNEE_CURVES)])]


def _knee_nearby(moved: tuple) -> Callable:
    """A reading of the learner's knees with those in `moved` read in the neighbouring bucket they are nearer to: a fit
    within a bucket of the reference's bucket is as right (two honest fits of the same noisy points differ by a few per
    cent; the reference's own fit may lie near its bucket's edge). One neighbour per knee, not both: 2^8 readings of 8
    curves, where both neighbours made 3^8, each a slow digest (copy test r19 waited 29 s for a wrong answer's line)."""
    def reading(observation) -> list:
        out = []
        for p, move in zip(map(_knee_position, _keys.outcomes(observation)[:len(_KNEE_CURVES)]), moved):
            if not isinstance(p, float):
                out.append(p)
            else:
                out.append(round(p) + ((1 if p > round(p) else -1) if move else 0))
        return out
    return reading


def _public_knee(fn: Replay) -> None:
    """What can be said of knee_batch without its answer: a positive batch, any number (not only a measured batch)."""
    for label, (batches, seconds) in _KNEE_CURVES.items():
        got = call(fn, batches, seconds)
        if not is_number(got) or not math.isfinite(float(got)) or float(got) <= 0:
            fail(f"knee_batch on {label} returned {got!r}; return a batch (a positive number, not necessarily one "
                 "of the batches measured).")


def _knee_steady(fn: Replay) -> None:
    """What the page asks of any fit, said with no answer: leaving out a curve's one far point moves the knee by a
    twelfth at most. It runs for every answer that is not a known mistake (Keyed's strict=): copy test r20 passed with
    fits that one point moved by 8 to 12 %, when this asked only a sixth and ran only for unknown answers."""
    for label in _KNEE_FAR:
        whole, without = call(fn, *_KNEE_CURVES[label]), call(fn, *_without_far_point(label))
        if is_number(without) and float(without) > 0 and _ratio_off(float(whole), float(without)) > 1 + 1 / 12:
            fail(f"knee_batch on {label}: leaving out the one point that is far off the rest moves your knee by more "
                 "than a twelfth. One measurement should not be able to move an asymptote (section 3).")


check_knee_batch = Keyed(
    LESSON, "knee_batch", "knee_batch", _KNEE_CASES, public=_public_knee,
    summary=_knee_summary,
    accept=[_knee_nearby(moved) for moved in itertools.product((False, True), repeat=len(_KNEE_CURVES)) if any(moved)],
    strict=_knee_steady,
    unknown="knee_batch is not where the curve's two asymptotes cross, nor a mistake the course knows (section 3: which "
            "points belong to each asymptote, and how much one bad point may move it).")


# --- kv_cache_bytes -------------------------------------------------------------------------------

_GQA = {"model": "a GQA test shape", "n_layers": 6, "d_model": 512, "n_heads": 8, "n_kv_heads": 2}
_MHA = {"model": "an MHA test shape", "n_layers": 3, "d_model": 96, "n_heads": 3, "n_kv_heads": 3}
_SWA = {"model": "a test shape with some sliding-window layers", "n_layers": 8, "d_model": 256, "n_heads": 8,
        "n_kv_heads": 4, "window": 64, "window_layers": 6}
_ALL_SWA = {"model": "a test shape windowed in every layer", "n_layers": 4, "d_model": 128, "n_heads": 4,
            "n_kv_heads": 2, "window": 32, "window_layers": 4}
# (shape, context, batch, bytes_per_value[, shared]): the first four without a shared prefix (the default, 0), then the
# same tokens at the start of every sequence, with full layers, with window layers that still see part of them, with
# window layers that no longer do, and a batch of one (where sharing keeps nothing less).
_KV_CASES = [(_GQA, 100, 3, 2), (_MHA, 7, 2, 4), (_GQA, 1, 1, 1),
             (_SWA, 1000, 2, 2), (_SWA, 40, 3, 2), (_ALL_SWA, 100, 1, 1),
             (_GQA, 100, 4, 2, 60), (_SWA, 120, 3, 2, 100), (_SWA, 1000, 2, 2, 100), (_ALL_SWA, 30, 5, 1, 25),
             (_MHA, 7, 1, 4, 5)]


# The answers of kv_cache_bytes and max_batch_to_serve are not here: each is judged by digests (grader.checks._keys),
# made by scripts/build_keys.py from the instructor's judges (solutions/judges/lesson09.py, never released).


def _kv_shown(args: tuple) -> str:
    shape, context, batch, width = args[:4]
    shared = f", shared={args[4]}" if len(args) > 4 else ""
    return f"kv_cache_bytes({shape['model']}, context={context}, batch={batch}, bytes_per_value={width}{shared})"


def _public_kv_cache_bytes(fn: Replay) -> None:
    """What can be said of kv_cache_bytes without its answer: a whole number of bytes."""
    for args in _KV_CASES:
        got = call(fn, *args)
        if not isinstance(got, int) or isinstance(got, bool):
            fail(f"{_kv_shown(args)} returned {got!r} ({type(got).__name__}); return a whole number of bytes (an int).")


def _memory_models() -> dict:
    from grader import memory

    from grader import shortcuts

    return {memory.kv_cache_bytes: "grader.memory.kv_cache_bytes", memory.inference_bytes: "grader.memory.inference_bytes",
            **shortcuts.ELSEWHERE}  # a thread or process of its own, where the check's watch does not follow


# grader.memory keeps lesson 04's model of a KV cache (its inference_bytes cell), for models whose every layer attends
# to the whole context: a kv_cache_bytes that calls it is noticed (a copy test passed with `memory.kv_cache_bytes` and
# the arguments reordered), and since sliding-window layers are in the cases, its source copied no longer passes. A cell
# that called either before the check passed is noticed too (earlier=): copy test r13 recorded the check's arguments,
# answered them with memory.kv_cache_bytes in a cell of its own, and returned the stored results.
check_kv_cache_bytes = guard(Keyed(
    "09_serving", "kv_cache_bytes", "kv_cache_bytes", _KV_CASES, public=_public_kv_cache_bytes,
    unknown="kv_cache_bytes is not the bytes of the cache, nor a mistake the course knows (section 4: what will "
            "attention still use, and how many copies of it does the batch need?)."),
    "kv_cache_bytes", _memory_models(), earlier=("grader.memory.kv_cache_bytes", "grader.memory.inference_bytes"))


# --- max_batch_to_serve ------------------------------------------------------------------------------

_SERVE_SHAPE = {"model": "a 2.1B test shape", "n_params": 2_113_929_216, "n_layers": 16, "d_model": 2048,
                "n_heads": 16, "n_kv_heads": 4, "vocab_size": 32768, "tied_embeddings": "false"}
_GB = 1e9


def _serve_cases() -> list[tuple]:
    llama = next(m for m in specs.load_models() if m["model"] == "Llama 2 70B")
    llama = {k: llama[k] for k in ("model", "n_params", "n_layers", "d_model", "n_heads", "n_kv_heads", "vocab_size",
                                   "tied_embeddings")}
    return [(16 * _GB, 1, _SERVE_SHAPE, 4096, "bf16", 1 * _GB, 128, 2),
            (16 * _GB, 2, _SERVE_SHAPE, 4096, "bf16", 1 * _GB, 128, 2),
            (8 * _GB, 1, _SERVE_SHAPE, 2048, "int8", 0.5 * _GB, 128, 2),
            (4 * _GB, 1, _SERVE_SHAPE, 1024, "int4", 0.5 * _GB, 64, 2),
            (80 * _GB, 2, llama, 4096, "bf16", 4 * _GB, 128, 2),
            (80 * _GB, 1, llama, 4096, "int4", 4 * _GB, 128, 2),
            (1 * _GB, 1, _SERVE_SHAPE, 4096, "bf16", 0.5 * _GB, 128, 2),
            (16 * _GB, 8, _SERVE_SHAPE, 4096, "bf16", 1 * _GB, 128, 2),  # more cards than KV heads
            (80 * _GB, 16, llama, 8192, "int8", 4 * _GB, 128, 2)]


def _public_max_batch_to_serve(fn: Replay) -> None:
    """What can be said of max_batch_to_serve without its answer: a whole, non-negative number of sequences."""
    for args in _serve_cases():
        card, cards, shape, context, weights, reserve, group, scale = args
        got = call(fn, *args)
        shown = (f"max_batch_to_serve({card / _GB:g} GB x {cards}, {shape['model']}, context {context}, {weights}, "
                 f"reserve {reserve / _GB:g} GB, group {group})")
        if not isinstance(got, int) or isinstance(got, bool):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return a whole number of sequences (an int).")
        if got < 0:
            fail(f"{shown} returned a negative batch; when the weights alone do not fit, no sequence does: 0.")


check_max_batch_to_serve = Keyed(
    "09_serving", "max_batch_to_serve", "max_batch_to_serve", _serve_cases, public=_public_max_batch_to_serve,
    unknown="max_batch_to_serve is not the number of sequences that fit, nor a mistake the course knows (section 5, "
            "card by card).")


# --- quantize_int8 --------------------------------------------------------------------------------

def _weight_with_outlier() -> torch.Tensor:
    """The check's (8, 16) weight: some weights 40x the rest, and some all zero."""
    g = torch.Generator().manual_seed(9)
    w = torch.randn(8, 16, generator=g)
    w[3] *= 40
    w[5] = 0
    return w


def _observe_quantize(fn) -> dict:
    require_callable(fn, "quantize_int8")
    w = _weight_with_outlier()
    got = call(fn, w.clone(), label="quantize_int8(an (8, 16) weight with outliers and a row of zeros)")
    return {"got": got}


@sealed(LESSON)
def _judge_quantize(observation: dict) -> None:
    """quantize_int8, judged by what any right answer does (section 6), with no answer held here. Which layout of
    scales it accepts is what the exercise asks you to work out, so sealed (grader.checks._sealed)."""


# torch's own quantizers answer the exercise (a copy test passed with one of torch's observers and its quantize
# function): every observer computes its scales in _calculate_qparams, and the quantize functions are C functions the
# profiler reports by identity, through torch.ops.aten as well. Every layout torch has is listed, so that the list says
# nothing of which one is right.
_TORCH_QUANTIZERS = {
    torch.ao.quantization.observer.UniformQuantizationObserverBase._calculate_qparams:
        "torch.ao.quantization's observers (their _calculate_qparams)",
    torch.ao.quantization.quantize_dynamic: "torch.ao.quantization.quantize_dynamic",
}
for _name in ("quantize_per_channel", "quantize_per_tensor", "fake_quantize_per_channel_affine",
              "fake_quantize_per_tensor_affine", "fused_moving_avg_obs_fake_quant"):
    _TORCH_QUANTIZERS[getattr(torch, _name)] = f"torch.{_name}"
    _TORCH_QUANTIZERS.update(shortcuts.aten_targets(_name, f"torch.ops.aten.{_name}"))
# ... and the helpers a copy test found beside them: torch.ao's qparams helper, and the quantized_decomposed ops,
# registered once torch.ao.quantization.fx._decomposed is imported (as here).
import torch.ao.quantization.fx._decomposed  # noqa: E402,F401  registers torch.ops.quantized_decomposed
import torch.ao.quantization.utils  # noqa: E402

_TORCH_QUANTIZERS[torch.ao.quantization.utils.determine_qparams] = "torch.ao.quantization.utils.determine_qparams"
_TORCH_QUANTIZERS.update(shortcuts.aten_targets("_fused_moving_avg_obs_fq_helper",
                                                "torch.ops.aten._fused_moving_avg_obs_fq_helper"))
# ... and the Python functions behind those ops, callable directly (a copy test passed with choose_qparams_per_token)
for _name, _fn in vars(torch.ao.quantization.fx._decomposed).items():
    if (callable(_fn) and getattr(_fn, "__module__", "") == torch.ao.quantization.fx._decomposed.__name__
            and _name.lstrip("_").startswith(("quantize", "choose_qparams", "fake_quant"))):
        _TORCH_QUANTIZERS[_fn] = f"torch.ao.quantization.fx._decomposed.{_name}"
for _name in ("quantize_per_channel", "quantize_per_tensor", "quantize_per_channel_group", "quantize_per_token",
              "choose_qparams", "choose_qparams_symmetric", "choose_qparams_per_token",
              "choose_qparams_per_token_asymmetric", "fake_quant_per_channel"):
    _TORCH_QUANTIZERS.update(shortcuts.aten_targets(_name, f"torch.ops.quantized_decomposed.{_name}",
                                                    "quantized_decomposed"))

# ... and an observer's forward alone: copy test r16 ran one of torch's observers over the weight and took its
# min_val / max_val, never asking _calculate_qparams
for _cls in vars(torch.ao.quantization.observer).values():
    if (isinstance(_cls, type) and issubclass(_cls, torch.ao.quantization.observer.ObserverBase)
            and "forward" in vars(_cls)):
        _TORCH_QUANTIZERS[_cls.forward] = "torch.ao.quantization's observers (their forward)"

check_quantize_int8 = guard(Check("quantize_int8", _observe_quantize, _judge_quantize), "quantize_int8",
                            _TORCH_QUANTIZERS)
