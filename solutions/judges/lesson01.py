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
        fail("matmul_flops(4) counts each multiply-add once: go back to how section 2 says the course counts a "
             "multiply-add.")
    if got in (n**2, 2 * n**2):
        fail("matmul_flops(4) grows like the number of outputs alone: what does computing one output of C take, "
             "and does that depend on n?")
    if got == n * n * (2 * n - 1):
        fail("matmul_flops counts n−1 additions per output: the course counts in multiply-adds (section 2), the "
             "first one included.")
    small, big = call(matmul_flops, 16), call(matmul_flops, 32)
    if not small or big / small != 8:
        fail("matmul_flops(32) is not the same multiple of matmul_flops(16) that the work of a matmul is: how does "
             "each part of your count grow when n doubles?")
    if call(matmul_flops, 1) != 2:
        fail("matmul_flops(1) is not the work of one multiply-add.")


def _matmul_bytes(matmul_bytes) -> None:
    """matmul_bytes(n, dtype, out_dtype=None): read A and B once at dtype's size, write C once at out_dtype's (dtype's)."""
    n = 8
    got = call(matmul_bytes, n, torch.float32)
    if got == 3 * n * n:
        fail("matmul_bytes(8, torch.float32) counts elements, not bytes: memory traffic is counted in bytes "
             "(section 2 says where an element's size is).")
    if got == 2 * n * n * 4:
        fail("matmul_bytes(8, torch.float32) counts what comes in from memory and nothing that goes back out: "
             "where does the product end up?")
    if got == (2 * n**3 + n * n) * 4:
        fail("matmul_bytes counts a read every time an element is used. Each element of A is used n times: how "
             "often must it cross memory, at the least, if the chip keeps it close while it reuses it?")
    if got == 4 * n * n * 4:
        fail("matmul_bytes counts C as read from memory as well as written: does the product need anything of "
             "what C held before?")
    if got == 3 * n * n * 32:
        fail("matmul_bytes counts bits: dtype.itemsize is the bytes of one element, and memory traffic is counted in "
             "bytes.")
    if got != 3 * n * n * torch.float32.itemsize:
        large = call(matmul_bytes, 2 * n, torch.float32)
        if is_number(got) and is_number(large) and got and not close(float(large) / float(got), 4.0):
            # copy test r22: 2n³·itemsize was told the output's dtype was ignored (by the hints), not its mistake
            fail(f"matmul_bytes(16, torch.float32) is {float(large) / float(got):.3g}× matmul_bytes(8, torch.float32): "
                 "doubling n should multiply the traffic by as much as it multiplies what the matrices hold.")
        fail("matmul_bytes is not the least traffic a matmul must cause: what must cross memory at the very least, "
             "however clever the kernel, and at how many bytes an element?")
    half = call(matmul_bytes, n, torch.float16)
    if half == got:
        fail("matmul_bytes gives the same bytes for float32 and float16: the dtype was ignored. An element's size "
             "depends on its dtype (dtype.itemsize).")
    if half == n * n * (2 * 2 + 4):  # copy test r24: C always written as float32, whatever the inputs
        fail("matmul_bytes(8, torch.float16) is not half of matmul_bytes(8, torch.float32): with no out_dtype, in "
             "what dtype does the product go out?")
    if got != 2 * half or call(matmul_bytes, n, torch.float64) != 2 * got:
        fail("matmul_bytes must be proportional to the element size of the dtype.")
    if call(matmul_bytes, 2 * n, torch.float32) != 4 * got:
        fail("Doubling n should multiply the bytes by 4: every matrix has n² elements.")
    # 16-bit inputs, the product written in float32: what crosses memory is each matrix as it is stored
    for n, dtype, out in ((8, torch.bfloat16, torch.float32), (16, torch.float16, torch.float32)):
        shown = f"matmul_bytes({n}, {dtype}, {out})"
        got = call(matmul_bytes, n, dtype, out, label=shown)
        want = n * n * (2 * dtype.itemsize + out.itemsize)
        if got == want:
            continue
        if got == 3 * n * n * dtype.itemsize:
            fail(f"{shown} writes C at the inputs' width: the product goes out to memory in out_dtype.")
        if got == 3 * n * n * out.itemsize:
            fail(f"{shown} counts A and B at float32 width too: the float32 sums are made on chip, and A and B come "
                 "in from memory as they are stored.")
        if got == want + n * n * 4:
            fail(f"{shown} counts the float32 sums as traffic of their own: where are the products added up, and "
                 "does that place cross memory?")
        if got == n * n * (2 * out.itemsize + dtype.itemsize):
            fail(f"{shown} has the widths the wrong way round: A and B are in dtype, C in out_dtype.")
        fail(f"{shown} is not the least traffic of that product: which matrices cross memory, and how wide is each "
             "as it is stored?")
    if call(matmul_bytes, 8, torch.float32, torch.float32) != 3 * 8 * 8 * 4 or call(matmul_bytes, 8, torch.bfloat16, None) \
            != call(matmul_bytes, 8, torch.bfloat16):
        fail("matmul_bytes with out_dtype equal to dtype, or None, is the product written in dtype: the same bytes as "
             "without out_dtype.")


def _intensity(intensity) -> None:
    """intensity(flops, nbytes) = flops / nbytes, as a float."""
    got = call(intensity, 200, 100)
    if is_number(got) and close(float(got), 0.5):
        fail("intensity(200, 100) grows when an operation moves more bytes for the same arithmetic: section 3's "
             "intensity is the other way up, the arithmetic each byte feeds.")
    if not is_number(got) or not close(float(got), 2.0):
        fail("intensity is not the arithmetic an operation does for each byte it moves, as a float.")
    frac = call(intensity, 10, 4)
    if frac == 2:
        fail("intensity(10, 4) lost its fraction: which division did you use?")
    if not close(float(frac), 2.5):
        fail("intensity(10, 4) is off: an operation's FLOPs per byte is rarely a whole number; keep the fraction.")


JUDGES = {"matmul_flops": _matmul_flops, "matmul_bytes": _matmul_bytes, "intensity": _intensity}


# --- crossover ------------------------------------------------------------------------------


def _crossover_size(crossover_size) -> None:
    """crossover_size: the smallest size from which the GPU stays faster; None if it never does."""
    from grader.checks.lesson01 import _ALWAYS, _CPU, _FLIP, _NEVER, _SIMPLE, _SIZES, _TIE

    got = call(crossover_size, _SIZES, _CPU, _SIMPLE)
    if got == _SIZES.index(256):
        fail("crossover_size returned an index into sizes; the contract is the size itself.")
    if got != 256:
        fail("crossover_size is wrong on the sweep where the CPU wins the small sizes and the GPU the large ones: "
             "at the size you returned, which of the two is faster?")
    got = call(crossover_size, _SIZES, _CPU, _FLIP)
    if got == 128:
        fail("crossover_size returned the first size where the GPU wins, on the sweep where the CPU is faster again "
             "at a larger size: sending every problem from your size up to the GPU would lose there (section 6: one "
             "early win can be luck).")
    if got != 512:
        fail("crossover_size is wrong on the sweep where the GPU wins, loses, then wins again: would you send every "
             "problem from your size up to the GPU?")
    if call(crossover_size, _SIZES, _CPU, _NEVER) is not None:
        fail("crossover_size found a crossover on the sweep where the GPU is never faster.")
    if call(crossover_size, _SIZES, _CPU, _TIE) is not None:
        fail("crossover_size returned a size on the sweep where the GPU is slower everywhere but at the largest size, "
             "where the two take the same time: what would sending that size to the GPU gain? Section 6 asks what "
             "a tie should mean.")
    if call(crossover_size, _SIZES, _CPU, _ALWAYS) != 64:
        fail("crossover_size is wrong on the sweep where the GPU is faster at every size.")


# --- roofline -------------------------------------------------------------------------------

from grader.checks.lesson01 import _BW, _PEAK, _TIE_BW, _TIE_PEAK  # noqa: E402  the made-up chips of the cases


def _attainable_flops(attainable_flops) -> None:
    """attainable = the slower of the chip's peak and what the bandwidth feeds at that intensity."""
    low = call(attainable_flops, 10.0, _PEAK, _BW)
    high = call(attainable_flops, 1000.0, _PEAK, _BW)
    if not is_number(low) or not is_number(high):
        fail("attainable_flops did not return a number; return FLOP/s as a float.")
    if float(high) > _PEAK * (1 + 1e-9):
        fail("attainable_flops(1000 FLOP/byte) on a chip of 100 TFLOP/s returned a rate above the chip's peak: can "
             "any operation do its arithmetic faster than the chip can?")
    if close(float(low), _PEAK):
        fail("attainable_flops(10 FLOP/byte) returned the chip's full peak: at so few FLOPs per byte, how many "
             "FLOPs per second can the memory feed?")
    if close(float(low), 1 / (1 / _PEAK + 1 / (10.0 * _BW))) or close(float(high), 1 / (1 / _PEAK + 1 / (1000.0 * _BW))):
        fail("attainable_flops added the time to move the bytes and the time to do the arithmetic: section 3 says "
             "what the chip does with the two.")
    if not close(float(low), 10.0 * _BW) or not close(float(high), _PEAK):
        fail("attainable_flops is not the roofline: go back to exercise 4's question, for an operation of F FLOPs at "
             "that intensity.")


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
        fail(f"bound called 10 FLOP/byte compute-bound on {chip}: for an operation of F FLOPs at that intensity, do "
             "its bytes or its FLOPs take longer? Check which way up your chip's side of the comparison is.")
    if low == high == "memory":
        fail(f"bound called 1000 FLOP/byte memory-bound on {chip}: at that intensity, do its bytes or its FLOPs take "
             "longer? Compare the intensity with a number of the chip in the same unit, FLOP per byte.")
    if call(bound, 49.0, _PEAK, _BW) != "memory" or call(bound, 51.0, _PEAK, _BW) != "compute":
        fail(f"bound switches at the wrong intensity on {chip}: at what intensity do moving the bytes and doing the "
             "arithmetic take the same time?")
    tie = _TIE_PEAK / _TIE_BW
    if call(bound, tie, _TIE_PEAK, _TIE_BW) != "compute":
        fail(f"bound called {tie:g} FLOP/byte memory-bound on a chip of 2^47 FLOP/s and 2^41 bytes/s, where moving the "
             "bytes and doing the arithmetic take exactly as long: read section 3's definition of memory-bound again, "
             "word by word.")


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
    for case in _LINEAR_CASES:
        answer = call(linear_forecast, *_linear_args(*case), label=_shown(*case))
        if not isinstance(answer, dict) or set(answer) != set(keys):
            fail(f"{_shown(*case)} did not return a dict with exactly the keys 'intensity', 'bound' and "
                 "'seconds_per_sample'.")
        got[case] = answer
    for case in _LINEAR_CASES:
        answer, shown = got[case], _shown(*case)
        batch, d_in, d_out, dtype, peak, bw = _linear_args(*case)
        size = dtype.itemsize
        want = linear_model(batch, d_in, d_out, size, peak, bw)
        x = answer["intensity"]
        if not is_number(x):
            fail(f"{shown} gave an intensity that is not a number; return FLOP per byte as a float.")
        flops, weights, acts = 2 * batch * d_in * d_out, d_in * d_out * size, batch * (d_in + d_out) * size
        if not close(float(x), want["intensity"], rel=1e-6):
            if close(float(x), flops / acts, rel=1e-6):
                fail(f"{shown} gave an intensity that leaves out the weights: what does every call read, whatever "
                     "its batch?")
            if close(float(x), flops / (batch * (d_in * d_out + d_in + d_out) * size), rel=1e-6):
                fail(f"{shown} gave the intensity of batch 1: you counted the weights once per sample. How many times "
                     "does one batched call have to bring W in from memory?")
            if dtype != torch.float32 and close(float(x), linear_model(batch, d_in, d_out, 4, peak, bw)["intensity"],
                                                rel=1e-6):
                fail(f"{shown} gave the float32 intensity: the dtype was ignored. An element's size depends on its "
                     "dtype (dtype.itemsize).")
            if close(float(x), want["intensity"] / 2, rel=1e-6):
                fail(f"{shown} undercounts the FLOPs: how does the course count a multiply-add (section 2)?")
            if d_in != d_out and any(close(float(x), flops / ((d_in * d_out + 2 * batch * d) * size), rel=1e-6)
                                     for d in (d_in, d_out)):
                fail(f"{shown}, a layer whose inputs and outputs differ in width, gave an intensity that counts them "
                     "as equally wide: which of the call's tensors is d_in wide, and which d_out?")
            fail(f"{shown} gave an intensity the model does not: go back to section 8's count of one call's work and "
                 "bytes.")
        verdict = answer["bound"]
        if verdict not in ("memory", "compute"):
            fail(f"{shown} gave a bound that is neither 'memory' nor 'compute'; use exactly one of them.")
        if verdict != want["bound"]:
            fail(f"{shown} called the layer {verdict}-bound on a chip of 100 TFLOP/s and 2 TB/s, at the intensity it "
                 "gave: does your own bound agree?")
        seconds = answer["seconds_per_sample"]
        if not is_number(seconds):
            fail(f"{shown} gave a seconds_per_sample that is not a number; return seconds as a float.")
        seconds, per = float(seconds), want["seconds_per_sample"]
        if close(seconds, per, rel=1e-6):
            continue
        if batch > 1 and close(seconds, per * batch, rel=1e-6):
            fail(f"{shown} gave the time of the whole batch as the time per sample.")
        if close(seconds * batch, flops / peak + (weights + acts) / bw, rel=1e-6):
            fail(f"{shown} added the compute time and the memory time: does your attainable_flops add them?")
        if want["bound"] == "memory" and close(seconds * batch, flops / peak, rel=1e-6):
            fail(f"{shown} forecast the layer at the chip's peak FLOP/s, at an intensity your bound calls "
                 "memory-bound.")
        fail(f"{shown} gave seconds per sample the roofline does not, though its intensity and bound agree with the "
             "model: how long does one call take at the rate attainable_flops allows?")


JUDGES.update({"crossover_size": _crossover_size, "attainable_flops": _attainable_flops, "bound": _bound,
               "linear_forecast": _linear_forecast})
