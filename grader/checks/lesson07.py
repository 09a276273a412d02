"""Checks for lesson 07 (data parallelism): the ring all-reduce model and its fit, DDP's buckets, a hand-written
gradient average, memory per rank under ZeRO, and the pipeline bubble.

average_gradients is run on several simulated ranks at once: one thread per rank, each with its own
replica and its own batch, and an `all_reduce` that sums a tensor in place across the threads (as
`torch.distributed.all_reduce(t)` does across processes). The judge rebuilds the same replicas and
gradients in its own process and compares what each rank ended with against their mean.
"""

from __future__ import annotations

import copy
import math
import random
import threading
import time
from typing import Any, Callable

import torch
from torch import nn

from grader.checks._common import Check, Raised, Replay, call, close, fail, is_number, record, recorded, require_callable
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson07.expect
from grader.notebook import CheckFailed, NotDone

# --- allreduce_seconds -----------------------------------------------------------------------------


def _ring(nbytes: float, world: int, latency: float, bandwidth: float) -> float:
    """What the judge expects: 2(n-1) steps of latency, and 2(n-1)/n of the message over the link."""
    if world == 1:
        return 0.0
    steps = 2 * (world - 1)
    return steps * latency + steps / world * nbytes / bandwidth


_AR_CASES = [
    (1e6, 2, 1e-4, 1e9),  # 2 steps: 0.2 ms latency + 1 ms of bytes
    (8e6, 4, 5e-6, 1e10),
    (4e8, 8, 2e-5, 1.5e11),
    (0.0, 8, 1e-5, 1e9),  # latency only
    (1e9, 16, 0.0, 4.5e11),  # bandwidth only
    (5e6, 1, 1e-4, 1e9),  # one rank: nothing to send
    (1e6, 3, 1e-4, 2e9),
]


def _judge_allreduce_seconds(fn: Callable) -> None:
    """allreduce_seconds: 2(n-1) latencies plus 2(n-1)/n of the message over the bandwidth; 0 for one rank."""
    got = {case: call(fn, *case) for case in _AR_CASES}
    for case, value in got.items():
        if not is_number(value):
            fail(f"allreduce_seconds{case} returned {value!r} ({type(value).__name__}); return a number of seconds.")
    one = float(got[(5e6, 1, 1e-4, 1e9)])
    if one != 0.0:
        fail(f"allreduce_seconds(5e6, world=1, ...) returned {one!r}: with one rank there is nobody to exchange "
             "gradients with, so the all-reduce costs nothing: return 0.")
    n, b, lat, bw = 8e6, 4, 5e-6, 1e10
    value = float(got[(n, b, lat, bw)])
    candidates = {
        "every rank sent its whole message to every other rank: (n-1) × nbytes over the link. The ring splits the "
        "message into n chunks and each rank passes one chunk per step, so it sends 2(n-1)/n × nbytes in all":
            (b - 1) * lat + (b - 1) * n / bw,
        "the bytes term is 2(n-1) × nbytes / bandwidth: the /n is missing. Each of the 2(n-1) steps moves one chunk, "
        "nbytes / n, not the whole message":
            2 * (b - 1) * lat + 2 * (b - 1) * n / bw,
        "only one latency: the ring takes 2(n-1) steps (n-1 to reduce-scatter, n-1 to all-gather), and each step "
        "waits one latency":
            lat + 2 * (b - 1) / b * n / bw,
        "2n steps instead of 2(n-1): a ring of n ranks needs n-1 steps for each half":
            2 * b * lat + 2 * b / b * n / bw,
        "bandwidth multiplied instead of divided (bytes ÷ bytes-per-second is seconds)":
            2 * (b - 1) * lat + 2 * (b - 1) / b * n * bw,
    }
    want = _ring(n, b, lat, bw)
    if not close(value, want, 1e-6):
        for mistake, wrong in candidates.items():
            if close(value, wrong, 1e-6):
                fail(f"allreduce_seconds(8e6 bytes, 4 ranks, 5 µs, 10 GB/s) returned {value:.6g} s; {mistake}. "
                     f"Expected {want:.6g} s.")
        fail(f"allreduce_seconds(8e6 bytes, 4 ranks, latency 5e-6 s, bandwidth 1e10 B/s) returned {value:.6g} s; the "
             f"ring model gives 2(n-1)·latency + 2(n-1)/n · nbytes / bandwidth = {want:.6g} s.")
    for case, value in got.items():
        if not close(float(value), _ring(*case), 1e-6):
            fail(f"allreduce_seconds{case} returned {float(value):.6g}; the ring model gives {_ring(*case):.6g} s.")


check_allreduce_seconds = recorded("allreduce_seconds", "allreduce_seconds", _AR_CASES, _judge_allreduce_seconds)


# --- fit_latency_bandwidth -------------------------------------------------------------------------


def synthetic_timings(world: int, latency: float, bandwidth: float, seed: int | None,
                      sigma: float = 0.05) -> tuple[list[int], list[float]]:
    """Message sizes 256 B .. 256 MiB and ring-model times with log-normal noise of `sigma` (None: no noise)."""
    rng = random.Random(seed)
    nbytes = [2**k for k in range(8, 29)]
    seconds = [_ring(x, world, latency, bandwidth) * (1.0 if seed is None else math.exp(rng.gauss(0.0, sigma)))
               for x in nbytes]
    return nbytes, seconds


# (world, latency s, bandwidth B/s, seed): seeds picked so that an unweighted fit is far off on them
_FITS = [(2, 150e-6, 1.3e9, None), (8, 20e-6, 2e10, None), (2, 150e-6, 1.3e9, 15), (4, 60e-6, 5e9, 75)]


def _fit_case(world: int, latency: float, bandwidth: float, seed: int | None) -> tuple:
    """fit_latency_bandwidth's arguments for data made with these values: (nbytes, seconds, world)."""
    return (*synthetic_timings(world, latency, bandwidth, seed), world)


def _fit_cases() -> list[tuple]:
    return [_fit_case(*fit) for fit in _FITS]


def _as_pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(is_number(v) for v in value):
        return float(value[0]), float(value[1])
    return None


def _weighted_fit(nbytes: list[float], seconds: list[float], world: int, power: float) -> tuple[float, float]:
    """(latency, bandwidth) of the line fitted with weights 1/t^power on the squared residuals (2: relative error)."""
    w = [1.0 / t**power for t in seconds]
    s0, sx = sum(w), sum(a * x for a, x in zip(w, nbytes))
    sxx = sum(a * x * x for a, x in zip(w, nbytes))
    st, sxt = sum(a * t for a, t in zip(w, seconds)), sum(a * x * t for a, x, t in zip(w, nbytes, seconds))
    det = s0 * sxx - sx * sx
    intercept, slope = (st * sxx - sx * sxt) / det, (s0 * sxt - sx * st) / det
    steps = 2 * (world - 1)
    return intercept / steps, steps / (world * slope)


def _judge_fit_one(got: Any, world: int, latency: float, bandwidth: float, noisy: bool, label: str,
                   data: tuple | None = None) -> None:
    pair = _as_pair(got)
    if pair is None:
        fail(f"fit_latency_bandwidth{label} returned {got!r}; return a tuple (latency in seconds, bandwidth in bytes/s).")
    lat, bw = pair
    steps = 2 * (world - 1)
    if close(lat, bandwidth, 0.2) and close(bw, latency, 0.2):
        fail(f"fit_latency_bandwidth{label} returned ({lat:.3g}, {bw:.3g}): latency and bandwidth swapped. Return "
             "(latency, bandwidth).")
    if close(lat, latency * steps, 0.2 if noisy else 1e-6) and close(bw, bandwidth * world / steps, 0.1 if noisy else 1e-6):
        fail(f"fit_latency_bandwidth{label} returned latency {lat:.3g} s and bandwidth {bw:.3g} B/s, which are the "
             f"line's intercept and 1/slope. The ring factor is missing: the intercept is 2(n-1)·latency "
             f"(= {steps}·latency for {world} ranks) and the slope is 2(n-1)/(n·bandwidth); divide them out.")
    for value, unit, scale in ((lat, "µs", 1e6), (bw, "GB/s", 1e-9)):
        true = latency if unit == "µs" else bandwidth
        if close(value, true * scale, 0.2):
            fail(f"fit_latency_bandwidth{label} returned {value:.4g}, which is the right figure in {unit}; return "
                 "seconds and bytes per second (SI units, no prefixes).")
    lat_tol, bw_tol = (0.2, 0.05) if noisy else (1e-6, 1e-6)
    if abs(lat) < 0.01 * latency:
        fail(f"fit_latency_bandwidth{label} returned a latency of {lat:.3g} s (the data were made with "
             f"{latency:.3g} s): the intercept was lost to rounding. Was the fit done in float32 (torch.tensor's "
             "default)? With sizes up to 2.7e8 bytes beside times of 1e-5 s, float32's 7 digits cannot hold the "
             "small intercept next to the large slope term. Work in float64 (torch.float64, or plain Python floats, "
             "or np.polyfit, which computes in float64).")
    if data is not None:
        for power, words in ((4, "1/t² in np.polyfit's w, which weights the residual itself, not its square: "
                                 "w = 1/t² weights squared residuals by 1/t⁴"),
                             (1, "1/t on the squared residuals: that minimises Σ(model − t)²/t, neither absolute "
                                 "nor relative error")):
            wrong = _weighted_fit(*data, power)
            if close(lat, wrong[0], 1e-6) and close(bw, wrong[1], 1e-6) and not (
                    close(lat, latency, lat_tol) and close(bw, bandwidth, bw_tol)):
                fail(f"fit_latency_bandwidth{label} returned ({lat:.4g} s, {bw:.4g} B/s), the line weighted by "
                     f"{words}. The relative error (model − t)/t squared is the squared residual times 1/t²: "
                     "weights 1/t² on squared residuals, or w = 1/t in np.polyfit.")
    if noisy and (lat < 0 or not close(lat, latency, 0.5)) and close(bw, bandwidth, 0.15):
        fail(f"fit_latency_bandwidth{label} returned latency {lat * 1e6:.4g} µs (the data were made with "
             f"{latency * 1e6:.4g} µs) but bandwidth within {abs(bw / bandwidth - 1):.0%}: an unweighted least-squares "
             "fit. Its errors are absolute, so the largest messages (hundreds of ms, a few % noise: milliseconds) "
             "decide the line and the latency, a few hundred µs, drowns in their noise. Weight each point by 1/time "
             "(fit the relative error: minimise Σ((model − t)/t)²), and the small messages set the latency.")
    if not close(lat, latency, lat_tol) or not close(bw, bandwidth, bw_tol):
        fail(f"fit_latency_bandwidth{label} returned latency {lat:.4g} s and bandwidth {bw:.4g} B/s; the data were made "
             f"with {latency:.4g} s and {bandwidth:.4g} B/s" + (" and 5% noise" if noisy else ", without noise")
             + ". Fit t = a + b·nbytes (weighted by 1/t), then latency = a / (2(n-1)), bandwidth = 2(n-1) / (n·b).")


def _judge_fit(fn: Callable) -> None:
    """fit_latency_bandwidth recovers the latency and bandwidth the data were made with, noise or not."""
    for case, (world, latency, bandwidth, seed) in zip(_fit_cases(), _FITS):
        label = f"(..., world={world})" + (" on noise-free data" if seed is None else " on data with 5% noise")
        _judge_fit_one(call(fn, *case, label=f"fit_latency_bandwidth{label}"), world, latency, bandwidth,
                       seed is not None, label, data=case)


check_fit_latency_bandwidth = recorded("fit_latency_bandwidth", "fit_latency_bandwidth", _fit_cases, _judge_fit)


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
fit_on.__doc__ = "Hidden test: the fit recovers `latency` and `bandwidth` from synthetic_timings(world, latency, bandwidth, seed)."


# --- bucket_plan -----------------------------------------------------------------------------------

_BUCKET_CASES = [  # (param_bytes, cap, first_cap)
    ([100, 100, 100, 100, 100, 100], 250, 250),  # [[5, 4, 3], [2, 1, 0]]
    ([100, 100, 100, 100], 200, 200),  # exactly the cap closes: [[3, 2], [1, 0]]
    ([10, 1000, 10, 10], 100, 100),  # the big one joins the open bucket and closes it: [[3, 2, 1], [0]]
    ([40, 30, 500, 20], 100, 100),  # [[3, 2], [1, 0]]: the last bucket is still open when the parameters run out
    ([64, 4, 256, 16, 1024, 8], 400, 400),  # [[5, 4], [3, 2, 1, 0]]
    ([], 100, 10),
    ([7], 1000, 1000),  # [[0]]
    ([100] * 8, 300, 100),  # a small first bucket: [[7], [6, 5, 4], [3, 2, 1], [0]]
    ([50, 50, 400, 50, 50], 600, 120),  # [[4, 3, 2], [1, 0]]: the first closes past 120; one cap of 600 would keep all five
]


def _walk(sizes: list[int], cap: int, first_cap: int | None = None, reverse: bool = True, reach: bool = True,
          add_first: bool = True, keep_last: bool = True, positions: bool = False, big_alone: bool = False,
          first_for_all: bool = False) -> list[list[int]]:
    """Bucketing by size, the judge's model of it and of the usual ways to get it wrong (the flags).

    The first bucket closes at `first_cap` (DDP: 1 MiB by default), every later one at `cap`; first_cap=None is
    the mistake of one cap for all, first_for_all the mistake of the first cap for every bucket.
    """
    order = list(reversed(range(len(sizes)))) if reverse else list(range(len(sizes)))
    out, bucket, size = [], [], 0

    def limit() -> int:
        if first_cap is None:
            return cap
        return first_cap if (not out or first_for_all) else cap

    for pos, i in enumerate(order):
        label = pos if positions else i
        if big_alone and sizes[i] >= limit():
            out += [bucket, [label]] if bucket else [[label]]
            bucket, size = [], 0
            continue
        if not add_first and bucket and size + sizes[i] > limit():
            out.append(bucket)
            bucket, size = [], 0
        bucket.append(label)
        size += sizes[i]
        if add_first and (size >= limit() if reach else size > limit()):
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket and keep_last else [])


_BUCKET_MISTAKES = [  # (the mistake's flags, what the learner is told)
    ({"positions": True}, "the indices are positions in the reversed list, not the parameters' own indices. Bucket "
                          "entries are indices into param_bytes: the last parameter is len(param_bytes) - 1"),
    ({"reverse": False}, "the first bucket starts with parameter 0. Backward produces gradients from the last layer "
                         "to the first, so DDP fills buckets in reverse registration order: the first bucket holds "
                         "the last parameters"),
    ({"reach": False}, "a bucket that reaches the cap exactly did not close. Close it once its bytes reach the cap "
                       "(size >= cap), not only once they exceed it"),
    ({"add_first": False}, "you closed a bucket before adding the parameter that would take it past the cap, so no "
                           "bucket exceeds the cap. DDP adds the parameter first and then closes the bucket once it "
                           "has reached the cap: a parameter larger than the cap joins the open bucket"),
    ({"big_alone": True}, "a parameter at least as large as the cap got a bucket of its own. DDP does not treat it "
                          "apart: it joins the open bucket like any other parameter, and that bucket then closes "
                          "because it has reached the cap"),
    ({"keep_last": False}, "the last bucket is missing. A bucket still open when the parameters run out is sent too, "
                           "or its gradients are never averaged"),
    ({"first_cap": None}, "first_cap was ignored: every bucket closed at cap. The first bucket (the last layers' "
                          "gradients, ready first) closes at first_cap, so its all-reduce starts as early as "
                          "possible; DDP's defaults are 1 MiB for it (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES) "
                          "and 25 MiB for the rest"),
    ({"first_for_all": True}, "every bucket closed at first_cap. Only the first bucket is small; once it closes, "
                              "the next ones close at cap"),
]


def _as_buckets(value: Any) -> list[list[int]] | None:
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for bucket in value:
        if not isinstance(bucket, (list, tuple)) or not all(type(i) is int for i in bucket):
            return None
        out.append(list(bucket))
    return out


def _judge_bucket_plan(fn: Callable) -> None:
    """bucket_plan: reverse order, add, close once the bucket reaches its cap (first_cap for the first), send the rest."""
    got = [call(fn, *case) for case in _BUCKET_CASES]
    plans = [_as_buckets(v) for v in got]
    for case, value, plan in zip(_BUCKET_CASES, got, plans):
        if plan is None:
            fail(f"bucket_plan{case} returned {value!r}; return a list of buckets, each a list of parameter indices "
                 "(ints).")
    wants = [_walk(*case) for case in _BUCKET_CASES]
    if plans == wants:
        return
    first = next(i for i, (p, w) in enumerate(zip(plans, wants)) if p != w)
    sizes, cap, first_cap = _BUCKET_CASES[first]
    label = f"bucket_plan({sizes}, cap={cap}, first_cap={first_cap}) returned {plans[first]}"
    for flags, mistake in _BUCKET_MISTAKES:
        if all(plan == _walk(*case[:2], **({"first_cap": case[2]} | flags)) for plan, case in zip(plans, _BUCKET_CASES)):
            fail(f"{label}: {mistake}. Expected {wants[first]}.")
    for plan, (sizes, cap, first_cap), want in zip(plans, _BUCKET_CASES, wants):
        if sorted(j for b in plan for j in b) != list(range(len(sizes))):
            fail(f"bucket_plan({sizes}, cap={cap}, first_cap={first_cap}) returned {plan}; every parameter index must "
                 f"appear exactly once (a bucket holds whole parameters: DDP never splits one). Expected {want}.")
    fail(f"{label}; expected {wants[first]}: walk the parameters from the last to the first, add each to the open "
         "bucket, close it when its bytes reach its cap (first_cap for the first bucket, cap after), and send a last "
         "partial bucket at the end.")


check_bucket_plan = recorded("bucket_plan", "bucket_plan", _BUCKET_CASES, _judge_bucket_plan)


# --- average_gradients -----------------------------------------------------------------------------

WAIT_S = 20.0  # how long a simulated rank waits for the others at an all-reduce


def replicas(world: int, seed: int, frozen: bool = False) -> list[nn.Module]:
    """`world` identical copies of a small model, each with the gradients of its own batch (the same in every process)."""
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
    """Which tensor all_reduce got: ['grad', i], ['data', i] (the weights) or ['copy', -1]."""
    ptr = tensor.data_ptr()
    for i, p in enumerate(params):
        if p.grad is not None and ptr == p.grad.data_ptr() and tensor.shape == p.grad.shape:
            return ["grad", i]
        if ptr == p.data_ptr() and tensor.shape == p.shape:
            return ["data", i]
    return ["copy", -1]


def _observe_average(fn: Callable, world: int = 3, seed: int = 0, frozen: bool = False) -> dict:
    require_callable(fn, "average_gradients")
    world, seed = int(world), int(seed)
    models = replicas(world, seed, bool(frozen))
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


def _judge_average(observation: dict, world: int = 3, seed: int = 0, frozen: bool = False, why: str = "") -> None:
    """average_gradients: every rank ends with the mean of the ranks' gradients, in p.grad, weights untouched."""
    prefix = f"{why}: " if why else ""
    label = f"average_gradients on {world} ranks" + (" (first layer frozen)" if frozen else "")
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
    reference = replicas(world, seed, frozen)
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
    kinds = [k for k, _ in r0.get("calls", [])]
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
        return [m is None or (isinstance(g, torch.Tensor) and g.shape == m.shape and torch.allclose(g, m * scale, rtol=1e-5, atol=1e-7))
                for g, m in zip(got, mean)]

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
        fail(f"{prefix}{label} all-reduced copies of the gradients and never wrote them back: p.grad is unchanged. "
             "Reduce p.grad itself (all_reduce works in place), or copy the result back into p.grad.")
    if all(unchanged):
        fail(f"{prefix}{label} left every rank's gradients as they were: nothing was averaged.")
    missed = [names[i] for i, good in enumerate(ok) if not good and unchanged[i]]
    if missed and len(missed) < len(names):
        fail(f"{prefix}{label} averaged some parameters but not {', '.join(missed)}: iterate over all of "
             "model.parameters() (weights and biases, every layer).")
    bad = next(i for i, good in enumerate(ok) if not good)
    fail(f"{prefix}{label}: rank 0's gradient of {names[bad]} is not the mean of the {world} ranks' gradients.")


_AVERAGE_RUNS = [(3, 0, False), (2, 1, True)]  # (world, seed, first layer frozen)


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
    for seen, run in zip(observation, _AVERAGE_RUNS):
        _judge_average(seen, *run)


check_average_gradients = Check("average_gradients", _observe_average_runs, _judge_average_runs)


average_on = Check("average_gradients on other ranks", _observe_average, _judge_average,
                   inputs=("world", "seed", "frozen"), announce=False)
average_on.__doc__ = "Hidden test: average_gradients on `world` simulated ranks of replicas(world, seed, frozen)."


# --- bytes_per_rank --------------------------------------------------------------------------------

STAGES = ("ddp", "zero1", "zero2", "zero3")
_PSI = 10**9
_MEM_CASES = [(_PSI, 8, s) for s in STAGES] + [(_PSI, 1, s) for s in STAGES] + [(3 * 10**8, 4, "zero2")]


def _judge_bytes_per_rank(fn: Callable) -> None:
    """bytes_per_rank: 16 bytes per parameter; ZeRO 1 shards the 12 of the optimizer, 2 the gradients' 2, 3 the weights' 2."""
    got = {case: call(fn, *case) for case in _MEM_CASES}
    for case, value in got.items():
        if not is_number(value):
            fail(f"bytes_per_rank{case} returned {value!r} ({type(value).__name__}); return a number of bytes.")
    g = {stage: float(got[(_PSI, 8, stage)]) for stage in STAGES}
    gb = {stage: f"{v / 1e9:.4g} GB" for stage, v in g.items()}
    if not close(g["ddp"], 16 * _PSI, 1e-9):
        per = g["ddp"] / _PSI
        fail(f"bytes_per_rank(1e9 parameters, 8 ranks, 'ddp') returned {gb['ddp']} ({per:.3g} bytes per parameter); "
             "mixed-precision Adam keeps 16: fp16 weights (2) and gradients (2), and an fp32 master copy, momentum "
             "and variance (4 + 4 + 4). DDP keeps all of it on every rank.")
    if close(g["zero1"], 16 * _PSI / 8, 1e-9):
        fail(f"bytes_per_rank(1e9, 8, 'zero1') returned {gb['zero1']}: everything divided by 8. Stage 1 shards only "
             "the optimizer state (12 bytes per parameter); every rank still holds all the fp16 weights and "
             "gradients (2 + 2 bytes per parameter).")
    if not close(g["zero1"], 4 * _PSI + 12 * _PSI / 8, 1e-9):
        fail(f"bytes_per_rank(1e9, 8, 'zero1') returned {gb['zero1']}; stage 1 keeps the weights and gradients whole "
             "(4 bytes per parameter) and an eighth of the 12 bytes of optimizer state: 5.5 GB.")
    if close(g["zero2"], g["zero1"], 1e-9):
        fail(f"bytes_per_rank(1e9, 8, 'zero2') returned {gb['zero2']}, the same as stage 1: stage 2 also shards the "
             "gradients, so each rank keeps 2 bytes per parameter of weights and 1/8 of the other 14.")
    if not close(g["zero2"], 2 * _PSI + 14 * _PSI / 8, 1e-9):
        fail(f"bytes_per_rank(1e9, 8, 'zero2') returned {gb['zero2']}; stage 2 keeps only the fp16 weights whole "
             "(2 bytes per parameter) and an eighth of the gradients and optimizer state (14): 3.75 GB.")
    if not close(g["zero3"], 16 * _PSI / 8, 1e-9):
        fail(f"bytes_per_rank(1e9, 8, 'zero3') returned {gb['zero3']}; stage 3 shards the weights too, so every byte "
             "is divided among the ranks: 16 / 8 bytes per parameter, 2 GB.")
    for stage in STAGES:
        one = float(got[(_PSI, 1, stage)])
        if not close(one, 16 * _PSI, 1e-9):
            fail(f"bytes_per_rank(1e9, 1, {stage!r}) returned {one / 1e9:.4g} GB; with one rank there is nobody to "
                 "share with, so every stage keeps all 16 GB.")
    last = float(got[(3 * 10**8, 4, "zero2")])
    if not close(last, 2 * 3e8 + 14 * 3e8 / 4, 1e-9):
        fail(f"bytes_per_rank(3e8, 4, 'zero2') returned {last:.6g}; stage 2 on 4 ranks keeps 2 + 14/4 bytes per "
             f"parameter: {2 * 3e8 + 14 * 3e8 / 4:.6g}.")


check_bytes_per_rank = recorded("bytes_per_rank", "bytes_per_rank", _MEM_CASES, _judge_bytes_per_rank)


# --- bubble_fraction -------------------------------------------------------------------------------

_BUBBLE_CASES = [(4, 8), (4, 1), (1, 6), (8, 32), (2, 2)]


def _judge_bubble(fn: Callable) -> None:
    """bubble_fraction: (p - 1) / (m + p - 1), the idle share of a GPipe schedule."""
    got = {case: call(fn, *case) for case in _BUBBLE_CASES}
    for case, value in got.items():
        if not is_number(value):
            fail(f"bubble_fraction{case} returned {value!r} ({type(value).__name__}); return a fraction from 0 to 1.")
    v = float(got[(4, 8)])
    if close(v, 3 / 8, 1e-9) or close(float(got[(4, 1)]), 3.0, 1e-9):
        fail(f"bubble_fraction(4 stages, 8 micro-batches) returned {v:.4g} = (p-1)/m: that is the bubble's time over "
             "the useful time, not over the whole schedule (it can exceed 1: with one micro-batch it says 3). The "
             "schedule takes m + p - 1 slots, p - 1 of them idle per stage: (p-1)/(m+p-1).")
    if close(v, 3 / 12, 1e-9) or close(v, 4 / 11, 1e-9):
        fail(f"bubble_fraction(4, 8) returned {v:.4g}; a stage idles p - 1 = 3 of the m + p - 1 = 11 slots, so "
             "3/11 ≈ 0.273.")
    for (p, m), value in got.items():
        want = (p - 1) / (m + p - 1)
        if not close(float(value), want, 1e-9):
            fail(f"bubble_fraction({p}, {m}) returned {float(value):.4g}; (p-1)/(m+p-1) = {want:.4g}"
                 + (" (one stage is no pipeline: no bubble)" if p == 1 else "") + ".")


check_bubble_fraction = recorded("bubble_fraction", "bubble_fraction", _BUBBLE_CASES, _judge_bubble)
