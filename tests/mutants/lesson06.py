"""Mutants for lesson 06 (mixed precision end to end): the mistakes learners make with autocast, the scaler and loss curves."""

LESSON = "06_mixed_precision"

_STEP_HEAD = """
import torch
def amp_step(model, opt, x, y, loss_fn, device_type, dtype, scaler, max_norm):
"""

def _forward_then(rest: str) -> str:
    """An amp_step whose forward pass and loss run under autocast, followed by `rest` (the part each mutant changes)."""
    return _STEP_HEAD + "    opt.zero_grad()\n    with torch.autocast(device_type, dtype=dtype):\n" \
        "        loss = loss_fn(model(x), y)" + rest + "\n    return loss, True\n"


_BF16_RIGHT = "        applied = bool(torch.isfinite(norm))\n        if applied:\n            opt.step()\n"
_FP16_RIGHT = "        scaler.step(opt)\n        scaler.update()\n        applied = scaler.get_scale() >= before\n"


def _amp(bf16: str = _BF16_RIGHT, fp16: str = _FP16_RIGHT) -> str:
    """The reference amp_step with the bf16 branch's or the fp16 branch's last part (the step, and what it says of it)
    replaced: each mutant below is one mistake in telling or deciding whether the step is applied."""
    return _STEP_HEAD + """    opt.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    if scaler is None:
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
""" + bf16 + """    else:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        before = scaler.get_scale()
""" + fp16 + """    return loss.detach(), applied
"""


def _ops(word: str = ('"lowered" if i == torch.float32 and o == dtype else "float32" if i == dtype and '
                       'o == torch.float32 else "as input"'),
         autocast: bool = True, remove: bool = True, finally_: bool = True, leaves_only: bool = True) -> str:
    """The reference low_precision_ops with one thing changed: each mutant below is one mistake."""
    which = "if not list(m.children())" if leaves_only else ""
    run = ("        with torch.autocast(device_type, dtype=dtype):\n            model(x)\n" if autocast
           else "        model(x)\n")
    if finally_ and remove:
        body = "    try:\n" + run + "    finally:\n        for h in handles:\n            h.remove()\n"
    else:
        body = run.replace("        ", "    ", 1).replace("\n        ", "\n    ") + (
            "    for h in handles:\n        h.remove()\n" if remove else "")
    return f"""
import torch
def low_precision_ops(model, x, device_type, dtype):
    seen = {{}}
    handles = [m.register_forward_hook(lambda mod, inp, out, n=n: seen.__setitem__(n, (inp[0].dtype, out.dtype)))
               for n, m in model.named_modules() {which}]
{body}    return {{n: ({word}) for n, (i, o) in seen.items() if i.is_floating_point}}
"""


_SMOOTH_HEAD = """
def smooth(losses, beta, steps=None):
    steps = list(range(1, len(losses) + 1)) if steps is None else list(steps)
    out, v, last = [], 0.0, 0
    for t, (s, loss) in enumerate(zip(steps, losses), start=1):
        gap, last = s - last, s
"""

_VERDICT_HEAD = """
import math
def _smooth(values, beta):
    out, v = [], 0.0
    for t, x in enumerate(values, start=1):
        v = beta * v + (1 - beta) * x
        out.append(v / (1 - beta ** t))
    return out
def verdict(reference, run, beta, rtol):
"""


def _verdict(rise: str = "s[-1] > s[0] * (1 + rtol)", agree: str = "abs(s[-1] - r[-1]) <= rtol * abs(r[-1])") -> str:
    """The reference verdict with its rise test or its agreement test changed: each mutant below is one mistake."""
    return _VERDICT_HEAD + f"""
    if not all(math.isfinite(v) for v in run):
        return "diverged"
    s, r = _smooth(run, beta), _smooth(reference, beta)
    if {rise}:
        return "diverged"
    return "agrees" if {agree} else "stalled"
"""

def _one_mistake(old: str, new: str) -> str:
    """The reference amp_step (`_amp()`) with one line or block `old` replaced by `new`: a plain mistake in an
    otherwise right step, which the check must name as it names the same mistake in a step that is wrong elsewhere."""
    right = _amp()
    assert right.count(old) == 1, old
    return right.replace(old, new)


MUTANTS = {
    "amp_step_check": [
        ("the course's step, but the loss computed after autocast closed", _one_mistake(
            "        loss = loss_fn(model(x), y)\n", "        out = model(x)\n    loss = loss_fn(out, y)\n"),
         r"loss was computed after the `with torch\.autocast` block had closed"),
        ("the course's step, but clipped before unscale_", _one_mistake(
            "        scaler.unscale_(opt)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n",
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n        scaler.unscale_(opt)\n"),
         r"still multiplied by the scale S"),
        ("the course's step, but no zero_grad", _one_mistake("    opt.zero_grad()\n", ""),
         r"never clears the gradients"),
        ("clipped while the gradients still carry the scale", _forward_then("""
    (loss if scaler is None else scaler.scale(loss)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    (opt.step() if scaler is None else (scaler.step(opt), scaler.update()))"""), r"still multiplied by the scale S"),
        ("never clipped", _forward_then("""
    (loss if scaler is None else scaler.scale(loss)).backward()
    (opt.step() if scaler is None else (scaler.step(opt), scaler.update()))"""), r"as if nothing had\s+clipped them"),
        ("clipped after the optimizer stepped", _forward_then("""
    (loss if scaler is None else scaler.scale(loss)).backward()
    if scaler is not None:
        scaler.unscale_(opt)
    (opt.step() if scaler is None else (scaler.step(opt), scaler.update()))
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"""), r"before the optimizer uses them"),
        (
            "backward on the unscaled loss",
            _STEP_HEAD + """
    opt.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    loss.backward()
    if scaler is None:
        opt.step()
    else:
        scaler.step(opt)
        scaler.update()
    return loss, True
""",
            r"backward ran on the unscaled loss",
        ),
        (
            "opt.step() instead of scaler.step",
            _STEP_HEAD + """
    opt.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        opt.step()
        scaler.update()
    return loss, True
""",
            r"opt\.step\(\) instead of scaler\.step\(opt\)",
        ),
        (
            "opt.step() and no update",
            _STEP_HEAD + """
    opt.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    (loss if scaler is None else scaler.scale(loss)).backward()
    opt.step()
    return loss, True
""",
            r"yet the step was applied",
        ),
        (
            "no update()",
            _STEP_HEAD + """
    opt.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
    return loss, True
""",
            r"scaler\.update\(\) was never called",
        ),
        (
            "forward outside autocast",
            _STEP_HEAD + """
    opt.zero_grad()
    out = model(x)
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(out, y)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss, True
""",
            r"forward ran outside autocast",
        ),
        (
            "loss computed outside autocast",
            _STEP_HEAD + """
    opt.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        out = model(x)
    loss = loss_fn(out, y)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss, True
""",
            r"loss was computed after the `with torch\.autocast` block had closed",
        ),
        (
            "a scaler made for bf16 too",
            _STEP_HEAD + """
    scaler = scaler if scaler is not None else torch.amp.GradScaler(device_type)
    opt.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss, True
""",
            r"the step scaled its loss anyway",
        ),
        (
            "no zero_grad",
            _STEP_HEAD + """
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss, True
""",
            r"never clears the gradients",
        ),
        (
            "returns the scaled loss",
            _STEP_HEAD + """
    opt.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    if scaler is None:
        loss.backward()
        opt.step()
        return loss, True
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(opt)
    scaler.update()
    return scaled, True
""",
            r"returned the scaled loss",
        ),
            (  # the documented recipe, which never looks at a bf16 step's gradients: nothing stops a NaN
            "a bf16 step with NaN gradients applied (the documented recipe)",
            _amp(bf16="        opt.step()\n        applied = True\n"),
            r"optimizer stepped on the step whose gradients held NaN",
        ),
        (
            "a bf16 step skipped on a non-finite loss only",
            _amp(bf16="        applied = bool(torch.isfinite(loss))\n        if applied:\n            opt.step()\n"),
            r"optimizer stepped on the step whose gradients held NaN",
        ),
        (
            "applied read off scaler.step's return value",
            _amp(fp16="        applied = scaler.step(opt) is not None\n        scaler.update()\n"),
            r"scaler\.step returns whatever opt\.step\(\) returned",
        ),
        (
            "applied read off the weights",
            _amp(bf16="        was = [p.detach().clone() for p in model.parameters()]\n"
                      "        if bool(torch.isfinite(norm)):\n            opt.step()\n"
                      "        applied = not all(torch.equal(a, b) for a, b in zip(was, model.parameters()))\n",
                 fp16="        was = [p.detach().clone() for p in model.parameters()]\n"
                      "        scaler.step(opt)\n        scaler.update()\n"
                      "        applied = not all(torch.equal(a, b) for a, b in zip(was, model.parameters()))\n"),
            r"learning rate of 0",
        ),
        (
            "applied read off the loss",
            _amp(fp16="        scaler.step(opt)\n        scaler.update()\n        applied = bool(torch.isfinite(loss))\n"),
            r"but the scaler skipped it",
        ),
        (
            "a NaN step skipped but said applied",
            _amp(bf16="        if bool(torch.isfinite(norm)):\n            opt.step()\n        applied = True\n"),
            r"as it must, but\s+said it was applied",
        ),
    ],
    "low_precision_ops_check": [
        ("the output read alone: low precision called lowered", _ops(
            word='"lowered" if o == dtype else "float32" if i == dtype and o == torch.float32 else "as input"'),
         r"'lowered': each received the low-precision"),
        ("the output read alone: float32 called the float32 list", _ops(
            word='"lowered" if i == torch.float32 and o == dtype else "float32" if o == torch.float32 else "as input"'),
         r"'float32': each received float32 and returned"),
        ("input and output swapped", _ops(
            word='"lowered" if o == torch.float32 and i == dtype else "float32" if o == dtype and i == torch.float32 '
                 'else "as input"'),
         r"which of a forward hook's arguments"),
        ("dtypes returned instead of what the policy did", _ops(word="o"), r"returned dtypes"),
        ("autocast never entered", _ops(autocast=False), r"never ran under"),
        ("hooks left attached", _ops(remove=False), r"still attached"),
        ("hooks removed after the forward, not in finally", _ops(finally_=False),
         r"forward pass raises an error half-way"),
        ("every module, containers too", _ops(leaves_only=False), r"reported containers .*not only leaf modules"),
    ],
    "smooth_check": [
        (
            "no bias correction",
            _SMOOTH_HEAD + """
        keep = beta ** gap
        v = keep * v + (1 - keep) * loss
        out.append(v)
    return out
""",
            r"bias correction",
        ),
        (
            "beta the wrong way round",
            _SMOOTH_HEAD + """
        keep = (1 - beta) ** gap
        v = keep * v + (1 - keep) * loss
        out.append(v / (1 - beta ** s))
    return out
""",
            r"wrong way round",
        ),
        (
            "beta the wrong way round, corrected consistently",
            _SMOOTH_HEAD + """
        keep = (1 - beta) ** gap
        v = keep * v + (1 - keep) * loss
        out.append(v / (1 - (1 - beta) ** s))
    return out
""",
            r"wrong way round",
        ),
        (
            "bias correction one step off",
            _SMOOTH_HEAD + """
        keep = beta ** gap
        v = keep * v + (1 - keep) * loss
        out.append(v / (1 - beta ** (s + 1)))
    return out
""",
            r"one step off",
        ),
        (  # the textbook (Adam's) average, right when every step is logged, applied to losses logged at other steps
            "the classic average, steps ignored",
            _SMOOTH_HEAD + """
        v = beta * v + (1 - beta) * loss
        out.append(v / (1 - beta ** t))
    return out
""",
            r"ignored the steps",
        ),
        (  # a time-weighted EMA of points: the past decays by the gap, but each logged loss comes in as one step
            "every logged loss weighed as one step",
            """
def smooth(losses, beta, steps=None):
    steps = list(range(1, len(losses) + 1)) if steps is None else list(steps)
    out, v, w, last = [], 0.0, 0.0, 0
    for s, loss in zip(steps, losses):
        keep = beta ** (s - last)
        v = keep * v + (1 - beta) * loss
        w = keep * w + (1 - beta)
        out.append(v / w)
        last = s
    return out
""",
            r"as if it stood for\s+one training step",
        ),
        (
            "bias correction counts the logs",
            _SMOOTH_HEAD + """
        keep = beta ** gap
        v = keep * v + (1 - keep) * loss
        out.append(v / (1 - beta ** t))
    return out
""",
            r"counts the logged losses, not the training steps",
        ),
        (
            "the average starts one step before the first log",
            """
def smooth(losses, beta, steps=None):
    steps = list(range(1, len(losses) + 1)) if steps is None else list(steps)
    out, v = [], 0.0
    start = last = steps[0] - 1 if steps else 0
    for s, loss in zip(steps, losses):
        keep = beta ** (s - last)
        v = keep * v + (1 - keep) * loss
        out.append(v / (1 - beta ** (s - start)))
        last = s
    return out
""",
            r"one step before the first logged loss",
        ),
    ],
    "verdict_check": [
        (
            "agreement judged before divergence",
            _VERDICT_HEAD + """
    if not all(math.isfinite(v) for v in run):
        return "diverged"
    s, r = _smooth(run, beta), _smooth(reference, beta)
    if abs(s[-1] - r[-1]) <= rtol * abs(r[-1]):
        return "agrees"
    return "diverged" if s[-1] > s[0] * (1 + rtol) else "stalled"
""",
            r"alongside a reference that rose too: go back to what each of the three words says",
        ),
        (
            "tolerance relative to the run",
            _verdict(agree="abs(s[-1] - r[-1]) <= rtol * abs(s[-1])"),
            r"near the tolerance",
        ),
        (
            "rise judged on the raw first and last losses",
            _verdict(rise="run[-1] > run[0] * (1 + rtol)"),
            r"by more than rtol, the one allowance verdict is given. Look at what\s+your test of 'ended worse'",
        ),
        (
            "rise judged on the smoothed curve with no allowance (r22)",
            _verdict(rise="s[-1] > s[0]"),
            r"by more than rtol, the one allowance verdict is given. Look at what\s+your test of 'ended worse'",
        ),
        (
            "rise judged against the reference's start (r23)",
            _verdict(rise="s[-1] > r[0] * (1 + rtol)"),
            r"Whose start does 'ended worse than it started' compare with",
        ),
        (
            "the reference left unsmoothed",
            _VERDICT_HEAD + """
    if not all(math.isfinite(v) for v in run):
        return "diverged"
    s = _smooth(run, beta)
    if s[-1] > s[0] * (1 + rtol):
        return "diverged"
    return "agrees" if abs(s[-1] - reference[-1]) <= rtol * abs(reference[-1]) else "stalled"
""",
            r"one noisy step 30 % up",
        ),
        (
            "compares only the last raw value",
            _VERDICT_HEAD + """
    if not all(math.isfinite(v) for v in run):
        return "diverged"
    if abs(run[-1] - reference[-1]) <= rtol * abs(reference[-1]):
        return "agrees"
    s = _smooth(run, beta)
    return "diverged" if s[-1] > s[0] * (1 + rtol) else "stalled"
""",
            r"judge the smoothed curves",
        ),
        (
            "NaN taken as agreeing",
            _VERDICT_HEAD + """
    s, r = _smooth(run, beta), _smooth(reference, beta)
    if s[-1] > s[0] * (1 + rtol):
        return "diverged"
    if abs(s[-1] - r[-1]) > rtol * abs(r[-1]):
        return "stalled"
    return "agrees"
""",
            r"every comparison with NaN is False",
        ),
        (  # a copy test: a run ending far below its reference "agreed" and no case told
            "one-sided tolerance: a run far below the reference agrees",
            _verdict(agree="s[-1] <= r[-1] * (1 + rtol)"),
            r"ended 30 % below the reference 'agrees'",
        ),
        (
            "absolute instead of relative tolerance",
            _verdict(agree="abs(s[-1] - r[-1]) <= rtol"),
            r"what section 4 says rtol is relative to",
        ),
    ],
    "smallest_kept_check": [
        (
            "the smallest normal number",
            "def smallest_kept(exponent_bits, mantissa_bits, flush_to_zero=False):\n"
            "    return 2.0 ** (2 - 2 ** (exponent_bits - 1))",
            r"the smallest \*normal\* number",
        ),
        (
            "bias 2^(e-1), off by one",
            "def smallest_kept(exponent_bits, mantissa_bits, flush_to_zero=False):\n"
            "    return 2.0 ** (1 - 2 ** (exponent_bits - 1) - mantissa_bits)",
            r"miscounts the bias or a subnormal's exponent",
        ),
        (
            "a table of the course's formats",
            "def smallest_kept(exponent_bits, mantissa_bits, flush_to_zero=False):\n"
            "    return {(8, 23): 2.0**-149, (8, 7): 2.0**-133, (5, 10): 2.0**-24, (4, 3): 2.0**-9,\n"
            "            (5, 2): 2.0**-16}.get((exponent_bits, mantissa_bits), 0.0)",
            r"smallest_kept\(6, 9\) returned 0",
        ),
        (
            "mantissa counted with its hidden bit",
            "def smallest_kept(exponent_bits, mantissa_bits, flush_to_zero=False):\n"
            "    return 2.0 ** (2 - 2 ** (exponent_bits - 1) - (mantissa_bits + 1))",
            r"miscounts the bias or a subnormal's exponent",
        ),
        (  # the textbook (IEEE) formula, right without flushing, applied where the arithmetic flushes
            "flush_to_zero ignored",
            "def smallest_kept(exponent_bits, mantissa_bits, flush_to_zero=False):\n"
            "    return 2.0 ** (2 - 2 ** (exponent_bits - 1) - mantissa_bits)",
            r"returned what it returns without it",
        ),
        (
            "flush-to-zero taken to drop every format's own subnormals",
            "def smallest_kept(exponent_bits, mantissa_bits, flush_to_zero=False):\n"
            "    bias = 2 ** (exponent_bits - 1) - 1\n"
            "    return 2.0 ** (1 - bias) if flush_to_zero else 2.0 ** (1 - bias - mantissa_bits)",
            r"dropped the subnormals of every format",
        ),
        (
            "flush-to-zero taken to leave fp32's smallest normal in every format",
            "def smallest_kept(exponent_bits, mantissa_bits, flush_to_zero=False):\n"
            "    bias = 2 ** (exponent_bits - 1) - 1\n"
            "    return 2.0 ** -126 if flush_to_zero else 2.0 ** (1 - bias - mantissa_bits)",
            r"the same number for every format",
        ),
    ],
}
