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


def test_state_table_reads_adam_state_only_after_a_step():
    model = torch.nn.Linear(8, 4)
    opt = memory.make_optimizer(model.parameters(), "adam")
    model(torch.randn(2, 8)).sum().backward()
    assert memory.totals(memory.state_table(model, opt))["optimizer"] == 0
    opt.step()
    t = memory.totals(memory.state_table(model, opt))
    assert t["parameters"] == t["gradients"] == 36 * 4
    steps = sum(r["nbytes"] for r in memory.state_table(model, opt) if r["name"].endswith(".step"))
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
    assert memory.activation_model(shape, batch, seq, checkpointing=checkpointing) == saved.nbytes


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

    def max_batch(m, fixed, per):
        calls.append((m, fixed, per))
        return max(0, (m - fixed) // per)

    def acts(row, batch, seq, precision, checkpointing):
        shape = memory.shape_from_row(row, seq=seq)
        return memory.activation_model(shape, batch, seq, 2 if precision == "mixed" else 4, 1, checkpointing)

    models = specs.load_models()
    chips = [c for c in specs.load_chips() if c.memory_bytes]
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
