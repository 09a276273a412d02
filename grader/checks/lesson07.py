"""Checks for lesson 07 (data parallelism): the ring all-reduce model and its fit, DDP's buckets, a hand-written
gradient average, memory per rank under ZeRO, and the pipeline bubble.

average_gradients is run on several simulated ranks at once: one thread per rank, each with its own
replica and its own batch, and an `all_reduce` that sums a tensor in place across the threads (as
`torch.distributed.all_reduce(t)` does across processes). The judge rebuilds the same replicas and
gradients in its own process and compares what each rank ended with against their mean.
"""

from __future__ import annotations

import copy
import functools
import math
import random
import threading
import time
import types
from typing import Any, Callable

import torch
import torch.distributed
from torch import nn

from grader import distributed as _distributed
from grader import memory as _memory
from grader import widgets as _widgets
from grader.checks._common import (Check, Prediction, Raised, Replay, answered_by, call, close, fail, guard, is_number,
                                   record, recorded, require_callable)
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson07.expect
from grader.checks._keys import Keyed, as_floats, outcomes
from grader.notebook import CheckFailed, NotDone
from grader import shortcuts
from grader.checks._sealed import sealed
from grader.shortcuts import course_only

LESSON = "07_data_parallel"  # the lesson's name in the predictions record (grader.predictions)

# --- allreduce_seconds -----------------------------------------------------------------------------


# The ring's cost is what allreduce_seconds asks for: its judge and answer are the instructor's
# (solutions/judges/lesson07.py; a copy test pasted the body of the ring function this module used to hold). The
# course's own models (the fits' synthetic data, ALLREDUCE_PREDICTION) need it for the rank counts they use: sealed.


@course_only()
@sealed(LESSON, "ALLREDUCE_PREDICTION")
def _ring_model(nbytes: float, world: int, latency: float, bandwidth: float) -> float:
    """A ring all-reduce's seconds for the rank counts the course's models use (guarded and watched: it prices
    ALLREDUCE_PREDICTION's answer)."""


_AR_CASES = [
    (1e6, 2, 1e-4, 1e9),  # 2 steps: 0.2 ms latency + 1 ms of bytes
    (8e6, 4, 5e-6, 1e10),
    (4e8, 8, 2e-5, 1.5e11),
    (0.0, 8, 1e-5, 1e9),  # latency only
    (1e9, 16, 0.0, 4.5e11),  # bandwidth only
    (5e6, 1, 1e-4, 1e9),  # one rank: nothing to send
    (1e6, 3, 1e-4, 2e9),
    (0.0, 4, 5e-6, 1e10),  # the second case without its bytes: the hints compare the two (a hint runs recorded cases only)
]


def _public_allreduce_seconds(fn: Replay) -> None:
    """What can be said of allreduce_seconds without its answer: a number of seconds on every case."""
    for case in _AR_CASES:
        value = call(fn, *case)
        if not is_number(value):
            fail(f"allreduce_seconds{case} returned {value!r} ({type(value).__name__}); return a number of seconds.")


def _hints_allreduce_seconds(fn: Replay) -> None:
    """An unknown answer that charges one rank, or that does not grow with the message."""
    one = float(call(fn, 5e6, 1, 1e-4, 1e9))
    if one != 0.0:
        fail(f"allreduce_seconds(5e6, world=1, ...) returned {one!r}: with one rank there is nobody to exchange "
             "gradients with, so the all-reduce costs nothing.")
    if not float(call(fn, 8e6, 4, 5e-6, 1e10)) > float(call(fn, 0.0, 4, 5e-6, 1e10)):
        fail("allreduce_seconds(8e6, 4, 5e-6, 1e10) is no more than for a message of 0 bytes: the bytes take time too.")


check_allreduce_seconds = guard(Keyed(
    "07_data_parallel", "allreduce_seconds", "allreduce_seconds", _AR_CASES, floats=True,
    public=_public_allreduce_seconds, hints=_hints_allreduce_seconds,
    unknown="allreduce_seconds is not the ring's time, nor a mistake the course knows. Count the steps of the ring's "
            "two phases (each waits one latency) and the bytes one rank sends in them (section 2), and check it on "
            "every case: one rank, no bytes, no latency."),
    "allreduce_seconds", {_ring_model: "grader.checks.lesson07._ring_model"},
    # copy test r22 priced rings of 2 to 16 ranks with _synthetic_timings (latency 1 and no bytes, then the reverse) in a
    # cell of its own and read the step count and the share off them: a call before the check passed counts
    earlier=("grader.checks.lesson07._ring_model",))


# --- fit_latency_bandwidth -------------------------------------------------------------------------


# private: the ring model's times for any latency and bandwidth, which copy test r23 read the step count and share off
# in a separate process (the earlier= watch sees only this kernel)
def _synthetic_timings(world: int, latency: float, bandwidth: float, seed: int | None,
                       sigma: float = 0.05, repeats: int = 1) -> tuple[list[int], list[float]]:
    """Message sizes 256 B .. 256 MiB, each `repeats` times, and ring-model times with log-normal noise of `sigma`
    (seed None: no noise)."""
    rng = random.Random(seed)
    nbytes = [2**k for k in range(8, 29) for _ in range(repeats)]
    seconds = [_ring_model(x, world, latency, bandwidth) * (1.0 if seed is None else math.exp(rng.gauss(0.0, sigma)))
               for x in nbytes]
    return nbytes, seconds


# The visible check's cases are drawn afresh every run (os.urandom): no latency or bandwidth they are made with is in
# this package. A fixed table of them was (copy test: a spy fit saved the check's noise-free times, and with the table's
# latency and bandwidth two points per case gave the ring's step counts and share, allreduce_seconds' answer).
# _FIT_CLEAN noise-free cases judge the fit exactly; _FIT_NOISY cases with 5% noise, each size _FIT_REPEATS times, judge
# it within the noise: enough points that a right fit lands inside the tolerances on every draw (tests/
# test_lesson07_content.py draws thousands), and enough cases that a fit which lands inside them only by luck (two end
# points: about two cases in three) does not pass them all.
_FIT_CLEAN, _FIT_NOISY, _FIT_REPEATS, _FIT_SIGMA = 3, 40, 6, 0.05
_FIT_WORLDS = (2, 4, 8)
_FIT_LATENCY = (15e-6, 300e-6)  # s: the draws' range
_FIT_BANDWIDTH = (1e9, 5e10)  # B/s
_FIT_CROSSOVER = (1e5, 4e6)  # bytes where the latency and the bandwidth terms are equal: both show in the sizes


def _fit_truth(index: int, world: int, latency: float, bandwidth: float, seed: int | None) -> bool:
    """Whether [world, latency, bandwidth, seed] can be case `index` of a draw (an observation's are checked: class
    grading judges what the sandbox sends back)."""
    crossover = latency * bandwidth * world
    return (world == _FIT_WORLDS[index % len(_FIT_WORLDS)] and _FIT_LATENCY[0] <= latency <= _FIT_LATENCY[1]
            and _FIT_BANDWIDTH[0] <= bandwidth <= _FIT_BANDWIDTH[1]
            and _FIT_CROSSOVER[0] <= crossover <= _FIT_CROSSOVER[1]
            and (seed is None if index < _FIT_CLEAN else type(seed) is int and 0 <= seed < 2**64))


def _draw_fits() -> list[list]:
    """The check's cases, [world, latency s, bandwidth B/s, noise seed or None], drawn now from os.urandom."""
    draw = random.SystemRandom()
    cases = []
    for index in range(_FIT_CLEAN + _FIT_NOISY):
        world = _FIT_WORLDS[index % len(_FIT_WORLDS)]
        while True:
            latency = 10 ** draw.uniform(math.log10(_FIT_LATENCY[0]), math.log10(_FIT_LATENCY[1]))
            bandwidth = 10 ** draw.uniform(math.log10(_FIT_BANDWIDTH[0]), math.log10(_FIT_BANDWIDTH[1]))
            seed = None if index < _FIT_CLEAN else draw.getrandbits(64)
            if _fit_truth(index, world, latency, bandwidth, seed):
                break
        cases.append([world, latency, bandwidth, seed])
    return cases


def _fit_case(world: int, latency: float, bandwidth: float, seed: int | None, repeats: int = 1) -> tuple:
    """fit_latency_bandwidth's arguments for data made with these values: (nbytes, seconds, world)."""
    return (*_synthetic_timings(world, latency, bandwidth, seed, _FIT_SIGMA, repeats), world)


def _drawn_case(world: int, latency: float, bandwidth: float, seed: int | None) -> tuple:
    return _fit_case(world, latency, bandwidth, seed, 1 if seed is None else _FIT_REPEATS)


def _fit_label(world: int, seed: int | None) -> str:
    return f"(..., world={world})" + (" on noise-free data" if seed is None else " on data with 5% noise")


def _as_pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(is_number(v) for v in value):
        return float(value[0]), float(value[1])
    return None


def _lost_intercept(label: str) -> None:
    fail(f"fit_latency_bandwidth{label} returned a latency of next to nothing (under 1% of the data's): the intercept "
         "was lost to rounding. Was the fit done in float32 (torch.tensor's default)? With sizes of hundreds of "
         "megabytes beside times of microseconds, float32's 7 digits cannot hold the small intercept next to the large "
         "slope term. "
         "Work in float64 (torch.float64, or plain Python floats, or np.polyfit, which computes in float64).")


@sealed(LESSON)
def _judge_fit_one(got: Any, world: int, latency: float, bandwidth: float, noisy: bool, label: str,
                   weights: Callable[[float, float, float, float], None] | None = None) -> None:
    """A fit judged against the latency and bandwidth its data were made with (the inputs, not the fit's answer);
    `weights(lat, bw, lat_tol, bw_tol)` tells a wrongly weighted fit (_fit_weighting)."""


@sealed(LESSON)
def _fit_weighting(nbytes: list, seconds: list, world: int, latency: float, bandwidth: float,
                   label: str) -> Callable[[float, float, float, float], None]:
    """_judge_fit_one's `weights` for these noisy data: fails a fit that is one of the wrongly weighted lines of them,
    even where the noise of this draw left it inside the tolerances (it computes only the wrong ones). On noise-free
    data every weighting gives the same line: pass no `weights` there."""


def _observe_fit(fn: Callable) -> dict:
    """fit_latency_bandwidth on data made with latencies and bandwidths drawn just now (_draw_fits)."""
    cases = _draw_fits()
    return {"cases": cases, "recording": record(fn, "fit_latency_bandwidth", [_drawn_case(*c) for c in cases])}


def _drawn_truths(observation: Any) -> list[tuple]:
    """The observation's drawn cases, each checked against what a draw can be, before any data are made from them."""
    cases = observation.get("cases") if isinstance(observation, dict) else None
    if not isinstance(cases, list) or len(cases) != _FIT_CLEAN + _FIT_NOISY:
        fail("the check could not read what your fit_latency_bandwidth returned")
    out = []
    for index, case in enumerate(cases):
        if not (isinstance(case, list) and len(case) == 4 and type(case[0]) is int
                and all(type(v) is float for v in case[1:3])):
            fail("the check could not read what your fit_latency_bandwidth returned")
        if not _fit_truth(index, *case):
            fail("the check could not read what your fit_latency_bandwidth returned")
        out.append(tuple(case))
    return out


def _judge_fit_drawn(observation: Any) -> None:
    """Each drawn case's fit against the latency and bandwidth it was made with: the public checks on every case first
    (a pair of numbers; an intercept lost to float32 rounding), then each case, a wrongly weighted line named."""
    truths = _drawn_truths(observation)
    replay = Replay(observation.get("recording"))
    data = [_drawn_case(*truth) for truth in truths]
    for (world, latency, _, seed), args in zip(truths, data):
        got = _as_pair(call(replay, *args, label=f"fit_latency_bandwidth{_fit_label(world, seed)}"))
        if got is None:
            fail(f"fit_latency_bandwidth{_fit_label(world, seed)} returned {call(replay, *args)!r}; return a tuple "
                 "(latency in seconds, bandwidth in bytes/s).")
    weights = [None if seed is None else _fit_weighting(args[0], args[1], world, latency, bandwidth,
                                                        _fit_label(world, seed))
               for (world, latency, bandwidth, seed), args in zip(truths, data)]
    for tell, args in zip(weights, data):  # a wrongly weighted line first: its latency may land near 0 by chance
        if tell is not None:
            tell(*_as_pair(call(replay, *args)), 0.2, 0.05)
    for (world, latency, _, seed), args in zip(truths, data):
        if abs(_as_pair(call(replay, *args))[0]) < 0.01 * latency:  # judged on the data's latency, an input
            _lost_intercept(_fit_label(world, seed))
    for (world, latency, bandwidth, seed), args, tell in zip(truths, data, weights):
        _judge_fit_one(call(replay, *args), world, latency, bandwidth, seed is not None, _fit_label(world, seed),
                       weights=tell)


check_fit_latency_bandwidth = Check("fit_latency_bandwidth", _observe_fit, _judge_fit_drawn)


def _observe_fit_on(fn: Callable, world: int, latency: float, bandwidth: float, seed: int) -> dict:
    return record(fn, "fit_latency_bandwidth", [_fit_case(world, latency, bandwidth, seed)])


def _judge_fit_on(observation: dict, world: int, latency: float, bandwidth: float, seed: int, why: str) -> None:
    try:
        got = Replay(observation)(*_fit_case(world, latency, bandwidth, seed))
        _judge_fit_one(got, world, latency, bandwidth, True, f"(..., world={world})")
    except (CheckFailed, Raised) as exc:
        fail(f"{why}: {exc}")


fit_on = Check("fit_latency_bandwidth on other data", _observe_fit_on, _judge_fit_on,
               inputs=("world", "latency", "bandwidth", "seed"), announce=False)
fit_on.__doc__ = "Hidden test: the fit recovers `latency` and `bandwidth` from _synthetic_timings(world, latency, bandwidth, seed)."


# --- bucket_plan -----------------------------------------------------------------------------------

_PLAIN = None  # forward_order of a plain stack: the parameters are used in registration order
_BUCKET_BASE = [  # (param_bytes, forward_order or _PLAIN, cap, first_cap); what DDP makes of them is not here
    ([100, 100, 100, 100, 100, 100], _PLAIN, 250, 250),
    ([100, 100, 100, 100], _PLAIN, 200, 200),  # a bucket reaches the cap exactly
    ([10, 1000, 10, 10], _PLAIN, 100, 100),  # a parameter larger than the cap
    ([40, 30, 500, 20], _PLAIN, 100, 100),
    ([64, 4, 256, 16, 1024, 8], _PLAIN, 400, 400),
    ([], _PLAIN, 100, 10),
    ([7], _PLAIN, 1000, 1000),
    ([100] * 8, _PLAIN, 300, 100),  # a small first bucket
    ([50, 50, 400, 50, 50], _PLAIN, 600, 120),
    # registered head first, used last: forward uses parameters 4, 5, then 2, 3, then 0, 1
    ([1000, 10, 500, 5, 200, 2], [4, 5, 2, 3, 0, 1], 600, 300),
    ([300, 3, 300, 3, 300, 3], [2, 3, 4, 5, 0, 1], 300, 300),
    ([8, 8, 8, 8], [3, 1, 2, 0], 16, 8),  # one tensor at a time in a shuffled order
]


def _cases_with_order() -> list[tuple]:
    return [(sizes, list(range(len(sizes))) if order is _PLAIN else list(order), cap, first)
            for sizes, order, cap, first in _BUCKET_BASE]


_BUCKET_CASES = _cases_with_order()


def _as_buckets(value: Any) -> list[list[int]] | None:
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for bucket in value:
        if not isinstance(bucket, (list, tuple)) or not all(type(i) is int for i in bucket):
            return None
        out.append(list(bucket))
    return out


def _public_bucket_plan(fn: Replay) -> None:
    """What can be said of bucket_plan without its answer: a list of buckets of parameter indices, each index once."""
    for case in _BUCKET_CASES:
        value = call(fn, *case)
        if _as_buckets(value) is None:
            fail(f"bucket_plan{tuple(case)} returned {value!r}; return a list of buckets, each a list of parameter "
                 "indices (ints).")


def _hints_bucket_plan(fn: Replay) -> None:
    """An unknown plan that drops, repeats or splits a parameter."""
    for sizes, forward, cap, first_cap in _BUCKET_CASES:
        plan = _as_buckets(call(fn, sizes, forward, cap, first_cap))
        if sorted(j for b in plan for j in b) != list(range(len(sizes))):
            fail(f"bucket_plan({sizes}, forward_order={forward}, cap={cap}, first_cap={first_cap}) returned {plan}; "
                 "every parameter index must appear exactly once (a bucket holds whole parameters: DDP never splits "
                 "one).")


# bucket_plan's answers are not here: it is judged by digests made from the instructor's judge
# (solutions/judges/lesson07.py), as bytes_per_rank and bubble_fraction are.
# DDP's own bucketer answers bucket_plan (a copy test passed with it). From grader.distributed's import on, torch's
# attributes hold a Python stand-in (course_only) of the C++ function: a guard sees its code run however it is called
# (directly, through functools.partial or operator.call: a copy test hid the C++ one from the profiler that way), and
# a call from a cell before the check passed counts (earlier=). The C++ function saved before the stand-in was put in
# place is looked for among what the learner's function can reach (its defaults, closure and the globals it names).
# A torch built without distributed support has none.
_DDP_BUCKETER, _DDP_STAND_IN = _distributed._DDP_BUCKETER, _distributed._DDP_STAND_IN
_BUCKETER_NAME = _distributed.BUCKETER_NAME


def _reaches(value: Any, target: Any, depth: int = 4, seen: set | None = None) -> bool:
    """Whether `value` is `target` or holds it: in a functools.partial, a bound method, a container, a function's
    defaults or closure, or the globals its code names (a few levels deep)."""
    seen = set() if seen is None else seen
    if value is target:
        return True
    if depth <= 0 or id(value) in seen:
        return False
    seen.add(id(value))
    inner: list = []
    if isinstance(value, functools.partial):
        inner = [value.func, *value.args, *value.keywords.values()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        inner = list(value)[:64]
    elif isinstance(value, dict):
        inner = list(value.values())[:64]
    elif getattr(value, "__self__", None) is not None and getattr(value, "__func__", None) is not None:
        inner = [value.__func__, value.__self__]
    elif isinstance(value, types.FunctionType):
        code = value.__code__
        names = set(code.co_names)
        for const in code.co_consts:  # functions defined inside it
            if isinstance(const, types.CodeType):
                names.update(const.co_names)
        if "_DDP_BUCKETER" in names:  # the course's own reference to the C++ bucketer, read when it runs
            return True
        inner = [*(value.__defaults__ or ()), *(value.__kwdefaults__ or {}).values(),
                 *(c.cell_contents for c in (value.__closure__ or ()) if _filled(c)),
                 *(value.__globals__[n] for n in names if n in value.__globals__)]
    return any(_reaches(v, target, depth - 1, seen) for v in inner)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _observe_bucket_plan(fn: Callable) -> dict:
    if _DDP_BUCKETER is not None and _reaches(fn, _DDP_BUCKETER):
        return {"holds the bucketer": True}
    return record(fn, "bucket_plan", _BUCKET_CASES)


class _BucketKeyed(Keyed):
    """Keyed, except that a bucket_plan holding DDP's C++ bucketer (saved before the stand-in) is named first."""

    def _judge(self, observation: Any, **kwargs: Any) -> None:
        if isinstance(observation, dict) and observation.get("holds the bucketer"):
            fail(shortcuts.message("bucket_plan", _BUCKETER_NAME))
        super()._judge(observation, **kwargs)


check_bucket_plan = guard(_BucketKeyed(
    "07_data_parallel", "bucket_plan", "bucket_plan", _BUCKET_CASES, observe=_observe_bucket_plan,
    public=_public_bucket_plan,
    hints=_hints_bucket_plan,
    unknown="bucket_plan does not make DDP's buckets, nor a mistake the course knows. Go back to section 5 (when a "
            "gradient is ready, when a bucket may go out) and walk one of the check's cases by hand, "
            "bucket_plan([300, 3, 300, 3, 300, 3], [2, 3, 4, 5, 0, 1], 300, 300) say, before your code does."),
    "bucket_plan", {**({_DDP_BUCKETER: _BUCKETER_NAME, _DDP_STAND_IN: _BUCKETER_NAME} if _DDP_BUCKETER is not None
                       else {}), **shortcuts.ELSEWHERE}, earlier=(_BUCKETER_NAME,) if _DDP_BUCKETER is not None else ())


# --- average_gradients -----------------------------------------------------------------------------

WAIT_S = 20.0  # how long a simulated rank waits for the others at an all-reduce


def replicas(world: int, seed: int, frozen: bool = False, mixed: bool = False) -> list[nn.Module]:
    """`world` identical copies of a small model, each with the gradients of its own batch (the same in every process).

    mixed: the output layer's weights and gradients are bfloat16, the rest float32 (as a model that keeps a part in
    low precision has them)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.LayerNorm(6), nn.Linear(6, 2))
    if frozen:
        model[0].requires_grad_(False)  # a frozen layer: its parameters have no gradient (p.grad is None)
    out = []
    for rank in range(world):
        replica = copy.deepcopy(model)
        gen = torch.Generator().manual_seed(1000 * seed + rank)
        x, y = torch.randn(5, 4, generator=gen), torch.randn(5, 2, generator=gen)
        nn.functional.mse_loss(replica(x), y).backward()
        if mixed:
            replica[3].to(torch.bfloat16)  # its parameters and their gradients
        out.append(replica)
    return out


class _Group:
    """A simulated process group of `world` threads: all_reduce sums a tensor in place across them."""

    def __init__(self, world: int):
        self.world = world
        self.barrier = threading.Barrier(world, timeout=WAIT_S)
        self.lock = threading.Lock()
        self.slots: dict[int, dict[int, torch.Tensor]] = {}

    def all_reduce_for(self, rank: int, model: nn.Module) -> tuple[Callable, list]:
        calls: list = []
        params = list(model.parameters())

        def all_reduce(tensor, op=None, group=None, async_op=False):
            """Sum `tensor` in place across the simulated ranks, as torch.distributed.all_reduce(tensor) does."""
            if (op is not None and "SUM" not in str(op).upper()) or group is not None or async_op:
                raise TypeError("the check's all_reduce sums one tensor in place across the ranks, like "
                                "dist.all_reduce(tensor) with its default op (SUM; gloo has no AVG); call all_reduce(tensor)")
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"all_reduce was given {type(tensor).__name__}, not a tensor"
                                + (" (a parameter whose .grad is None?)" if tensor is None else ""))
            calls.append(_kind(tensor, params))
            k = len(calls) - 1
            with self.lock:
                self.slots.setdefault(k, {})[rank] = tensor
            self.barrier.wait()
            parts = self.slots[k]
            if len(parts) != self.world or any(p.shape != tensor.shape for p in parts.values()):
                raise RuntimeError("the ranks' all_reduce calls did not line up: each rank must reduce the same tensors "
                                   "in the same order")
            total = parts[0].detach().clone()
            for r in range(1, self.world):
                total += parts[r].detach()
            self.barrier.wait()  # everyone has read every part before anyone writes
            with torch.no_grad():
                tensor.copy_(total)
            return None

        return all_reduce, calls


def _kind(tensor: torch.Tensor, params: list[torch.Tensor]) -> list:
    """Which tensor all_reduce got, and how many bytes it sends: ['grad', i, bytes], ['data', i, bytes] (the weights) or
    ['copy', -1, bytes]."""
    ptr, nbytes = tensor.data_ptr(), int(tensor.numel() * tensor.element_size())
    for i, p in enumerate(params):
        if p.grad is not None and ptr == p.grad.data_ptr() and tensor.shape == p.grad.shape:
            return ["grad", i, nbytes]
        if ptr == p.data_ptr() and tensor.shape == p.shape:
            return ["data", i, nbytes]
    return ["copy", -1, nbytes]


def _observe_average(fn: Callable, world: int = 3, seed: int = 0, frozen: bool = False, mixed: bool = False) -> dict:
    require_callable(fn, "average_gradients")
    world, seed = int(world), int(seed)
    models = replicas(world, seed, bool(frozen), bool(mixed))
    group = _Group(world)
    results: list[dict] = [{} for _ in range(world)]

    def run(rank: int) -> None:
        all_reduce, calls = group.all_reduce_for(rank, models[rank])
        results[rank]["calls"] = calls
        try:
            returned = fn(models[rank], world, all_reduce)
            results[rank]["returned"] = type(returned).__name__
        except NotImplementedError:
            results[rank]["not_done"] = True
            group.barrier.abort()
        except threading.BrokenBarrierError:
            results[rank]["broken"] = True
        except BaseException as exc:  # noqa: BLE001  a learner's crash on one rank: the others are released
            results[rank]["raised"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            group.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,), daemon=True, name=f"rank {r}") for r in range(world)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + WAIT_S * 1.5  # one deadline for all ranks: a cell's grading time is limited
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0))
    if any(r.get("not_done") for r in results):
        raise NotDone("average_gradients")
    if any(t.is_alive() for t in threads):
        return {"hung": True}
    for rank, model in enumerate(models):
        results[rank]["grads"] = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
        results[rank]["weights"] = [p.detach().clone() for p in model.parameters()]
    return {"ranks": results}


def _judge_average(observation: dict, world: int = 3, seed: int = 0, frozen: bool = False, why: str = "",
                   mixed: bool = False) -> None:
    """average_gradients: every rank ends with the mean of the ranks' gradients, in p.grad, weights untouched."""
    prefix = f"{why}: " if why else ""
    label = (f"average_gradients on {world} ranks" + (" (first layer frozen)" if frozen else "")
             + (" (output layer in bfloat16)" if mixed else ""))
    if observation.get("hung"):
        fail(f"{prefix}{label} did not finish within {WAIT_S * 1.5:.0f} s on every rank: a loop that never ends, or a "
             "rank waiting for something the others never do. (In a notebook, restart the kernel: the stuck ranks are threads "
             "that go on running.)")
    ranks = observation.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != world:
        fail(f"{prefix}the check could not read what {label} did")
    for rank, r in enumerate(ranks):
        if r.get("raised"):
            hint = (" A parameter with no gradient (requires_grad=False, so p.grad is None) has nothing to average: "
                    "skip it." if frozen and "None" in r["raised"] else "")
            if "process group" in r["raised"]:
                hint = (" Call the all_reduce your function was given, not torch.distributed.all_reduce: the check "
                        "passes one that sums across its simulated ranks, and the lesson passes dist.all_reduce.")
            fail(f"{prefix}{label}: rank {rank} raised {r['raised']}.{hint}")
    for rank, r in enumerate(ranks):
        if r.get("broken"):
            fail(f"{prefix}{label}: the ranks' all_reduce calls did not line up (rank {rank} was left waiting). Every "
                 "rank must call all_reduce on the same tensors in the same order.")
    reference = replicas(world, seed, frozen, mixed)
    names = [name for name, _ in reference[0].named_parameters()]
    before = [[None if p.grad is None else p.grad for p in m.parameters()] for m in reference]
    mean = []
    for i in range(len(names)):
        if before[0][i] is None:
            mean.append(None)
            continue
        total = before[0][i].clone()
        for rank in range(1, world):
            total += before[rank][i]
        mean.append(total / world)
    weights = [p.detach() for p in reference[0].parameters()]
    r0 = ranks[0]
    kinds = [c[0] for c in r0.get("calls", []) if isinstance(c, list) and c]
    if "data" in kinds:
        fail(f"{prefix}{label} passed the weights (p or p.data) to all_reduce. Data parallelism averages the "
             "gradients, p.grad; the weights are already the same on every rank.")
    got = r0.get("grads")
    if not isinstance(got, list) or len(got) != len(names):
        fail(f"{prefix}the check could not read the gradients {label} left")
    for rank, r in enumerate(ranks):
        if any(isinstance(w, torch.Tensor) and not torch.equal(w, w0) for w, w0 in zip(r.get("weights", []), weights)):
            fail(f"{prefix}{label} changed the weights on rank {rank}. It should only average the gradients; the "
                 "optimizer's step comes after it.")
    if not kinds:
        fail(f"{prefix}{label} never called all_reduce: each rank's gradients stayed its own.")
    frozen_idx = [i for i, m in enumerate(mean) if m is None]
    for i in frozen_idx:
        if got[i] is not None:
            fail(f"{prefix}{label} gave {names[i]} (frozen, requires_grad=False) a gradient; leave p.grad None where "
                 "it is None.")

    def matches(scale: float) -> list[bool]:
        def near(g: torch.Tensor, m: torch.Tensor) -> bool:  # a bfloat16 mean may be rounded once more or less
            low = m.dtype in (torch.bfloat16, torch.float16)
            return g.dtype == m.dtype and torch.allclose(g.float(), (m * scale).float(), rtol=2e-2 if low else 1e-5,
                                                         atol=1e-3 if low else 1e-7)
        return [m is None or (isinstance(g, torch.Tensor) and g.shape == m.shape and near(g, m)) for g, m in zip(got, mean)]

    ok = matches(1.0)
    if all(ok):
        for rank, r in enumerate(ranks[1:], start=1):
            other = r.get("grads")
            if not isinstance(other, list) or not all(
                    (a is None and b is None) or (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b))
                    for a, b in zip(other, got)):
                fail(f"{prefix}{label}: rank {rank} ended with other gradients than rank 0; every rank must end with "
                     "the same average.")
        return
    if all(matches(float(world))):
        fail(f"{prefix}{label} left every gradient {world} times the mean: all_reduce sums across the ranks; divide "
             f"by world_size ({world}) to get the average.")
    if all(matches(1.0 / world)):
        fail(f"{prefix}{label} left every gradient at the mean divided by {world}: you divided by world_size twice "
             "(before and after the all_reduce, or an average op and a division).")
    unchanged = [m is None or (isinstance(g, torch.Tensor) and torch.equal(g, b)) for g, m, b in zip(got, mean, before[0])]
    if all(unchanged) and "copy" in kinds:
        fail(f"{prefix}{label} all-reduced a copy of the gradients and never wrote the result back: p.grad is "
             "unchanged. A tensor made from the gradients (torch.cat, flatten of several) is new memory: each "
             "gradient's part of the average has to go back into its own p.grad.")
    if all(unchanged):
        fail(f"{prefix}{label} left every rank's gradients as they were: nothing was averaged.")
    missed = [names[i] for i, good in enumerate(ok) if not good and unchanged[i]]
    if missed and len(missed) < len(names):
        fail(f"{prefix}{label} averaged some parameters but not {', '.join(missed)}: iterate over all of "
             "model.parameters() (weights and biases, every layer).")
    bad = next(i for i, good in enumerate(ok) if not good)
    fail(f"{prefix}{label}: rank 0's gradient of {names[bad]} is not the mean of the {world} ranks' gradients, though "
         "others are right. If you packed the gradients into one tensor, check where each one's part starts and ends "
         "when you unpack it.")


def _judge_one_message(observation: dict, world: int, frozen: bool, why: str = "", mixed: bool = False) -> None:
    """The average goes out in as few all_reduces as the gradients' dtypes allow (every call pays the latency once),
    and sends no more bytes than the gradients hold (every byte pays the bandwidth)."""
    prefix = f"{why}: " if why else ""
    label = f"average_gradients on {world} ranks" + (" (output layer in bfloat16)" if mixed else "")
    rank = (observation.get("ranks") or [{}])[0]
    calls = [c for c in rank.get("calls", []) if isinstance(c, list) and len(c) == 3]
    grads = [g for g in rank.get("grads") or [] if isinstance(g, torch.Tensor)]
    kinds = {g.dtype for g in grads}
    if len(calls) > len(kinds):
        each = "once per tensor" if len(calls) == len(grads) else f"for gradients of {len(kinds)} dtype(s)"
        fail(f"{prefix}{label} called all_reduce {len(calls)} times, {each}: each call pays the all-reduce's latency "
             "(section 3), so a model of hundreds of parameters pays it hundreds of times.")
    sent, held = sum(int(c[2]) for c in calls), sum(g.numel() * g.element_size() for g in grads)
    if sent > held:
        fail(f"{prefix}{label} sent more bytes through all_reduce than its gradients hold: some of them "
             "travelled in a wider dtype than they are kept in (a tensor has one dtype, and torch.cat of several "
             "gives the widest), and every byte pays the bandwidth (section 3).")


_AVERAGE_RUNS = [(3, 0, False, False), (2, 1, True, False), (3, 2, False, True)]  # (world, seed, frozen, output bf16)


def _observe_average_runs(fn: Callable) -> list:
    seen = []
    for run in _AVERAGE_RUNS:
        seen.append(_observe_average(fn, *run))
        if seen[-1].get("hung"):  # a function that never returns would hang the next run too: the cell has a time limit
            return seen + [{"hung": True}] * (len(_AVERAGE_RUNS) - len(seen))
    return seen


def _judge_average_runs(observation: list) -> None:
    if not isinstance(observation, list) or len(observation) != len(_AVERAGE_RUNS):
        fail("the check could not read what average_gradients did")
    for seen, (world, seed, frozen, mixed) in zip(observation, _AVERAGE_RUNS):
        _judge_average(seen, world, seed, frozen, mixed=mixed)
        _judge_one_message(seen, world, frozen, mixed=mixed)


check_average_gradients = Check("average_gradients", _observe_average_runs, _judge_average_runs)


def _judge_average_on(observation: dict, world: int = 3, seed: int = 0, frozen: bool = False, mixed: bool = False,
                      why: str = "") -> None:
    _judge_average(observation, world, seed, frozen, why, mixed=mixed)
    _judge_one_message(observation, world, frozen, why, mixed=mixed)


average_on = Check("average_gradients on other ranks", _observe_average, _judge_average_on,
                   inputs=("world", "seed", "frozen", "mixed"), announce=False)
average_on.__doc__ = "Hidden test: average_gradients on `world` simulated ranks of replicas(world, seed, frozen, mixed)."


# --- bytes_per_rank --------------------------------------------------------------------------------

STAGES = ("ddp", "zero1", "zero2", "zero3")
LAYOUTS = ("deepspeed", "autocast")  # DeepSpeed's mixed-precision Adam (the ZeRO paper's); torch autocast with Adam
_PSI = 10**9
_MEM_CASES = ([(_PSI, 8, s, "deepspeed") for s in STAGES] + [(_PSI, 1, s, "deepspeed") for s in STAGES]
              + [(3 * 10**8, 4, "zero2", "deepspeed")] + [(_PSI, 8, s, "autocast") for s in STAGES]
              + [(_PSI, 1, "zero3", "autocast"), (3 * 10**8, 4, "zero1", "autocast")])


# The answers of bytes_per_rank and bubble_fraction are not here: each is judged by digests (grader.checks._keys),
# made by scripts/build_keys.py from the instructor's judges (solutions/judges/lesson07.py, never released).


def _public_bytes_per_rank(fn: Replay) -> None:
    """What can be said of bytes_per_rank without its answer: a number of bytes for every case."""
    for case in _MEM_CASES:
        value = call(fn, *case)
        if not is_number(value):
            fail(f"bytes_per_rank{case} returned {value!r} ({type(value).__name__}); return a number of bytes.")


def _hints_bytes_per_rank(fn: Replay) -> None:
    """An unknown answer that shares something with one rank, orders the stages wrongly or ignores the layout."""
    for stage in STAGES:
        if not close(float(call(fn, _PSI, 1, stage, "deepspeed")), float(call(fn, _PSI, 1, "ddp", "deepspeed")), 1e-9):
            fail(f"bytes_per_rank(1e9, 1, {stage!r}, 'deepspeed') differs from DDP's: with one rank there is nobody to "
                 "share with, so every stage keeps everything.")
    for layout in LAYOUTS:
        per_stage = [float(call(fn, _PSI, 8, stage, layout)) for stage in STAGES]
        if any(later >= earlier for earlier, later in zip(per_stage, per_stage[1:])):
            fail(f"bytes_per_rank(1e9, 8, stage, {layout!r}) does not fall from one ZeRO stage to the next: each stage "
                 "shards one more kind of tensor among the ranks.")
    if all(close(float(call(fn, _PSI, 8, s, "autocast")), float(call(fn, _PSI, 8, s, "deepspeed")), 1e-9) for s in STAGES):
        fail("bytes_per_rank gives the same bytes for both layouts at every stage: the two layouts keep different "
             "tensors, in different dtypes. Which does each keep per parameter?")


check_bytes_per_rank = guard(Keyed(
    "07_data_parallel", "bytes_per_rank", "bytes_per_rank", _MEM_CASES,
    floats=True, public=_public_bytes_per_rank,
    hints=_hints_bytes_per_rank,
    unknown="bytes_per_rank is not what the layout keeps per rank, nor a mistake the course knows. For each layout, "
            "list the tensors training keeps per parameter and what each costs in its dtype (DeepSpeed's in section 6; "
            "autocast's from what autocast casts and what it leaves alone), then which kinds each stage divides among "
            "the ranks."),
    # lesson 04's measured layouts answer the bytes per parameter (a copy test built bytes_per_rank on training_terms)
    # (copy test r27 read them off in a cell of its own, before writing the function: a call before the check passed
    # counts too)
    "bytes_per_rank", {_memory.training_terms: "grader.memory.training_terms",
                       _memory.probe_bytes_per_parameter: "grader.memory.probe_bytes_per_parameter",
                       _memory._probe: "grader.memory._probe"},
    earlier=("grader.memory.training_terms", "grader.memory.probe_bytes_per_parameter", "grader.memory._probe"))


# --- bubble_fraction -------------------------------------------------------------------------------

# (stage_seconds, microbatches): stages of equal time (the schedule the papers draw), then stages of unequal time (a
# layer count that does not divide, a head on the last stage)
_BUBBLE_CASES = [([1.0, 1.0, 1.0, 1.0], 8), ([1.0, 1.0, 1.0, 1.0], 1), ([2.0], 6), ([0.5] * 8, 32),
                 ([1.0, 2.0, 1.0, 1.0], 8), ([2.0, 1.0, 1.0, 1.0], 8), ([1.0, 1.0, 1.0, 2.0], 8),
                 ([3.0, 1.0], 1), ([0.02, 0.03, 0.025, 0.02], 32), ([1.0, 1.25, 1.25, 0.75, 1.0], 16),
                 ([2.0, 4.0, 2.0, 2.0], 8)]
_B_SLOW, _B_SLOW_IN_MS = _BUBBLE_CASES[4], _BUBBLE_CASES[-1]  # one schedule at two scales


def _public_bubble_fraction(fn: Replay) -> None:
    """What can be said of bubble_fraction without its answer: a number, a share of the devices' time."""
    for case in _BUBBLE_CASES:
        value = call(fn, *case)
        if not is_number(value):
            fail(f"bubble_fraction{case} returned {value!r} ({type(value).__name__}); return a fraction from 0 to 1.")


def _hints_bubble_fraction(fn: Replay) -> None:
    """An unknown answer outside 0..1, one that lets a single stage wait, or one that depends on the unit of time."""
    for case in _BUBBLE_CASES:
        if not 0 <= float(call(fn, *case)) < 1:
            fail(f"bubble_fraction{case} is not a share of the devices' time: the idle share lies from 0 to 1.")
    if float(call(fn, [2.0], 6)) != 0:
        fail("bubble_fraction([2.0], 6) is not 0: one stage is no pipeline, so it never waits.")
    slow, doubled = float(call(fn, *_B_SLOW)), float(call(fn, *_B_SLOW_IN_MS))
    if not close(slow, doubled, 1e-9):
        fail(f"bubble_fraction{_B_SLOW} returned {slow!r} and bubble_fraction{_B_SLOW_IN_MS} returned {doubled!r}: "
             "every stage twice as long is the same schedule drawn at another scale, and its idle share is the same.")


check_bubble_fraction = Keyed(
    "07_data_parallel", "bubble_fraction", "bubble_fraction", _BUBBLE_CASES,
    floats=True, public=_public_bubble_fraction,
    hints=_hints_bubble_fraction,
    unknown="bubble_fraction is not the idle share of the pipeline's schedule, nor a mistake the course knows. Draw "
            "the schedule of one of the cases below on a time axis, a row per stage: when can each stage start each "
            "micro-batch, when does the last one finish, and how much of the devices' time is spent computing?")


# --- predictions: the all-reduce over 16 H100s, and the first ZeRO stage at which LLaMA-13B fits ------

PREDICTED_CHIP, PREDICTED_GPUS, PREDICTED_BYTES = "NVIDIA H100 SXM5 80GB", 16, 1e9


@course_only()
@sealed(LESSON, "ALLREDUCE_PREDICTION")
def _allreduce_model() -> dict:
    """Part of ALLREDUCE_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""




@course_only()
@sealed(LESSON, "ALLREDUCE_PREDICTION")
def _allreduce_said(ms: float) -> str | None:
    """Part of ALLREDUCE_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ALLREDUCE_PREDICTION")
def _allreduce_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of ALLREDUCE_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@sealed(LESSON, "ALLREDUCE_PREDICTION")
def show_allreduce(allreduce_seconds: Callable) -> None:
    """Section 2's reveal, once your guess is recorded: the schedule the model prices, and its table, priced with your
    `allreduce_seconds`. Here, not in the cell, and sealed: the schedule is what ALLREDUCE_PREDICTION asks you to
    work out. Called before a first guess, it is the deliberate reveal."""


check_allreduce_prediction = Prediction(
    LESSON, "ALLREDUCE_PREDICTION", {"16 GPUs ms": "number"}, points=1, band=_allreduce_band,
    model=lambda context: f"the hierarchical model: {_allreduce_model()['model'] * 1e3:.2f} ms",
    mistakes=lambda answer, context: (lambda s: f"it prices {s}" if s else None)(_allreduce_said(answer["16 GPUs ms"])),
    # every course function that prices an all-reduce over a cluster gives this answer: called before the first guess,
    # each counts as asking for it (a copy test ran the reveal cell's calls of the two distributed ones first)
    watch=(_allreduce_model, _allreduce_said, _ring_model, _distributed.cluster_allreduce_seconds, _distributed.cluster_links,
           _widgets.data_parallel_explorer))

ZERO_MODEL, ZERO_WORLD = "LLaMA-13B", 8
_ZERO_CHOICES = ("ddp", "zero1", "zero2", "zero3", "none")


@course_only()
@sealed(LESSON, "ZERO_PREDICTION")
def _zero_fits() -> dict[str, bool]:
    """For each stage, whether LLaMA-13B's training state per rank (torch autocast, Adam) fits one H100 on 8 ranks."""


@course_only()
@sealed(LESSON, "ZERO_PREDICTION")
def _zero_answer() -> str:
    """Part of ZERO_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ZERO_PREDICTION")
def _zero_said(stage: str) -> str | None:
    """Part of ZERO_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "ZERO_PREDICTION")
def _zero_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of ZERO_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


check_zero_prediction = Prediction(
    LESSON, "ZERO_PREDICTION", {"stage": _ZERO_CHOICES}, points=1, band=_zero_band,
    model=lambda context: f"the first stage at which {ZERO_MODEL} fits {ZERO_WORLD} H100s: {_zero_answer()}",
    mistakes=lambda answer, context: _zero_said(answer["stage"]), watch=(_zero_answer, _zero_fits, _zero_said,))

# bytes_per_rank, once it passes, prices every stage: passing it before ZERO_PREDICTION's first guess counts as asking.
answered_by(check_zero_prediction, check_bytes_per_rank)
