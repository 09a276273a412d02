"""The instructor's judges of lesson 06's keyed checks (amp_step, low_precision_ops, smooth, verdict, smallest_kept):
they hold the answers (the course's reference step, what autocast's policy did to each module, the formulas), so they
are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson06.py) and keeps
only digests and messages in grader/checks/keys/06_mixed_precision.json; the learner's checks
(grader/checks/lesson06.py) judge by those. A message names the kind of mistake and the principle, never the
expected value nor the formula.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch
from torch import nn

from grader.checks import _plain
from grader.checks._common import Replay, call, close, fail, is_number
from grader.notebook import CheckFailed
from grader.checks.lesson06 import (_KEPT_CASES, _SCENARIOS, _SMOOTH_CASES, _VERDICT_CASES, DEVICE_TYPE, NO_CLIP,
                                    _probe, _public_amp_step, _public_ops, _run_scenario)

# --- amp_step ----------------------------------------------------------------------------------------
# (what grader/checks/lesson06.py held before the step's answer left the package)


def reference_amp_step(model, opt, x, y, loss_fn, device_type, dtype, scaler, max_norm, zero_grad: bool = True,
                       clip: str = "unscaled", skip_bf16: bool = True):
    """The course's reference step (the judge runs it on the same task): (the loss, whether the optimizer stepped).

    zero_grad=False, clip="scaled" (clipping the gradients while they are still S times too large) and
    skip_bf16=False (the documented recipe: nothing stops a bf16 step whose gradients hold NaN) are the known
    mistakes the judge compares a failing step with.
    """
    if zero_grad:
        opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    if scaler is None:
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        applied = bool(torch.isfinite(norm)) or not skip_bf16  # an inf or NaN anywhere makes the norm one
        if applied:
            opt.step()
    else:
        scaler.scale(loss).backward()
        if clip == "unscaled":
            scaler.unscale_(opt)  # the gradients are the true ones from here on; step() does not divide again
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        before = scaler.get_scale()
        scaler.step(opt)  # skips the optimizer's step when unscale_ found inf or NaN
        scaler.update()
        applied = scaler.get_scale() >= before  # update() lowers the scale after a skip (backoff_factor < 1), only then
    return loss.detach(), applied


@functools.lru_cache(maxsize=32)
def _reference(name: str, seed: int = 0, steps: int | None = None, zero_grad: bool = True, clip: str = "unscaled") -> dict:
    step = functools.partial(reference_amp_step, zero_grad=zero_grad, clip=clip)
    return _plain.roundtrip(_run_scenario(step, name, seed, steps))


def _no_clip_step(model, opt, x, y, loss_fn, device_type, dtype, scaler, max_norm):
    return reference_amp_step(model, opt, x, y, loss_fn, device_type, dtype, scaler, NO_CLIP)


@functools.lru_cache(maxsize=4)
def _no_clip_reference(name: str) -> dict:
    return _plain.roundtrip(_run_scenario(_no_clip_step, name))


def _matches(a: Any, b: Any, rel: float = 2e-3, allowed: float = 0.02) -> bool:
    """Two recorded parameter tensors agree: finite, and at most `allowed` of the elements off by more than `rel`.

    Low-precision kernels may round differently in the grader's process (another thread count),
    and Adam's first step moves a weight by about ±lr whatever its gradient's size, so a
    gradient within rounding of 0 can flip one weight; a real mistake moves most of them.
    """
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape or not a.numel():
        return False
    if not bool(torch.isfinite(a).all()):
        return False
    scale = float(b.abs().max()) or 1.0
    off = (a.double() - b.double()).abs() > rel * scale
    return float(off.double().mean()) <= allowed


def _amp_step(observation: dict) -> None:
    """amp_step: autocast forward and loss, scaled backward, unscale, clip, scaler.step, scaler.update; zero_grad
    first; a bf16 step with non-finite gradients not applied; and whether each step was applied, said truly."""
    _public_amp_step(observation)
    fp16, overflow, bf16, clip16, clip_bf, nan_bf, lr0_16, lr0_bf = (observation[n] for n in _SCENARIOS)
    ref16, ref_over, ref_bf, ref_clip16, ref_clip_bf, ref_nan = (_reference(n) for n in list(_SCENARIOS)[:6])

    if not fp16.get("linear_out") or fp16["linear_out"][0] == "torch.float32":
        fail(f"the Linear layers produced {', '.join(fp16.get('linear_out') or ['nothing'])} in an fp16 step: the "
             "forward ran outside autocast. The model and the loss run inside the autocast block, so that the "
             "matmuls run in low precision.")
    if fp16["linear_out"][0] != "torch.float16":
        fail(f"with dtype=torch.float16 the first Linear produced {fp16['linear_out'][0]}: pass dtype to autocast.")
    if fp16["loss_autocast"] and not fp16["loss_autocast"][0]:
        fail("the model ran under autocast but loss_fn did not: the loss was computed after the `with torch.autocast` "
             "block had closed. The loss is part of the forward pass: its ops follow autocast's policy too (on CUDA "
             "log_softmax, cross-entropy and mse_loss are sent to float32 by it), so compute it inside the block.")
    got, computed = fp16["losses"][0], fp16["loss_values"][0]
    if computed and close(got, computed * fp16["init_scale"], rel=1e-2):
        fail("amp_step returned the scaled loss (scaler.scale(loss)); return the loss itself, as loss_fn gave it.")
    if not close(got, computed, rel=1e-2):
        fail("amp_step returned a loss other than the one loss_fn computed in that step, and not that loss times the "
             "scale either. Return the loss of this step as loss_fn gave it, unscaled.")

    # the forced overflow: 2^40 × the gradients is far beyond fp16's largest number
    if overflow["changed"] and overflow["changed"][0]:
        state = "are no longer finite" if not overflow["finite"][0] else "changed"
        fail(f"with a scale this large the fp16 gradients overflow to inf, yet the step was applied: the weights {state}. "
             "The step must go through the scaler, which unscales the gradients, finds the inf and skips the step.")
    if overflow["scales"][0] == overflow["init_scale"]:
        fail("after a step whose gradients overflowed, the scale is still the one it started with: scaler.update() was "
             "never called. update() lowers the scale after a skipped step and raises it after a run of good ones.")
    if overflow["scales"][0] != ref_over["scales"][0]:
        fail("after one overflowing step the scale is not what GradScaler's update() makes of a skipped step: update() "
             "runs once per step, after scaler.step(opt), and lowers the scale by its backoff factor after a skip.")

    # the tiny loss must learn: the scaler carries its gradients past fp16's underflow
    if fp16["zero_grads"][0] == 1.0 and ref16["zero_grads"][0] < 1.0:
        fail("every gradient of the first layer came out 0 in fp16 with a loss of about 1e-6: the backward ran on the "
             "unscaled loss, so the gradients underflowed in fp16 (below about 6e-8) before the scaler could help. "
             "The scale must enter the loss before backward, so that every gradient carries it.")
    if not (fp16["losses"][-1] < 0.9 * fp16["losses"][0]):
        fail("in fp16 with GradScaler the loss of the task scaled by 1e-6 hardly fell over the run's steps, where the "
             "course's step learns it. The scaled backward and scaler.step must both be there: the scale carries the "
             "gradients past fp16's underflow, and the step must use them with the scale taken out.")

    # bf16, no scaler: two steps must match the reference
    if bf16["scales"] and any(s is not None for s in bf16["scales"]):
        fail("with scaler=None amp_step must not use a scaler.")
    grads_in = [g for g in bf16.get("loss_grad", []) if is_number(g)]
    if grads_in and any(g != 1.0 for g in grads_in):
        fail("in the bf16 step (scaler=None) backward sent a gradient other than 1 into the loss: the step scaled its "
             "loss anyway (a GradScaler made inside amp_step?). bf16 has fp32's 8 exponent bits, so its gradients do "
             "not underflow and need no scaler: with scaler=None nothing is scaled.")
    scaled_in = [g for g in fp16.get("loss_grad", []) if is_number(g)]
    if scaled_in and scaled_in[0] == 1.0:
        fail("every gradient of the first layer came out as if the loss were not scaled: backward sent a gradient of "
             "1 into the fp16 loss, so the backward ran on the unscaled loss. The scale must enter the loss before "
             "backward: the gradient entering the loss is then the scale S, and every gradient is S times larger.")
    if len(bf16["params"]) == 2 and not _matches(bf16["params"][1], ref_bf["params"][1]):
        accumulated = _reference("bf16, no scaler", zero_grad=False)
        if _matches(bf16["params"][1], accumulated["params"][1]):
            fail("after two bf16 steps the weights match a step that never clears the gradients: the second step used "
                 "the first step's gradient plus its own. backward adds to .grad; each step must start from cleared "
                 "gradients.")
        if _matches(bf16["params"][0], ref_bf["params"][0]):
            fail("the first bf16 step matches the reference step but the second does not: each step must start from "
                 "cleared gradients and apply exactly one optimizer step.")
        fail("after two bf16 steps (scaler=None) the weights differ from the reference step's: each step starts from "
             "cleared gradients, runs the forward pass and the loss under autocast, and applies one optimizer step.")
    for i, (mine, ref) in enumerate(zip(fp16["params"], ref16["params"])):
        if not _matches(mine, ref):
            fail(f"after {i + 1} fp16 step(s) with GradScaler the weights differ from the reference step's. Go back "
                 "over where the scale enters the gradients, where it leaves them, which call may skip the step, and "
                 "what the next step must start from.")

    # clipping: the gradients' norm must be the true one's, so the scale has left them before clip_grad_norm_
    _judge_clipping(clip16, ref_clip16, "fp16, GradScaler, clipped")
    _judge_clipping(clip_bf, ref_clip_bf, "bf16, clipped")

    # a bf16 step whose gradients hold NaN: no scaler looks, so the step itself must not apply it
    name = "bf16, a NaN gradient"
    if len(nan_bf["used"]) > 1 and nan_bf["used"][1]:
        state = " and the weights are no longer finite" if not nan_bf["finite"][1] else ""
        fail(f"in the '{name}' run the optimizer stepped on the step whose gradients held NaN{state}. With "
             "scaler=None nothing skips that step for you: section 1 says which steps must never move the weights.")
    if not all(_matches(a, b) for a, b in zip(nan_bf["params"], ref_nan["params"])) or len(nan_bf["params"]) != 3:
        fail(f"in the '{name}' run the weights differ from the reference step's, around the step whose gradients held "
             "NaN: it must leave the weights as they were, and the next step must start from cleared gradients.")

    # what amp_step said of each step against what the optimizer did
    for run_name in _SCENARIOS:
        seen = observation[run_name]
        for i, (said, used) in enumerate(zip(seen["applied"], seen["used"])):
            if not isinstance(said, bool):
                fail(f"amp_step said {said!r} of whether step {i + 1} of the '{run_name}' run was applied: say it "
                     "with a bool.")
            stepped = bool(used)
            if said == stepped:
                continue
            if run_name == "fp16, forced overflow":
                fail(f"amp_step said the step of the '{run_name}' run was applied, but the scaler skipped it: the "
                     "optimizer never stepped. Its loss was finite: what overflowed?")
            if run_name == name:
                fail(f"amp_step skipped the step of the '{run_name}' run whose gradients held NaN, as it must, but "
                     "said it was applied.")
            if "lr 0" in run_name:
                fail(f"amp_step said the step of the '{run_name}' run was skipped: the optimizer did step, with a "
                     "learning rate of 0 (the first step of a warm-up), and so no weight moved. A step applied is one "
                     "the optimizer took, whether or not a weight moved.")
            if stepped:
                fail(f"amp_step said step {i + 1} of the '{run_name}' run was skipped, yet the optimizer stepped. "
                     "What did you read that from? (scaler.step returns whatever opt.step() returned.)")
            fail(f"amp_step said step {i + 1} of the '{run_name}' run was applied, yet the optimizer never stepped.")


def _judge_clipping(seen: dict, ref: dict, name: str) -> None:
    params = seen.get("params") or []
    if len(params) == len(ref["params"]) and all(_matches(a, b) for a, b in zip(params, ref["params"])):
        return
    if params and _matches(params[0], _no_clip_reference(name)["params"][0]):
        fail(f"in the {name} run the gradients' norm is above max_norm, yet the weights moved as if nothing had "
             "clipped them: clip the gradients after backward has made them and before the optimizer uses them.")
    if name.startswith("fp16") and params and _matches(params[0], _reference(name, clip="scaled")["params"][0]):
        fail(f"in the {name} run the weights moved far less than a step clipped to max_norm: you clipped the "
             "gradients while they were still multiplied by the scale S. Their norm was S times too large, so the "
             "clip cut them S times too much. Where must the scale have left the gradients?")
    fail(f"in the {name} run the weights differ from a step whose true gradients were clipped to max_norm: the clip "
         "must see the gradients as backward made them for the unscaled loss, and the optimizer must use the clipped "
         "ones.")


def amp_step_on(observation: dict, scenario: str, seed: int, steps: int, why: str) -> None:
    """The hidden test's judge (grader.checks.lesson06.amp_step_on): the weights after `steps` steps of a scenario
    on task(seed) match the reference step's."""
    ref = _reference(scenario, seed, steps)
    params = observation.get("params") or []
    if len(params) != len(ref["params"]) or not all(_matches(a, b) for a, b in zip(params, ref["params"])):
        fail(why)
    if observation.get("applied") != ref["applied"]:  # what it said of each step: applied or skipped
        fail(why)


# --- low_precision_ops ---------------------------------------------------------------------------------
# (what grader/checks/lesson06.py held before the answer left the package)


def policy_word(received: torch.dtype, returned: torch.dtype, dtype: torch.dtype) -> str:
    """What autocast's policy did to a module, read from the dtype it received and the one it returned."""
    if received == torch.float32 and returned == dtype:
        return "lowered"
    if received == dtype and returned == torch.float32:
        return "float32"
    return "as input"


def seen_dtypes(dtype: torch.dtype, conv: bool = False) -> dict:
    """(first input's dtype, output's dtype) of each leaf module fed a floating-point tensor, under autocast here."""
    model, x = _probe(conv)
    found = {}
    handles = [m.register_forward_hook(lambda mod, i, o, n=n: found.__setitem__(n, (i[0].dtype, o.dtype)))
               for n, m in model.named_modules() if not list(m.children())]
    try:
        with torch.autocast(DEVICE_TYPE, dtype=dtype):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return {n: io for n, io in found.items() if io[0].is_floating_point}


def reference_ops(dtype: torch.dtype, conv: bool = False) -> dict:
    """The answer: what the policy did to each leaf module."""
    return {n: policy_word(i, o, dtype) for n, (i, o) in seen_dtypes(dtype, conv).items()}


def _ops_result(got: dict, dtype: torch.dtype, conv: bool) -> None:
    want = reference_ops(dtype, conv)
    seen = seen_dtypes(dtype, conv)
    if set(got) - set(want):
        fail("low_precision_ops reported a module that is not a leaf fed a floating-point tensor in this forward "
             "pass: only modules with no children whose first input is floating-point are asked for.")
    if set(want) - set(got):
        fail("low_precision_ops left out leaf modules that ran on a floating-point input: every leaf module the "
             "forward pass ran is asked for, whatever the policy did to it.")
    if all(v == "as input" for v in got.values()):
        fail(f"every module came out 'as input' with dtype={dtype}: the forward pass never ran under "
             "`torch.autocast(device_type, dtype=dtype)`, so no policy acted on anything.")
    fed_low = [n for n, (i, o) in seen.items() if i == dtype and o == dtype]
    if fed_low and all(got[n] == "lowered" for n in fed_low):
        fail(f"low_precision_ops called {', '.join(sorted(fed_low))} 'lowered': each received the low-precision "
             "type and returned it. What does that pair say about the policy?")
    fed_fp32 = [n for n, (i, o) in seen.items() if i == torch.float32 and o == torch.float32]
    if fed_fp32 and all(got[n] == "float32" for n in fed_fp32):
        fail(f"low_precision_ops called {', '.join(sorted(fed_fp32))} 'float32': each received float32 and returned "
             "it. What does that pair say about the policy?")
    lowered = [n for n, w in want.items() if w == "lowered"]
    if lowered and all(got[n] == "float32" for n in lowered):
        fail(f"low_precision_ops called {', '.join(sorted(lowered))} 'float32' and the modules the policy sends to "
             "float32 'lowered': check which of a forward hook's arguments is what the module received.")
    wrong = sorted(n for n, w in want.items() if got[n] != w)
    if wrong:
        fail(f"low_precision_ops misread what the policy did to {', '.join(wrong)} (dtype={dtype}).")


def low_precision_ops(observation: dict, conv: bool = False) -> None:
    """low_precision_ops: what autocast did to each leaf module, read from its input and output dtypes."""
    _public_ops(observation)
    for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("bf16 again", torch.bfloat16)):
        _ops_result(observation[label], dtype, conv)


# --- smooth ------------------------------------------------------------------------------------------


def smooth_reference(values: list[float], beta: float, steps: list[int] | None = None, correct: bool = True,
                     swapped: bool = False, corrected_by: float | None = None, shift: int = 0,
                     ignore_steps: bool = False, one_point: bool = False, count_logs: bool = False,
                     start_at_first: bool = False) -> list[float]:
    """The bias-corrected average of losses logged at `steps` (None: every step, 1, 2, 3, …), beta the weight of the
    past per training step, each logged loss standing for every step since the previous log; or one of the known
    mistakes: no correction, beta swapped, the correction a step off, the steps ignored (the classic average at every
    log), each logged loss weighed as one step (a time-weighted EMA of points), the correction counting logs instead
    of steps, the average started one step before the first log instead of at step 0."""
    steps = list(range(1, len(values) + 1)) if steps is None or ignore_steps else list(steps)
    past = 1 - beta if swapped else beta
    origin = steps[0] - 1 if start_at_first and steps else 0
    out, v, w, last = [], 0.0, 0.0, origin
    for k, (s, x) in enumerate(zip(steps, values), start=1):
        keep = past ** (s - last)  # what is left of the past after the steps since the previous log
        mixed = (1 - past) if one_point else (1 - keep)  # the logged loss's share: one step, or every step it stands for
        v = keep * v + mixed * x
        w = keep * w + mixed  # the weight on real losses (what is not on the starting 0)
        last = s
        if not correct:
            out.append(v)
            continue
        if one_point:
            denominator = w
        else:
            base = past if corrected_by is None else corrected_by
            denominator = 1 - base ** ((k if count_logs else s - origin) + shift)
        out.append(v / denominator if denominator else math.nan)
    return out


def _swapped(args: tuple) -> list[list[float]]:
    return [smooth_reference(*args, swapped=True),
            smooth_reference(*args, swapped=True, corrected_by=args[1]),
            smooth_reference(*args, correct=False, swapped=True)]


def _same_list(got: Any, want: list[float], rel: float = 1e-9) -> bool:
    return (isinstance(got, list) and len(got) == len(want)
            and all(is_number(g) and close(float(g), w, rel) for g, w in zip(got, want)))


def _everywhere(got: list, wrong: Callable[[tuple], list[float]]) -> bool:
    """The answers (a list of (case, answer)) are, case by case, those the mistake `wrong` makes (a crash where the
    mistake divides by 0)."""
    for args, answer in got:
        want = wrong(args)
        if not (_same_list(answer, want) or answer is None and any(math.isnan(w) for w in want)):
            return False
    return True


def _answer(smooth: Callable, args: tuple) -> Any:
    """smooth's answer on a case, or None where it raised (a mistake may divide by 0 where the average does not)."""
    try:
        return call(smooth, *args)
    except CheckFailed:
        return None


_SMOOTH_MISTAKES = [  # (the mistake, case by case; its message)
    (lambda a: _swapped(a)[0], "smooth uses beta the wrong way round. beta is the weight of the past, so beta = 0.9 "
     "averages over about 10 steps and beta = 0 returns the losses unchanged."),
    (lambda a: _swapped(a)[1], "smooth uses beta the wrong way round. beta is the weight of the past, so beta = 0.9 "
     "averages over about 10 steps and beta = 0 returns the losses unchanged."),
    (lambda a: _swapped(a)[2], "smooth uses beta the wrong way round. beta is the weight of the past, so beta = 0.9 "
     "averages over about 10 steps and beta = 0 returns the losses unchanged."),
    (lambda a: smooth_reference(*a, correct=False),
     "smooth has no bias correction: its first values are pulled towards the starting 0."),
    (lambda a: smooth_reference(*a, shift=1), "smooth's bias correction is one step off: its first smoothed value is "
     "not the first loss itself, though nothing came before it."),
    (lambda a: smooth_reference(*a, shift=-1), "smooth's bias correction is one step off: its first smoothed value is "
     "not the first loss itself, though nothing came before it."),
    (lambda a: smooth_reference(*a, ignore_steps=True),
     "smooth ignored the steps: the losses logged at steps [10, 20, 30] got the average of losses logged at steps 1, "
     "2 and 3. beta is the weight of the past per training step, and ten training steps passed between those logs."),
    (lambda a: smooth_reference(*a, one_point=True),
     "smooth lets the past fade over the steps between two logs, but mixes each logged loss in as if it stood for "
     "one training step: see the case logged at steps [1, 2, 12]. A logged loss is the mean of every step since the "
     "previous log, and stands for all of them."),
    (lambda a: smooth_reference(*a, count_logs=True),
     "smooth's bias correction counts the logged losses, not the training steps since the start: in the case logged "
     "at steps [10, 20, 30] its first value is not the first loss, though nothing was logged before it."),
    (lambda a: smooth_reference(*a, start_at_first=True),
     "smooth starts its average one step before the first logged loss. The run, and the average's starting 0, begin "
     "at step 0: the loss first logged at step 10 is the mean of steps 1 to 10, and stands for all ten."),
]


def _smooth(smooth: Callable) -> None:
    """smooth(losses, beta, steps=None): the bias-corrected moving average, beta per training step, each logged loss
    standing for every step since the previous log."""
    got = [(args, _answer(smooth, args)) for args in _SMOOTH_CASES]
    if all(_same_list(answer, smooth_reference(*args)) for args, answer in got):
        if call(smooth, [], 0.9) != [] or call(smooth, [], 0.9, []) != []:
            fail("smooth([], 0.9) should return an empty list.")
        return
    for wrong, message in _SMOOTH_MISTAKES:
        if _everywhere(got, wrong):
            fail(message)
    for args, answer in got:
        if set(args[0]) == {2.0} and not _same_list(answer, [2.0] * len(args[0])):
            fail("smooth does not return a constant loss unchanged: a constant loss must smooth to the same constant.")
    fail("smooth is not the bias-corrected moving average section 4 describes.")


# --- verdict -----------------------------------------------------------------------------------------


def _verdict(verdict: Callable) -> None:
    """verdict(reference, run, beta, rtol): 'diverged' (not finite, or rising), 'agrees' (within rtol), else 'stalled'."""
    answers = {name: call(verdict, *args, label=f"verdict(reference, run [{name}], beta, rtol)")
               for name, args in _VERDICT_CASES.items()}
    bad = {k: v for k, v in answers.items() if v not in ("agrees", "stalled", "diverged")}
    if bad:
        fail("verdict returned something other than 'agrees', 'stalled' or 'diverged'; return exactly one of them.")
    for name in ("nan at the end", "nan in the middle", "inf"):
        if answers[name] == "agrees":
            fail("verdict called a run whose loss became NaN or inf 'agrees': every comparison with NaN is False, so a "
                 "test like `not (difference > tolerance)` lets it through, and a smoothed curve carries the NaN to "
                 "its end. A loss that is not a number is a blown-up run.")
        if answers[name] != "diverged":
            fail("verdict got a run whose loss became NaN or inf wrong: a loss that is not finite means the run "
                 "blew up.")
    if answers["flat"] == "agrees":
        fail("verdict said the flat run 'agrees' with a reference that fell tenfold, its losses of order 1e-6: go "
             "back to what section 4 says rtol is relative to.")
    if answers["flat"] != "stalled":
        fail("verdict got a finite, flat run wrong: it neither blew up nor got worse, and it never reached the "
             "reference.")
    if answers["same last value only"] == "agrees" or (answers["one noisy last value"] == "stalled"
                                                   and answers["reference ends on a noisy step"] == "agrees"):
        fail("verdict judged by the last raw loss: a flat run whose last value happens to equal the reference's, or a "
             "run that tracks the reference but ends on one noisy step, was misjudged. One raw loss is one noisy "
             "step: judge the smoothed curves.")
    if answers["reference ends on a noisy step"] != "agrees":
        fail("verdict misjudged the run that follows the reference step for step, where the reference's last raw "
             "loss is one noisy step 30 % up.")
    if answers["rising with a rising reference"] != "diverged":
        fail("verdict misjudged the run whose loss rose 3 % a step alongside a reference that rose too: go back to "
             "what each of the three words says about a run (section 4).")
    if answers["flat and noisy"] != "stalled":
        fail("verdict misjudged the flat run with ±30 % noise whose last raw loss is above its first: it neither blew "
             "up nor ended worse than it started by more than rtol, the one allowance verdict is given. Look at what "
             "your test of 'ended worse' compares (section 4): which values, and with what allowance.")
    if answers["5.2 % above"] != "stalled" or answers["4.8 % below"] != "agrees":
        fail("near the tolerance verdict misjudged the run 5.2 % above the reference or the one 4.8 % below it "
             "(rtol 5 %).")
    if answers["30 % below"] == "agrees":
        fail("verdict called the run that ended 30 % below the reference 'agrees': it did not end where the reference "
             "ended (exercise 4's three words).")
    if answers["30 % below"] != "stalled":
        fail("verdict misjudged the run that ended 30 % below the reference: it never blew up and never got worse.")
    if answers["1 % either side"] != "agrees" or answers["big losses, 2 % above"] != "agrees":
        fail("verdict did not say 'agrees' for a run within 1–2 % of the reference all along: it ends where the "
             "reference ends, well within the tolerance.")
    if answers["rising"] != "diverged":
        fail("verdict misjudged a run whose smoothed loss rose 5 % a step: it ended far worse than it started.")
    if answers["one noisy last value"] != "agrees" or answers["same last value only"] != "stalled":
        fail("verdict judged single noisy losses somewhere: every judgement is on the smoothed curves.")
    if answers["started high and fell by half"] == "diverged":
        fail("verdict called a run 'diverged' that started four times above its reference and fell by half: it ended "
             "better than it started. Whose start does 'ended worse than it started' compare with?")
    if answers["started high and fell by half"] != "stalled":
        fail("verdict misjudged the run that started four times above its reference and fell by half: it never blew "
             "up, never got worse, and ended far from where the reference ended.")


# --- the smallest number a format keeps --------------------------------------------------------------

# (exponent bits, mantissa bits) of the formats the lesson casts gradients to, and torch's dtype for each
KEPT_FORMATS = {"fp32": (8, 23, torch.float32), "bf16": (8, 7, torch.bfloat16), "fp16": (5, 10, torch.float16),
                "fp8_e4m3": (4, 3, torch.float8_e4m3fn), "fp8_e5m2": (5, 2, torch.float8_e5m2)}


FP32_SMALLEST_NORMAL = 2.0**-126  # torch.finfo(torch.float32).tiny: below it fp32 has only subnormals


def smallest_kept_reference(exponent_bits: int, mantissa_bits: int, flush_to_zero: bool = False,
                            subnormals: bool = True, bias_shift: int = 0, ftz: str = "fp32") -> float:
    """The smallest positive number a value computed in fp32 keeps once stored in an IEEE-style format: its smallest
    subnormal; with flush_to_zero, fp32's subnormal results are 0, so nothing below fp32's smallest normal is left.

    The known mistakes: the smallest normal (subnormals=False), a bias off by one; and for flush_to_zero, ftz="ignored"
    (the IEEE formula as if nothing were flushed), ftz="format" (every format's own subnormals flushed) and
    ftz="fp32 normal" (fp32's smallest normal whatever the format holds).
    """
    bias = 2 ** (exponent_bits - 1) - 1 + bias_shift
    own = 2.0 ** (1 - bias - (mantissa_bits if subnormals else 0))
    if not flush_to_zero or ftz == "ignored":
        return own
    if ftz == "format":
        return 2.0 ** (1 - bias)
    if ftz == "fp32 normal":
        return FP32_SMALLEST_NORMAL
    # every format here has at most fp32's 8 exponent bits: 2^-126 is a multiple of its spacing below it, so the
    # smallest fp32 normal is stored exactly wherever the format's own smallest subnormal is below it
    return max(own, FP32_SMALLEST_NORMAL)


def torch_smallest_kept(dtype: torch.dtype) -> float:
    """The same number read from torch: the smallest normal times the spacing of the mantissa (finfo.tiny × eps)."""
    info = torch.finfo(dtype)
    return info.tiny * info.eps


def measured_smallest_kept(dtype: torch.dtype, flush_to_zero: bool) -> float | None:
    """Measured on this CPU: the smallest positive number left of 2^-149 … 2^0 computed in fp32 (× 1.0), with
    torch.set_flush_denormal(flush_to_zero), then stored in `dtype` (read back with flushing off). None where this
    CPU cannot flush."""
    sweep = torch.tensor([2.0**k for k in range(-149, 1)], dtype=torch.float32)
    if not torch.set_flush_denormal(flush_to_zero) and flush_to_zero:
        return None
    try:
        stored = (sweep * 1.0).to(dtype)
    finally:
        torch.set_flush_denormal(False)
    values = stored.float()
    return float(values[values != 0].min())


def _kept_case(case: tuple) -> tuple[int, int, bool]:
    return (case[0], case[1], bool(case[2]) if len(case) > 2 else False)


def _smallest_kept(fn: Callable) -> None:
    """smallest_kept(exponent_bits, mantissa_bits, flush_to_zero=False): the smallest positive number a value computed
    in fp32 keeps in the format; its smallest subnormal, or with flush_to_zero nothing below fp32's smallest normal."""
    got = {_kept_case(case): call(fn, *case) for case in _KEPT_CASES}
    for case, value in got.items():
        if not is_number(value) or float(value) <= 0:
            fail(f"smallest_kept{case} returned {value!r}; return a positive number (a float).")
    for name, (e, m, dtype) in KEPT_FORMATS.items():
        value, want = float(got[(e, m, False)]), torch_smallest_kept(dtype)
        if close(value, want, 1e-9):
            continue
        if close(value, smallest_kept_reference(e, m, subnormals=False), 1e-9):
            fail(f"smallest_kept ({name}) returned the smallest *normal* number: section 5 says what the format "
                 "holds below it.")
        for shift in (1, -1):
            if close(value, smallest_kept_reference(e, m, bias_shift=shift), 1e-9) or close(
                    value, smallest_kept_reference(e, m, subnormals=False, bias_shift=shift), 1e-9):
                fail(f"smallest_kept ({name}) miscounts the bias or a subnormal's exponent: check how the bias is "
                     "defined, and which bits a subnormal's mantissa has.")
        fail(f"smallest_kept ({name}) is not the smallest positive number {name} keeps (section 5).")
    if not close(float(got[(6, 9, False)]), smallest_kept_reference(6, 9), 1e-9):
        fail("smallest_kept is right for the formats a table lists, not for 6 exponent and 9 mantissa bits. Work from "
             "the bits, not from a table of formats.")
    flushed = {case: float(v) for case, v in got.items() if case[2]}

    def all_like(ftz: str) -> bool:
        return all(close(v, smallest_kept_reference(*case, ftz=ftz), 1e-9) for case, v in flushed.items())

    if all_like("ignored"):
        fail("with flush_to_zero=True smallest_kept returned what it returns without it, for every format, fp32 and "
             "bf16 included. Section 5: which numbers does flush-to-zero send to 0, and which of those can each "
             "format hold?")
    if all_like("format"):
        fail("with flush_to_zero=True smallest_kept dropped the subnormals of every format, fp16's and fp8's too. "
             "Flush-to-zero is a mode of the fp32 arithmetic that computed the value: which of fp16's numbers are "
             "subnormal in fp32?")
    if all_like("fp32 normal"):
        fail("with flush_to_zero=True smallest_kept returned the same number for every format, fp16 and fp8 included: "
             "a number that fp16 or fp8 cannot hold at all. What is left after the flush is still rounded to the "
             "format.")
    for case, v in flushed.items():
        if not close(v, smallest_kept_reference(*case), 1e-9):
            fail(f"smallest_kept{case} is not the smallest positive number a value computed with flush-to-zero keeps "
                 "in that format (section 5).")


JUDGES = {"amp_step": _amp_step, "low_precision_ops": low_precision_ops, "smooth": _smooth, "verdict": _verdict, "smallest_kept": _smallest_kept}
