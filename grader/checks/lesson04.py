"""Checks for lesson 04 (memory): state bytes, the training-memory model, activations, the largest batch."""

from __future__ import annotations

import warnings
from typing import Callable

import torch
from torch import nn

from grader import memory
from grader.checks._common import call, fail, is_number, passed, require_callable

_KINDS = ("parameters", "gradients", "optimizer")


def _stepped_model(optimizer: str = "adam", step: bool = True) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small float32 MLP with one frozen layer, after one backward and (optionally) one optimizer step."""
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.Linear(8, 4))
    for p in model[3].parameters():
        p.requires_grad_(False)  # frozen: no gradient, no optimizer state
    opt = memory.make_optimizer([p for p in model.parameters() if p.requires_grad], optimizer)
    model(torch.randn(5, 16)).pow(2).mean().backward()
    if step:
        opt.step()
    return model, opt


def check_state_bytes(state_bytes: Callable) -> None:
    """state_bytes(model, optimizer): bytes of parameters, gradients and optimizer state, from the tensors."""
    require_callable(state_bytes, "state_bytes")
    model, opt = _stepped_model("adam")
    rows = memory.state_table(model, opt)
    want = memory.totals(rows)
    steps = sum(r["nbytes"] for r in rows if r["name"].endswith(".step"))
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    got = call(state_bytes, model, opt, label="state_bytes(model, optimizer)")
    if not isinstance(got, dict) or set(got) != set(_KINDS):
        fail(f"state_bytes returned {got!r}; return a dict with exactly the keys {list(_KINDS)}.")
    for kind in _KINDS:
        if not is_number(got[kind]):
            fail(f"state_bytes(...)[{kind!r}] is {got[kind]!r} ({type(got[kind]).__name__}); return a plain int of bytes.")
    n_all = sum(p.numel() for p in model.parameters())
    if got["parameters"] == n_all or got["gradients"] == trained:
        fail(
            f"state_bytes gave {got['parameters']} for the parameters of a model with {n_all} float32 numbers: "
            "that counts elements, not bytes. Multiply each tensor's numel() by its element_size() (4 for float32)."
        )
    if got["parameters"] != want["parameters"]:
        fail(f"state_bytes gave {got['parameters']} bytes of parameters; the model's parameter tensors hold "
             f"{want['parameters']}. Sum numel() × element_size() over model.parameters().")
    if got["gradients"] == want["parameters"] and want["gradients"] != want["parameters"]:
        fail(
            "state_bytes counted a gradient for every parameter, but this model has a frozen layer whose .grad is None. "
            "Read the gradients themselves (p.grad), skipping parameters that have none."
        )
    if got["gradients"] != want["gradients"]:
        fail(f"state_bytes gave {got['gradients']} bytes of gradients; the .grad tensors hold {want['gradients']}.")
    if got["optimizer"] == 0:
        fail(
            "state_bytes found 0 bytes of optimizer state after AdamW took a step. The state is in optimizer.state "
            "(a dict from each parameter to its tensors: exp_avg, exp_avg_sq, step); it only exists after the first "
            "step(), so read it after one."
        )
    if got["optimizer"] in (want["optimizer"] // 2, (want["optimizer"] - steps) // 2):
        fail("state_bytes counted only one of AdamW's two moments; exp_avg and exp_avg_sq are each as big as the parameters.")
    if got["optimizer"] in (2 * trained, 2 * trained + steps // 4, 2 * trained + len(opt.state)):
        fail("state_bytes counted the optimizer state's elements, not bytes: multiply numel() by element_size().")
    if got["optimizer"] == 2 * want["parameters"]:
        fail(
            "state_bytes gave exactly twice the parameter bytes as optimizer state: that assumes Adam's two moments "
            "for every parameter instead of reading optimizer.state. Here one layer is frozen (it has no state), and "
            "before any step() there is no state at all."
        )
    if got["optimizer"] not in (want["optimizer"], want["optimizer"] - steps):
        fail(f"state_bytes gave {got['optimizer']} bytes of optimizer state; AdamW's tensors in optimizer.state hold "
             f"{want['optimizer']} (including its step counters). Sum every tensor in every optimizer.state[p].")
    fresh_model, fresh_opt = _stepped_model("adam", step=False)
    fresh = call(state_bytes, fresh_model, fresh_opt, label="state_bytes on an optimizer that has not stepped")
    if isinstance(fresh, dict) and fresh.get("optimizer") != 0:
        fail(f"state_bytes reported {fresh.get('optimizer')} bytes of optimizer state before any step(); "
             "AdamW allocates its state on the first step, so read optimizer.state, don't assume it.")
    sgd_model, sgd_opt = _stepped_model("sgd")
    sgd = call(state_bytes, sgd_model, sgd_opt, label="state_bytes(model, SGD without momentum)")
    if isinstance(sgd, dict) and sgd.get("optimizer") != memory.totals(memory.state_table(sgd_model, sgd_opt))["optimizer"]:
        fail(f"state_bytes reported {sgd.get('optimizer')} bytes of state for plain SGD, which keeps none; "
             "measure optimizer.state rather than assuming Adam.")
    passed("state_bytes")


def _per_param(fn: Callable, n: int, precision: str, optimizer: str) -> float:
    got = call(fn, n, precision, optimizer, label=f"training_bytes({n}, {precision!r}, {optimizer!r})")
    if not is_number(got):
        fail(f"training_bytes({n}, {precision!r}, {optimizer!r}) returned {got!r}; return an int number of bytes.")
    return got / n


def check_training_bytes(training_bytes: Callable) -> None:
    """training_bytes(n, precision, optimizer) agrees with bytes per parameter measured on a real layer."""
    require_callable(training_bytes, "training_bytes")
    n = 1_000_000
    cases = [(p, o) for p in memory.PRECISIONS for o in reversed(memory.OPTIMIZERS)]  # adam first: least ambiguous
    terms = {case: memory.training_terms(*case) for case in cases}
    got_all = {case: _per_param(training_bytes, n, *case) for case in cases}
    if all(got_all[c] == terms[c]["parameters"] for c in cases):
        fail(f"training_bytes gave {got_all[cases[0]]:g} bytes per parameter whatever the optimizer: the weights alone, "
             "which is what inference needs. Training also holds gradients and the optimizer's state.")
    for precision, optimizer in cases:
        t = terms[precision, optimizer]
        want, got = sum(t.values()), got_all[precision, optimizer]
        case = f"training_bytes(n, {precision!r}, {optimizer!r})"
        if got == want:
            continue
        if precision == "mixed" and got == want - 4:
            fail(
                f"{case} gave {got:g} bytes per parameter, {want - 4:g} = 2 + 2 + the optimizer's moments: the "
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
        fail(f"{case} gave {got:g} bytes per parameter; a layer trained one step this way holds {want:g} "
             f"({', '.join(f'{k} {v:g}' for k, v in t.items())}).")
    if not float(call(training_bytes, 3, "fp32", "adam")).is_integer():
        fail("training_bytes should return a whole number of bytes (an int).")
    passed("training_bytes")


class _Squares(nn.Module):
    """A model that saves one tensor twice (x * x) and two views of one storage (a split)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 24)

    def forward(self, x):
        h = self.fc(x)  # (batch, 24)
        a, b = h.split(12, dim=-1)  # two views of h's storage
        return (a * b).sum(-1) + (x * x).sum(-1)


def _reference(model: nn.Module, batch: torch.Tensor) -> memory.SavedTensors:
    with memory.SavedTensors(exclude=model.parameters()) as saved:
        model(batch)
    return saved


def check_activation_bytes(activation_bytes: Callable) -> None:
    """activation_bytes(model, batch): distinct storages saved for backward, parameters excluded."""
    require_callable(activation_bytes, "activation_bytes")
    mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    x = torch.randn(10, 32)
    saved = _reference(mlp, x)
    want = saved.nbytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = call(activation_bytes, mlp, x, label="activation_bytes(mlp, batch of 10)")
    if not is_number(got):
        fail(f"activation_bytes returned {got!r}; return an int number of bytes.")
    everything = memory.SavedTensors()  # no exclusions: parameters included
    with everything:
        mlp(x)
    with_params = everything.nbytes
    per_save = sum(r["storage_nbytes"] for r in saved.rows if r["why not"] != "parameter")
    if got == 0:
        fail("activation_bytes returned 0: nothing was recorded. Run model(batch) inside "
             "`with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` with gradients enabled, "
             "and add up the storages that pack receives.")
    elements = sum(t // 4 for t in saved.storages.values())
    if got == elements or got * 4 == want:
        fail(f"activation_bytes returned {got} for tensors holding {want} bytes: that counts elements, not bytes. "
             "Use the storage's nbytes() (or numel() × element_size()).")
    if got == with_params:
        fail(
            f"activation_bytes returned {got}, but the activations are {want} bytes: the weights (which pack also "
            "receives, since a Linear saves its weight for backward) were counted too. Parameters are not "
            "activations: skip any tensor whose storage is a parameter's."
        )
    if got == per_save:
        fail(
            f"activation_bytes returned {got} for an MLP that saves {want} bytes: the same storage was counted "
            "more than once (ReLU's output is saved by ReLU and again by the next Linear). Count each storage "
            "once: key it by t.untyped_storage().data_ptr()."
        )
    if got != want:
        fail(f"activation_bytes on a 32→64→16 MLP with a batch of 10 returned {got}; it saves {want} bytes of "
             "activations (its input, the hidden layer before and after ReLU), parameters excluded.")
    twice = _Squares()
    y = torch.randn(6, 12)
    want2 = _reference(twice, y).nbytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got2 = call(activation_bytes, twice, y, label="activation_bytes on a model that saves one tensor twice")
    if is_number(got2) and got2 > want2:
        fail(
            f"activation_bytes returned {got2} for a model that saves {want2} bytes: the same storage was counted "
            "more than once (x * x saves x twice; a split gives two views of one storage). Count each storage "
            "once: key it by t.untyped_storage().data_ptr()."
        )
    if got2 != want2:
        fail(f"activation_bytes returned {got2} where the model saves {want2} bytes of distinct storages.")
    bigger = call(activation_bytes, mlp, torch.randn(20, 32), label="activation_bytes(mlp, batch of 20)")
    if bigger != 2 * want:
        fail(f"activation_bytes gave {want} bytes for a batch of 10 and {bigger} for 20; activations grow in step with "
             "the batch. Measure each call from scratch (a fresh record every call).")
    passed("activation_bytes")


def check_max_batch(max_batch: Callable) -> None:
    """max_batch(memory, fixed, per_sample): the largest batch that fits, 0 when none does."""
    require_callable(max_batch, "max_batch")
    got = call(max_batch, 100, 30, 7)
    if not is_number(got) or isinstance(got, float):
        fail(f"max_batch(100, 30, 7) returned {got!r}; return an int number of samples.")
    if got == 100 // 7:
        fail(
            f"max_batch(100 bytes, fixed 30, 7 per sample) returned {got}: that ignores the fixed bytes. Weights, "
            "gradients and optimizer state are there whatever the batch; only what is left holds activations."
        )
    if got == 11:
        fail("max_batch(100, 30, 7) returned 11: 11 samples need 30 + 77 = 107 bytes, more than 100. Round down.")
    if got != 10:
        fail(f"max_batch(100, 30, 7) returned {got}; 30 fixed + 10 × 7 = 100 fits exactly, 11 does not.")
    if call(max_batch, 100, 30, 8) == 9:
        fail("max_batch(100, 30, 8) returned 9: 9 samples need 30 + 72 = 102 bytes, more than 100. Round down.")
    exact = call(max_batch, 100, 40, 20)
    if exact == 2:
        fail("max_batch(100, 40, 20) returned 2, but 40 + 3 × 20 = 100 fits exactly: a batch that fills memory "
             "to the last byte still fits (use <=, not <).")
    none = call(max_batch, 100, 120, 7)
    if none != 0:
        fail(f"max_batch(100, 120, 7) returned {none!r}: the fixed bytes alone (120) exceed memory, so no batch fits. "
             "Return 0, never a negative batch.")
    if call(max_batch, 100, 95, 7) != 0:
        fail("max_batch(100, 95, 7) should be 0: 5 bytes are left and one sample needs 7. Round down.")
    passed("max_batch")
