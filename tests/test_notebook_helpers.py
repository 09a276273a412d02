"""grader.notebook: what a learner sees for an unfinished exercise, a failed check, and a show cell that must wait."""

from __future__ import annotations

import pytest

from grader.checks._common import call, recorded
from grader.notebook import CheckFailed, NotDone, needs, skip_if_not_done


def _stub(n):
    raise NotImplementedError()


def test_unfinished_and_failed_render_as_one_line():
    assert NotDone("matmul_bytes")._render_traceback_() == [
        "✎ exercise not done yet: write `matmul_bytes` above, then run its cell and this one again"]
    assert CheckFailed("you counted elements")._render_traceback_() == ["✗ you counted elements"]
    assert isinstance(NotDone("x"), NotImplementedError) and isinstance(CheckFailed("x"), AssertionError)


def test_a_check_turns_the_stub_into_not_done_naming_the_function():
    def matmul_flops(n):
        raise NotImplementedError()

    with pytest.raises(NotDone, match="write `matmul_flops` above"):
        call(matmul_flops, 4)
    check = recorded("matmul_flops", "matmul_flops", [(4,)], lambda fn: None)
    with pytest.raises(NotDone, match="matmul_flops"):
        check(matmul_flops)


def test_a_crash_is_a_message_not_a_traceback():
    with pytest.raises(CheckFailed, match=r"f\(4\) raised ZeroDivisionError"):
        call(lambda n: 1 / 0, 4, label="f(4)")


def test_skip_if_not_done_skips_with_one_line_and_later_cells_follow(capsys):
    with skip_if_not_done():
        table = _stub(3)  # noqa: F841  never assigned
    assert capsys.readouterr().out == "⏭ skipped: this cell needs `_stub`, which is not done yet\n"
    with skip_if_not_done():
        print(table)  # noqa: F821  the name a skipped cell would have made
    assert "earlier skipped cell" in capsys.readouterr().out
    with pytest.raises(ZeroDivisionError):  # a real error in a show cell still shows
        with skip_if_not_done():
            1 / 0


def test_needs_skips_a_cell_at_a_stub_before_anything_after_it_runs(capsys):
    """A show cell that runs an instrument before it calls the learner's function gates on the stub first (a copy test
    ran ahead on a blank notebook and lesson 02's counter stamped SYNC_ANSWERS as revealed, showing nothing)."""
    def train_fixed(model, batches, device, steps):
        """A docstring and a comment are still a stub."""
        # YOUR CODE HERE
        raise NotImplementedError()

    def written(model, batches, device, steps):
        if steps < 0:
            raise NotImplementedError("negative steps")
        return []

    ran = []
    with skip_if_not_done():
        needs(written, train_fixed)
        ran.append(True)
    assert not ran and "needs `train_fixed`" in capsys.readouterr().out
    needs(written, type("Kernel", (), {"fn": written})())  # a written function, a triton kernel's .fn: no skip


def test_a_long_check_message_wraps_at_spaces_to_fit_a_1024_px_window():
    """JupyterLab breaks long error lines mid-word ("divi / de"); the message arrives pre-wrapped at spaces instead."""
    from grader.notebook import SHOWN_WIDTH

    words = "take the bytes moved and divide them by the seconds, then divide by 1e9 to get GB/s " * 3
    (shown,) = CheckFailed(words.strip() + "\nyour timer said 3 s")._render_traceback_()
    lines = shown.splitlines()
    assert len(lines) > 3 and all(len(line) <= SHOWN_WIDTH for line in lines), lines
    assert " ".join(line.strip() for line in lines).removeprefix("✗ ") == words.strip() + " your timer said 3 s"


def test_a_show_cell_that_measures_an_answer_waits_for_its_check_to_pass(capsys):
    """Lesson 04's probe cells, run after a failing training_bytes: they ran the probe, and the check then refused the
    honest answer that followed ("a cell of this kernel called ... probe_bytes_per_parameter") until a restart. Such a
    cell now skips with one line until the check has passed, and the honest answer passes."""
    from grader import memory, shortcuts
    from grader.checks import lesson04
    from notebook_cells import namespace

    shortcuts._fresh_kernel()
    right = namespace("04_memory")["training_bytes"]
    with pytest.raises(AssertionError):
        lesson04.check_training_bytes(lambda n, precision, optimizer: 16 * n)  # wrong: the check fails
    with skip_if_not_done():
        needs(right, lesson04.check_training_bytes)
        memory.probe_bytes_per_parameter("mixed", "adam")  # never reached
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and "runs once the check of `training_bytes` has passed" in said, said
    lesson04.check_training_bytes(right)
    assert "✓" in capsys.readouterr().out
    with skip_if_not_done():
        needs(right, lesson04.check_training_bytes)
        print("shown")
    assert capsys.readouterr().out == "shown\n"
    shortcuts._fresh_kernel()


def test_writing_a_learners_record_writes_nothing_where_the_tests_run(tmp_path, monkeypatch):
    """honest_predictions, called from a module-scoped fixture (no record of the test's own), noted the made-up
    machine's figures in predictions.json of the working folder: the repository's, where a learner's record lives."""
    import os

    from grader import predictions
    from notebook_cells import honest_predictions

    monkeypatch.delenv(predictions.ENV_PATH, raising=False)
    here = tmp_path / "where the tests run"
    here.mkdir()
    monkeypatch.chdir(here)
    made = honest_predictions("09_serving", tmp_path)
    assert made.exists() and predictions.ENV_PATH not in os.environ
    assert list(here.iterdir()) == []
