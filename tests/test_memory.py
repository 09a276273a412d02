"""Unit tests of grader.memory and grader.transformer (CPU only): instruments against known tensors, models against them."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from matplotlib.figure import Figure

from grader import gpu, memory, plots, specs, widgets
from grader.transformer import Shape, TinyGPT, batch_of_tokens


def test_storage_nbytes_counts_each_storage_once():
    x = torch.zeros(10, 4)  # 160 bytes
    assert memory.storage_nbytes([x, x[:2], x.T, torch.zeros(3)]) == 160 + 12


def _judges():
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "scripts"))
    import build_keys

    return build_keys.instructor_judges("04_memory")


def test_state_table_is_the_instructors_not_the_learners():
    """ct0304: an exec'd copy of grader.memory.state_table passed state_bytes; it lives in the judges now."""
    assert not hasattr(memory, "state_table") and not hasattr(memory, "totals")


def test_state_table_reads_adam_state_only_after_a_step():
    judges = _judges()
    model = torch.nn.Linear(8, 4)
    opt = memory.make_optimizer(model.parameters(), "adam")
    model(torch.randn(2, 8)).sum().backward()
    assert judges.totals(judges.state_table(model, opt))["optimizer"] == 0
    opt.step()
    t = judges.totals(judges.state_table(model, opt))
    assert t["parameters"] == t["gradients"] == 36 * 4
    steps = sum(r["nbytes"] for r in judges.state_table(model, opt) if r["name"].endswith(".step"))
    assert t["optimizer"] - steps == 2 * 36 * 4


@pytest.mark.parametrize("precision", memory.PRECISIONS)
@pytest.mark.parametrize("optimizer", memory.OPTIMIZERS)
def test_probe_bytes_per_parameter(precision, optimizer):
    got = memory.probe_bytes_per_parameter(precision, optimizer)
    moments = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    width = 4 if precision == "fp32" else 2
    assert got == {"parameters": width, "gradients": width,
                   "optimizer": 4 * moments + (4 if precision == "mixed" else 0)}


def test_probe_leaves_the_random_stream_alone():
    torch.manual_seed(1)
    a = torch.rand(1)
    torch.manual_seed(1)
    memory.probe_bytes_per_parameter("mixed", "adam")
    assert torch.equal(torch.rand(1), a)


def test_saved_tensors_excludes_parameters_and_duplicates():
    lin = torch.nn.Linear(6, 3)
    x = torch.randn(5, 6, requires_grad=True)
    with memory.SavedTensors(exclude=lin.parameters()) as saved:
        y = lin(x)
        (y * y).sum()
    # saved: x (120 bytes), lin's weight (excluded), y twice (60 bytes once)
    assert saved.nbytes == 120 + 60
    assert any(r["why not"] == "parameter" for r in saved.rows)
    assert any(r["why not"] == "already counted" for r in saved.rows)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("batch,seq", [(1, 16), (3, 32), (2, 48)])
def test_activation_model_matches_the_hooks_exactly_on_cpu(dropout, checkpointing, batch, seq):
    shape = Shape(n_layers=2, d_model=32, n_heads=4, d_ff=128, vocab_size=64, max_seq_len=64, dropout=dropout)
    model = TinyGPT(shape, checkpointing=checkpointing)
    with memory.SavedTensors(exclude=model.parameters()) as saved:
        model(batch_of_tokens(shape, batch, seq))
    assert memory.activation_model(shape, batch, seq, checkpointing=checkpointing, peak=False) == saved.nbytes


def test_activation_model_is_a_line_in_batch():
    shape = memory.shape_from_row(specs.load_models()[0])
    one, two, five = (memory.activation_model(shape, b, 1024, element_bytes=2, mask_bytes=1) for b in (1, 2, 5))
    assert five - one == 4 * (two - one)


def test_shape_from_row_and_dropout_mask_bytes():
    row = next(m for m in specs.load_models() if m["model"] == "LLaMA-7B")
    shape = memory.shape_from_row(row, seq=512)
    assert (shape.n_layers, shape.d_model, shape.max_seq_len, shape.dropout) == (32, 4096, 512, 0.0)
    assert memory.dropout_mask_bytes("cpu") == 4 and memory.dropout_mask_bytes("cuda") == 1


def test_checkpointing_keeps_the_same_function():
    shape = Shape(n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=50, max_seq_len=16, dropout=0.0)
    plain, ckpt = TinyGPT(shape), TinyGPT(shape, checkpointing=True)
    ckpt.load_state_dict(plain.state_dict())
    tokens = batch_of_tokens(shape, 2, 16)
    assert torch.allclose(plain(tokens), ckpt(tokens))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_step_figures():
    x = torch.randn(256, 256, device="cuda")
    figures = gpu.cuda_step_figures(lambda: (x @ x).sum(), "cuda")
    assert figures.reserved_after >= figures.allocated_after and figures.peak_allocated >= figures.allocated_before


def test_memory_stack_and_bytes_vs_return_figures():
    fig = plots.memory_stack([("a", {"parameters": 2**30, "activations (model)": 2**29})], [("chip", 2**31)])
    assert isinstance(fig, Figure)
    assert isinstance(plots.bytes_vs([1, 2], {"measured": [1, 2]}, "batch"), Figure)


def _training_bytes(n, precision, optimizer):
    return n * (sum(memory.training_terms(precision, optimizer).values()))


def test_will_it_fit_widget_redraws_and_uses_the_learners_functions():
    calls = []

    def max_batch(m, peaks):  # the learner's contract: peaks measured at two batch sizes
        (b1, p1), (b2, p2) = sorted(peaks.items())
        per = (p2 - p1) // (b2 - b1)
        fixed = p1 - b1 * per
        calls.append((m, fixed, per))
        return max(0, (m - fixed) // per)

    def acts(row, batch, seq, precision, checkpointing):
        shape = memory.shape_from_row(row, seq=seq)
        return memory.activation_model(shape, batch, seq, 2 if precision == "mixed" else 4, 1, checkpointing)

    models = specs.load_models()
    chips = [c for c in specs.load_chips() if c.memory_bytes and c.vendor == "NVIDIA"]  # cards with a CUDA context
    box = widgets.will_it_fit(models, chips, _training_bytes, max_batch, acts)
    controls = [w for row in box.children[:2] for w in row.children]
    verdict = box.children[2]
    before = verdict.value
    next(w for w in controls if w.description == "model").value = 4  # LLaMA-7B
    assert verdict.value != before and "LLaMA-7B" in verdict.value
    fixed_plain = calls[-1][1]
    next(w for w in controls if w.description.startswith("GPUs")).value = 8
    assert calls[-1][1] < fixed_plain  # sharding shrinks the fixed bytes
    assert "model" in verdict.value


# --- issue 11: one recorder, the recompute peak, serving, the chip's memory, the calculator's arithmetic ---------


def test_the_recorder_skips_leaves_in_lesson_02s_form():
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with memory.SavedTensors(skip_leaves=True) as saved:  # lesson 02's form: leaves (x, the weight) are not recorded
        y = lin(x).relu()
    assert saved.rows and all(r["shape"] == (2, 3) for r in saved.rows)
    assert saved.alive() == (1, 24)
    del y
    assert saved.alive() == (0, 0)


def test_the_recorder_counts_liveness_and_bytes_at_once():
    net = memory.relu_mlp([6, 5, 3])
    with memory.SavedTensors(exclude=net.parameters()) as saved:
        out = net(torch.randn(2, 6))
    assert saved.nbytes == 4 * 2 * (6 + 5) and saved.alive()[1] == saved.nbytes
    del out
    assert saved.alive() == (0, 0)


def test_relu_mlp_keeps_each_linears_input():
    for batch, widths in [(3, [7, 5]), (4, [10, 20, 30, 5]), (2, [8, 16, 8])]:
        assert memory.saved_bytes(memory.relu_mlp(widths), torch.randn(batch, widths[0])) == 4 * batch * sum(widths[:-1])


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_checkpointing_peak_is_the_checkpoints_plus_one_rebuilt_block(dropout):
    shape = Shape(n_layers=3, d_model=32, n_heads=4, d_ff=64, vocab_size=50, max_seq_len=32, dropout=dropout)
    plain, ckpt = TinyGPT(shape), TinyGPT(shape, checkpointing=True)
    tokens = batch_of_tokens(shape, 2, 16)
    kept = memory.saved_bytes(ckpt, tokens)
    hidden = torch.randn(2, 16, 32, requires_grad=True)
    rebuilt = memory.saved_bytes(plain.blocks[0], hidden) - hidden.numel() * 4  # its input is the checkpoint
    assert memory.activation_model(shape, 2, 16, checkpointing=True, peak=False) == kept
    assert memory.activation_model(shape, 2, 16, checkpointing=True) == kept + rebuilt > kept
    assert memory.block_activation_model(shape, 2, 16) == rebuilt + hidden.numel() * 4


def test_inference_is_weights_plus_kv_cache():
    llama = next(m for m in specs.load_models() if m["model"] == "LLaMA-7B")
    need = memory.inference_bytes(llama, batch=1, seq=2048)
    assert need["weights"] == 2 * 6_738_415_616
    assert need["KV cache"] == 2 * 32 * 2048 * 4096 * 2 == 2**30  # k and v, 32 layers, 4096 wide, bf16
    gqa = next(m for m in specs.load_models() if m["model"] == "Llama 2 70B")
    assert memory.kv_cache_bytes(gqa, 1, 1) == 2 * 80 * 8 * 128 * 2  # 8 KV heads of 128


def test_card_memory_is_what_nvidia_smi_reports_less_a_labelled_reserve():
    a100 = specs.chip("A100")
    assert memory.card_bytes(a100) == 81_920 * 2**20  # an "80 GB" card: 81,920 MiB
    constants = specs.model_constants()
    reserve = constants["cuda_context_reserve_bytes"]
    assert reserve["kind"] == "model assumption" and reserve["depends_on"] and reserve["source"]
    assert memory.usable_bytes(a100) == 81_920 * 2**20 - reserve["value"]
    label = memory.chip_label(a100)
    assert "80 GiB" in label and "CUDA context" in label and "model" in label and "75 GiB" not in label
    with pytest.raises(ValueError):
        memory.card_bytes(specs.chip("M1"))


def test_fit_adds_up_the_terms_and_calls_the_learners_functions():
    row = next(m for m in specs.load_models() if m["model"] == "GPT-2 small (124M)")
    calls = []

    def max_batch(m, peaks):  # the learner's contract: peaks measured at two batch sizes
        (b1, p1), (b2, p2) = sorted(peaks.items())
        per = (p2 - p1) // (b2 - b1)
        fixed = p1 - b1 * per
        calls.append((m, fixed, per))
        return max(0, (m - fixed) // per)

    def acts(row, batch, seq, precision, checkpointing):
        return 1000 + 10 * batch

    got = memory.fit(row, 10**12, "mixed", "adam", 4, 1024, False, 2, _training_bytes, max_batch, acts)
    n = row["n_params"]
    assert got["stack"]["parameters"] == 2 * n and got["stack"]["gradients"] == 2 * n
    assert got["stack"]["optimizer state (/2 GPUs)"] == 12 * n / 2
    assert got["stack"]["activations (model)"] == 1040 and got["per_sample"] == 10
    assert got["total"] == sum(got["stack"].values()) and got["fits"]
    assert calls == [(10**12, int(4 * n + 6 * n + 1000), 10)] and got["largest_batch"] == (10**12 - int(10 * n + 1000)) // 10


def test_optimizer_share_is_half_in_fp32_and_three_quarters_mixed():
    for precision, share in (("fp32", 0.5), ("mixed", 0.75)):
        terms = memory.training_terms(precision, "adam")
        assert terms["optimizer"] / sum(terms.values()) == share
        assert sum(terms.values()) == 16


def test_memory_stack_labelled_and_mib_lines_label_every_line():
    fig = plots.memory_stack_labelled([("a", {"parameters": 2**30, "activations (model)": 2**29})],
                                      [("chip A: 79 GiB usable (model)", 79 * 2**30)])
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "chip A: 79 GiB usable (model)" in labels and ax.get_yscale() == "linear"
    assert all(t.get_fontsize() >= 9 for t in ax.get_legend().get_texts())
    fig = plots.mib_lines([1, 2], {"measured": [1, 2], "model": [1, 2]}, "batch (samples)")
    assert fig.axes[0].get_xlabel() == "batch (samples)" and len(fig.axes[0].get_legend().get_texts()) == 2
