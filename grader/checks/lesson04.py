"""Checks for lesson 04 (memory): bytes per parameter predicted before and after step(), state bytes, the
training-memory model, a prediction of saved bytes, activations, the largest batch from measured peaks.

Each check is two halves (grader.checks._common.Check): observe builds the check's own models
and optimizers, calls the learner's function on them and returns plain numbers; judge measures
the same models with the course's instruments (grader.memory) in its own process and names the
mistake. The models' sizes do not depend on their random values, so both sides agree exactly.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import nn

from grader import memory, shortcuts
from grader.checks._common import (Check, Prediction, Replay, answered_by, call, fail, guard, is_number,
                                   require_callable, same)
from grader.checks._keys import Keyed
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson04.expect
from grader.notebook import CheckFailed, NotDone
from grader.checks._sealed import sealed
from grader.shortcuts import course_only

LESSON = "04_memory"  # the lesson's name in the predictions record (grader.predictions)

_KINDS = ("parameters", "gradients", "optimizer")


def _stepped_model(optimizer: str = "adam", step: bool = True) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small float32 MLP after one backward and (optionally) one optimizer step: a BatchNorm (buffers that are not
    parameters), a weight two layers share (one tensor, one storage), and a frozen last layer."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.GELU(), nn.Linear(32, 16), nn.GELU(),
                              nn.Linear(16, 32), nn.Linear(32, 4))
        model[5].weight = model[0].weight  # tied: the same parameter in two layers
        for p in model[6].parameters():
            p.requires_grad_(False)  # frozen: no gradient, no optimizer state
        opt = memory.make_optimizer([p for p in model.parameters() if p.requires_grad], optimizer)
        model(torch.randn(5, 16)).pow(2).mean().backward()
    if step:
        opt.step()
    return model, opt


# --- predict, then measure: bytes per parameter before and after AdamW's first step ------------------

def _half_frozen_mlp(d_in: int = 64, d_hidden: int = 256) -> nn.Module:
    """BYTES_PER_PARAM's model: two bias-free float32 Linears of the same size around a GELU, the first one frozen."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(d_in, d_hidden, bias=False), nn.GELU(), nn.Linear(d_hidden, d_in, bias=False))
    model[0].weight.requires_grad_(False)
    return model


@course_only()
@sealed(LESSON, "BYTES_PER_PARAM")
def _measured_bytes_per_param() -> dict[str, float]:
    """Part of BYTES_PER_PARAM's model or its feedback: sealed (grader.checks._sealed)."""




@course_only()
@sealed(LESSON, "BYTES_PER_PARAM")
def _bytes_per_param_mistakes(answer: dict) -> list[str]:
    """Part of BYTES_PER_PARAM's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "BYTES_PER_PARAM")
def _bytes_per_param_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of BYTES_PER_PARAM's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "BYTES_PER_PARAM")
def _bytes_per_param_said(context: dict) -> str:
    """Part of BYTES_PER_PARAM's model or its feedback: sealed (grader.checks._sealed)."""


check_bytes_per_param = Prediction(LESSON, "BYTES_PER_PARAM", {"before step()": "number", "after step()": "number"},
                                   points=1, band=_bytes_per_param_band, model=_bytes_per_param_said,
                                   mistakes=lambda answer, context: "; ".join(_bytes_per_param_mistakes(answer)) or None,
                                   # the model, and the course's measurement of the layouts it is made of
                                   watch=(_bytes_per_param_mistakes, _measured_bytes_per_param,
                                          memory.probe_bytes_per_parameter, memory.training_terms))



def demo_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model the notebook's first try is run on: an MLP with a BatchNorm, a shared weight and a frozen layer,
    after one AdamW step (the same kind of model the check of state_bytes uses)."""
    return _stepped_model("adam", True)


_STATE_CASES = {  # name: (optimizer, step, what the learner is told on a crash)
    "adam": ("adam", True, "state_bytes(model, optimizer)"),
    "fresh": ("adam", False, "state_bytes on an optimizer that has not stepped"),
    "sgd": ("sgd", True, "state_bytes(model, SGD without momentum)"),
}


# Its answer is not here: it is judged by digests (grader.checks._keys), made by scripts/build_keys.py from the
# instructor's judges (solutions/judges/lesson04.py, never released).

def _observe_state_bytes(state_bytes: Callable) -> dict:
    """Each case's answer, and the bytes of AdamW's step counters in that case's optimizer.state (they may count or not)."""
    require_callable(state_bytes, "state_bytes")
    seen, counters = {}, {}
    for case, (optimizer, step, label) in _STATE_CASES.items():
        model, opt = _stepped_model(optimizer, step)
        seen[case] = call(state_bytes, model, opt, label=label)
        counters[case] = sum(s["step"].numel() * s["step"].element_size() for s in opt.state.values()
                             if torch.is_tensor(s.get("step")))
    return {**seen, "counters": counters}


def _state_summary(observation: dict, with_counters: bool = False) -> dict:
    """The answers alone; with_counters adds each case's step counters to an answer that left them out."""
    answers = {case: observation.get(case) for case in _STATE_CASES} if isinstance(observation, dict) else observation
    if with_counters and isinstance(observation, dict) and isinstance(observation.get("counters"), dict):
        for case, answer in answers.items():
            extra = observation["counters"].get(case)
            if isinstance(answer, dict) and is_number(answer.get("optimizer")) and isinstance(extra, int):
                answers[case] = {**answer, "optimizer": answer["optimizer"] + extra}
    return answers


def _public_state_bytes(observation: dict) -> None:
    """What can be said of state_bytes without its answer: a dict of the three kinds, plain ints."""
    if not isinstance(observation, dict) or not set(_STATE_CASES) <= set(observation):
        fail("the check could not read what state_bytes returned (not one answer per model)")
    got = observation["adam"]
    if not isinstance(got, dict) or set(got) != set(_KINDS):
        fail(f"state_bytes returned {got!r}; return a dict with exactly the keys {list(_KINDS)}.")
    for kind in _KINDS:
        if not is_number(got[kind]):
            fail(f"state_bytes(...)[{kind!r}] is {got[kind]!r} ({type(got[kind]).__name__}); return a plain int of bytes.")


def _hints_state_bytes(observation: dict) -> None:
    fresh = observation.get("fresh")
    if not isinstance(fresh, dict) or fresh.get("optimizer") != 0:
        fail("state_bytes reported optimizer state for an AdamW that has not taken a step yet: what does it hold "
             "then?")


check_state_bytes = guard(
    Keyed(
        "04_memory", "state_bytes", observe=_observe_state_bytes, summary=_state_summary, public=_public_state_bytes,
        hints=_hints_state_bytes, accept=[lambda observation: _state_summary(observation, with_counters=True)],
        unknown="state_bytes is not what this model's tensors hold, nor a mistake the course knows: go back to "
                "what the first try counted that is not in memory, or not once."),
    "state_bytes", {memory.storage_nbytes: "grader.memory.storage_nbytes",
                    memory.probe_bytes_per_parameter: "grader.memory.probe_bytes_per_parameter"})


def _observe_state_bytes_on(state_bytes: Callable, widths: list, optimizer: str = "adam", step: bool = True) -> dict:
    require_callable(state_bytes, "state_bytes")
    model = memory.relu_mlp(widths)
    opt = memory.make_optimizer(model.parameters(), optimizer)
    model(torch.randn(3, widths[0])).sum().backward()
    if step:
        opt.step()
    return {"got": call(state_bytes, model, opt, label=f"state_bytes(an MLP {widths}, {optimizer})")}


def _judge_state_bytes_on(observation: dict, widths: list, want: dict, why: str, optimizer: str = "adam",
                          step: bool = True) -> None:
    got = observation.get("got") if isinstance(observation, dict) else None
    counters = 4 * 2 * (len(widths) - 1) if optimizer == "adam" and step else 0  # AdamW's step: a float32 per tensor
    without = {**want, "optimizer": want["optimizer"] - counters}
    if not (same(got, want) or same(got, without)):
        fail(f"{why} (state_bytes returned {got!r})")


state_bytes_on = Check("state_bytes on a given model", _observe_state_bytes_on, _judge_state_bytes_on,
                       inputs=("widths", "optimizer", "step"), announce=False)
state_bytes_on.__doc__ = "Hidden test: state_bytes of memory.relu_mlp(widths) after one backward (and step) is `want`."


_TRAINING_CASES = [(p, o) for p in memory.PRECISIONS for o in reversed(memory.OPTIMIZERS)]  # adam first: least ambiguous
# 8-bit Adam (bitsandbytes' layout, described on the page; not a torch optimizer, so nothing here measures it): one
# parameter tensor of n values; a block-aligned size, a size whose last block is partly filled, a tensor too small
_8BIT_CASES = [(1_000_000, p, "adam8bit") for p in memory.PRECISIONS] + [(2**20, "fp32", "adam8bit"),
                                                                        (1000, "fp32", "adam8bit")]


# Its answer is not here: it is judged by digests (grader.checks._keys), made by scripts/build_keys.py from the
# instructor's judges (solutions/judges/lesson04.py, never released).

def _public_training_bytes(training_bytes: Replay) -> None:
    for precision, optimizer in _TRAINING_CASES:
        got = call(training_bytes, 1_000_000, precision, optimizer)
        if not is_number(got):
            fail(f"training_bytes(1000000, {precision!r}, {optimizer!r}) returned {got!r}; return an int number of bytes.")
    small = call(training_bytes, 3, "fp32", "adam")
    if not is_number(small) or isinstance(small, float):
        fail(f"training_bytes(3, 'fp32', 'adam') returned {small!r}; return a whole number of bytes (an int).")


def _hints_training_bytes(training_bytes: Replay) -> None:
    if len({call(training_bytes, 1_000_000, p, o) for p, o in _TRAINING_CASES if p == "fp32"}) == 1:
        fail("training_bytes gives the same bytes whatever the optimizer: training holds the optimizer's state too, "
             "and how much depends on the optimizer.")
    eight, full = (call(training_bytes, 1_000_000, "fp32", o) for o in ("adam8bit", "adam"))
    if is_number(eight) and is_number(full) and eight >= full:
        fail("training_bytes(1000000, 'fp32', 'adam8bit') is not less than with 'adam': on a tensor that large, what "
             "do 8-bit moments save?")


check_training_bytes = guard(
    Keyed("04_memory", "training_bytes", "training_bytes",
          [(1_000_000, p, o) for p, o in _TRAINING_CASES] + [(3, "fp32", "adam")] + _8BIT_CASES,
          public=_public_training_bytes, hints=_hints_training_bytes,
          unknown="training_bytes is not what a layer trained this way holds, nor a mistake the course knows "
                  "(section 2: which copies exist, for what, and how wide; and what 8-bit Adam keeps for a moment)."),
    "training_bytes", {memory.training_terms: "grader.memory.training_terms",
                       memory.probe_bytes_per_parameter: "grader.memory.probe_bytes_per_parameter",
                       memory._probe: "grader.memory._probe",
                       **shortcuts.ELSEWHERE},  # copy test r33: the course's probe run in a process of its own
    earlier=("grader.memory.probe_bytes_per_parameter", "grader.memory.training_terms", "grader.memory._probe"))


# --- predict, then measure: what a Linear/ReLU stack saves ---------------------------------------

_PREDICT_CASES = [(10, [32, 64, 16], "relu"), (4, [10, 20, 30, 5], "tanh"), (1, [7, 5], "relu"), (3, [8, 8, 8, 8], "gelu"),
                  (2, [6, 9, 4], "sigmoid"), (5, [4, 12, 12, 3], "gelu"),
                  # far too big to run (terabytes of activations): a prediction, not a measurement (a copy test
                  # measured a hand-built stack with a copied recorder)
                  (10**9, [4096, 8192, 8192, 4096], "gelu"), (10**9, [4096, 16384, 4096], "tanh")]

# Its answer is not here: it is judged by digests (grader.checks._keys), made by scripts/build_keys.py from the
# instructor's judges (solutions/judges/lesson04.py, never released).

def _public_predict_saved_bytes(predict_saved_bytes: Replay) -> None:
    for batch, widths, activation in _PREDICT_CASES:
        got = call(predict_saved_bytes, batch, widths, activation)
        if not is_number(got) or isinstance(got, float):
            fail(f"predict_saved_bytes({batch}, {widths}, {activation!r}) returned {got!r} ({type(got).__name__}); "
                 "return an int number of bytes.")


check_predict_saved_bytes = guard(
    Keyed("04_memory", "predict_saved_bytes", "predict_saved_bytes", _PREDICT_CASES,
          public=_public_predict_saved_bytes,
          unknown="predict_saved_bytes is not what autograd keeps for backward on those float32 stacks, nor a mistake "
                  "the course knows (section 3)."),
    "predict_saved_bytes", {memory.saved_bytes: "grader.memory.saved_bytes", memory.SavedTensors: "grader.memory.SavedTensors",
                            memory.mlp: "grader.memory.mlp (to measure it)",
                            # copy test r6: a recorder of torch's at batch 1, times the batch, passed every case
                            torch.autograd.graph.saved_tensors_hooks:
                                "torch.autograd.graph.saved_tensors_hooks (to record what backward keeps, instead of "
                                "predicting it)",
                            **shortcuts.ELSEWHERE},  # copy test r33: memory.saved_bytes in a subprocess, times the batch
    # the measuring cell after the check waits for it to pass (copy test r22: with the stub replaced by `return 0`,
    # that cell printed every measurement the cases are made of), and a recording in a cell of its own before the check
    # counts (r22 again: memory.saved_bytes(memory.mlp(widths, act), x) in a scratch cell)
    earlier=("grader.memory.saved_bytes", "grader.memory.SavedTensors"))


# --- activations: write the recorder ------------------------------------------------------------


class _Squares(nn.Module):
    """A model that saves one tensor twice (x * x) and two views of one storage (a split)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 24)

    def forward(self, x):
        h = self.fc(x)  # (batch, 24)
        a, b = h.split(12, dim=-1)  # two views of h's storage
        return (a * b).sum(-1) + (x * x).sum(-1)


class _Slice(nn.Module):
    """A model whose only save of a Linear's output is a view of part of it (the whole storage stays alive)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 24)

    def forward(self, x):
        return self.fc(x)[:, :6].pow(2).sum(-1)  # pow saves the (batch, 6) view of the (batch, 24) output


def _batchnorm() -> nn.Module:
    """Linear, BatchNorm (training mode), ReLU, Linear."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))


def _slice() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return _Slice()


def _mlp() -> nn.Module:
    return memory.relu_mlp([32, 64, 16])


def _squares() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return _Squares()


_ACTIVATION_CASES = {  # name: (model maker, batch shape, what the learner is told on a crash)
    "mlp10": (_mlp, (10, 32), "activation_bytes(mlp, batch of 10)"),
    "squares": (_squares, (6, 12), "activation_bytes on a model that saves one tensor twice"),
    "mlp20": (_mlp, (20, 32), "activation_bytes(mlp, batch of 20)"),
    "slice": (_slice, (5, 12), "activation_bytes on a model that saves a slice of a tensor"),
    "batchnorm": (_batchnorm, (6, 12), "activation_bytes on a Linear, BatchNorm1d, ReLU, Linear model in training mode"),
}


def _observe_activation_bytes(activation_bytes: Callable) -> dict:
    require_callable(activation_bytes, "activation_bytes")
    seen = {}
    for case, (make, shape, label) in _ACTIVATION_CASES.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seen[case] = call(activation_bytes, make(), torch.randn(*shape), label=label)
    return seen


# Its answer is not here: it is judged by digests (grader.checks._keys), made by scripts/build_keys.py from the
# instructor's judges (solutions/judges/lesson04.py, never released).

def _public_activation_bytes(observation: dict) -> None:
    if not isinstance(observation, dict) or set(observation) != set(_ACTIVATION_CASES):
        fail("the check could not read what activation_bytes returned (not one answer per model)")
    got = observation["mlp10"]
    if not is_number(got):
        fail(f"activation_bytes returned {got!r}; return an int number of bytes.")
    if got == 0:
        fail("activation_bytes returned 0: nothing was recorded. Were the hooks active, with gradients enabled, "
             "while model(batch) ran?")


def _hints_activation_bytes(observation: dict) -> None:
    small, big = observation["mlp10"], observation["mlp20"]
    if not is_number(big) or big != 2 * small:
        fail("activation_bytes does not grow in step with the batch, as activations do: does each call start "
             "from nothing?")


check_activation_bytes = guard(
    Keyed("04_memory", "activation_bytes", observe=_observe_activation_bytes, summary=lambda observation: observation,
          public=_public_activation_bytes, hints=_hints_activation_bytes,
          unknown="activation_bytes is not the activation memory these models keep for backward, nor a mistake "
                  "the course knows: go back to what the first try counted that is not activation memory, or not "
                  "once."),
    "activation_bytes", {memory.saved_bytes: "grader.memory.saved_bytes",
                         memory.SavedTensors: "grader.memory.SavedTensors"})


def norm_mlp(widths: list) -> nn.Module:
    """memory.relu_mlp(widths) with a BatchNorm1d (training mode) after each hidden Linear."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers += [nn.BatchNorm1d(b), nn.ReLU()]
    return nn.Sequential(*layers)


def _observe_activation_on(activation_bytes: Callable, widths: list, batch: int, norm: bool = False) -> dict:
    require_callable(activation_bytes, "activation_bytes")
    model = norm_mlp(widths) if norm else memory.relu_mlp(widths)
    return {"got": call(activation_bytes, model, torch.randn(batch, widths[0]),
                        label=f"activation_bytes(an MLP {widths}{' with BatchNorm' if norm else ''}, a batch of {batch})")}


def _judge_activation_on(observation: dict, widths: list, batch: int, want: int, why: str, norm: bool = False) -> None:
    got = observation.get("got") if isinstance(observation, dict) else None
    if not same(got, want):
        fail(f"{why} (activation_bytes returned {got!r})")


activation_on = Check("activation_bytes on a given MLP", _observe_activation_on, _judge_activation_on,
                      inputs=("widths", "batch", "norm"), announce=False)
activation_on.__doc__ = ("Hidden test: activation_bytes(memory.relu_mlp(widths), a float32 batch) is `want` (norm=True: "
                         "norm_mlp, a BatchNorm1d after each hidden Linear).")


# --- will it fit -------------------------------------------------------------------------------


# (memory, the peaks a step measured at two or more batch sizes): made-up steps whose small batches peak at a moment
# the batch does not set; batches in and out of order; memories that fill exactly, leave a fraction of a sample, or
# hold less than the part that does not grow. The peaks are written out: the line that made them is the exercise.
_MAX_BATCH_CASES = [
    (200, {1: 60, 4: 72, 8: 104}),
    (175, {1: 70, 2: 70, 6: 90, 10: 130}),
    (10_000, {128: 4200, 64: 2600, 32: 2000, 16: 2000, 8: 2000}),
    (65, {1: 70, 2: 70, 5: 80, 9: 120}),
    (100, {2: 44, 4: 58}),
    (100, {6: 72, 2: 44}),
    (100, {1: 38, 3: 54}),
    (100, {1: 60, 2: 80}),
    (100, {1: 127, 2: 134}),
    (100, {1: 102, 2: 109}),
]


# Its answer is not here: it is judged by digests (grader.checks._keys), made by scripts/build_keys.py from the
# instructor's judges (solutions/judges/lesson04.py, never released).

def _public_max_batch(max_batch: Replay) -> None:
    for memory_bytes, peaks in _MAX_BATCH_CASES:
        try:
            got = call(max_batch, memory_bytes, peaks)
        except CheckFailed:  # a crash on one case may be a mistake the keys know (its message says which); else hints
            continue
        if not is_number(got) or isinstance(got, float):
            fail(f"max_batch({memory_bytes}, {peaks}) returned {got!r} ({type(got).__name__}); return an int number "
                 "of samples.")


def _hints_max_batch(max_batch: Replay) -> None:
    for memory_bytes, peaks in _MAX_BATCH_CASES:
        got = call(max_batch, memory_bytes, peaks)  # an answer the keys do not know that crashed: say where
        if got < 0:
            fail(f"max_batch({memory_bytes}, {peaks}) returned a negative batch: when the fixed bytes alone leave no "
                 "room for a sample, no batch fits. Return 0, never a negative batch.")


check_max_batch = Keyed(
    "04_memory", "max_batch", "max_batch", _MAX_BATCH_CASES, public=_public_max_batch, hints=_hints_max_batch,
    unknown="max_batch is not the largest batch that fits, nor a mistake the course knows (section 5: what in a "
            "step's peak grows with the batch, what does not, and which moment of the step is its peak?).")

# state_bytes, once it passes, measures BYTES_PER_PARAM's answer on the MLP: passing it first counts as asking for it.
answered_by(check_bytes_per_param, check_state_bytes)
