"""Mutants for lesson 01 (crossover)."""

LESSON = "01_crossover"

_TIME_OP_HEAD = """
import statistics, time
def time_op(fn, sync, warmup, repeats):
"""
# warm up until a synchronized call is no longer clearly faster than the one before (the device is warm)
_WARM = """    previous = float('inf')
    while True:
        t = time.perf_counter(); fn(); sync(); took = time.perf_counter() - t
        if took > 0.95 * previous: break
        previous = took
"""

# What lesson 01's show cells note for its predictions (grader.predictions.note_measured) on a made-up laptop: a
# 13.7 GB/s copy, a 96.4 GFLOP/s best matmul, the default 2048² Linear. Test data, not a measurement
# (tests/notebook_cells.namespace notes it before the exercise cells run).
MEASURED = {"copy_bandwidth": 13.7e9, "matmul_peak": 96.4e9, "linear_d": 2048}
SHOWN = {"here_bandwidth": MEASURED["copy_bandwidth"], "here_peak": MEASURED["matmul_peak"],
         "linear_d": MEASURED["linear_d"]}  # the show cells' variables that hold them, as a learner's kernel has them

_HERE = "_m = {'copy_bandwidth': here_bandwidth, 'matmul_peak': here_peak, 'linear_d': linear_d}\n"


def _add(expression: str, why: str = "a guess with a reason", h100: str = "3350 / 4") -> str:
    """An ADD_PREDICTION in GFLOP/s: this machine's from this run's figures, `bw` (copy, bytes/s) and `peak` (matmul,
    FLOP/s); the H100's bfloat16 add from its datasheet, `hbw` (bytes/s), `hpeak` and `hfp32` (FLOP/s)."""
    return (_HERE + "bw, peak = _m['copy_bandwidth'], _m['matmul_peak']\n"
            "hbw, hpeak, hfp32 = 3.35e12, 989.5e12, 67e12\n"
            f"ADD_PREDICTION = {{'add GFLOP/s': {expression}, 'H100 bf16 GFLOP/s': {h100}, 'why': {why!r}}}")


def _linear(terms: str, why: str = "a guess with a reason") -> str:
    """A LINEAR_PREDICTION on this run's figures with one call's time worked out as `terms` (in batch b)."""
    return (_HERE + "peak, bw, d = _m['matmul_peak'], _m['copy_bandwidth'], int(_m['linear_d'])\n"
            f"t = lambda b: {terms}\n"
            f"LINEAR_PREDICTION = {{'batch 64 / batch 1': t(64) / t(1), 'why': {why!r}}}")


_LINEAR_HEAD = """
def linear_forecast(batch, d_in, d_out, dtype, peak_flops, bandwidth):
"""

def _crossover(power: int, fixed: float = 1.0, gpu: str = "specs.chip('T4').peak('fp32')") -> str:
    """A CROSSOVER_PREDICTION solved with the work as 2n^power, the fixed cost times `fixed`, the GPU at `gpu`.

    (fixed=2 gives the n of counting a multiply-add as 1 FLOP: both halve the work against the fixed cost.)
    """
    return ("import math\nfrom grader import specs\nfrom grader.checks import lesson01\n"
            f"_f, _c, _g = lesson01.gpu_fixed_seconds() * {fixed}, lesson01.CROSSOVER_CPU_FLOPS, {gpu}\n"
            f"CROSSOVER_PREDICTION = {{'n': (_f / (2 * (1 / _c - 1 / _g))) ** (1 / {power}), 'why': 'solved for n'}}")


MUTANTS = {
    "matmul_flops_check": [
        ("one FLOP per multiply-add", "def matmul_flops(n): return n**3", r"counts each multiply-add once"),
        ("counts outputs only", "def matmul_flops(n): return 2 * n**2", r"number of outputs"),
        ("n-1 additions", "def matmul_flops(n): return n * n * (2 * n - 1)", r"n−1 additions"),
        ("returns a float", "def matmul_flops(n): return 2.0 * n**3", r"return an int"),
        ("one more add per output", "def matmul_flops(n): return 2 * n**3 + n**2", r"not the same multiple"),
    ],
    "matmul_bytes_check": [
        ("elements not bytes", "def matmul_bytes(n, dtype, out_dtype=None): return 3 * n * n", r"counts elements, not bytes"),
        ("the right count as a float (r27)", "def matmul_bytes(n, dtype, out_dtype=None):\n"
         "    return float(2 * n * n * dtype.itemsize + n * n * (out_dtype or dtype).itemsize)", r"return an int"),
        ("forgets writing C", "def matmul_bytes(n, dtype, out_dtype=None): return 2 * n * n * dtype.itemsize", r"nothing that goes back out"),
        ("ignores dtype", "def matmul_bytes(n, dtype, out_dtype=None): return 3 * n * n * 4", r"dtype was ignored"),
        ("reads and writes C", "def matmul_bytes(n, dtype, out_dtype=None): return 4 * n * n * dtype.itemsize", r"counts C as read from memory as well as written"),
        ("a read for every use", "def matmul_bytes(n, dtype, out_dtype=None): return (2 * n**3 + n * n) * dtype.itemsize",
         r"used n times: how\s+often must it cross memory"),
        ("n³ elements of each input (r22: told the output's dtype was ignored)",
         "def matmul_bytes(n, dtype, out_dtype=None): return 2 * n**3 * dtype.itemsize",
         r"doubling n should multiply the traffic"),
        ("C always written as float32 (r24: told it ignored out_dtype)",
         "def matmul_bytes(n, dtype, out_dtype=None): return 2 * n * n * dtype.itemsize + 4 * n * n",
         r"with no out_dtype, in what dtype does the product go out"),
        ("six matrices' worth (the audit's 6n²)", "def matmul_bytes(n, dtype, out_dtype=None): return 6 * n * n * dtype.itemsize",
         r"not the least traffic a matmul must cause"),
        ("bits instead of bytes", "def matmul_bytes(n, dtype, out_dtype=None): return 3 * n * n * dtype.itemsize * 8", r"counts bits"),
        ("the output's dtype ignored (the textbook 3n² x itemsize)",
         "def matmul_bytes(n, dtype, out_dtype=None): return 3 * n * n * dtype.itemsize", r"writes C at the inputs' width"),
        ("every matrix at the float32 accumulator's width",
         "def matmul_bytes(n, dtype, out_dtype=None): return 3 * n * n * (out_dtype or dtype).itemsize",
         r"counts A and B at float32 width too"),
        ("the widths swapped",
         "def matmul_bytes(n, dtype, out_dtype=None):\n    out = out_dtype or dtype\n"
         "    return n * n * (dtype.itemsize + 2 * out.itemsize)", r"the wrong way round"),
    ],
    "intensity_check": [
        ("bytes per FLOP", "def intensity(flops, nbytes): return nbytes / flops", r"the other way up"),
        ("integer division", "def intensity(flops, nbytes): return flops // nbytes", r"lost its fraction"),
    ],
    "attainable_flops_check": [
        ("max instead of min", "def attainable_flops(i, p, b): return max(p, i * b)", r"1000 FLOP/byte.*above the chip's peak"),
        ("bandwidth term only", "def attainable_flops(i, p, b): return i * b", r"above the chip's peak"),
        ("always peak", "def attainable_flops(i, p, b): return p", r"how many FLOPs per second can the memory feed"),
        ("moving and computing one after the other", "def attainable_flops(i, p, b): return 1 / (1 / p + 1 / (i * b))",
         r"added the time to move the bytes and the time to do the arithmetic"),
    ],
    "bound_check": [
        ("reversed comparison", "def bound(i, p, b): return 'compute' if i < p / b else 'memory'", r"reversed"),
        ("balance upside down", "def bound(i, p, b): return 'memory' if i < b / p else 'compute'", r"which way up"),
        ("wrong words", "def bound(i, p, b): return 'memory-bound' if i < p / b else 'compute-bound'", r"exactly the string"),
        ("intensity compared with the peak", "def bound(i, p, b): return 'memory' if i < p else 'compute'",
         r"1000 FLOP/byte memory-bound"),
        ("a tie called memory-bound", "def bound(i, p, b): return 'memory' if i <= p / b else 'compute'",
         r"take exactly as long"),
        ("a tie called memory-bound, times compared", "def bound(i, p, b): return 'memory' if 1 / b >= i / p else 'compute'",
         r"take exactly as long"),
    ],
    "time_op_check": [
        (
            "a constant read off the check (every call and clock read made, one figure returned)",
            _TIME_OP_HEAD + """
    for _ in range(warmup + repeats): fn()
    sync(); time.perf_counter()
    return 0.001005
""",
            r"far less time per call|not the typical time",
        ),
        (
            "never synchronizes",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"never called sync\(\)",
        ),
        (
            "reads the clock before it synchronizes",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); end = time.perf_counter(); sync(); samples.append(end - t)
    return statistics.median(samples)
""",
            r"some clock read still comes while the work is queued",
        ),
        (
            "synchronizes once, after the warm-up only",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"some clock read still comes while the work is queued",
        ),
        (
            "no warm-up",
            _TIME_OP_HEAD + """
    samples = []
    for _ in range(warmup + repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"the warm-up calls are the untimed ones",
        ),
        (
            "mean instead of median",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    sync()
""" + _WARM + """    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return sum(samples) / len(samples)
""",
            r"the mean",
        ),
        (
            "total instead of per call",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    sync()
""" + _WARM + """    t = time.perf_counter()
    for _ in range(repeats):
        fn(); sync()
    return time.perf_counter() - t
""",
            r"the total over",
        ),
        (
            "milliseconds",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    sync()
""" + _WARM + """    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000
""",
            r"milliseconds",
        ),
        (
            "times the loop, syncs once at the end",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    sync()
""" + _WARM + """    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t) / repeats
""",
            r"the mean of the timed calls",
        ),
        (
            "the naive timer of the text",
            _TIME_OP_HEAD + """
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats
""",
            r"called fn 5 times for warmup=3",
        ),
        (
            "from-imported clock, never synchronizes",
            """
import statistics
from time import perf_counter
def time_op(fn, sync, warmup, repeats):
    for _ in range(warmup): fn()
    out = []
    for _ in range(repeats):
        t = perf_counter(); fn(); out.append(perf_counter() - t)
    return statistics.median(out)
""",
            r"never called sync\(\)",
        ),
        # the device comes up to speed over more calls than the warm-up it was given
        (
            "grader.timing.measure pasted: the warm-up given, no more (the textbook timer)",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"timed calls that were still getting faster",
        ),
        (
            "warms up until the calls stop getting faster, timing them without sync()",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    sync()
    previous = float('inf')
    while True:
        t = time.perf_counter(); fn(); took = time.perf_counter() - t
        if took > 0.95 * previous: break
        previous = took
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"timed calls that were still getting faster",
        ),
        (
            "a constant extra warm-up: measure's body and 10 more untimed calls (round 3's copy test)",
            _TIME_OP_HEAD + """
    for _ in range(warmup + 10): fn()
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"timed calls that were still getting faster",
        ),
        (
            "a warm-up as long as the page's simulated GPU takes to come up to speed",
            _TIME_OP_HEAD + """
    from grader.checks import lesson01
    for _ in range(max(warmup, len(lesson01._RAMP) + 1)): fn()
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"timed calls that were still getting faster",
        ),
        (
            "a longer fixed warm-up: twice the one given",
            _TIME_OP_HEAD + """
    for _ in range(2 * warmup): fn()
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"timed calls that were still getting faster",
        ),
        # an outside test: 3 × repeats passed both of the check's first cases (2× and 4× failed them); no multiple of
        # repeats passes a device that comes up to speed over far more calls and one that is warm almost at once
        *[(f"warm-up a fixed multiple of repeats: {k} × repeats", _TIME_OP_HEAD + f"""
    for _ in range(max(warmup, {k} * repeats)): fn()
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""", r"fixed its warm-up in advance") for k in (2, 3, 4)],
    ],
    "CROSSOVER_PREDICTION_check": [
        ("predicts the GPU always wins", "CROSSOVER_PREDICTION = {'n': 32, 'why': 'GPUs are fast'}",
         r"outside the model's band"),
        ("predicts with the work growing as n²", _crossover(2), r"n² outputs"),
        ("predicts with the fixed cost in milliseconds", _crossover(3, fixed=1e3), r"in milliseconds"),
        ("predicts with a multiply-add as one FLOP", _crossover(3, fixed=2.0), r"multiply-add as 1 FLOP"),
        ("prediction as a bare number", "CROSSOVER_PREDICTION = 108", r"should be a dict"),
        ("prediction without a reason", "CROSSOVER_PREDICTION = {'n': 108}", r"needs exactly the keys"),
    ],
    "crossover_size_check": [
        (
            "first win, ignores a later flip back",
            """
def crossover_size(sizes, cpu, gpu):
    for s, c, g in zip(sizes, cpu, gpu):
        if g < c:
            return s
    return None
""",
            r"CPU is faster again",
        ),
        (
            "returns an index",
            """
def crossover_size(sizes, cpu, gpu):
    answer = None
    for i in reversed(range(len(sizes))):
        if gpu[i] < cpu[i]: answer = i
        else: break
    return answer
""",
            r"an index into sizes",
        ),
        (
            "tie counts as a win",
            """
def crossover_size(sizes, cpu, gpu):
    answer = None
    for s, c, g in reversed(list(zip(sizes, cpu, gpu))):
        if g <= c: answer = s
        else: break
    return answer
""",
            r"what a tie should mean",
        ),
        (
            "last size where the CPU wins",
            """
def crossover_size(sizes, cpu, gpu):
    last = None
    for s, c, g in zip(sizes, cpu, gpu):
        if c <= g: last = s
    return last
""",
            r"at the size you returned, which of the two is faster",
        ),
    ],
    "linear_forecast_check": [
        (
            "weights left out of the bytes",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = (batch * d_in + batch * d_out) * dtype.itemsize
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": bound(x, peak_flops, bandwidth),
            "seconds_per_sample": flops / attainable_flops(x, peak_flops, bandwidth) / batch}
""",
            r"leaves out the weights",
        ),
        (
            "weights read once per sample",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = batch * (d_in * d_out + d_in + d_out) * dtype.itemsize
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": bound(x, peak_flops, bandwidth),
            "seconds_per_sample": flops / attainable_flops(x, peak_flops, bandwidth) / batch}
""",
            r"once per sample",
        ),
        (
            "dtype ignored (always 4 bytes)",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = (d_in * d_out + batch * d_in + batch * d_out) * 4
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": bound(x, peak_flops, bandwidth),
            "seconds_per_sample": flops / attainable_flops(x, peak_flops, bandwidth) / batch}
""",
            r"dtype was ignored",
        ),
        (
            "one FLOP per multiply-add",
            _LINEAR_HEAD + """
    flops = batch * d_in * d_out
    nbytes = (d_in * d_out + batch * d_in + batch * d_out) * dtype.itemsize
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": bound(x, peak_flops, bandwidth),
            "seconds_per_sample": flops / attainable_flops(x, peak_flops, bandwidth) / batch}
""",
            r"undercounts the FLOPs",
        ),
        (
            "time of the whole batch",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = (d_in * d_out + batch * d_in + batch * d_out) * dtype.itemsize
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": bound(x, peak_flops, bandwidth),
            "seconds_per_sample": flops / attainable_flops(x, peak_flops, bandwidth)}
""",
            r"whole batch as the time per sample",
        ),
        (
            "compute and memory time added",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = (d_in * d_out + batch * d_in + batch * d_out) * dtype.itemsize
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": bound(x, peak_flops, bandwidth),
            "seconds_per_sample": (flops / peak_flops + nbytes / bandwidth) / batch}
""",
            r"added the compute time and the memory time",
        ),
        (
            "always at peak",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = (d_in * d_out + batch * d_in + batch * d_out) * dtype.itemsize
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": bound(x, peak_flops, bandwidth), "seconds_per_sample": flops / peak_flops / batch}
""",
            r"at the chip's peak FLOP/s, at an intensity your bound calls memory-bound",
        ),
        (
            "bound compared the wrong way",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = (d_in * d_out + batch * d_in + batch * d_out) * dtype.itemsize
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": "compute" if x < peak_flops / bandwidth else "memory",
            "seconds_per_sample": flops / attainable_flops(x, peak_flops, bandwidth) / batch}
""",
            r"does your own bound agree",
        ),
        (
            "inputs and outputs counted as one width (the square layer's count)",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = (d_in * d_out + 2 * batch * d_in) * dtype.itemsize
    x = intensity(flops, nbytes)
    return {"intensity": x, "bound": bound(x, peak_flops, bandwidth),
            "seconds_per_sample": flops / attainable_flops(x, peak_flops, bandwidth) / batch}
""",
            r"differ in width",
        ),
        (
            "a tuple, not a dict",
            _LINEAR_HEAD + """
    flops = 2 * batch * d_in * d_out
    nbytes = (d_in * d_out + batch * d_in + batch * d_out) * dtype.itemsize
    x = intensity(flops, nbytes)
    return x, bound(x, peak_flops, bandwidth), flops / attainable_flops(x, peak_flops, bandwidth) / batch
""",
            r"return a dict with exactly the keys",
        ),
    ],
}

# Predictions with a wrong value but a reason: graded with partial credit (tests/test_prediction_scores.py), their
# feedback naming the mistake. Kept out of MUTANTS: the feedback quotes the learner's own first guess, right parts
# included, which the message test would read as a leak.
PREDICTION_MUTANTS = {
    "COMPUTE_BOUND_N_check": [
        ("the scores left out of the traffic", "COMPUTE_BOUND_N = {'fp32': 80, 'bf16 ever': True, 'why': 'Q and K only'}",
         r"leaves the scores out of the traffic"),
        ("a square matmul's answer (r22's loop of the learner's functions)",
         "COMPUTE_BOUND_N = {'fp32': 120, 'bf16 ever': True, 'why': 'n over 6 reaches 20'}", r"prices a square n×n matmul"),
        ("elements, not bytes", "COMPUTE_BOUND_N = {'fp32': 22, 'bf16 ever': False, 'why': 'per element'}",
         r"counts elements, not bytes"),
        ("the balance point taken as s", "COMPUTE_BOUND_N = {'fp32': 20, 'bf16 ever': False, 'why': 'the balance'}",
         r"the balance point itself"),
        ("bf16 compute-bound at a long enough s", "COMPUTE_BOUND_N = {'fp32': 117, 'bf16 ever': True, 'why': 'grows'}",
         r"the bf16 answer: however long the sequence"),
    ],
    "ADD_PREDICTION_check": [
        ("the add without its write", _add("bw / 8 / 1e9"), r"not writing c"),
        ("the add in elements", _add("bw / 3 / 1e9"), r"counts elements, not bytes"),
        ("two FLOPs per element", _add("bw / 24 / 1e9"), r"two FLOPs per element"),
        ("the add at the matmul's rate", _add("peak / 1e9"), r"at the matmul's rate"),
        ("bandwidth times bytes per FLOP", _add("bw * 12 / 1e9"), r"multiplies the bandwidth"),
        ("FLOP/s where GFLOP/s is asked", _add("bw / 12"), r"in FLOP/s"),
        ("the H100's add with b as a whole matrix", _add("bw / 12 / 1e9", h100="hbw / 6 / 1e9"), r"H100: it counts b as a whole matrix"),
        ("the H100's add in float32 bytes, b whole", _add("bw / 12 / 1e9", h100="hbw / 12 / 1e9"), r"H100: it counts 4 bytes"),
        ("the H100's add at the tensor cores' rate", _add("bw / 12 / 1e9", h100="hpeak / 1e9"), r"tensor cores' rate"),
        ("the H100's add at its float32 rate", _add("bw / 12 / 1e9", h100="hfp32 / 1e9"), r"arithmetic rate"),
        ("the H100's add in float32 bytes, b read once", _add("bw / 12 / 1e9", h100="hbw / 8 / 1e9"), r"H100: it counts 8 bytes per FLOP"),
        ("the H100's add in elements, b read once", _add("bw / 12 / 1e9", h100="hbw / 2 / 1e9"), r"H100: it counts 2 bytes per FLOP"),
    ],
    "LINEAR_PREDICTION_check": [
        ("time grows with the work", _linear("2 * b * d * d / peak"), r"grows the time with the work"),
        ("weights read once per sample", _linear("max(2 * b * d * d / peak, (b * d * d + 2 * b * d) * 4 / bw)"),
         r"grows the time with the work"),
        ("time per sample, not per call", _linear("max(2 * b * d * d / peak, (d * d + 2 * b * d) * 4 / bw) / b"),
         r"time per sample"),
        ("compute and weight read added", _linear("2 * b * d * d / peak + (d * d + 2 * b * d) * 4 / bw"),
         r"adds the time of the arithmetic"),
    ],
}

MUTANTS["COMPUTE_BOUND_N_check"] = [
    ("prediction without a reason", "COMPUTE_BOUND_N = {'fp32': 117, 'bf16 ever': False}", r"needs exactly the keys"),
    ("prediction as a list", "COMPUTE_BOUND_N = [117, False]", r"should be a dict"),
    ("the square question's keys", "COMPUTE_BOUND_N = {'fp32': 120, 'bf16': 887, 'why': 'x'}", r"needs exactly the keys"),
    ("bf16 as a length", "COMPUTE_BOUND_N = {'fp32': 117, 'bf16 ever': 887, 'why': 'x'}", r"write True or False"),
]
MUTANTS["ADD_PREDICTION_check"] = [
    ("prediction as a bare number", "ADD_PREDICTION = 1.1", r"should be a dict"),
    ("prediction without a reason", "ADD_PREDICTION = {'add GFLOP/s': 1.1, 'H100 bf16 GFLOP/s': 837}",
     r"needs exactly the keys"),
    ("prediction of this machine only", "ADD_PREDICTION = {'add GFLOP/s': 1.1, 'why': 'x'}", r"needs exactly the keys"),
    ("prediction of a negative rate", "ADD_PREDICTION = {'add GFLOP/s': -1.0, 'H100 bf16 GFLOP/s': 837, 'why': 'x'}",
     r"positive number"),
]
MUTANTS["LINEAR_PREDICTION_check"] = [
    ("prediction as a bare number", "LINEAR_PREDICTION = 1.0", r"should be a dict"),
    ("the old keys (bound words)", "LINEAR_PREDICTION = {'batch 1': 'memory', 'batch 8': 'memory', 'why': 'x'}",
     r"needs exactly the keys"),
]
