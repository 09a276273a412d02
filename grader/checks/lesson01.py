"""Checks for lesson 01 (crossover): FLOPs, bytes, intensity, timing, crossover, roofline."""

from __future__ import annotations

import math
import statistics
import time
import timeit
from typing import Callable

import torch

from grader.checks._common import Check, Prediction, call, close, fail, is_number, recorded, require_callable, same
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson01.expect
from grader.notebook import NotDone



# --- counting work --------------------------------------------------------------------------


def _judge_matmul_flops(matmul_flops: Callable[[int], int]) -> None:
    """matmul_flops(n): 2 FLOPs per multiply-add, n multiply-adds per output, n² outputs."""
    n = 4
    got = call(matmul_flops, n)
    if not is_number(got):
        fail(f"matmul_flops({n}) returned {got!r} ({type(got).__name__}); return a plain int count of FLOPs.")
    if got == n**3:
        fail(
            f"matmul_flops({n}) returned {got} = n³: that counts each multiply-add once. "
            "A multiply-add is two floating-point operations (a multiply and an add)."
        )
    if got in (n**2, 2 * n**2):
        fail(
            f"matmul_flops({n}) returned {got}, which grows like n²: that is the number of outputs. "
            "Each of the n² outputs is a dot product of length n."
        )
    if got == n * n * (2 * n - 1):
        fail(
            f"matmul_flops({n}) returned {got} = n²(2n−1): you counted n−1 additions per output. "
            "The course's convention counts every multiply-add as 2 FLOPs."
        )
    if isinstance(got, float) or not float(got).is_integer():
        fail(f"matmul_flops({n}) returned {got!r}; FLOP counts are whole numbers, return an int.")
    small, big = call(matmul_flops, 16), call(matmul_flops, 32)
    if not small or big / small != 8:
        fail(
            f"matmul_flops(32) / matmul_flops(16) = {big}/{small}: doubling n must multiply "
            "the work by 8 (n³ multiply-adds)."
        )
    if call(matmul_flops, 1) != 2:
        fail(f"matmul_flops(1) returned {call(matmul_flops, 1)}; a 1×1 product is one multiply-add.")


check_matmul_flops = recorded("matmul_flops", "matmul_flops", [(4,), (16,), (32,), (1,)], _judge_matmul_flops)


def _judge_matmul_bytes(matmul_bytes: Callable[[int, torch.dtype], int]) -> None:
    """matmul_bytes(n, dtype): read A and B once, write C once, at the dtype's size."""
    n = 8
    got = call(matmul_bytes, n, torch.float32)
    if not is_number(got):
        fail(f"matmul_bytes({n}, torch.float32) returned {got!r}; return a plain int number of bytes.")
    if got == 3 * n * n:
        fail(
            f"matmul_bytes({n}, torch.float32) returned {got} = 3n²: that counts elements, not bytes. "
            "Multiply by the bytes per element (dtype.itemsize: 4 for float32)."
        )
    if got == 2 * n * n * 4:
        fail(
            f"matmul_bytes({n}, torch.float32) returned {got} = 2n²×4: you counted reading A and B "
            "but not writing C. C is n×n too and has to go to memory."
        )
    if got == (2 * n**3 + n * n) * 4:
        fail(
            f"matmul_bytes({n}, torch.float32) returned {got} = (2n³ + n²)×4: you counted a read every time an "
            "element is used (each output reads a row of A and a column of B). Each element of A is used n times, "
            "but it only has to cross memory once: the chip keeps it on chip while it is reused. Count each matrix "
            "once: that is the least any matmul must move, the figure the roofline works from."
        )
    if got == 4 * n * n * 4:
        fail(
            f"matmul_bytes({n}, torch.float32) returned {got} = 4n²×4: C is written once, not read "
            "and written; count A, B and C once each."
        )
    half = call(matmul_bytes, n, torch.float16)
    if half == got:
        fail(
            f"matmul_bytes gives {got} bytes for both float32 and float16: the dtype was ignored. "
            "float16 takes 2 bytes per element, float32 takes 4."
        )
    if got != 2 * half or call(matmul_bytes, n, torch.float64) != 2 * got:
        fail("matmul_bytes must be proportional to the element size: float16 : float32 : float64 = 2 : 4 : 8 bytes.")
    if call(matmul_bytes, 2 * n, torch.float32) != 4 * got:
        fail("Doubling n should multiply the bytes by 4: three n×n matrices grow as n².")


check_matmul_bytes = recorded("matmul_bytes", "matmul_bytes", lambda: [(8, torch.float32), (8, torch.float16), (8, torch.float64), (16, torch.float32)], _judge_matmul_bytes)


def _judge_intensity(intensity: Callable[[float, float], float]) -> None:
    """intensity(flops, nbytes) = flops / nbytes, as a float."""
    got = call(intensity, 200, 100)
    if is_number(got) and close(float(got), 0.5):
        fail("intensity(200 FLOPs, 100 bytes) returned 0.5: that is bytes per FLOP. Intensity is FLOPs divided by bytes.")
    if not is_number(got) or not close(float(got), 2.0):
        fail(f"intensity(200, 100) returned {got!r}; expected FLOPs per byte, a float.")
    frac = call(intensity, 10, 4)
    if frac == 2:
        fail("intensity(10, 4) returned 2: integer division (//) threw away the fraction. Use /.")
    if not close(float(frac), 2.5):
        fail(f"intensity(10, 4) returned {frac!r}; 10 FLOPs over 4 bytes is 2.5 FLOP/byte.")


check_intensity = recorded("intensity", "intensity", [(200, 100), (10, 4)], _judge_intensity)


# --- timing ---------------------------------------------------------------------------------


class VirtualDevice:
    """A simulated asynchronous device with its own clock, for checking timers without a GPU.

    `launch()` queues `work_seconds(call_index)` of work and returns after a few
    microseconds, as a CUDA launch does; `sync()` advances the clock to when the
    queue drains; `clock()` reads it. While `patched_clocks()` is active, every
    clock a learner might read (time.perf_counter, time.time, time.monotonic, their
    _ns forms, timeit.default_timer) reads this device's clock instead.
    """

    LAUNCH_SECONDS = 5e-6  # what Python pays to ask

    def __init__(self, work_seconds: Callable[[int], float]):
        self.work_seconds = work_seconds
        self.now = 1000.0
        self.queue_end = self.now
        self.calls = 0
        self.events: list[str] = []
        self.durations: list[float] = []

    def launch(self) -> None:
        self.now += self.LAUNCH_SECONDS
        work = self.work_seconds(self.calls)
        self.durations.append(work)
        self.queue_end = max(self.now, self.queue_end) + work
        self.calls += 1
        self.events.append("call")

    def sync(self) -> None:
        self.now = max(self.now, self.queue_end)
        self.events.append("sync")

    def clock(self) -> float:
        self.events.append("clock")
        return self.now

    def clock_ns(self) -> int:
        return int(self.clock() * 1e9)

    def patched_clocks(self, *namespaces: dict):
        """Context manager: every clock function, including names bound in `namespaces`, reads this device."""
        device = self
        originals = {
            (time, "perf_counter"): device.clock,
            (time, "time"): device.clock,
            (time, "monotonic"): device.clock,
            (time, "process_time"): device.clock,
            (time, "perf_counter_ns"): device.clock_ns,
            (time, "time_ns"): device.clock_ns,
            (time, "monotonic_ns"): device.clock_ns,
            (timeit, "default_timer"): device.clock,
        }

        class _Patch:
            def __enter__(self_inner):
                self_inner.saved = []
                real = {getattr(mod, attr): fake for (mod, attr), fake in originals.items()}
                for (mod, attr), fake in originals.items():
                    self_inner.saved.append((mod, attr, getattr(mod, attr)))
                    setattr(mod, attr, fake)
                self_inner.saved_ns = []
                for ns in namespaces:
                    for key, value in list(ns.items()):
                        try:
                            fake = real.get(value)
                        except TypeError:  # unhashable value in the namespace
                            continue
                        if fake is not None:
                            self_inner.saved_ns.append((ns, key, value))
                            ns[key] = fake
                return device

            def __exit__(self_inner, *exc):
                for mod, attr, value in self_inner.saved:
                    setattr(mod, attr, value)
                for ns, key, value in self_inner.saved_ns:
                    ns[key] = value
                return False

        return _Patch()


def _work(warmup: int, pattern: list[float] | None = None) -> Callable[[int], float]:
    """Seconds of device work for call i: a slow first call, then 1 ms calls, one 30 ms hiccup (or `pattern`)."""

    def work(i: int) -> float:
        if pattern is not None:
            return pattern[i]
        if i == 0:
            return 0.050  # first call pays for setup
        if i == warmup + 1:
            return 0.030  # a hiccup during the timed calls
        return 0.001

    return work


def _run_timer(time_op: Callable, warmup: int, repeats: int, pattern: list[float] | None = None) -> dict:
    """Run the learner's time_op on a virtual device; what it returned, the device's calls and events."""
    device = VirtualDevice(_work(warmup, pattern))
    with device.patched_clocks(getattr(time_op, "__globals__", {})):
        got = call(time_op, device.launch, device.sync, warmup, repeats,
                   label=f"time_op(fn, sync, warmup={warmup}, repeats={repeats})")
    return {"got": got, "calls": device.calls, "events": device.events[:1000]}


def _expected(warmup: int, repeats: int, pattern: list[float] | None = None) -> tuple[float, float]:
    """(median, mean) of the timed calls' seconds on the virtual device."""
    work = _work(warmup, pattern)
    timed = [VirtualDevice.LAUNCH_SECONDS + work(i) for i in range(warmup, warmup + repeats)]
    return statistics.median(timed), statistics.fmean(timed)


_TIMER_CASES = ((3, 5), (1, 8))


def _observe_time_op(time_op: Callable) -> list[dict]:
    require_callable(time_op, "time_op")
    return [_run_timer(time_op, warmup, repeats) for warmup, repeats in _TIMER_CASES]


def _judge_time_op(observation: list) -> None:
    """time_op warms up, synchronizes before every clock read, and returns the median seconds per call."""
    for (warmup, repeats), seen in zip(_TIMER_CASES, observation):
        got, calls, events = seen["got"], seen["calls"], seen["events"]
        median, mean = _expected(warmup, repeats)
        if not is_number(got):
            fail(f"time_op returned {got!r} ({type(got).__name__}); return the median seconds per call as a float.")
        got = float(got)
        if calls != warmup + repeats:
            fail(
                f"time_op called fn {calls} times for warmup={warmup}, repeats={repeats}; "
                f"it should call it exactly {warmup + repeats} times ({warmup} untimed, then {repeats} timed)."
            )
        if "clock" not in events:
            fail("time_op never read time.perf_counter() (or another clock from the time module); read the clock around each timed call.")
        first_clock = events.index("clock")
        if events[:first_clock].count("call") < warmup:
            fail(
                f"time_op started the clock after only {events[:first_clock].count('call')} call(s), "
                f"but warmup={warmup}: call fn warmup times before timing anything. "
                "The first call pays for setup (allocation, kernel selection) and is not what you want to measure."
            )
        if "sync" not in events:
            fail(
                f"your timer returned {got * 1e6:.0f} µs for work that takes {median * 1e3:.1f} ms on this (simulated) "
                "GPU: it never called sync(). GPU work is queued asynchronously, so without synchronizing you time "
                "how fast Python can ask, not how fast the device answers."
            )
        if got < 0.5 * median:
            fail(
                f"your timer returned {got * 1e6:.0f} µs for work that takes {median * 1e3:.1f} ms on this (simulated) "
                "GPU: faster than the work allows. Did you synchronize before reading the clock? "
                "Call fn(), then sync(), then read the clock."
            )
        if close(got, mean, rel=0.02) and not close(mean, median, rel=0.02):
            fail(
                f"time_op returned {got * 1e3:.2f} ms, the mean; one slow call (a 30 ms hiccup) pulled it up. "
                f"Return the median ({median * 1e3:.2f} ms): it ignores rare slow calls."
            )
        if close(got, median * repeats, rel=0.05) or close(got, mean * repeats, rel=0.05):
            fail(f"time_op returned {got:.4f} s, the total over {repeats} calls; return seconds per call (the median).")
        if close(got, median * 1000, rel=0.05):
            fail(f"time_op returned {got:.3f}, which is milliseconds; return seconds.")
        if not close(got, median, rel=0.05):
            fail(
                f"time_op returned {got * 1e3:.3f} ms; the median of the timed calls was {median * 1e3:.3f} ms. "
                "Time each call on its own (clock, fn, sync, clock) and take the median of those."
            )
    if len(observation) != len(_TIMER_CASES):
        fail("the check could not read what time_op did (a recording of the wrong length)")


check_time_op = Check("time_op", _observe_time_op, _judge_time_op)


def _observe_timer_on(time_op: Callable, work: list, warmup: int, repeats: int) -> dict:
    return _run_timer(time_op, warmup, repeats, list(work))


def _judge_timer_on(observation: dict, work: list, warmup: int, repeats: int, want: float, why: str) -> None:
    if not same(observation.get("got"), want, rel=1e-6):
        fail(f"{why} (time_op returned {observation.get('got')!r})")


timer_on = Check("time_op on given work", _observe_timer_on, _judge_timer_on, inputs=("work", "warmup", "repeats"),
                 announce=False)
timer_on.__doc__ = "Hidden test: time_op on a virtual device whose calls take `work` seconds; returns `want`."


# --- crossover ------------------------------------------------------------------------------


_SIZES = [64, 128, 256, 512, 1024, 2048]
_CPU = [1e-5, 4e-5, 3e-4, 2e-3, 1.6e-2, 0.13]
_SIMPLE = [3e-5, 6e-5, 1e-4, 3e-4, 1e-3, 6e-3]  # GPU wins from 256 on
_FLIP = [3e-5, 3e-5, 4e-4, 3e-4, 1e-3, 6e-3]  # GPU wins at 128, loses at 256, wins from 512
_NEVER = [c * 2 for c in _CPU]
_TIE = [c * 2 for c in _CPU[:5]] + [_CPU[5]]  # slower everywhere, equal at the largest size
_ALWAYS = [c / 2 for c in _CPU]
_CROSSOVER_CASES = [(_SIZES, _CPU, gpu) for gpu in (_SIMPLE, _FLIP, _NEVER, _TIE, _ALWAYS)]


def _judge_crossover_size(crossover_size: Callable) -> None:
    """crossover_size: the smallest size from which the GPU stays faster; None if it never does."""
    got = call(crossover_size, _SIZES, _CPU, _SIMPLE)
    if got == 2:
        fail("crossover_size returned 2, an index into sizes; return the size itself (here 256).")
    if got != 256:
        fail(
            f"crossover_size returned {got!r} where the CPU is faster at 64 and 128 and the GPU at 256 and above; "
            "expected the size 256."
        )
    got = call(crossover_size, _SIZES, _CPU, _FLIP)
    if got == 128:
        fail(
            "crossover_size returned 128, the first size where the GPU wins, but the CPU is faster again at 256. "
            "The crossover is the smallest size where the GPU wins there and at every larger size (here 512)."
        )
    if got != 512:
        fail(f"crossover_size returned {got!r} when the GPU wins at 128, loses at 256 and wins from 512 on; expected 512.")
    got = call(crossover_size, _SIZES, _CPU, _NEVER)
    if got is not None:
        fail(f"crossover_size returned {got!r} when the GPU is never faster; return None.")
    got = call(crossover_size, _SIZES, _CPU, _TIE)
    if got is not None:
        fail(f"crossover_size returned {got!r} when the GPU only ties at 2048; a tie is not faster, return None.")
    got = call(crossover_size, _SIZES, _CPU, _ALWAYS)
    if got != 64:
        fail(f"crossover_size returned {got!r} when the GPU is faster at every size; expected the smallest size, 64.")


check_crossover_size = recorded("crossover_size", "crossover_size", _CROSSOVER_CASES, _judge_crossover_size)


# --- roofline -------------------------------------------------------------------------------

_PEAK, _BW = 100e12, 2e12  # a made-up chip: 100 TFLOP/s, 2 TB/s, balance 50 FLOP/byte


def _judge_attainable_flops(attainable_flops: Callable[[float, float, float], float]) -> None:
    """attainable = min(peak, intensity × bandwidth)."""
    low = call(attainable_flops, 10.0, _PEAK, _BW)
    high = call(attainable_flops, 1000.0, _PEAK, _BW)
    if not is_number(low) or not is_number(high):
        fail(f"attainable_flops returned {low!r}; return FLOP/s as a float.")
    if close(float(high), 1000.0 * _BW):
        fail(
            "attainable_flops(1000 FLOP/byte) on a 100 TFLOP/s, 2 TB/s chip returned 2000 TFLOP/s, above the chip's "
            "peak: no operation beats peak. Take the smaller of peak and intensity × bandwidth (min, not max)."
        )
    if close(float(low), _PEAK):
        fail(
            "attainable_flops(10 FLOP/byte) returned the chip's full peak: at 10 FLOP/byte the memory can feed only "
            "10 × 2 TB/s = 20 TFLOP/s. A memory-bound operation is capped by intensity × bandwidth."
        )
    if close(float(low), 1 / (1 / _PEAK + 1 / (10.0 * _BW))) or close(float(high), 1 / (1 / _PEAK + 1 / (1000.0 * _BW))):
        fail(
            "attainable_flops added the time to move the bytes and the time to do the arithmetic (FLOPs / (FLOPs / "
            "peak + bytes / bandwidth)). The chip does both at once: while one block of data is being multiplied the "
            "next one is already on its way, so the time is the longer of the two, not their sum. Then "
            "attainable = FLOPs / time = min(peak, intensity × bandwidth)."
        )
    if not close(float(low), 10.0 * _BW) or not close(float(high), _PEAK):
        fail(
            f"attainable_flops gave {low:.3g} and {high:.3g} FLOP/s at 10 and 1000 FLOP/byte on a 100 TFLOP/s, 2 TB/s "
            "chip; the roofline is min(peak, intensity × bandwidth)."
        )


check_attainable_flops = recorded("attainable_flops", "attainable_flops", [(10.0, _PEAK, _BW), (1000.0, _PEAK, _BW)], _judge_attainable_flops)


def _judge_bound(bound: Callable[[float, float, float], str]) -> None:
    """bound: "memory" below the balance point peak/bandwidth, "compute" above it."""
    low, high = call(bound, 10.0, _PEAK, _BW), call(bound, 1000.0, _PEAK, _BW)
    if low not in ("memory", "compute") or high not in ("memory", "compute"):
        fail(f"bound returned {low!r} and {high!r}; return exactly the string 'memory' or 'compute'.")
    if low == "compute" and high == "memory":
        fail(
            "bound says 10 FLOP/byte is compute-bound and 1000 FLOP/byte memory-bound: the comparison is reversed. "
            "Below the balance point (peak / bandwidth) the memory cannot keep the arithmetic busy."
        )
    if low == high == "compute":
        fail(
            "bound called 10 FLOP/byte compute-bound on a chip whose balance point is 100e12 / 2e12 = 50 FLOP/byte. "
            "Compare intensity with peak / bandwidth (not bandwidth / peak)."
        )
    if low == high == "memory":
        fail("bound called 1000 FLOP/byte memory-bound on a chip that balances at 50 FLOP/byte; compare with peak / bandwidth.")
    if call(bound, 49.0, _PEAK, _BW) != "memory" or call(bound, 51.0, _PEAK, _BW) != "compute":
        fail("bound must switch from 'memory' to 'compute' at the balance point peak / bandwidth (50 FLOP/byte here).")



check_bound = recorded("bound", "bound", [(x, _PEAK, _BW) for x in (10.0, 1000.0, 49.0, 51.0)], _judge_bound)

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


_D = 1024
_LINEAR_CASES = [(1, torch.float32), (8, torch.float32), (512, torch.float32), (1, torch.bfloat16), (512, torch.bfloat16)]
_KEYS = ("intensity", "bound", "seconds_per_sample")


def _linear_args(batch: int, dtype: torch.dtype) -> tuple:
    return (batch, _D, _D, dtype, _PEAK, _BW)


def _shown(batch: int, dtype: torch.dtype) -> str:
    return f"linear_forecast(batch={batch}, {_D}×{_D} weights, {str(dtype).removeprefix('torch.')})"


def _judge_linear_forecast(linear_forecast: Callable) -> None:
    """linear_forecast: intensity, bound and roofline seconds per sample of a bias-free Linear, as the model says."""
    got = {}
    for batch, dtype in _LINEAR_CASES:
        shown = _shown(batch, dtype)
        answer = call(linear_forecast, *_linear_args(batch, dtype), label=shown)
        if not isinstance(answer, dict) or set(answer) != set(_KEYS):
            keys = sorted(map(str, answer)) if isinstance(answer, dict) else type(answer).__name__
            fail(f"{shown} returned {keys}; return a dict with exactly the keys 'intensity', 'bound' and "
                 "'seconds_per_sample'.")
        got[batch, dtype] = answer
    for batch, dtype in _LINEAR_CASES:
        answer, shown = got[batch, dtype], _shown(batch, dtype)
        size = dtype.itemsize
        want = linear_model(batch, _D, _D, size, _PEAK, _BW)
        x = answer["intensity"]
        if not is_number(x):
            fail(f"{shown} gave intensity {x!r}; return FLOP per byte as a float.")
        flops, weights, acts = 2 * batch * _D * _D, _D * _D * size, batch * 2 * _D * size
        if not close(float(x), want["intensity"], rel=1e-6):
            if close(float(x), flops / acts, rel=1e-6):
                fail(f"{shown} gave intensity {x:.4g} FLOP/byte: you left out the weights. Every call reads the whole "
                     f"{_D}×{_D} weight matrix ({weights / 2**20:.0f} MiB); at small batch it is almost all the bytes.")
            if close(float(x), flops / (batch * (_D * _D + 2 * _D) * size), rel=1e-6):
                fail(f"{shown} gave intensity {x:.4g} FLOP/byte, the same as at batch 1: you counted the weights once "
                     "per sample. One batched matmul reads W once for the whole batch; that reuse is why batching helps.")
            if dtype != torch.float32 and close(float(x), linear_model(batch, _D, _D, 4, _PEAK, _BW)["intensity"], rel=1e-6):
                fail(f"{shown} gave the float32 intensity {x:.4g}: the dtype was ignored. bfloat16 takes 2 bytes per "
                     "element (dtype.itemsize), so the same layer moves half the bytes.")
            if close(float(x), want["intensity"] / 2, rel=1e-6):
                fail(f"{shown} gave intensity {x:.4g}, half the model's {want['intensity']:.4g}: a multiply-add is two "
                     "FLOPs, so the layer does 2·batch·d_in·d_out.")
            fail(f"{shown} gave intensity {x!r}; the model says {want['intensity']:.4g} FLOP/byte: 2·batch·d_in·d_out "
                 "FLOPs over (d_in·d_out + batch·d_in + batch·d_out) × itemsize bytes.")
        verdict = answer["bound"]
        if verdict not in ("memory", "compute"):
            fail(f"{shown} gave bound {verdict!r}; use exactly 'memory' or 'compute'.")
        if verdict != want["bound"]:
            fail(f"{shown} called intensity {x:.4g} FLOP/byte {verdict}-bound on a chip that balances at "
                 f"{_PEAK / _BW:.0f} FLOP/byte (100 TFLOP/s, 2 TB/s): below the balance point is memory-bound, above "
                 "it compute-bound.")
        seconds = answer["seconds_per_sample"]
        if not is_number(seconds):
            fail(f"{shown} gave seconds_per_sample {seconds!r}; return seconds as a float.")
        seconds = float(seconds)
        per = want["seconds_per_sample"]
        if close(seconds, per, rel=1e-6):
            continue
        nbytes = weights + acts
        if batch > 1 and close(seconds, per * batch, rel=1e-6):
            fail(f"{shown} gave {seconds:.3g} s per sample, the time of the whole batch of {batch}; divide by the batch.")
        if close(seconds * batch, flops / _PEAK + nbytes / _BW, rel=1e-6):
            fail(f"{shown} added the compute time and the memory time. The roofline overlaps them: the time is "
                 "FLOPs / attainable_flops, the larger of FLOPs / peak and bytes / bandwidth.")
        if want["bound"] == "memory" and close(seconds * batch, flops / _PEAK, rel=1e-6):
            fail(f"{shown} forecast the layer at the chip's peak FLOP/s, but at {x:.3g} FLOP/byte it is memory-bound: "
                 "the time is set by reading the bytes (bytes / bandwidth).")
        fail(f"{shown} gave {seconds:.4g} s per sample; the roofline says {per:.4g} s: FLOPs / attainable_flops(...) "
             "for the whole batch, divided by the batch.")


check_linear_forecast = recorded("linear_forecast", "linear_forecast",
                                 lambda: [_linear_args(b, dt) for b, dt in _LINEAR_CASES], _judge_linear_forecast)


# --- predictions ------------------------------------------------------------------------------
#
# A prediction is a dict the learner fills in a cell before the cell that shows the answer. The
# check judges it against the course's model (the same arithmetic as the lesson's functions, done
# here with the course's own code and the datasheet figures in data/chips.csv), never against a
# measurement, so it gives the same verdict on every machine.


def _observe_prediction(name: str) -> Callable:
    def observe(answers) -> object:
        if isinstance(answers, dict) and not answers:
            raise NotDone(name)
        return answers

    return observe


def _prediction(answers, name: str, keys: dict) -> dict:
    """The prediction dict with exactly `keys` (key -> 'number' or a tuple of allowed words), or a failure saying what is off."""
    if not isinstance(answers, dict):
        fail(f"{name} should be a dict with the keys {list(keys)}; it is {type(answers).__name__}.")
    missing = [k for k in keys if k not in answers]
    extra = sorted(map(repr, set(answers) - set(keys)))
    if missing or extra:
        fail(f"{name} needs exactly the keys {list(keys)}; missing {missing}, unexpected [{', '.join(extra)}].")
    for key, kind in keys.items():
        value = answers[key]
        if kind == "number":
            if not is_number(value) or not math.isfinite(float(value)) or float(value) <= 0:
                fail(f"{name}[{key!r}] is {value!r}; write a positive number.")
        elif value not in kind:
            fail(f"{name}[{key!r}] is {value!r}; write one of {', '.join(map(repr, kind))}.")
    return {k: (float(v) if keys[k] == "number" else v) for k, v in answers.items()}


def matmul_intensity(n: int, itemsize: int) -> float:
    """The course's model: an n×n matmul does 2n³ FLOPs and moves three n×n matrices once."""
    return 2 * n**3 / (3 * n * n * itemsize)


_INTENSITY_KEYS = {"add float32": "number", "matmul 1024 float32": "number", "matmul 1024 bfloat16": "number"}


def _judge_intensity_prediction(answers) -> None:
    """INTENSITY_PREDICTION: FLOP/byte of a float32 add and of a 1024² matmul in float32 and bfloat16."""
    got = _prediction(answers, "INTENSITY_PREDICTION", _INTENSITY_KEYS)
    add = got["add float32"]
    if close(add, 1 / 8, rel=0.01):
        fail("You predicted 1/8 FLOP/byte for the float32 add: that counts reading a and b but not writing c. "
             "The result has to go to memory too: 1 FLOP per element over 3 elements × 4 bytes = 1/12.")
    if close(add, 1 / 3, rel=0.01) or close(add, 1 / 2, rel=0.01):
        fail(f"You predicted {add:.3g} FLOP/byte for the float32 add: that counts elements, not bytes. Each element "
             "is 4 bytes in float32: 1 FLOP per 3 elements × 4 bytes = 1/12.")
    if close(add, 12, rel=0.01) or close(add, 8, rel=0.01):
        fail(f"You predicted {add:.3g} for the add: that is bytes per FLOP. Intensity is FLOPs per byte: 1/12.")
    if not close(add, 1 / 12, rel=0.01):
        fail(f"You predicted {add:.4g} FLOP/byte for the float32 add c = a + b; count its FLOPs (one per output "
             "element) and the bytes that cross memory (a and b read, c written, 4 bytes each).")
    fp32, bf16 = got["matmul 1024 float32"], got["matmul 1024 bfloat16"]
    want32, want16 = matmul_intensity(1024, 4), matmul_intensity(1024, 2)
    if close(fp32, want32 / 2, rel=0.01):
        fail(f"You predicted {fp32:.4g} FLOP/byte for the 1024² float32 matmul, half the model's: a multiply-add "
             "is 2 FLOPs (your matmul_flops counts them).")
    if close(fp32, want32 * 4, rel=0.01):
        fail(f"You predicted {fp32:.4g} for the 1024² float32 matmul: that divides by elements, not bytes "
             "(4 bytes each in float32).")
    if not close(fp32, want32, rel=0.01):
        fail(f"You predicted {fp32:.4g} FLOP/byte for the 1024² float32 matmul; the model says {want32:.4g}: "
             "matmul_flops(1024) / matmul_bytes(1024, torch.float32).")
    if close(bf16, fp32, rel=0.01):
        fail("You predicted the same intensity for the bfloat16 matmul as for float32: the FLOPs are the same but "
             "each element is 2 bytes, not 4, so the same matmul moves half the bytes and does twice the FLOPs per "
             "byte.")
    if close(bf16, want32 / 2, rel=0.01):
        fail("You predicted half the float32 intensity for bfloat16: the other way round. Fewer bytes per element "
             "means fewer bytes for the same FLOPs: the intensity doubles.")
    if not close(bf16, want16, rel=0.01):
        fail(f"You predicted {bf16:.4g} FLOP/byte for the 1024² bfloat16 matmul; the model says {want16:.4g}.")


check_intensity_prediction = Check("INTENSITY_PREDICTION", _observe_prediction("INTENSITY_PREDICTION"),
                                   _judge_intensity_prediction)


def compute_bound_from(chip_name: str, fmt: str, itemsize: int) -> float:
    """The n (not rounded) at which an n×n matmul's intensity reaches the chip's balance point in `fmt`."""
    from grader import specs

    chip = specs.chip(chip_name)
    return 1.5 * itemsize * chip.balance(fmt)


_BOUND_KEYS = {"fp32": "number", "bf16": "number"}
_BOUND_CHIP = "H100"


def _judge_compute_bound_n(answers) -> None:
    """COMPUTE_BOUND_N: the smallest n at which an n×n matmul is compute-bound on the H100, in fp32 and in bf16."""
    from grader import specs

    got = _prediction(answers, "COMPUTE_BOUND_N", _BOUND_KEYS)
    chip = specs.chip(_BOUND_CHIP)
    want = {"fp32": compute_bound_from(_BOUND_CHIP, "fp32", 4), "bf16": compute_bound_from(_BOUND_CHIP, "bf16", 2)}
    balance = {fmt: chip.balance(fmt) for fmt in want}

    def near(value: float, target: float) -> bool:  # the smallest whole n is within one of the exact crossing
        return abs(value - target) <= max(1.0, 0.01 * target)

    for fmt, size in (("fp32", 4), ("bf16", 2)):
        n = got[fmt]
        if near(n, 1.5 * balance[fmt]):
            fail(f"COMPUTE_BOUND_N[{fmt!r}] = {n:g} makes the matmul's FLOPs per *element* reach the balance point "
                 f"({balance[fmt]:.0f} FLOP/byte): the balance point is per byte, and an element is {size} bytes in "
                 f"{fmt}.")
        if fmt == "bf16" and near(n, compute_bound_from(_BOUND_CHIP, "bf16", 4)):
            fail(f"COMPUTE_BOUND_N['bf16'] = {n:g} counts 4 bytes per element: bfloat16 is 2 bytes (the dtype's "
                 "itemsize), so a bf16 matmul does twice the FLOPs per byte of the same float32 one.")
        if near(n, balance[fmt]):
            fail(f"COMPUTE_BOUND_N[{fmt!r}] = {n:g} is the balance point itself ({balance[fmt]:.1f} FLOP/byte), not "
                 "a matrix size: find the n whose intensity (matmul_flops / matmul_bytes) reaches it.")
    if got["bf16"] <= got["fp32"]:
        fail(f"You predicted a bf16 matmul turns compute-bound at n = {got['bf16']:g}, no later than fp32 "
             f"(n = {got['fp32']:g}). The tensor cores raise the peak ({chip.peak('bf16') / 1e12:.0f} against "
             f"{chip.peak('fp32') / 1e12:.0f} TFLOP/s) on the same memory, so the balance point moves up "
             f"({balance['bf16']:.0f} against {balance['fp32']:.0f} FLOP/byte) and a matmul needs more reuse, a larger "
             "n, to keep them busy.")
    for fmt, size in (("fp32", 4), ("bf16", 2)):
        if not near(got[fmt], want[fmt]):
            fail(f"COMPUTE_BOUND_N[{fmt!r}] = {got[fmt]:g}: on the {chip.name} in {fmt} the balance point is "
                 f"{balance[fmt]:.1f} FLOP/byte. An n×n matmul does 2n³ FLOPs over 3n² elements of {size} bytes, so its "
                 "intensity grows in proportion to n: find the smallest n at which it reaches the balance point.")


check_compute_bound_n = Check("COMPUTE_BOUND_N", _observe_prediction("COMPUTE_BOUND_N"), _judge_compute_bound_n)


def gpu_fixed_seconds() -> float:
    """The course's modelled fixed cost of one GPU call: host dispatch, kernel launch and synchronize (assumptions)."""
    from grader import specs

    constants = specs.model_constants()
    return sum(constants[f"{name}_seconds"]["value"] for name in ("host_dispatch", "kernel_launch", "sync"))


CROSSOVER_CPU_FLOPS = 100e9  # the made-up CPU of the crossover prediction: 100 GFLOP/s, no fixed cost
CROSSOVER_CHIP = "T4"
LESSON = "01_crossover"  # the lesson's name in the predictions record (grader.predictions)


def _crossover_n(fixed: float, cpu_flops: float, gpu_flops: float, work_power: int = 3) -> float:
    """The n at which fixed + 2n^p/gpu_flops = 2n^p/cpu_flops (p = 3: a matmul's work; p = 2: the outputs only)."""
    return (fixed / (2 * (1 / cpu_flops - 1 / gpu_flops))) ** (1 / work_power)


def _crossover_inputs() -> tuple[float, float, float]:
    from grader import specs

    return gpu_fixed_seconds(), CROSSOVER_CPU_FLOPS, specs.chip(CROSSOVER_CHIP).peak("fp32")


def _crossover_mistake(n: float) -> str | None:
    """The known mistake an answer matches (to 3%), in words with no value in them; None if it matches none."""
    fixed, cpu, gpu = _crossover_inputs()
    known = [
        (_crossover_n(fixed, cpu, gpu, 2), "it is where the two times meet if a matmul's work grew with its n² outputs; "
                                            "each output is a dot product of length n"),
        (_crossover_n(fixed * 1e3, cpu, gpu), "it reads the fixed cost in milliseconds; it is in microseconds"),
        (_crossover_n(fixed / 2, cpu, gpu), "it counts a multiply-add as 1 FLOP where the rates count 2"),
        (_crossover_n(fixed, cpu, math.inf), "it leaves out the GPU's own arithmetic time: the GPU pays its fixed cost "
                                              "and then does the work too, only faster"),
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


check_crossover_prediction = Prediction(LESSON, "CROSSOVER_PREDICTION", {"n": "number"}, points=2,
                                        band=_crossover_band, mistakes=_crossover_final, model=_crossover_said)


_LINEAR_PREDICTION_KEYS = {"batch 1": ("memory", "compute"), "batch 512": ("memory", "compute"),
                           "cheaper per sample": "number"}
LINEAR_CHIP, LINEAR_D = "T4", 2048


def _judge_linear_prediction(answers) -> None:
    """LINEAR_PREDICTION: the bound of a 2048² float32 Linear at batch 1 and 512 on a T4, and the per-sample saving."""
    from grader import specs

    got = _prediction(answers, "LINEAR_PREDICTION", _LINEAR_PREDICTION_KEYS)
    chip = specs.chip(LINEAR_CHIP)
    model = {b: linear_model(b, LINEAR_D, LINEAR_D, 4, chip.peak("fp32"), chip.bandwidth) for b in (1, 512)}
    if got["batch 1"] != model[1]["bound"]:
        fail(f"At batch 1 every weight is read from memory for one multiply-add: about "
             f"{model[1]['intensity']:.1f} FLOP/byte, far below the {chip.name}'s balance point of "
             f"{chip.balance('fp32'):.0f}. Batch 1 is {model[1]['bound']}-bound.")
    if got["batch 512"] != model[512]["bound"]:
        fail(f"At batch 512 each weight read serves 512 samples: {model[512]['intensity']:.0f} FLOP/byte against a "
             f"balance point of {chip.balance('fp32'):.0f}, so the layer is {model[512]['bound']}-bound.")
    saving = model[1]["seconds_per_sample"] / model[512]["seconds_per_sample"]
    ratio = got["cheaper per sample"]
    if close(ratio, 1, rel=0.05):
        fail("You predicted batch 512 costs the same per sample as batch 1. Batch 1 spends its whole time reading "
             "the weights for one sample; batch 512 reads them once for all 512.")
    if close(ratio, 512, rel=0.05):
        fail("You predicted batch 512 is 512× cheaper per sample: that would hold if the weight read were all of "
             "the cost at every batch. At batch 512 the layer is compute-bound: its time is its arithmetic, which "
             "grows with the batch.")
    if abs(ratio - saving) > 0.1 * saving:
        fail(f"You predicted batch 512 is {ratio:.3g}× cheaper per sample. Work out each batch's roofline time "
             "(FLOPs / attainable FLOP/s, the longer of the weight read and the arithmetic) and divide each by its "
             "batch; your linear_forecast does it.")


check_linear_prediction = Check("LINEAR_PREDICTION", _observe_prediction("LINEAR_PREDICTION"), _judge_linear_prediction)
