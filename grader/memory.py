"""What is in memory during training: instruments that read it from real tensors, and models of it.

Instruments (they measure, on any device):
- `SavedTensors`: THE course's saved-tensor recorder (lessons 02 and 04), built on
  torch.autograd.graph.saved_tensors_hooks: it sees every tensor autograd keeps for backward,
  counts each storage once (parameters left out, `exclude`), and keeps weak references so
  `alive()` says how many are still held later (lesson 02, with `skip_leaves=True`).
- `graph_nodes`: backward nodes a set of tensors still reaches through grad_fn.
- `probe_bytes_per_parameter`: trains a tiny layer one step each way and reads bytes per
  parameter off its tensors (lesson 04's training_bytes is the learner's model of it).
- allocated, reserved and peak from torch's allocator around a step: grader.gpu.cuda_step_figures (CUDA only).

Models (they predict, labelled as such wherever they are drawn):
- `training_terms`: bytes per parameter of weights, gradients and optimizer state.
- `activation_model`: bytes the course's transformer (grader.transformer) saves for backward,
  derived from its operations, for any batch and sequence length; with checkpointing, the
  peak while one block is recomputed during backward.
- `inference_bytes`: weights plus the KV cache, for serving.
- `card_bytes`, `usable_bytes`: a chip's memory as nvidia-smi reports it, less the CUDA
  context reserve (data/model_constants.json, a labelled assumption).
- `fit`: the will-it-fit arithmetic the calculator widget draws.

The lesson's exercises (state_bytes, training_bytes, predict_saved_bytes, activation_bytes,
max_batch) are the learner's to write; `fit` and the widget take them as arguments.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Callable, Iterable

import torch
from torch import nn

from grader import specs
from grader.checks._sealed import sealed
from grader.shortcuts import course_only
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


def make_optimizer(params, optimizer: str, lr: float = 1e-3) -> torch.optim.Optimizer:
    """The optimizer the course means by "sgd", "momentum" or "adam" (AdamW)."""
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if optimizer == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if optimizer == "adam":
        return torch.optim.AdamW(params, lr=lr)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, not {optimizer!r}")


@course_only("grader.memory.probe_bytes_per_parameter")
def probe_bytes_per_parameter(precision: str, optimizer: str, width: int = 64) -> dict[str, float]:
    """Train a width×width layer one step `precision`'s way and read bytes per parameter off its tensors (the
    layer that runs forward and backward: its parameters and gradients; everything else training keeps from one step
    to the next counts as optimizer state, as in ZeRO). In mixed precision the float32 gradient the update reads is
    made from the bfloat16 one for the update and freed after it, so it adds to the step's peak, not to this count.
    Step counters (one scalar per tensor) do not grow with the parameters: left out."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    with torch.random.fork_rng(devices=[]):  # leave the caller's random stream alone
        torch.manual_seed(0)
        return _probe(precision, optimizer, width)


# course_only too: a copy test built training_bytes' table from it in a cell before the check (earlier=)
@course_only("grader.memory._probe")
def _probe(precision: str, optimizer: str, width: int) -> dict[str, float]:
    master = nn.Linear(width, width, bias=False)
    if precision == "fp32":
        working, extra = master, []
    else:
        working = nn.Linear(width, width, bias=False).to(torch.bfloat16)
        working.weight.data.copy_(master.weight.data)
        extra = [master.weight]
    opt = make_optimizer(master.parameters(), optimizer)
    x = torch.randn(8, width, dtype=working.weight.dtype)
    working(x).float().pow(2).mean().backward()
    if precision == "mixed":
        master.weight.grad = working.weight.grad.float()
    opt.step()
    if precision == "mixed":
        master.weight.grad = None  # the update's float32 gradient goes with the update
    weight = working.weight  # the probe's one parameter (no bias)
    n = weight.numel()
    state = sum(v.nbytes for s in opt.state.values() for k, v in s.items() if torch.is_tensor(v) and k != "step")
    state += storage_nbytes(extra)
    return {"parameters": weight.nbytes / n, "gradients": weight.grad.nbytes / n, "optimizer": state / n}


_PROBED: dict[tuple[str, str], dict[str, float]] = {}


@course_only("grader.memory.training_terms")
def training_terms(precision: str, optimizer: str) -> dict[str, float]:
    """Model: bytes per parameter of weights, gradients and optimizer state (from `probe_bytes_per_parameter`)."""
    if (precision, optimizer) not in _PROBED:
        _PROBED[precision, optimizer] = probe_bytes_per_parameter(precision, optimizer)
    return dict(_PROBED[precision, optimizer])


# --- activations: what autograd saves for backward -------------------------------------------


@course_only("grader.memory.SavedTensors")
def _recording() -> None:
    """Stands for a SavedTensors recording, so that a cell recording before a check is counted (a copy test measured
    predict_saved_bytes's answers with the recorder in a scratch cell, r22)."""


class SavedTensors:
    """Record what autograd saves for backward inside a `with` block: the course's one recorder.

    with SavedTensors(exclude=model.parameters()) as saved:
        loss = model(x)
    saved.nbytes   # bytes of distinct storages saved, parameters excluded (lesson 04)
    saved.rows     # one row per save: shape, dtype, storage bytes, counted or why not
    saved.alive()  # (storages, bytes) of those saves still held now (lesson 02)

    Each storage is counted once however many times (and through however many views) it
    is saved; storages of the `exclude` tensors (parameters) are not activations. With
    `skip_leaves=True` tensors without a grad_fn (parameters, inputs: alive anyway) are not
    recorded at all. The recorder keeps only weak references: it never keeps a tensor alive,
    and it hands autograd a detached alias (same storage) so a saved output makes no cycle.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = (), skip_leaves: bool = False):
        self.excluded = {storage_key(t) for t in exclude}
        self.skip_leaves = skip_leaves
        self.storages: dict[tuple, int] = {}  # storage -> bytes, each counted once
        self.rows: list[dict] = []  # one per save: shape, dtype, storage bytes, whether counted
        self._refs: list[tuple[weakref.ref, tuple, int]] = []  # (alias, storage, bytes) for alive()
        self._hooks = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if self.skip_leaves and t.grad_fn is None:
            return t
        key, nbytes = storage_key(t), t.untyped_storage().nbytes()
        excluded = key in self.excluded
        counted = not excluded and key not in self.storages
        self.rows.append({"shape": tuple(t.shape), "dtype": str(t.dtype), "storage_nbytes": nbytes, "counted": counted,
                          "why not": "" if counted else ("parameter" if excluded else "already counted")})
        if counted:
            self.storages[key] = nbytes
        kept = t.detach()  # an alias of the same storage
        if not excluded:
            self._refs.append((weakref.ref(kept), key, nbytes))
        return kept

    def __enter__(self) -> "SavedTensors":
        _recording()  # counted when a cell records (lesson 04's predict_saved_bytes notices it, earlier=)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self._hooks.__exit__(*exc)
        return False

    @property
    def nbytes(self) -> int:
        """Bytes of the distinct storages saved while recording (parameters excluded)."""
        return sum(self.storages.values())

    def alive(self) -> tuple[int, int]:
        """(storages, bytes) of recorded saves still held now, each storage counted once."""
        storages = {key: nbytes for ref, key, nbytes in self._refs if ref() is not None}
        return len(storages), sum(storages.values())


def graph_nodes(tensors: Iterable[torch.Tensor]) -> int:
    """Backward nodes reachable from `tensors` through grad_fn (0 for detached tensors)."""
    seen: set[int] = set()
    stack = [t.grad_fn for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}


def mlp(widths: Iterable[int], activation: str = "relu", seed: int = 0) -> nn.Sequential:
    """Linear(widths[0], widths[1]), activation, Linear(widths[1], widths[2]), ..., a Linear last: float32."""
    widths = list(widths)
    if len(widths) < 2:
        raise ValueError(f"an MLP needs at least two widths, not {widths}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {list(ACTIVATIONS)}, not {activation!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths, widths[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(widths) - 2:
                layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def relu_mlp(widths: Iterable[int], seed: int = 0) -> nn.Sequential:
    """Linear(widths[0], widths[1]), ReLU, Linear(widths[1], widths[2]), ..., a Linear last: float32."""
    return mlp(widths, "relu", seed)


@course_only("grader.memory.saved_bytes")
def saved_bytes(model: nn.Module, batch: torch.Tensor) -> int:
    """Bytes `model(batch)` saves for backward, measured with `SavedTensors` (parameters excluded)."""
    with SavedTensors(exclude=model.parameters()) as saved:
        model(batch)
    return saved.nbytes


def dropout_mask_bytes(device: torch.device | str) -> int:
    """Bytes per element of the mask dropout keeps: CUDA's fused kernel keeps bool, elsewhere a float32 noise tensor."""
    return 1 if torch.device(device).type == "cuda" else 4


def activation_model(shape: Shape, batch: int, seq: int, element_bytes: int = 4, mask_bytes: int = 4,
                     checkpointing: bool = False, loss: bool = False, peak: bool = True) -> int:
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
    Checkpointing keeps only each block's input (b·s·d per block) plus the outside terms after
    the forward pass; during backward each block's forward runs again and its activations are
    alive until that block's backward is done, so the peak is that plus one block's activations
    (less the block's input, which is its checkpoint).
    `peak=False` gives what is kept after the forward pass alone (what the hooks see there).
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
        kept = outside + L * e * b * s * d
        return kept + block - e * b * s * d if peak else kept  # the rebuilt block's input is its checkpoint, kept already
    return outside + L * block


def shape_from_row(row: dict, dropout: float = 0.0, seq: int | None = None) -> Shape:
    """A `Shape` from a data/models.csv row (dropout off: large models train without it)."""
    return Shape(n_layers=row["n_layers"], d_model=row["d_model"], n_heads=row["n_heads"], d_ff=row["d_ff"],
                 vocab_size=row["vocab_size"], max_seq_len=seq or row["max_seq_len"], dropout=dropout)


def block_activation_model(shape: Shape, batch: int, seq: int, element_bytes: int = 4, mask_bytes: int = 4) -> int:
    """Model: bytes one block saves for backward (what checkpointing rebuilds for one block during backward)."""
    one = dataclasses.replace(shape, n_layers=1)
    return (activation_model(one, batch, seq, element_bytes, mask_bytes)
            - activation_model(dataclasses.replace(shape, n_layers=0), batch, seq, element_bytes, mask_bytes))


# --- serving: weights and the KV cache ------------------------------------------------------


@course_only("grader.memory.kv_cache_bytes")  # lesson 09's kv_cache_bytes check notices a cell that called it first
@sealed("04_memory")
def kv_cache_bytes(row: dict, batch: int, seq: int, element_bytes: int = 2) -> int:
    """Model: the KV cache of a data/models.csv shape, every layer attending to every token kept (sealed,
    grader.checks._sealed: lesson 09's kv_cache_bytes exercise is this and more)."""


@course_only("grader.memory.inference_bytes")
def inference_bytes(row: dict, batch: int, seq: int, weight_bytes: int = 2, kv_bytes: int = 2) -> dict[str, int]:
    """Model: what serving holds: the weights and the KV cache (nothing is saved for backward under no_grad).

    The working tensors of the layer being computed come and go on top of these; for long
    contexts and big batches the KV cache, not the weights, is what grows.
    """
    return {"weights": row["n_params"] * weight_bytes, "KV cache": kv_cache_bytes(row, batch, seq, kv_bytes)}


# --- the chip: its memory as nvidia-smi reports it, less the CUDA context -------------------


def card_bytes(chip) -> int:
    """Model: a chip's memory as nvidia-smi reports its total: the datasheet's GB read as GiB (JEDEC), e.g. 80 GB -> 81,920 MiB."""
    if chip.vendor != "NVIDIA" or not chip.memory_bytes:
        raise ValueError(f"{chip.name}: card memory as nvidia-smi reports it is modelled for NVIDIA cards only")
    constant = specs.model_constants()["datasheet_gb_in_bytes"]["value"]
    return int(round(chip.memory_bytes / 1e9 * constant))  # specs.Chip keeps memory_gb × 1e9


def context_reserve_bytes() -> int:
    """Model assumption: memory a process's CUDA context (and the libraries it loads) takes before any tensor."""
    return int(specs.model_constants()["cuda_context_reserve_bytes"]["value"])


def usable_bytes(chip) -> int:
    """Model: what tensors can use on `chip`: the card's memory less the CUDA context reserve."""
    return card_bytes(chip) - context_reserve_bytes()


def chip_label(chip) -> str:
    """How a chip's memory line is labelled: name, card GiB, the reserve, usable GiB (all a model)."""
    return (f"{chip.name}: {card_bytes(chip) / GIB:.0f} GiB − {context_reserve_bytes() / GIB:g} GiB CUDA context "
            f"= {usable_bytes(chip) / GIB:.0f} GiB (model)")


# --- will it fit ----------------------------------------------------------------------------


def fit(row: dict, memory_bytes: int, precision: str, optimizer: str, batch: int, seq: int, checkpointing: bool,
        gpus: int, training_bytes: Callable[[int, str, str], int], max_batch: Callable[[int, dict[int, int]], int],
        activation_bytes_of: Callable[[dict, int, int, str, bool], int]) -> dict:
    """The calculator's arithmetic: the four terms per GPU, the total, and the largest batch that fits in `memory_bytes`.

    `training_bytes` and `max_batch` are the learner's (max_batch gets the modelled peaks at batches
    1 and 2); `activation_bytes_of(row, batch, seq, precision, checkpointing)` the activation model. The optimizer state is sharded across
    `gpus` (ZeRO stage 1); weights, gradients and activations are whole on every GPU.
    """
    n = row["n_params"]
    terms = training_terms(precision, optimizer)
    weights, grads = int(terms["parameters"] * n), int(terms["gradients"] * n)
    opt_state = (training_bytes(n, precision, optimizer) - weights - grads) / gpus
    one = activation_bytes_of(row, 1, seq, precision, checkpointing)
    two = activation_bytes_of(row, 2, seq, precision, checkpointing)
    per_sample, act_fixed = two - one, 2 * one - two  # the model is a line in batch
    fixed = int(weights + grads + opt_state + act_fixed)
    stack = {"parameters": weights, "gradients": grads,
             f"optimizer state (/{gpus} GPUs)" if gpus > 1 else "optimizer state": opt_state,
             "activations (model)": act_fixed + per_sample * batch}
    total = sum(stack.values())
    return {"stack": stack, "total": total, "fits": total <= memory_bytes, "fixed": fixed, "per_sample": per_sample,
            "largest_batch": max_batch(int(memory_bytes), {1: fixed + per_sample, 2: fixed + 2 * per_sample})}
