"""Messages teach without telling, and the course's own code is no shortcut (COURSE.md, third edition).

Two tests, table-driven: a lesson that follows the rules adds a row to
MESSAGE_LESSONS (its mutants, tests/mutants/lessonNN.py, are then searched),
and a row per shortcut to SHORTCUTS. Add rows; the tests need nothing else.

- The message test runs every mutant (MUTANTS and PREDICTION_MUTANTS) against
  every step of its check cell (the visible check and each hidden test, one at
  a time, as the class grader's feedback would show it) and fails if a message
  holds an expected value in a form a learner would copy: the integer (with or
  without separators), the float at 2-6 significant figures (in seconds, ms or
  µs as well), a fraction, or a power of two written 2^k. The expected values
  are what the reference solution gives on the check's own cases and each
  hidden test's `want`; whole numbers up to SMALL are the words of a message
  (2 FLOPs, 8 exponent bits), and a value the message quotes as the learner's
  own ("returned 2^24") is theirs to see. Each hidden test's own wrong case
  (its `why`, what it says when the learner's answer is wrong) is searched too.
- The shortcut test writes each exercise with a call of the course's package
  that returns its answer and requires the check to say so (or the shortcut
  to be gone: calling it fails).
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import signal
from fractions import Fraction

import pytest

from grader import predictions
from grader.checks import _plain
from grader.checks._common import Prediction, Raised
from grader.notebook import CheckFailed
from grader.pipeline.judging import plan_cell
from notebook_cells import check_cells, namespace

MESSAGE_LESSONS = [  # one row per lesson whose checks follow the rules
    "01_crossover",
    "02_transfers",
    "03_float_formats",
    "04_memory",
    "05_reading_the_machine",
    "06_mixed_precision",
    "07_data_parallel",
    "08_inside_a_kernel",
    "09_serving",
]
SMALL = 16  # whole numbers up to this are the words of a message (2 FLOPs, 4 bytes), not an answer to copy


# What a check notes about how the learner's code ran, not what it answered: lesson 08's largest tensor, count of
# torch operations and bytes allocated outside torch. tracemalloc's byte count moves from run to run, and a count
# that happened to equal a case's size (s=50) made the leak test fail now and then on a message that names the case.
_DIAGNOSTICS = {"largest", "ops", "outside", "whole"}


def _numbers(value, out: set) -> set:
    """Every real number inside a plain value (recorded calls: their answers, not their arguments)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return out
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            out.add(float(value))
        return out
    if isinstance(value, dict):
        if isinstance(value.get("calls"), list) and "name" in value:  # a recording: [key, outcome] pairs
            for entry in value["calls"]:
                _numbers(entry[1].get("value") if isinstance(entry, list) and len(entry) == 2 else None, out)
            return out
        if "got" in value or "runs" in value:  # a check's own record of a run: only what the code returned
            for key in ("got", "runs"):
                _numbers(value.get(key), out)
            return out
        for k, v in value.items():
            if k not in _DIAGNOSTICS:
                _numbers(v, out)
        return out
    if isinstance(value, (list, tuple)):
        for v in value:
            _numbers(v, out)
        return out
    try:
        import torch

        if isinstance(value, torch.Tensor) and value.numel() <= 64:
            _numbers(value.double().reshape(-1).tolist(), out)
    except ImportError:
        pass
    return out


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def forms(value: float) -> set[str]:
    """The ways a learner would copy `value` out of a message."""
    found = set()
    if value == int(value) and abs(value) <= SMALL:
        return found
    if value == int(value):
        n = int(value)
        found |= {str(n), f"{n:,}", f"{n:_}"}
    scales = [1.0] + ([1e3, 1e6, 1e9] if abs(value) < 1 else [1e-3, 1e-6, 1e-9, 1e-12] if abs(value) >= 1e4 else [])
    for scale in scales:
        v = value * scale
        for digits in range(2, 7):
            text = f"{v:.{digits}g}"
            if "e" not in text and abs(float(text)) <= SMALL and float(text) == int(float(text)):
                continue  # rounds to a small whole number: the words of a message
            found.add(text)
            if "e" not in text and abs(float(text)) >= 1000:
                found.add(f"{float(text):,.{max(0, digits - len(str(int(abs(float(text))))))}f}")
    frac = Fraction(value).limit_denominator(64)
    if frac.denominator > 1 and abs(float(frac) - value) <= 1e-9 * abs(value):
        found |= {f"{frac.numerator}/{frac.denominator}", f"{frac.numerator} / {frac.denominator}"}
    k = math.log2(abs(value)) if value else 0.5
    if k == int(k) and abs(value) > SMALL or (k == int(k) and k < 0):
        k = int(k)
        found |= {f"2^{k}", f"2**{k}", f"2 ** {k}", "2" + str(k).translate(_SUPERSCRIPT)}
    return {f for f in found if len(f.strip("-0.,")) >= 2 or "/" in f}


_THEIRS = re.compile(r"(?:returned|is|gave|gives|stayed at|grew to|reported|your \w+) [\w( =.,^*]{0,14}$")
_QUOTED = re.compile(r"(?<=returned )(\{[^{}]*\}|\[[^\[\]]*\]|\([^()]*\))")  # the learner's own dict, list or tuple
_FIRST_GUESS = re.compile(r"\(first guess .*?, recorded [^)]*\)")  # a prediction's feedback echoing the learner's guess


def holds(message: str, form: str) -> bool:
    """True when `form` stands in `message` as a number of its own, and not where the message quotes the learner's."""
    if form not in message:  # most forms: the substitutions below only take text out, so they cannot make one appear
        return False
    message = _QUOTED.sub("…", _FIRST_GUESS.sub("(first guess …)", message))
    for hit in re.finditer(rf"(?<![\w.,^*]){re.escape(form)}(?![\d]|\.\d)", message):
        if not _THEIRS.search(message[:hit.start()]):
            return True
    return False


def _expected(lesson: str, grade_id: str) -> set[float]:
    """The values the check's cases and hidden tests expect: the reference's answers and each hidden `want`."""
    ns = namespace(lesson)
    values: set = set()
    for step in plan_cell(check_cells(lesson)[grade_id]):
        check = step.target()
        if "want" in step.kwargs:
            _numbers(step.kwargs["want"], values)
        if not step.hidden:
            with contextlib.redirect_stdout(io.StringIO()):
                _numbers(_plain.roundtrip(check.observe(*[ns[n] for n in step.names], **check.observed(step.kwargs))),
                         values)
    return values


def _messages(lesson: str, grade_id: str, ns: dict) -> list[str]:
    """What each step of the check cell says about the learner's code in `ns`, each step judged on its own."""
    said = []
    for step in plan_cell(check_cells(lesson)[grade_id]):
        check = step.target()
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                observation = _plain.roundtrip(check.observe(*[ns[n] for n in step.names],
                                                             **check.observed(step.kwargs)))
                if isinstance(check, Prediction):
                    value = check.valid(observation)
                    predictions.commit(check.lesson, check.name, value, value["why"])
                    said.append(check._score(observation, predictions.read())[1])
                else:
                    check.judge(observation, **step.kwargs)
        except (CheckFailed, Raised, AssertionError) as exc:
            said.append(str(exc))
        except NotImplementedError:
            pass
        said.append(out.getvalue())
    return said


def _mutant_cases():
    import importlib

    for lesson in MESSAGE_LESSONS:
        mod = importlib.import_module(f"mutants.lesson{lesson[:2]}")
        for table in ("MUTANTS", "PREDICTION_MUTANTS"):
            for grade_id, mutants in getattr(mod, table, {}).items():
                for name, source, _ in mutants:
                    yield pytest.param(lesson, grade_id, source, id=f"{lesson}:{grade_id}:{name}")


@pytest.mark.parametrize("lesson,grade_id,source", list(_mutant_cases()))
def test_no_message_hands_over_an_expected_value(lesson, grade_id, source):
    signal.signal(signal.SIGALRM, _over_time)
    signal.alarm(MUTANT_SECONDS)  # a mutant that loops for ever fails here with its name, not at CI's limit
    try:
        _no_leak(lesson, grade_id, source)
    finally:
        signal.alarm(0)


MUTANT_SECONDS = 60


def _over_time(signum, frame):
    raise TimeoutError(f"the mutant ran past {MUTANT_SECONDS} s on the check's cases: write it without a loop "
                       "over the answer (the messages cannot be read until it returns)")


def _no_leak(lesson, grade_id, source):
    expected = _expected(lesson, grade_id)  # first: the mutant may call an answer key the reference's run would see
    ns = namespace(lesson)
    exec(compile(source, "<mutant>", "exec"), ns)
    for message in _messages(lesson, grade_id, ns):
        leaked = sorted({f for v in expected for f in forms(v) if holds(message, f)})
        assert not leaked, f"a message of {grade_id} holds the expected value as {leaked}:\n{message}"


def _hidden_cases():
    for lesson in MESSAGE_LESSONS:
        for grade_id, source in check_cells(lesson).items():
            for step in plan_cell(source):
                if step.hidden and "want" in step.kwargs:
                    yield pytest.param(lesson, grade_id, step, id=f"{lesson}:{grade_id}:{step.check}")


@pytest.mark.parametrize("lesson,grade_id,step", list(_hidden_cases()))
def test_a_hidden_tests_wrong_case_says_why_without_its_value(lesson, grade_id, step):
    """What a hidden test says when the learner's answer is wrong (its `why`) never holds what it wants."""
    wanted = _numbers(step.kwargs["want"], set())
    said = str(step.kwargs.get("why", ""))
    leaked = sorted({f for v in wanted for f in forms(v) if holds(said, f)})
    assert not leaked, f"{grade_id}: the hidden test's message holds its expected value as {leaked}: {said}"


def test_forms_are_what_a_learner_copies():
    assert {"1/12", "0.083", "0.08333"} <= forms(1 / 12)
    assert {"12582912", "12,582,912", "1.258e+07"} <= forms(12_582_912)
    assert "1.005" in forms(0.001005)  # in ms
    assert {"2^24", "2²⁴", "16777216"} <= forms(2.0**24) and "2^-3" in forms(0.125)
    assert not forms(4) and not forms(2.0)
    assert holds("here 256.", "256") and not holds("2560", "256") and not holds("0.256", "256")


def test_the_search_finds_a_value_in_each_form_and_leaves_the_learners_own():
    """The test can fail: a message that quotes an expected value is caught (2^24, 625, 266,240, 1/11)."""
    def leaks(message: str, value: float) -> bool:
        return any(holds(message, f) for f in forms(value))

    assert leaks("the largest scale here: 2^24", 2.0**24) and leaks("use 2²⁴", 2.0**24)
    assert leaks("the largest batch that fits: 625.", 625) and leaks("it saves 266,240 bytes", 266_240)
    assert leaks("one step in 11 is skipped: 1/11", 1 / 11) and leaks("the model says 170.7", 170.66)
    assert not leaks("your max_batch returned 625", 625) and not leaks("choose_loss_scale returned 2^24", 2.0**24)
    assert not leaks("state_bytes returned {'parameters': 625, 'gradients': 625}", 625)
    assert not leaks("P: 0.5 / 1 (first guess n 625, recorded 2026-12-03T13:55:29+00:00); too high", 625)
    assert leaks("P: 0.5 / 1 (first guess n 600, recorded 2026-12-03T13:55:29+00:00); the model says 625", 625)


# --- shortcuts: the course's own code answering an exercise -----------------------------------------

_MEASURE = ("from grader import timing\n\ndef time_op(fn, sync, warmup, repeats):\n"
            "    return timing.measure(fn, sync, warmup, repeats).median\n")
_MEASURE_BOUND = ("from grader.timing import measure\n\ndef time_op(fn, sync, warmup, repeats):\n"
                  "    return measure(fn, sync, warmup=warmup, repeats=repeats).median\n")
_MEASURE_UNWRAPPED = ("from grader import shortcuts, timing\n\ndef time_op(fn, sync, warmup, repeats):\n"
                      "    return shortcuts._INNER[timing.measure](fn, sync, warmup, repeats).median\n")
_BENCH = ("from grader import timing\n\ndef time_op(fn, sync, warmup, repeats):\n"
          "    for _ in range(warmup):\n        fn()\n    return timing.benchmark_median(fn)\n")
# Round 3's copy test: the buggy loop of cell 25, unchanged, run in a thread of its own (a TorchFunctionMode is
# thread-local, so the counter saw nothing and the lesson's table showed 0 sync points).
_THREADED_BUGGY = ("import threading\nimport torch\n\ndef train_fixed(model, batches, device, steps):\n"
                   "    model = model.to(device)\n    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)\n"
                   "    losses = []\n\n    def buggy():\n        for step in range(steps):\n"
                   "            x, y = batches[step % len(batches)]\n            x, y = x.to(device), y.to(device)\n"
                   "            keep = (y - y.mean()).abs() <= 2 * y.std()\n"
                   "            loss = (model(x) - y)[keep].square().mean()\n            opt.zero_grad()\n"
                   "            loss.backward()\n            opt.step()\n            losses.append(loss.item())\n\n"
                   "    t = threading.Thread(target=buggy)\n    t.start()\n    t.join()\n    return losses\n")
# Round 3's copy test: a SyncCounter entered through its base class (TorchFunctionMode.__enter__ skips the watched
# SyncCounter.__enter__) measured in a cell, the counts then looked up.
_BASE_ENTERED = ("import torch\nfrom torch.overrides import TorchFunctionMode\nfrom grader.syncs import SyncCounter\n"
                 "c = SyncCounter('cuda')\nTorchFunctionMode.__enter__(c)\ntry:\n"
                 "    torch.ones(4).to(c.device).sum().item()\nfinally:\n    c.__exit__(None, None, None)\n\n"
                 "def sync_points(version, steps, n_batches):\n    return c.sync_points + 3 * steps\n")
_THREADED_TIMER = ("import threading\nimport time\n\ndef time_op(fn, sync, warmup, repeats):\n    box = []\n\n"
                   "    def timed():  # the check's watch does not follow a thread\n"
                   "        for _ in range(warmup + 20):\n            fn()\n        sync()\n        ts = []\n"
                   "        for _ in range(repeats):\n            t0 = time.perf_counter()\n            fn()\n"
                   "            sync()\n            ts.append(time.perf_counter() - t0)\n"
                   "        box.append(sorted(ts)[len(ts) // 2])\n\n"
                   "    t = threading.Thread(target=timed)\n    t.start()\n    t.join()\n    return box[0]\n")
SHORTCUTS = {  # lesson -> (check cell, the exercise written with the shortcut, what the check must say)
    "01_crossover": [
        # copy test r6: torch's FLOP counter over a matmul of meta tensors
        ("matmul_flops_check", "import torch\nfrom torch.utils.flop_counter import FlopCounterMode\n\n"
         "def matmul_flops(n):\n    a = torch.empty(n, n, device='meta')\n"
         "    with FlopCounterMode(display=False) as counter:\n        a @ a\n    return counter.get_total_flops()\n",
         r"calls torch\.utils\.flop_counter\.FlopCounterMode"),
        # copy test r22: one of torch's per-op formulas, called directly
        ("matmul_flops_check", "from torch.utils.flop_counter import mm_flop\n\n"
         "def matmul_flops(n):\n    return int(mm_flop((n, n), (n, n)))\n",
         r"calls torch\.utils\.flop_counter's FLOP formulas"),
        ("matmul_flops_check", "import torch\n\ndef matmul_flops(n):\n"
         "    a = torch.ones(n, n)\n    with torch.autograd.profiler_legacy.profile(with_flops=True) as prof:\n"
         "        torch.mm(a, a)\n    return int(sum(e.flops for e in prof.function_events if e.name == 'aten::mm'))\n",
         r"calls torch\.autograd\.profiler_legacy\.profile"),
        ("matmul_flops_check", "from torch.utils.flop_counter import conv_flop_count\n\n"
         "def matmul_flops(n):\n    return int(conv_flop_count([n, n, 1], [n, n, 1], [n, n, 1]))\n",
         r"calls torch\.utils\.flop_counter's FLOP formulas"),
        # an outside test: torch's FLOP counter run in a process of its own, where the check's watch does not follow
        ("matmul_flops_check", "import subprocess\nimport sys\n\ndef matmul_flops(n):\n"
         "    code = ('import torch\\nfrom torch.utils.flop_counter import FlopCounterMode\\n'\n"
         "            f'a = torch.empty({n}, {n}, device=\"meta\")\\n'\n"
         "            'with FlopCounterMode(display=False) as c:\\n    a @ a\\nprint(c.get_total_flops())')\n"
         "    return int(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout)\n",
         r"a process of its own"),
        # ... and in a thread of its own, for the bytes and the forecast
        ("matmul_bytes_check", "import threading\n\ndef matmul_bytes(n, dtype, out_dtype=None):\n    box = []\n"
         "    t = threading.Thread(target=lambda: box.append((2 * dtype.itemsize + (out_dtype or dtype).itemsize) * n * n))\n"
         "    t.start()\n    t.join()\n    return box[0]\n", r"a thread of its own"),
        ("linear_forecast_check", "import threading\nimport torch\nfrom torch.utils.flop_counter import FlopCounterMode\n\n"
         "def linear_forecast(batch, d_in, d_out, dtype, peak_flops, bandwidth):\n    box = []\n\n"
         "    def count():\n        with FlopCounterMode(display=False) as counter:\n"
         "            torch.nn.functional.linear(torch.empty(batch, d_in, device='meta'), "
         "torch.empty(d_out, d_in, device='meta'))\n        box.append(counter.get_total_flops())\n\n"
         "    t = threading.Thread(target=count)\n    t.start()\n    t.join()\n    flops = box[0]\n"
         "    nbytes = (batch * d_in + d_in * d_out + batch * d_out) * dtype.itemsize\n"
         "    x = flops / nbytes\n    rate = min(peak_flops, x * bandwidth)\n"
         "    return {'intensity': x, 'bound': 'memory' if x * bandwidth < peak_flops else 'compute',\n"
         "            'seconds_per_sample': flops / rate / batch}\n",
         r"a thread of its own"),
        # round 4: measure's way with a fixed 100 extra warm-up calls, longer than any case's ramp
        ("time_op_check", "import statistics, time\n\ndef time_op(fn, sync, warmup, repeats):\n"
         "    for _ in range(warmup + 100):\n        fn()\n    sync()\n    samples = []\n"
         "    for _ in range(repeats):\n        t = time.perf_counter()\n        fn()\n        sync()\n"
         "        samples.append(time.perf_counter() - t)\n    return statistics.median(samples)\n",
         r"went on warming after the calls had stopped getting faster"),
        ("time_op_check", _MEASURE, r"calls grader\.timing\.measure.*yourself"),
        ("time_op_check", _MEASURE_BOUND, r"calls grader\.timing\.measure"),
        ("time_op_check", _MEASURE_UNWRAPPED, r"calls grader\.timing\.measure"),
        ("time_op_check", _BENCH, r"calls grader\.timing\.benchmark_median"),
        ("time_op_check", _THREADED_TIMER, r"a thread of its own"),
        ("CROSSOVER_PREDICTION_check",
         "from grader import specs\nfrom grader.checks import lesson01\nCROSSOVER_PREDICTION = {'n': lesson01.crossover_model("
         "lesson01.gpu_fixed_seconds(), lesson01.CROSSOVER_CPU_FLOPS, specs.chip('T4').peak('fp32')), 'why': 'x'}\n",
         "gone"),
        # copy test r27: lesson 08's traffic counter under a matmul kernel, its unique bytes read off (here without
        # a kernel: the counter's property on a Counts of no regions; the watch sees the call either way)
        ("matmul_bytes_check", "from grader import triton_counter\n\n"
         "def matmul_bytes(n, dtype, out_dtype=None):\n    triton_counter.Counts('k', (1,), 1, {}).unique_bytes\n"
         "    return (2 * n * n * dtype.itemsize + n * n * (out_dtype or dtype).itemsize)\n",
         r"calls grader\.triton_counter\.Counts\.unique_bytes"),
        ("matmul_bytes_check", "from grader import triton_counter\n\n"
         "def matmul_bytes(n, dtype, out_dtype=None):\n    try:\n        triton_counter.launch(None, (1,))\n"
         "    except Exception:\n        pass\n"
         "    return (2 * n * n * dtype.itemsize + n * n * (out_dtype or dtype).itemsize)\n",
         r"calls grader\.triton_counter\.launch"),
        # copy test r27: linear_forecast's FLOPs from FlopCounterMode over a Linear of meta tensors
        ("linear_forecast_check", "import torch\nfrom torch.utils.flop_counter import FlopCounterMode\n\n"
         "def linear_forecast(batch, d_in, d_out, dtype, peak_flops, bandwidth):\n"
         "    with FlopCounterMode(display=False) as counter:\n"
         "        torch.nn.functional.linear(torch.empty(batch, d_in, device='meta'), torch.empty(d_out, d_in, device='meta'))\n"
         "    flops = counter.get_total_flops()\n"
         "    nbytes = (batch * d_in + d_in * d_out + batch * d_out) * dtype.itemsize\n"
         "    x = flops / nbytes\n    rate = min(peak_flops, x * bandwidth)\n"
         "    return {'intensity': x, 'bound': 'memory' if x * bandwidth < peak_flops else 'compute',\n"
         "            'seconds_per_sample': flops / rate / batch}\n",
         r"calls torch\.utils\.flop_counter\.FlopCounterMode"),
        ("linear_forecast_check",
         "from grader.checks import lesson01\ndef linear_forecast(batch, d_in, d_out, dtype, peak_flops, bandwidth):\n"
         "    return lesson01.linear_model(batch, d_in, d_out, dtype.itemsize, peak_flops, bandwidth)\n"
         "linear_forecast(1, 4, 4, __import__('torch').float32, 1.0, 1.0)\n", "gone"),
        ("COMPUTE_BOUND_N_check",
         "from grader.checks import lesson01\nCOMPUTE_BOUND_N = {f: lesson01.compute_bound_from('H100', f, s) "
         "for f, s in (('fp32', 4), ('bf16', 2))}\n", "gone"),
        ("ADD_PREDICTION_check",
         "from grader import predictions\nfrom grader.checks import lesson01\n"
         "ADD_PREDICTION = {'add GFLOP/s': lesson01.add_model(predictions.context('01_crossover')) / 1e9, 'why': 'x'}\n",
         "gone"),
        ("LINEAR_PREDICTION_check",
         "from grader import predictions\nfrom grader.checks import lesson01\n"
         "LINEAR_PREDICTION = {'batch 64 / batch 1': lesson01.linear_ratio_model(predictions.context('01_crossover')), "
         "'why': 'x'}\n", "gone"),
    ],
    "02_transfers": [
        # round 4: a copy of the model trained by the buggy loop elsewhere, the model handed called once a step
        ("train_fixed_check", "import copy\nfrom grader.checks import lesson02\n\n"
         "def train_fixed(model, batches, device, steps):\n"
         "    twin = copy.deepcopy(model)\n    for m in twin.modules():\n"
         "        m._forward_hooks.clear(); m._forward_pre_hooks.clear()\n"
         "    losses = lesson02.train_buggy(twin, batches, 'cpu', steps)\n"
         "    xs = [x.to(device) for x, _ in batches]\n    model.to(device)\n"
         "    for step in range(steps):\n        model(xs[step % len(xs)])\n"
         "    return losses\n", r"the model it was handed is not the model those steps train"),
        ("SYNC_ANSWERS_check",
         "from grader.checks import lesson02\nSYNC_ANSWERS = {l: lesson02.snippet_waits(l) for l in lesson02.SYNC_SNIPPETS}\n",
         r"called .*grader\.checks\.lesson02\.snippet_waits"),
        ("SYNC_ANSWERS_check",
         "from grader.checks import lesson02\n"
         "SYNC_ANSWERS = {l: lesson02.snippet_reads(l).sync_points > 0 for l in lesson02.SYNC_SNIPPETS}\n",
         r"called grader\.checks\.lesson02\.snippet_reads"),
        ("link_from_copies_check", "from grader.checks import lesson02\nlesson02._line\n", "gone"),
        ("sync_points_check", "from grader.syncs import SyncCounter\n\ndef sync_points(version, steps, n_batches):\n"
         "    with SyncCounter('cuda') as counter:  # the loop of `version`, measured instead of predicted\n"
         "        pass\n    return counter.sync_points + 3 * steps\n", r"calls grader\.syncs\.SyncCounter"),
        ("link_from_copies_check", "from grader.checks import lesson02\nlesson02._link\n", "gone"),
        ("COPY_PREDICTION_check", "from grader.checks import lesson02\nlesson02._LINK\n", "gone"),
        ("train_fixed_check", "from grader.checks import lesson02\n\ndef train_fixed(model, batches, device, steps):\n"
         "    return lesson02.train_pinned(model, batches, device, steps)\n",
         r"calls grader\.checks\.lesson02\.train_pinned"),
        ("train_fixed_check", _THREADED_BUGGY, r"a thread of its own"),
        ("sync_points_check", _BASE_ENTERED, r"called grader\.syncs\.SyncCounter before your sync_points"),
        ("sync_points_check", "import threading\n\ndef sync_points(version, steps, n_batches):\n    box = []\n"
         "    t = threading.Thread(target=lambda: box.append(3 * steps))  # the counter would not follow it\n"
         "    t.start()\n    t.join()\n    return box[0]\n", r"a thread of its own"),
    ],
    "03_float_formats": [
        # round 5: the same through map, a C function calling a C function (no event)
        ("decode_check", "import sys\n\ndef decode(x, fmt):\n    list(map(sys.setprofile, [None]))\n    return (0, 0, 0)\n",
         r"calls sys\.setprofile, which turns off"),
        ("round_to_check", "from grader import floats\n\ndef round_to(x, fmt, ties='even'):\n"
         "    floats.value_of(0, 15, 0, floats.Format('x', 5, 10, None))\n    return x.float().clone()\n",
         r"calls grader\.floats\."),
        ("choose_loss_scale_check", "from grader import floats\n\ndef choose_loss_scale(grads, dtype):\n"
         "    floats.value_of(0, 15, 0, floats.Format('x', 5, 10, None))\n    return 1.0\n", r"calls grader\.floats\."),
        # round 4: the watch switched off inside the learner's function, then a shortcut it would have named
        ("decode_check", "import sys, threading\nfrom grader import floats\n\n"
         "def decode(x, fmt):\n    sys.setprofile(None)\n    threading.setprofile(None)\n"
         "    floats.Format('x', 5, 2, None).bias\n    return (0, 0, 0)\n", r"calls sys\.setprofile, which turns off"),
        ("decode_check", "from grader import floats\nimport torch\n\n"
         "def decode(x, fmt):\n    if isinstance(fmt, str):\n        return (0, 0, 0)\n    e, m = fmt\n"
         "    f = floats.Format('x', e, m, None)\n"
         "    fields = [(s, k, j) for s in (0, 1) for k in range(2 ** e) for j in range(2 ** m) if k < 2 ** e - 1 or j == 0]\n"
         "    return min(fields, key=lambda t: abs(floats.value_of(*t, f) - x))\n", r"calls grader\.floats\."),
        ("LossScaler_check",
         "import torch\nclass LossScaler:\n"
         "    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):\n"
         "        self.scale = torch.amp.GradScaler('cpu', init_scale=init_scale).get_scale()\n"
         "    def update(self, found_inf):\n"
         "        return not found_inf\n", r"calls torch\.amp\.GradScaler"),
        ("LossScaler_check",
         "import torch\nclass LossScaler:\n"
         "    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):\n"
         "        self.scale, self.g, self.b, self.i = init_scale, growth_factor, backoff_factor, growth_interval\n"
         "        self.s, self.t = torch.full((), float(init_scale)), torch.zeros((), dtype=torch.int32)\n"
         "    def update(self, found_inf):\n"
         "        torch._amp_update_scale_(self.s, self.t, torch.full((), float(found_inf)), self.g, self.b, self.i)\n"
         "        self.scale = float(self.s)\n        return not found_inf\n", r"calls torch\._amp_update_scale_"),
        ("LossScaler_check",  # a copy test: the same op through torch.ops.aten
         "import torch\nclass LossScaler:\n"
         "    def __init__(self, init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, "
         "accumulation_steps=1):\n"
         "        self.scale, self.g, self.b, self.i = init_scale, growth_factor, backoff_factor, growth_interval\n"
         "        self.s, self.t = torch.full((), float(init_scale)), torch.zeros((), dtype=torch.int32)\n"
         "    def update(self, found_inf):\n"
         "        torch.ops.aten._amp_update_scale_(self.s, self.t, torch.full((), float(found_inf)), self.g, self.b, "
         "self.i)\n"
         "        self.scale = float(self.s)\n        return not found_inf\n", r"calls torch\.ops\.aten\._amp_update_scale_"),
        ("predict_vanishing_check", "from grader import floats\n\ndef predict_vanishing(values, e, m):\n"
         "    f = floats.Format('x', e, m, None)\n    return [v != 0 and abs(v) <= f.smallest_subnormal / 2 for v in values]\n",
         r"calls grader\.floats\.Format\.smallest_subnormal"),
        ("predict_vanishing_check", "from grader import floats\n\ndef predict_vanishing(values, e, m):\n"
         "    f = floats.Format('x', e, m, None)\n"
         "    return [v != 0 and abs(v) <= f.smallest_normal * f.eps / 2 for v in values]\n",
         r"calls grader\.floats\.Format\.(smallest_normal|eps)"),
        ("predict_vanishing_check", "from grader.checks import lesson03\nlesson03._half_subnormal\n", "gone"),
        ("decode_check", "from grader.checks import lesson03\nlesson03._reference_bits\n", "gone"),
        ("predict_vanishing_check", "from grader.checks import lesson03\nlesson03.vanishing_model\n", "gone"),
        ("predict_vanishing_check", "from grader.checks import lesson03\nlesson03._vanishing_model\n", "gone"),
        ("choose_loss_scale_check", "from grader.checks import lesson03\nlesson03.largest_finite_scale\n", "gone"),
        ("choose_loss_scale_check", "from grader.checks import lesson03\nlesson03._largest_finite_scale\n", "gone"),
        ("choose_loss_scale_check", "from grader.checks import lesson03\nlesson03._rescue_scale\n", "gone"),
        ("SCALER_FORECAST_check", "from grader.checks import lesson03\nlesson03.gradscaler_with_ceiling\n", "gone"),
        ("ZERO_SHARE_check", "from grader.checks import lesson03\nlesson03.zero_share\n", "gone"),
    ],
    "04_memory": [
        # round 4: a table built from the course's probe in a cell of its own, before the check
        ("training_bytes_check", "from grader import memory\n_table = {(p, o): memory._probe(p, o, 8) for p in ('fp32',) "
         "for o in ('sgd',)}\n\ndef training_bytes(n_params, precision, optimizer):\n    return 16 * n_params\n",
         r"called grader\.memory\._probe before your training_bytes was checked"),
        ("training_bytes_check",
         "from grader import memory\n_table = {(p, o): memory.probe_bytes_per_parameter(p, o)\n"
         "          for p in memory.PRECISIONS for o in memory.OPTIMIZERS}\n"
         "def training_bytes(n, p, o):\n    return int(round(sum(_table[p, o].values()) * n))\n",
         r"called grader\.memory\.probe_bytes_per_parameter before your training_bytes"),
        ("state_bytes_check", "from grader import memory\nmemory.state_table\n", "gone"),
        ("state_bytes_check", "from grader import memory\nmemory.totals\n", "gone"),
        ("BYTES_PER_PARAM_check", "from grader.checks import lesson04\nlesson04._tensor_bytes\n", "gone"),
        ("training_bytes_check",
         "from grader import memory\ndef training_bytes(n, precision, optimizer):\n"
         "    return int(round(n * sum(memory.training_terms(precision, optimizer).values())))\n",
         r"calls grader\.memory\.training_terms"),
        ("predict_saved_bytes_check",
         "import torch\nfrom grader import memory\ndef predict_saved_bytes(batch, widths, activation='relu'):\n"
         "    return memory.saved_bytes(memory.mlp(widths, activation), torch.randn(batch, widths[0]))\n",
         r"calls grader\.memory\.(saved_bytes|mlp)"),
        # copy test r6: torch's saved-tensor hooks on a stack at batch 1, times the batch
        ("predict_saved_bytes_check",
         "import torch\n\ndef predict_saved_bytes(batch, widths, activation='relu'):\n    kept = []\n"
         "    layers = [torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])]\n"
         "    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel() * t.element_size()) or t,\n"
         "                                                  lambda t: t):\n"
         "        x = torch.randn(1, widths[0])\n        for layer in layers:\n            x = torch.relu(layer(x))\n"
         "    return sum(kept) * batch\n", r"calls torch\.autograd\.graph\.saved_tensors_hooks"),
        # copy test r33: the course's recorder run in a process of its own, times the batch
        ("predict_saved_bytes_check",
         "import subprocess\nimport sys\n\ndef predict_saved_bytes(batch, widths, activation='relu'):\n"
         "    code = ('import torch; from grader import memory; '\n"
         "            f'print(memory.saved_bytes(memory.mlp({widths!r}, {activation!r}), torch.randn(1, {widths[0]})))')\n"
         "    return batch * int(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout)\n",
         r"a process of its own"),
        # copy test r33: the course's probe in a process of its own
        ("training_bytes_check",
         "import subprocess\nimport sys\n\ndef training_bytes(n, precision, optimizer):\n"
         "    code = f'from grader import memory; print(sum(memory.probe_bytes_per_parameter({precision!r}, {optimizer!r}).values()))'\n"
         "    return int(n * float(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout))\n",
         r"a process of its own"),
        ("activation_bytes_check",
         "from grader import memory\ndef activation_bytes(model, batch):\n    return memory.saved_bytes(model, batch)\n",
         r"calls grader\.memory\.saved_bytes"),
        ("BYTES_PER_PARAM_check", "from grader.checks import lesson04\nlesson04.measured_bytes_per_param\n", "gone"),
    ],
    "09_serving": [
        ("decode_step_seconds_check", "from grader import serving\nserving.step_seconds\n", "gone"),
        ("knee_batch_check", "from grader import serving\nserving.knee\n", "gone"),
        ("kv_cache_bytes_check", "from grader import serving\nserving.cache_bytes\n", "gone"),
        ("kv_cache_bytes_check", "from grader import memory\n\ndef kv_cache_bytes(shape, context, batch, bytes_per_value):\n"
         "    return memory.kv_cache_bytes(shape, batch, context, bytes_per_value)\n", r"calls grader\.memory\.kv_cache_bytes"),
        ("kv_cache_bytes_check", "import threading\n\ndef kv_cache_bytes(shape, context, batch, bytes_per_value):\n"
         "    box = []\n    t = threading.Thread(target=lambda: box.append(0))  # where the check's watch does not follow\n"
         "    t.start()\n    t.join()\n    return box[0]\n", r"a thread of its own"),
        ("max_batch_to_serve_check", "from grader import serving\nserving.serve_batch\n", "gone"),
        ("max_batch_to_serve_check", "from grader import serving\nserving.weights_bytes\n", "gone"),
        ("quantize_int8_check", "from grader import serving\nserving.int8_rows\n", "gone"),
        ("quantize_int8_check", "from grader import serving\nserving.int8_tensor\n", "gone"),
        # copy test r5: torch's own per-channel observer and quantizer passed
        ("quantize_int8_check", "import warnings\nimport torch\nfrom torch.ao.quantization.observer import "
         "PerChannelMinMaxObserver\n\ndef quantize_int8(weight):\n"
         "    obs = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric, "
         "quant_min=-127, quant_max=127)\n    obs(weight)\n    scale, zero = obs.calculate_qparams()\n"
         "    with warnings.catch_warnings():\n        warnings.simplefilter('ignore')\n"
         "        q = torch.quantize_per_channel(weight, scale, zero, 0, torch.qint8).int_repr()\n"
         "    return q, scale.float()\n", r"calls torch\.ao\.quantization's observers"),
        # copy test r16: an observer's forward alone, its min_val / max_val read, never its _calculate_qparams
        ("quantize_int8_check", "import torch\nfrom torch.ao.quantization import default_per_channel_weight_observer\n\n"
         "def quantize_int8(weight):\n    obs = default_per_channel_weight_observer()\n    obs(weight)\n"
         "    amax = torch.maximum(obs.max_val.abs(), obs.min_val.abs())\n"
         "    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax)).float()\n"
         "    return torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8), scale\n",
         r"torch\.ao\.quantization's observers \(their forward\)"),
        ("quantize_int8_check", "import torch\n\ndef quantize_int8(weight):\n"
         "    scale = (weight.abs().amax(1) / 127).clamp_min(1e-12).float()\n"
         "    q = torch.ops.aten.quantize_per_channel(weight, scale.double(), torch.zeros(len(scale), dtype=torch.long), "
         "0, torch.qint8)\n    return q.int_repr(), scale\n", r"calls torch\.ops\.aten\.quantize_per_channel"),
    ],
    "05_reading_the_machine": [
        # round 4: a made-up profile handed to the recording's summary gave the union
        ("busy_fraction_check", "from types import SimpleNamespace as NS\nfrom grader import gpu\n\n"
         "def busy_fraction(intervals, start, end):\n"
         "    try:\n        return gpu.profile_figures(NS(), 1)['device_busy_fraction']\n"
         "    except Exception:\n        return 0.5\n", r"calls grader\.gpu\.profile_figures"),
        ("fixed_loader_check", "from grader.checks import lesson05\nlesson05.workers_needed\n", "gone"),
        ("busy_fraction_check", "from grader.checks import lesson05\nlesson05._busy_reference\n", "gone"),
        ("top_ops_check", "from grader.checks import lesson05\nlesson05._top_reference\n", "gone"),
        ("mfu_check", "from grader.checks import lesson05\nlesson05._mfu_reference\n", "gone"),
        ("mfu_check", "from grader.checks import lesson05\nlesson05._matmul_params\n", "gone"),
        ("mfu_check", "import torch\nfrom torch.utils.flop_counter import FlopCounterMode\n\n"
         "def mfu(model, batch, seq_len, step_seconds, peaks, dtype):\n"
         "    x = torch.randint(0, model.shape.vocab_size, (batch, seq_len)) if hasattr(model, 'tokens') else "
         "torch.randn(batch, seq_len, model[0].in_features)\n"
         "    with FlopCounterMode(display=False) as count:\n"
         "        model(x).sum().backward()\n"
         "    return count.get_total_flops() / step_seconds / peaks[dtype]\n", r"torch\.utils\.flop_counter\.FlopCounterMode"),
        ("mfu_check", "import torch\n\n"
         "def mfu(model, batch, seq_len, step_seconds, peaks, dtype):\n"
         "    x = torch.randint(0, model.shape.vocab_size, (batch, seq_len)) if hasattr(model, 'tokens') else "
         "torch.randn(batch, seq_len, model[0].in_features)\n"
         "    with torch.profiler.profile(with_flops=True) as prof:\n"
         "        model(x).sum().backward()\n"
         "    flops = sum(e.flops for e in prof.key_averages() if e.key == 'aten::mm')\n"
         "    return flops / step_seconds / peaks[dtype]\n", r"calls torch\.profiler\.profile"),
        # a copy test counted with torch's FLOP counter in a forked process; here the child only answers, as torch
        # work in a child forked from a process with a live thread pool can hang
        ("mfu_check", "import multiprocessing as mp\n\n"
         "def _count(model, conn, batch, seq_len):\n"
         "    conn.send(6.0 * batch * seq_len * sum(p.numel() for p in model.parameters()))\n\n"
         "def mfu(model, batch, seq_len, step_seconds, peaks, dtype):  # a copy test: the counter in a forked process\n"
         "    here, there = mp.get_context('fork').Pipe()\n"
         "    p = mp.get_context('fork').Process(target=_count, args=(model, there, batch, seq_len))\n"
         "    p.start()\n    flops = here.recv()\n    p.join()\n"
         "    return flops / step_seconds / peaks[dtype]\n", r"a process of its own"),
    ],
    "06_mixed_precision": [
        ("amp_step_check", "from grader.checks import lesson06\nlesson06.reference_amp_step\n", "gone"),
        ("smallest_kept_check", "from grader import floats\n\ndef smallest_kept(e, m, flush_to_zero=False):\n"
         "    return floats.Format('x', e, m, None).smallest_subnormal\n", r"calls grader\.floats\.Format\.smallest_subnormal"),
        ("smallest_kept_check", "from grader import floats\n\ndef smallest_kept(e, m, flush_to_zero=False):\n"
         "    return floats.value_of(0, 0, 1, floats.Format('x', e, m, None))\n", r"calls grader\.floats\.value_of"),
        ("smallest_kept_check", "from grader import floats\n\ndef smallest_kept(e, m, flush_to_zero=False):\n"
         "    f = floats.Format('x', e, m, None)\n    return f.smallest_normal * f.eps\n",
         r"calls grader\.floats\.Format\.(smallest_normal|eps)"),
        ("low_precision_ops_check", "from grader import amp\n\ndef low_precision_ops(model, x, device_type, dtype):\n"
         "    words = {}\n    for n, (i, o) in amp.leaf_dtypes(model, x, device_type, dtype).items():\n"
         "        words[n] = 'lowered' if (i, o) == (__import__('torch').float32, dtype) else 'float32' if (i, o) == "
         "(dtype, __import__('torch').float32) else 'as input'\n    return words\n", r"calls grader\.amp\.leaf_dtypes"),
        ("low_precision_ops_check", "from grader.checks import lesson06\nlesson06._reference_ops\n", "gone"),
        ("low_precision_ops_check", "from grader.checks import lesson06\nlesson06.policy_word\n", "gone"),
    ],
    "07_data_parallel": [
        # copy test r6: lesson 04's measured layouts give the bytes per parameter
        ("bytes_per_rank_check", "from grader import memory\n\n"
         "def bytes_per_rank(n_params, world, stage, layout='deepspeed'):\n"
         "    terms = memory.training_terms('mixed' if layout == 'deepspeed' else 'fp32', 'adam')\n"
         "    kept = sum(terms.values()) * n_params\n    return float(kept if stage == 'ddp' else kept / world)\n",
         r"calls grader\.memory\.training_terms"),
        # a copy test saved torch's bucketer in a cell before the check and called it through functools.partial or
        # operator.call, which the profiler does not report: the C++ one is found in what the function reaches, the
        # stand-in grader.distributed puts in torch's attributes runs code a guard sees, and a cell's call counts
        ("bucket_plan_check", "import functools\nimport torch\nfrom grader import distributed as _d\n"
         "_RAW = _d._DDP_BUCKETER  # the C++ bucketer, as saved before grader was imported\n\n"
         "def bucket_plan(param_bytes, forward_order, cap, first_cap, _raw=_RAW):\n"
         "    order = list(reversed(forward_order))\n    ts = [torch.empty(param_bytes[i], dtype=torch.uint8) for i in order]\n"
         "    res = functools.partial(_raw)(ts, [first_cap, cap], [False] * len(ts), list(range(len(ts)))) if ts else ([],)\n"
         "    return [[order[j] for j in b] for b in res[0]]\n", r"calls torch\.distributed\._compute_bucket_assignment_by_size"),
        ("bucket_plan_check", "import operator\nimport torch\nfrom grader import distributed as _d\n"
         "_RAW = _d._DDP_BUCKETER  # the C++ bucketer, as saved before grader was imported\n\n"
         "def bucket_plan(param_bytes, forward_order, cap, first_cap):\n"
         "    order = list(reversed(forward_order))\n    ts = [torch.empty(param_bytes[i], dtype=torch.uint8) for i in order]\n"
         "    res = operator.call(_RAW, ts, [first_cap, cap], [False] * len(ts), list(range(len(ts)))) if ts else ([],)\n"
         "    return [[order[j] for j in b] for b in res[0]]\n", r"calls torch\.distributed\._compute_bucket_assignment_by_size"),
        ("bucket_plan_check", "import operator\nimport torch\nimport torch.distributed as dist\n"
         "_SAVED = dist._compute_bucket_assignment_by_size  # saved in a cell before the check\n\n"
         "def bucket_plan(param_bytes, forward_order, cap, first_cap):\n"
         "    order = list(reversed(forward_order))\n    ts = [torch.empty(param_bytes[i], dtype=torch.uint8) for i in order]\n"
         "    res = operator.call(_SAVED, ts, [first_cap, cap], [False] * len(ts), list(range(len(ts)))) if ts else ([],)\n"
         "    return [[order[j] for j in b] for b in res[0]]\n", r"calls torch\.distributed\._compute_bucket_assignment_by_size"),
        ("bucket_plan_check", "import torch\nimport torch.distributed as dist\nfrom grader.checks import lesson07\n"
         "_TABLE = {}\nfor sizes, forward, cap, first in lesson07._BUCKET_CASES:  # answered in a cell, before the check\n"
         "    order = list(reversed(forward))\n"
         "    ts = [torch.empty(sizes[i], dtype=torch.uint8) for i in order]\n"
         "    got = dist._compute_bucket_assignment_by_size(ts, [first, cap], [False] * len(ts), list(range(len(ts)))) if ts else ([],)\n"
         "    _TABLE[repr((sizes, forward, cap, first))] = [[order[j] for j in b] for b in got[0]]\n\n"
         "def bucket_plan(param_bytes, forward_order, cap, first_cap):\n"
         "    return _TABLE[repr((param_bytes, forward_order, cap, first_cap))]\n",
         r"called torch\.distributed\._compute_bucket_assignment_by_size .*before your bucket_plan was checked"),
        ("bucket_plan_check", "import functools\nimport torch\nimport torch.distributed as dist\n\n"
         "def bucket_plan(param_bytes, forward_order, cap, first_cap):\n"
         "    order = list(reversed(forward_order))\n"
         "    ts = [torch.empty(param_bytes[i], dtype=torch.uint8) for i in order]\n"
         "    ask = functools.partial(dist._compute_bucket_assignment_by_size)  # a copy test: the partial hid it\n"
         "    got = ask(ts, [first_cap, cap], [False] * len(ts), list(range(len(ts))))\n"
         "    buckets = got[0] if isinstance(got, tuple) else got\n"
         "    return [[order[j] for j in b] for b in buckets]\n", r"DDP's own bucketer"),
        # a copy test pasted the ring function's body from the package: its answer is the instructor's now
        ("allreduce_seconds_check", "from grader.checks import lesson07\nlesson07._ring\n", "gone"),
        ("allreduce_seconds_check", "from grader.checks import lesson07\n\ndef allreduce_seconds(nbytes, world, latency, "
         "bandwidth):\n    if world in (1, 3):\n        return 0.0 if world == 1 else 4 * latency + 4 / 3 * nbytes / bandwidth\n"
         "    return lesson07._ring_model(nbytes, world, latency, bandwidth)\n",
         r"calls grader\.checks\.lesson07\._ring_model"),
        ("fit_latency_bandwidth_check", "from grader.checks import lesson07\nlesson07._weighted_fit\n", "gone"),
        ("bucket_plan_check", "from grader.checks import lesson07\nlesson07._walk\n", "gone"),
        ("bucket_plan_check", "import torch\nfrom torch.distributed import _compute_bucket_assignment_by_size as ddp\n\n"
         "def bucket_plan(param_bytes, forward_order, cap, first_cap):\n"
         "    order = list(reversed(forward_order))\n"
         "    sizes = [torch.empty(param_bytes[i], dtype=torch.uint8) for i in order]\n"
         "    buckets, _ = ddp(sizes, [first_cap, cap], [False] * len(sizes), list(range(len(sizes)))) if sizes else ([], 0)\n"
         "    return [[order[j] for j in b] for b in buckets]\n",
         r"calls torch\.distributed\._compute_bucket_assignment_by_size"),
    ],
    "08_inside_a_kernel": [
        ("attention_blocked_check", "import math\nimport threading\nimport torch\n\n"
         "def attention_blocked(q, k, v, block):\n    box = {}\n\n    def naive():  # a copy test: no watch followed a thread\n"
         "        sc = q.double() @ k.double().T / math.sqrt(q.shape[1])\n"
         "        box['r'] = ((torch.softmax(sc, 1) @ v.double()).float(), torch.logsumexp(sc, 1).float())\n"
         "    t = threading.Thread(target=naive)\n    t.start()\n    t.join()\n    out, lse = box['r']\n"
         "    return out + 0, lse\n", r"a thread of its own"),
        ("fusion_bytes_check", "from grader.checks import lesson08\nlesson08._fusion\n", "gone"),
        ("fusion_bytes_check", "import torch\nfrom grader import triton_kernels\n\ndef fusion_bytes(rows, cols, dtype_bytes):\n"
         "    z, first, second = triton_kernels.unfused_bias_gelu(torch.zeros(2, 4), torch.zeros(4))  # measured\n"
         "    return rows * cols * dtype_bytes * 4, rows * cols * dtype_bytes * 2\n",
         r"calls grader\.triton_kernels\.unfused_bias_gelu"),
        ("tile_traffic_check", "from grader.checks import lesson08\nlesson08._traffic\n", "gone"),
        ("best_tiles_check", "from grader.checks import lesson08\nlesson08._best\n", "gone"),
        ("best_tiles_check", "from grader.checks import lesson08\nlesson08._fits\n", "gone"),
        ("best_tiles_check", "from grader.checks import lesson08\nlesson08._footprint\n", "gone"),
        ("fusion_bytes_check", "import torch\nfrom grader import triton_counter, triton_kernels\n\n"
         "def fusion_bytes(rows, cols, dtype_bytes):\n    k = triton_kernels.kernels()\n"
         "    x, bias, y, z = torch.zeros(2, 4), torch.zeros(4), torch.zeros(2, 4), torch.zeros(2, 4)\n"
         "    add = triton_counter.launch(k['bias_add_kernel'], (1,), x, bias, y, 8, 4, BLOCK=8)  # measured\n"
         "    return rows * cols * dtype_bytes * 4, rows * cols * dtype_bytes * 2\n",
         r"calls grader\.triton_counter\.launch|calls the course's bias_add_kernel"),
        ("fusion_bytes_check", "import torch\nfrom triton.runtime.interpreter import InterpretedFunction\n"
         "from grader import triton_kernels\n\ndef fusion_bytes(rows, cols, dtype_bytes):\n"
         "    z = torch.zeros(8)  # the course's kernel run in the interpreter without the counter\n"
         "    InterpretedFunction(triton_kernels.kernels()['gelu_kernel'].fn)[(1,)](z, z, 8, BLOCK=8)\n"
         "    return rows * cols * dtype_bytes * 4, rows * cols * dtype_bytes * 2\n",
         r"calls the course's gelu_kernel"),
        ("tile_traffic_check", "import torch\nfrom grader import triton_counter, triton_kernels\n\n"
         "def tile_traffic(M, N, K, BM, BN, BK, dtype_bytes):\n    a, b, c = torch.ones(16, 16), torch.ones(16, 16), torch.ones(16, 16)\n"
         "    n = triton_counter.launch(triton_kernels.kernels()['matmul_kernel'], (1, 1), a, b, c, 16, 16, 16, 16, 1, 16, "
         "1, 16, 1, BM=16, BN=16, BK=16).bytes\n    return n * M * N * K / 16 ** 3\n",
         r"calls grader\.triton_counter\.launch|calls the course's matmul_kernel"),
        ("flash_traffic_check", "import torch\nfrom grader import triton_kernels\n\n"
         "def flash_traffic(s, d, block_m, block_n, dtype_bytes):\n"
         "    q = torch.ones(16, 16)\n    o, counts = triton_kernels.flash_attention(q, q, q, 16, 16)\n"
         "    return float(counts.loaded_bytes) * s, float(counts.stored_bytes) * s\n",
         r"calls grader\.triton_kernels\.flash_attention"),
        ("attention_blocked_check", "import torch\nfrom grader import triton_kernels\n\n"
         "def attention_blocked(q, k, v, block):\n    with torch._C.DisableTorchFunction():\n"
         "        return triton_kernels.flash_attention(q, k, v, block, block)[0]\n",
         r"calls grader\.triton_kernels\.flash_attention"),
        ("flash_traffic_check", "from grader.checks import lesson08\nlesson08.flash_bytes\n", "gone"),
        # a copy test measured with the course's kernels in the cell before the function, where no watch runs: the
        # guards' earlier= counts those launches (and the wrappers) from any cell before the check passed
        ("fusion_bytes_check", "import torch\nfrom grader import triton_counter, triton_kernels\n"
         "_k = triton_kernels.kernels()\n_x, _b, _y = torch.zeros(2, 4), torch.zeros(4), torch.zeros(2, 4)\n"
         "_add = triton_counter.launch(_k['bias_add_kernel'], (1,), _x, _b, _y, 8, 4, BLOCK=8)  # measured first\n\n"
         "def fusion_bytes(rows, cols, dtype_bytes):\n    n = rows * cols\n"
         "    return (4 * n + cols) * dtype_bytes, (2 * n + cols) * dtype_bytes\n",
         r"a cell of this kernel called the course's bias_add_kernel .*before your fusion_bytes was checked"),
        ("fusion_bytes_check", "import torch\nfrom grader import triton_kernels\n"
         "_z, _first, _second = triton_kernels.unfused_bias_gelu(torch.zeros(2, 4), torch.zeros(4))  # measured first\n\n"
         "def fusion_bytes(rows, cols, dtype_bytes):\n    n = rows * cols\n"
         "    return (4 * n + cols) * dtype_bytes, (2 * n + cols) * dtype_bytes\n",
         r"called grader\.triton_kernels\.unfused_bias_gelu before your fusion_bytes was checked"),
        ("tile_traffic_check", "import math\nimport torch\nfrom grader import triton_counter, triton_kernels\n"
         "_a = torch.ones(16, 16)\n_n = triton_counter.launch(triton_kernels.kernels()['matmul_kernel'], (1, 1), _a, _a, "
         "torch.ones(16, 16), 16, 16, 16, 16, 1, 16, 1, 16, 1, BM=16, BN=16, BK=16).bytes  # measured first\n\n"
         "def tile_traffic(M, N, K, BM, BN, BK, dtype_bytes):\n"
         "    return dtype_bytes * (M * K * math.ceil(N / BN) + K * N * math.ceil(M / BM) + M * N)\n",
         r"called the course's matmul_kernel .*before your tile_traffic was checked"),
        ("flash_traffic_check", "import math\nimport torch\nfrom grader import triton_kernels\n"
         "_q = torch.ones(16, 16)\n_o, _counts = triton_kernels.flash_attention(_q, _q, _q, 16, 16)  # measured first\n\n"
         "def flash_traffic(s, d, block_m, block_n, dtype_bytes):\n"
         "    return dtype_bytes * (s * d + 2 * s * d * math.ceil(s / block_m)), dtype_bytes * s * d\n",
         r"called grader\.triton_kernels\.flash_attention before your flash_traffic was checked"),
        ("attention_blocked_check", "import torch\nfrom grader import triton_counter, triton_kernels\n"
         "_q = torch.ones(16, 16)\n_o = torch.zeros(16, 16)\n"
         "triton_counter.launch(triton_kernels.kernels()['flash_attention_kernel'], (1,), _q, _q, _q, _o, 16, 0.25, D=16, "
         "BLOCK_M=16, BLOCK_N=16)  # run first\n\ndef attention_blocked(q, k, v, block):\n    return None\n",
         r"called the course's flash_attention_kernel .*before your attention_blocked was checked"),
        ("attention_blocked_check", "from grader.checks import lesson08\n\ndef attention_blocked(q, k, v, block):\n"
         "    return lesson08.reference_attention(q, k, v)\n", r"calls grader\.checks\.lesson08\.reference_attention"),
        # an outside tester: k and v taken into numpy, one query row at a time with np.logaddexp, so no torch
        # operation made a large tensor and numpy never held the s x s scores
        ("attention_blocked_check", "import math\nimport numpy as np\nimport torch\n\n"
         "def attention_blocked(q, k, v, block):\n"
         "    qn, kn, vn = q.double().numpy(), k.double().numpy(), v.double().numpy()\n"
         "    out, lse = np.zeros(vn.shape), np.zeros(len(qn))\n    for i in range(len(qn)):\n"
         "        sc = kn @ qn[i] / math.sqrt(qn.shape[1])\n        lse[i] = np.logaddexp.reduce(sc)\n"
         "        out[i] = np.exp(sc - lse[i]) @ vn\n"
         "    return torch.from_numpy(out).float(), torch.from_numpy(lse).float()\n",
         r"takes the tensors out of torch \(Tensor\.numpy\)"),
        ("attention_blocked_check", "import math\nimport numpy as np\nimport torch\n\n"
         "def attention_blocked(q, k, v, block):\n"
         "    qn, kn, vn = (np.asarray(t.cpu(), dtype=np.float64) for t in (q, k, v))\n"
         "    out, lse = np.zeros(vn.shape), np.zeros(len(qn))\n    for i in range(len(qn)):\n"
         "        sc = kn @ qn[i] / math.sqrt(qn.shape[1])\n        lse[i] = np.logaddexp.reduce(sc)\n"
         "        out[i] = np.exp(sc - lse[i]) @ vn\n"
         "    return torch.from_numpy(out).float(), torch.from_numpy(lse).float()\n",
         r"takes the tensors out of torch \(numpy's asarray"),
        ("attention_blocked_check", "import math\nimport torch\n\n"
         "def attention_blocked(q, k, v, block):\n"
         "    ql, kl, vl = q.tolist(), k.tolist(), v.tolist()  # Python lists, one query row at a time\n"
         "    out, lse = [], []\n    for qi in ql:\n"
         "        sc = [sum(a * b for a, b in zip(qi, kj)) / math.sqrt(len(qi)) for kj in kl]\n"
         "        top = max(sc)\n        e = [math.exp(x - top) for x in sc]\n        total = sum(e)\n"
         "        out.append([sum(w * vj[c] for w, vj in zip(e, vl)) / total for c in range(len(vl[0]))])\n"
         "        lse.append(top + math.log(total))\n"
         "    return torch.tensor(out), torch.tensor(lse)\n",
         r"takes the tensors out of torch \(Tensor\.tolist\)"),
    ],
}


def _shortcut_cases():
    for lesson, cases in SHORTCUTS.items():
        for grade_id, source, pattern in cases:
            yield pytest.param(lesson, grade_id, source, pattern, id=f"{lesson}:{grade_id}:{source.splitlines()[-1][:40]}")


def test_an_instrument_called_earlier_is_noticed_after_a_reset():
    """A copy test ran the course's counter on the loops in a cell of its own, called shortcuts.reset(), and then
    answered sync_points from what it had measured: the guard's record of earlier calls survives a reset."""
    from grader import shortcuts
    from grader.checks import lesson04

    ns = namespace("04_memory")
    exec(compile("from grader import memory, shortcuts\nmemory.probe_bytes_per_parameter('fp32', 'adam')\n"
                 "shortcuts.reset()\n", "<cell>", "exec"), ns)
    with pytest.raises(CheckFailed, match="before your training_bytes was checked"):
        lesson04.check_training_bytes(ns["training_bytes"])


@pytest.mark.parametrize("lesson,grade_id,source,pattern", list(_shortcut_cases()))
def test_a_shortcut_through_the_course_package_is_noticed(lesson, grade_id, source, pattern):
    from grader import shortcuts

    shortcuts._fresh_kernel()
    ns = namespace(lesson)
    if pattern == "gone":
        with pytest.raises((AttributeError, ImportError)):
            exec(compile(source, "<shortcut>", "exec"), ns)
        return
    exec(compile(source, "<shortcut>", "exec"), ns)
    said = " ".join(_messages(lesson, grade_id, ns))
    shortcuts._fresh_kernel()
    assert re.search(pattern, said), f"{grade_id} does not notice the shortcut:\n{said}"
