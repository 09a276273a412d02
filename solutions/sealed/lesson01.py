"""Lesson 01_crossover: the sealed functions' bodies (grader.checks._sealed). Never packaged nor released:
scripts/build_keys.py seals each top-level function into grader/checks/keys/01_crossover.sealed.json. Each runs in
grader/checks/lesson01.py's globals, where its stub is."""


def _scores_bound_from(fmt: str, itemsize: int, d: int = SCORES_D) -> float:
    """The s (not rounded) from which S = Q Kᵀ, Q and K (s, d) and S (s, s) all of `itemsize` bytes and S written to
    memory, reaches the H100's balance point in `fmt`; math.inf when it never does. Its intensity is
    2·s²·d / ((2·s·d + s²)·itemsize) = 2·s·d / ((2·d + s)·itemsize), which rises towards 2·d / itemsize."""
    from grader import specs

    balance = specs.chip(_BOUND_CHIP).balance(fmt)
    room = 2 * d - balance * itemsize
    return math.inf if room <= 0 else 2 * balance * itemsize * d / room


def scores_rows() -> list[dict]:
    """COMPUTE_BOUND_N's reveal: the scores matmul's FLOP per byte at a few lengths, per format, and where it is
    compute-bound on the H100 (course code: called before the first guess, it counts as asking for the answer)."""
    from grader import specs

    chip = specs.chip(_BOUND_CHIP)
    rows = []
    for fmt, size in _BOUND_FORMATS:
        row = {"format": fmt, "H100 balance FLOP/byte": round(chip.balance(fmt), 1)}
        for s in (128, 1024, 8192, 65536):
            row[f"s = {s:,}"] = round(2 * s * SCORES_D / ((2 * SCORES_D + s) * size), 1)
        row["however long s"] = f"below {2 * SCORES_D / size:.0f}"
        first = _scores_bound_from(fmt, size)
        row["compute-bound from s"] = "never" if math.isinf(first) else math.ceil(first)
        rows.append(row)
    return rows


def _compute_bound_mistake(got: dict) -> str | None:
    """The known mistake a COMPUTE_BOUND_N answer makes, in words with no value in them; None if none."""
    from grader import specs

    balance = specs.chip(_BOUND_CHIP).balance("fp32")
    s = got["fp32"]

    def near(target: float) -> bool:
        return abs(s - target) <= max(0.5, 0.01 * target)

    if near(balance * 4):
        return ("it leaves the scores out of the traffic: a plain attention writes S to memory, and S has s² "
                "elements where Q and K have s·d")
    if near(1.5 * 4 * balance):
        return ("it prices a square n×n matmul: here only S is s×s; Q and K are s×d, and d stays 128 however long the "
                "sequence")
    if near(2 * balance * SCORES_D / (2 * SCORES_D - balance)):
        return "it counts elements, not bytes: the balance point is FLOP per byte, and a float32 element is several"
    if near(balance):
        return "the fp32 answer is the balance point itself, a number of FLOP per byte, not a sequence length"
    if got["bf16 ever"]:
        return ("the bf16 answer: however long the sequence, how many FLOPs per byte can this matmul reach with d "
                "fixed? Set that beside the tensor cores' balance point")
    return None


def _compute_bound_band(first: dict, context: dict) -> tuple[float, str]:
    """COMPUTE_BOUND_N's first guess: the fp32 length (full within 2% of the model's s, half within a factor 1.5) and
    the bf16 yes or no count one half each."""
    from grader import predictions

    fp32 = predictions.band(first["fp32"], _scores_bound_from("fp32", 4), tight=0.02, loose=0.5)
    bf16 = 0.0 if first["bf16 ever"] else 1.0
    fraction = (fp32 + bf16) / 2
    if fraction == 1.0:
        return fraction, "your first guess is where the model puts both"
    mistake = _compute_bound_mistake(first)
    if mistake:
        return fraction, f"your first guess: {mistake}"
    return fraction, ("your first guess is outside the model's band: count the scores matmul's FLOPs and the least "
                      "bytes it must move, as section 2 counted a square one's, and set their ratio beside the H100's "
                      "balance point in each format")


def _compute_bound_final(answer: dict, context: dict) -> str | None:
    return _compute_bound_mistake(answer)


def _compute_bound_said(context: dict) -> str:
    fp32 = math.ceil(_scores_bound_from("fp32", 4))
    return (f"on the H100, S = Q Kᵀ with d = {SCORES_D} and S written to memory is compute-bound from s = {fp32} in "
            f"fp32, and never in bf16: its FLOPs per byte stay below {2 * SCORES_D // 2} however long the sequence, "
            "under the tensor cores' balance point (datasheet)")


def add_intensity() -> float:
    """The model's FLOP per byte of the float32 add c = a + b (course code: called before ADD_PREDICTION's first guess,
    it counts as asking for the answer)."""
    return 1 / (3 * torch.float32.itemsize)


def _add_model(context: dict) -> float | None:
    """The model's add rate in FLOP/s at the bandwidth the copy measured; None without that measurement."""
    got = _measured(context, _ADD_NEEDS)
    return None if got is None else got["copy_bandwidth"] * add_intensity()


def _add_h100_model() -> float:
    """The model's FLOP/s of ADD_H100's add on the H100: c = a + b in bfloat16, a and c ADD_H100_N² (far past its
    L2) and b one row of ADD_H100_N broadcast over a's rows. a comes in once and c goes out once; b's one row comes in
    once and is reused for every row (it stays in L2). One FLOP per element of c, at the datasheet's bandwidth."""
    from grader import specs

    n, width = ADD_H100_N, torch.bfloat16.itemsize
    return specs.chip(_BOUND_CHIP).bandwidth * n * n / ((2 * n * n + n) * width)


def _add_mistake(gflops: float, context: dict) -> str | None:
    got = _measured(context, _ADD_NEEDS)
    if got is None:
        return None
    bw, peak = got["copy_bandwidth"], got["matmul_peak"]
    flops = gflops * 1e9
    return _named(flops, [
        (bw / 8, "it counts reading a and b but not writing c: the sum has to go to memory too"),
        (bw / 3, "it counts elements, not bytes: the bandwidth is bytes per second, and a float32 element is several bytes"),
        (bw * 12, "it multiplies the bandwidth by bytes per FLOP: an add does less than one FLOP per byte it moves"),
        (bw / 16, "it counts c as read as well as written; count each array once, as the copy's bytes were counted"),
        (bw / 24, "it counts two FLOPs per element: an add is one FLOP (a multiply-add is two)"),
        (bw, "it has the add doing one FLOP per byte moved"),
        (peak, "it predicts the add at the matmul's rate: an add cannot reuse an element, so the memory, not the "
               "arithmetic, sets its pace"),
    ]) or _named(flops, [(bw / 12 * 1e9, "it is in FLOP/s; the key asks for GFLOP/s")])


def _add_h100_mistake(gflops: float) -> str | None:
    """The known mistake an H100 answer (GFLOP/s) makes, in words with no value in them; None if none."""
    from grader import specs

    chip = specs.chip(_BOUND_CHIP)
    bw, flops = chip.bandwidth, gflops * 1e9
    return _named(flops, [
        (bw / 6, "it counts b as a whole matrix crossing memory: b is one row that every row of c uses; how often "
                 "must its elements cross?"),
        (bw / 12, "it counts 4 bytes per element, and b as a whole matrix: in bfloat16 an element is 2 bytes, and b "
                  "is one row"),
        (bw / 8, "it counts 8 bytes per FLOP: how many bytes is one bfloat16 element?"),
        (bw / 2, "it counts 2 bytes per FLOP: the traffic of one matrix, where a comes in and c goes out"),
        (bw, "it has the add doing one FLOP per byte moved"),
        (chip.peak("bf16"), "it predicts the add at the tensor cores' rate: tensor cores multiply matrices, and an add "
                            "reuses no element of a, so the memory, not the arithmetic, sets its pace"),
        (chip.peak("fp32"), "it predicts the add at the chip's arithmetic rate: an add reuses no element of a, so the "
                            "memory, not the arithmetic, sets its pace"),
    ]) or _named(flops, [(_add_h100_model() * 1e9, "it is in FLOP/s; the key asks for GFLOP/s")])


def _add_band(first: dict, context: dict) -> tuple[float, str]:
    """ADD_PREDICTION's first guess: this machine's add against the model fed with this run's copy bandwidth (full
    within 20%, half within 2×), and the H100's bfloat16 add against the datasheet's (the same band);
    the two keys count equally."""
    from grader import predictions

    want = _add_model(context)
    here = 0.0 if want is None else predictions.band(first["add GFLOP/s"] * 1e9, want, tight=0.2, loose=1.0)
    # 20% as this machine's: a real H100 streams an add below its datasheet bandwidth (copy test r23 recalled about
    # 85-90%), and a learner who allows for that has reasoned as well as one who does not
    h100 = predictions.band(first[ADD_H100_KEY] * 1e9, _add_h100_model(), tight=0.2, loose=1.0)
    return predictions.keys_band([
        ("this machine", here, _NO_CONTEXT if want is None else _add_mistake(first["add GFLOP/s"], context),
         "this machine's add is outside the model's band: how many bytes cross for each of its FLOPs, and how fast did "
         "this machine move bytes?"),
        ("the H100", h100, _add_h100_mistake(first[ADD_H100_KEY]),
         "the H100's add is outside the model's band: what limits an add there, and how many bytes does each of its "
         "FLOPs move in bfloat16?"),
    ], "your first guess is where the model puts both")


def _add_final(answer: dict, context: dict) -> str | None:
    mistake = _add_mistake(answer["add GFLOP/s"], context)
    if mistake:
        return f"this machine: {mistake}"
    mistake = _add_h100_mistake(answer[ADD_H100_KEY])
    return f"the H100: {mistake}" if mistake else None


def _add_said(context: dict) -> str:
    want = _add_model(context)
    h100 = (f"the H100's bfloat16 add of a {ADD_H100_N}-wide row to a {ADD_H100_N}² matrix at "
            f"{_add_h100_model() / 1e9:.3g} GFLOP/s (its datasheet bandwidth at the add's FLOPs per byte: a in, c out, "
            "b's one row once)")
    if want is None:
        return f"run the copy cell first: the model needs this machine's bandwidth; it puts {h100}"
    return (f"the model puts this machine's add at {want / 1e9:.3g} GFLOP/s (the copy's bandwidth at the add's FLOPs per "
            f"byte) and {h100}")


def _crossover_n(fixed: float, cpu_flops: float, gpu_flops: float, work_power: int = 3) -> float:
    """The n at which fixed + 2n^p/gpu_flops = 2n^p/cpu_flops (p = 3: a matmul's work; p = 2: the outputs only)."""
    return (fixed / (2 * (1 / cpu_flops - 1 / gpu_flops))) ** (1 / work_power)


def crossover_n_at(cpu_flops: float, gpu_flops: float) -> float:
    """The n at which the course's model has a CPU of `cpu_flops` (no fixed cost) and a GPU of `gpu_flops` (with the
    modelled fixed cost) take the same time: the reveal cell's model, for the printed CPU and for this one. Called before
    CROSSOVER_PREDICTION's first guess, it counts as asking for the answer."""
    return _crossover_n(gpu_fixed_seconds(), cpu_flops, gpu_flops)


def _crossover_mistake(n: float) -> str | None:
    """The known mistake an answer matches (to 3%), in words with no value in them; None if it matches none."""
    fixed, cpu, gpu = _crossover_inputs()
    known = [
        (_crossover_n(fixed, cpu, gpu, 2), "it is where the two times meet if a matmul's work grew with its n² outputs; "
                                            "each output is a dot product of length n"),
        (_crossover_n(fixed * 1e3, cpu, gpu), "it reads the fixed cost in milliseconds; it is in microseconds"),
        (_crossover_n(fixed * 2, cpu, gpu), "it counts a multiply-add as 1 FLOP where the rates count 2"),
    ]
    for value, words in known:
        if abs(n - value) <= 0.03 * value:
            return words
    return None


def _crossover_band(first: dict, context: dict) -> tuple[float, str]:
    """CROSSOVER_PREDICTION's first guess against the model: full within 10%, half within a factor 1.5."""
    from grader import predictions

    want = _crossover_n(*_crossover_inputs())
    fraction = predictions.band(first["n"], want, tight=0.10, loose=0.5)
    if fraction == 1.0:
        return fraction, "your first guess is where the model puts it"
    mistake = _crossover_mistake(first["n"])
    if mistake:
        return fraction, f"your first guess: {mistake}"
    return fraction, ("your first guess is outside the model's band: the two calls take the same time where the "
                      "CPU's arithmetic alone equals the GPU's fixed cost plus the GPU's arithmetic")


def _crossover_final(answer: dict, context: dict) -> str | None:
    mistake = _crossover_mistake(answer["n"])
    return mistake


def _crossover_said(context: dict) -> str:
    return f"the model puts the crossover at n ≈ {_crossover_n(*_crossover_inputs()):.0f}"


def _linear_ratio_model(context: dict, terms: str = "roofline") -> float | None:
    """Time per call of batch LINEAR_BATCH over batch 1 by the model on this run's figures; None without them.

    terms: "roofline" (the slower of moving and computing), "sum" (the two added), "per sample" (weights per sample).
    """
    got = _measured(context, _LINEAR_NEEDS)
    if got is None:
        return None
    peak, bw, d = got["matmul_peak"], got["copy_bandwidth"], int(got["linear_d"])

    def call_seconds(batch: int) -> float:
        flops = 2 * batch * d * d
        weights = d * d * (batch if terms == "per sample" else 1)
        nbytes = (weights + batch * 2 * d) * 4
        return flops / peak + nbytes / bw if terms == "sum" else max(flops / peak, nbytes / bw)

    return call_seconds(LINEAR_BATCH) / call_seconds(1)


def _linear_mistake(ratio: float, context: dict) -> str | None:
    want = _linear_ratio_model(context)
    if want is None:
        return None
    known = [(want / LINEAR_BATCH, "it is the time per sample; the key asks for the time per call")]
    if want < 0.75 * LINEAR_BATCH:
        known.append((float(LINEAR_BATCH), "it grows the time with the work: but every batch reads the same weights "
                                           "once, and at batch 1 reading them is the larger part"))
    if _linear_ratio_model(context, "sum") and abs(_linear_ratio_model(context, "sum") - want) > 0.05 * want:
        known.append((_linear_ratio_model(context, "sum"), "it adds the time of the arithmetic to the time of the "
                                                         "weight read; the chip does both at once"))
    return _named(ratio, known)


def _linear_band(first: dict, context: dict) -> tuple[float, str]:
    """LINEAR_PREDICTION's first guess against the roofline on this run's peak and bandwidth: full within 10% (the
    arithmetic and the weight read added are about 15% off on a laptop), half within 2×."""
    from grader import predictions

    want = _linear_ratio_model(context)
    if want is None:
        return 0.0, _NO_CONTEXT
    fraction = predictions.band(first[LINEAR_KEY], want, tight=0.1, loose=1.0)
    if fraction == 1.0:
        return fraction, "your first guess is where the model puts it"
    mistake = _linear_mistake(first[LINEAR_KEY], context)
    if mistake:
        return fraction, f"your first guess: {mistake}"
    return fraction, ("your first guess is outside the model's band: for each batch, which takes longer on this "
                      "machine, reading the weights or the arithmetic, and how does each grow with the batch?")


def _linear_final(answer: dict, context: dict) -> str | None:
    return _linear_mistake(answer[LINEAR_KEY], context)


def _linear_said(context: dict) -> str:
    want = _linear_ratio_model(context)
    if want is None:
        return "run section 7 first: the model needs this machine's peak and bandwidth"
    return f"the roofline on this run's figures puts batch {LINEAR_BATCH} at {want:.3g}× batch 1's time per call"
