"""Mutants for lesson 01 (crossover)."""

LESSON = "01_crossover"

_TIME_OP_HEAD = """
import statistics, time
def time_op(fn, sync, warmup, repeats):
"""

_LINEAR_HEAD = """
def linear_forecast(batch, d_in, d_out, dtype, peak_flops, bandwidth):
"""

MUTANTS = {
    "matmul_flops_check": [
        ("one FLOP per multiply-add", "def matmul_flops(n): return n**3", r"multiply-add is two"),
        ("counts outputs only", "def matmul_flops(n): return 2 * n**2", r"number of outputs"),
        ("n-1 additions", "def matmul_flops(n): return n * n * (2 * n - 1)", r"n−1 additions"),
        ("returns a float", "def matmul_flops(n): return 2.0 * n**3", r"return an int"),
    ],
    "matmul_bytes_check": [
        ("elements not bytes", "def matmul_bytes(n, dtype): return 3 * n * n", r"counts elements, not bytes"),
        ("forgets writing C", "def matmul_bytes(n, dtype): return 2 * n * n * dtype.itemsize", r"not writing C"),
        ("ignores dtype", "def matmul_bytes(n, dtype): return 3 * n * n * 4", r"dtype was ignored"),
        ("reads and writes C", "def matmul_bytes(n, dtype): return 4 * n * n * dtype.itemsize", r"C is written once"),
    ],
    "intensity_check": [
        ("bytes per FLOP", "def intensity(flops, nbytes): return nbytes / flops", r"bytes per FLOP"),
        ("integer division", "def intensity(flops, nbytes): return flops // nbytes", r"integer division"),
    ],
    "attainable_flops_check": [
        ("max instead of min", "def attainable_flops(i, p, b): return max(p, i * b)", r"min, not max"),
        ("bandwidth term only", "def attainable_flops(i, p, b): return i * b", r"above the chip's peak"),
        ("always peak", "def attainable_flops(i, p, b): return p", r"memory-bound operation is capped"),
    ],
    "bound_check": [
        ("reversed comparison", "def bound(i, p, b): return 'compute' if i < p / b else 'memory'", r"reversed"),
        ("balance upside down", "def bound(i, p, b): return 'memory' if i < b / p else 'compute'", r"not bandwidth / peak"),
        ("wrong words", "def bound(i, p, b): return 'memory-bound' if i < p / b else 'compute-bound'", r"exactly the string"),
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
            r"expected the size 256",
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
            r"left out the weights",
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
            r"divide by the batch",
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
            r"memory-bound: the time is set by reading the bytes",
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
            r"below the balance point is memory-bound",
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
