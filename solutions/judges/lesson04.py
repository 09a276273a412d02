"""The instructor's judges of lesson 04's keyed checks: they hold the answers, so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson04.py) and keeps
only digests and messages in grader/checks/keys/04_memory.json; the learner's check (grader/checks/lesson04.py)
judges by those. A message here names the kind of mistake and the principle, never the expected value nor the
formula: it is what a learner who made that mistake reads. The cases (the models, the batches) stay in the package:
they are inputs, not answers.
"""

from __future__ import annotations

import torch

from grader import memory
from grader.checks._common import call, fail, is_number
from grader.checks.lesson04 import (_8BIT_CASES, _ACTIVATION_CASES, _KINDS, _MAX_BATCH_CASES, _PREDICT_CASES,
                                    _STATE_CASES, _TRAINING_CASES, _stepped_model)


# --- state_bytes ----------------------------------------------------------------------------------
# The course's reading of a model's and an optimizer's tensors: state_bytes' answer, so it lives here, not in the
# learner's grader.memory (a copy test exec'd its source there and passed).


def state_table(model, optimizer=None) -> list[dict]:
    """One row per tensor: kind ("parameters", "gradients", "optimizer"), name, shape, dtype, nbytes."""
    rows = []
    names = {id(p): n for n, p in model.named_parameters()}
    for p in model.parameters():
        name = names.get(id(p), "?")
        rows.append({"kind": "parameters", "name": name, "shape": tuple(p.shape), "dtype": str(p.dtype),
                     "nbytes": p.numel() * p.element_size()})
        if p.grad is not None:
            rows.append({"kind": "gradients", "name": name, "shape": tuple(p.grad.shape),
                         "dtype": str(p.grad.dtype), "nbytes": p.grad.numel() * p.grad.element_size()})
    if optimizer is not None:
        for p, state in optimizer.state.items():
            for key, value in state.items():
                if torch.is_tensor(value):
                    rows.append({"kind": "optimizer", "name": f"{names.get(id(p), '?')}.{key}",
                                 "shape": tuple(value.shape), "dtype": str(value.dtype),
                                 "nbytes": value.numel() * value.element_size()})
    return rows


def totals(rows: list[dict]) -> dict[str, int]:
    """Bytes per kind from `state_table` rows."""
    out = {"parameters": 0, "gradients": 0, "optimizer": 0}
    for row in rows:
        out[row["kind"]] += row["nbytes"]
    return out


def _reference_state(case: str) -> tuple[dict, int, int, int]:
    """(bytes per kind, bytes of AdamW's step counters, trained numbers, tensors in optimizer.state): course code."""
    optimizer, step, _ = _STATE_CASES[case]
    model, opt = _stepped_model(optimizer, step)
    rows = state_table(model, opt)
    steps = sum(r["nbytes"] for r in rows if r["name"].endswith(".step"))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return totals(rows), steps, trained, len(opt.state)


def _state_bytes(observation: dict) -> None:
    """state_bytes(model, optimizer): bytes of parameters, gradients and optimizer state, from the tensors."""
    if not isinstance(observation, dict) or not set(_STATE_CASES) <= set(observation):
        fail("the check could not read what state_bytes returned (not one answer per model)")
    got = observation["adam"]
    want, steps, trained, n_state = _reference_state("adam")
    if not isinstance(got, dict) or set(got) != set(_KINDS):
        fail(f"state_bytes returned {got!r}; return a dict with exactly the keys {list(_KINDS)}.")
    for kind in _KINDS:
        if not is_number(got[kind]):
            fail(f"state_bytes(...)[{kind!r}] is {got[kind]!r} ({type(got[kind]).__name__}); return a plain int of bytes.")
    n_all = want["parameters"] // 4
    if got["parameters"] == n_all or got["gradients"] == trained:
        fail("state_bytes counts numbers, not bytes. How many bytes does each number of a tensor take, and where "
             "does the tensor say so?")
    model, _ = _stepped_model("adam", True)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    tied = model[0].weight.numel() * model[0].weight.element_size()
    if got["parameters"] in (want["parameters"] + buffers, want["parameters"] + buffers + tied):
        fail("state_bytes counts the model's buffers too, among the parameters (BatchNorm's running statistics, which the "
             "model also saves). They are in memory, but they are not parameters: nothing trains them, they have no "
             "gradient and no optimizer state.")
    if got["parameters"] == want["parameters"] + tied:
        fail("state_bytes counts one tensor twice. Two layers of this model share one weight (layer 5's weight is "
             "layer 0's): memory holds it once.")
    if got["parameters"] != want["parameters"]:
        fail("state_bytes's parameter bytes are not what the model's parameter tensors hold: read every parameter "
             "tensor's own size and element width.")
    if got["gradients"] == want["parameters"] and want["gradients"] != want["parameters"]:
        fail("state_bytes counted a gradient for every parameter, but this model has a frozen layer whose .grad is "
             "None.")
    if got["gradients"] != want["gradients"]:
        fail("state_bytes's gradient bytes are not what the .grad tensors hold.")
    if got["optimizer"] == 0:
        fail("state_bytes found 0 bytes of optimizer state after AdamW took a step: where does an optimizer keep "
             "what it remembers between steps?")
    if got["optimizer"] in (want["optimizer"] // 2, (want["optimizer"] - steps) // 2):
        fail("state_bytes counted only one of AdamW's two moments; exp_avg and exp_avg_sq are each as big as the "
             "parameters they follow.")
    if got["optimizer"] in (2 * trained, 2 * trained + steps // 4, 2 * trained + n_state):
        fail("state_bytes counted the optimizer state's numbers, not its bytes.")
    if got["optimizer"] == 2 * want["parameters"]:
        fail("state_bytes counts AdamW's two moments for every parameter of the model: here one layer is frozen, "
             "and the optimizer was never given it.")
    if got["optimizer"] not in (want["optimizer"], want["optimizer"] - steps):
        fail("state_bytes's optimizer bytes are not what AdamW's tensors in optimizer.state hold (its step counters "
             "may count or not); read every tensor the optimizer keeps.")
    fresh = observation["fresh"]
    if not isinstance(fresh, dict) or fresh.get("optimizer") != 0:
        fail("state_bytes reported optimizer state for an AdamW that has not taken a step yet: what does it hold "
             "then?")
    sgd = observation["sgd"]
    if not isinstance(sgd, dict) or sgd.get("optimizer") != _reference_state("sgd")[0]["optimizer"]:
        fail("state_bytes reported state for plain SGD: what does plain SGD keep between steps?")


# --- training_bytes -------------------------------------------------------------------------------

def _per_param(fn, n: int, precision: str, optimizer: str) -> float:
    got = call(fn, n, precision, optimizer, label=f"training_bytes({n}, {precision!r}, {optimizer!r})")
    if not is_number(got):
        fail(f"training_bytes({n}, {precision!r}, {optimizer!r}) returned {got!r}; return an int number of bytes.")
    return got / n


def _training_bytes(training_bytes) -> None:
    """training_bytes(n, precision, optimizer) agrees with bytes per parameter measured on a real layer."""
    n = 1_000_000
    cases = _TRAINING_CASES
    terms = {case: memory.training_terms(*case) for case in cases}
    got_all = {case: _per_param(training_bytes, n, *case) for case in cases}
    if all(got_all[c] == terms[c]["parameters"] for c in cases):
        fail("training_bytes gives the same bytes per parameter whatever the optimizer: the weights alone, which is "
             "what inference needs. Training also holds gradients and the optimizer's state.")
    moments = {"sgd": 0, "momentum": 1, "adam": 2}

    def everywhere(rule) -> bool:
        return all(got_all[c] == rule(*c) for c in cases)

    right = {c: sum(terms[c].values()) for c in cases}
    if everywhere(lambda p, o: 2 + 2 + 4 + 2 * moments[o] if p == "mixed" else right[p, o]):
        fail("training_bytes in mixed precision keeps the optimizer's running averages 2 bytes wide: section 2 "
             "says where whatever the optimizer keeps between steps lives, and why.")
    if everywhere(lambda p, o: 2 + 2 + 4 + 4 + 4 * moments[o] if p == "mixed" else right[p, o]):
        fail("training_bytes in mixed precision counts a float32 gradient beside the bfloat16 one: the update makes "
             "it for itself and frees it when done. Section 2 says which moment this model counts, and where such "
             "a tensor shows instead.")
    if everywhere(lambda p, o: 4 + 4 + 4 + 4 * moments[o] if p == "fp32" else right[p, o]):
        fail("training_bytes in fp32 counts a copy of the weights that fp32 training has no use for: what is each "
             "copy you counted for?")
    for precision, optimizer in cases:
        t = terms[precision, optimizer]
        want, got = sum(t.values()), got_all[precision, optimizer]
        case = f"training_bytes(n, {precision!r}, {optimizer!r})"
        if got == want:
            continue
        if precision == "mixed" and got == want - 4:
            fail(f"{case}: a copy of the weights is missing. Where does the update happen, and how wide must the "
                 "weights be there (section 2)?")
        if got * 4 == want or (precision == "fp32" and got in (2, 3, 4)):
            fail(f"{case} counts tensors (copies of the parameters), not bytes. Each copy costs its dtype's bytes.")
        if precision == "mixed" and got == want / 2:
            fail(f"{case}: you made every copy 2 bytes wide. Which of them must hold a small update without losing "
                 "it (section 2, and lesson 03's running value that stopped moving)?")
        if got == t["parameters"] + t["gradients"] and t["optimizer"] > 0:
            fail(f"{case} counts weights and gradients only, no optimizer state: section 1 says what each optimizer "
                 "keeps per parameter.")
        fail(f"{case} is not what a layer trained one step this way holds: list every copy of the parameters that "
             "exists for training, and the width of each.")
    small = call(training_bytes, 3, "fp32", "adam")
    if not is_number(small) or isinstance(small, float):
        fail(f"training_bytes(3, 'fp32', 'adam') returned {small!r}; return a whole number of bytes (an int).")
    _training_bytes_8bit(training_bytes)


# bitsandbytes' Adam8bit (bitsandbytes/optim/optimizer.py, Optimizer2State.init_state): each moment a uint8 per value and
# a float32 absmax per block of 256 values (the last block partly filled), for a tensor of at least 4096 values
# (min_8bit_size); a smaller tensor keeps float32 moments. The two 256-entry quantization maps are the optimizer's,
# shared by every tensor, and not counted.
_BLOCK, _MIN_8BIT = 256, 4096


def _moments_8bit(n: int, block: int = _BLOCK, scales: int = 2, ceil: bool = True, small_rule: bool = True) -> int:
    if small_rule and n < _MIN_8BIT:
        return 2 * 4 * n
    blocks = -(-n // block) if ceil else n // block
    return 2 * n + scales * 4 * blocks


def _copies(precision: str) -> int:
    """Bytes per parameter of the weights and gradients (and the float32 master copy in mixed precision)."""
    return 4 + 4 if precision == "fp32" else 2 + 2 + 4


def _training_bytes_8bit(training_bytes) -> None:
    for n, precision, optimizer in _8BIT_CASES:
        shown = f"training_bytes({n}, {precision!r}, {optimizer!r})"
        got = call(training_bytes, n, precision, optimizer, label=shown)
        if not is_number(got) or isinstance(got, float):
            fail(f"{shown} returned {got!r}; return a whole number of bytes (an int).")
        want = n * _copies(precision) + _moments_8bit(n)
        if got == want:
            continue
        if precision == "mixed" and got == want - 4 * n:
            fail(f"{shown}: a copy of the weights is missing. Where does the update happen, and how wide must the "
                 "weights be there (section 2)?")
        copies = n * _copies(precision)
        if n >= _MIN_8BIT and got == copies + 2 * n:
            fail(f"{shown} keeps each moment in one byte per value and nothing else: go back to section 2's "
                 "description of what 8-bit Adam stores for a block of values.")
        if n >= _MIN_8BIT and got == copies + _moments_8bit(n, scales=1):
            fail(f"{shown} gives the two moments one set of scales between them: each moment is quantized on its "
                 "own.")
        if n >= _MIN_8BIT and got == copies + _moments_8bit(n, ceil=False):
            fail(f"{shown} counts the whole blocks only: a block that is partly filled still has its scale.")
        if n < _MIN_8BIT and got == copies + _moments_8bit(n, small_rule=False):
            fail(f"{shown}: that tensor is too small for 8-bit moments (section 2 says what bitsandbytes keeps for "
                 "it instead).")
        if got == copies + 8 * n:
            fail(f"{shown} counts 8-bit Adam's moments as Adam's, four bytes a value: what does 8-bit Adam keep "
                 "per value (section 2)?")
        fail(f"{shown} is not what 8-bit Adam training holds (section 2: which copies exist, and what 8-bit Adam "
             "keeps for each moment).")


# --- predict_saved_bytes --------------------------------------------------------------------------

_FROM_OUTPUT = ("relu", "tanh", "sigmoid")  # their derivative is a function of their output


_MEASURABLE = 10**7  # batch x widest layer: above it a case is too big to run here (or anywhere: that is its point)


def _model_saved(batch: int, widths: list, activation: str) -> int:
    """What autograd keeps on memory.mlp: the input, and per hidden layer the tensor(s) the activation's backward and
    the next Linear need (GELU's input and output; the others' output alone). tests hold it to the recorder."""
    per_hidden = 1 if activation in _FROM_OUTPUT else 2
    return 4 * batch * (widths[0] + per_hidden * sum(widths[1:-1]))


def _measured(batch: int, widths: list, activation: str) -> int:
    """What memory.mlp(widths, activation) saves for backward on a float32 batch, measured with the course's recorder
    (a case too big to run: the model the measured cases agree with)."""
    if batch * max(widths) > _MEASURABLE:
        return _model_saved(batch, widths, activation)
    return memory.saved_bytes(memory.mlp(widths, activation), torch.randn(batch, widths[0]))


def _predict_saved_bytes(predict_saved_bytes) -> None:
    """predict_saved_bytes(batch, widths, activation): the bytes the recorder measures on memory.mlp(widths, activation)."""
    for batch, widths, activation in _PREDICT_CASES:
        got = call(predict_saved_bytes, batch, widths, activation)
        want = _measured(batch, widths, activation)
        shown = f"predict_saved_bytes({batch}, {widths}, {activation!r})"
        if not is_number(got) or isinstance(got, float):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return an int number of bytes.")
        if got == want:
            continue
        hidden = 4 * batch * sum(widths[1:-1])
        weights = 4 * sum(a * b for a, b in zip(widths, widths[1:]))
        if got * 4 == want:
            fail(f"{shown} gives the number of saved elements, not bytes. Each element takes its dtype's bytes.")
        if got == want // batch and batch > 1:
            fail(f"{shown} gives the bytes for one sample; every sample in the batch keeps its own activations.")
        if hidden and got == want + hidden and activation in _FROM_OUTPUT:
            fail(f"{shown} is more than autograd keeps on the {activation} stack: does that activation's backward "
                 "need anything the next Linear does not keep already (section 3's derivatives)?")
        if hidden and got == want - hidden and activation == "gelu":
            fail(f"{shown} is less than autograd keeps on the GELU stack: look again at what GELU′ is a function "
                 "of (section 3).")
        if got == want + 4 * batch * widths[-1] or got == want + hidden + 4 * batch * widths[-1]:
            fail(f"{shown}: you counted the last Linear's output: what does a Linear's backward need?")
        if got == want - 4 * batch * widths[0]:
            fail(f"{shown} leaves out something the first Linear's backward needs (the batch needs no gradient; "
                 "its weight does).")
        if got in (want + weights, want + weights - 4 * widths[0] * widths[1]):
            fail(f"{shown}: you counted the weights. Autograd does save a Linear's weight (to pass the gradient back "
                 "to its input), but parameters are not activations: they are in memory anyway, counted once among "
                 "the parameters.")
        fail(f"{shown} is not what autograd keeps for backward on that float32 stack: ask what each layer's backward "
             "needs, and whether two of them keep the same tensor.")


# --- activation_bytes -----------------------------------------------------------------------------

def _recorded(case: str, exclude_parameters: bool = True, exclude_buffers: bool = True) -> memory.SavedTensors:
    """The course recorder's view of one case (grader's process): what the model holds whatever the batch (its
    parameters, and its buffers: BatchNorm's running statistics) is not an activation."""
    make, shape, _ = _ACTIVATION_CASES[case]
    model = make()
    held = [*(model.parameters() if exclude_parameters else ()), *(model.buffers() if exclude_buffers else ())]
    with memory.SavedTensors(exclude=held) as saved:
        model(torch.randn(*shape))
    return saved


def _batch_sized(case: str) -> int:
    """A known mistake: only the saved storages whose first dimension is the batch's, each once."""
    make, shape, _ = _ACTIVATION_CASES[case]
    model = make()
    seen = {}

    def pack(t):
        if t.dim() and t.shape[0] == shape[0]:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randn(*shape))
    return sum(seen.values())


def _activation_bytes(observation: dict) -> None:
    """activation_bytes(model, batch): distinct storages saved for backward, parameters excluded."""
    if not isinstance(observation, dict) or set(observation) != set(_ACTIVATION_CASES):
        fail("the check could not read what activation_bytes returned (not one answer per model)")
    saved = _recorded("mlp10")
    want = saved.nbytes
    got = observation["mlp10"]
    if not is_number(got):
        fail(f"activation_bytes returned {got!r}; return an int number of bytes.")
    with_params = _recorded("mlp10", exclude_parameters=False).nbytes
    per_save = sum(r["storage_nbytes"] for r in saved.rows if r["why not"] != "parameter")
    if got == 0:
        fail("activation_bytes returned 0: nothing was recorded. Were the hooks active, with gradients enabled, "
             "while model(batch) ran?")
    elements = sum(t // 4 for t in saved.storages.values())
    if got == elements or got * 4 == want:
        fail("activation_bytes counts elements, not bytes: each element of a storage takes as many bytes as its dtype is wide.")
    if got == with_params:
        fail("activation_bytes counts the weights too (pack also receives them, since a Linear saves its weight for "
             "backward). Parameters are not activations: they are in memory anyway (section 3).")
    if got == per_save:
        fail("activation_bytes on an MLP counts the same memory more than once (ReLU's output is saved by ReLU "
             "and again by the next Linear, as two tensor objects).")
    if got != want:
        fail("activation_bytes on a 32→64→16 MLP with a batch of 10 is not the bytes of activations it keeps for "
             "backward (parameters excluded, each storage once).")
    want2, got2 = _recorded("squares").nbytes, observation["squares"]
    if is_number(got2) and got2 > want2:
        fail("activation_bytes gives more than a model that saves one tensor twice keeps: the same memory was "
             "counted more than once (x * x saves x twice; a split gives two views of one tensor's memory).")
    if got2 != want2:
        fail("activation_bytes is not the bytes of the distinct storages a model that saves one tensor twice keeps.")
    want3, got3 = _recorded("slice").nbytes, observation["slice"]
    if is_number(got3) and got3 < want3:
        fail("activation_bytes gives less than a model keeps alive for backward when it saves a slice (a view) of a "
             "Linear's output: what does a view keep alive, the part it shows or more?")
    if got3 != want3:
        fail("activation_bytes is not the bytes of the distinct storages a model that saves a slice keeps alive.")
    if observation["mlp20"] != 2 * want:
        fail("activation_bytes does not grow in step with the batch, as activations do: does each call start "
             "from nothing?")
    want4, got4 = _recorded("batchnorm").nbytes, observation["batchnorm"]
    if got4 == _recorded("batchnorm", exclude_buffers=False).nbytes:
        fail("activation_bytes on the model with a BatchNorm layer counts memory the model holds whatever the batch, "
             "which the forward pass did not make for backward: look at whose memory each tensor pack receives from "
             "the BatchNorm lives in (section 3: what is an activation?).")
    if got4 == _batch_sized("batchnorm"):
        fail("activation_bytes on the model with a BatchNorm layer leaves out tensors its forward pass made and "
             "keeps for backward because their size does not grow with the batch: they are alive until backward, "
             "as every activation is.")
    if got4 != want4:
        fail("activation_bytes is not the activation memory the model with a BatchNorm layer keeps for backward.")


# --- max_batch ------------------------------------------------------------------------------------

def _line_through(points) -> tuple[float, float]:
    """(fixed bytes, bytes per sample) of the line through two (batch, peak) points."""
    (b1, p1), (b2, p2) = points
    per = (p2 - p1) / (b2 - b1)
    return p1 - b1 * per, per


def _line(peaks: dict) -> tuple[float, float]:
    """(fixed bytes, bytes per sample) of the backward pass: the line through the two largest batches, where the batch
    sets the peak (the contract says they do)."""
    return _line_through(sorted(peaks.items())[-2:])


def _step_peak(peaks: dict) -> float:
    """The peak of the moment that does not grow with the batch (the optimizer's step), where the data shows it: the
    highest peak above the backward pass's line; 0 where every batch tried sits on the line."""
    fixed, per = _line(peaks)
    return max((p for b, p in peaks.items() if p > fixed + per * b + 1e-9), default=0)


def _fits(memory_bytes: int, peaks: dict, line: tuple[float, float], step: float = 0) -> int:
    fixed, per = line
    if step > memory_bytes or per <= 0:
        return 0
    return max(0, int((memory_bytes - fixed) // per))


def _want(memory_bytes: int, peaks: dict) -> int:
    return _fits(memory_bytes, peaks, _line(peaks), _step_peak(peaks))


def _least_squares(peaks: dict) -> tuple[float, float]:
    n = len(peaks)
    mb, mp = sum(peaks) / n, sum(peaks.values()) / n
    per = sum((b - mb) * (p - mp) for b, p in peaks.items()) / sum((b - mb) ** 2 for b in peaks)
    return mp - per * mb, per


def _max_batch(max_batch) -> None:
    """max_batch(memory, peaks): the largest batch whose step peak fits, from peaks measured at several batch sizes."""
    for memory_bytes, peaks in _MAX_BATCH_CASES:
        shown = f"max_batch({memory_bytes}, {peaks})"
        got = call(max_batch, memory_bytes, peaks, label=shown)
        if not is_number(got) or isinstance(got, float):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return an int number of samples.")
        want = _want(memory_bytes, peaks)
        if got == want:
            continue
        fixed, per = _line(peaks)
        flat = _step_peak(peaks) > 0
        smallest = sorted(peaks.items())[:2]
        if flat and smallest[0][1] != smallest[1][1] and got == _fits(memory_bytes, peaks, _line_through(smallest)):
            fail(f"{shown}: your line goes through the smallest batches, where the batch does not set the step's "
                 "peak: at batch 1 the peak is higher than the line the larger batches lie on (section 5: which "
                 "moment of the step is its peak?).")
        if flat and got == _fits(memory_bytes, peaks, _least_squares(peaks)):
            fail(f"{shown}: your line is fitted through every batch tried, and the small batches, whose peak the "
                 "batch does not set, pull it off the line the larger ones lie on.")
        if flat and got == _fits(memory_bytes, peaks, (fixed, per)):
            fail(f"{shown}: at that batch the backward pass fits, but the step's other moment, whose peak does not "
                 "grow with the batch, needs more than the memory holds.")
        if want > 0 and got in {int(memory_bytes // (p / b)) for b, p in peaks.items()}:
            fail(f"{shown}: that divides memory by peak / batch, as if every byte of the peak grew with the batch. "
                 "Part of it is there whatever the batch (weights, gradients, optimizer state).")
        if want > 0 and got == memory_bytes // per:
            fail(f"{shown}: that ignores the fixed bytes, which are there whatever the batch; only what is left after "
                 "them holds activations.")
        if got < 0:
            fail(f"{shown} returned a negative batch: when the fixed bytes alone leave no room for a sample, no batch "
                 "fits. Return 0, never a negative batch.")
        if got == want + 1 and fixed + got * per > memory_bytes:
            fail(f"{shown}: that many samples need more bytes than memory holds.")
        if got == want - 1 and fixed + want * per == memory_bytes:
            fail(f"{shown} is one short: a batch that fills memory to the last byte still fits.")
        fail(f"{shown} is not the largest batch that fits (section 5: what in a step's peak grows with the batch, "
             "and what does not?).")


JUDGES = {"state_bytes": _state_bytes, "training_bytes": _training_bytes, "predict_saved_bytes": _predict_saved_bytes,
          "activation_bytes": _activation_bytes, "max_batch": _max_batch}
