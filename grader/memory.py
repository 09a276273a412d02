"""What is in memory during training: instruments that read it from real tensors, and models of it.

Instruments (they measure, on any device):
- `state_table`: one row per parameter, gradient and optimizer-state tensor, with its bytes.
- `SavedTensors`: a recorder built on torch.autograd.graph.saved_tensors_hooks that sees
  every tensor autograd keeps for backward; each storage counted once, parameters left out.
- `probe_bytes_per_parameter`: trains a tiny layer one step in fp32 or mixed precision and
  reads bytes per parameter off its tensors; the training-memory model is built from it.
- allocated, reserved and peak from torch's allocator around a step: grader.gpu.cuda_step_figures (CUDA only).

Models (they predict, labelled as such wherever they are drawn):
- `training_terms`: bytes per parameter of weights, gradients and optimizer state.
- `activation_model`: bytes the course's transformer (grader.transformer) saves for backward,
  derived from its operations, for any batch and sequence length.

The lesson's exercises (state_bytes, training_bytes, activation_bytes, max_batch) are the
learner's to write; the widget takes them as arguments and draws with them.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from grader.transformer import Shape

PRECISIONS = ("fp32", "mixed")
OPTIMIZERS = ("sgd", "momentum", "adam")
GIB = 2**30


def storage_key(t: torch.Tensor) -> tuple:
    """What identifies the memory a tensor lives in: its storage's device and address."""
    st = t.untyped_storage()
    return (t.device.type, t.device.index, st.data_ptr())


def storage_nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one storage counted once)."""
    seen: dict[tuple, int] = {}
    for t in tensors:
        seen[storage_key(t)] = t.untyped_storage().nbytes()
    return sum(seen.values())


# --- parameters, gradients, optimizer state -------------------------------------------------


def state_table(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> list[dict]:
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


def make_optimizer(params, optimizer: str, lr: float = 1e-3) -> torch.optim.Optimizer:
    """The optimizer the course means by "sgd", "momentum" or "adam" (AdamW)."""
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if optimizer == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if optimizer == "adam":
        return torch.optim.AdamW(params, lr=lr)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, not {optimizer!r}")


def probe_bytes_per_parameter(precision: str, optimizer: str, width: int = 64) -> dict[str, float]:
    """Train a width×width layer one step and read bytes per parameter off its tensors.

    fp32: the layer, its gradients and the optimizer state are float32. mixed: the
    layer that runs forward and backward is bfloat16 (weights and gradients), and the
    optimizer updates a float32 master copy, which counts as optimizer state (as in
    ZeRO). Optimizer step counters (one scalar per tensor) are left out: they do not
    grow with the parameter count.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    with torch.random.fork_rng(devices=[]):  # leave the caller's random stream alone
        torch.manual_seed(0)
        return _probe(precision, optimizer, width)


def _probe(precision: str, optimizer: str, width: int) -> dict[str, float]:
    master = nn.Linear(width, width, bias=False)  # float32
    if precision == "fp32":
        working, extra = master, []
    else:
        working = nn.Linear(width, width, bias=False).to(torch.bfloat16)
        working.weight.data.copy_(master.weight.data)
        extra = [master.weight]  # the float32 master copy the optimizer updates
    opt = make_optimizer(master.parameters(), optimizer)
    x = torch.randn(8, width, dtype=working.weight.dtype)
    working(x).float().pow(2).mean().backward()
    if precision == "mixed":
        master.weight.grad = working.weight.grad.float()  # fp32 gradient, made and dropped per step
    opt.step()
    n = working.weight.numel()
    rows = totals(state_table(working))
    state = sum(v.numel() * v.element_size() for s in opt.state.values() for k, v in s.items()
                if torch.is_tensor(v) and k != "step")
    state += storage_nbytes(extra)
    return {"parameters": rows["parameters"] / n, "gradients": rows["gradients"] / n, "optimizer": state / n}


_PROBED: dict[tuple[str, str], dict[str, float]] = {}


def training_terms(precision: str, optimizer: str) -> dict[str, float]:
    """Model: bytes per parameter of weights, gradients and optimizer state (from `probe_bytes_per_parameter`)."""
    if (precision, optimizer) not in _PROBED:
        _PROBED[precision, optimizer] = probe_bytes_per_parameter(precision, optimizer)
    return dict(_PROBED[precision, optimizer])


# --- activations: what autograd saves for backward -------------------------------------------


class SavedTensors:
    """Record what autograd saves for backward inside a `with` block.

    with SavedTensors(exclude=model.parameters()) as saved:
        loss = model(x)
    saved.nbytes  # bytes of distinct storages saved, parameters excluded

    Each storage is counted once however many times (and through however many views)
    it is saved; storages of the `exclude` tensors (parameters) are not activations.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        self.excluded = {storage_key(t) for t in exclude}
        self.storages: dict[tuple, int] = {}
        self.rows: list[dict] = []  # one per save: shape, dtype, storage bytes, whether counted

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        counted = key not in self.excluded and key not in self.storages
        self.rows.append({"shape": tuple(t.shape), "dtype": str(t.dtype),
                          "storage_nbytes": t.untyped_storage().nbytes(), "counted": counted,
                          "why not": "" if counted else ("parameter" if key in self.excluded else "already counted")})
        if counted:
            self.storages[key] = t.untyped_storage().nbytes()
        return t

    def __enter__(self) -> "SavedTensors":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self._hooks.__exit__(*exc)
        return False

    @property
    def nbytes(self) -> int:
        return sum(self.storages.values())


def dropout_mask_bytes(device: torch.device | str) -> int:
    """Bytes per element of the mask dropout keeps: CUDA's fused kernel keeps bool, elsewhere a float32 noise tensor."""
    return 1 if torch.device(device).type == "cuda" else 4


def activation_model(shape: Shape, batch: int, seq: int, element_bytes: int = 4, mask_bytes: int = 4,
                     checkpointing: bool = False, loss: bool = False) -> int:
    """Model: bytes `grader.transformer.TinyGPT(shape)` saves for backward on a (batch, seq) input.

    Derived from the block's operations (lesson 04 lists them):
      per block, b·s·d elements: ln1 input, ln1 output (qkv input), q, k, v, attention output
        (proj input), ln2 input, ln2 output (fc1 input)                              8 b·s·d
      fc1 output (GELU input) and GELU output (fc2 input)                          2 b·s·d_ff
      softmax output                                                                b·h·s²
      LayerNorm mean and 1/std, two LayerNorms, float32                             4 b·s
      causal mask, bool                                                             s² bytes
      with dropout on: its masks after attention probs (b·h·s²), proj and fc2 (2 b·s·d), plus
        the dropped-out probabilities that feed weights @ v (b·h·s²)
    outside the blocks: token ids and positions (int64), the embedding's dropout mask, ln_f
    input and output (2 b·s·d), its mean and 1/std; with `loss`, float32 logits for the loss.
    Checkpointing keeps only each block's input (b·s·d per block) plus the outside terms.
    """
    b, s, d, h, f, L = batch, seq, shape.d_model, shape.n_heads, shape.d_ff, shape.n_layers
    e, m = element_bytes, mask_bytes
    dropout = shape.dropout > 0
    stats = 4  # LayerNorm keeps mean and 1/std in float32
    block = e * (8 * b * s * d + 2 * b * s * f + b * h * s * s) + stats * 4 * b * s + s * s
    if dropout:
        block += m * (b * h * s * s + 2 * b * s * d) + e * b * h * s * s
    outside = 8 * b * s + 8 * s + e * 2 * b * s * d + stats * 2 * b * s
    if dropout:
        outside += m * b * s * d
    if loss:
        outside += 4 * b * s * shape.vocab_size
    if checkpointing:
        return outside + L * e * b * s * d
    return outside + L * block


def shape_from_row(row: dict, dropout: float = 0.0, seq: int | None = None) -> Shape:
    """A `Shape` from a data/models.csv row (dropout off: large models train without it)."""
    return Shape(n_layers=row["n_layers"], d_model=row["d_model"], n_heads=row["n_heads"], d_ff=row["d_ff"],
                 vocab_size=row["vocab_size"], max_seq_len=seq or row["max_seq_len"], dropout=dropout)
