"""Mixed precision end to end (lesson 06): a toy task, training runs per format, and what this CPU can do in low precision.

    model, x, y = make_task(seed=0)
    run = train(lambda m, o: my_step(m, o, x, y), "bf16", steps=60)
    run.losses, run.scales, run.skipped          # what the run did, step by step

Everything here runs on any device; nothing times anything (lessons time with
grader.timing). The CPU has no peak-memory counter, so `saved_for_backward`
measures what a step keeps for backward with saved-tensor hooks
(grader.memory.SavedTensors), and says so in its name.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from grader import memory, specs
from grader.shortcuts import course_only

# display name -> autocast dtype (None: plain fp32, no autocast)
FORMATS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}

# /proc/cpuinfo flags that matter for low-precision arithmetic on x86 CPUs
LOW_PRECISION_FLAGS = ("avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16", "amx_tile", "avx512f", "avx2")


def cpu_instructions() -> dict:
    """What this CPU offers for low precision: torch's dispatch level and the relevant /proc/cpuinfo flags."""
    capability = torch.backends.cpu.get_cpu_capability()
    flags: list[str] | None = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    present = set(line.split(":", 1)[1].split())
                    flags = [flag for flag in LOW_PRECISION_FLAGS if flag in present]
                    break
    except OSError:  # not Linux: no /proc/cpuinfo
        flags = None
    bf16 = None if flags is None else any(f in flags for f in ("avx512_bf16", "amx_bf16"))
    fp16 = None if flags is None else any(f in flags for f in ("avx512_fp16", "amx_fp16"))
    return {"capability": capability, "flags": flags, "bf16_instructions": bf16, "fp16_instructions": fp16}


def describe_cpu(info: dict) -> str:
    """One sentence saying which low-precision instructions this CPU has (or that it could not tell)."""
    if info["flags"] is None:
        return (f"torch dispatches CPU kernels at level {info['capability']}; this system has no /proc/cpuinfo, "
                "so the lesson cannot say which bf16/fp16 instructions the CPU has: only the timings below tell.")
    has = ", ".join(info["flags"]) or "none of " + ", ".join(LOW_PRECISION_FLAGS)
    bf16 = "has" if info["bf16_instructions"] else "has no"
    fp16 = "has" if info["fp16_instructions"] else "has no"
    return (f"torch dispatches CPU kernels at level {info['capability']}; /proc/cpuinfo lists {has}. "
            f"So this CPU {bf16} bf16 matrix instructions (avx512_bf16/amx_bf16) and {fp16} fp16 ones "
            "(avx512_fp16/amx_fp16).")


# --- the toy task --------------------------------------------------------------------------------


def make_task(seed: int = 0, d_in: int = 32, width: int = 64, batch: int = 256,
              device: torch.device | str = "cpu") -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small MLP and a fixed regression batch: (model, x (batch, d_in), y (batch, 1)), the same for a seed."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(d_in, width), nn.GELU(), nn.Linear(width, 1))
    x = torch.randn(batch, d_in, generator=gen)
    teacher = torch.randn(d_in, 1, generator=gen) / math.sqrt(d_in)
    y = torch.sin(3 * x @ teacher)  # a smooth target the MLP can learn
    return model.to(device), x.to(device), y.to(device)


def scaled_mse(loss_scale: float) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Mean squared error (in float32) times `loss_scale`: a small factor stands in for the tiny gradients of a deep net."""

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return loss_scale * F.mse_loss(out.float(), target.float())

    return loss_fn


def first_layer(model: nn.Module) -> nn.Linear:
    """The model's first Linear layer."""
    return next(m for m in model.modules() if isinstance(m, nn.Linear))


@dataclass
class TrainingRun:
    """What one training run did, step by step."""

    label: str
    losses: list[float] = field(default_factory=list)  # the loss each step returned, divided by the task's loss_scale
    scales: list[float] | None = None  # the scaler's scale after each step (None without a scaler)
    skipped: list[int] = field(default_factory=list)  # steps the step said it did not apply (else: left every weight unchanged)
    unchanged: list[int] = field(default_factory=list)  # steps that left every weight where it was
    zero_grads: list[float] = field(default_factory=list)  # fraction of the first layer's weight gradients that are 0

    @property
    def final(self) -> float:
        return self.losses[-1] if self.losses else math.nan


def train(step: Callable[[nn.Module, torch.optim.Optimizer], Any], label: str, steps: int, seed: int = 0,
          lr: float = 1e-2, loss_scale: float = 1.0, scaler: torch.amp.GradScaler | None = None,
          task: Callable[[int], tuple] = make_task, eps: float = 1e-8) -> TrainingRun:
    """Train task(seed)'s model with Adam(lr, eps) for `steps` calls of step(model, opt); record loss, scale, skipped steps, zero gradients.

    step returns the loss, or (the loss, whether the optimizer's step was applied): then `skipped` holds what the step
    said, else the steps that left every weight unchanged.

    Adam's eps does not scale with the loss: with a loss × 1e-6 the gradients fall below the default 1e-8 and eps
    shrinks every step, so a run of a scaled loss should pass eps scaled by the same factor.
    """
    model, _, _ = task(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, eps=eps)
    run = TrainingRun(label, scales=[] if scaler is not None else None)
    for i in range(steps):
        before = [p.detach().clone() for p in model.parameters()]
        result = step(model, opt)
        loss, applied = result if isinstance(result, tuple) else (result, None)
        run.losses.append(float(loss.detach().float()) / loss_scale)
        grad = first_layer(model).weight.grad
        run.zero_grads.append(1.0 if grad is None else float((grad == 0).float().mean()))
        unchanged = all(torch.equal(b, p) for b, p in zip(before, model.parameters()))
        if unchanged:
            run.unchanged.append(i)
        if (not applied) if applied is not None else unchanged:
            run.skipped.append(i)
        if scaler is not None:
            run.scales.append(float(scaler.get_scale()))
    return run


def halved_where_skipped(run: TrainingRun) -> bool:
    """True when the scale went down exactly on the skipped steps, each time by half (GradScaler's rule)."""
    if run.scales is None:
        return False
    previous = [run.scales[0] * 2 if 0 in run.skipped else run.scales[0]] + run.scales[:-1]
    lowered = [i for i, (a, b) in enumerate(zip(previous, run.scales)) if b < a]
    halved = all(run.scales[i] == previous[i] / 2 for i in lowered)
    return lowered == run.skipped and halved


def skip_cost_words(run: TrainingRun, reference: TrainingRun, rtol: float = 0.05) -> str:
    """What a run's skipped steps cost, in words, from its losses beside the reference's: at an equal count of steps
    taken, and at an equal count of steps applied (within `rtol`, relative, counts as where the reference was)."""
    steps, applied = len(run.losses), len(run.losses) - len(run.skipped)
    if not steps or len(reference.losses) < steps:
        return "the reference has fewer steps than this run, so the two cannot be set side by side."
    if applied == 0:
        return f"none of its {steps} steps was applied: the run is where it started, {steps} steps behind fp32."
    at_applied = reference.losses[applied - 1]
    gap = abs(run.final / at_applied - 1) if at_applied else math.inf
    said = (f"A skipped step is a step not taken: after {steps} steps this run's loss is {run.final:.4f}, where fp32 had "
            f"{at_applied:.4f} after {applied} steps and {reference.final:.4f} after {steps}. ")
    if not math.isfinite(run.final):
        return said + "The run's loss is not finite: it blew up."
    if gap <= rtol:
        return said + (f"Counted in applied steps it is where fp32 was (within {max(gap, 0.001):.1%}): its applied "
                       "steps took it as far as fp32's took fp32, and the overflows cost steps. Counted in steps "
                       "taken it is behind fp32: judged at fp32's step count (section 4), those skipped steps count "
                       "against it.")
    return said + (f"Counted in applied steps too it is {gap:.0%} from where fp32 was: here the run differs from fp32 "
                   "by more than its skipped steps account for.")


# --- what a step keeps for backward --------------------------------------------------------------


def derived_from_parameter(t: torch.Tensor, parameters: set[int]) -> bool:
    """Whether autograd made `t` from one parameter alone (ids in `parameters`), through ops of one input: a cast of a
    weight and views of it (autocast's low-precision copy, transposed for a matmul), never an activation."""
    node = t.grad_fn
    while node is not None:
        variable = getattr(node, "variable", None)  # AccumulateGrad: the leaf the chain started from
        if variable is not None:
            return id(variable) in parameters
        inputs = [n for n, _ in node.next_functions if n is not None]
        if len(inputs) != 1:  # an op of several inputs (a matmul, an add): what it made is not a copy
            return False
        node = inputs[0]
    return False


class _SavedWithOrigin(memory.SavedTensors):
    """The course's saved-tensor recorder, each row also saying whether the save is a copy of a parameter."""

    def __init__(self, parameters: list[torch.Tensor]):
        super().__init__(exclude=parameters)
        self._parameters = {id(p) for p in parameters}

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        before = len(self.rows)
        kept = super()._pack(t)
        if len(self.rows) > before:  # a row was recorded for this save
            self.rows[-1]["weight copy"] = t.dtype != torch.float32 and derived_from_parameter(t, self._parameters)
        return kept


def saved_for_backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable,
                       dtype: torch.dtype | None) -> dict:
    """Bytes autograd saves for backward in one forward + loss under autocast to `dtype` (None: fp32), by dtype.

    Measured with saved-tensor hooks (grader.memory.SavedTensors), each storage once,
    parameters not counted; the low-precision copies autocast makes of the weights are
    (`weight_copies`: saved low-precision tensors autograd made from a parameter alone, by a cast
    and views: told by their history, not by their shape, so an activation shaped like a weight
    is never one).
    """
    device_type = x.device.type
    with _SavedWithOrigin(list(model.parameters())) as saved:
        with torch.autocast(device_type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss_fn(model(x), y)
    by_dtype: dict[str, int] = {}
    copies = 0
    for row in saved.rows:
        if row["counted"]:
            name = row["dtype"].removeprefix("torch.")
            by_dtype[name] = by_dtype.get(name, 0) + row["storage_nbytes"]
            if row["weight copy"]:
                copies += row["storage_nbytes"]
    return {"total": saved.nbytes, "by_dtype": by_dtype, "rows": list(saved.rows), "weight_copies": copies}


def clone_model(model: nn.Module) -> nn.Module:
    """An independent copy of `model` (weights included)."""
    return copy.deepcopy(model)


# --- a GPU when there is none: a labelled model -------------------------------------------------------


def lesson_constants() -> dict:
    """The modelling assumptions of lesson 06 (data/lesson06_model.json), each with its source."""
    with open(specs.data_dir() / "lesson06_model.json", encoding="utf-8") as f:
        return json.load(f)


GPU_FORMATS = ("fp32", "tf32", "bf16", "fp16")


# What autocast saves for backward in TinyGPT, per tensor and dtype, by the device's policy (read from torch's op lists:
# the documentation's "CUDA Ops that can autocast to float32" has layer_norm, softmax and log_softmax; on the CPU they
# are on no list and run in their input's type). Each term is (elements per token or per s² element, bytes of each).
POLICY_SOFTMAX_FP32 = {"cuda": True, "cpu": False}


def autocast_activation_model(shape, batch: int, seq: int, low_bytes: int = 2, device_type: str = "cuda",
                              loss: bool = True) -> int:
    """Model: bytes `TinyGPT(shape)` saves for backward under autocast on `device_type`, each tensor at its own dtype.

    Not a uniform `low_bytes` per element: the residual stream stays float32 (the embeddings are float32 and an add
    of float32 and bf16 promotes to float32), so each LayerNorm saves a float32 input and its float32 mean and
    1/std; a matmul saves its inputs cast to the low type (the LayerNorm's output, q, k, v, the attention output,
    fc1's output and GELU's); the causal mask is bool; the loss keeps float32 log-probabilities. The softmax: on
    CUDA it is on autocast's float32 list, so it saves a float32 output and the matmul after it a low-precision
    copy of it (4 + 2 bytes per b·h·s² element); on the CPU it runs in its input's type and the matmul reads the
    same tensor (2 bytes). autocast's low-precision copies of the weights are not activations (gpu_step_model
    counts them). Dropout is left out: the lesson's GPU model trains without it. Checked against the saved-tensor
    recorder under the CPU's policy (tests/test_lesson06_content.py).
    """
    if shape.dropout:
        raise ValueError("autocast_activation_model models TinyGPT without dropout (the lesson's GPU runs)")
    b, s, d, h, f, L = batch, seq, shape.d_model, shape.n_heads, shape.d_ff, shape.n_layers
    low, fp32 = low_bytes, 4
    attention = (fp32 + low) if POLICY_SOFTMAX_FP32[device_type] else low  # per b·h·s² element
    block = (fp32 * 2 * b * s * d  # ln1 and ln2 inputs: the float32 residual stream
             + low * 6 * b * s * d  # ln1 output cast for qkv, q, k, v, attention output (proj input), ln2 output cast
             + low * 2 * b * s * f  # fc1 output (GELU input), GELU output (fc2 input)
             + attention * b * h * s * s
             + fp32 * 4 * b * s  # two LayerNorms' mean and 1/std
             + s * s)  # the causal mask, bool
    outside = (8 * b * s + 8 * s  # token ids and positions, int64
               + fp32 * b * s * d + fp32 * 2 * b * s  # ln_f input (the residual stream) and its statistics
               + low * b * s * d)  # ln_f output cast for the tied head's matmul
    if loss:
        outside += fp32 * b * s * shape.vocab_size + 4  # log-probabilities of the float32 logits, nll's total weight
    return outside + L * block


def gpu_step_model(chip: specs.Chip, n_params: int, shape, batch: int, seq: int, fmt: str) -> dict:
    """Model: one AdamW training step of a transformer on `chip` in `fmt`: seconds, tokens/s, peak bytes.

    step_seconds: 6 × parameters × tokens FLOPs at the datasheet peak for `fmt` (tensor cores for
    tf32/bf16/fp16), so a lower bound that real kernels do not reach. peak bytes: 16 bytes per
    parameter (fp32 weights, fp32 gradients, AdamW's two fp32 moments: autocast keeps all of them
    in fp32), plus autocast's 2-byte copy of the weights in bf16/fp16, plus the activations: lesson
    04's model in float32 for fp32 and tf32, and for bf16/fp16 `autocast_activation_model` on CUDA,
    each tensor at the dtype CUDA's autocast policy gives it (not a uniform 2 bytes).
    """
    constants = lesson_constants()
    flops = constants["training_flops_per_parameter_per_token"]["value"] * n_params * batch * seq
    seconds = flops / chip.peak(fmt)
    low = fmt in ("bf16", "fp16")
    state = 16 * n_params + (2 * n_params if low else 0)
    if low:
        activations = autocast_activation_model(shape, batch, seq, low_bytes=2, device_type="cuda", loss=True)
    else:
        activations = memory.activation_model(shape, batch, seq, element_bytes=4, mask_bytes=1, loss=True)
    return {"step_seconds": seconds, "tokens_per_second": batch * seq / seconds, "peak_bytes": state + activations,
            "state_bytes": state, "activation_bytes": activations}


def gpu_label(chip: specs.Chip) -> str:
    """The label every modelled GPU figure carries."""
    return f"{chip.name} (model: datasheet peak, 6·N·tokens FLOPs, lesson 04's memory model; not a measurement)"




@course_only()
def leaf_dtypes(model: nn.Module, x: torch.Tensor, device_type: str, dtype: torch.dtype) -> dict[str, tuple]:
    """For each leaf module that ran in `model(x)` under autocast: (the dtype of its first input, of its output).

    The lesson's tables read the policy's evidence with it once low_precision_ops is checked; a learner's
    low_precision_ops that calls it is noticed by the check."""
    seen: dict[str, tuple] = {}
    handles = [m.register_forward_hook(lambda mod, inp, out, n=n: seen.__setitem__(n, (inp[0].dtype, out.dtype)))
               for n, m in model.named_modules() if not list(m.children())]
    try:
        with torch.autocast(device_type, dtype=dtype):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def policy_words(table) -> str:
    """What this run shows of autocast's policy for each module fed a floating-point tensor, in words, from lesson 06's
    policy table; and for which modules it cannot tell.

    `table` has, per leaf module, the columns "module", "bf16: input" and "bf16: output" (dtype names). Only a change
    of type shows the policy: float32 in and bf16 out, the policy lowered the module; bf16 in and float32 out, it sent
    it to float32 (on CUDA: layer_norm, log_softmax, ...). A module whose output has its input's type may be on a list
    that gives that type anyway (a matmul fed bf16 is lowered to bf16) or run in its input's type: this run cannot
    tell which, and the words say so. Built from what was measured, never a fixed sentence.
    """
    rows = table.to_dict("index") if hasattr(table, "to_dict") else dict(table)
    floating = ("float32", "bfloat16")

    def named(received: str, returned: str) -> list[str]:
        return [f"{r['module']} ({name})" for name, r in rows.items()
                if r.get("bf16: input") == received and r.get("bf16: output") == returned]

    def them(modules: list[str]) -> str:
        return "it" if len(modules) == 1 else "them"

    said = []
    lowered, raised = named("float32", "bfloat16"), named("bfloat16", "float32")
    kept_low, kept_fp32 = named("bfloat16", "bfloat16"), named("float32", "float32")
    if lowered:
        said.append(f"{', '.join(lowered)} received float32 and returned bf16: the policy lowered {them(lowered)}")
    if raised:
        said.append(f"{', '.join(raised)} received bf16 and returned float32: on autocast's float32 list on this device")
    if kept_low:
        said.append(f"{', '.join(kept_low)} received bf16 and returned bf16: this run cannot tell whether the policy "
                    f"lowers {them(kept_low)} or lets {them(kept_low)} run in the input's type (either gives bf16 "
                    "from a bf16 input)")
    if kept_fp32:
        said.append(f"{', '.join(kept_fp32)} received float32 and returned float32: this run cannot tell whether the "
                    f"policy sends {them(kept_fp32)} to float32 or lets {them(kept_fp32)} run in the input's type")
    if not any(r.get("bf16: input") in floating for r in rows.values()):
        return "no module received a floating-point input, so the table shows nothing of the policy."
    if not said:
        return "no module received float32 or bf16 and returned one of them, so the table shows nothing of the policy."
    return "; ".join(said) + "."


def _than_fp32(ratio: float) -> str:
    """'2.0× slower' / '3.0× faster' for a time ratio (low precision ÷ fp32)."""
    if abs(ratio - 1) < 0.005:
        return "as fast as"
    return f"{max(ratio, 1 / ratio):.1f}× {'faster' if ratio < 1 else 'slower'} than"


def step_vs_matmul_words(step_ratio: dict[str, float], matmul_ratio: dict[str, float], n: int) -> str:
    """How each format's step time changed against its matmul's, in words, from measured ratios (time in the format ÷
    time in fp32): which moved more, and whether in the same direction. Claims no speed-up it did not measure."""
    clauses = []
    for fmt in step_ratio:
        s, m = step_ratio[fmt], matmul_ratio[fmt]
        if (s > 1) != (m > 1):
            how = "the other way"
        elif abs(math.log(s)) < abs(math.log(m)):
            how = "by a smaller factor than the matmul"
        else:
            how = "by a larger factor than the matmul"
        article = "an" if fmt[:1] in "aefhilmnorsx" else "a"  # an fp16, a bf16
        clauses.append(f"{article} {fmt} step was {_than_fp32(s)} fp32's, the {n}² matmul {_than_fp32(m)} fp32's: "
                       f"the step changed {how}")
    return ("A step is more than this one matmul: its matmuls have other shapes, forward and backward, and autocast's "
            "casts, the loss, Adam's update (all in fp32) and the scaler's inf checks take time too, so a step's ratio "
            "need not be a matmul's. Here " + "; ".join(clauses) + ".")
