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

from grader import memory
from grader.checks._common import Check, Prediction, call, fail, guard, is_number, recorded, require_callable, same
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson04.expect
from grader.notebook import NotDone

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

def _measured_bytes_per_param() -> dict[str, float]:
    """A float32 MLP with AdamW after one backward: bytes per parameter of everything, before and after step()."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = memory.relu_mlp([64, 128, 32])
        opt = memory.make_optimizer(model.parameters(), "adam")
        model(torch.randn(4, 64)).pow(2).mean().backward()
    n = sum(p.numel() for p in model.parameters())
    before = sum(memory.totals(memory.state_table(model, opt)).values()) / n
    opt.step()
    return {"before step()": before, "after step()": sum(memory.totals(memory.state_table(model, opt)).values()) / n}


LESSON = "04_memory"  # the lesson's name in the predictions record (grader.predictions)


def _bytes_per_param_mistakes(answer: dict) -> list[str]:
    """What is off in a BYTES_PER_PARAM, in words with no value in them (empty when both phases are right)."""
    before, after = answer["before step()"], answer["after step()"]
    want = _measured_bytes_per_param()
    said = []
    if abs(before - want["before step()"]) > 0.1:
        if abs(before - want["after step()"]) <= 0.1:
            said.append("before step() you counted AdamW's state, but it makes its running averages on its first "
                        "step(), not when it is built; that is why a run can pass its first backward and then run out "
                        "of memory at the first step")
        elif abs(before - 4) <= 0.1:
            said.append("before step() you counted the weights alone; the backward pass has run, so every trained "
                        "parameter has a .grad of its own shape and dtype")
        else:
            said.append("before step(): count what exists after a backward pass and before the optimizer has done "
                        "anything, which tensors and how many bytes per element")
    if abs(after - want["after step()"]) > 0.1:
        if abs(after - before) <= 0.1:
            said.append("after step() you counted no more than before: the step makes AdamW's state")
        else:
            said.append("after step(): what does AdamW keep per parameter (its running averages), and in which dtype?")
    return said


def _bytes_per_param_band(first: dict, context: dict) -> tuple[float, str]:
    """BYTES_PER_PARAM's first guess against the measured MLP: one half for each phase."""
    said = _bytes_per_param_mistakes(first)
    return (2 - len(said)) / 2, ("your first guess is what the tensors hold" if not said
                                 else "your first guess: " + "; ".join(said))


def _bytes_per_param_said(context: dict) -> str:
    want = _measured_bytes_per_param()
    return f"{want['before step()']:.2f} bytes per parameter before step(), {want['after step()']:.2f} after"


check_bytes_per_param = Prediction(LESSON, "BYTES_PER_PARAM", {"before step()": "number", "after step()": "number"},
                                   points=1, band=_bytes_per_param_band, model=_bytes_per_param_said,
                                   mistakes=lambda answer, context: "; ".join(_bytes_per_param_mistakes(answer)) or None)



def demo_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model the notebook's first try is run on: an MLP with a BatchNorm, a shared weight and a frozen layer,
    after one AdamW step (the same kind of model the check of state_bytes uses)."""
    return _stepped_model("adam", True)


_STATE_CASES = {  # name: (optimizer, step, what the learner is told on a crash)
    "adam": ("adam", True, "state_bytes(model, optimizer)"),
    "fresh": ("adam", False, "state_bytes on an optimizer that has not stepped"),
    "sgd": ("sgd", True, "state_bytes(model, SGD without momentum)"),
}


def _observe_state_bytes(state_bytes: Callable) -> dict:
    require_callable(state_bytes, "state_bytes")
    seen = {}
    for case, (optimizer, step, label) in _STATE_CASES.items():
        model, opt = _stepped_model(optimizer, step)
        seen[case] = call(state_bytes, model, opt, label=label)
    return seen


def _reference_state(case: str) -> tuple[dict, int, int, int]:
    """(bytes per kind, bytes of AdamW's step counters, trained numbers, tensors in optimizer.state): course code."""
    optimizer, step, _ = _STATE_CASES[case]
    model, opt = _stepped_model(optimizer, step)
    rows = memory.state_table(model, opt)
    steps = sum(r["nbytes"] for r in rows if r["name"].endswith(".step"))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return memory.totals(rows), steps, trained, len(opt.state)


def _judge_state_bytes(observation: dict) -> None:
    """state_bytes(model, optimizer): bytes of parameters, gradients and optimizer state, from the tensors."""
    if not isinstance(observation, dict) or set(observation) != set(_STATE_CASES):
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
        fail(
            f"state_bytes gave {got['parameters']} for the parameters: that counts numbers, not bytes. How many bytes "
            "does each number of a tensor take, and where does the tensor say so?"
        )
    model, _ = _stepped_model("adam", True)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    tied = model[0].weight.numel() * model[0].weight.element_size()
    if got["parameters"] in (want["parameters"] + buffers, want["parameters"] + buffers + tied):
        fail(f"state_bytes gave {got['parameters']} bytes of parameters: that counts the model's buffers too "
             "(BatchNorm's running statistics, which the model also saves). They are in memory, but they are not "
             "parameters: nothing trains them, they have no gradient and no optimizer state.")
    if got["parameters"] == want["parameters"] + tied:
        fail(f"state_bytes gave {got['parameters']} bytes of parameters: it counts one tensor twice. Two layers of "
             "this model share one weight (layer 5's weight is layer 0's): memory holds it once.")
    if got["parameters"] != want["parameters"]:
        fail(f"state_bytes gave {got['parameters']} bytes of parameters, not what the model's parameter tensors hold: "
             "read every parameter tensor's own size and element width.")
    if got["gradients"] == want["parameters"] and want["gradients"] != want["parameters"]:
        fail(
            "state_bytes counted a gradient for every parameter, but this model has a frozen layer whose .grad is None. "
            "Read the gradients themselves (p.grad), skipping parameters that have none."
        )
    if got["gradients"] != want["gradients"]:
        fail(f"state_bytes gave {got['gradients']} bytes of gradients, not what the .grad tensors hold.")
    if got["optimizer"] == 0:
        fail("state_bytes found 0 bytes of optimizer state after AdamW took a step: where does an optimizer keep "
             "what it remembers between steps?")
    if got["optimizer"] in (want["optimizer"] // 2, (want["optimizer"] - steps) // 2):
        fail("state_bytes counted only one of AdamW's two moments; exp_avg and exp_avg_sq are each as big as the parameters.")
    if got["optimizer"] in (2 * trained, 2 * trained + steps // 4, 2 * trained + n_state):
        fail("state_bytes counted the optimizer state's numbers, not its bytes.")
    if got["optimizer"] == 2 * want["parameters"]:
        fail(
            "state_bytes gave exactly twice the parameter bytes as optimizer state: that assumes Adam's two moments "
            "for every parameter instead of reading optimizer.state. Here one layer is frozen (it has no state), and "
            "before any step() there is no state at all."
        )
    if got["optimizer"] not in (want["optimizer"], want["optimizer"] - steps):
        fail(f"state_bytes gave {got['optimizer']} bytes of optimizer state, not what AdamW's tensors in optimizer.state "
             "hold (its step counters may count or not); read every tensor the optimizer keeps.")
    fresh = observation["fresh"]
    if not isinstance(fresh, dict) or fresh.get("optimizer") != 0:
        shown = fresh.get("optimizer") if isinstance(fresh, dict) else fresh
        fail(f"state_bytes reported {shown!r} bytes of optimizer state before any step(); "
             "AdamW allocates its state on the first step, so read optimizer.state, don't assume it.")
    sgd = observation["sgd"]
    if not isinstance(sgd, dict) or sgd.get("optimizer") != _reference_state("sgd")[0]["optimizer"]:
        shown = sgd.get("optimizer") if isinstance(sgd, dict) else sgd
        fail(f"state_bytes reported {shown!r} bytes of state for plain SGD, which keeps none; "
             "measure optimizer.state rather than assuming Adam.")


check_state_bytes = guard(Check("state_bytes", _observe_state_bytes, _judge_state_bytes), "state_bytes",
                          {memory.state_table: "grader.memory.state_table", memory.totals: "grader.memory.totals",
                           memory.storage_nbytes: "grader.memory.storage_nbytes"})


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


def _per_param(fn: Callable, n: int, precision: str, optimizer: str) -> float:
    got = call(fn, n, precision, optimizer, label=f"training_bytes({n}, {precision!r}, {optimizer!r})")
    if not is_number(got):
        fail(f"training_bytes({n}, {precision!r}, {optimizer!r}) returned {got!r}; return an int number of bytes.")
    return got / n


_TRAINING_CASES = [(p, o) for p in memory.PRECISIONS for o in reversed(memory.OPTIMIZERS)]  # adam first: least ambiguous


def _judge_training_bytes(training_bytes: Callable) -> None:
    """training_bytes(n, precision, optimizer) agrees with bytes per parameter measured on a real layer."""
    n = 1_000_000
    cases = _TRAINING_CASES
    terms = {case: memory.training_terms(*case) for case in cases}
    got_all = {case: _per_param(training_bytes, n, *case) for case in cases}
    if all(got_all[c] == terms[c]["parameters"] for c in cases):
        fail(f"training_bytes gave {got_all[cases[0]]:g} bytes per parameter whatever the optimizer: the weights alone, "
             "which is what inference needs. Training also holds gradients and the optimizer's state.")
    moments = {"sgd": 0, "momentum": 1, "adam": 2}

    def everywhere(rule: Callable[[str, str], float]) -> bool:
        return all(got_all[c] == rule(*c) for c in cases)

    right = {c: sum(terms[c].values()) for c in cases}
    if everywhere(lambda p, o: 2 + 2 + 4 + 2 * moments[o] if p == "mixed" else right[p, o]):
        fail(f"training_bytes(n, 'mixed', 'momentum') gave {got_all['mixed', 'momentum']:g} bytes per parameter: you kept "
             "the optimizer's buffers in bfloat16. They belong to the optimizer, which updates the float32 master "
             "weights: its running averages are float32 too, 4 bytes each, or the small updates they add up would "
             "vanish as a 2-byte weight's would.")
    if everywhere(lambda p, o: 4 + 4 + 4 + 4 * moments[o] if p == "fp32" else right[p, o]):
        fail(f"training_bytes(n, 'fp32', 'sgd') gave {got_all['fp32', 'sgd']:g} bytes per parameter: you counted a master "
             "copy in fp32 too. A master copy exists only because mixed precision computes with 2-byte weights; in "
             "fp32 the weights the optimizer updates are the weights themselves.")
    for precision, optimizer in cases:
        t = terms[precision, optimizer]
        want, got = sum(t.values()), got_all[precision, optimizer]
        case = f"training_bytes(n, {precision!r}, {optimizer!r})"
        if got == want:
            continue
        if precision == "mixed" and got == want - 4:
            fail(
                f"{case} gave {got:g} bytes per parameter, 2 + 2 + the optimizer's moments: the "
                "fp32 master copy of the weights is missing. The optimizer updates float32 weights (4 bytes each); "
                "the bfloat16 weights are a copy made from them for the forward and backward passes."
            )
        if got * 4 == want or (precision == "fp32" and got in (2, 3, 4)):
            fail(f"{case} gave {got:g} per parameter: that counts tensors (copies of the parameters), not bytes. "
                 f"Each copy costs its dtype's bytes: 4 in float32, 2 in bfloat16.")
        if precision == "mixed" and got == want / 2:
            fail(f"{case} gave {got:g}: you made everything 16-bit. Only the working weights and gradients are "
                 "bfloat16; the master weights and the optimizer's moments stay float32.")
        if got == t["parameters"] + t["gradients"] and t["optimizer"] > 0:
            fail(f"{case} gave {got:g} bytes per parameter: weights and gradients only, no optimizer state. "
                 f"Momentum keeps one float32 number per parameter, Adam two.")
        fail(f"{case} gave {got:g} bytes per parameter, not what a layer trained one step this way holds: list every "
             "copy of the parameters that exists for training, and the width of each.")
    small = call(training_bytes, 3, "fp32", "adam")
    if not is_number(small) or isinstance(small, float):
        fail(f"training_bytes(3, 'fp32', 'adam') returned {small!r}; return a whole number of bytes (an int).")


check_training_bytes = guard(
    recorded("training_bytes", "training_bytes",
             [(1_000_000, p, o) for p, o in _TRAINING_CASES] + [(3, "fp32", "adam")], _judge_training_bytes),
    "training_bytes", {memory.training_terms: "grader.memory.training_terms",
                       memory.probe_bytes_per_parameter: "grader.memory.probe_bytes_per_parameter"})


# --- predict, then measure: what a Linear/ReLU stack saves ---------------------------------------

_PREDICT_CASES = [(10, [32, 64, 16], "relu"), (4, [10, 20, 30, 5], "tanh"), (1, [7, 5], "relu"), (3, [8, 8, 8, 8], "gelu"),
                  (2, [6, 9, 4], "sigmoid"), (5, [4, 12, 12, 3], "gelu")]
_FROM_OUTPUT = ("relu", "tanh", "sigmoid")  # their derivative is a function of their output


def _measured(batch: int, widths: list, activation: str) -> int:
    """What memory.mlp(widths, activation) saves for backward on a float32 batch, measured with the course's recorder."""
    return memory.saved_bytes(memory.mlp(widths, activation), torch.randn(batch, widths[0]))


def _judge_predict_saved_bytes(predict_saved_bytes: Callable) -> None:
    """predict_saved_bytes(batch, widths, activation): the bytes the recorder measures on memory.mlp(widths, activation)."""
    for batch, widths, activation in _PREDICT_CASES:
        got = call(predict_saved_bytes, batch, widths, activation)
        want = _measured(batch, widths, activation)
        shown = f"predict_saved_bytes({batch}, {widths}, {activation!r})"
        if not is_number(got) or isinstance(got, float):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return an int number of bytes.")
        if got == want:
            continue
        hidden = 4 * batch * sum(widths[1:-1])  # the hidden layers, batch × width float32 each
        weights = 4 * sum(a * b for a, b in zip(widths, widths[1:]))
        if got * 4 == want:
            fail(f"{shown} returned {got}, the number of saved elements, not bytes. "
                 "Each float32 element takes 4 bytes.")
        if got == want // batch and batch > 1:
            fail(f"{shown} returned {got}, the bytes for one sample; every sample in the batch keeps its own "
                 "activations.")
        if hidden and got == want + hidden and activation in _FROM_OUTPUT:
            fail(f"{shown} returned {got}: you counted each hidden layer twice. {activation}'s backward can be "
                 "computed from its output alone (look at its derivative), and the next Linear keeps that same tensor "
                 "as its input: one storage, counted once. What comes before it is not kept.")
        if hidden and got == want - hidden and activation == "gelu":
            fail(f"{shown} returned {got}: GELU's derivative is not a function of its output alone, so its backward "
                 "needs its input, the Linear's output before it. That is a second tensor per hidden layer, beside "
                 "the GELU output the next Linear keeps.")
        if got == want + 4 * batch * widths[-1] or got == want + hidden + 4 * batch * widths[-1]:
            fail(f"{shown} returned {got}: you counted the last layer's output. "
                 "A Linear keeps its input (for the weight's gradient), not its output.")
        if got == want - 4 * batch * widths[0]:
            fail(f"{shown} returned {got}: the input batch is missing. The first "
                 "Linear keeps its input to compute its weight's gradient, even though the input needs no gradient.")
        if got in (want + weights, want + weights - 4 * widths[0] * widths[1]):
            fail(f"{shown} returned {got}: you counted the weights. Autograd does "
                 "save a Linear's weight (to pass the gradient back to its input), but parameters are not "
                 "activations: they are in memory anyway, counted once among the parameters.")
        fail(f"{shown} returned {got}, not what autograd keeps for backward on that float32 stack: ask what each "
             "layer's backward needs, and whether two of them keep the same tensor.")


check_predict_saved_bytes = guard(
    recorded("predict_saved_bytes", "predict_saved_bytes", _PREDICT_CASES, _judge_predict_saved_bytes),
    "predict_saved_bytes", {memory.saved_bytes: "grader.memory.saved_bytes", memory.SavedTensors: "grader.memory.SavedTensors",
                            memory.mlp: "grader.memory.mlp (to measure it)"})


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
}


def _observe_activation_bytes(activation_bytes: Callable) -> dict:
    require_callable(activation_bytes, "activation_bytes")
    seen = {}
    for case, (make, shape, label) in _ACTIVATION_CASES.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seen[case] = call(activation_bytes, make(), torch.randn(*shape), label=label)
    return seen


def _recorded(case: str, exclude_parameters: bool = True) -> memory.SavedTensors:
    """The course recorder's view of one case (grader's process)."""
    make, shape, _ = _ACTIVATION_CASES[case]
    model = make()
    with memory.SavedTensors(exclude=model.parameters() if exclude_parameters else ()) as saved:
        model(torch.randn(*shape))
    return saved


def _judge_activation_bytes(observation: dict) -> None:
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
        fail("activation_bytes returned 0: nothing was recorded. Run model(batch) inside "
             "`with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` with gradients enabled, "
             "and add up the storages that pack receives.")
    elements = sum(t // 4 for t in saved.storages.values())
    if got == elements or got * 4 == want:
        fail(f"activation_bytes returned {got}: that counts elements, not bytes. "
             "Use the storage's nbytes() (or numel() × element_size()).")
    if got == with_params:
        fail(
            f"activation_bytes returned {got}, which counts the weights (which pack also "
            "receives, since a Linear saves its weight for backward) were counted too. Parameters are not "
            "activations: skip any tensor whose storage is a parameter's."
        )
    if got == per_save:
        fail(
            f"activation_bytes returned {got} for an MLP: the same storage was counted "
            "more than once (ReLU's output is saved by ReLU and again by the next Linear). Count each storage "
            "once: key it by t.untyped_storage().data_ptr()."
        )
    if got != want:
        fail(f"activation_bytes on a 32→64→16 MLP with a batch of 10 returned {got}, not the bytes of activations it "
             "keeps for backward (parameters excluded, each storage once).")
    want2, got2 = _recorded("squares").nbytes, observation["squares"]
    if is_number(got2) and got2 > want2:
        fail(
            f"activation_bytes returned {got2}, more than a model that saves one tensor twice keeps: the same storage was counted "
            "more than once (x * x saves x twice; a split gives two views of one storage). Count each storage "
            "once: key it by t.untyped_storage().data_ptr()."
        )
    if got2 != want2:
        fail(f"activation_bytes returned {got2!r}, not the bytes of the distinct storages that model saves.")
    want3, got3 = _recorded("slice").nbytes, observation["slice"]
    if is_number(got3) and got3 < want3:
        fail(
            f"activation_bytes returned {got3}, less than that model keeps alive for backward: it saves a "
            "slice (a view) of a Linear's output, and a view keeps its whole storage in memory, not just the part it "
            "shows. Count each storage once, at its full size (t.untyped_storage().nbytes())."
        )
    if got3 != want3:
        fail(f"activation_bytes returned {got3!r}, not the bytes of the distinct storages that model keeps alive.")
    bigger = observation["mlp20"]
    if bigger != 2 * want:
        fail(f"activation_bytes gave {got} bytes for a batch of 10 and {bigger!r} for 20; activations grow in step "
             "with the batch. Measure each call from scratch (a fresh record every call).")


check_activation_bytes = guard(Check("activation_bytes", _observe_activation_bytes, _judge_activation_bytes),
                               "activation_bytes", {memory.saved_bytes: "grader.memory.saved_bytes",
                                                    memory.SavedTensors: "grader.memory.SavedTensors"})


def _observe_activation_on(activation_bytes: Callable, widths: list, batch: int) -> dict:
    require_callable(activation_bytes, "activation_bytes")
    model = memory.relu_mlp(widths)
    return {"got": call(activation_bytes, model, torch.randn(batch, widths[0]),
                        label=f"activation_bytes(an MLP {widths}, a batch of {batch})")}


def _judge_activation_on(observation: dict, widths: list, batch: int, want: int, why: str) -> None:
    got = observation.get("got") if isinstance(observation, dict) else None
    if not same(got, want):
        fail(f"{why} (activation_bytes returned {got!r})")


activation_on = Check("activation_bytes on a given MLP", _observe_activation_on, _judge_activation_on,
                      inputs=("widths", "batch"), announce=False)
activation_on.__doc__ = "Hidden test: activation_bytes(memory.relu_mlp(widths), a float32 batch) is `want`."


# --- will it fit -------------------------------------------------------------------------------


def _line(peaks: dict) -> tuple[int, int]:
    """(fixed bytes, bytes per sample) of peaks that lie on a line in the batch."""
    (b1, p1), (b2, p2) = sorted(peaks.items())[:2]
    per = (p2 - p1) // (b2 - b1)
    return p1 - b1 * per, per


# (memory, peaks measured at two or more batch sizes): on a line with 30 fixed bytes and 7 per sample, then edges
_MAX_BATCH_CASES = [
    (100, {2: 44, 4: 58}),  # fixed 30, 7 per sample: 10 fit exactly (30 + 70)
    (100, {6: 72, 2: 44}),  # the same line, batches not in order
    (100, {1: 38, 3: 54}),  # fixed 30, 8 per sample: 8.75, so 8
    (100, {1: 60, 2: 80}),  # fixed 40, 20 per sample: 3 fill memory to the last byte
    (100, {1: 127, 2: 134}),  # fixed 120: nothing fits
    (100, {1: 102, 2: 109}),  # fixed 95: 5 bytes left, a sample needs 7
]


def _judge_max_batch(max_batch: Callable) -> None:
    """max_batch(memory, peaks): the largest batch whose peak fits, from peaks measured at two batch sizes; 0 if none."""
    for memory_bytes, peaks in _MAX_BATCH_CASES:
        shown = f"max_batch({memory_bytes}, {peaks})"
        got = call(max_batch, memory_bytes, peaks, label=shown)
        if not is_number(got) or isinstance(got, float):
            fail(f"{shown} returned {got!r} ({type(got).__name__}); return an int number of samples.")
        fixed, per = _line(peaks)
        want = max(0, (memory_bytes - fixed) // per)
        if got == want:
            continue
        batches = ", ".join(f"{p} bytes at batch {b}" for b, p in sorted(peaks.items()))
        if want > 0 and got in {int(memory_bytes // (p / b)) for b, p in peaks.items()}:
            fail(f"{shown} returned {got}: that divides memory by peak / batch, as if every byte of the peak grew with "
                 f"the batch. Part of it is there whatever the batch (weights, gradients, optimizer state). What one "
                 f"more sample costs is the slope between two measurements ({batches}): the difference in peak over "
                 "the difference in batch; what is left at batch 0 is the fixed part.")
        if want > 0 and got == memory_bytes // per:
            fail(f"{shown} returned {got}: that ignores the fixed bytes, which are there whatever the batch; only what "
                 f"is left after them holds activations ({per} bytes per sample here).")
        if got < 0:
            fail(f"{shown} returned {got}: the fixed bytes alone ({fixed}) leave no room for a sample, so no batch "
                 "fits. Return 0, never a negative batch.")
        if got == want + 1 and fixed + got * per > memory_bytes:
            fail(f"{shown} returned {got}: {got} samples need {fixed} + {got} × {per} = {fixed + got * per} bytes, more "
                 f"than {memory_bytes}. Round down.")
        if got == want - 1 and fixed + want * per == memory_bytes:
            fail(f"{shown} returned {got}, one short: the next batch fills memory exactly, and a batch that fills "
                 "memory to the last byte still fits (use <=, not <).")
        fail(f"{shown} returned {got}, not the largest batch that fits in {memory_bytes}: from {batches}, work out what one "
             "more sample costs and what is there whatever the batch.")


check_max_batch = recorded("max_batch", "max_batch", _MAX_BATCH_CASES, _judge_max_batch)
