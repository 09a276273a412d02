"""Checks for lesson 02 (transfers): the copy cost model, the sync-point quiz, predicting sync points, the fixed loop.

Every check has two halves (grader.checks._common.Check): `observe` runs the
learner's code (under the course's SyncCounter where it matters) and returns
plain data; `judge` decides from that data alone. What the judges compare with
(which quiz lines wait, the losses of the buggy loop) they compute here, with
the course's own code, never with the learner's.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
import weakref
from typing import Callable

import torch
import torch.nn.functional as F

from grader.checks._common import Check, call, close, fail, is_number, recorded, require_callable, same
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson02.expect
from grader.notebook import NotDone
from grader.shortcuts import course_only
from grader.syncs import SyncCounter

# --- transfer_seconds -----------------------------------------------------------------------

_NBYTES, _BANDWIDTH, _LATENCY = 2e9, 25e9, 1e-5  # 2 GB over a 25 GB/s link, 10 µs fixed cost


def _judge_transfer_seconds(transfer_seconds: Callable[[float, float, float], float]) -> None:
    """transfer_seconds(nbytes, bandwidth, latency) = latency + nbytes / bandwidth, in seconds."""
    nbytes, bandwidth, latency = _NBYTES, _BANDWIDTH, _LATENCY
    got = call(transfer_seconds, nbytes, bandwidth, latency)
    if not is_number(got):
        fail(f"transfer_seconds returned {got!r} ({type(got).__name__}); return seconds as a float.")
    got = float(got)
    if close(got, nbytes / bandwidth):
        fail(
            "transfer_seconds(2 GB, 25 GB/s, 10 µs) returned exactly 2 GB / 25 GB/s: you left out the latency. "
            "Every copy pays a fixed cost (setting it up, crossing the bus) before the first byte arrives."
        )
    if close(got, latency * 1e3 + nbytes / bandwidth * 1e3) or close(got, (latency + nbytes / bandwidth) * 1e3):
        fail("transfer_seconds returned a thousand times the time: milliseconds. Return seconds.")
    if close(got, latency + 8 * nbytes / bandwidth):
        fail("transfer_seconds multiplied the bytes by 8: bandwidth here is in bytes per second, not bits.")
    if close(got, latency + bandwidth / nbytes) or close(got, latency + nbytes * bandwidth):
        fail(
            "transfer_seconds combined the bytes and the bandwidth the wrong way: check the units, bytes over "
            "bytes per second is seconds."
        )
    if close(got, nbytes / (bandwidth * 1e9) + latency):
        fail("transfer_seconds divided the bandwidth by 1e9 once more: it is already in bytes per second.")
    if not close(got, latency + nbytes / bandwidth, rel=1e-6):
        fail(f"transfer_seconds(2e9, 25e9, 1e-5) returned {got:.6g}, which no copy of 2 GB over that link takes: what does "
             "a copy pay before its first byte moves, and what for each byte?")
    empty = call(transfer_seconds, 0, bandwidth, latency)
    if not is_number(empty) or not close(float(empty), latency):
        fail(f"transfer_seconds(0 bytes) returned {empty!r}; even an empty copy pays the latency ({latency} s).")


check_transfer_seconds = recorded("transfer_seconds", "transfer_seconds",
                                  [(_NBYTES, _BANDWIDTH, _LATENCY), (0, _BANDWIDTH, _LATENCY)], _judge_transfer_seconds)


# --- inferring a link from two copies, then predicting -------------------------------------------

# Two copies on a made-up link (illustrative figures, not a measurement): (bytes, seconds). The
# learner infers the link's fixed cost and bandwidth from them, then predicts many small copies
# against one big one; the judge infers the link from the same two figures.
LINK_COPIES = [(4096, 11.32e-6), (64 * 2**20, 5.254e-3)]


def _link() -> tuple[float, float]:
    """(latency, bandwidth) of the line through LINK_COPIES: both copies paid the same fixed cost."""
    (small, t_small), (big, t_big) = LINK_COPIES
    bandwidth = (big - small) / (t_big - t_small)
    return t_small - small / bandwidth, bandwidth
_COPY_KEYS = ("latency", "bandwidth", "1000 copies of 4 KiB", "1 copy of 4 MiB")


def _observe_copy_prediction(answers) -> object:
    if isinstance(answers, dict) and not answers:
        raise NotDone("COPY_PREDICTION")
    return answers


def _judge_copy_prediction(answers) -> None:
    """COPY_PREDICTION: the link's latency and bandwidth inferred from LINK_COPIES, and two predicted costs."""
    if not isinstance(answers, dict):
        fail(f"COPY_PREDICTION should be a dict with the keys {list(_COPY_KEYS)}; it is {type(answers).__name__}.")
    missing, extra = [k for k in _COPY_KEYS if k not in answers], sorted(map(repr, set(answers) - set(_COPY_KEYS)))
    if missing or extra:
        fail(f"COPY_PREDICTION needs exactly the keys {list(_COPY_KEYS)}; missing {missing}, unexpected [{', '.join(extra)}].")
    bad = [k for k in _COPY_KEYS if not is_number(answers[k]) or not float(answers[k]) > 0]
    if bad:
        fail(f"COPY_PREDICTION[{bad[0]!r}] is {answers[bad[0]]!r}; write a positive number (seconds, or bytes per second).")
    got = {k: float(answers[k]) for k in _COPY_KEYS}
    (small, t_small), (big, t_big) = LINK_COPIES
    _LINK_LATENCY, _LINK_BANDWIDTH = _link()  # noqa: N806  the link the two copies imply
    bandwidth, latency = got["bandwidth"], got["latency"]
    if close(bandwidth, _LINK_BANDWIDTH * 8, rel=0.05) or close(bandwidth, _LINK_BANDWIDTH / 1e9, rel=0.05):
        fail(f"COPY_PREDICTION['bandwidth'] = {bandwidth:.4g}: write it in bytes per second (not bits, not GB/s).")
    if close(latency, t_small * 1e6, rel=0.05) or close(latency, _LINK_LATENCY * 1e6, rel=0.05):
        fail(f"COPY_PREDICTION['latency'] = {latency:.4g}: that is microseconds; write seconds.")
    if not close(bandwidth, _LINK_BANDWIDTH, rel=0.05):
        fail("COPY_PREDICTION['bandwidth'] is not the link the two copies imply. Both copies paid the same fixed "
             "cost: what does the difference between them say about the link?")
    if not close(latency, _LINK_LATENCY, rel=0.05):
        fail("COPY_PREDICTION['latency'] is not the fixed cost the two copies imply: with the bandwidth known, "
             "what part of a copy's time is not paid for its bytes?")
    many, one = got["1000 copies of 4 KiB"], got["1 copy of 4 MiB"]
    want_many = 1000 * (_LINK_LATENCY + 4096 / _LINK_BANDWIDTH)
    want_one = _LINK_LATENCY + 4 * 2**20 / _LINK_BANDWIDTH
    if close(many, _LINK_LATENCY + 1000 * 4096 / _LINK_BANDWIDTH, rel=0.05) or close(many, want_one, rel=0.05):
        fail("Your 1000 copies of 4 KiB cost about what one copy of the same bytes costs. "
             "Every copy pays the fixed cost before its bytes move: 1000 copies pay it 1000 times.")
    if close(one, 1000 * _LINK_LATENCY + 4 * 2**20 / _LINK_BANDWIDTH, rel=0.05):
        fail("You charged the one 4 MiB copy a fixed cost per 4 KiB: the fixed cost is per copy, not per block of bytes.")
    if close(many, 1000 * _LINK_LATENCY, rel=0.005):
        fail("Your 1000 small copies pay only their fixed costs: each also moves its 4096 bytes at the link's rate.")
    if close(one, 4 * 2**20 / _LINK_BANDWIDTH, rel=0.005):
        fail("Your 4 MiB copy pays only for its bytes: even one big copy pays the fixed cost once.")
    if close(one, _LINK_LATENCY + 4e6 / _LINK_BANDWIDTH, rel=0.005):
        fail("4 MiB is 4 × 2²⁰ = 4,194,304 bytes (a KiB is 1024 bytes, a MiB 1024 KiB), not 4,000,000.")
    for key, want in (("1000 copies of 4 KiB", want_many), ("1 copy of 4 MiB", want_one)):
        if not close(got[key], want, rel=0.05):
            fail(f"COPY_PREDICTION[{key!r}] is not what your link predicts: cost each copy on the link you "
                 "inferred, then add up the copies.")


check_copy_prediction = Check("COPY_PREDICTION", _observe_copy_prediction, _judge_copy_prediction)


# --- the sync-point quiz --------------------------------------------------------------------

# label -> a line a training loop might hold. x, w: (64, 64) on the device; mask = x > 0;
# loss: a 0-dim tensor on the device; losses: a list; total: a 0-dim tensor on the device;
# x_host: (64, 64) in ordinary host memory; x_pinned: the same in pinned host memory.
SYNC_SNIPPETS = {
    "a": "value = loss.item()",
    "b": "h = torch.relu(x @ w)",
    "c": "print(loss)",
    "d": "losses.append(loss.detach())",
    "e": "if loss > 1.0:\n    pass",
    "f": "rows = x[mask]",
    "g": "y = torch.where(mask, x, 0.0)",
    "h": "n = x.shape[0]",
    "i": "arr = x.cpu().numpy()",
    "j": "total += loss.detach()",
    "k": "idx = torch.nonzero(mask)",
    "l": "msg = f'loss {loss:.3f}'",
    "m": "xb = x_host.to(device)",
    "n": "xb = x_pinned.to(device, non_blocking=True)",
    "o": "big = loss > 1.0",
    "p": "sel = torch.masked_select(x, mask)",
    "q": "u = torch.unique(x)",
}

_QUIZ_SETUP = (
    "x = torch.randn(64, 64, device=device); w = torch.randn(64, 64, device=device)\n"
    "mask = x > 0; loss = (x @ w).square().mean(); total = torch.zeros((), device=device)\n"
    "x_host = torch.randn(64, 64); x_pinned = x_host.pin_memory()"
)

# The idea each quiz line tests, in the words a failed check uses (never which label, never the answer).
_CONCEPTS = {
    "number": "turning a device tensor into a Python number (.item(), float()) needs its value on the host",
    "text": "printing a tensor, or formatting it in an f-string, needs its digits on the host",
    "branch": "an `if` on a tensor needs its truth value on the host",
    "shape": "a result whose size depends on the data (a boolean mask, nonzero) cannot be allocated until the host "
             "learns how many elements there are",
    "host copy": "copying a tensor to host memory (.cpu(), then .numpy()) needs its values there",
    "pageable": "a copy to the device from ordinary (pageable) host memory: PyTorch synchronizes the stream before "
                ".to(device) returns",
    "pinned": "a copy from pinned host memory with non_blocking=True is only queued: the host goes on at once",
    "queued": "a line that only queues more work on the device (a matmul, relu, torch.where with a mask) returns at "
              "once: nothing in Python needs its value yet",
    "on device": "keeping a value on the device (loss.detach(), adding into a device tensor) queues work or keeps a "
                 "reference; nothing is read",
    "metadata": "a tensor's shape is metadata the host already has",
    "compare": "comparing a device tensor with a number gives another device tensor: the comparison is queued like any "
               "other operation, and only using its truth value in Python would need it on the host",
}
_CONCEPT_OF = {"a": "number", "b": "queued", "c": "text", "d": "on device", "e": "branch", "f": "shape",
               "g": "queued", "h": "metadata", "i": "host copy", "j": "on device", "k": "shape", "l": "text",
               "m": "pageable", "n": "pinned", "o": "compare", "p": "shape", "q": "shape"}


@course_only("grader.checks.lesson02.snippet_reads")
def snippet_reads(label: str) -> SyncCounter:
    """Run one quiz line under a SyncCounter (a CUDA device, or a pretend one) and return the counter."""
    with SyncCounter("cuda") as counter, contextlib.redirect_stdout(io.StringIO()):
        ns = {"torch": torch, "device": counter.device, "losses": []}
        exec(_QUIZ_SETUP, ns)
        counter.events.clear()  # only the quiz line counts
        exec(compile(SYNC_SNIPPETS[label], f"<quiz {label}>", "exec"), ns)
    return counter


@course_only("grader.checks.lesson02.snippet_waits")  # outside the cache: a cached call is counted too
@functools.lru_cache(maxsize=None)
def snippet_waits(label: str) -> bool:
    """True when the counter sees the quiz line make the host wait: a read, or a blocking copy."""
    return snippet_reads(label).sync_points > 0


_QUIZ_SHORTCUTS = ("grader.checks.lesson02.snippet_reads", "grader.checks.lesson02.snippet_waits")


def _observe_answers(answers) -> object:
    from grader import shortcuts

    if isinstance(answers, dict) and not answers:
        raise NotDone("SYNC_ANSWERS")
    return {"answers": answers, "shortcuts": shortcuts.used(*_QUIZ_SHORTCUTS)}


def _judge_sync_answers(observation) -> None:
    """SYNC_ANSWERS: a dict from every snippet label to a bool, checked against what the counter sees."""
    called = observation.get("shortcuts") if isinstance(observation, dict) else None
    if called:
        fail(f"this notebook called {', '.join(map(str, called[:2]))}: the check's own answer key. Decide each line "
             "from the principle (does Python need a value, or a size, that only the device has?).")
    answers = observation.get("answers") if isinstance(observation, dict) else observation
    if not isinstance(answers, dict):
        fail(f"SYNC_ANSWERS should be a dict from label to True/False; it is {type(answers).__name__}.")
    missing = sorted(set(SYNC_SNIPPETS) - set(answers))
    extra = sorted(map(repr, set(answers) - set(SYNC_SNIPPETS)))
    if missing or extra:
        fail(f"SYNC_ANSWERS needs exactly the labels {sorted(SYNC_SNIPPETS)}; missing {missing}, unexpected "
             f"[{', '.join(extra)}].")
    not_bool = sorted(k for k, v in answers.items() if not isinstance(v, bool))
    if not_bool:
        fail(f"SYNC_ANSWERS[{not_bool[0]!r}] is {answers[not_bool[0]]!r}; answer with True or False.")
    if all(answers.values()):
        fail(
            "You answered True for every line. Most lines only queue work on the device and return at once; "
            "only a line whose Python needs a value (a number, a shape that depends on the data, text) waits."
        )
    if not any(answers.values()):
        fail("You answered False for every line: some of them need a value from the device and must wait for it.")
    wrong = [label for label in SYNC_SNIPPETS if answers[label] != snippet_waits(label)]
    if wrong:
        missed = list(dict.fromkeys(_CONCEPT_OF[label] for label in wrong))
        fail(
            f"{len(wrong)} of your {len(SYNC_SNIPPETS)} answers disagree with what the counter measures. "
            "Think again about these ideas (does each make the host wait, or not?): "
            + "; ".join(f"{_CONCEPTS[c]}" for c in missed) + "."
        )


check_sync_answers = Check("SYNC_ANSWERS", _observe_answers, _judge_sync_answers)


def _judge_answers_are(observation, want: dict, why: str) -> None:
    answers = observation.get("answers") if isinstance(observation, dict) else observation
    if not same(answers, want):
        fail(why)


answers_are = Check("quiz answers", _observe_answers, _judge_answers_are, announce=False)
answers_are.__doc__ = "Hidden test: `answers_are(SYNC_ANSWERS, want={...}, why=...)` passes when the dict equals `want`."


# --- the data and the loop the notebook starts from ------------------------------------------

FEATURES, BATCH, N_BATCHES = 8, 32, 4


def make_batches(n_batches: int = N_BATCHES, batch: int = BATCH, features: int = FEATURES, seed: int = 0):
    """(x, y) pairs on the host: x (batch, features), y (batch, 1), float32."""
    gen = torch.Generator().manual_seed(seed)
    true_w = torch.randn(features, 1, generator=gen)
    out = []
    for _ in range(n_batches):
        x = torch.randn(batch, features, generator=gen)
        out.append((x, x @ true_w + 0.1 * torch.randn(batch, 1, generator=gen)))
    return out


def make_model(features: int = FEATURES, seed: int = 1) -> torch.nn.Module:
    """A small MLP, the same weights for the same seed."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def train_buggy(model, batches, device, steps):
    """The loop the notebook starts from: copies each batch and reads the loss back every step."""
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        x, y = x.to(device), y.to(device)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@functools.lru_cache(maxsize=None)
def _buggy_losses(n_batches: int, batch: int, features: int, data_seed: int, model_seed: int, steps: int) -> tuple:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(train_buggy(make_model(features, model_seed), make_batches(n_batches, batch, features, data_seed),
                                 "cpu", steps))


def buggy_losses(n_batches: int = N_BATCHES, batch: int = BATCH, features: int = FEATURES, data_seed: int = 0,
                 model_seed: int = 1, steps: int = 16) -> list[float]:
    """The buggy loop's losses on the CPU for these data and model seeds: what train_fixed must return."""
    return list(_buggy_losses(n_batches, batch, features, data_seed, model_seed, steps))


# --- predicting sync points --------------------------------------------------------------------

LOOP_VERSIONS = ("buggy", "read once", "resident", "pinned")


def _sync_points_model(version: str, steps: int, n_batches: int) -> int:
    """What the counter measures for each of the lesson's loop versions (x and y are two copies per batch)."""
    return {"buggy": 3 * steps, "read once": 2 * steps + 1, "resident": 2 * n_batches + 1, "pinned": 1}[version]


_PREDICT_CASES = [(v, s, b) for v in LOOP_VERSIONS for s, b in ((16, 4), (6, 3), (3, 5))]  # (3, 5): fewer steps than batches


def _judge_sync_points(sync_points: Callable[[str, int, int], int]) -> None:
    """sync_points(version, steps, n_batches): the sync points the counter measures for each loop version."""
    for version, steps, n_batches in _PREDICT_CASES:
        got = call(sync_points, version, steps, n_batches)
        shown = f"sync_points({version!r}, steps={steps}, n_batches={n_batches})"
        if not is_number(got) or isinstance(got, float):
            fail(f"{shown} returned a {type(got).__name__}; return a whole number of sync points (an int).")
        want = _sync_points_model(version, steps, n_batches)
        if got == want:
            continue
        if (version, got) in (("buggy", steps), ("read once", 1), ("resident", 1)):
            fail(
                f"{shown} counts only the reads. A copy to the device from ordinary (pageable) host memory "
                "is a sync point too: PyTorch waits for the stream to drain before x.to(device) returns."
            )
        if (version, got) in (("buggy", 2 * steps), ("read once", steps + 1), ("resident", n_batches + 1)):
            fail(
                f"{shown}: each batch is two tensors, x and y, and each .to(device) is its own copy "
                "(and its own sync point when the memory is pageable)."
            )
        if version == "read once" and got == 2 * steps:
            fail(f"{shown} leaves out the one read after the loop: .tolist() waits for the device too.")
        if version == "buggy" and got == 3 * steps + 1:
            fail(f"{shown}: the buggy loop reads each loss with .item() inside the loop and returns the "
                 "list as it is; there is no extra read after the loop.")
        if version == "resident" and steps < n_batches and got == 2 * steps + 1:
            fail(
                f"{shown} copies only the batches the loop reaches. The resident loop moves the whole data "
                "set to the device before the first step, without knowing how many steps will use it: every one of "
                "the n_batches batches is copied (x and y), even with fewer steps than batches."
            )
        if version == "resident" and got in (2 * steps + 1, 2 * steps):
            fail(
                f"{shown} grows with the steps, but the resident loop copies the data set once, before the "
                "loop: its copies grow with n_batches, not with steps."
            )
        if version == "pinned" and got in (2 * steps + 1, 2 * steps, 2 * n_batches + 1):
            fail(
                f"{shown}: a copy from pinned memory with non_blocking=True does not make the host wait "
                "(and pin_memory() itself reads nothing from the device); only the read after the loop does."
            )
        fail(f"{shown} is not what the counter measures for that loop. Count, for that "
             "version, the copies from pageable memory (x and y, per step or once per batch) and the reads.")


check_sync_points = recorded("sync_points", "sync_points", _PREDICT_CASES, _judge_sync_points)


# --- the fixed training loop ----------------------------------------------------------------


class _Probe:
    """Hung on a step's graph (grad_fn.metadata): alive exactly as long as that graph is."""


def _run_loop(train_fixed: Callable, steps: int, batches, model: torch.nn.Module, label: str) -> dict:
    """The learner's loop under a SyncCounter: what it returned, its events by step, and the graphs it kept alive."""
    marks: list[int] = []  # len(counter.events) at each forward: events before mark k happened before forward k
    probes: list[weakref.ref] = []
    alive: list[int] = []  # earlier steps' graphs still alive at each forward

    def before_forward(module, args):
        marks.append(len(counter.events))
        alive.append(sum(ref() is not None for ref in probes))

    def after_forward(module, args, out):
        if isinstance(out, torch.Tensor) and out.grad_fn is not None:
            probe = _Probe()
            out.grad_fn.metadata["lesson02 probe"] = probe
            probes.append(weakref.ref(probe))

    layers = list(model.children()) or [model]  # hooks on the layers also see model.forward(x) called directly
    hooks = [layers[0].register_forward_pre_hook(before_forward), layers[-1].register_forward_hook(after_forward)]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            with SyncCounter("cuda") as counter:
                got = call(train_fixed, model, batches, counter.device, steps, label=label)
    finally:
        for hook in hooks:
            hook.remove()
    events = []
    for i, e in enumerate(counter.events[:2000]):
        line = e.where.rsplit(":", 1)[-1]
        events.append({"kind": e.kind, "op": e.op, "nbytes": e.nbytes, "blocking": e.blocking, "line": e.line[:200],
                       "lineno": int(line) if line.isdigit() else 0,
                       "phase": sum(m <= i for m in marks)})  # forwards started before this event
    if isinstance(got, torch.Tensor):
        got = got.detach()
    return {"steps": steps, "got": got, "events": events, "forwards": len(marks),
            "graphs_alive": alive[-1] if alive else 0}


def _observe_train_fixed(train_fixed: Callable) -> dict:
    require_callable(train_fixed, "train_fixed")
    batches = make_batches()
    runs = [_run_loop(train_fixed, steps, batches, make_model(), f"train_fixed(model, batches, device, steps={steps})")
            for steps in (2 * N_BATCHES, 4 * N_BATCHES)]
    return {"runs": runs, "batch_bytes": [x.nbytes + y.nbytes for x, y in batches]}


# op -> what the learner's line does, for messages
_DOING = {
    ".item()": "calls .item()",
    "float()": "calls float() on a tensor",
    "int()": "calls int() on a tensor",
    "bool() (an `if` on a tensor)": "tests a tensor in an `if` (bool() of a tensor)",
    "print()": "prints a tensor",
    "f-string": "formats a tensor in an f-string (print(f'...{loss}'))",
    ".tolist()": "calls .tolist()",
    ".numpy()": "calls .numpy()",
    ".cpu()": "calls .cpu()",
    ".to('cpu')": "calls .to('cpu')",
    "nonzero()": "calls nonzero()",
    "boolean mask": "indexes with a boolean mask",
}


def _times(n: float) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n:g} times") if float(n).is_integer() else f"{n:.2g} times"


def _shown(event: dict) -> str:
    """Where an event happened, in the learner's terms: the line number in its cell and its code."""
    return f"line {event['lineno']}: `{event['line']}`" if event["line"] else f"line {event['lineno']}"


def _count(events: list, kind: str, op: str | None = None) -> int:
    return sum(e["kind"] == kind and op in (None, e["op"]) for e in events)


def _judge_returned(run: dict) -> None:
    got, steps = run["got"], run["steps"]
    if isinstance(got, torch.Tensor):
        fail("train_fixed returned a tensor; return a list of Python floats (read them once: .tolist()).")
    if not isinstance(got, (list, tuple)) or len(got) != steps:
        size = len(got) if isinstance(got, (list, tuple, str, dict)) else "?"
        fail(f"train_fixed(steps={steps}) returned {type(got).__name__} of length {size}; return one loss per step, "
             f"{steps} in all.")
    if any(isinstance(v, torch.Tensor) for v in got):
        fail("train_fixed returned a list of tensors; return plain floats, read from the device once at the "
             "end (torch.stack(losses).tolist()).")
    if not all(is_number(v) for v in got):
        fail(f"train_fixed returned {list(got[:3])!r}...; return plain Python floats.")


def _judge_train_fixed(observation: dict) -> None:
    """train_fixed: the buggy loop's losses, no sync point inside the step loop, no graph kept alive."""
    short, long = observation["runs"]
    batch_bytes = [int(b) for b in observation["batch_bytes"]]
    for run in (short, long):
        _judge_returned(run)
    events, steps, forwards = long["events"], long["steps"], int(long["forwards"])
    if forwards < steps:
        fail(f"train_fixed(steps={steps}) called the model {forwards} times; train it for every step.")
    inside = [e for e in events if e["blocking"] and 0 < e["phase"] < forwards]  # after the first forward, before the last

    reads_inside = [e for e in inside if e["kind"] == "read"]
    if reads_inside:
        op = reads_inside[0]["op"]
        total = _count(events, "read", op)
        per_step = (total - _count(short["events"], "read", op)) / (steps - short["steps"])
        fail(
            f"your loop {_DOING.get(op, 'reads ' + op)} {_times(per_step)} per step: {total} reads for {steps} "
            f"steps ({_shown(reads_inside[0])}). Each read makes the host wait for the device to finish everything "
            "queued. Keep the losses on the device (loss.detach()) and read them all once, after the loop."
        )
    copies_inside = [e for e in inside if e["kind"] == "copy"]
    if copies_inside:
        first = copies_inside[0]
        if "non_blocking" in first["op"] or "non_blocking" in first["line"]:
            fail(
                f"your loop asks for non_blocking=True ({_shown(first)}), but the batch is in ordinary (pageable) "
                "host memory, so the copy still makes the host wait: a sync point every step. non_blocking frees "
                "the host only for pinned memory: pin the batches once, before the loop (x.pin_memory())."
            )
        blocking = sum(e["kind"] == "copy" and e["blocking"] for e in events)
        fail(
            f"your loop copies the batch to the device inside the step loop with blocking copies ({blocking} "
            f"blocking copies in {steps} steps, {_shown(first)}). From ordinary (pageable) host memory, or without "
            "non_blocking=True, PyTorch waits for the device to finish everything queued before the copy returns, "
            "so each one is a sync point. Move the batches to the device once, before the loop (or pin them "
            "before the loop and copy with non_blocking=True)."
        )
    reads = _count(events, "read")
    if reads > _count(short["events"], "read"):
        ops = ", ".join(f"{op} ×{_count(events, 'read', op)}" for op in dict.fromkeys(
            e["op"] for e in events if e["kind"] == "read"))
        fail(
            f"after the loop you read the losses one at a time ({ops} for {steps} steps): each read waits for the "
            "device. Stack them and read once: torch.stack(losses).tolist()."
        )
    if reads > 1:
        ops = ", ".join(f"{op} ×{_count(events, 'read', op)}" for op in dict.fromkeys(
            e["op"] for e in events if e["kind"] == "read"))
        fail(f"your loop reads from the device {reads} times per call ({ops}); read once, at the end.")
    copies = [e for e in events if e["kind"] == "copy"]
    if not copies:
        fail(
            "your loop never moves the batches to the device: on a GPU, model(x) with x on the host and the "
            "weights on the device fails. Move the batches with .to(device)."
        )
    copied = sum(int(e["nbytes"]) for e in copies)
    per_step = sum(batch_bytes[s % len(batch_bytes)] for s in range(steps))  # one copy of each step's batch
    if copied > max(per_step, sum(batch_bytes)):
        ratio = copied / per_step
        lines = "; ".join(dict.fromkeys(_shown(e) for e in copies))
        fail(
            f"your loop copies {copied} bytes to the device in {steps} steps, {ratio:.3g}× what the batches hold "
            f"({per_step} bytes): the batch is moved to the device {'twice' if ratio == 2 else 'more than once'} "
            f"per step ({lines}). Move it once and reuse the copy."
        )
    kept_short, kept_long = int(short["graphs_alive"]), int(long["graphs_alive"])
    if kept_long > kept_short and kept_long >= 3:
        fail(
            f"your loop keeps every step's loss with its autograd graph: at step {steps}, {kept_long} earlier "
            "steps' graphs were still alive. A tensor in a list keeps the graph that made it (its grad_fn and "
            "every node behind it), so memory grows with every step. Keep loss.detach(): the value without the "
            "graph."
        )
    reference = buggy_losses(steps=steps)
    for step, (mine, theirs) in enumerate(zip(long["got"], reference)):
        if not close(float(mine), float(theirs), rel=1e-4):
            fail(
                f"your losses differ from the buggy loop's from step {step} on. "
                "Keep the same computation (same model, optimizer, batches and order); change only where the "
                "batches are copied and when the losses are read."
            )


check_train_fixed = Check("train_fixed", _observe_train_fixed, _judge_train_fixed)


def _observe_fixed_on(train_fixed: Callable, n_batches: int, batch: int, features: int, data_seed: int,
                      model_seed: int, steps: int) -> dict:
    require_callable(train_fixed, "train_fixed")
    batches = make_batches(n_batches, batch, features, data_seed)
    return _run_loop(train_fixed, steps, batches, make_model(features, model_seed),
                     f"train_fixed(model, batches, device, steps={steps})")


def _judge_fixed_on(run: dict, want: list, why: str, **_inputs) -> None:
    forwards = int(run["forwards"])
    inside = [e for e in run["events"] if e["blocking"] and 0 < e["phase"] < forwards]
    if inside:
        fail(f"{why} (the counter found {len(inside)} sync points inside the step loop)")
    if not same(run["got"], [float(w) for w in want], rel=1e-4):
        fail(why)


fixed_on = Check("train_fixed on other data", _observe_fixed_on, _judge_fixed_on,
                 inputs=("n_batches", "batch", "features", "data_seed", "model_seed", "steps"), announce=False)
fixed_on.__doc__ = "Hidden test: train_fixed on other data and model seeds returns `want`, with no sync point inside the loop."
