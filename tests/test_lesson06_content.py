"""Lesson 06 (mixed precision): the toolkit it uses (grader.amp), its GPU path, and its checks' judges on forged data."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from conftest import ROOT, read_notebook
from grader import amp, specs
from grader.checks import _plain, lesson06
from grader.notebook import CheckFailed, NotDone

LESSON = "06_mixed_precision"
sys.path.insert(0, str(ROOT / "scripts"))
import build_keys  # noqa: E402

JUDGES = build_keys.instructor_judges(LESSON)


def _step(dtype, scaler):
    """The course's reference step on the CPU (the instructor's, solutions/judges), as the lessons' runs call it."""
    reference = _instructor_judges().reference_amp_step

    def step(model, opt, x, y, loss_fn):
        return reference(model, opt, x, y, loss_fn, "cpu", dtype, scaler, lesson06.NO_CLIP)

    return step


def _train(dtype, scaler, steps=12, loss_scale=1e-6):
    _, x, y = amp.make_task(seed=0)
    loss_fn = amp.scaled_mse(loss_scale)
    step = _step(dtype, scaler)
    return amp.train(lambda m, o: step(m, o, x, y, loss_fn), "run", steps, loss_scale=loss_scale, scaler=scaler)


def test_cpu_instructions_says_what_it_found():
    info = amp.cpu_instructions()
    assert info["capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["flags"] is None or set(info["flags"]) <= set(amp.LOW_PRECISION_FLAGS)
    assert info["capability"] in amp.describe_cpu(info)


def test_make_task_is_the_same_for_a_seed_and_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    (m1, x1, y1), (m2, x2, y2) = amp.make_task(seed=4), amp.make_task(seed=4)
    assert torch.equal(torch.rand(1), expected)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))


def test_fp16_without_a_scaler_underflows_and_with_one_learns():
    stuck = _train(torch.float16, None)
    learned = _train(torch.float16, torch.amp.GradScaler("cpu"))
    assert stuck.zero_grads[0] == 1.0 and stuck.losses[-1] == stuck.losses[0]
    assert learned.zero_grads[0] < 0.5 and learned.losses[-1] < 0.9 * learned.losses[0]
    # every step of the stuck run was applied (no gradient was inf) and moved no weight (every gradient was 0)
    assert stuck.skipped == [] and len(stuck.unchanged) == 12 and learned.skipped == []


def test_grad_scaler_halves_exactly_where_it_skips():
    run = _train(torch.float16, torch.amp.GradScaler("cpu", init_scale=2.0**48, growth_interval=3), steps=20)
    assert run.skipped and run.skipped[0] == 0
    assert amp.halved_where_skipped(run)
    assert run.scales[0] == 2.0**47  # halved, never raised, after an overflow


def test_saved_for_backward_counts_autocasts_weight_copies():
    model, x, y = amp.make_task(seed=0, d_in=64, width=128, batch=32)
    fp32 = amp.saved_for_backward(model, x, y, amp.scaled_mse(1.0), None)
    bf16 = amp.saved_for_backward(model, x, y, amp.scaled_mse(1.0), torch.bfloat16)
    assert fp32["weight_copies"] == 0 and set(fp32["by_dtype"]) == {"float32"}
    # the second layer's weight, transposed, in 2 bytes: backward needs it for the gradient of its input; the first
    # layer's input needs no gradient, so its weight copy is not saved
    assert bf16["weight_copies"] == 128 * 2
    assert 0 < bf16["total"] < fp32["total"]
    assert sum(bf16["by_dtype"].values()) == bf16["total"]


def test_gpu_model_is_labelled_and_follows_its_assumptions():
    chip = specs.chip("H100")
    row = next(r for r in specs.load_models() if r["model"].startswith("GPT-2 small"))
    from grader.memory import shape_from_row

    shape = shape_from_row(row, seq=1024)
    figures = {fmt: amp.gpu_step_model(chip, row["n_params"], shape, 8, 1024, fmt) for fmt in amp.GPU_FORMATS}
    six = amp.lesson_constants()["training_flops_per_parameter_per_token"]
    assert six["value"] == 6 and "Kaplan" in six["source"]
    assert math.isclose(figures["bf16"]["step_seconds"], 6 * row["n_params"] * 8 * 1024 / chip.peak("bf16"))
    assert figures["fp32"]["step_seconds"] > figures["tf32"]["step_seconds"] > figures["bf16"]["step_seconds"]
    assert figures["fp32"]["peak_bytes"] == figures["tf32"]["peak_bytes"]
    # third edition: under CUDA's autocast the residual stream, LayerNorm's inputs and softmax's output stay float32
    # and the matmul after softmax keeps a bf16 copy too, so bf16's peak is at or above fp32's (not 8.16 GiB)
    assert figures["bf16"]["peak_bytes"] >= figures["fp32"]["peak_bytes"]
    assert 12.5 < figures["bf16"]["peak_bytes"] / 2**30 < 13.5 and 12.0 < figures["fp32"]["peak_bytes"] / 2**30 < 12.9
    assert "model" in amp.gpu_label(chip) and "not a measurement" in amp.gpu_label(chip)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_amp_figures_refuse_clearly_without_cuda():
    from grader import gpu

    with pytest.raises(RuntimeError, match="NVIDIA GPU"):
        gpu.amp_training_figures()


# --- the checks ------------------------------------------------------------------------------------


def _reference_step(model, opt, x, y, loss_fn, device_type, dtype, scaler, max_norm):
    return _instructor_judges().reference_amp_step(model, opt, x, y, loss_fn, device_type, dtype, scaler, max_norm)


def test_hidden_amp_step_test_passes_the_reference_and_fails_a_step_without_zero_grad():
    lesson06.amp_step_on(_reference_step, scenario="bf16, no scaler", seed=7, steps=3, why="x")

    def forgetful(model, opt, x, y, loss_fn, device_type, dtype, scaler, max_norm):
        return _instructor_judges().reference_amp_step(model, opt, x, y, loss_fn, device_type, dtype, scaler,
                                                       max_norm, zero_grad=False)

    with pytest.raises(CheckFailed, match="should match"):
        lesson06.amp_step_on(forgetful, scenario="bf16, no scaler", seed=7, steps=3, why="should match")


def test_a_stub_is_not_done():
    def amp_step(*args):
        raise NotImplementedError

    with pytest.raises(NotDone, match="amp_step"):
        lesson06.check_amp_step(amp_step)


FORGED = [None, 0, "x", [], {}, {"calls": []}, {"calls": [["[]", {"value": 1}]]}, [{"got": 1}],
          {name: {} for name in lesson06._SCENARIOS},
          {"bf16": {}, "fp16": {}, "bf16 again": {}, "hooks_left": 0}]


@pytest.mark.parametrize("check", [lesson06.check_amp_step, lesson06.check_low_precision_ops, lesson06.check_smooth,
                                   lesson06.check_verdict, lesson06.check_smallest_kept])
@pytest.mark.parametrize("forged", range(len(FORGED)))
def test_a_forged_observation_never_passes(check, forged):
    observation = _plain.roundtrip(FORGED[forged])
    with pytest.raises(Exception):
        check.judge(observation)


def test_checks_print_nothing_when_they_fail(capsys):
    with pytest.raises(CheckFailed):
        lesson06.check_smooth(lambda losses, beta: [0.0 for _ in losses])
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_the_lesson_corrects_its_source_on_the_scaler_and_says_how_run_all_stops():
    nb = read_notebook(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb")
    text = "\n".join(c.source for c in nb.cells)
    assert "Run All stops at the first exercise you have not done yet" in text
    assert "It is the other way round" in text and "get_backoff_factor()" in text
    assert "from grader.notebook import skip_if_not_done" in text


def test_lesson_shows_a_recorded_gpu_run_labelled_as_such(tmp_path, monkeypatch):
    import json
    import shutil

    from grader.pipeline.run import run

    data = tmp_path / "data"
    shutil.copytree(ROOT / "data", data, ignore=shutil.ignore_patterns("recorded"))
    (data / "recorded").mkdir()
    rows = [{"format": f, "step_seconds": s, "step_seconds_min": s, "step_seconds_max": s, "tokens_per_second": 8192 / s,
             "peak_bytes": b, "loss_after_steps": 5.0}
            for f, s, b in (("fp32", 0.4, 20e9), ("tf32", 0.2, 20e9), ("bf16", 0.1, 15e9), ("fp16", 0.1, 15e9))]
    fixture = {  # a test fixture, not a measurement: it lives only in this temporary folder
        "provenance": {"device": "TEST-FIXTURE-GPU", "torch": "0.0", "date": "2000-01-01", "driver": "0", "cuda": "0",
                       "command": "tests/test_lesson06_content.py"},
        "figures": {"amp": {"model": "GPT-2 small (124M)", "batch": 8, "seq": 1024, "steps": 20, "formats": rows}},
    }
    (data / "recorded" / "fixture.json").write_text(json.dumps(fixture))
    monkeypatch.setenv("GRADER_DATA", str(data))
    results = run(ROOT, [LESSON], {"device": "cpu", "demo": True, "threads": 1}, tmp_path / "out", log=lambda line: None)
    assert results[0][2] == "ok", results[0][2]
    text = json.dumps(read_notebook(tmp_path / "out" / f"{LESSON}.ipynb"))
    assert "recorded: TEST-FIXTURE-GPU" in text and "not a measurement" in text  # the explorer stays a model


# --- the first edition's false claims (issue 19), each pinned ------------------------------------------------


def _lesson_text() -> str:
    nb = read_notebook(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb")
    return "\n".join(c.source for c in nb.cells)


def _fp32_final(loss_scale: float, eps: float, steps: int = 40) -> float:
    _, x, y = amp.make_task(seed=0)
    loss_fn = amp.scaled_mse(loss_scale)

    def step(model, opt):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return amp.train(step, "fp32", steps, loss_scale=loss_scale, eps=eps).final


def test_adams_eps_holds_back_a_scaled_fp32_run_unless_eps_scales_with_the_loss():
    """06 cell 8: 'Adam's update does not depend on the loss's size' is false below eps (0.0066 vs 0.118)."""
    torch.set_num_threads(1)
    unscaled, held, scaled_eps = _fp32_final(1.0, 1e-8), _fp32_final(1e-6, 1e-8), _fp32_final(1e-6, 1e-14)
    assert held > 5 * unscaled  # the default eps holds the scaled run back
    assert math.isclose(scaled_eps, unscaled, rel_tol=1e-3)
    text = _lesson_text()
    assert "Adam's update does not depend on the loss's size" not in text
    assert "EPS = 1e-8 * loss_scale" in text and text.count("eps=EPS)") >= 4  # every run of section 2 uses it


def test_the_policy_sentence_is_built_from_what_autocast_did():
    """06 cell 16: a fixed 'a LayerNorm after a bf16 Linear stays bf16 here' was printed on every device."""
    import pandas as pd

    cuda_like = pd.DataFrame({"module": {"1": "LayerNorm", "2": "GELU", "4": "LogSoftmax"},
                              "bf16: input": {"1": "bfloat16", "2": "bfloat16", "4": "bfloat16"},
                              "bf16: output": {"1": "float32", "2": "bfloat16", "4": "float32"}})
    words = amp.policy_words(cuda_like)
    assert "LayerNorm (1), LogSoftmax (4) received bf16 and returned float32" in words
    assert "GELU (2) received bf16 and returned bf16" in words
    cpu_like = cuda_like.assign(**{"bf16: output": "bfloat16"})
    assert "float32" not in amp.policy_words(cpu_like)
    text = _lesson_text()
    assert "stays bf16 here" not in text and "amp.policy_words(stack_table)" in text


def test_the_policy_sentence_says_what_this_run_cannot_tell():
    """06 cell 18 said 'LayerNorm, GELU, Linear (3), LogSoftmax received bf16 and returned bf16: the policy let them run
    in the input's type'. Linear is on autocast's lowered list; bf16 in and bf16 out cannot tell the two apart, which
    is the rule low_precision_ops teaches. The words claim neither, on the stack autocast really runs here."""
    import pandas as pd

    stack = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8), torch.nn.LogSoftmax(dim=-1))
    seen = amp.leaf_dtypes(stack, torch.randn(4, 16), "cpu", torch.bfloat16)
    short = {n: (str(i).removeprefix("torch."), str(o).removeprefix("torch.")) for n, (i, o) in seen.items()}
    table = pd.DataFrame({"module": {n: type(m).__name__ for n, m in stack.named_modules() if not list(m.children())},
                          "bf16: input": {n: io[0] for n, io in short.items()},
                          "bf16: output": {n: io[1] for n, io in short.items()}})
    assert short["3"] == ("bfloat16", "bfloat16")  # the second Linear is fed its predecessor's bf16 output
    words = amp.policy_words(table)
    assert "Linear (0) received float32 and returned bf16: the policy lowered it" in words
    clause = next(c for c in words.split("; ") if "Linear (3)" in c)
    assert "cannot tell" in clause and "lowers" in clause and "input's type" in clause
    assert "the policy let" not in words and "ran in" not in words
    fp32_kept = pd.DataFrame({"module": {"a": "LayerNorm"}, "bf16: input": {"a": "float32"},
                              "bf16: output": {"a": "float32"}})
    assert "cannot tell" in amp.policy_words(fp32_kept)
    ints = pd.DataFrame({"module": {"e": "Embedding"}, "bf16: input": {"e": "int64"}, "bf16: output": {"e": "float32"}})
    assert "nothing of the policy" in amp.policy_words(ints)
    text = _lesson_text()
    assert "amp.policy_words(table)" in text and "says nothing about the policy" not in text


def test_the_step_and_matmul_sentence_follows_the_measured_direction():
    """06 cell 35 ended 'so a step gains less than a matmul' on a CPU (AVX2 only) where bf16 and fp16 were measured
    15× (step) and 210× (matmul) slower than fp32: the words now follow the ratios the cell measured."""
    slower = amp.step_vs_matmul_words({"bf16": 15.0, "fp16": 15.0}, {"bf16": 210.0, "fp16": 210.0}, 256)
    assert "gain" not in slower and "faster" not in slower
    assert slower.count("15.0× slower than fp32's") == 2 and slower.count("210.0× slower") == 2
    assert slower.count("by a smaller factor than the matmul") == 2
    faster = amp.step_vs_matmul_words({"bf16": 0.8}, {"bf16": 0.25}, 256)
    assert "1.2× faster" in faster and "4.0× faster" in faster and "slower" not in faster
    mixed = amp.step_vs_matmul_words({"fp16": 1.5}, {"fp16": 0.5}, 256)
    assert "an fp16 step was 1.5× slower" in mixed and "2.0× faster" in mixed and "the other way" in mixed
    assert "by a larger factor" in amp.step_vs_matmul_words({"bf16": 3.0}, {"bf16": 2.0}, 256)
    text = _lesson_text()
    assert "gains less than a matmul" not in text and "amp.step_vs_matmul_words(" in text


def test_skipped_steps_are_not_said_to_cost_no_accuracy():
    """06 cell 13 said 'The scale costs steps early on, not accuracy' while cell 28 calls the same 2^48 run 'stalled'
    at an equal step count. The words now say both counts, from the run's own losses."""
    reference = amp.TrainingRun("fp32", losses=[1.0 / (i + 1) for i in range(10)])
    caught_up = amp.TrainingRun("fp16", losses=[1.0] * 3 + [1.0 / (i + 1) for i in range(7)], skipped=[0, 1, 2])
    words = amp.skip_cost_words(caught_up, reference)
    assert "not accuracy" not in words
    assert "where fp32 was" in words and "behind fp32" in words and "count against it" in words
    assert "after 7 steps" in words and "after 10" in words
    lagging = amp.TrainingRun("fp16", losses=[1.0] * 9 + [0.5], skipped=[0, 1])
    assert "more than its skipped steps account for" in amp.skip_cost_words(lagging, reference)
    assert "none of its 2 steps" in amp.skip_cost_words(amp.TrainingRun("x", losses=[1.0, 1.0], skipped=[0, 1]),
                                                       reference)
    text = _lesson_text()
    assert "not accuracy" not in text and "amp.skip_cost_words(hunt, runs[\"fp32\"])" in text


def _instructor_judges():
    """solutions/judges/lesson06.py, which holds the answers of the keyed checks (never packaged), loaded once."""
    return JUDGES


def test_smallest_kept_is_the_smallest_subnormal_torch_keeps():
    """06 cells 25-27: the smallest *normal* column beside a 98.8 % loss; fp8 as 'needs a loss scaler'."""
    judges = _instructor_judges()  # the answers live with the instructor (solutions/judges), not in the package
    assert judges.torch_smallest_kept(torch.float16) == 2.0**-24  # about 6e-8
    for name, (e, m, dtype) in judges.KEPT_FORMATS.items():
        kept = judges.torch_smallest_kept(dtype)
        assert torch.tensor(kept).to(dtype).item() == kept  # representable
        assert torch.tensor(kept * 0.49).to(dtype).item() == 0.0  # below half of it: gone
        assert judges.smallest_kept_reference(e, m) == kept, name
    text = _lesson_text()
    assert "needs_scaler" not in text
    assert "fp8 training scales each tensor by its own factor" in text and "subnormal" in text


def test_flush_to_zero_takes_only_what_is_subnormal_in_fp32():
    """Wave 2: smallest_kept's flush_to_zero. Measured here: computed in fp32 with torch.set_flush_denormal(True), fp32
    and bf16 keep nothing below 2^-126, while fp16's and fp8's subnormals (fp32 normals) all stay."""
    judges = _instructor_judges()
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot switch flushing (torch.set_flush_denormal returns False)")
    for name, (e, m, dtype) in judges.KEPT_FORMATS.items():
        assert judges.measured_smallest_kept(dtype, False) == judges.smallest_kept_reference(e, m), name
        assert judges.measured_smallest_kept(dtype, True) == judges.smallest_kept_reference(e, m, True), name
    assert judges.smallest_kept_reference(8, 7, True) == 2.0**-126 != judges.smallest_kept_reference(8, 7)
    assert judges.smallest_kept_reference(5, 10, True) == judges.smallest_kept_reference(5, 10) == 2.0**-24
    assert torch.tensor(1e-40) * 1.0 != 0  # the mode is off again
    text = _lesson_text()
    assert "torch.set_flush_denormal(False)" in text  # the show cell switches it off again


def test_low_precision_sizes_are_small_and_the_lesson_says_why():
    """06 cell 31: 1024² bf16/fp16 matmuls took ~100 s on a CPU without fp16 instructions."""
    nb = read_notebook(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb")
    params = next(c.source for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    values = {}
    exec(params, {}, values)
    assert values["matmul_n"] <= 256 and values["time_width"] <= 256
    text = _lesson_text()
    assert "n = 1024" not in text and "n = matmul_n" in text
    assert "oneDNN" in text and "avx512_fp16" in text


def test_verdict_cases_cover_what_the_lesson_teaches():
    """Issue 19: the visible check saw one rising run; now flat-and-noisy, near the tolerance, a rising reference."""
    def reference(ref, run, beta, rtol):
        import math as m

        if not all(m.isfinite(v) for v in run):
            return "diverged"
        mine, base = _instructor_judges().smooth_reference(run, beta), _instructor_judges().smooth_reference(ref, beta)
        if mine[-1] > mine[0] * (1 + rtol):
            return "diverged"
        return "agrees" if abs(mine[-1] - base[-1]) <= rtol * abs(base[-1]) else "stalled"

    want = {"flat and noisy": "stalled", "rising with a rising reference": "diverged", "5.2 % above": "stalled",
            "4.8 % below": "agrees", "reference ends on a noisy step": "agrees"}
    for name, answer in want.items():
        assert reference(*lesson06._VERDICT_CASES[name]) == answer, name
    lesson06.check_verdict(reference)


def test_amp_step_check_sees_the_loss_outside_autocast_and_a_bf16_scaler():
    def loss_outside(model, opt, x, y, loss_fn, device_type, dtype, scaler, max_norm):
        opt.zero_grad()
        with torch.autocast(device_type, dtype=dtype):
            out = model(x)
        loss = loss_fn(out, y)
        (loss if scaler is None else scaler.scale(loss)).backward()
        (opt.step() if scaler is None else (scaler.step(opt), scaler.update()))
        return loss, True

    with pytest.raises(CheckFailed, match="after the `with torch.autocast` block had closed"):
        lesson06.check_amp_step(loss_outside)


def test_low_precision_ops_check_gives_a_forward_that_fails():
    seen = lesson06._observe_broken(lambda model, x, device_type, dtype: model(x))
    assert seen == {"raised": "RuntimeError", "hooks_left": 0}


# --- third edition (issue 30) -------------------------------------------------------------------------------


def test_the_autocast_memory_model_is_the_saved_tensor_recorder_per_dtype():
    """The GPU memory model of the autocast run counted 2 bytes for every activation. It is now built per tensor at the
    dtype the policy gives it; under the CPU's policy (the one this machine can run) it equals, byte for byte, what
    the saved-tensor recorder measures for TinyGPT (dims chosen so no two coincide), weight copies left out."""
    from grader import memory
    from grader.transformer import Shape, TinyGPT, batch_of_tokens

    shape = Shape(n_layers=2, d_model=48, n_heads=4, d_ff=80, vocab_size=70, max_seq_len=20, dropout=0.0)
    torch.manual_seed(0)
    net = TinyGPT(shape)
    tokens = batch_of_tokens(shape, 3, 20, "cpu")
    weight_shapes = {tuple(p.shape) for p in net.parameters()} | {tuple(p.shape)[::-1] for p in net.parameters()}
    with memory.SavedTensors(exclude=net.parameters()) as saved:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = net(tokens)
            torch.nn.functional.cross_entropy(logits.float().reshape(-1, 70), tokens.reshape(-1))
    measured = sum(r["storage_nbytes"] for r in saved.rows if r["counted"]
                   and not (tuple(r["shape"]) in weight_shapes and r["dtype"] != "torch.float32"))
    assert amp.autocast_activation_model(shape, 3, 20, device_type="cpu") == measured
    uniform = memory.activation_model(shape, 3, 20, element_bytes=2, mask_bytes=1, loss=True)
    assert uniform < measured  # the first edition's 2 bytes per activation leaves the float32 residual stream out
    # CUDA's policy: softmax in float32 plus the bf16 copy the matmul after it saves, 6 bytes per b·h·s² element
    extra = amp.autocast_activation_model(shape, 3, 20, device_type="cuda") - measured
    assert extra == (4 + 2 - 2) * 3 * shape.n_heads * 20 * 20 * shape.n_layers  # bytes × b·h·s² × layers


def test_the_gpu_parameters_are_not_launch_bound_and_no_activation_has_a_weights_shape():
    """06's GPU parameters kept 256² matmuls and a batch equal to the width: activations shaped like weights were
    counted as autocast's weight copies."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_run", ROOT / "scripts" / "gpu_run.py")
    gpu_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_run)
    params = gpu_run.GPU_PARAMETERS[LESSON]
    assert params["matmul_n"] >= 4096 and params["time_width"] >= 2048
    assert params["time_batch"] not in (params["time_width"], 1)


@pytest.mark.parametrize("d_in,width,batch", [(64, 128, 128), (128, 128, 128), (256, 256, 256), (64, 128, 64)])
def test_weight_copies_are_told_by_what_they_are_not_by_their_shape(d_in, width, batch):
    """06 cell 37 counted saved low-precision tensors shaped like a weight (or its transpose) as autocast's weight
    copies: right only while batch (128) != width (256). With batch == width (or == d_in) an activation or the cast
    input has a weight's shape and was counted too. The copies are now told by their autograd history: made from a
    parameter alone, by a cast and views."""
    model, x, y = amp.make_task(seed=0, d_in=d_in, width=width, batch=batch)
    bf16 = amp.saved_for_backward(model, x, y, amp.scaled_mse(1.0), torch.bfloat16)
    # only the second layer's weight (1, width), transposed, in 2 bytes: the first layer's input needs no gradient
    assert bf16["weight_copies"] == width * 2
    assert [r["shape"] for r in bf16["rows"] if r["weight copy"]] == [(width, 1)]
    assert amp.saved_for_backward(model, x, y, amp.scaled_mse(1.0), None)["weight_copies"] == 0


def test_a_made_up_formats_limits_are_refused_before_smallest_kept_and_inside_it():
    """Copy test r22 read Format('x', 6, 9, None).smallest_subnormal in a cell of its own before the check, r23 in
    another process: the package now refuses a made-up format's limits (floats.MadeUpFormat), and a smallest_kept that
    asks for them is named by the check."""
    from grader import floats
    from grader.checks import lesson06
    from grader.notebook import CheckFailed

    from notebook_cells import solution_cells

    with pytest.raises(floats.MadeUpFormat):
        floats.Format("x", 6, 9, None).smallest_subnormal  # a cell of its own
    with pytest.raises(CheckFailed, match=r"calls grader\.floats\.Format\.smallest_subnormal"):
        lesson06.check_smallest_kept(lambda e, m, flush_to_zero=False: floats.Format("x", e, m, None).smallest_subnormal)
    namespace: dict = {}
    exec(solution_cells("06_mixed_precision")["smallest_kept"], namespace)
    lesson06.check_smallest_kept(namespace["smallest_kept"])
