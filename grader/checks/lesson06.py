"""Checks for lesson 06 (mixed precision end to end): a training step with autocast and a scaler, the per-op policy,
a smoothed loss curve and its verdict, and which formats need a scaler.

amp_step is checked by running it on the CPU (fp16 with GradScaler("cpu"), and bf16 without a
scaler) and recording what it did: the dtypes its layers produced, what its loss returned and what
gradient entered it, the scale, the weights, what backward made and what the optimizer used. No
reference step is here: the check is keyed (grader.checks._keys), its judge and the course's
reference step are the instructor's (solutions/judges/lesson06.py). The autocast policy is the
device's own: low_precision_ops is keyed too, on what autocast does here, never on a list written
for CUDA.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from grader import amp, floats
from grader.checks._common import Check, Replay, call, close, fail, guard, is_number, require_callable
from grader.checks._keys import Keyed, outcomes
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson06.expect
from grader.notebook import CheckFailed, NotDone

DEVICE_TYPE = "cpu"  # checks run on the CPU, where autocast and GradScaler("cpu") both work

# --- amp_step ------------------------------------------------------------------------------------


def _task(seed: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small MLP and one regression batch, the same in every process for a seed."""
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 1))
    x = torch.randn(64, 16, generator=gen)
    y = torch.sin(2 * x[:, :1] - x[:, 1:2])
    return model, x, y


def _scaled_mse(loss_scale: float) -> Callable:
    def loss_fn(out, target):
        return loss_scale * F.mse_loss(out.float(), target)

    return loss_fn


NO_CLIP = 1e9  # a max_norm no gradient reaches: clipping does nothing
# name -> (dtype, scaler settings or None, loss_scale, steps, learning rate, optimizer, max_norm, the step whose
# backward gives NaN though its loss is finite, or None)
_SCENARIOS = {
    "fp16, loss × 1e-6, GradScaler": (torch.float16, {"init_scale": 2.0**16}, 1e-6, 6, 3e-2, "adam", NO_CLIP, None),
    "fp16, forced overflow": (torch.float16, {"init_scale": 2.0**40}, 1.0, 1, 3e-2, "adam", NO_CLIP, None),
    "bf16, no scaler": (torch.bfloat16, None, 1.0, 2, 3e-2, "adam", NO_CLIP, None),
    # SGD moves each weight by lr × its gradient, so a gradient clipped to the wrong norm shows in the weights
    # (Adam's first steps hardly depend on the gradient's size). The true gradient's norm is well above max_norm.
    "fp16, GradScaler, clipped": (torch.float16, {"init_scale": 2.0**10}, 1.0, 3, 0.5, "sgd", 0.05, None),
    "bf16, clipped": (torch.bfloat16, None, 1.0, 2, 0.5, "sgd", 0.05, None),
    # the second step's loss is finite but its backward gives NaN (as sqrt's does at 0): no scaler is there to see it
    "bf16, a NaN gradient": (torch.bfloat16, None, 1.0, 3, 3e-2, "adam", 1.0, 1),
    # the first step of a warm-up from lr 0: the optimizer steps and no weight moves
    "fp16, GradScaler, lr 0": (torch.float16, {"init_scale": 2.0**16}, 1.0, 1, 0.0, "adam", 1.0, None),
    "bf16, lr 0": (torch.bfloat16, None, 1.0, 1, 0.0, "adam", 1.0, None),
}


class _NaNBackward(torch.autograd.Function):
    """The identity forward; a backward that sends NaN on (a finite loss whose gradient is not, as sqrt's at 0)."""

    @staticmethod
    def forward(ctx, loss):
        return loss.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * math.nan


def _params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().float().reshape(-1) for t in tensors])


def _watched_loss(loss_scale: float, seen: dict, nan_at: int | None = None) -> Callable:
    """The scenario's loss, recording whether autocast was on when it ran, what it computed, and the gradient
    backward sent into it; at call `nan_at` (counted from 0) a finite loss whose backward gives NaN.

    The gradient reaching the loss is 1 for a plain backward and the scale S for scaler.scale(loss).backward():
    so the check sees whether (and by how much) a step scaled its loss.
    """
    plain = _scaled_mse(loss_scale)

    def loss_fn(out, target):
        seen["loss_autocast"].append(bool(torch.is_autocast_enabled(DEVICE_TYPE)))
        loss = plain(out, target)
        if nan_at is not None and len(seen["loss_values"]) == nan_at and loss.requires_grad:
            loss = _NaNBackward.apply(loss)
        seen["loss_values"].append(float(loss.detach().float().reshape(-1)[0]))
        if loss.requires_grad:
            loss.register_hook(lambda g: seen["loss_grad"].append(float(g.detach().float().reshape(-1)[0])))
        return loss

    return loss_fn


def _run_scenario(amp_step: Callable, name: str, seed: int = 0, steps: int | None = None) -> dict:
    """Run `amp_step` for a scenario's steps on task(seed); what it returned and did, as plain data.

    Beside the weights after each step it records, per step, the gradient backward made for each weight (a hook
    on the weight, before anything is added to .grad) and the gradient the optimizer found when it was called.
    """
    dtype, settings, loss_scale, default_steps, lr, optimizer, max_norm, nan_at = _SCENARIOS[name]
    steps = default_steps if steps is None else steps
    model, x, y = _task(seed)
    opt = (torch.optim.Adam(model.parameters(), lr=lr) if optimizer == "adam" else
           torch.optim.SGD(model.parameters(), lr=lr))
    scaler = None if settings is None else torch.amp.GradScaler(DEVICE_TYPE, growth_interval=2000, **settings)
    linear_out: list[str] = []
    params = list(model.parameters())
    fresh: dict[int, torch.Tensor] = {}  # what backward made for each weight in this step
    used: list[torch.Tensor] = []  # the gradients the optimizer found, once per opt.step() in this step

    def made(i: int) -> Callable:
        def hook(g):
            fresh[i] = fresh[i] + g.detach().float() if i in fresh else g.detach().float().clone()
        return hook

    hooks = [m.register_forward_hook(lambda mod, inp, out: linear_out.append(str(getattr(out, "dtype", type(out).__name__))))
             for m in model.modules() if isinstance(m, nn.Linear)]
    hooks += [p.register_hook(made(i)) for i, p in enumerate(params)]
    hooks.append(opt.register_step_pre_hook(lambda o, args, kwargs: used.append(
        _flat(p.grad if p.grad is not None else torch.zeros_like(p) for p in params))))
    seen: dict[str, Any] = {"losses": [], "returned": [], "scales": [], "params": [], "grads": [], "zero_grads": [],
                            "loss_autocast": [], "loss_grad": [], "loss_values": [], "made": [], "used": [],
                            "applied": []}
    loss_fn = _watched_loss(loss_scale, seen, nan_at)
    try:
        for i in range(steps):
            before = _params(model)
            fresh.clear()
            used.clear()
            try:
                result = amp_step(model, opt, x, y, loss_fn, DEVICE_TYPE, dtype, scaler, max_norm)
            except NotImplementedError:
                raise NotDone("amp_step") from None
            except Exception as exc:  # noqa: BLE001  the judge says what the crash means
                seen["raised"] = {"step": i, "name": type(exc).__name__, "message": str(exc)[:500]}
                break
            loss, applied = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
            seen["returned"].append(type(result).__name__ if applied is None else f"({type(loss).__name__}, "
                                    f"{type(applied).__name__})")
            seen["applied"].append(_as_flag(applied))
            value = loss.detach().float().reshape(-1)[0].item() if isinstance(loss, torch.Tensor) and loss.numel() else None
            seen["losses"].append(value)
            if i == 0:
                seen["linear_out"] = list(linear_out)
            seen["scales"].append(None if scaler is None else float(scaler.get_scale()))
            after = _params(model)
            seen["params"].append(torch.cat([p.reshape(-1) for p in after]))
            grad = model[0].weight.grad
            seen["grads"].append(None if grad is None else grad.detach().float().reshape(-1).clone())
            seen["zero_grads"].append(None if grad is None else float((grad == 0).float().mean()))
            seen["made"].append(_flat(fresh.get(k, torch.zeros_like(p)) for k, p in enumerate(params))
                                if fresh else None)
            seen["used"].append(list(used))
            seen.setdefault("changed", []).append(not all(torch.equal(a, b) for a, b in zip(before, after)))
            seen.setdefault("finite", []).append(all(bool(torch.isfinite(p).all()) for p in after))
    finally:
        for h in hooks:
            h.remove()
    seen["init_scale"] = None if settings is None else settings["init_scale"]
    seen["loss_scale"] = loss_scale
    seen["max_norm"] = max_norm
    return seen


def _as_flag(applied: Any) -> Any:
    """What amp_step said of its step: a bool (a one-element bool tensor read as one), else the type it gave."""
    if isinstance(applied, bool):
        return applied
    if isinstance(applied, torch.Tensor) and applied.numel() == 1 and applied.dtype == torch.bool:
        return bool(applied.item())
    return type(applied).__name__


def _observe_amp_step(amp_step: Callable) -> dict:
    require_callable(amp_step, "amp_step")
    return {name: _run_scenario(amp_step, name) for name in _SCENARIOS}


def _judge_crash(name: str, seen: dict) -> None:
    raised = seen.get("raised")
    if not isinstance(raised, dict):
        return
    message = str(raised.get("message"))
    if "No inf checks were recorded" in message:
        fail(f"in the {name} run, scaler.update() found no record of a checked step: the optimizer step went "
             "through opt.step() instead of scaler.step(opt). scaler.step unscales the gradients, checks them for "
             "inf/NaN and skips the step if it finds any; update() then sets the next scale from what it found.")
    if "_scale is None" in message:
        fail(f"in the {name} run, scaler.step(opt) found that scaler.scale(loss) was never called: the backward ran on "
             "the unscaled loss, so fp16 gradients underflow (below about 6e-8) before the scaler can help. "
             "The scale must enter the loss before backward, so that every gradient carries it.")
    if "step() has already been called since the last update()" in message:
        fail(f"in the {name} run the second step found the scaler still waiting for update(): scaler.update() was "
             "never called. It runs once per step, after scaler.step(opt): it lowers the scale after a skipped step "
             "and raises it after a run of good ones.")
    if "unscale_() has already been called" in message:
        fail(f"in the {name} run, scaler.unscale_ was called twice for one step: scaler.step(opt) unscales by itself.")
    fail(f"amp_step raised {raised.get('name')} in the {name} run at step {raised.get('step')}: {message}")


def _public_amp_step(observation: dict) -> None:
    """What can be said of amp_step without a reference step: it ran, and returned a loss as a tensor."""
    if not isinstance(observation, dict) or set(observation) != set(_SCENARIOS):
        fail("the check could not read what amp_step did (a recording of the wrong shape)")
    for name, seen in observation.items():
        if not isinstance(seen, dict):
            fail("the check could not read what amp_step did (a recording of the wrong shape)")
        _judge_crash(name, seen)
    first = observation[next(iter(_SCENARIOS))]
    if not first["returned"] or first["returned"][0] != "(Tensor, bool)" or not is_number(first["losses"][0]):
        got = first["returned"][0] if first["returned"] else "nothing"
        fail(f"amp_step returned {got}; return a pair: the loss, a 0-dim tensor (the unscaled loss_fn(...)), and "
             "whether the optimizer's step was applied, a bool.")


_NEAR = 1e-3  # two sizes within rounding of each other (relative)


def _size(norm: float, *marks: tuple[str, float]) -> str:
    """Which of the named sizes `norm` is, within rounding ('neither' when none)."""
    for label, mark in marks:
        if mark > 0 and math.isfinite(mark) and abs(norm - mark) <= _NEAR * mark:
            return label
    return "neither"


def _what_the_optimizer_used(seen: dict, i: int) -> list:
    """Per opt.step() call of step i: the gradient it found, beside the one backward made for this step's loss."""
    made, used = seen["made"][i], seen["used"][i]
    grad_in = seen["loss_grad"][i] if i < len(seen["loss_grad"]) else None
    if not isinstance(made, torch.Tensor) or not is_number(grad_in) or not grad_in:
        return [["no backward"] for _ in used] or ["no step"]
    true = made.double() / float(grad_in)  # the gradient of the loss itself: backward's, without what scaled it
    t = float(true.norm())
    out = []
    for g in used:
        g = g.double()
        if g.shape != true.shape or not bool(torch.isfinite(g).all()):
            out.append(["not finite"])
            continue
        u = float(g.norm())
        along = bool(t and u and float(g @ true) / (t * u) > 1 - _NEAR)
        out.append(["along" if along else "elsewhere", _size(u, ("the gradient's", t), ("max_norm", seen["max_norm"]))])
    return out or ["no step"]


def _amp_summary(observation: dict) -> dict:
    """What amp_step did, in facts that rounding cannot change: dtypes, flags, scales (powers of two), and how the
    loss it returned and the gradient the optimizer found stand to what loss_fn and backward made in that step."""
    facts = {}
    for name, seen in observation.items():
        n = len(seen["losses"])
        returned = []
        for i, (got, computed) in enumerate(zip(seen["losses"], seen["loss_values"])):
            grad_in = seen["loss_grad"][i] if i < len(seen["loss_grad"]) else None
            returned.append("as computed" if is_number(got) and got == computed else
                            "times the gradient sent into it" if is_number(got) and is_number(grad_in)
                            and close(got, computed * grad_in, 1e-6) else "other")
        facts[name] = {
            "returned": list(seen["returned"]) + returned,
            "linear_out": (seen.get("linear_out") or [None])[0],
            "loss_autocast": list(seen["loss_autocast"]),
            "loss_grad": list(seen["loss_grad"]),
            "scales": list(seen["scales"]),
            "changed": list(seen.get("changed", [])),
            "finite": list(seen.get("finite", [])),
            "optimizer": [_what_the_optimizer_used(seen, i) for i in range(n)],
            "applied": list(seen.get("applied", [])),
        }
        if seen["loss_scale"] != 1.0:  # the tiny loss must learn
            facts[name]["learned"] = bool(n and seen["losses"][-1] < 0.9 * seen["losses"][0])
    return facts


# The step's answer is not here: its judge, the course's reference step and the known mistakes it compares with are
# the instructor's (solutions/judges/lesson06.py); the keys hold digests of what each did, made by
# scripts/build_keys.py.
check_amp_step = Keyed(
    "06_mixed_precision", "amp_step", observe=_observe_amp_step, summary=_amp_summary, public=_public_amp_step,
    unknown="amp_step's step is not the one this lesson builds, nor a mistake the course knows. Go back over what "
            "must run inside autocast, where the scale enters the gradients and where it must have left them, "
            "which steps must not be applied and who sees them, how you know whether the optimizer stepped, and "
            "what the next step's backward must start from.")


def _instructor_judges():
    """The instructor's judges of this lesson (solutions/judges/lesson06.py, beside the course's source, never
    packaged): a hidden test runs only where the instructor grades, and compares with the reference step there."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "solutions" / "judges" / "lesson06.py"
    if not path.exists():
        fail("this hidden test compares with the instructor's reference step, which is not installed here "
             "(solutions/judges/lesson06.py): it runs where the class is graded")
    spec = importlib.util.spec_from_file_location("_instructor_judges_06", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _observe_amp_on(amp_step: Callable, scenario: str, seed: int, steps: int) -> dict:
    require_callable(amp_step, "amp_step")
    if scenario not in _SCENARIOS:
        raise ValueError(f"no scenario {scenario!r}")
    return _run_scenario(amp_step, scenario, seed, steps)


def _judge_amp_on(observation: dict, scenario: str, seed: int, steps: int, why: str) -> None:
    _judge_crash(scenario, observation)
    _instructor_judges().amp_step_on(observation, scenario, seed, steps, why)


amp_step_on = Check("amp_step on another task", _observe_amp_on, _judge_amp_on, inputs=("scenario", "seed", "steps"),
                    announce=False)
amp_step_on.__doc__ = "Hidden test: amp_step on task(seed) for `steps` steps of a scenario matches the reference step."


# --- low_precision_ops ---------------------------------------------------------------------------


class _Probe(nn.Module):
    """A model with a nested block, a branch that sees the float32 input, and a few kinds of leaf module."""

    def __init__(self, conv: bool = False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
        self.gate = nn.Sigmoid()
        self.head = nn.LogSoftmax(dim=-1)
        self.error = nn.MSELoss()  # mse_loss is on autocast's float32 list, on the CPU too
        self.conv = nn.Conv1d(1, 1, 3, padding=1) if conv else None

    def forward(self, x):
        low = self.body(x)  # low precision under autocast
        h = low * self.gate(x[:, :4])  # low × float32: float32 by type promotion
        if self.conv is not None:
            h = self.conv(h.unsqueeze(1)).squeeze(1)
        return self.head(h) + self.error(low, low.flip(-1))


def _probe(conv: bool = False) -> tuple[nn.Module, torch.Tensor]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return _Probe(conv), torch.randn(5, 8)


def _hooks_on(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


POLICY_WORDS = ("lowered", "float32", "as input")


class _Broken(_Probe):
    """The probe model whose forward pass fails half-way, after its first leaf modules have run."""

    def forward(self, x):
        self.body[0](x)
        raise RuntimeError("the forward pass failed half-way (the check's broken model)")


def _observe_broken(fn: Callable) -> dict:
    """Call fn on a model whose forward raises; how many hooks are left on it afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model, x = _Broken(), torch.randn(5, 8)
    try:
        fn(model, x, DEVICE_TYPE, torch.bfloat16)
        raised = None
    except NotImplementedError:
        raise NotDone("low_precision_ops") from None
    except Exception as exc:  # noqa: BLE001  the forward pass is meant to fail here
        raised = type(exc).__name__
    return {"raised": raised, "hooks_left": _hooks_on(model)}


def _observe_ops(fn: Callable, conv: bool = False) -> dict:
    require_callable(fn, "low_precision_ops")
    model, x = _probe(conv)
    seen = {}
    for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("bf16 again", torch.bfloat16)):
        seen[label] = call(fn, model, x, DEVICE_TYPE, dtype,
                           label=f"low_precision_ops(model, x, {DEVICE_TYPE!r}, {dtype})")
        if label == "bf16":
            seen["hooks_left"] = _hooks_on(model)
    seen["hooks_at_end"] = _hooks_on(model)
    seen["x_dtype"] = x.dtype
    seen["broken"] = _observe_broken(fn)
    return seen


def _public_ops_result(got: Any, dtype: torch.dtype) -> None:
    """What can be said of one answer without the policy's: a dict of leaf modules to one of the three words."""
    if not isinstance(got, dict):
        fail(f"low_precision_ops returned {type(got).__name__}; return a dict from each leaf module's name "
             f"(as model.named_modules() gives it) to one of {list(POLICY_WORDS)}.")
    if "" in got or "body" in got:
        fail("low_precision_ops reported containers (modules with children), not only leaf modules. Report only "
             "modules with no children (the ones that compute something).")
    if any(isinstance(v, torch.dtype) for v in got.values()):
        fail(f"low_precision_ops returned dtypes; return what the policy did to each module, one of "
             f"{list(POLICY_WORDS)}: a dtype alone does not say it.")
    if any(v not in POLICY_WORDS for v in got.values()):
        fail(f"low_precision_ops returned something other than {list(POLICY_WORDS)} for a module; return one of them.")


def _public_ops(observation: dict) -> None:
    """low_precision_ops without the policy's answer: the shape of what it returns, and no hook left behind."""
    if not isinstance(observation, dict) or not {"bf16", "fp16", "bf16 again", "hooks_left"} <= set(observation):
        fail("the check could not read what low_precision_ops returned")
    _public_ops_result(observation["bf16"], torch.bfloat16)
    if observation["hooks_left"]:
        fail(f"after low_precision_ops returned, {observation['hooks_left']} forward hook(s) were still attached to "
             "the model: every later forward pass runs them again (a second call counts each module twice). Keep "
             "the handle register_forward_hook returns and call handle.remove() (in a finally: block).")
    _public_ops_result(observation["fp16"], torch.float16)
    _public_ops_result(observation["bf16 again"], torch.bfloat16)
    broken = observation.get("broken")
    if not isinstance(broken, dict) or not is_number(broken.get("hooks_left")):
        fail("the check could not read what low_precision_ops did with a model whose forward pass fails")
    if broken["hooks_left"]:
        fail(f"given a model whose forward pass raises an error half-way, low_precision_ops left "
             f"{int(broken['hooks_left'])} forward hook(s) attached: they were to be removed after a forward pass "
             "that never returned. What removes them whether the forward pass returns or raises?")


def _ops_summary(observation: dict) -> list:
    return [observation[label] for label in ("bf16", "fp16", "bf16 again")]


# What autocast does to each module here is the instructor's to know (solutions/judges/lesson06.py): the check is
# keyed on the three dicts low_precision_ops returned.
check_low_precision_ops = guard(Keyed(
    "06_mixed_precision", "low_precision_ops", observe=_observe_ops, summary=_ops_summary, public=_public_ops,
    unknown="low_precision_ops misread what the policy did to some modules, and not in a way the course knows. Go "
            "back to section 3: what a module's dtypes show of the policy, and what they cannot show."),
    "low_precision_ops", {amp.leaf_dtypes: "grader.amp.leaf_dtypes"})


def _observe_ops_on(fn: Callable, conv: bool) -> dict:
    return _observe_ops(fn, bool(conv))


def _judge_ops_on(observation: dict, conv: bool, why: str) -> None:
    try:
        _public_ops(observation)
        _instructor_judges().low_precision_ops(observation, bool(conv))
    except CheckFailed as exc:
        fail(f"{why} ({exc})")


ops_on = Check("low_precision_ops on another model", _observe_ops_on, _judge_ops_on, inputs=("conv",), announce=False)


# --- smooth ----------------------------------------------------------------------------------------

# The answers of smooth, verdict and smallest_kept are not here: each is judged by digests (grader.checks._keys),
# made by scripts/build_keys.py from the instructor's judges (solutions/judges/lesson06.py, never released).

# Losses logged at every step (steps left out: 1, 2, 3, …), then logged at steps a trainer chose: every 10, sparser
# as the run goes on, after one long gap, and from a first log well after step 1.
_SMOOTH_CASES = [([4.0], 0.9), ([2.0, 2.0, 2.0, 2.0, 2.0], 0.9), ([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0], 0.8),
                 ([1.0, 2.0, 3.0], 0.5), ([1.0, 5.0, 2.0], 0.0), ([], 0.9),
                 ([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0], 0.8, [1, 2, 3, 4, 5, 6, 7, 8]),
                 ([4.0, 2.0, 1.0], 0.9, [10, 20, 30]),
                 ([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0], 0.8, [1, 2, 3, 5, 8, 13, 21, 34]),
                 ([2.0, 2.0, 2.0, 2.0], 0.9, [3, 4, 10, 50]),
                 ([5.0, 1.0, 3.0], 0.5, [1, 2, 12]),
                 ([6.0, 2.0, 4.0], 0.0, [2, 5, 9]),
                 ([], 0.9, [])]


def _public_smooth(smooth: Replay) -> None:
    """What can be said of smooth without its answer: a list of floats, one per loss."""
    got = call(smooth, [4.0], 0.9)
    if not isinstance(got, list):
        fail(f"smooth([4.0], 0.9) returned {type(got).__name__}; return a list of floats, one per loss.")
    if call(smooth, [], 0.9) != []:
        fail("smooth([], 0.9) should return an empty list.")
    if call(smooth, [], 0.9, []) != []:
        fail("smooth([], 0.9, []) should return an empty list.")


def _hints_smooth(smooth: Replay) -> None:
    """An unknown answer that does not keep a constant loss."""
    for case in (([2.0] * 5, 0.9), ([2.0] * 4, 0.9, [3, 4, 10, 50])):
        constant = call(smooth, *case)
        if not (isinstance(constant, list) and len(constant) == len(case[0])
                and all(is_number(v) and close(float(v), 2.0, 1e-9) for v in constant)):
            fail(f"smooth{case} does not return the constant loss unchanged: a constant loss must smooth to the same "
                 "constant, however it was logged.")
    every, listed = call(smooth, *_SMOOTH_CASES[2]), call(smooth, *_SMOOTH_CASES[6])
    if not (isinstance(every, list) and isinstance(listed, list) and len(every) == len(listed)
            and all(is_number(a) and is_number(b) and close(float(a), float(b), 1e-9) for a, b in zip(every, listed))):
        fail("smooth gave losses logged at steps [1, 2, …, 8] another average than the same losses with steps left "
             "out, which means every step: 1, 2, 3, …")


check_smooth = Keyed(
    "06_mixed_precision", "smooth", "smooth", _SMOOTH_CASES,
    floats=True, public=_public_smooth, hints=_hints_smooth,
    unknown="smooth is not the bias-corrected moving average section 4 describes, nor a mistake the course knows. Go "
            "back to what beta weighs at each training step, what a logged loss stands for, and where the weight "
            "sits after the steps since the start.")


# --- verdict ---------------------------------------------------------------------------------------


def _curve(n: int, start: float, end: float, wiggle: float, scale: float, seed: int) -> list[float]:
    gen = torch.Generator().manual_seed(seed)
    noise = (torch.rand(n, generator=gen, dtype=torch.float64) - 0.5) * 2 * wiggle
    base = torch.logspace(math.log10(start), math.log10(end), n, dtype=torch.float64)
    return [float(v) for v in (base * (1 + noise) * scale)]


_REF = _curve(40, 1.0, 0.1, 0.2, 1e-6, 0)  # a reference fp32 curve, losses of order 1e-6
_FLAT = _curve(40, 1.0, 1.0, 0.3, 1e-6, 5)  # flat and noisy (±30 %), starting at 1e-6 and ending on a high step
_FLAT[0], _FLAT[-1] = 1e-6, 1.3e-6
_RISING_REF = [1e-6 * 1.03**i for i in range(40)]  # a reference that itself rises
_VERDICT_CASES = {  # the runs verdict is tried on (inputs only: what each should be called is in the keys)
    "1 % either side": (_REF, [v * (1 + 0.01 * ((-1) ** i)) for i, v in enumerate(_REF)], 0.9, 0.05),
    "flat": (_REF, [1e-6] * 40, 0.9, 0.05),
    "flat and noisy": (_REF, _FLAT, 0.9, 0.05),
    "nan at the end": (_REF, _REF[:-1] + [math.nan], 0.9, 0.05),
    "nan in the middle": (_REF, _REF[:20] + [math.nan] + _REF[21:], 0.9, 0.05),
    "inf": (_REF, _REF[:30] + [math.inf] * 10, 0.9, 0.05),
    "rising": (_REF, [1e-6 * 1.05**i for i in range(40)], 0.9, 0.05),
    "rising with a rising reference": (_RISING_REF, [v * 1.01 for v in _RISING_REF], 0.9, 0.05),
    "same last value only": (_REF, [1e-6] * 39 + [_REF[-1]], 0.9, 0.05),
    "one noisy last value": (_REF, _REF[:-1] + [_REF[-1] * 1.3], 0.9, 0.05),
    "reference ends on a noisy step": (_REF[:-1] + [_REF[-1] * 1.3], _REF, 0.9, 0.05),
    "5.2 % above": (_REF, [v * 1.052 for v in _REF], 0.9, 0.05),
    "4.8 % below": (_REF, [v * 0.952 for v in _REF], 0.9, 0.05),
    "30 % below": (_REF, [v * 0.7 for v in _REF], 0.9, 0.05),  # ends far from the reference, on the low side
    "big losses, 2 % above": ([v * 1e6 for v in _REF], [v * 1e6 * 1.02 for v in _REF], 0.9, 0.05),
    "flat, both curves × 1e6": ([v * 1e6 for v in _REF], [1.0] * 40, 0.9, 0.05),
    "rising, both curves × 1e6": ([v * 1e6 for v in _REF], [1.05**i for i in range(40)], 0.9, 0.05),
    # copy test r23 passed a verdict that judged the rise against the reference's start: this run starts 4× higher and
    # halves, so it ends better than it started and still above where the reference started
    "started high and fell by half": (_REF, _curve(40, 4.0, 2.0, 0.05, 1e-6, 7), 0.9, 0.05),
}
_SCALED_TWINS = {"flat": "flat, both curves × 1e6", "rising": "rising, both curves × 1e6"}  # the same runs, other units


def _public_verdict(verdict: Replay) -> None:
    """What can be said of verdict without its answers: one of three words for every run."""
    for name, args in _VERDICT_CASES.items():
        value = call(verdict, *args, label=f"verdict(reference, run [{name}], beta, rtol)")
        if value not in ("agrees", "stalled", "diverged"):
            fail(f"verdict returned {value!r} for the {name} run; return exactly 'agrees', 'stalled' or 'diverged'.")


def _hints_verdict(verdict: Replay) -> None:
    """An unknown answer that lets a blown-up run through."""
    for name in ("nan at the end", "nan in the middle", "inf"):
        if call(verdict, *_VERDICT_CASES[name]) == "agrees":
            fail(f"verdict called the '{name}' run 'agrees': how does a NaN or an inf fare in a comparison, and "
                 "what is a loss that is not a number?")
    for name, twin in _SCALED_TWINS.items():
        if call(verdict, *_VERDICT_CASES[name]) != call(verdict, *_VERDICT_CASES[twin]):
            fail(f"verdict judged the '{name}' run one way and the '{twin}' run another: the same run, with both "
                 "curves in other units. A verdict on a run cannot depend on the units its loss is counted in.")


check_verdict = Keyed(
    "06_mixed_precision", "verdict", "verdict", list(_VERDICT_CASES.values()), public=_public_verdict,
    hints=_hints_verdict,
    unknown="verdict misjudged some of the runs, and not in a way the course knows. Go back to the three words as "
            "exercise 4 defines them, and to what noise, the size of the losses and a NaN each do to a comparison.")


# --- the smallest number a format keeps ------------------------------------------------------------------

# (exponent bits, mantissa bits) of the formats the lesson casts gradients to (fp32, bf16, fp16, fp8 e4m3, fp8 e5m2),
# and one no table lists; then the same formats when the fp32 arithmetic flushes its subnormals to zero
# (8, 12): fp32's range with a mantissa no dtype has, whose subnormals reach below fp32's smallest normal, so that
# flush-to-zero is tested on a format no cast can measure (copy test r29 found it tested only on fp32 and bf16)
_KEPT_CASES = [(8, 23), (8, 7), (5, 10), (4, 3), (5, 2), (6, 9), (8, 12),
               (8, 23, True), (8, 7, True), (5, 10, True), (4, 3, True), (5, 2, True), (6, 9, True), (8, 12, True)]


def _public_smallest_kept(fn: Replay) -> None:
    for case in _KEPT_CASES:
        value = call(fn, *case)
        if not is_number(value) or float(value) <= 0:
            fail(f"smallest_kept{case} returned {value!r}; return a positive number (a float).")


# grader.floats (lesson 03's explorer) computes this number for a Format; a smallest_kept that asks it is noticed.
_KEPT_SHORTCUTS = {**{prop.fget: f"grader.floats.Format.{name}" for name, prop in vars(floats.Format).items()
                      if isinstance(prop, property)},
                   floats.value_of: "grader.floats.value_of", floats.kind_of: "grader.floats.kind_of"}

check_smallest_kept = guard(Keyed(
    "06_mixed_precision", "smallest_kept", "smallest_kept", _KEPT_CASES,
    floats=True, public=_public_smallest_kept,
    sig=7,  # at 6 figures 2^-9 sits on a rounding edge, at 8 figures 2^-126; powers of two are exact anyway
    unknown="smallest_kept is not the smallest positive number the format keeps, nor a mistake the course knows. "
            "Work it out from the bits (the bias, the smallest normal exponent, how far the subnormals go below it), "
            "and with flush_to_zero from which numbers that mode sends to 0."), "smallest_kept", _KEPT_SHORTCUTS)
# copy test r22 read Format('x', 6, 9, None).smallest_subnormal in a cell of its own, before the check, and r23 in
# another process: grader.floats now refuses a made-up format's limits when asked (floats.MadeUpFormat). Its formulas
# are plain source, and a learner's own lesson 03 decode under set_flush_denormal measures any format (r29): a
# deterrent, not a wall
