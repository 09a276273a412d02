"""Checks for lesson 02 (transfers): the copy cost model, the sync-point quiz, the fixed training loop."""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Callable

import torch
import torch.nn.functional as F

from grader.checks._common import call, close, fail, is_number, passed, require_callable
from grader.syncs import SyncCounter

# --- transfer_seconds -----------------------------------------------------------------------


def check_transfer_seconds(transfer_seconds: Callable[[float, float, float], float]) -> None:
    """transfer_seconds(nbytes, bandwidth, latency) = latency + nbytes / bandwidth, in seconds."""
    require_callable(transfer_seconds, "transfer_seconds")
    nbytes, bandwidth, latency = 2e9, 25e9, 1e-5  # 2 GB over a 25 GB/s link, 10 µs fixed cost
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
        fail(f"transfer_seconds returned {got:.4g}: that is milliseconds. Return seconds.")
    if close(got, latency + 8 * nbytes / bandwidth):
        fail("transfer_seconds multiplied the bytes by 8: bandwidth here is in bytes per second, not bits.")
    if close(got, latency + bandwidth / nbytes) or close(got, latency + nbytes * bandwidth):
        fail(
            f"transfer_seconds returned {got:.4g} s for 2 GB over 25 GB/s: the time is bytes divided by "
            "bandwidth (2e9 / 25e9 = 0.08 s), plus the latency."
        )
    if close(got, nbytes / (bandwidth * 1e9) + latency):
        fail("transfer_seconds divided the bandwidth by 1e9 once more: it is already in bytes per second.")
    if not close(got, latency + nbytes / bandwidth, rel=1e-6):
        fail(f"transfer_seconds(2e9, 25e9, 1e-5) returned {got:.6g}; a copy costs latency + nbytes / bandwidth.")
    empty = call(transfer_seconds, 0, bandwidth, latency)
    if not is_number(empty) or not close(float(empty), latency):
        fail(f"transfer_seconds(0 bytes) returned {empty!r}; even an empty copy pays the latency ({latency} s).")
    passed("transfer_seconds")


# --- the sync-point quiz --------------------------------------------------------------------

# label -> a line a training loop might hold. x, w: (64, 64) on the device; mask = x > 0;
# loss: a 0-dim tensor on the device; losses: a list; total: a 0-dim tensor on the device.
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
}


def snippet_reads(label: str) -> SyncCounter:
    """Run one quiz line under a SyncCounter (any device) and return the counter."""
    with SyncCounter() as counter, contextlib.redirect_stdout(io.StringIO()):
        ns = {"torch": torch, "device": counter.device, "losses": []}
        exec(
            "x = torch.randn(64, 64, device=device); w = torch.randn(64, 64, device=device)\n"
            "mask = x > 0; loss = (x @ w).square().mean(); total = torch.zeros((), device=device)",
            ns,
        )
        exec(compile(SYNC_SNIPPETS[label], f"<quiz {label}>", "exec"), ns)
    return counter


def check_sync_answers(answers: dict) -> None:
    """SYNC_ANSWERS: a dict from every snippet label to a bool, checked against what the counter sees."""
    if not isinstance(answers, dict):
        fail(f"SYNC_ANSWERS should be a dict from label to True/False; it is {type(answers).__name__}.")
    if not answers:
        raise NotImplementedError("SYNC_ANSWERS is still empty: answer True or False for every line of the quiz.")
    missing = sorted(set(SYNC_SNIPPETS) - set(answers))
    extra = sorted(set(answers) - set(SYNC_SNIPPETS))
    if missing or extra:
        fail(f"SYNC_ANSWERS needs exactly the labels {sorted(SYNC_SNIPPETS)}; missing {missing}, unexpected {extra}.")
    not_bool = [k for k, v in answers.items() if not isinstance(v, bool)]
    if not_bool:
        fail(f"SYNC_ANSWERS[{not_bool[0]!r}] is {answers[not_bool[0]]!r}; answer with True or False.")
    if all(answers.values()):
        fail(
            "You answered True for every line. Most lines only queue work on the device and return at once; "
            "only a line whose Python needs a value (a number, a shape that depends on the data, text) waits."
        )
    if not any(answers.values()):
        fail("You answered False for every line: some of them need a value from the device and must wait for it.")
    wrong = []
    for label, code in SYNC_SNIPPETS.items():
        counter = snippet_reads(label)
        waits = counter.reads > 0
        if answers[label] != waits:
            shown = code.splitlines()[0]
            if waits:
                wrong.append(f"({label}) `{shown}` does make the host wait: the counter saw {', '.join(counter.by_op('read'))}.")
            else:
                wrong.append(
                    f"({label}) `{shown}` does not make the host wait: it only queues work (or reads metadata the "
                    "host already has); the counter saw no read."
                )
    if wrong:
        fail(f"{len(wrong)} answer(s) wrong. " + " ".join(wrong))
    passed("SYNC_ANSWERS")


# --- the fixed training loop ----------------------------------------------------------------

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
    """The loop the notebook starts from: reads the loss back every step (kept here to compare losses)."""
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


def _shown(event) -> str:
    """Where an event happened, in the learner's terms: the line number and its code when known."""
    line = event.where.rsplit(":", 1)[-1]
    return f"line {line}: `{event.line}`" if event.line else f"line {line}"


def _run_counted(train_fixed: Callable, steps: int, batches) -> tuple[list, SyncCounter]:
    """The learner's loop on a fresh model, under a SyncCounter, warnings silenced."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        with SyncCounter() as counter:
            got = call(train_fixed, make_model(), batches, counter.device, steps,
                       label=f"train_fixed(model, batches, device, steps={steps})")
    return got, counter


def _reference_losses(steps: int, batches) -> list[float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with SyncCounter() as counter:
            return train_buggy(make_model(), batches, counter.device, steps)


def check_train_fixed(train_fixed: Callable) -> None:
    """train_fixed: the buggy loop's losses, with reads that do not grow with steps and one copy per batch."""
    require_callable(train_fixed, "train_fixed")
    batches = make_batches()
    batch_bytes = [x.nbytes + y.nbytes for x, y in batches]
    short, long = 2 * N_BATCHES, 4 * N_BATCHES
    got_short, counted_short = _run_counted(train_fixed, short, batches)
    got_long, counted_long = _run_counted(train_fixed, long, batches)
    for steps, got in ((short, got_short), (long, got_long)):
        if isinstance(got, torch.Tensor):
            fail("train_fixed returned a tensor; return a list of Python floats (read them once: .tolist()).")
        if not isinstance(got, (list, tuple)) or len(got) != steps:
            fail(f"train_fixed(steps={steps}) returned {type(got).__name__} of length "
                 f"{len(got) if hasattr(got, '__len__') else '?'}; return one loss per step, {steps} in all.")
        if any(isinstance(v, torch.Tensor) for v in got):
            fail("train_fixed returned a list of tensors; return plain floats, read from the device once at the "
                 "end (torch.stack(losses).tolist()).")
        if not all(is_number(v) for v in got):
            fail(f"train_fixed returned {got[:3]!r}...; return plain Python floats.")

    grown = counted_long.by_op("read") - counted_short.by_op("read")
    if counted_long.reads > counted_short.reads:
        op, extra = grown.most_common(1)[0]
        per_step = extra / (long - short)
        event = next(e for e in counted_long.events if e.op == op)
        fail(
            f"your loop {_DOING.get(op, 'reads ' + op)} {_times(per_step)} per step: "
            f"{counted_long.by_op('read')[op]} reads for {long} steps ({_shown(event)}). Each read makes the host "
            "wait for the device to finish everything queued. Keep the losses on the device "
            "(loss.detach()) and read them all once, after the loop."
        )
    if counted_long.reads > 1:
        ops = ", ".join(f"{op} ×{n}" for op, n in counted_long.by_op("read").items())
        fail(f"your loop reads from the device {counted_long.reads} times per call ({ops}); read once, at the end.")
    if counted_long.copies == 0:
        fail(
            "your loop never moves the batches to the device: on a GPU, model(x) with x on the host and the "
            "weights on the device fails. Move each batch with .to(device)."
        )
    needed = sum(batch_bytes[s % N_BATCHES] for s in range(long))  # one copy of each step's batch
    if counted_long.bytes_copied > needed:
        ratio = counted_long.bytes_copied / needed
        lines = "; ".join(sorted({_shown(e) for e in counted_long.events if e.kind == "copy"}))
        fail(
            f"your loop copies {counted_long.bytes_copied} bytes to the device in {long} steps, {ratio:.3g}× "
            f"what the batches hold ({needed} bytes): the batch is moved to the device "
            f"{'twice' if ratio == 2 else 'more than once'} per step ({lines}). Move it once and reuse the copy."
        )
    reference = _reference_losses(long, batches)
    for step, (mine, theirs) in enumerate(zip(got_long, reference)):
        if not close(float(mine), float(theirs), rel=1e-4):
            fail(
                f"your losses differ from the buggy loop's at step {step}: {float(mine):.6g} vs {float(theirs):.6g}. "
                "Keep the same computation (same model, optimizer, batches and order); change only when the "
                "losses are read."
            )
    passed("train_fixed")
