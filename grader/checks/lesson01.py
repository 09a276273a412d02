"""Checks for lesson 01 (crossover): FLOPs, bytes, intensity, timing, crossover, roofline."""

from __future__ import annotations

import math
import statistics
import time
import timeit
from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from grader import shortcuts, triton_counter
from grader.checks._common import (Check, Prediction, answered_by, call, close, fail, guard, is_number, quote, recorded,
                                   require_callable, same)
from grader.checks._common import Replay, expect  # noqa: F401  the hidden tests call lesson01.expect
from grader.checks._keys import Keyed
from grader.checks._sealed import sealed
from grader.notebook import NotDone
from grader.shortcuts import course_only

LESSON = "01_crossover"  # the lesson's name in the predictions record (grader.predictions)



# --- counting work --------------------------------------------------------------------------


# The answers of these three are not here: each is judged by digests (grader.checks._keys), made by
# scripts/build_keys.py from the instructor's judges (solutions/judges/lesson01.py, never released).


def _public_matmul_flops(matmul_flops: Replay) -> None:
    """What can be said of matmul_flops without its answer: a count of FLOPs is a plain int."""
    got = call(matmul_flops, 4)
    if not is_number(got):
        fail(f"matmul_flops(4) returned {got!r} ({type(got).__name__}); return a plain int count of FLOPs.")
    if isinstance(got, float) or not float(got).is_integer():
        fail(f"matmul_flops(4) returned a {type(got).__name__}; FLOP counts are whole numbers, return an int.")


def _flop_formulas() -> dict:
    """{function: label} for torch.utils.flop_counter's per-op FLOP formulas (mm_flop, addmm_flop, ...): the module's
    names, what they wrap, and the registry's entries (copy test r22 passed matmul_flops with mm_flop((n, n), (n, n)))."""
    import torch.utils.flop_counter as counter

    label = "torch.utils.flop_counter's FLOP formulas (torch's own count of a matmul's work)"
    # every function of the module that counts (r23 used conv_flop_count: a width-1 convolution is a matmul)
    found = [v for n, v in vars(counter).items() if "flop" in n and callable(v) and not isinstance(v, type)
             and getattr(v, "__module__", None) == counter.__name__ and n != "register_flop_formula"]
    found += list(getattr(counter, "flop_registry", {}).values())
    found += [getattr(f, "__wrapped__") for f in found if callable(getattr(f, "__wrapped__", None))]
    return {f: label for f in found}


# torch's own counters count a matmul's FLOPs (copy test r6: FlopCounterMode over a matmul of meta tensors; r27 built
# linear_forecast on it too)
_FLOP_COUNTERS = {FlopCounterMode: "torch.utils.flop_counter.FlopCounterMode (torch's own FLOP counter)",
                  torch.profiler.profile: "torch.profiler.profile (its with_flops counts the FLOPs)",
                  torch.autograd.profiler.profile: "torch.autograd.profiler.profile (its with_flops counts the FLOPs)",
                  # copy test r24: the legacy profiler is a class of its own
                  torch.autograd.profiler_legacy.profile: "torch.autograd.profiler_legacy.profile (its with_flops "
                                                          "counts the FLOPs)", **_flop_formulas()}
# lesson 08's traffic counter measures a matmul's least bytes (copy test r27: its unique_bytes under a Triton matmul)
_BYTE_COUNTERS = {triton_counter.launch: "grader.triton_counter.launch (the course's memory-traffic counter)",
                  triton_counter.Counts.unique_bytes.fget: "grader.triton_counter.Counts.unique_bytes (the traffic "
                                                           "of a perfect cache, measured)",
                  triton_counter.Counts.unique_loaded_bytes.fget: "grader.triton_counter.Counts.unique_loaded_bytes "
                                                                  "(the traffic of a perfect cache, measured)"}

# ... and measured in a cell of its own before the check (r28: the course's matmul kernel under the counter, in a
# scratch cell): a launch of it, or of its wrapper, from this kernel before the check passed counts (earlier=)
_BYTES_EARLIER = triton_counter.launched_labels("matmul", "matmul_kernel")


check_matmul_flops = guard(Keyed(
    "01_crossover", "matmul_flops", "matmul_flops", [(4,), (16,), (32,), (1,), (3,)], public=_public_matmul_flops,
    unknown="matmul_flops is not the work of an n×n matmul, nor a mistake the course knows. Go back to section 2 "
            "and count from what a matrix product is: a 2×2 product on paper, then a 3×3, is a good check."),
    # a thread or process of its own, where the watch does not follow (an outside test: FlopCounterMode in a subprocess)
    "matmul_flops", {**_FLOP_COUNTERS, **shortcuts.ELSEWHERE})


def _public_matmul_bytes(matmul_bytes: Replay) -> None:
    """What can be said of matmul_bytes without its answer: a number of bytes."""
    got = call(matmul_bytes, 8, torch.float32)
    if not is_number(got):
        fail(f"matmul_bytes(8, torch.float32) returned {quote(got)}; return a plain int number of bytes.")
    if isinstance(got, float) or not float(got).is_integer():
        # copy test r27: the right count as a float was told it was no mistake the course knows
        fail(f"matmul_bytes(8, torch.float32) returned a {type(got).__name__}; bytes are whole, return an int.")


def _hints_matmul_bytes(matmul_bytes: Replay) -> None:
    """An unknown answer that does not grow as n², ignores the dtype, or the output's dtype."""
    small, large = call(matmul_bytes, 8, torch.float32), call(matmul_bytes, 16, torch.float32)
    if is_number(small) and is_number(large) and small > 0 and not math.isclose(large / small, 4.0, rel_tol=1e-9):
        # copy test r22: 2n³·itemsize was told the output's dtype was ignored, which was true but not its mistake
        fail(f"matmul_bytes(16, torch.float32) is {large / small:.3g}× matmul_bytes(8, torch.float32): doubling n "
             "should multiply the traffic by as much as it multiplies what the matrices hold.")
    if call(matmul_bytes, 8, torch.float16) == call(matmul_bytes, 8, torch.float32):
        fail("matmul_bytes gives the same bytes for float32 and float16: the dtype was ignored. An element's size "
             "depends on its dtype (dtype.itemsize).")
    if call(matmul_bytes, 8, torch.bfloat16, torch.float32) == call(matmul_bytes, 8, torch.bfloat16):
        if call(matmul_bytes, 8, torch.float16) * 2 != call(matmul_bytes, 8, torch.float32):
            # copy test r24: C always written as float32 was told it ignored out_dtype, the opposite of its mistake
            fail("matmul_bytes(8, torch.float16) is not half of matmul_bytes(8, torch.float32): with no out_dtype, in "
                 "what dtype does the product go out?")
        fail("matmul_bytes(8, torch.bfloat16, torch.float32) gives the bytes of a product written in bfloat16: the "
             "output's dtype was ignored.")


# (n, dtype) and (n, dtype, out_dtype): A and B in dtype, C written in out_dtype (16-bit inputs, a float32 output, as
# torch.mm(a, b, out_dtype=torch.float32) writes on CUDA); every kernel accumulates in float32 on chip.
check_matmul_bytes = guard(Keyed(
    "01_crossover", "matmul_bytes", "matmul_bytes",
    lambda: [(8, torch.float32), (8, torch.float16), (8, torch.float64), (16, torch.float32), (5, torch.bfloat16),
             (8, torch.bfloat16, torch.float32), (16, torch.float16, torch.float32), (8, torch.float32, torch.float32),
             (8, torch.bfloat16, None), (8, torch.bfloat16)],
    public=_public_matmul_bytes, hints=_hints_matmul_bytes,
    unknown="matmul_bytes is not the least traffic a matmul must cause, nor a mistake the course knows: what must "
            "cross memory at the very least, however clever the kernel, and at how many bytes an element, as each "
            "matrix is stored?"),
    "matmul_bytes", {**_BYTE_COUNTERS, **shortcuts.ELSEWHERE}, earlier=_BYTES_EARLIER)


def _public_intensity(intensity: Replay) -> None:
    got = call(intensity, 200, 100)
    if not is_number(got):
        fail(f"intensity(200, 100) returned {quote(got)}; return a float: FLOPs per byte.")


check_intensity = Keyed(
    "01_crossover", "intensity", "intensity", [(200, 100), (10, 4), (7, 3)], public=_public_intensity,
    unknown="intensity is not the arithmetic an operation does for each byte it moves, as a float, nor a mistake "
            "the course knows.")


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


# The simulated GPU comes up to speed over its first calls, as a GPU's clocks rise from idle under load: after the
# first call (which pays for setup) each call's extra time over a warm one halves, until the calls take `base`. Every
# step of the ramp is at least 20% faster than the one before, and the ramp outlasts the warm-up a caller gives.
_RAMP = (8.0, 4.0, 2.0, 1.0, 0.5, 0.25)  # calls 1..6: base x (1 + this)


def _long_ramp(calls: int, step: float = 1.25) -> tuple[float, ...]:
    """A ramp of `calls` calls, each taking 1/`step` of the one before (20% less at 1.25), down to base x `step`: a
    device that comes up to speed more slowly (the check's cases differ in how long, so no fixed extra warm-up passes
    them all)."""
    return tuple(step ** (calls - k) - 1 for k in range(calls))


def _work(warmup: int, pattern: list[float] | None = None, base: float = 0.001,
          ramp: tuple[float, ...] = _RAMP) -> Callable[[int], float]:
    """Seconds of device work for call i: a slow first call, calls that get faster until they take `base` (`ramp`),
    then one 30 ms hiccup three calls later (or `pattern`, its last value repeated)."""
    hiccup = len(ramp) + 3  # one 30 ms call, once the device is warm (it shares its time with others)

    def work(i: int) -> float:
        if pattern is not None:
            return pattern[min(i, len(pattern) - 1)]
        if i == 0:
            return 0.050  # first call pays for setup
        if i <= len(ramp):
            return base * (1 + ramp[i - 1])  # still coming up to speed
        if i == hiccup:
            return 0.030  # a hiccup among the warm calls
        return base

    return work


def simulated_gpu(warmup: int = 2) -> VirtualDevice:
    """A simulated GPU to try a timer on: a slow first call, calls that get faster for a while, then 1 ms calls with
    one 30 ms hiccup."""
    return VirtualDevice(_work(warmup))


def _run_timer(time_op: Callable, warmup: int, repeats: int, pattern: list[float] | None = None,
               base: float = 0.001, ramp: tuple[float, ...] = _RAMP) -> dict:
    """Run the learner's time_op on a virtual device; what it returned, the device's calls and events."""
    device = VirtualDevice(_work(warmup, pattern, base, ramp))
    with device.patched_clocks(getattr(time_op, "__globals__", {})):
        got = call(time_op, device.launch, device.sync, warmup, repeats,
                   label=f"time_op(fn, sync, warmup={warmup}, repeats={repeats})")
    return {"got": got, "calls": device.calls, "events": device.events[:1000]}


def _expected(warmup: int, repeats: int, base: float = 0.001) -> tuple[float, float]:
    """(median, mean) of `repeats` timed calls on the virtual device once it is warm (the hiccup among them)."""
    timed = [VirtualDevice.LAUNCH_SECONDS + base] * (repeats - 1) + [VirtualDevice.LAUNCH_SECONDS + 0.030]
    return statistics.median(timed), statistics.fmean(timed)


def _while_warming(warmup: int, repeats: int, base: float, ramp: tuple[float, ...] = _RAMP) -> list[float]:
    """The medians a timer reports when its timed calls start before the device is warm: `repeats` calls from each
    call after the warm-up up to the end of the ramp."""
    work = _work(warmup, None, base, ramp)
    return [statistics.median(VirtualDevice.LAUNCH_SECONDS + work(i) for i in range(first, first + repeats))
            for first in range(max(warmup, 1), len(ramp) + 1)]


_TIMER_CASES = ((3, 5), (1, 8), (2, 3), (1, 20))
# seconds of a typical call: each case its own, so no constant passes
_TIMER_BASE = {(3, 5): 0.001, (1, 8): 0.0025, (2, 3): 0.0017, (1, 20): 0.0004}
# How many calls each case's device takes to come up to speed: each its own, so a fixed extra warm-up (a copy test
# passed with measure's body and 10 more untimed calls) fails one; only a timer that notices passes them all. Nor does
# a warm-up fixed as a multiple of repeats (an outside test passed the first two cases with 3 × repeats): the few
# repeats of (2, 3) come with a device that takes 40 calls to come up to speed, longer than any small multiple, and the
# many repeats of (1, 20) with one warm after its first call, where any multiple goes past the calls a timer may spend.
# (2, 3)'s steps are 1.4, not 1.25: at 1.25 some multiple's timed calls took 1000× or 3× a warm one, which the judge
# reads as milliseconds or a total, not as a warm-up (tests/test_lesson01_content.py tries every multiple).
_TIMER_RAMP = {(3, 5): _RAMP, (1, 8): _long_ramp(24), (2, 3): _long_ramp(40, 1.4), (1, 20): ()}


_SPARE_CALLS = 8  # calls a timer may spend, past the device's ramp, seeing that it has stopped getting faster

_COURSE_TIMERS = ("grader.timing.measure", "grader.timing.benchmark_median", "grader.timing.unsynchronized")


def _observe_time_op(time_op: Callable) -> dict:
    require_callable(time_op, "time_op")
    from grader import timing

    shortcuts.reset(*_COURSE_TIMERS)
    timers = {fn: f"grader.timing.{fn.__name__}" for fn in (timing.measure, timing.benchmark_median,
                                                           timing.unsynchronized)}
    # the timers' own code, however reached, and a thread or process of its own, where the watch does not follow
    with shortcuts.watching({**timers, **shortcuts.ELSEWHERE}) as hits:
        runs = [_run_timer(time_op, w, r, base=_TIMER_BASE[(w, r)], ramp=_TIMER_RAMP[(w, r)]) for w, r in _TIMER_CASES]
    return {"runs": runs, "shortcuts": sorted(set(shortcuts.used(*_COURSE_TIMERS)) | set(hits))}


def _judge_time_op(observation: dict) -> None:
    """time_op warms up, synchronizes before every clock read, and returns the median seconds per call."""
    called = observation.get("shortcuts") if isinstance(observation, dict) else None
    elsewhere = [c for c in called or () if c in shortcuts.ELSEWHERE.values()]
    if elsewhere:
        fail(f"your time_op starts {elsewhere[0]}: time fn in the thread the check calls time_op in.")
    if called:
        fail(f"your time_op calls {', '.join(map(str, called[:3]))}: that is the course's own timer, the answer to "
             "this exercise. Write the timer yourself: what must happen before the clock is read, and which of the "
             "calls should count?")
    observation = observation.get("runs", []) if isinstance(observation, dict) else []
    for (warmup, repeats), seen in zip(_TIMER_CASES, observation):
        got, calls, events = seen["got"], seen["calls"], seen["events"]
        median, mean = _expected(warmup, repeats, base=_TIMER_BASE[(warmup, repeats)])
        if not is_number(got):
            fail(f"time_op returned {got!r} ({type(got).__name__}); return the median seconds per call as a float.")
        got = float(got)
        if calls < warmup + repeats:
            fail(
                f"time_op called fn {calls} times for warmup={warmup}, repeats={repeats}; "
                f"it should call it at least {warmup + repeats} times ({warmup} or more untimed, then {repeats} timed)."
            )
        if "clock" not in events:
            fail("time_op never read time.perf_counter() (or another clock from the time module): a timer has to read "
                 "a clock.")
        first_clock = events.index("clock")
        if events[:first_clock].count("call") < warmup:
            fail(
                f"time_op started the clock after only {events[:first_clock].count('call')} call(s), "
                f"but warmup={warmup}: the warm-up calls are the untimed ones, and they come first. "
                "On this simulated GPU, as on a real one, the first call pays for setup; look at what your timer "
                "counted."
            )
        if "sync" not in events:
            fail(
                "your timer never called sync(). fn() only queues the work on this (simulated) GPU and returns at "
                "once, so a clock read then times how fast Python can ask, not how long the device takes."
            )
        if got < 0.5 * median:
            fail(
                "your timer returned far less time per call than this (simulated) GPU's work takes: faster than the "
                "work allows. It calls sync(), but some clock read still comes while the work is queued. Which of "
                "your clock reads does the device's work finish before?"
            )
        if close(got, mean, rel=0.02) and not close(mean, median, rel=0.02):
            fail(
                "time_op returned the mean of the timed calls: one slow call among them (a hiccup, as a busy machine "
                "has) pulled it well above what a typical call takes. Which summary of the calls does one hiccup not "
                "move?"
            )
        if close(got, median * repeats, rel=0.05) or close(got, mean * repeats, rel=0.05):
            fail(f"time_op returned the total over the {repeats} timed calls; the contract is seconds per call.")
        if close(got, median * 1000, rel=0.05):
            fail("time_op returned a thousand times the time per call: milliseconds, not seconds. Return seconds.")
        if not close(got, median, rel=0.05) and any(close(got, m, rel=0.01)
                                                    for m in _while_warming(warmup, repeats, _TIMER_BASE[warmup, repeats],
                                                                            _TIMER_RAMP[warmup, repeats])):
            fail(
                f"time_op(warmup={warmup}, repeats={repeats}) timed calls that were still getting faster: this "
                "simulated GPU was not yet warm when your timed calls began (compare its durations, call by call)."
                + _fixed_in_advance(seen, repeats) + " What tells a timer that the device has come up to speed?"
            )
        if not close(got, median, rel=0.05):
            fail(
                "time_op returned a figure that is not the typical time of one call on this simulated GPU, nor any "
                "of the known mistakes. Print what your timer measured for each call and compare with the work the "
                "device was given (VirtualDevice.durations)."
            )
    if len(observation) != len(_TIMER_CASES):
        fail("the check could not read what time_op did (a recording of the wrong length)")
    for (warmup, repeats), seen in zip(_TIMER_CASES, observation):
        # copy test r4: a fixed 100 extra warm-up calls passed every case. A timer that notices the device is warm
        # stops warming a few calls after the durations stop falling; each call past that is time the user waits.
        if seen["calls"] > warmup + len(_TIMER_RAMP[warmup, repeats]) + repeats + _SPARE_CALLS:
            fail(f"time_op(warmup={warmup}, repeats={repeats}) called fn {seen['calls']} times on a device that was "
                 "warm long before: it went on warming after the calls had stopped getting faster."
                 + _fixed_in_advance(seen, repeats) + " Each extra call is time the user waits; what tells your timer "
                 "it can stop?")


def _fixed_in_advance(seen: dict, repeats: int) -> str:
    """What to add when a timer made every untimed call before it read any clock: its warm-up was a count decided
    before it saw the device (the given warmup, a constant more, a multiple of repeats), not watched."""
    events = seen["events"]
    blind = events[:events.index("clock")].count("call") if "clock" in events else seen["calls"]
    if seen["calls"] - blind > repeats:
        return ""  # it timed calls besides the ones it reports: it looked at the device while warming
    return (" Your timer fixed its warm-up in advance: it made every untimed call before it read a clock, so the "
            "count was decided before it saw this device, and a count that fits one device is too short or too long "
            "for the next. The simulated GPUs of the check come up to speed over different numbers of calls.")


check_time_op = Check("time_op", _observe_time_op, _judge_time_op)


def _observe_timer_on(time_op: Callable, work: list, warmup: int, repeats: int) -> dict:
    return _run_timer(time_op, warmup, repeats, list(work))  # its last value repeated, for a timer that warms up longer


def _judge_timer_on(observation: dict, work: list, warmup: int, repeats: int, want: float, why: str) -> None:
    if not same(observation.get("got"), want, rel=1e-6):
        fail(f"{why} (time_op returned {observation.get('got')!r})")


timer_on = Check("time_op on given work", _observe_timer_on, _judge_timer_on, inputs=("work", "warmup", "repeats"),
                 announce=False)
timer_on.__doc__ = ("Hidden test: time_op on a virtual device whose calls take `work` seconds (the last value repeated); "
                    "returns `want`.")


# --- crossover ------------------------------------------------------------------------------
#
# crossover_size, attainable_flops, bound and linear_forecast are keyed too: their answers are not here, only
# digests (grader.checks._keys); their judges are the instructor's (solutions/judges/lesson01.py, never released).


_SIZES = [64, 128, 256, 512, 1024, 2048]
_CPU = [1e-5, 4e-5, 3e-4, 2e-3, 1.6e-2, 0.13]
_SIMPLE = [3e-5, 6e-5, 1e-4, 3e-4, 1e-3, 6e-3]  # the CPU wins the small sizes, the GPU the large ones
_FLIP = [3e-5, 3e-5, 4e-4, 3e-4, 1e-3, 6e-3]  # the GPU wins, loses, then wins again
_NEVER = [c * 2 for c in _CPU]
_TIE = [c * 2 for c in _CPU[:5]] + [_CPU[5]]  # slower everywhere, equal at the largest size
_ALWAYS = [c / 2 for c in _CPU]
_CROSSOVER_CASES = [(_SIZES, _CPU, gpu) for gpu in (_SIMPLE, _FLIP, _NEVER, _TIE, _ALWAYS)]


def _public_crossover_size(crossover_size: Replay) -> None:
    """What can be said of crossover_size without its answer: a size, or None."""
    for case in _CROSSOVER_CASES:
        got = call(crossover_size, *case)
        if got is not None and (isinstance(got, bool) or not is_number(got)):
            fail(f"crossover_size returned {quote(got)} ({type(got).__name__}); return one of the sizes, or None.")


def _hints_crossover_size(crossover_size: Replay) -> None:
    """An unknown answer, judged on each sweep by what any crossover has to be (no answer is held here): a size of the
    sweep or None; a size at which the GPU is faster; None only where the GPU does not win the largest size."""
    names = ("the sweep where the CPU wins the small sizes and the GPU the large ones",
             "the sweep where the GPU wins, loses, then wins again",
             "the sweep where the GPU is slower at every size",
             "the sweep where the GPU is slower, then as fast at the largest size",
             "the sweep where the GPU is faster at every size")
    for name, case in zip(names, _CROSSOVER_CASES):
        got = call(crossover_size, *case)
        if got is not None and got not in _SIZES:
            fail(f"crossover_size returned {quote(got)} on {name}, which is not one of its sizes: return a size of "
                 "the sweep, or None.")
        sizes, cpu, gpu = case
        if got is not None and not gpu[sizes.index(got)] < cpu[sizes.index(got)]:
            fail(f"crossover_size returned n = {got} on {name}, a size at which the GPU is not faster than the CPU: "
                 "would you send work of that size to the GPU?")
        if got is None and gpu[-1] < cpu[-1]:
            fail(f"crossover_size returned None on {name}, although the GPU is faster at its largest size: is there "
                 "no size from which on the GPU is the right choice?")


check_crossover_size = Keyed(
    "01_crossover", "crossover_size", "crossover_size", _CROSSOVER_CASES,
    public=_public_crossover_size, hints=_hints_crossover_size,
    unknown="crossover_size disagrees with the course on at least one of its five sweeps, and it is not a mistake "
            "the course knows. Section 6 asks what the crossover should be when the GPU wins, loses and wins again; "
            "when the two take the same time; when the GPU wins everywhere, or nowhere: decide each, then try your "
            "function on a small sweep of each kind that you make up.")


# --- roofline -------------------------------------------------------------------------------

_PEAK, _BW = 100e12, 2e12  # a made-up chip: 100 TFLOP/s, 2 TB/s


def _public_attainable_flops(attainable_flops: Replay) -> None:
    for x in (10.0, 1000.0):
        got = call(attainable_flops, x, _PEAK, _BW)
        if not is_number(got):
            fail(f"attainable_flops returned {quote(got)}; return FLOP/s as a float.")


def _hints_attainable_flops(attainable_flops: Replay) -> None:
    """An unknown answer above the chip's peak."""
    for x in (10.0, 1000.0):
        if float(call(attainable_flops, x, _PEAK, _BW)) > _PEAK * (1 + 1e-9):
            fail(f"attainable_flops({x:g} FLOP/byte) on a chip of 100 TFLOP/s returned a rate above the chip's peak: "
                 "can any operation do its arithmetic faster than the chip can?")


check_attainable_flops = Keyed(
    "01_crossover", "attainable_flops", "attainable_flops", [(10.0, _PEAK, _BW), (1000.0, _PEAK, _BW)],
    public=_public_attainable_flops, hints=_hints_attainable_flops,
    unknown="attainable_flops is not the roofline, nor a mistake the course knows: go back to exercise 4's question, "
            "for an operation of F FLOPs at that intensity, and compare your answer at 10 and at 1000 FLOP/byte.")


# The last case is a tie on a chip of powers of two (2^47 FLOP/s, 2^41 bytes/s): the bytes and the arithmetic take
# exactly as long, in any arrangement of the comparison (every product and quotient of powers of two is exact).
_TIE_PEAK, _TIE_BW = 2.0**47, 2.0**41
_BOUND_CASES = [(x, _PEAK, _BW) for x in (10.0, 1000.0, 49.0, 51.0)] + [(_TIE_PEAK / _TIE_BW, _TIE_PEAK, _TIE_BW)]


def _public_bound(bound: Replay) -> None:
    for case in _BOUND_CASES:
        got = call(bound, *case)
        if got not in ("memory", "compute"):
            fail(f"bound returned {quote(got)}; return exactly the string 'memory' or 'compute'.")


check_bound = Keyed(
    "01_crossover", "bound", "bound", _BOUND_CASES, public=_public_bound,
    unknown="bound does not name the limit the roofline names, nor a mistake the course knows: go back to the "
            "comparison you rearranged in section 3, and to its definition of memory-bound.")

# --- predict, then measure: a Linear layer -----------------------------------------------------


_D = 1024
# (batch, d_in, d_out, dtype): square layers, and two whose inputs and outputs differ in width (an MLP's up- and
# down-projection), where a count that takes one width for both is wrong.
_LINEAR_CASES = [(1, _D, _D, torch.float32), (8, _D, _D, torch.float32), (512, _D, _D, torch.float32),
                 (1, _D, _D, torch.bfloat16), (512, _D, _D, torch.bfloat16),
                 (64, _D, 4 * _D, torch.float32), (64, 4 * _D, _D, torch.bfloat16)]
_KEYS = ("intensity", "bound", "seconds_per_sample")


def _linear_args(batch: int, d_in: int, d_out: int, dtype: torch.dtype) -> tuple:
    return (batch, d_in, d_out, dtype, _PEAK, _BW)


def _shown(batch: int, d_in: int, d_out: int, dtype: torch.dtype) -> str:
    return f"linear_forecast(batch={batch}, d_in={d_in}, d_out={d_out}, {str(dtype).removeprefix('torch.')})"


def _public_linear_forecast(linear_forecast: Replay) -> None:
    """What can be said of linear_forecast without its answer: a dict of a number, a verdict and a number."""
    for case in _LINEAR_CASES:
        shown = _shown(*case)
        answer = call(linear_forecast, *_linear_args(*case), label=shown)
        if not isinstance(answer, dict) or set(answer) != set(_KEYS):
            keys = sorted(map(str, answer)) if isinstance(answer, dict) else type(answer).__name__
            fail(f"{shown} returned {keys}; return a dict with exactly the keys 'intensity', 'bound' and "
                 "'seconds_per_sample'.")
        if not is_number(answer["intensity"]):
            fail(f"{shown} gave intensity {quote(answer['intensity'])}; return FLOP per byte as a float.")
        if answer["bound"] not in ("memory", "compute"):
            fail(f"{shown} gave bound {quote(answer['bound'])}; use exactly 'memory' or 'compute'.")
        if not is_number(answer["seconds_per_sample"]):
            fail(f"{shown} gave seconds_per_sample {quote(answer['seconds_per_sample'])}; return seconds as a float.")


def _hints_linear_forecast(linear_forecast: Replay) -> None:
    """An unknown answer: its bound against its own intensity, its dtype."""
    got = {case: call(linear_forecast, *_linear_args(*case), label=_shown(*case)) for case in _LINEAR_CASES}
    verdicts = {}
    for case, answer in got.items():
        verdicts.setdefault(answer["bound"], []).append(float(answer["intensity"]))
    if verdicts.get("memory") and verdicts.get("compute") and max(verdicts["memory"]) > min(verdicts["compute"]):
        fail("linear_forecast calls one layer memory-bound at a higher intensity than another it calls compute-bound, "
             "on the same chip (100 TFLOP/s, 2 TB/s): on one chip, the intensity alone decides. Compare with what "
             "your bound says.")
    for batch in (1, 512):
        f32, bf16 = got[batch, _D, _D, torch.float32], got[batch, _D, _D, torch.bfloat16]
        if close(float(f32["intensity"]), float(bf16["intensity"])):
            fail(f"{_shown(batch, _D, _D, torch.bfloat16)} gave the float32 intensity: the dtype was ignored. An "
                 "element's size depends on its dtype (dtype.itemsize).")


check_linear_forecast = guard(Keyed(
    "01_crossover", "linear_forecast", "linear_forecast", lambda: [_linear_args(*case) for case in _LINEAR_CASES],
    public=_public_linear_forecast, hints=_hints_linear_forecast,
    unknown="linear_forecast is not the roofline's forecast, nor a mistake the course knows: go back to section 8's "
            "count of one call's work and bytes, and to your own intensity, bound and attainable_flops."),
    "linear_forecast", {**_FLOP_COUNTERS, **_BYTE_COUNTERS, **shortcuts.ELSEWHERE}, earlier=_BYTES_EARLIER)


# --- predictions ------------------------------------------------------------------------------
#
# Every prediction is a Prediction (grader.checks._common): its own graded cell, the first guess recorded in
# predictions.json, credit banded on that first guess. COMPUTE_BOUND_N and CROSSOVER_PREDICTION are judged against
# the course's model on datasheet figures; ADD_PREDICTION and LINEAR_PREDICTION predict what this machine will
# measure, and are banded against the model fed with the figures this run measured and printed before the guess
# (grader.predictions.note_measured, frozen with the first guess). A band's message names a kind of mistake, never
# the model's value nor its distance.


class OnThisMachine(Prediction):
    """A prediction about what this run will measure: no first guess is recorded before the run has measured
    the figures (`needs`) the prediction is made from."""

    def __init__(self, *args, needs: tuple[str, ...], where: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.needs, self.where = tuple(needs), where

    def __call__(self, answer, **kwargs) -> float:
        from grader import predictions

        if not predictions.grading() and isinstance(answer, dict) and answer:
            found = predictions.entry(self.lesson, self.name)
            measured = predictions.context(self.lesson)
            if not (found and found.get("first")) and any(k not in measured for k in self.needs):
                fail(f"{self.name} predicts what this machine will measure, from the figures {self.where} prints, and "
                     "this run has not measured them yet. Run that cell first; nothing was recorded.")
        return super().__call__(answer, **kwargs)


def _measured(context: dict, needs: tuple[str, ...]) -> dict | None:
    """The figures `needs` from a first guess's context, positive and finite; None if any is missing."""
    got = {k: context.get(k) for k in needs}
    if all(is_number(v) and math.isfinite(float(v)) and float(v) > 0 for v in got.values()):
        return {k: float(v) for k, v in got.items()}
    return None


def _named(value: float, known: list[tuple[float, str]], within: float = 0.03) -> str | None:
    """The words of the first known mistake `value` matches (within 3%), or None."""
    for target, words in known:
        if target > 0 and abs(value - target) <= within * target:
            return words
    return None


_NO_CONTEXT = ("no measurement of this machine was recorded with your first guess (the cells that measure it had not "
               "run), so the model has nothing to judge it against")


# COMPUTE_BOUND_N: the attention scores S = Q Kᵀ of one head (Q and K are s × SCORES_D, S is s × s and written to
# memory), on the H100: from which s it is compute-bound in fp32, and whether it ever is in bf16. The learner's
# matmul_flops and matmul_bytes price square matmuls only (a copy test looped them to the square question's answer,
# r22): this one asks for the count of a matmul whose inner width stays fixed while the output grows as s².
SCORES_D = 128
_BOUND_CHIP = "H100"
_BOUND_FORMATS = (("fp32", 4), ("bf16", 2))


@course_only()
@sealed(LESSON, "COMPUTE_BOUND_N")
def _scores_bound_from(fmt: str, itemsize: int, d: int = SCORES_D) -> float:
    """Part of COMPUTE_BOUND_N's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "COMPUTE_BOUND_N")
def scores_rows() -> list[dict]:
    """COMPUTE_BOUND_N's reveal: the scores matmul's FLOP per byte at a few lengths, per format, and where it is
    compute-bound on the H100 (course code: called before the first guess, it counts as asking for the answer)."""


@course_only()
@sealed(LESSON, "COMPUTE_BOUND_N")
def _compute_bound_mistake(got: dict) -> str | None:
    """Part of COMPUTE_BOUND_N's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "COMPUTE_BOUND_N")
def _compute_bound_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of COMPUTE_BOUND_N's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "COMPUTE_BOUND_N")
def _compute_bound_final(answer: dict, context: dict) -> str | None:
    """Part of COMPUTE_BOUND_N's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "COMPUTE_BOUND_N")
def _compute_bound_said(context: dict) -> str:
    """Part of COMPUTE_BOUND_N's model or its feedback: sealed (grader.checks._sealed)."""


check_compute_bound_n = Prediction("01_crossover", "COMPUTE_BOUND_N", {"fp32": "number", "bf16 ever": "bool"}, points=1,
                                   band=_compute_bound_band, mistakes=_compute_bound_final, model=_compute_bound_said,
                                   watch=(_scores_bound_from, _compute_bound_mistake, scores_rows,
                                          *triton_counter.launched_markers("matmul", "matmul_kernel")))


# ADD_PREDICTION: the GFLOP/s a large float32 add c = a + b reaches on this machine, predicted from the bandwidth a
# copy of the same size measured on it (printed: "copy_bandwidth", bytes/s) and set beside the matmul's rate; and the
# add on the H100 in bfloat16, from its datasheet: a row of ADD_H100_N broadcast onto an ADD_H100_N² matrix. A learner
# can time this machine's add before guessing (copy test r10); nothing here measures the H100, so that key asks what
# limits an add and what it moves, and the broadcast row asks which elements must cross at all (r24 called three
# equal arrays section 7's copy rule again).
_ADD_NEEDS = ("copy_bandwidth", "matmul_peak")
ADD_H100_N = 8192
ADD_H100_KEY = "H100 bf16 GFLOP/s"


@course_only()
@sealed(LESSON, "ADD_PREDICTION")
def add_intensity() -> float:
    """The model's FLOP per byte of the float32 add c = a + b (course code: called before ADD_PREDICTION's first guess,
    it counts as asking for the answer)."""


@course_only()
@sealed(LESSON, "ADD_PREDICTION")
def _add_model(context: dict) -> float | None:
    """Part of ADD_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ADD_PREDICTION")
def _add_h100_model() -> float:
    """Part of ADD_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ADD_PREDICTION")
def _add_mistake(gflops: float, context: dict) -> str | None:
    """Part of ADD_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ADD_PREDICTION")
def _add_h100_mistake(gflops: float) -> str | None:
    """Part of ADD_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ADD_PREDICTION")
def _add_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of ADD_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ADD_PREDICTION")
def _add_final(answer: dict, context: dict) -> str | None:
    """Part of ADD_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ADD_PREDICTION")
def _add_said(context: dict) -> str:
    """Part of ADD_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


check_add_prediction = OnThisMachine("01_crossover", "ADD_PREDICTION", {"add GFLOP/s": "number", ADD_H100_KEY: "number"},
                                     points=1, band=_add_band, mistakes=_add_final, model=_add_said,
                                     needs=_ADD_NEEDS, where="section 7's copy cell",
                                     watch=(_add_mistake, _add_model, add_intensity, _add_h100_model, _add_h100_mistake,
                                            # r28 read the H100 add's bytes off bias_add_kernel's broadcast row under
                                            # the counter; a prediction watches its own kernel only (r30)
                                            *triton_counter.launched_markers("unfused_bias_gelu", "bias_add_kernel")))




def gpu_fixed_seconds() -> float:
    """The course's modelled fixed cost of one GPU call: host dispatch, kernel launch and synchronize (assumptions)."""
    from grader import specs

    constants = specs.model_constants()
    return sum(constants[f"{name}_seconds"]["value"] for name in ("host_dispatch", "kernel_launch", "sync"))


# the made-up CPU of the crossover prediction, no fixed cost: 200 GFLOP/s, so that the model's answer is none of the
# printed figures (at 100 GFLOP/s it lay within the band of the printed 100, and copy test r28 scored full marks by
# echoing it)
CROSSOVER_CPU_FLOPS = 200e9
CROSSOVER_CHIP = "T4"


@course_only()
@sealed(LESSON, "CROSSOVER_PREDICTION")
def _crossover_n(fixed: float, cpu_flops: float, gpu_flops: float, work_power: int = 3) -> float:
    """Part of CROSSOVER_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "CROSSOVER_PREDICTION")
def crossover_n_at(cpu_flops: float, gpu_flops: float) -> float:
    """The n at which the course's model has a CPU of `cpu_flops` (no fixed cost) and a GPU of `gpu_flops` (with the
    modelled fixed cost) take the same time: the reveal cell's model, for the printed CPU and for this one. Called before
    CROSSOVER_PREDICTION's first guess, it counts as asking for the answer."""


def _crossover_inputs() -> tuple[float, float, float]:
    from grader import specs

    return gpu_fixed_seconds(), CROSSOVER_CPU_FLOPS, specs.chip(CROSSOVER_CHIP).peak("fp32")


@course_only()
@sealed(LESSON, "CROSSOVER_PREDICTION")
def _crossover_mistake(n: float) -> str | None:
    """Part of CROSSOVER_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "CROSSOVER_PREDICTION")
def _crossover_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of CROSSOVER_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "CROSSOVER_PREDICTION")
def _crossover_final(answer: dict, context: dict) -> str | None:
    """Part of CROSSOVER_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "CROSSOVER_PREDICTION")
def _crossover_said(context: dict) -> str:
    """Part of CROSSOVER_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


check_crossover_prediction = Prediction(LESSON, "CROSSOVER_PREDICTION", {"n": "number"}, points=2,
                                        band=_crossover_band, mistakes=_crossover_final, model=_crossover_said,
                                        watch=(_crossover_mistake, _crossover_n, crossover_n_at))


# LINEAR_PREDICTION: how many times batch 1's time per call a batch of 64 takes through a linear_d² float32 Linear on
# this machine, by the roofline fed with this run's measured peak and bandwidth (fixed costs left out). Batch 64, not
# 8: "batch 8 costs about what batch 1 does" is the lesson's slogan, and 64 is where this machine's own balance point
# decides (a copy test read the batch-8 answer off the section's title).
_LINEAR_NEEDS = ("matmul_peak", "copy_bandwidth", "linear_d")
LINEAR_BATCH = 64
LINEAR_KEY = f"batch {LINEAR_BATCH} / batch 1"


@course_only()
@sealed(LESSON, "LINEAR_PREDICTION")
def _linear_ratio_model(context: dict, terms: str = "roofline") -> float | None:
    """Part of LINEAR_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "LINEAR_PREDICTION")
def _linear_mistake(ratio: float, context: dict) -> str | None:
    """Part of LINEAR_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "LINEAR_PREDICTION")
def _linear_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of LINEAR_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "LINEAR_PREDICTION")
def _linear_final(answer: dict, context: dict) -> str | None:
    """Part of LINEAR_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "LINEAR_PREDICTION")
def _linear_said(context: dict) -> str:
    """Part of LINEAR_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


check_linear_prediction = OnThisMachine("01_crossover", "LINEAR_PREDICTION", {LINEAR_KEY: "number"}, points=1,
                                        band=_linear_band, mistakes=_linear_final, model=_linear_said,
                                        needs=_LINEAR_NEEDS, where="section 7", watch=(_linear_mistake, _linear_ratio_model,))

# A later exercise's function answers these predictions once its check passes (copy tests r22 and r25 wrote
# linear_forecast first and read both off it): passing it before the first guess counts as asking for the answer.
answered_by(check_compute_bound_n, check_linear_forecast)
answered_by(check_linear_prediction, check_linear_forecast)
