"""The instructor's judges of lesson 01's keyed checks: they hold the answers, so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson01.py) and keeps
only digests and messages in grader/checks/keys/01_crossover.json; the learner's check (grader/checks/lesson01.py)
judges by those. A message here names the kind of mistake and the principle, never the expected value nor the
formula: it is what a learner who made that mistake reads.
"""

from __future__ import annotations

import torch

from grader.checks._common import call, close, fail, is_number


def _matmul_flops(matmul_flops) -> None:
    """matmul_flops(n): 2 FLOPs per multiply-add, n multiply-adds per output, n² outputs."""
    n = 4
    got = call(matmul_flops, n)
    if got == n**3:
        fail("matmul_flops counts each multiply-add once. A multiply-add is two floating-point operations "
             "(a multiply and an add), and the course counts both.")
    if got in (n**2, 2 * n**2):
        fail("matmul_flops grows like the number of outputs: each output is itself a dot product, whose work grows "
             "with its length.")
    if got == n * n * (2 * n - 1):
        fail("matmul_flops counts n−1 additions per output. The course's convention counts every multiply-add as 2 "
             "FLOPs, the first one included.")
    small, big = call(matmul_flops, 16), call(matmul_flops, 32)
    if not small or big / small != 8:
        fail("doubling n must multiply the work by 8: n² outputs, each a dot product n long. Yours grows otherwise.")
    if call(matmul_flops, 1) != 2:
        fail("matmul_flops(1) is not the work of one multiply-add.")


def _matmul_bytes(matmul_bytes) -> None:
    """matmul_bytes(n, dtype): read A and B once, write C once, at the dtype's size."""
    n = 8
    got = call(matmul_bytes, n, torch.float32)
    if got == 3 * n * n:
        fail("matmul_bytes counts elements, not bytes. Memory traffic is counted in bytes, and how many bytes an "
             "element takes depends on its dtype.")
    if got == 2 * n * n * 4:
        fail("matmul_bytes counts reading the inputs but not writing C: the result has to go out to memory too.")
    if got == (2 * n**3 + n * n) * 4:
        fail("matmul_bytes counts a read every time an element is used. Each element of A is used n times, but it only "
             "has to cross memory once: the chip keeps it on chip while it is reused. The least any matmul must move "
             "is the figure the roofline works from.")
    if got == 4 * n * n * 4:
        fail("matmul_bytes: you counted C as read and written. The product only writes C: nothing of the old C is needed.")
    if got == 3 * n * n * 32:
        fail("matmul_bytes counts bits: dtype.itemsize is the bytes of one element, and memory traffic is counted in "
             "bytes.")
    if got != 3 * n * n * torch.float32.itemsize:
        fail("matmul_bytes is not the least traffic a matmul must cause: which matrices have to come in from memory, "
             "which has to go back out, and how many bytes is each of them?")
    half = call(matmul_bytes, n, torch.float16)
    if half == got:
        fail("matmul_bytes gives the same bytes for float32 and float16: the dtype was ignored. An element's size "
             "depends on its dtype (dtype.itemsize).")
    if got != 2 * half or call(matmul_bytes, n, torch.float64) != 2 * got:
        fail("matmul_bytes must be proportional to the element size of the dtype.")
    if call(matmul_bytes, 2 * n, torch.float32) != 4 * got:
        fail("Doubling n should multiply the bytes by 4: every matrix has n² elements.")


def _intensity(intensity) -> None:
    """intensity(flops, nbytes) = flops / nbytes, as a float."""
    got = call(intensity, 200, 100)
    if is_number(got) and close(float(got), 0.5):
        fail("intensity is upside down, that is bytes per FLOP: yours grows when an operation moves more bytes for the same arithmetic. "
             "Intensity grows with the arithmetic each byte feeds: more of it is what pushes an operation away from "
             "the memory limit.")
    if not is_number(got) or not close(float(got), 2.0):
        fail("intensity is not the arithmetic an operation does for each byte it moves, as a float.")
    frac = call(intensity, 10, 4)
    if frac == 2:
        fail("intensity(10, 4) lost its fraction: integer division (//) throws it away.")
    if not close(float(frac), 2.5):
        fail("intensity(10, 4) is off: an operation's FLOPs per byte is rarely a whole number; keep the fraction.")


JUDGES = {"matmul_flops": _matmul_flops, "matmul_bytes": _matmul_bytes, "intensity": _intensity}


# --- crossover ------------------------------------------------------------------------------


def _crossover_size(crossover_size) -> None:
    """crossover_size: the smallest size from which the GPU stays faster; None if it never does."""
    from grader.checks.lesson01 import _ALWAYS, _CPU, _FLIP, _NEVER, _SIMPLE, _SIZES, _TIE

    got = call(crossover_size, _SIZES, _CPU, _SIMPLE)
    if got == _SIZES.index(256):
        fail("crossover_size returned an index into sizes; return the size itself.")
    if got != 256:
        fail("crossover_size is wrong on a sweep where the CPU wins the small sizes and the GPU every size from some "
             "size on: the crossover is where that run of GPU wins begins, not where the CPU's ends.")
    got = call(crossover_size, _SIZES, _CPU, _FLIP)
    if got == 128:
        fail("crossover_size returned the first size where the GPU wins, but the CPU is faster again at a larger size: "
             "sending every problem from that size up to the GPU would lose there. One early win can be luck; the "
             "crossover is where the GPU becomes the right choice for good.")
    if got != 512:
        fail("crossover_size is wrong on a sweep where the GPU wins once, loses again, then wins for good: the "
             "crossover is where the GPU starts to win for good.")
    if call(crossover_size, _SIZES, _CPU, _NEVER) is not None:
        fail("crossover_size found a crossover where the GPU is never faster; there is none: return None.")
    if call(crossover_size, _SIZES, _CPU, _TIE) is not None:
        fail("crossover_size counted a tie at the largest size as the GPU winning: a tie is not a win, so the GPU "
             "never becomes the better choice there.")
    if call(crossover_size, _SIZES, _CPU, _ALWAYS) != 64:
        fail("crossover_size is wrong when the GPU is faster at every size of the sweep: then it is the better choice "
             "from the smallest size on.")


# --- roofline -------------------------------------------------------------------------------

_PEAK, _BW = 100e12, 2e12  # the made-up chip of grader/checks/lesson01.py's cases


def _attainable_flops(attainable_flops) -> None:
    """attainable = the slower of the chip's peak and what the bandwidth feeds at that intensity."""
    low = call(attainable_flops, 10.0, _PEAK, _BW)
    high = call(attainable_flops, 1000.0, _PEAK, _BW)
    if not is_number(low) or not is_number(high):
        fail("attainable_flops did not return a number; return FLOP/s as a float.")
    if float(high) > _PEAK * (1 + 1e-9):
        fail("attainable_flops at a high intensity returned a rate above the chip's peak: no operation beats peak. The "
             "slower of the two limits sets the rate, not the faster.")
    if close(float(low), _PEAK):
        fail("attainable_flops at a low intensity returned the chip's full peak: at so few FLOPs per byte, how many "
             "FLOPs per second can the memory feed?")
    if close(float(low), 1 / (1 / _PEAK + 1 / (10.0 * _BW))) or close(float(high), 1 / (1 / _PEAK + 1 / (1000.0 * _BW))):
        fail("attainable_flops added the time to move the bytes and the time to do the arithmetic. The chip does both "
             "at once: while one block of data is being multiplied the next one is already on its way, so the time is "
             "the longer of the two, not their sum.")
    if not close(float(low), 10.0 * _BW) or not close(float(high), _PEAK):
        fail("attainable_flops is not the roofline: work out the best time of an operation of F FLOPs at that "
             "intensity, then its FLOPs per second.")


def _bound(bound) -> None:
    """bound: "memory" where moving the bytes takes longer than the arithmetic at peak, "compute" otherwise."""
    low, high = call(bound, 10.0, _PEAK, _BW), call(bound, 1000.0, _PEAK, _BW)
    chip = "a chip of 100 TFLOP/s and 2 TB/s"
    if low not in ("memory", "compute") or high not in ("memory", "compute"):
        fail("bound returned something else than the string 'memory' or 'compute'; return exactly one of them.")
    if low == "compute" and high == "memory":
        fail(f"bound says 10 FLOP/byte is compute-bound and 1000 FLOP/byte memory-bound on {chip}: the comparison is "
             "reversed. Few FLOPs per byte means the bytes take longer than the arithmetic: that is the memory limit.")
    if low == high == "compute":
        fail(f"bound called 10 FLOP/byte compute-bound on {chip}. Work out, for an operation of F FLOPs at that "
             "intensity, how long its bytes take at the bandwidth and how long its FLOPs take at the peak; the longer "
             "one names the limit. Did you compare the intensity with the chip's two rates the wrong way up?")
    if low == high == "memory":
        fail(f"bound called 1000 FLOP/byte memory-bound on {chip}: at that intensity, do its bytes or its FLOPs take "
             "longer? Compare the intensity with a number of the chip in the same unit, FLOP per byte.")
    if call(bound, 49.0, _PEAK, _BW) != "memory" or call(bound, 51.0, _PEAK, _BW) != "compute":
        fail(f"bound switches at the wrong intensity on {chip}: it must switch exactly where moving the bytes and doing "
             "the arithmetic take the same time.")


# --- predict, then measure: a Linear layer -----------------------------------------------------


def linear_model(batch: int, d_in: int, d_out: int, itemsize: int, peak_flops: float, bandwidth: float) -> dict:
    """The course's roofline model of y = x @ W.T (no bias): what linear_forecast should predict.

    FLOPs 2·batch·d_in·d_out; bytes (d_in·d_out weights + batch·d_in inputs +
    batch·d_out outputs) × itemsize, each read or written once; time is
    FLOPs / attainable, i.e. the larger of compute time and memory time.
    """
    flops = 2 * batch * d_in * d_out
    nbytes = (d_in * d_out + batch * (d_in + d_out)) * itemsize
    x = flops / nbytes
    seconds = max(flops / peak_flops, nbytes / bandwidth)
    return {"intensity": x, "bound": "memory" if x < peak_flops / bandwidth else "compute",
            "seconds_per_sample": seconds / batch}


def _linear_forecast(linear_forecast) -> None:
    """linear_forecast: intensity, bound and roofline seconds per sample of a bias-free Linear, as the model says."""
    from grader.checks.lesson01 import _LINEAR_CASES, _linear_args, _shown

    keys = ("intensity", "bound", "seconds_per_sample")
    got = {}
    for batch, dtype in _LINEAR_CASES:
        answer = call(linear_forecast, *_linear_args(batch, dtype), label=_shown(batch, dtype))
        if not isinstance(answer, dict) or set(answer) != set(keys):
            fail(f"{_shown(batch, dtype)} did not return a dict with exactly the keys 'intensity', 'bound' and "
                 "'seconds_per_sample'.")
        got[batch, dtype] = answer
    for batch, dtype in _LINEAR_CASES:
        answer, shown = got[batch, dtype], _shown(batch, dtype)
        args = _linear_args(batch, dtype)
        _, d_in, d_out, _, peak, bw = args
        size = dtype.itemsize
        want = linear_model(batch, d_in, d_out, size, peak, bw)
        x = answer["intensity"]
        if not is_number(x):
            fail(f"{shown} gave an intensity that is not a number; return FLOP per byte as a float.")
        flops, weights, acts = 2 * batch * d_in * d_out, d_in * d_out * size, batch * (d_in + d_out) * size
        if not close(float(x), want["intensity"], rel=1e-6):
            if close(float(x), flops / acts, rel=1e-6):
                fail(f"{shown} gave an intensity that leaves out the weights. Every call reads the whole weight "
                     "matrix; at small batch it is almost all the bytes.")
            if close(float(x), flops / (batch * (d_in * d_out + d_in + d_out) * size), rel=1e-6):
                fail(f"{shown} gave the intensity of batch 1: you counted the weights once per sample. One batched "
                     "matmul reads W once for the whole batch; that reuse is why batching helps.")
            if dtype != torch.float32 and close(float(x), linear_model(batch, d_in, d_out, 4, peak, bw)["intensity"],
                                                rel=1e-6):
                fail(f"{shown} gave the float32 intensity: the dtype was ignored. bfloat16 takes fewer bytes per "
                     "element (dtype.itemsize), so the same layer moves fewer bytes.")
            if close(float(x), want["intensity"] / 2, rel=1e-6):
                fail(f"{shown} undercounts the FLOPs: a multiply-add is two FLOPs, and every output of every sample "
                     "is a dot product of length d_in.")
            fail(f"{shown} gave an intensity the model does not: count the FLOPs of the whole batch, and the bytes one "
                 "call moves (everything it reads and writes, once each, at the dtype's size).")
        verdict = answer["bound"]
        if verdict not in ("memory", "compute"):
            fail(f"{shown} gave a bound that is neither 'memory' nor 'compute'; use exactly one of them.")
        if verdict != want["bound"]:
            fail(f"{shown} called the layer {verdict}-bound on a chip of 100 TFLOP/s and 2 TB/s: compare its "
                 "intensity with the chip's balance point; below it is memory-bound, above it compute-bound.")
        seconds = answer["seconds_per_sample"]
        if not is_number(seconds):
            fail(f"{shown} gave a seconds_per_sample that is not a number; return seconds as a float.")
        seconds, per = float(seconds), want["seconds_per_sample"]
        if close(seconds, per, rel=1e-6):
            continue
        if batch > 1 and close(seconds, per * batch, rel=1e-6):
            fail(f"{shown} gave the time of the whole batch as the time per sample.")
        if close(seconds * batch, flops / peak + (weights + acts) / bw, rel=1e-6):
            fail(f"{shown} added the compute time and the memory time. The chip moves the next block while it "
                 "computes on this one: the two overlap, so the slower of them sets the time (your attainable_flops "
                 "says so).")
        if want["bound"] == "memory" and close(seconds * batch, flops / peak, rel=1e-6):
            fail(f"{shown} forecast the layer at the chip's peak FLOP/s, but it is memory-bound: its time is set by "
                 "moving its bytes.")
        fail(f"{shown} gave seconds per sample the roofline does not: one call's time at the rate the roofline "
             "allows for the call's intensity, shared among the samples of the batch.")


JUDGES.update({"crossover_size": _crossover_size, "attainable_flops": _attainable_flops, "bound": _bound,
               "linear_forecast": _linear_forecast})
