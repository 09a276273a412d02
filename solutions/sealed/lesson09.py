"""Lesson 09_serving: the sealed functions' bodies (grader.checks._sealed). Never packaged nor released:
scripts/build_keys.py seals each top-level function into grader/checks/keys/09_serving.sealed.json. Each runs in
grader/checks/lesson09.py's globals, where its stub is."""


def _tps_targets(context: dict) -> dict[str, tuple[float, float, float]]:
    """Per key (tokens/s the reading allows, bytes per weight, tokens/s the arithmetic allows; 0: not known)."""
    h100 = specs.chip("H100")
    n = _seven_b()
    out = {_H100_KEY: (h100.bandwidth / (n * 2), 2.0, h100.peak("bf16") / (2 * n))}
    bw, weights = context.get("bandwidth"), context.get("weight_bytes")
    if is_number(bw) and is_number(weights) and bw > 0 and weights > 0:
        rate = context.get("matmul_rate_1")
        out[_HERE_KEY] = (bw / weights, 4.0, rate / (2 * weights / 4) if is_number(rate) and rate > 0 else 0.0)
    return out


def _show_batch1(one: list[float]) -> None:
    """Section 1's reveal, once your guess is recorded: the batch-1 step timed here (`one`, seconds per repeat) beside
    the course's model of the ceiling, and which of the two limits sets it. Here, not in the cell: a copy test read
    the model's rule off the cell's source before guessing. Called before a first guess, it is the deliberate reveal."""
    import statistics

    import pandas as pd
    from IPython.display import display

    step = statistics.median(one)
    ceilings = batch1_ceilings()
    ceiling, reading, arithmetic = ceilings[_HERE_KEY]
    _, h100_reading, h100_flops = ceilings[_H100_KEY]
    display(pd.DataFrame([
        {"": "here, batch 1 (float32)", "ceiling, the course's model (tokens/s)": f"{ceiling:.1f}",
         "measured (tokens/s)": f"{1 / step:.1f}", "MBU (measured)": f"{(1 / step) / reading:.0%}"},
        {"": "H100, LLaMA-7B in bf16 (model)", "ceiling, the course's model (tokens/s)": f"{h100_reading:.0f}",
         "measured (tokens/s)": "no GPU here", "MBU (measured)": "no GPU here"},
    ]).set_index(""))
    print(f"one step at batch 1: {step * 1e3:.0f} ms (fastest {min(one) * 1e3:.0f}, slowest {max(one) * 1e3:.0f}). "
          f"If the arithmetic set the pace instead, the H100 would make {h100_flops:,.0f} tokens/s: about "
          f"{h100_flops / h100_reading:.0f} times the ceiling that its memory allows.")
    bound = "reading the weights" if reading <= arithmetic else "the arithmetic"
    print(f"Here, reading the weights allows {reading:.1f} tokens/s and the arithmetic, at the batch-1 matmul rate "
          f"measured above, {arithmetic:.1f}: {bound} sets this machine's ceiling"
          + (", as on the H100." if reading <= arithmetic else
             ", unlike on the H100: a CPU's batch-1 matrix-vector product runs far below its batch-16 rate, "
             "slow enough here to fall behind the memory."))
    print("MBU, model bandwidth utilisation: the bytes a step must read over the step's time, as a share of the "
          "bandwidth (serving's counterpart of lesson 05's MFU). Above 100 %, the bandwidth was measured at a "
          "busier moment than this step (both are measurements; the load on this machine moves).")


def _ceiling(reading: float, arithmetic: float) -> float:
    """The slower of the two limits (an unknown arithmetic limit, 0, limits nothing)."""
    return min(reading, arithmetic) if arithmetic > 0 else reading


def _tps_mistake(key: str, value: float, reading: float, width: float, flop_bound: float) -> str | None:
    """The kind of mistake a tokens/s figure shows, in words with no value; None when it is within the band."""
    target = _ceiling(reading, flop_bound)
    if _ratio_off(value, target) <= 1.25:
        return None
    if flop_bound and flop_bound > reading * 1.25 and _near(value, flop_bound, 0.5):
        return (f"{key}: that is the ceiling the arithmetic sets; at batch 1 each weight is used once per step, so "
                "the step waits for memory long before the arithmetic")
    if flop_bound and flop_bound < reading and _near(value, reading):
        return (f"{key}: that is what the reading allows, but at the batch-1 matmul rate measured here the arithmetic "
                "is slower still: which of the two does a step wait for?")
    target = reading  # the bytes' mistakes below are read against what the reading allows
    if _near(value, target / 8):
        return f"{key}: did you count bits instead of bytes per weight?"
    if _near(value, target * width / 4) and width != 4:
        return f"{key}: the model is in bf16: how many bytes does one bf16 weight take?"
    if _near(value, target / 2) or _near(value, target * 2):
        return (f"{key}: check the bytes one weight takes in this model's dtype, and how many times a step reads "
                "each weight")
    return (f"{key}: not what batch-1 generation can reach; go back to section 1: what one step must do, and which "
            "of the chip's two rates it waits for")


def _tps_band(first: dict, context: dict) -> tuple[float, str]:
    """Each part judged against the bandwidth ceiling; the run's part only when it was measured before the guess."""
    targets = _tps_targets(context)
    fractions, said = [], []
    from grader.predictions import band

    for key, (target, width, flop_bound) in targets.items():
        # 15 %: the ceiling is the printed figures put together (they round by a few per cent at most); a batch-1 step
        # timed instead of predicted runs at 70-85 % of it here (copy test r8 timed 12.8 against 15.2)
        fractions.append(band(first[key], _ceiling(target, flop_bound), tight=0.15, loose=1.0))
        about = _tps_mistake(key, first[key], target, width, flop_bound)
        if about:
            said.append(about)
    if _HERE_KEY not in targets:  # the check takes no first guess before the measuring cell (needs=); a record made
        fractions.append(0.0)     # by hand without it earns nothing for this part
        said.append(f"'{_HERE_KEY}' could not be judged: no bandwidth of this run was recorded before your guess")
    fraction = sum(fractions) / len(fractions)
    return fraction, ("your first guess: " + "; ".join(said)) if said else "your first guess is the ceiling the bytes set"


def _tps_final(answer: dict, context: dict) -> str | None:
    found = [m for key, (t, w, f) in _tps_targets(context).items() if (m := _tps_mistake(key, answer[key], t, w, f))]
    return "; ".join(found) or None


def _tps_said(context: dict) -> str:
    targets = _tps_targets(context)
    said = [f"{key}: about {_ceiling(t, f):.3g} tokens/s" for key, (t, _, f) in targets.items()]
    return "; ".join(said)


def _batch_model(context: dict) -> float:
    """The model BATCH_PREDICTION is scored against, fed with this run's measurements."""
    bw, weights, n, rate = (context.get(k) for k in ("bandwidth", "weight_bytes", "n_params", "matmul_rate_16"))
    if not all(is_number(v) and v > 0 for v in (bw, weights, n, rate)):
        return None  # nothing measured before the guess (a record made by hand: the check takes none then)
    rate_1 = context.get("matmul_rate_1")
    t1 = max(weights / bw, 2 * n / rate_1) if is_number(rate_1) and rate_1 > 0 else weights / bw
    t16 = max(weights / bw, 2 * n * 16 / rate)
    return 16 * t1 / t16


def _batch_mistake(value: float) -> str | None:
    if value <= 1.3:
        return ("about no gain from the batch: as if each sequence read the weights again. In one step every weight "
                "is read once and used by all 16 sequences")
    if value > 16 * 1.05:
        return ("more than the batch: 16 sequences make 16 tokens per step, so tokens/s grows by at most 16 unless a "
                "step gets faster than at batch 1")
    return None


def _batch_band(first: dict, context: dict) -> tuple[float, str]:
    from grader.predictions import band

    value = first[_BATCH_KEY]
    model = _batch_model(context)
    if model is None:
        return 0.0, "your first guess was recorded before this run measured its rates: it cannot be judged"
    fraction = band(value, model, tight=0.2, loose=0.6)  # the model is this run's printed rates put together: a
    # guess that puts them together right lands within rounding of it; a sweep measured instead of predicted does not
    about = _batch_mistake(value)
    if about:  # wrong in principle: no band credit, however near the number happens to be
        return 0.0, f"your first guess: {about}"
    if fraction < 1.0:
        return fraction, ("your first guess is off the model fed with this run's measurements: at batch 1 and at "
                          "batch 16, which takes longer here, reading the weights or their arithmetic?")
    return fraction, "your first guess agrees with the model fed with this run's measured rates"


def _batch_said(context: dict) -> str:
    model = _batch_model(context)
    if model is None:
        return "the model needs this run's rates: run section 1's first cell"
    return f"the model fed with this run's rates gives about {model:.2g}x (at most 16x)"


def model_knee_batch(chip, dtype: str = "bf16", bytes_per_weight: float = 2.0) -> float:
    """Model: the batch at which a decode step's weight arithmetic catches up with reading them, on `chip`."""
    return chip.peak(dtype) / chip.bandwidth * bytes_per_weight / 2


def _judge_quantize(observation: dict) -> None:
    """quantize_int8, judged by what any right answer does (section 6), with no answer held here."""
    got = observation.get("got", None) if isinstance(observation, dict) else None
    w = _weight_with_outlier()
    out_f, in_f = w.shape
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(t, torch.Tensor) for t in got)):
        fail("quantize_int8 should return two tensors, (q, scale); it returned something else.")
    q, scale = got
    if q.dtype != torch.int8 or tuple(q.shape) != (out_f, in_f):
        fail(f"q should be an int8 tensor of the weight's shape {tuple(w.shape)}; it is {q.dtype} of "
             f"{tuple(q.shape)}.")
    if scale.numel() == 1:
        fail("you used one scale for the whole tensor, so the outlier sets the levels of every other weight "
             "(section 6: how few weights can share the outlier's scale?).")
    if scale.numel() == in_f * out_f:
        fail("you gave every weight a scale of its own: can an int8 matmul apply those after its integer sums, and "
             "how many bytes do they take beside the int8 weights? (section 6)")
    if scale.numel() == in_f and tuple(scale.shape) in ((in_f,), (1, in_f)):
        fail("your scales change inside the sums an int8 matmul makes: which weights share one dot product, and can "
             "a scale that changes within a sum be applied after it? (section 6)")
    if scale.numel() != out_f or tuple(scale.shape) not in ((out_f,), (out_f, 1)) or scale.dtype != torch.float32:
        fail(f"scale is {scale.dtype} of shape {tuple(scale.shape)}: float32, laid out so that an int8 matmul can "
             "apply each scale after its integer sum and an outlier stretches as few other weights as it can "
             "(section 6).")
    s = scale.reshape(out_f).double()
    if not bool(torch.isfinite(s).all()) or bool((s <= 0).any()):
        fail("a scale is zero, negative or not finite (where the weights are all zero?); section 6 asks for a finite, "
             "positive scale there too.")
    qi = q.long()
    if int(qi.abs().max()) > 127:
        fail("q holds -128: keep q in [-127, 127], symmetric around 0, so a value and its negative round alike.")
    w64 = w.double()
    amax = w64.abs().amax(1)
    rows = amax > 0
    err = (qi.double() * s[:, None] - w64).abs()
    if bool((err > s[:, None] / 2 * (1 + 1e-5) + 1e-12).any()):
        if bool(torch.allclose(s[rows], amax[rows] / 128, rtol=1e-5)):
            fail("each row's largest weight comes back a whole level off: your levels stop short of it, and q is "
                 "clamped there.")
        if bool((qi.abs().double() <= (w64 / s[:, None]).abs() * (1 + 1e-5) + 1e-6).all()):
            fail("some weights come back almost a whole level off, always nearer zero than they were (what does a cast "
                 "to an integer do?).")
        fail("some weights come back further than half a level (scale / 2) from what they were (section 6).")
    if bool((qi[rows].abs().amax(1) != 127).any()):
        fail("a row's largest weight lands short of ±127: its levels are further apart than they need be, and finer "
             "ones would still hold every weight of that row (section 6).")


def int8_error_rows(quantize, weight):
    """Section 6's comparison: `quantize` (the learner's quantize_int8) on `weight` as it is and with its first row made
    50x the rest, against the same function given the tensor reshaped to (1, out x in). Per case, the mean error of the
    weights given back over their mean size, on every row but the first."""
    import torch

    def back(q, scale, shape):
        q = q.float()
        return (q * scale.float().reshape(scale.shape + (1,) * (q.dim() - scale.dim()))).reshape(shape)

    rows = []
    for label, w in (("as it is", weight), ("one row 50× the rest", torch.cat([weight[:1] * 50, weight[1:]]))):
        mine = (back(*quantize(w), w.shape) - w)[1:].abs()
        whole = (back(*quantize(w.reshape(1, -1)), w.shape) - w)[1:].abs()
        typical = w[1:].abs().mean()
        rows.append({"weight": label, "mean error / mean |w|, your quantize_int8": float(mine.mean() / typical),
                     "the same, one scale for the whole tensor": float(whole.mean() / typical)})
    return rows
