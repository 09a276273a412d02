"""Checks for lesson 02 (transfers): the copy cost model, the sync-point quiz, predicting sync points, the fixed loop.

Every check has two halves (grader.checks._common.Check): `observe` runs the
learner's code (under the course's SyncCounter where it matters) and returns
plain data; `judge` decides from that data alone. link_from_copies and
sync_points are keyed (grader.checks._keys): their judges, which hold the
answers, are the instructor's (solutions/judges/lesson02.py), and this module
keeps only their cases, the checks that hold no answer and digests. What the
other judges compare with (which quiz lines wait, the losses of the buggy
loop) they compute here, with the course's own code, never with the learner's.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
import weakref
from typing import Callable

import torch

from grader import predictions
from grader.checks._common import (Check, Prediction, Replay, call, close, fail, guard, is_number, require_callable,
                                   same)
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson02.expect
from grader.checks._keys import Keyed
from grader.notebook import NotDone
from grader import shortcuts
from grader.checks._sealed import sealed
from grader.shortcuts import course_only
from grader.syncs import SyncCounter

LESSON = "02_transfers"  # the lesson's name in the predictions record (grader.predictions)

# --- a link from two copies: predict, then infer ----------------------------------------------

# Two copies on a made-up link (illustrative figures, not a measurement): (bytes, seconds). Neither copy alone
# gives the link: the small one is big enough that its bytes are a good part of its time, so reading its time as
# the fixed cost is wrong by more than a factor of two (COURSE.md, 02 third edition: the inference needs both).
LINK_COPIES = [(256 * 2**10, 18.92e-6), (16 * 2**20, 707.05e-6)]
KiB, MiB = 2**10, 2**20


# COPY_PREDICTION's band needs the link the two copies imply (its model is the costs on that link). It is not a
# constant here: `_implied_link` works it out from LINK_COPIES, and it is watched (called from a cell before the first
# guess, it counts as asking for the answer). link_from_copies' check does not use it: its answer is judged by digests.


@course_only()
@sealed(LESSON, "COPY_PREDICTION")
def _implied_link() -> tuple[float, float]:
    """Part of COPY_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "COPY_PREDICTION")
def _costs(latency: float, bandwidth: float) -> dict:
    """Part of COPY_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@sealed(LESSON, "COPY_PREDICTION")
def _naive() -> tuple[float, float]:
    """Part of COPY_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


_COPY_KEYS = {"1000 copies of 4 KiB": "number", "1 copy of 4 MiB": "number"}
_COPY_TIGHT = 0.15  # COPY_PREDICTION's full band: both costs within a factor 1.15 of the two copies' link


@course_only()
@sealed(LESSON, "COPY_PREDICTION")
def _copy_mistake(got: dict) -> str | None:
    """Part of COPY_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "COPY_PREDICTION")
def _copy_band(first: dict, context: dict) -> tuple[float, str]:
    """Part of COPY_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "COPY_PREDICTION")
def _copy_model(context: dict) -> str:
    """Part of COPY_PREDICTION's model or its feedback: sealed (grader.checks._sealed)."""


def timing_text(seconds: float) -> str:
    from grader.timing import format_seconds

    return format_seconds(seconds)


check_copy_prediction = Prediction(LESSON, "COPY_PREDICTION", _COPY_KEYS, points=1, band=_copy_band,
                                   mistakes=lambda answer, context: _copy_mistake(answer), model=_copy_model,
                                   watch=(_copy_mistake, _costs, _implied_link))


# link_from_copies: the learner's inference, from runs of copies the way a benchmark times them: a run is `copies`
# copies of `bytes_per_copy` bytes, one after another, and the seconds the whole run took. Each on an exact line.
def _runs_on(latency: float, bandwidth: float, runs) -> list:
    return [(k, n, k * (latency + n / bandwidth)) for k, n in runs]


def runs_of(copies) -> list:
    """(bytes, seconds) copies as runs of one copy each: (1, bytes, seconds)."""
    return [(1, n, t) for n, t in copies]


_BENCH = _runs_on(5e-6, 12e9, [(1000, 4 * KiB), (10, 1 * MiB), (1, 64 * MiB)])  # many small copies, few big ones
_FIT_CASES = [
    (runs_of(LINK_COPIES),),  # section 1's two copies, one copy a run
    (_BENCH,),
    (list(reversed(_BENCH)),),  # the same runs in another order
    (_runs_on(2e-6, 50e9, [(250, 4 * KiB), (1, 1 * MiB)]),),  # about the same bytes in each run
    (_runs_on(20e-6, 6e9, [(64, 64 * KiB), (8, 8 * MiB), (64, 8 * MiB)]),),  # two runs of one copy size
]

# A benchmark's runs for the lesson's table after the check (made-up figures on a made-up link, like _FIT_CASES):
# each run's bytes over its seconds is the bandwidth a naive reading of the benchmark reports.
BENCH_RUNS = _runs_on(10e-6, 25e9, [(10000, 1 * KiB), (1000, 16 * KiB), (100, 256 * KiB), (10, 4 * MiB), (1, 64 * MiB)])


# The answer of link_from_copies is not here: it is judged by digests (grader.checks._keys), made by
# scripts/build_keys.py from the instructor's judge (solutions/judges/lesson02.py, never released).


def _fit_label(runs) -> str:
    return f"link_from_copies({len(runs)} runs)"


def _public_link_from_copies(fit: Replay) -> None:
    """What can be said of link_from_copies without its answer: a pair of numbers."""
    for (runs,) in _FIT_CASES:
        got = call(fit, runs, label=_fit_label(runs))
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(is_number(v) for v in got):
            fail(f"link_from_copies returned {type(got).__name__} {_q(got)}; return a pair of numbers: "
                 "(latency in seconds, bandwidth in bytes per second).")


def _hints_link_from_copies(fit: Replay) -> None:
    """An unknown answer that depends on the runs' order, or is not positive."""
    (first,), (reversed_,) = _FIT_CASES[1:3]
    if [float(v) for v in call(fit, first)] != [float(v) for v in call(fit, reversed_)]:
        fail("link_from_copies gives another link when the same runs come in another order: it must not depend "
             "on which run is listed first.")
    for (runs,) in _FIT_CASES:
        if any(float(v) <= 0 for v in call(fit, runs)):
            fail(f"{_fit_label(runs)} returned a fixed cost or a rate that is not positive: every copy takes longer "
                 "than nothing, and a bigger copy longer than a smaller one.")


def _q(value) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


check_link_from_copies = Keyed(
    LESSON, "link_from_copies", "link_from_copies", _FIT_CASES, public=_public_link_from_copies,
    hints=_hints_link_from_copies, floats=True,
    unknown="link_from_copies is not the link those runs crossed, nor a mistake the course knows. Go back to section "
            "1 (what does one copy pay whatever its size, and what grows with its bytes?), and to what a run of "
            "several copies is.")


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
    "r": "xb = x_host.to(device, non_blocking=True)",
}

_QUIZ_SETUP = (
    "x = torch.randn(64, 64, device=device); w = torch.randn(64, 64, device=device)\n"
    "mask = x > 0; loss = (x @ w).square().mean(); total = torch.zeros((), device=device)\n"
    "x_host = torch.randn(64, 64); x_pinned = x_host.pin_memory()"
)

@course_only()
@sealed(LESSON, "SYNC_ANSWERS")
def _concepts() -> dict[str, str]:
    """The idea each quiz line tests, in the words a failed check uses: a question, never which label, never the
    answer. Each names the code it is about, so which lines it covers: sealed (grader.checks._sealed)."""


@course_only()
@sealed(LESSON, "SYNC_ANSWERS")
def _concept_of() -> dict[str, str]:
    """Each quiz label's idea (a key of _concepts()). Which lines share an idea says which share an answer: sealed
    (grader.checks._sealed)."""


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


# The quiz's reveal runs each kind of line alone under the counter. The lines are fixed here (not a cell's argument),
# so the reveal cannot be turned into a counter of a learner's own code before sync_points is checked.
PROBES = {
    "loss.item()": "loss.item()",
    "float(loss)": "float(loss)",
    "int(n)": "int(n)",
    "if loss > 0:": "if loss > 0:\n    pass",
    "print(loss)": "print(loss)",
    "f'{loss:.3f}'": "f'{loss:.3f}'",
    "x.cpu()": "x.cpu()",
    "x_host.numpy()": "x_host.numpy()",
    "x.tolist()": "x.tolist()",
    "torch.nonzero(mask)": "torch.nonzero(mask)",
    "x[mask]": "x[mask]",
    "x_host.to(device)": "x_host.to(device)",
    "x_pinned.to(device, non_blocking=True)": "x_pinned.to(device, non_blocking=True)",
    "x_host.to(device, non_blocking=True)": "x_host.to(device, non_blocking=True)",
    "x @ x": "x @ x",
    "torch.where(mask, x, 0)": "torch.where(mask, x, 0.0)",
}


@course_only("grader.checks.lesson02.probe_rows")
def probe_rows() -> list[dict]:
    """The quiz's reveal: each line of PROBES run alone under a counter (x_host pageable, x_pinned pinned, x on the
    device)."""
    rows = []
    for shown, code in PROBES.items():
        with SyncCounter("cuda") as probe, contextlib.redirect_stdout(io.StringIO()):  # print(loss) prints nothing here
            setup = {"torch": torch, "device": probe.device}
            exec("x_host = torch.randn(4, 4); x_pinned = x_host.pin_memory(); x = x_host.to(device); mask = x > 0; "
                 "loss = x.sum(); n = mask.sum()", setup)
            probe.events.clear()  # count only the line itself
            exec(compile(code, "<probe>", "exec"), setup)
        rows.append({"line": shown, "host waits": "yes" if probe.sync_points else "no", "reads": probe.reads,
                     "copies to device": probe.copies, "bytes copied": probe.bytes_copied,
                     "counted as": ", ".join(probe.by_op()) or "—", "pretend": probe.pretend,
                     "device": str(probe.device)})
    return rows


@course_only()
@sealed(LESSON, "SYNC_ANSWERS")
def show_probes() -> None:
    """The quiz's reveal, once your answers are recorded: each kind of line alone under the counter (probe_rows), and
    what the lines that wait have in common. Here, not in the cell, and sealed: that is the quiz's answer. Called
    before a first guess, it is the deliberate reveal."""


@course_only()
@sealed(LESSON, "SYNC_ANSWERS")
def _doing(op: str) -> str:
    """What the learner's line does, for train_fixed's messages, by the op the counter reported. Its keys are the
    quiz's reads, so sealed (grader.checks._sealed)."""


_QUIZ_SHORTCUTS = ("grader.checks.lesson02.snippet_reads", "grader.checks.lesson02.snippet_waits")


@course_only()
def _quiz_right(answers: dict) -> int:
    return sum(answers[label] == snippet_waits(label) for label in SYNC_SNIPPETS)


@course_only()
def _quiz_mistakes(answers: dict) -> str | None:
    """The ideas behind the lines answered wrongly (never which labels, never the answers); None when all agree."""
    if all(answers[k] for k in SYNC_SNIPPETS):
        return ("you answered True for every line: go back to section 2's principle, and ask of each line what its "
                "Python needs from the device")
    if not any(answers[k] for k in SYNC_SNIPPETS):
        return ("you answered False for every line: go back to section 2's principle, and ask of each line what its "
                "Python needs from the device")
    wrong = [label for label in SYNC_SNIPPETS if answers[label] != snippet_waits(label)]
    if not wrong:
        return None
    concept_of, concepts = _concept_of(), _concepts()
    missed = list(dict.fromkeys(concept_of[label] for label in wrong))
    return "think again about these ideas: " + "; ".join(concepts[c] for c in missed)


@course_only()
def _quiz_band(first: dict, context: dict) -> tuple[float, str]:
    """Each line earns its share: all right 1; one or two wrong 2/3; three or four 1/3; more (or all one answer) 0."""
    wrong = len(SYNC_SNIPPETS) - _quiz_right(first)
    mistake = _quiz_mistakes(first)
    if mistake is not None and mistake.startswith("you answered"):
        return 0.0, f"your first guess: {mistake}"
    fraction = 1.0 if wrong == 0 else 2 / 3 if wrong <= 2 else 1 / 3 if wrong <= 4 else 0.0
    return fraction, ("your first guess agrees with the counter on every line" if mistake is None
                      # the kinds of idea missed, never how many lines: a count is a distance, and single flips of
                      # a made-up guess walked it to every answer in 19 tries (round 3's copy test)
                      else f"your first guess disagrees with the counter on some lines; {mistake}")


class _Quiz(Prediction):
    """SYNC_ANSWERS: a prediction of what the counter measures on each line; its answer key noticed if called."""

    def _observe(self, answer):
        from grader import shortcuts

        called = shortcuts.used(*_QUIZ_SHORTCUTS)
        if called:
            fail(f"this notebook called {', '.join(called[:2])}: the check's own answer key. Decide each line "
                 "from the principle (does Python need a value, or a size, that only the device has?).")
        return super()._observe(answer)


check_sync_answers = _Quiz(LESSON, "SYNC_ANSWERS", {label: "bool" for label in SYNC_SNIPPETS}, points=2,
                           band=_quiz_band, mistakes=lambda answer, context: _quiz_mistakes(answer),
                           model=lambda context: ", ".join(f"({k}) {'waits' if snippet_waits(k) else 'does not wait'}"
                                                           for k in SYNC_SNIPPETS),
                           # the answer key, and the counter that measures it: entered from a cell before the first
                           # guess, it measures the answer, and counts as asking for it
                           watch=(_quiz_mistakes, _quiz_right, _concepts, _concept_of, snippet_waits, snippet_reads, probe_rows,
                                  show_probes, _doing, SyncCounter.__enter__))


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
    """The loop the notebook starts from: copies each batch, leaves the outlier rows out of the loss through a boolean
    mask, and reads the loss back every step."""
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        x, y = x.to(device), y.to(device)
        keep = (y - y.mean()).abs() <= 2 * y.std()  # rows whose target is an outlier are left out of the loss
        loss = (model(x) - y)[keep].square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# The other versions of the loop, run by the lesson's table after train_fixed is checked. Two of them are what
# train_fixed asks for, so they live here, not in a cell a learner reads before the check, and a train_fixed that
# calls one is noticed (grader.shortcuts.guard).


@course_only("grader.checks.lesson02.train_read_once")
def train_read_once(model, batches, device, steps):
    """The usual first fix: no read inside the loop; the batches still copied inside it."""
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        x, y = x.to(device), y.to(device)
        keep = (y - y.mean()).abs() <= 2 * y.std()
        loss = (model(x) - y)[keep].square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


@course_only("grader.checks.lesson02.train_resident")
def train_resident(model, batches, device, steps):
    """The data set on the device before the loop; nothing read inside it."""
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    on_device = [(x.to(device), y.to(device)) for x, y in batches]
    losses = []
    for step in range(steps):
        x, y = on_device[step % len(on_device)]
        keep = (y - y.mean()).abs() <= 2 * y.std()
        loss = (model(x) - y)[keep].square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


@course_only("grader.checks.lesson02.train_pinned")
def train_pinned(model, batches, device, steps):
    """Each batch pinned before the loop and copied every step without the host waiting; nothing read inside it."""
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    pin = torch.device(device).type == "cuda"  # pinning is for CUDA copies (the counter models it without one)
    pinned = [(x.pin_memory(), y.pin_memory()) if pin else (x, y) for x, y in batches]
    losses = []
    for step in range(steps):
        x, y = pinned[step % len(pinned)]
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        keep = (y - y.mean()).abs() <= 2 * y.std()
        loss = (model(x) - y)[keep].square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).tolist()


WAYS_OUT = {  # shown after train_fixed is checked (the lesson's section 4)
    "resident": "the whole data set moved to the device once, before the loop; the loop copies nothing (when the "
                "data fits in device memory, as small data sets do). The outlier mask is still indexed every step",
    "pinned": "each batch pinned once, before the loop, and copied every step with non_blocking=True: the host "
              "queues the copy and goes on queuing the step's kernels; the copy still runs in order with them on the "
              "one stream they share (section 5 shows what it takes to run it beside them). The mask is still "
              "indexed every step",
}


@functools.lru_cache(maxsize=None)
def _buggy_run(n_batches: int, batch: int, features: int, data_seed: int, model_seed: int, steps: int) -> tuple:
    """The buggy loop on the CPU: (its losses, the fingerprint of the model it trained)."""
    model = make_model(features, model_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        losses = train_buggy(model, make_batches(n_batches, batch, features, data_seed), "cpu", steps)
    return tuple(losses), tuple(_fingerprint(model))


def buggy_losses(n_batches: int = N_BATCHES, batch: int = BATCH, features: int = FEATURES, data_seed: int = 0,
                 model_seed: int = 1, steps: int = 16) -> list[float]:
    """The buggy loop's losses on the CPU for these data and model seeds: what train_fixed must return."""
    return list(_buggy_run(n_batches, batch, features, data_seed, model_seed, steps)[0])


@functools.lru_cache(maxsize=None)
def _all_rows_losses(steps: int) -> tuple:
    """A known mistake's losses: the outlier rows zeroed out of the error, but the mean taken over every row."""
    model, batches = make_model(), make_batches()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        keep = (y - y.mean()).abs() <= 2 * y.std()
        loss = ((model(x) - y) * keep).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return tuple(losses)


# --- predicting sync points --------------------------------------------------------------------

LOOP_VERSIONS = ("buggy", "read once", "resident", "pinned")


_PREDICT_CASES = [(v, s, b) for v in LOOP_VERSIONS for s, b in ((16, 4), (6, 3), (3, 5))]  # (3, 5): fewer steps than batches

# The answer of sync_points is not here: it is judged by digests (grader.checks._keys), made by scripts/build_keys.py
# from the instructor's judge (solutions/judges/lesson02.py, never released).


def _sync_label(version: str, steps: int, n_batches: int) -> str:
    return f"sync_points({version!r}, steps={steps}, n_batches={n_batches})"


def _public_sync_points(sync_points: Replay) -> None:
    """What can be said of sync_points without its answer: a whole number, not negative."""
    for version, steps, n_batches in _PREDICT_CASES:
        shown = _sync_label(version, steps, n_batches)
        got = call(sync_points, version, steps, n_batches, label=shown)
        if not is_number(got) or isinstance(got, float):
            fail(f"{shown} returned a {type(got).__name__}; return a whole number of sync points (an int).")
        if got < 0:
            fail(f"{shown} returned {got}: a count of sync points is not negative.")


# sync_points predicts what the counter measures: one that runs the loops under the counter measures instead (a copy
# test passed that way), and is noticed; so is a cell that ran them under the counter before the check (a copy test
# measured the four loops in an earlier cell and looked the counts up).
check_sync_points = guard(Keyed(
    LESSON, "sync_points", "sync_points", _PREDICT_CASES, public=_public_sync_points,
    unknown="sync_points is not what the counter measures for every loop version, nor a mistake the course knows. "
            "Go back to section 2 for what makes the host wait, then walk through each version: where is each such "
            "line, and how many times does it run?"),
    "sync_points", {SyncCounter: "grader.syncs.SyncCounter", **shortcuts.ELSEWHERE}, earlier=("grader.syncs.SyncCounter",))


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
            "graphs_alive": alive[-1] if alive else 0, "weights": _fingerprint(model)}


def _fingerprint(model: torch.nn.Module) -> list[float]:
    """The model's weights as a few numbers (each parameter's sum and sum of squares), read after the loop."""
    with torch.no_grad():
        return [float(v) for p in model.parameters() for v in (p.detach().double().sum(), p.detach().double().square().sum())]


def _buggy_weights(steps: int) -> tuple:
    """The fingerprint of the model the buggy loop trains for `steps` steps on the check's data (CPU)."""
    return _buggy_run(N_BATCHES, BATCH, FEATURES, 0, 1, steps)[1]


def _observe_train_fixed(train_fixed: Callable) -> dict:
    require_callable(train_fixed, "train_fixed")
    batches = make_batches()
    runs = [_run_loop(train_fixed, steps, batches, make_model(), f"train_fixed(model, batches, device, steps={steps})")
            for steps in (2 * N_BATCHES, 4 * N_BATCHES)]
    return {"runs": runs, "batch_bytes": [x.nbytes + y.nbytes for x, y in batches]}


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
        fail("train_fixed returned a tensor; return a list of Python floats, one per step.")
    if not isinstance(got, (list, tuple)) or len(got) != steps:
        size = len(got) if isinstance(got, (list, tuple, str, dict)) else "?"
        fail(f"train_fixed(steps={steps}) returned {type(got).__name__} of length {size}; return one loss per step, "
             f"{steps} in all.")
    if any(isinstance(v, torch.Tensor) for v in got):
        fail("train_fixed returned a list of tensors; return plain Python floats, one per step.")
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
            f"your loop {_doing(op)} {_times(per_step)} per step: {total} reads for {steps} "
            f"steps ({_shown(reads_inside[0])}). Each read makes the host wait for the device to finish everything "
            "queued (section 2)."
        )
    copies_inside = [e for e in inside if e["kind"] == "copy"]
    if copies_inside:
        first = copies_inside[0]
        if "non_blocking" in first["op"] or "non_blocking" in first["line"]:
            fail(
                f"your loop asks for non_blocking=True ({_shown(first)}), but the batch is in ordinary (pageable) "
                "host memory, so the copy still makes the host wait: a sync point every step (section 2 says when "
                "non_blocking frees the host)."
            )
        blocking = sum(e["kind"] == "copy" and e["blocking"] for e in events)
        fail(
            f"your loop copies the batch to the device inside the step loop with blocking copies ({blocking} "
            f"blocking copies in {steps} steps, {_shown(first)}). PyTorch waits for the device to finish "
            "everything queued before such a copy returns, so each one is a sync point (section 2)."
        )
    reads = _count(events, "read")
    if reads > _count(short["events"], "read"):
        ops = ", ".join(f"{op} ×{_count(events, 'read', op)}" for op in dict.fromkeys(
            e["op"] for e in events if e["kind"] == "read"))
        fail(
            f"after the loop you read the losses one at a time ({ops} for {steps} steps): each read waits for the "
            "device, and the reads grow with the steps."
        )
    after = [e for e in events if e["kind"] == "read" and e["phase"] >= forwards]
    if len(after) > 1:
        ops = ", ".join(f"{op} ×{sum(e['op'] == op for e in after)}" for op in dict.fromkeys(e["op"] for e in after))
        fail(f"your loop reads from the device {len(after)} times after the loop ({ops}): each read waits for the device.")
    copies = [e for e in events if e["kind"] == "copy"]
    if not copies:
        fail(
            "your loop never moves the batches to the device: on a GPU, model(x) with x on the host and the "
            "weights on the device fails."
        )
    copied = sum(int(e["nbytes"]) for e in copies)
    per_step = sum(batch_bytes[s % len(batch_bytes)] for s in range(steps))  # one copy of each step's batch
    if copied > max(per_step, sum(batch_bytes)):
        ratio = copied / per_step
        lines = "; ".join(dict.fromkeys(_shown(e) for e in copies))
        fail(
            f"your loop copies {copied} bytes to the device in {steps} steps, {ratio:.3g}× what the batches hold "
            f"({per_step} bytes): the batch is moved to the device {'twice' if ratio == 2 else 'more than once'} "
            f"per step ({lines})."
        )
    kept_short, kept_long = int(short["graphs_alive"]), int(long["graphs_alive"])
    if kept_long > kept_short and kept_long >= 3:
        fail(
            f"your loop keeps every step's loss with its autograd graph: at step {steps}, {kept_long} earlier "
            "steps' graphs were still alive. A tensor in a list keeps the graph that made it (its grad_fn and "
            "every node behind it), so memory grows with every step (section 7)."
        )
    reference = buggy_losses(steps=steps)
    if not same([float(v) for v in long["got"]], list(reference), rel=1e-4) and same(
            [float(v) for v in long["got"]], list(_all_rows_losses(steps)), rel=1e-4):
        fail("your losses differ from the buggy loop's: your loss is a mean over every row of the batch, the outlier "
             "rows included, which the buggy loop's loss leaves out (what does its mean divide by?).")
    for step, (mine, theirs) in enumerate(zip(long["got"], reference)):
        if not close(float(mine), float(theirs), rel=1e-4):
            fail(
                f"your losses differ from the buggy loop's from step {step} on: train_fixed does the same "
                "training (same model, optimizer, batches and order)."
            )
    weights = long.get("weights")  # copy test r4: a copy of the model trained elsewhere, the model given never trained
    if not (isinstance(weights, list) and len(weights) == len(_buggy_weights(steps))
            and all(is_number(w) and (close(float(w), t, rel=1e-3) or abs(float(w) - t) < 1e-6)
                    for w, t in zip(weights, _buggy_weights(steps)))):
        fail(f"train_fixed(steps={steps}) returned the buggy loop's losses, but the model it was handed is not the "
             "model those steps train: the check reads that model's weights after your loop. Train the model you "
             "are given, on the device you are given.")


check_train_fixed = guard(Check("train_fixed", _observe_train_fixed, _judge_train_fixed), "train_fixed",
                          {train_resident: "grader.checks.lesson02.train_resident",
                           train_pinned: "grader.checks.lesson02.train_pinned",
                           train_read_once: "grader.checks.lesson02.train_read_once",
                           # a copy test ran the buggy loop in a thread, where the counter (thread-local) saw nothing
                           **shortcuts.ELSEWHERE})


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
