"""Mutants for lesson 01 (crossover)."""

LESSON = "01_crossover"

_TIME_OP_HEAD = """
import statistics, time
def time_op(fn, sync, warmup, repeats):
"""

_INTENSITY = {"add float32": 1 / 12, "matmul 1024 float32": 2048 / 12, "matmul 1024 bfloat16": 2048 / 6}
_LINEAR = {"batch 1": "memory", "batch 512": "compute", "cheaper per sample": 50.7}


def _predict(name: str, right: dict, **changed) -> str:
    """A prediction cell with some of the right values changed (keys with spaces passed as a dict)."""
    return f"{name} = {{**{right!r}, **{changed.get('values', {})!r}}}"


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
        ("one FLOP per multiply-add", "def matmul_flops(n): return n**3", r"multiply-add is two"),
        ("counts outputs only", "def matmul_flops(n): return 2 * n**2", r"number of outputs"),
        ("n-1 additions", "def matmul_flops(n): return n * n * (2 * n - 1)", r"n−1 additions"),
        ("returns a float", "def matmul_flops(n): return 2.0 * n**3", r"return an int"),
        ("one more add per output", "def matmul_flops(n): return 2 * n**3 + n**2", r"multiply\s+the work by 8"),
    ],
    "matmul_bytes_check": [
        ("elements not bytes", "def matmul_bytes(n, dtype): return 3 * n * n", r"counts elements, not bytes"),
        ("forgets writing C", "def matmul_bytes(n, dtype): return 2 * n * n * dtype.itemsize", r"not writing C"),
        ("ignores dtype", "def matmul_bytes(n, dtype): return 3 * n * n * 4", r"dtype was ignored"),
        ("reads and writes C", "def matmul_bytes(n, dtype): return 4 * n * n * dtype.itemsize", r"C is written once"),
        ("a read for every use", "def matmul_bytes(n, dtype): return (2 * n**3 + n * n) * dtype.itemsize",
         r"used n times, but it only has to cross memory once"),
        ("six matrices' worth (the audit's 6n²)", "def matmul_bytes(n, dtype): return 6 * n * n * dtype.itemsize",
         r"crosses exactly once: count the matrices"),
        ("bits instead of bytes", "def matmul_bytes(n, dtype): return 3 * n * n * dtype.itemsize * 8", r"counts bits"),
    ],
    "intensity_check": [
        ("bytes per FLOP", "def intensity(flops, nbytes): return nbytes / flops", r"bytes per FLOP"),
        ("integer division", "def intensity(flops, nbytes): return flops // nbytes", r"integer division"),
        ("predicts the add without its write", _predict("INTENSITY_PREDICTION", _INTENSITY, values={"add float32": 1 / 8}),
         r"not writing c"),
        ("predicts the add in elements", _predict("INTENSITY_PREDICTION", _INTENSITY, values={"add float32": 1 / 3}),
         r"counts elements, not bytes"),
        ("bfloat16 as dense as float32", _predict("INTENSITY_PREDICTION", _INTENSITY, values={"matmul 1024 bfloat16": 2048 / 12}),
         r"same intensity for the bfloat16 matmul"),
        ("bfloat16 half as dense", _predict("INTENSITY_PREDICTION", _INTENSITY, values={"matmul 1024 bfloat16": 2048 / 24}),
         r"the other way round"),
        ("prediction left blank", "INTENSITY_PREDICTION = {'add float32': 1 / 12}", r"needs exactly the keys"),
    ],
    "attainable_flops_check": [
        ("max instead of min", "def attainable_flops(i, p, b): return max(p, i * b)", r"min, not max"),
        ("bandwidth term only", "def attainable_flops(i, p, b): return i * b", r"above the chip's peak"),
        ("always peak", "def attainable_flops(i, p, b): return p", r"how many FLOPs per second can the memory feed"),
        ("moving and computing one after the other", "def attainable_flops(i, p, b): return 1 / (1 / p + 1 / (i * b))",
         r"added the time to move the bytes and the time to do the arithmetic"),
    ],
    "bound_check": [
        ("reversed comparison", "def bound(i, p, b): return 'compute' if i < p / b else 'memory'", r"reversed"),
        ("balance upside down", "def bound(i, p, b): return 'memory' if i < b / p else 'compute'", r"not bandwidth / peak"),
        ("wrong words", "def bound(i, p, b): return 'memory-bound' if i < p / b else 'compute-bound'", r"exactly the string"),
        ("intensity compared with the peak", "def bound(i, p, b): return 'memory' if i < p else 'compute'",
         r"1000 FLOP/byte memory-bound"),
        ("compute-bound n in elements", "COMPUTE_BOUND_N = {'fp32': 30, 'bf16': 443}", r"FLOPs per \*element\*"),
        ("bf16 elements taken as 4 bytes", "COMPUTE_BOUND_N = {'fp32': 120, 'bf16': 1773}", r"counts 4 bytes per element"),
        ("tensor cores compute-bound sooner", "COMPUTE_BOUND_N = {'fp32': 120, 'bf16': 60}",
         r"no later than an fp32.*balance point moves up"),
        ("the balance point taken as n", "COMPUTE_BOUND_N = {'fp32': 20, 'bf16': 295}", r"the balance point itself"),
    ],
    "time_op_check": [
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
            r"synchronize before reading the clock",
        ),
        (
            "no warm-up",
            _TIME_OP_HEAD + """
    samples = []
    for _ in range(warmup + repeats):
        t = time.perf_counter(); fn(); sync(); samples.append(time.perf_counter() - t)
    return statistics.median(samples)
""",
            r"warmup times before timing",
        ),
        (
            "mean instead of median",
            _TIME_OP_HEAD + """
    for _ in range(warmup): fn()
    sync()
    samples = []
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
    t = time.perf_counter()
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
    samples = []
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
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t) / repeats
""",
            r"the mean; one slow call",
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
            r"a tie is not faster",
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
            r"the first size of that run of GPU wins",
        ),
    ],
    "linear_forecast_check": [
        ("predicts batching changes nothing per sample", _predict("LINEAR_PREDICTION", _LINEAR, values={"cheaper per sample": 1}),
         r"costs the same per sample"),
        ("predicts 512× cheaper", _predict("LINEAR_PREDICTION", _LINEAR, values={"cheaper per sample": 512}),
         r"512× cheaper per sample: that would hold"),
        ("predicts batch 1 compute-bound", _predict("LINEAR_PREDICTION", _LINEAR, values={"batch 1": "compute"}),
         r"Batch 1 is memory-bound"),
        ("predicts batch 512 memory-bound", _predict("LINEAR_PREDICTION", _LINEAR, values={"batch 512": "memory"}),
         r"layer is compute-bound"),
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
            r"multiply-add is two",
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
            r"but it is memory-bound: its time is set by moving its bytes",
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
            r"below it is memory-bound",
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
