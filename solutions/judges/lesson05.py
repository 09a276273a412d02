"""The instructor's judges of lesson 05's keyed checks (busy_fraction, top_ops, idle_by_cause, diagnose, mfu): they
hold the answers, so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson05.py) and keeps
only digests and messages in grader/checks/keys/05_reading_the_machine.json; the learner's checks
(grader/checks/lesson05.py) judge by those. A message names the kind of mistake and the principle, never the
expected value nor the formula. The cases stay in the package: they are inputs, not answers.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from grader.checks._common import call, close, fail, is_number
from grader.checks.lesson05 import (_ADAM, _B_CLIP, _B_EMPTY, _B_NESTED, _B_OUTSIDE, _B_OVERLAP, _B_SIMPLE, _B_SORTED,
                                    _B_SPAN, _B_UNSORTED,
                                    _BUSY_CASES, _D, _DIAGNOSE_NAMES, _GEMM, _IDLE, _SOFTMAX, _TOP_CASES, ANSWERS,
                                    _MFU_MODELS, MFU_MODEL_WORDS, _RATIOS, _loader_texts, _SMALL_TOKENS, CPU_ROWS, CUDA_ROWS, _as_pair,
                                    _idle_call, _public_mfu, _small_transformer, describe)

# --- diagnose ----------------------------------------------------------------------------------------

_DIAGNOSE_WANT = {  # name of the package's reading (lesson05._D): the answer, with why
    "at_cap": "busy",  # dense bf16 matmuls at the power cap (sw_power_cap); nvidia-smi's used is the allocator's reserve
    "oom_idle": "near-oom", "oom_busy": "near-oom",  # torch's peak at nearly the whole card comes first
    "waiting_full": "waiting",  # a kernel in a small share of the samples, however full nvidia-smi's memory looks
    "tiny": "tiny-kernels",  # a fifth of the limit at full utilisation
    "t4_cap": "busy", "same_watts_big": "tiny-kernels", "same_share_big": "busy",  # the share of the limit, not watts
    "hot": "slowed", "hot_sw": "slowed",  # heat; the clock halved draws less power
    "hw_slow": "slowed", "brake": "slowed",  # held down all along: a fault
    "flash": "busy",  # one sample in 30: a clock change, not a fault
    "mid": "busy",  # three quarters of the limit: the chip works
    "oom_hot": "near-oom", "oom_tiny": "near-oom",  # torch's peak at nearly the card, beside a slowdown, beside low power
}


# What each of the package's readings is (lesson05._D labels them neutrally, in this order: the names say the answer)
_READING = dict(zip(_DIAGNOSE_WANT, (_D[label] for label in _DIAGNOSE_NAMES), strict=True))


def _diagnose(diagnose: Callable) -> None:
    """diagnose: what ends the run, then what wastes it; torch's peak, utilisation, lasting slowdowns, power share."""
    got = {n: call(diagnose, _READING[n]) for n in _DIAGNOSE_WANT}
    for n, answer in got.items():
        if answer not in ANSWERS:
            fail(f"diagnose({describe(_READING[n])}) returned {answer!r}; return exactly one of {list(ANSWERS)}.")

    def was(n: str) -> str:
        return f"diagnose({describe(_READING[n])}) returned {got[n]!r}"

    def off(want: str, *names: str) -> str | None:
        """The first of `names` whose answer is not `want`, or None."""
        return next((n for n in names if got[n] != want), None)

    if got["at_cap"] == "near-oom" or got["waiting_full"] == "near-oom":
        n = "at_cap" if got["at_cap"] == "near-oom" else "waiting_full"
        fail(f"{was(n)}: you read nvidia-smi's memory.used as the OOM signal. It counts the CUDA context, everything "
             "PyTorch's caching allocator holds (what the run's peak once needed, plus rounding and fragmentation) and "
             "memory allocated outside the allocator: a full-looking card says nothing about the next allocation.")
    if got["oom_idle"] != "near-oom" and got["oom_busy"] == "near-oom":
        fail(f"{was('oom_idle')}: you read the utilisation before the memory. torch's peak allocated is nearly the "
             "whole card: the run is one longer sequence away from an out-of-memory error.")
    if n := off("near-oom", "oom_idle", "oom_busy", "oom_hot", "oom_tiny"):
        fail(f"{was(n)}: torch's peak allocated is nearly all of the card's memory. peak_allocated_mib and total_mib "
             "are both MiB: their ratio is a fraction of the card, and a run that peaks this close to the total is "
             "near an OOM whatever else the reading says.")
    if got["waiting_full"] != "waiting":
        if got["tiny"] == "waiting" or got["mid"] == "waiting":
            fail("diagnose returned 'waiting' for a GPU at full utilisation: utilisation is the share of time a kernel "
                 "ran, so a GPU that waits reads low, not high.")
        idle = (f"{was('waiting_full')}: a kernel ran in only a small share of the samples, so the GPU sat idle most "
                "of the time, waiting for the host or for data.")
        if got["waiting_full"] == "tiny-kernels":  # copy test r25: told util_pct is a percent, which it had read so
            # the same answers come from reading the power first and from util_pct read as a fraction: name both
            fail(f"{idle} Two readings lead here: an idle GPU draws little power too (which of the two numbers says "
                 "why it is low?), and util_pct is a percent (0 to 100), not a fraction.")
        fail(f"{idle} util_pct is a percent (0 to 100), not a fraction.")
    if got["same_share_big"] == "slowed" or got["mid"] == "slowed":
        fail(f"{was('same_share_big')}: you called a high power draw a fault. Sitting at the power cap is the normal "
             "state of dense tensor-core work: the chip draws all it may, and the firmware trims the clock to stay "
             "under the limit (sw_power_cap). A fault is told by the event reasons, not by the power.")
    if got["at_cap"] == "slowed" or got["t4_cap"] == "slowed":
        fail(f"{was('at_cap')}: an SM clock below its maximum says the chip slowed, not why, and the reason here is "
             "sw_power_cap: the firmware holding power at the limit, the healthy state of dense work. Only a reason "
             "from outside the workload (heat, a hardware slowdown, a power brake) is a fault.")
    if got["flash"] == "slowed":
        fail(f"{was('flash')}: hw_slowdown was active in one sample of thirty, with the clock at its maximum. nvidia-smi "
             "notes that hw_slowdown may flash on while the chip changes its P-state or clock: a fault is a reason "
             "that persists through the trace.")
    if got["hot"] == "tiny-kernels" and got["hot_sw"] == "slowed":
        fail(f"{was('hot')}: you read the power share before the event reasons. A chip slowed by heat runs its clock "
             "lower, so it draws less power too: the low power is the slowdown's effect, not tiny kernels.")
    if n := off("slowed", "hot_sw", "hot"):
        fail(f"{was(n)}: a thermal slowdown is active all through the trace (reading['reasons']): the chip is too hot "
             "and lowered its clock, a cooling fault.")
    if n := off("slowed", "hw_slow", "brake"):
        fail(f"{was(n)}: hw_slowdown (and hw_power_brake_slowdown) held the clock far below its maximum all through "
             "the trace. They are not thermal by name, but they are faults all the same: the hardware cut the clock "
             "for a reason outside the workload (too hot, a power draw too high, the system's power brake).")
    if got["tiny"] == "busy":
        fail(f"{was('tiny')}: high utilisation alone does not mean the chip is busy. Utilisation counts the time at "
             "least one kernel ran, however small; a chip that draws a small share of its power limit at full "
             "utilisation is running kernels too small to use it.")
    if got["mid"] == got["at_cap"] == "tiny-kernels":
        fail("diagnose called a chip drawing most of its power limit 'tiny-kernels': power_w / power_limit_w is a "
             "fraction (0 to 1), not a percent.")
    if got["t4_cap"] != got["same_share_big"] or got["same_watts_big"] == got["t4_cap"]:
        fail(f"diagnose gave {got['t4_cap']!r} for 68 W on a 70 W card, {got['same_watts_big']!r} for 68 W on a 700 W "
             f"card and {got['same_share_big']!r} for 680 W on a 700 W card: you compared absolute watts. What a watt "
             "means depends on the card.")
    for n in _DIAGNOSE_WANT:
        if got[n] != _DIAGNOSE_WANT[n]:
            fail(f"{was(n)}. Go back over what each number of section 1 measures, which of them can mislead, and "
                 "what comes first when several apply.")


# --- busy_fraction -----------------------------------------------------------------------------------


def _busy_reference(intervals, start: float, end: float) -> float:
    """The share of [start, end] covered by at least one interval."""
    busy, reached = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, reached), min(b, end)
        if b > a:
            busy, reached = busy + b - a, b
    return busy / (end - start)


def _busy_fraction(busy_fraction: Callable) -> None:
    """busy_fraction: the share of [start, end] covered by at least one interval."""
    got = {i: call(busy_fraction, *case) for i, case in enumerate(_BUSY_CASES)}
    for i, value in got.items():
        if not is_number(value):
            fail(f"busy_fraction{_BUSY_CASES[i]} returned {value!r} ({type(value).__name__}); return a float from 0 to 1.")
    simple, overlap, clip, span, outside, empty, nested, unsorted, ordered = (float(got[i]) for i in range(len(_BUSY_CASES)))
    if close(simple, 50.0):
        fail(f"busy_fraction{_B_SIMPLE} returned {simple!r}: a share is a fraction from 0 to 1, not a percent.")
    if overlap > 1.0 or close(overlap, 1.75) or close(nested, 1.1):
        fail(f"busy_fraction{_B_OVERLAP} returned {overlap!r}, more than the whole window: you summed intervals that "
             "overlap. Kernels on two streams run at the same time, and a moment when two run counts once: "
             "utilisation is the share of the window in which at least one kernel ran.")
    if close(clip, 1.0) or close(outside, 0.275):
        fail(f"busy_fraction{_B_CLIP} returned {clip!r}: the intervals were not clipped to the window. A kernel that "
             "started before the window opened, or ran on after it closed, was busy inside the window only for the "
             "part between start and end.")
    if close(span, 2 / 3) or close(simple, 2 / 3):
        fail(f"busy_fraction{_B_SPAN} returned {span!r}: you divided by the intervals' span (first start to last end), "
             "not by the window. Idle time before the first kernel and after the last is idle time too.")
    if not close(unsorted, ordered) and close(ordered, _busy_reference(*_B_SORTED)):
        fail(f"busy_fraction{_B_UNSORTED} returned {unsorted!r}, though the same kernels listed by start time gave the "
             "right share: your function reads the intervals in the order they come. Two streams' kernels overlap, "
             "and a profile lists them in the order it read its buffers, not the order they ran.")
    for value, case in ((simple, _B_SIMPLE), (overlap, _B_OVERLAP), (clip, _B_CLIP), (span, _B_SPAN),
                        (outside, _B_OUTSIDE), (empty, _B_EMPTY), (nested, _B_NESTED), (unsorted, _B_UNSORTED),
                        (ordered, _B_SORTED)):
        if not math.isclose(value, _busy_reference(*case), rel_tol=1e-9, abs_tol=1e-12):
            fail(f"busy_fraction{case} returned {value!r}: not the share of the window in which at least one interval "
                 "ran. Go back to section 2: what utilisation counts, moment by moment, and try this case by hand.")


# --- top_ops -----------------------------------------------------------------------------------------


def _top_reference(rows: list[dict], n: int) -> list[str]:
    """The answer: host operator rows (no labels, kernels or runtime calls) by self time, each once."""
    from grader.profiling import is_runtime_call

    ops = [r for r in rows if not r["is_label"] and r.get("device_type", "CPU") == "CPU" and not is_runtime_call(r)]
    return [r["name"] for r in sorted(ops, key=lambda r: -r["self_us"])[:n]]


def _top_ops(top_ops: Callable) -> None:
    """top_ops: the n operators with the most self time, most first, each operator once (no labels, no kernel rows)."""
    got = call(top_ops, CPU_ROWS, 3)
    if not isinstance(got, (list, tuple)) or not all(isinstance(name, str) for name in got):
        fail(f"top_ops(rows, 3) returned {got!r}; return a list of the op names (strings).")
    got = list(got)
    ops = [r for r in CPU_ROWS if not r["is_label"]]

    def names(rows: list[dict], key: str, most_first: bool = True) -> list[str]:
        return [r["name"] for r in sorted(rows, key=lambda r: r[key], reverse=most_first)[:3]]

    if got in (names(ops, "total_us"), names(CPU_ROWS, "total_us")):
        fail(f"top_ops(rows, 3) returned {got}: sorted by total time. A range's total includes everything under it "
             "(the backward pass's entry contains every op it ran): it counts the same time again at every level.")
    if got in (names(ops, "self_us", False), names(CPU_ROWS, "self_us", False)):
        fail(f"top_ops(rows, 3) returned {got}: the operators that cost least come first. Most time first.")
    if "ProfilerStep*" in got or "backward" in got:
        which = ", ".join(name for name in ("ProfilerStep*", "backward") if name in got)
        fail(f"top_ops(rows, 3) returned {got}, which holds labels ({which}). A label is a range someone named "
             "(record_function, the schedule's ProfilerStep#): it is not an operator you could make faster.")
    if got == names(ops, "calls"):
        fail(f"top_ops(rows, 3) returned {got}: sorted by number of calls. Many cheap calls are not where the time "
             "goes.")
    for case in _TOP_CASES[:5]:
        mine = call(top_ops, *case)
        if not isinstance(mine, (list, tuple)) or list(mine) != _top_reference(*case):
            fail(f"top_ops(a CPU profile's rows, {case[1]}) returned {mine!r}: not the operators that cost the most "
                 "time themselves, most first"
                 + (" (n = 0 asks for none)" if case[1] == 0 else " (with fewer operators than n, all of them)"
                    if case[1] > 6 else " (the rows may come in any order)" if case[0] is not CPU_ROWS else "") + ".")
    cuda = call(top_ops, CUDA_ROWS, 4)
    if not isinstance(cuda, (list, tuple)) or not all(isinstance(name, str) for name in cuda):
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda!r}; return a list of the op names (strings).")
    cuda = list(cuda)
    labels = [name for name in cuda if name in ("ProfilerStep*", "forward")]
    if labels:
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda}, with the label(s) {labels}. On a CUDA profile each "
             "label has a row on the device side too, whose time is the labelled span, idle gaps "
             "included: it is still not an operator.")
    kernels = [name for name in cuda if name in (_GEMM, _SOFTMAX, _ADAM) or name.startswith("vectorized")]
    if kernels:
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda}: it names kernels ({kernels[0][:40]}...). "
             "A kernel is the device's side of the operator that launched it, with the same "
             "device time: listing both counts one matmul twice and pushes another operator off the list.")
    if "cudaLaunchKernel" in cuda:
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda}, with cudaLaunchKernel: the host's call into the CUDA "
             "runtime that queued each kernel, not an operator of the model.")
    if "aten::linear" in cuda and cuda.index("aten::linear") < len(cuda) - 1:
        fail(f"top_ops(a CUDA profile's rows, 4) returned {cuda}: aten::linear is ranked by its total time, which is "
             "its aten::mm's. Rank each operator by the time spent in it itself.")
    for case in _TOP_CASES[5:]:
        mine = call(top_ops, *case)
        if not isinstance(mine, (list, tuple)) or list(mine) != _top_reference(*case):
            fail(f"top_ops(a CUDA profile's rows, {case[1]}) returned {mine!r}: not the operators that cost the device "
                 "the most time themselves, each once, most first. Read the rows of a CUDA profile: which of them are "
                 "the model's operators, and which are the same work seen again?")


# --- idle_by_cause -----------------------------------------------------------------------------------

_IDLE_WANT = {  # name of the package's case (lesson05._IDLE): (idle waiting for data, idle for other reasons)
    "overlap": (30.0, 10.0), "merge": (20.0, 20.0), "nested": (15.0, 35.0), "unsorted": (40.0, 40.0),
    "sorted": (40.0, 40.0), "touch": (10.0, 10.0), "edges": (30.0, 50.0), "no_loading": (0.0, 40.0),
    "no_compute": (3.0, 7.0), "empty": (0.0, 10.0), "hidden": (0.0, 0.0),
}


def _idle_by_cause(idle_by_cause: Callable) -> None:
    """idle_by_cause: (idle under a loading range, idle under none) within the window; idle = covered by no compute."""
    raw = {name: call(idle_by_cause, *case) for name, case in _IDLE.items()}
    got = {}
    for name, value in raw.items():
        got[name] = _as_pair(value)
        if got[name] is None:
            fail(f"{_idle_call(_IDLE[name])} returned {value!r}; return a tuple of two numbers: (idle time while the "
                 "loop waited for data, idle time for other reasons).")

    def gave(name: str, *answers: tuple) -> bool:
        return any(all(math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9) for g, w in zip(got[name], a)) for a in answers)

    wrong = {name for name, want in _IDLE_WANT.items() if not gave(name, want)}
    if not wrong:
        return
    shown = {name: f"{_idle_call(_IDLE[name])} returned {raw[name]!r}" for name in _IDLE}
    if gave("no_compute", (7.0, 3.0)) and gave("overlap", (10.0, 30.0)):
        fail(f"{shown['no_compute']}: the two numbers are swapped. The first is the idle time the loader caused, the "
             "second the idle time it did not.")
    if gave("no_loading", (40.0, 0.0)) or gave("no_compute", (10.0, 0.0)):
        fail(f"{shown['no_loading']}: you blamed all the idle time on the loader, but here no batch was being fetched "
             "at all. Idle time while nothing is loading (Python between steps, the profiler, a log line) is not "
             "the loader's.")
    if gave("hidden", (10.0, -10.0), (10.0, 0.0)) or gave("overlap", (50.0, -10.0), (50.0, 10.0), (50.0, 0.0)):
        fail(f"{shown['overlap']}: you counted loading time that overlaps compute as idle. The device was busy then: "
             "a batch fetched while a step computes costs nothing. Only idle moments are split between the causes.")
    if gave("overlap", (20.0, 20.0)) and gave("touch", (5.0, 15.0)):
        fail(f"{shown['overlap']}: you split the idle time in proportion to the share of the window the loader ran. "
             "Whose fault an idle moment is depends on what was happening at that moment, not on averages.")
    if gave("overlap", (30.0, 0.0)) and gave("no_loading", (0.0, 0.0)):
        fail(f"{shown['overlap']} and {shown['no_loading']}: you counted only the gaps between compute ranges. Idle "
             "time before the first compute range and after the last counts too: the window runs from start to end.")
    if "merge" in wrong and gave("merge", (10.0, 20.0), (20.0, 10.0), (10.0, 10.0)):
        fail(f"{shown['merge']}: two compute ranges overlap, and you counted their common part twice (or took the "
             "device as idle inside it). A moment covered by two ranges is busy, once.")
    if "nested" in wrong and gave("nested", (20.0, 60.0), (15.0, 65.0), (20.0, 30.0)):
        fail(f"{shown['nested']}: one compute range sits inside another, and you took the device as idle from the "
             "inner range's end, while the outer range still ran.")
    if "unsorted" in wrong and "sorted" not in wrong:
        fail(f"{shown['unsorted']}, but the right answer when the same ranges came sorted: your function depends on "
             "the order a profile lists its ranges in, and a profile lists them in any order.")
    if wrong == {"edges"}:
        fail(f"{shown['edges']}: ranges that stick out of the window were counted outside it. Only the part of each "
             "range between start and end counts.")
    name = next(name for name in _IDLE if name in wrong)
    fail(f"{shown[name]}: not the device's idle time split by owner. Go back to section 4's two owners and work this "
         "case by hand, moment by moment.")


# --- mfu ---------------------------------------------------------------------------------------------


def _matmul_params(model: torch.nn.Module) -> int:
    """The count: parameters that take part in a matmul (every one but the position table and the small
    elementwise ones, LayerNorm and biases, which cost a few FLOPs each and change the count by a percent)."""
    skip = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.num_embeddings and
            getattr(model, "positions", None) is m}
    count = 0
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in skip or isinstance(module, torch.nn.LayerNorm) or name == "bias":
                continue
            count += p.numel()
    return count


def small_step_flops() -> int:
    """The model FLOPs of one training step of the lesson's small transformer on its batch, as mfu counts them (the
    MFU_GUESS model counts with torch's flop counter instead, attention's matmuls included: a test holds the two
    within a few percent)."""
    net, _, _ = _small_transformer()
    return 6 * _matmul_params(net) * _SMALL_TOKENS[0] * _SMALL_TOKENS[1]


def _step_flops_per_token(model: torch.nn.Module, *, weight_grad: str = "trained", input_grad: str = "below",
                          frozen_out: bool = False, positions: bool = False) -> int:
    """FLOPs per token of one training step of `model` (a TinyGPT or a stack of Linear layers), walking its matmuls in
    the order the forward pass runs them: 2 per weight forward; 2 more for the weight's gradient when it is trained;
    2 more for the gradient of the matmul's input when some trained parameter lies below it (the gradient has to pass
    through on its way down; the data itself is trained by nothing).

    The flags are the usual mistakes: weight_grad "always" or "never" (frozen weights given a gradient too, or no
    weight gradient at all); input_grad "always", "never" or "if_trained" (the data given a gradient too, none passed
    down, or passed down only through trained layers); frozen_out (a frozen matmul left out altogether); positions
    (the position table counted as if it were multiplied)."""
    head = getattr(model, "tokens", None)
    table = getattr(model, "positions", None)
    steps = [(module, name, p) for module in model.modules() for name, p in module.named_parameters(recurse=False)]
    if head is not None:
        steps.append((None, "head", head.weight))  # the output head: the token table, multiplied at the very end
    total, below = 0, False
    for module, name, p in steps:
        trained = p.requires_grad
        is_matmul = name == "head" or (isinstance(module, torch.nn.Linear) and name == "weight") or (
            positions and table is not None and module is table)
        if is_matmul and not (frozen_out and not trained):
            w = {"trained": trained, "always": True, "never": False}[weight_grad]
            x = {"below": below, "always": True, "never": False, "if_trained": trained and below}[input_grad]
            total += p.numel() * (2 + 2 * w + 2 * x)
        below = below or trained
    return total


def _mfu_of(flops_per_token: int, batch: int, seq_len: int, step_seconds: float, peaks: dict, dtype: str) -> float:
    return flops_per_token * batch * seq_len / step_seconds / peaks[dtype]


# the mistakes that count the step's FLOPs wrongly: (flags of _step_flops_per_token, what the learner is told)
_TWIST = ("mlp", "mlp_bottom_frozen", "mlp_middle_frozen", "gpt_table_frozen", "gpt_top_tuned")
_FROZEN = _TWIST[1:]
_MFU_COUNT_MISTAKES = [  # (flags of _step_flops_per_token, the models to name it on first, what the learner is told)
    ({"weight_grad": "never", "input_grad": "never"}, (), "counted the forward pass alone. A training step runs "
     "backward too: what must backward produce for each matmul of the forward pass (section 7)?"),
    ({"weight_grad": "always", "input_grad": "never"}, (), "counted backward as much work as the forward pass: go "
     "back to what backward must produce for each matmul of the forward pass (section 7)."),
    ({"positions": True, "weight_grad": "always", "input_grad": "always"}, (), "counted every parameter, the "
     "position embeddings included. How does the forward pass use that table (grader/transformer.py)? In a "
     "long-context model it is most of the parameters."),
    ({"weight_grad": "always", "input_grad": "always"}, _TWIST, "counted the same work for every weight, frozen or "
     "trained, first layer or last. Backward computes only the gradients something needs: which does it need for each "
     "of this model's matmuls (section 7)?"),
    ({"frozen_out": True, "input_grad": "always"}, _FROZEN, "left the frozen parameters out altogether. A frozen layer is "
     "still in the model: what does the step compute with it?"),
    ({"input_grad": "if_trained"}, _FROZEN, "counted a frozen layer's forward pass and nothing more. Look at what lies "
     "below that layer: does backward have to get past it?"),
    ({"input_grad": "always"}, _TWIST, "counted a gradient for the input of a matmul that nothing below needs: what "
     "would that gradient be for?"),
]


def _mfu(observation: dict) -> None:
    """mfu: the FLOPs a training step needs (each matmul's forward, and the gradients backward must produce for it),
    per second, over the dtype's peak."""
    _public_mfu(observation)
    got = {k: float(v) for k, v in observation["got"].items()}
    models = {name: make() for name, (make, *_) in _MFU_MODELS.items()}

    def mfu_with(name: str, **flags) -> float:
        return _mfu_of(_step_flops_per_token(models[name], **flags), *_MFU_MODELS[name][1:])

    want = {name: mfu_with(name) for name in _MFU_MODELS}
    ratio = {name: got[name] / want[name] for name in want}

    def near(r: float, target: float) -> bool:
        return abs(r / target - 1) <= 1e-6

    if all(near(r, 100.0) for r in ratio.values()):
        fail("mfu returned a percent: return a fraction of the peak (0 to 1).")
    wrong = [name for name in want if not near(ratio[name], 1.0)]
    if not wrong:
        return
    for flags, prefer, mistake in _MFU_COUNT_MISTAKES:
        if all(near(got[name], mfu_with(name, **flags)) for name in wrong):
            named = next((n for n in wrong if n in prefer), wrong[0])
            fail(f"on the check's model of {MFU_MODEL_WORDS[named]}, mfu {mistake}")
    if math.isclose(got["gpt"], got["gpt_fp32"], rel_tol=1e-9):
        fail("mfu gave the same answer for the same run in bf16 and in fp32: a chip's peak depends on the number format "
             "(an H100's tensor cores are many times faster in bf16); divide by the peak of the format the run used.")
    for name, (_, batch, seq, *_r) in _MFU_MODELS.items():
        if near(ratio[name], 1 / seq) and near(ratio["gpt"], 1 / _MFU_MODELS["gpt"][2]):
            fail("mfu counted one token per sequence: every token of every sequence goes through every weight.")
        if near(ratio[name], 1 / batch) and near(ratio["gpt"], 1 / _MFU_MODELS["gpt"][1]):
            fail("mfu counted the tokens of one sequence only: a step processes every sequence of the batch.")
    if all(near(ratio[n], _MFU_MODELS[n][3]) or near(ratio[n], _MFU_MODELS[n][3] ** 2) for n in want):
        fail("mfu ignored the step time: FLOPs per step become a rate (FLOP/s) once divided by the step time, and only "
             "a rate compares with a peak.")
    fail(f"mfu on the check's model of {MFU_MODEL_WORDS[wrong[0]]} is not the model's FLOPs per second over the peak. "
         "Go back to section 7: which matmuls the step runs, what backward must compute for each of them in this "
         "model, and what the rate is compared with.")


# --- fixed_loader ------------------------------------------------------------------------------------

# The fewest workers that keep up, for each of lesson05._RATIOS (k workers deliver k batches per batch-read time), and
# what sizing them from one item's read time gives. Here, not in the package: a copy test read the answer off a
# shipped (4, 11, 1) beside the cases, and "ceil" off it at once.
_NEEDED = tuple(max(1, math.ceil(round(b * i / s, 9))) for i, b, s in _RATIOS)
_FROM_ONE_ITEM = tuple(math.ceil(i / s) for i, _, s in _RATIOS)


def _fixed_loader(observation: dict) -> None:
    """fixed_loader: enough workers that a batch is ready each time the loop asks (from the fewest that keep up to two
    more), judged after the public settings."""
    chosen = [int(k) for k in observation["ratios"]]
    if chosen == list(_FROM_ONE_ITEM) and chosen != list(_NEEDED):
        fail(f"fixed_loader chose {_loader_texts(chosen)}. You sized the workers from one item's read time: what does "
             "the training loop wait for when it asks for the next step's data?")
    for (item_s, batch, step_s), k, need in zip(_RATIOS, chosen, _NEEDED):
        if k < need:
            fail(f"fixed_loader chose {k} worker(s) for {batch} items of {item_s * 1e3:g} ms a batch and a step of "
                 f"{step_s * 1e3:g} ms: too few, so the batches arrive slower than the loop takes them and the loop "
                 "still waits, if only now and then. Each worker reads one whole batch at a time: how many batches "
                 "must be on their way at once for one to be ready each time the loop asks for the next?")
        if k > need + 2:
            fail(f"fixed_loader chose {k} workers for {batch} items of {item_s * 1e3:g} ms a batch and a step of "
                 f"{step_s * 1e3:g} ms: more than keep up with the loop, by more than a couple. Each extra worker is "
                 "one more process holding a copy of the data set and its prefetched batches; choose the number from "
                 "how long a batch takes to read against how long a step takes.")


JUDGES = {"fixed_loader": _fixed_loader, "diagnose": _diagnose, "busy_fraction": _busy_fraction, "top_ops": _top_ops, "idle_by_cause": _idle_by_cause,
          "mfu": _mfu}
