"""Unit tests of the sync-and-copy counter, the graph-memory helpers and lesson 02's plots and widget (CPU only)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from grader import plots, specs, widgets
from grader.checks import lesson02
from grader.memory import SavedTensors, graph_nodes
from grader.notebook import CheckFailed
from grader.syncs import SyncCounter, modelled_seconds, summary
from mutants.lesson02 import loop_source


def _counted(code: str) -> SyncCounter:
    """Run `code` (learner code: compiled here, not in a library) after placing x, mask, loss on the device."""
    with SyncCounter() as counter:
        ns = {"torch": torch, "np": np, "math": math, "device": counter.device}
        exec("x_host = torch.randn(8, 8); x = x_host.to(device); mask = x > 0; loss = x.sum()", ns)
        counter.events.clear()
        exec(compile(code, "<learner>", "exec"), ns)
    return counter


READS = [
    ("loss.item()", ".item()"),
    ("x.cpu()", ".cpu()"),
    ("x.cpu().numpy()", ".cpu()"),
    ("x.tolist()", ".tolist()"),
    ("print(loss)", "print()"),
    ("s = f'{loss:.2f}'", "f-string"),
    ("s = f'{x}'", "f-string"),
    ("float(loss)", "float()"),
    ("int(loss)", "int()"),
    ("bool(loss > 0)", "bool() (an `if` on a tensor)"),
    ("if loss > 0:\n    pass", "bool() (an `if` on a tensor)"),
    ("math.isfinite(loss)", "float()"),
    ("torch.nonzero(mask)", "nonzero()"),
    ("mask.nonzero()", "nonzero()"),
    ("x[mask]", "boolean mask"),
    ("x[mask[:, 0], 0]", "boolean mask"),
    ("torch.where(mask)", "nonzero()"),
    ("np.asarray(x)", "numpy.asarray()"),
    ("x.to('cpu')", ".to('cpu')"),
]


@pytest.mark.parametrize("code,op", READS, ids=[c for c, _ in READS])
def test_each_read_is_caught_once(code, op):
    counter = _counted(code)
    assert counter.reads == 1 and counter.by_op("read") == {op: 1}, counter.events
    assert counter.events[0].where.startswith("<learner>") and counter.sync_points == 1


def test_numpy_of_a_device_tensor_is_a_read():
    with SyncCounter() as counter:
        x = torch.ones(3, device=counter.device)
        counter.events.clear()
        exec(compile("x.numpy()", "<learner>", "exec"), {"x": x})
    assert counter.by_op("read") == {".numpy()": 1}


@pytest.mark.parametrize("code", ["x.to(device)", "x.cuda()", "x.to(device=device, dtype=torch.float32)",
                                  "d = torch.empty(8, 8, device=device); d.copy_(x)"])
def test_host_to_device_copies_count_their_bytes(code):
    with SyncCounter() as counter:
        ns = {"torch": torch, "device": counter.device, "x": torch.randn(8, 8)}
        exec(compile(code, "<learner>", "exec"), ns)
    assert counter.copies == 1 and counter.bytes_copied == 8 * 8 * 4 and counter.reads == 0
    assert counter.events[0].blocking


def test_pinned_non_blocking_copy_does_not_block():
    with SyncCounter() as counter:
        ns = {"torch": torch, "device": counter.device, "x": torch.randn(4)}
        exec(compile("p = x.pin_memory(); d = p.to(device, non_blocking=True)", "<learner>", "exec"), ns)
        assert ns["p"].is_pinned()
    assert counter.copies == 1 and counter.sync_points == 0


def test_pretend_copy_leaves_the_host_tensor_on_the_host():
    with SyncCounter() as counter:
        x = torch.randn(4)
        on_device = x.to(counter.device)
        assert counter.on_device(on_device) and not counter.on_device(x)
        again = on_device.to(counter.device)  # already there: no copy, as on a GPU
        assert again is on_device or not counter.pretend
    assert counter.copies == 1  # the second .to(device) found it there already


def test_copy_once_and_counted_in_this_file():
    with SyncCounter() as counter:
        x = torch.randn(16)
        d = x.to(counter.device)
        d.to(counter.device)
    assert counter.copies == 1 and counter.bytes_copied == 64


NOT_FLAGGED = [
    "y = x @ x + 1",
    "y = torch.where(mask, x, 0.0)",
    "n = x.shape[0]",
    "total = torch.zeros((), device=device); total += loss.detach()",
    "kept = [loss.detach() for _ in range(3)]",
    "x_host.numpy(); x_host.tolist(); float(x_host[0, 0]); print(x_host.shape)",
    "s = x.sum(dim=0).softmax(dim=0)",
]


@pytest.mark.parametrize("code", NOT_FLAGGED)
def test_work_on_the_device_is_not_flagged(code):
    counter = _counted(code)
    assert counter.events == [], counter.events


def _train(model, batches, device, steps, read_each_step):
    """The lesson's loop as learner code: .item() every step, or one read at the end."""
    source = loop_source("losses.append(loss.item())", ret="losses") if read_each_step else loop_source("losses.append(loss.detach())")
    ns: dict = {}
    exec(compile(source, "<learner>", "exec"), ns)
    return ns["train_fixed"](model, batches, device, steps)


def test_adamw_internal_reads_are_not_counted_one_read_at_the_end_is():
    batches = lesson02.make_batches()
    with SyncCounter() as counter:
        fixed = _train(lesson02.make_model(), batches, counter.device, 6, read_each_step=False)
    assert counter.reads == 1 and counter.by_op("read") == {".tolist()": 1}
    assert counter.copies == 12  # x and y, once per step
    with SyncCounter() as counter:
        buggy = _train(lesson02.make_model(), batches, counter.device, 6, read_each_step=True)
    assert counter.by_op("read") == {".item()": 6}
    assert fixed == pytest.approx(buggy, rel=1e-6)


def test_adamw_step_alone_is_silent():
    model = lesson02.make_model()
    with SyncCounter() as counter:
        model.to(counter.device)
        opt = torch.optim.AdamW(model.parameters())
        model(torch.randn(2, lesson02.FEATURES).to(counter.device)).sum().backward()
        counter.events.clear()
        opt.step()
        opt.step()
    assert counter.events == []


def test_the_course_code_a_learner_calls_counts_at_the_learners_line():
    """A copy test passed train_fixed by copying the batches once and then calling lesson02.train_buggy: the course's
    code counted as a library, so the buggy loop's reads vanished. They count, at the line that called it."""
    with SyncCounter() as counter:
        lesson02.train_buggy(lesson02.make_model(), lesson02.make_batches(), counter.device, 3)
    assert counter.reads == 6 and counter.events and all(e.where.startswith("test_syncs.py:") for e in counter.events)


def test_train_fixed_that_runs_the_buggy_loop_from_the_package_fails():
    source = ("from grader.checks import lesson02\n\n"
              "def train_fixed(model, batches, device, steps):\n"
              "    batches = [(x.to(device), y.to(device)) for x, y in batches]\n"
              "    return lesson02.train_buggy(model, batches, device, steps)\n")
    ns: dict = {}
    exec(compile(source, "<cell>", "exec"), ns)  # noqa: S102
    with pytest.raises(CheckFailed, match="reads for 16 steps"):
        lesson02.check_train_fixed(ns["train_fixed"])


def test_table_summary_and_model():
    counter = _counted("for _ in range(3):\n    loss.item()\nx_host.to(device)")
    (read,) = [r for r in counter.table() if r["kind"] == "read"]
    assert read["count"] == 3 and read["op"] == ".item()"
    row = summary(counter, steps=3)
    assert row["reads"] == 3 and row["copies"] == 1 and row["reads per step"] == 1
    seconds = modelled_seconds(counter, lambda n, b, lat: lat + n / b, 1e9, 1e-5)
    assert seconds == pytest.approx(4e-5 + (3 * 4 + 256) / 1e9)


def test_real_cpu_device_counts_nothing():
    with SyncCounter("cpu") as counter:
        x = torch.randn(4).to("cpu")
        x.sum().item()
    assert not counter.pretend and counter.events == []


def test_saved_tensors_grow_with_kept_losses_and_not_with_detach():
    model = lesson02.make_model()
    x, y = lesson02.make_batches()[0]
    alive = {}
    for keep in (True, False):
        with SavedTensors(skip_leaves=True) as saved:
            kept = [F.mse_loss(model(x), y) for _ in range(4)]
            kept = kept if keep else [k.detach() for k in kept]
            alive[keep] = saved.alive()
    assert alive[True][1] > 0 and alive[False] == (0, 0)
    assert graph_nodes(kept) == 0


def test_graph_nodes_grow_with_kept_training_losses():
    model = lesson02.make_model()
    x, y = lesson02.make_batches()[0]
    kept = []
    counts = []
    for _ in range(3):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        kept.append(loss)
        counts.append(graph_nodes(kept))
    assert 0 < counts[0] < counts[1] < counts[2]


def test_lesson02_plots_return_figures():
    assert isinstance(plots.series_vs_x([1, 2, 4], {"a (model)": [1, 2, 3], "b": [2, 3, 4]}, "x", "y", log=True), Figure)
    assert isinstance(plots.grouped_bars(["p", "q"], {"s (model)": [1, 2], "t": [3, 4]}, "y"), Figure)


def test_transfer_explorer_redraws_on_change():
    box = widgets.transfer_explorer(specs.load_chips(), lambda n, b, lat: lat + n / b, 1e-5)
    controls, verdict, figure = box.children
    before, drawn = verdict.value, bytes(figure.value)
    assert drawn.startswith(b"\x89PNG"), "the figure is the panel's own widget state (a PNG), not a captured output"
    controls.children[1].value = 24  # a bigger batch
    assert verdict.value != before and "MiB" in verdict.value
    assert bytes(figure.value) != drawn, "the figure was not redrawn"


def test_adamw_item_on_a_device_step_counter_is_library_not_learner():
    # AdamW reads its step counter with .item() (torch/optim/optimizer.py); even with that counter
    # on the device, the read is attributed to torch's frame and left out.
    model = lesson02.make_model()
    with SyncCounter() as counter:
        model.to(counter.device)
        opt = torch.optim.AdamW(model.parameters())
        model(torch.randn(2, lesson02.FEATURES).to(counter.device)).sum().backward()
        opt.step()
        for state in opt.state.values():
            state["step"] = state["step"].to(counter.device)
            assert counter.on_device(state["step"])
        counter.events.clear()
        opt.step()
    assert counter.events == []


def test_a_counter_entered_past_its_own_enter_counts_nothing_and_is_recorded():
    """Round 3's copy test entered a SyncCounter through TorchFunctionMode.__enter__ (its course_only __enter__ never
    ran), measured the four loops and looked sync_points up: such a counter counts nothing, and the use is recorded
    under the counter's name, as entering it is."""
    from torch.overrides import TorchFunctionMode

    from grader import shortcuts

    shortcuts._fresh_kernel()
    counter = SyncCounter("cuda")
    ns = {"torch": torch, "counter": counter, "TorchFunctionMode": TorchFunctionMode}
    exec(compile("TorchFunctionMode.__enter__(counter)\ntry:\n    torch.ones(4).to(counter.device).sum().item()\n"
                 "finally:\n    counter.__exit__(None, None, None)\n", "<cell>", "exec"), ns)
    assert counter.sync_points == 0 and counter.events == []
    assert "grader.syncs.SyncCounter" in shortcuts._EVER
    shortcuts._fresh_kernel()
