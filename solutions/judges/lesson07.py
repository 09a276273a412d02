"""The instructor's judges of lesson 07's keyed checks (allreduce_seconds, bucket_plan, bytes_per_rank, bubble_fraction):
they hold the answers, so they are never packaged nor released. (fit_latency_bandwidth is not keyed: its check draws
its cases afresh each run and judges the fit against the latency and bandwidth it drew, grader/checks/lesson07.py.)

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson07.py) and keeps
only digests and messages in grader/checks/keys/07_data_parallel.json; the learner's checks
(grader/checks/lesson07.py) judge by those. A message names the kind of mistake and the principle, never the
expected value nor the formula.
"""

from __future__ import annotations

from typing import Callable

from grader.checks._common import Replay, call, close, fail, is_number
from grader.checks.lesson07 import _AR_CASES, _BUBBLE_CASES, _BUCKET_CASES, _MEM_CASES, _PSI, STAGES, _as_buckets

# --- allreduce_seconds ------------------------------------------------------------------------------


def _ring(nbytes: float, world: int, latency: float, bandwidth: float) -> float:
    """The ring all-reduce: 2(n − 1) steps, each one latency and one chunk of nbytes / n; nothing for one rank."""
    if world == 1:
        return 0.0
    steps = 2 * (world - 1)
    return steps * latency + steps / world * nbytes / bandwidth


def _judge_allreduce_seconds(fn: Callable) -> None:
    """allreduce_seconds against the ring model, on the check's cases."""
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
        "every rank sent its whole message to every other rank. In a ring each rank passes one chunk of the message "
        "per step, to its neighbour: count the chunks it sends":
            (b - 1) * lat + (b - 1) * n / bw,
        "each step moved the whole message. A step moves one chunk, and the message is cut into as many chunks as "
        "there are ranks":
            2 * (b - 1) * lat + 2 * (b - 1) * n / bw,
        "only one latency: every step of the ring waits one latency; count the steps of both phases":
            lat + 2 * (b - 1) / b * n / bw,
        "each phase has the wrong number of steps: follow one chunk round a ring of 4 ranks, step by step, until "
        "every rank has added its part to it, then until every rank holds the sum":
            2 * b * lat + 2 * b / b * n / bw,
        "bandwidth multiplied instead of divided (bytes ÷ bytes-per-second is seconds)":
            2 * (b - 1) * lat + 2 * (b - 1) / b * n * bw,
    }
    want = _ring(n, b, lat, bw)
    if not close(value, want, 1e-6):
        for mistake, wrong in candidates.items():
            if close(value, wrong, 1e-6):
                fail(f"allreduce_seconds(8e6 bytes, 4 ranks, 5 µs, 10 GB/s): {mistake}.")
        fail("allreduce_seconds(8e6 bytes, 4 ranks, latency 5e-6 s, bandwidth 1e10 B/s) is off. Count the steps of "
             "the ring's two phases (each waits one latency) and the bytes one rank sends in them (section 2).")
    for case, value in got.items():
        if not close(float(value), _ring(*case), 1e-6):
            fail(f"allreduce_seconds{case} is off here, though right for 4 ranks: does it use every argument as given "
                 "(and no bytes at all, or no latency, where one of them is 0)?")


# --- bucket_plan -------------------------------------------------------------------------------------


def _walk(sizes: list[int], forward: list[int], cap: int, first_cap: int | None = None, reverse: bool = True,
          reach: bool = True, add_first: bool = True, keep_last: bool = True, positions: bool = False,
          big_alone: bool = False, first_for_all: bool = False, registration: bool = False) -> list[list[int]]:
    """Bucketing by size, the judge's model of it and of the usual ways to get it wrong (the flags).

    Gradients become ready in the reverse of the order the forward pass used the parameters; the first bucket
    closes at `first_cap` (DDP: 1 MiB by default), every later one at `cap`. first_cap=None is the mistake of one
    cap for all, first_for_all the mistake of the first cap for every bucket, registration the mistake of the
    reverse registration order whatever forward_order says.
    """
    used = list(range(len(sizes))) if registration else list(forward)
    order = list(reversed(used)) if reverse else used
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
    ({"positions": True}, "the indices are positions in the order you walked, not the parameters' own indices. Bucket "
                          "entries are indices into param_bytes"),
    ({"registration": True}, "the buckets follow the reverse of the registration order, whatever forward_order "
                             "says. A gradient is ready when backward has passed the layer that used it, and backward "
                             "runs through the layers in the reverse of the order the forward pass used them: a model "
                             "need not use its parameters in the order it registered them"),
    ({"reverse": False}, "the first bucket starts with the parameter the forward pass used first. Backward produces "
                         "gradients from the last layer used to the first, and a bucket goes out when all of its "
                         "gradients are ready"),
    ({"reach": False}, "a bucket that reaches its cap exactly did not close"),
    ({"add_first": False}, "you closed a bucket before adding the parameter that would take it past the cap, so no "
                           "bucket of yours holds more than its cap. Compare with the buckets DDP really made (the "
                           "cell after this check runs it)"),
    ({"big_alone": True}, "a parameter at least as large as the cap got a bucket of its own. DDP does not treat a big "
                          "parameter apart from the others"),
    ({"keep_last": False}, "the last bucket is missing. A bucket still open when the parameters run out is sent too, "
                           "or its gradients are never averaged"),
    ({"first_cap": None}, "first_cap was ignored: every bucket closed at cap. The first bucket (the gradients ready "
                          "first) closes at first_cap, so its all-reduce starts as early as possible"),
    ({"first_for_all": True}, "every bucket closed at first_cap. Only the first bucket is small; once it closes, "
                              "the next ones close at cap"),
]


def _judge_bucket_plan(fn: Callable) -> None:
    """bucket_plan: ready order (the reverse of forward_order), add, close once the bucket reaches its cap, send the rest."""
    got = [call(fn, *case) for case in _BUCKET_CASES]
    plans = [_as_buckets(v) for v in got]
    for case, value, plan in zip(_BUCKET_CASES, got, plans):
        if plan is None:
            fail(f"bucket_plan{tuple(case)} returned {value!r}; return a list of buckets, each a list of parameter "
                 "indices (ints).")
    wants = [_walk(*case) for case in _BUCKET_CASES]
    if plans == wants:
        return
    first = next(i for i, (p, w) in enumerate(zip(plans, wants)) if p != w)
    sizes, forward, cap, first_cap = _BUCKET_CASES[first]
    label = f"bucket_plan({sizes}, forward_order={forward}, cap={cap}, first_cap={first_cap}) returned {plans[first]}"
    for flags, mistake in _BUCKET_MISTAKES:
        if all(plan == _walk(*case[:3], **({"first_cap": case[3]} | flags)) for plan, case in zip(plans, _BUCKET_CASES)):
            fail(f"{label}: {mistake}.")
    for plan, (sizes, forward, cap, first_cap) in zip(plans, _BUCKET_CASES):
        if sorted(j for b in plan for j in b) != list(range(len(sizes))):
            fail(f"bucket_plan({sizes}, forward_order={forward}, cap={cap}, first_cap={first_cap}) returned {plan}; "
                 "every parameter index must appear exactly once (a bucket holds whole parameters: DDP never splits "
                 "one).")
    fail(f"{label}, not DDP's buckets. Walk this case by hand with section 5's rules: when is each gradient ready, "
         "and when may a bucket go out?")


# --- bytes_per_rank ----------------------------------------------------------------------------------

# Bytes per parameter each stage keeps whole on every rank; the rest of the 16 is divided among the ranks.
# DeepSpeed: fp16 weights (2) and gradients (2), the optimizer's fp32 master copy and Adam's two moments (12).
# torch autocast with Adam: fp32 weights (4) and gradients (4), Adam's two fp32 moments (8), no second copy.
_WHOLE = {"deepspeed": {"ddp": 16, "zero1": 4, "zero2": 2, "zero3": 0},
          "autocast": {"ddp": 16, "zero1": 8, "zero2": 4, "zero3": 0}}


def bytes_reference(n_params: float, world: int, stage: str, layout: str = "deepspeed") -> float:
    """The answer: what one rank keeps (tests/test_lesson07_content.py reads ZERO_PREDICTION's model off it)."""
    whole = _WHOLE[layout][stage]
    return whole * n_params + (16 - whole) * n_params / world


def _bytes_per_rank(fn: Callable) -> None:
    """bytes_per_rank: what each layout keeps per parameter; ZeRO 1 shards the optimizer, 2 the gradients, 3 the weights."""
    got = {case: call(fn, *case) for case in _MEM_CASES}
    for case, value in got.items():
        if not is_number(value):
            fail(f"bytes_per_rank{case} returned {value!r} ({type(value).__name__}); return a number of bytes.")
    g = {stage: float(got[(_PSI, 8, stage, "deepspeed")]) for stage in STAGES}
    a = {stage: float(got[(_PSI, 8, stage, "autocast")]) for stage in STAGES}
    if not close(g["ddp"], 16 * _PSI, 1e-9):
        if close(g["ddp"], 8 * _PSI, 1e-9) or close(g["ddp"], 12 * _PSI, 1e-9):
            fail("bytes_per_rank(1e9 parameters, 8 ranks, 'ddp', 'deepspeed') is short of DeepSpeed's layout: did you "
                 "count every tensor its optimizer keeps?")
        fail("bytes_per_rank(1e9 parameters, 8 ranks, 'ddp', 'deepspeed') is off: count each tensor DeepSpeed's layout "
             "keeps per parameter, in its own dtype. DDP keeps all of it on every rank.")
    if close(g["zero1"], g["ddp"] / 8, 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero1', 'deepspeed') divided everything among the ranks. Stage 1 shards only "
             "one kind of tensor.")
    if not close(g["zero1"], bytes_reference(_PSI, 8, "zero1"), 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero1', 'deepspeed') is off: which tensors does stage 1 keep whole on every "
             "rank, and which does it divide?")
    if close(g["zero2"], g["zero1"], 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero2', 'deepspeed') is the same as stage 1: stage 2 also shards the gradients.")
    if not close(g["zero2"], bytes_reference(_PSI, 8, "zero2"), 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero2', 'deepspeed') is off: which tensors does stage 2 keep whole on every "
             "rank, and which does it divide?")
    if not close(g["zero3"], 16 * _PSI / 8, 1e-9):
        fail("bytes_per_rank(1e9, 8, 'zero3', 'deepspeed') is off: stage 3 shards the weights too, so every byte is "
             "divided among the ranks.")
    for stage in STAGES:
        if not close(float(got[(_PSI, 1, stage, "deepspeed")]), 16 * _PSI, 1e-9):
            fail(f"bytes_per_rank(1e9, 1, {stage!r}, 'deepspeed') is not what DDP keeps: with one rank there is nobody "
                 "to share with, so every stage keeps everything.")
    if not close(float(got[(3 * 10**8, 4, "zero2", "deepspeed")]), bytes_reference(3e8, 4, "zero2"), 1e-9):
        fail("bytes_per_rank(3e8, 4, 'zero2', 'deepspeed') is off, though right for 1e9 parameters on 8 ranks: use "
             "n_params and world as given.")
    if all(close(a[s], g[s], 1e-9) for s in STAGES):
        fail("bytes_per_rank(1e9, 8, stage, 'autocast') is what DeepSpeed's layout keeps, at every stage: torch "
             "autocast keeps other tensors, in other dtypes. What does autocast cast, and what does it leave as the "
             "model was built?")
    if close(a["ddp"], 20 * _PSI, 1e-9):
        fail("bytes_per_rank(1e9, 8, 'ddp', 'autocast') counts a tensor torch autocast does not keep: a second copy "
             "of weights that are float32 already.")
    if close(a["ddp"], 14 * _PSI, 1e-9) or close(a["ddp"], 12 * _PSI, 1e-9):
        fail("bytes_per_rank(1e9, 8, 'ddp', 'autocast') keeps some of autocast's state at 2 bytes. The low-precision "
             "copies autocast makes do not outlast the step; what dtype does a parameter's .grad have, and Adam's "
             "state for it?")
    for stage in STAGES:
        if not close(a[stage], bytes_reference(_PSI, 8, stage, "autocast"), 1e-9):
            fail(f"bytes_per_rank(1e9, 8, {stage!r}, 'autocast') is off, though DeepSpeed's layout is right: which of "
                 "autocast's tensors, at what size, does this stage keep whole, and which does it divide?")
    for case in ((_PSI, 1, "zero3", "autocast"), (3 * 10**8, 4, "zero1", "autocast")):
        if not close(float(got[case]), bytes_reference(*case), 1e-9):
            fail(f"bytes_per_rank{case} is off, though right for 1e9 parameters on 8 ranks: use n_params and world as "
                 "given.")


# --- bubble_fraction ---------------------------------------------------------------------------------


def _makespan(stage_seconds: list[float], m: int) -> float:
    """The length of the schedule: a stage starts micro-batch j once it has finished j - 1 and the stage before has
    finished j. Along any path through the (micro-batch, stage) grid every stage is visited, and the m - 1 further
    micro-batches are best spent on the slowest stage: sum(t) + (m - 1) * max(t) (the equal-slot picture when every t
    is the same)."""
    return sum(stage_seconds) + (m - 1) * max(stage_seconds)


def bubble_reference(stage_seconds: list[float], m: int) -> float:
    """The answer: the share of the p devices' time over the schedule in which they compute nothing."""
    t = [float(x) for x in stage_seconds]
    return 1.0 - m * sum(t) / (len(t) * _makespan(t, m))


def _bubble_wrongs(t: list[float], m: int) -> dict[str, float]:
    """The usual wrong answers for one case, by the mistake's message."""
    p, total, slowest = len(t), sum(t), max(t)
    busy = m * total
    return {
        "gives what stages of equal time would: right where they are equal, but not here. Walk this case's schedule on "
        "a time axis, a row per stage: when can the stage after the slow one start its second micro-batch?":
            (p - 1) / (m + p - 1),
        "gives every stage slots as long as the slowest stage's, while the pipe fills and drains as well. A stage "
        "starts a micro-batch as soon as it has finished the one before and has been handed this one: how soon does "
        "the first micro-batch reach the last stage?":
            1 - busy / (p * (m + p - 1) * slowest),
        "is the idle share of the slowest stage alone. The faster stages wait for it in the middle of the schedule "
        "too, not only while the pipe fills and drains: count every stage's idle time.":
            1 - m * slowest / _makespan(t, m),
        "is the idle time over the time spent computing, not over all of the devices' time (it can exceed 1: with "
        "one micro-batch it does).":
            p * _makespan(t, m) / busy - 1,
        "is one micro-batch's time off: walk the last micro-batch through the schedule and count again how long the "
        "schedule runs.":
            1 - busy / (p * (total + m * slowest)),
    }


def _bubble_label(i: int) -> str:
    stages, m = _BUBBLE_CASES[i]
    return f"bubble_fraction({stages}, {m})"


def _bubble_fraction(fn: Callable) -> None:
    """bubble_fraction: the idle share of p devices over a pipeline schedule of stages of (possibly unequal) times."""
    got = {i: call(fn, *case) for i, case in enumerate(_BUBBLE_CASES)}
    for i, value in got.items():
        if not is_number(value):
            fail(f"{_bubble_label(i)} returned {value!r} ({type(value).__name__}); return a fraction from 0 to 1.")
    wrong = [i for i, value in got.items() if not close(float(value), bubble_reference(*_BUBBLE_CASES[i]), 1e-9)]
    if not wrong:
        return
    for mistake in _bubble_wrongs([1.0, 2.0, 1.0, 1.0], 8):  # the same mistake on every case it can be told on
        matches = [close(float(got[i]), _bubble_wrongs(*_BUBBLE_CASES[i])[mistake], 1e-9) for i in wrong]
        if all(matches):
            i = next((j for j in wrong if len(set(_BUBBLE_CASES[j][0])) > 1), wrong[0])
            fail(f"{_bubble_label(i)} {mistake}")
    i = wrong[0]
    stages = _BUBBLE_CASES[i][0]
    fail(f"{_bubble_label(i)} is off" + (": one stage is no pipeline, so it never waits"
         if len(stages) == 1 else ", though right elsewhere: walk this schedule on a time axis") + ".")


JUDGES = {"allreduce_seconds": _judge_allreduce_seconds, "bucket_plan": _judge_bucket_plan, "bytes_per_rank": _bytes_per_rank, "bubble_fraction": _bubble_fraction}
