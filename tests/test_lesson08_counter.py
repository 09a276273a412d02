"""The course's kernel counter (grader/triton_counter.py): bytes, unique bytes, programs, and bounds stopped first."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from grader import triton_counter as tc  # noqa: E402


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def _add_no_mask(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


@triton.jit
def _before_start(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK) - 3
    tl.store(out_ptr + offs + 3, tl.load(x_ptr + offs))


@triton.jit
def _same_block(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)  # every program the same elements
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def _stub(x_ptr):
    raise NotImplementedError()


@triton.jit
def _atomic(x_ptr):
    tl.atomic_add(x_ptr + tl.arange(0, 4), 1.0)


def test_counts_bytes_programs_and_unique_bytes_with_the_masked_tail_not_counted():
    n = 1000
    x, y, out = torch.randn(n), torch.randn(n), torch.full((n,), float("nan"))
    c = tc.launch(_add, (4,), x, y, out, n, BLOCK=256)
    assert torch.equal(out, x + y)  # results copied back into the caller's tensor
    assert (c.programs, c.loaded_bytes, c.stored_bytes, c.unique_bytes) == (4, 2 * n * 4, n * 4, 3 * n * 4)
    assert c.per_argument()["y_ptr"] == {"loaded": 4000, "stored": 0, "unique_loaded": 4000, "unique_stored": 0}
    w = c.writers("out_ptr")
    assert w[0] == 0 and w[255] == 0 and w[256] == 1 and w[999] == 3 and c.overwritten == 0


def test_a_missing_mask_is_stopped_before_the_access_naming_kernel_pointer_and_index():
    n = 1000
    x, y, out = torch.randn(n), torch.randn(n), torch.full((n,), float("nan"))
    with pytest.raises(tc.OutOfBounds, match=r"_add_no_mask, program 3 .*`x_ptr` at indices 1000 \.\. 1023.*1000 elements"):
        tc.launch(_add_no_mask, (4,), x, y, out, n, BLOCK=256)
    assert out.isnan().all()  # nothing copied back from a stopped launch
    with pytest.raises(tc.OutOfBounds, match=r"`x_ptr` at indices -3 \.\. -1"):
        tc.launch(_before_start, (1,), torch.randn(8), torch.empty(8), BLOCK=8)


def test_strided_views_and_a_grid_that_repeats_elements():
    big = torch.randn(6, 10)
    view = big[:, 2:5]  # 3 columns, row stride 10: the span runs from element 2 to 5 * 10 + 4
    out = torch.zeros(16)
    c = tc.launch(_same_block, (3,), view, out, 8, BLOCK=8)
    assert c.unique_loaded_bytes == 8 * 4 and c.loaded_bytes == 3 * 8 * 4 and c.overwritten == 2 * 8
    assert torch.equal(out[:8], big.flatten()[2:10])


def test_unfinished_kernels_other_ops_and_huge_grids_are_refused_clearly():
    with pytest.raises(NotImplementedError):
        tc.launch(_stub, (1,), torch.zeros(4))
    with pytest.raises(tc.KernelFailed, match="tl.atomic_rmw"):
        tc.launch(_atomic, (1,), torch.zeros(4))
    with pytest.raises(ValueError, match="1,000,000 programs"):
        tc.launch(_add, (1_000_000,), torch.zeros(4), torch.zeros(4), torch.zeros(4), 4, BLOCK=1)
    with pytest.raises(TypeError, match="not a Triton kernel"):
        tc.launch(lambda x: x, (1,), torch.zeros(4))


def test_the_builder_is_left_as_it_was(monkeypatch):
    from triton.runtime.interpreter import interpreter_builder

    before = dict(interpreter_builder.__dict__)
    with pytest.raises(tc.OutOfBounds):
        tc.launch(_add_no_mask, (1,), torch.zeros(4), torch.zeros(4), torch.zeros(4), 4, BLOCK=8)
    assert set(interpreter_builder.__dict__) == set(before)


def test_a_kernel_decorated_without_the_interpreter_still_runs_under_the_counter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")

    @triton.jit
    def compiled(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), 2.0, tl.float32))

    assert type(compiled).__name__ == "JITFunction"
    x = torch.zeros(4)
    tc.launch(compiled, (1,), x, BLOCK=4)
    assert x.tolist() == [2.0] * 4


def test_another_triton_version_is_refused_with_the_pinned_one_named(monkeypatch):
    monkeypatch.setattr(triton, "__version__", "3.1.0")
    with pytest.raises(RuntimeError, match=r"tested with triton 3\.9\.0; this environment has triton 3\.1\.0"):
        tc.launch(_add, (1,), torch.zeros(4), torch.zeros(4), torch.zeros(4), 4, BLOCK=4)


def test_other_platforms_are_told_what_to_do(monkeypatch):
    monkeypatch.setattr(tc.sys, "platform", "darwin")
    assert "Linux VM" in tc.unavailable() and "WSL2" in tc.unavailable()


def test_the_counter_runs_tl_library_calls_whatever_the_import_order(tmp_path):
    """Imported without TRITON_INTERPRET (as a class grader's runner does), tl.sum and tl.max still run under launch."""
    code = """
import torch, triton, triton.language as tl
from grader import triton_counter
assert type(tl.sum).__name__ == "JITFunction"  # compiled-GPU library functions: the interpreter alone cannot call them

@triton.jit
def norm(x_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.arange(0, BLOCK), x - tl.max(x, 0) + tl.sum(tl.zeros((BLOCK,), tl.float32), 0))

x, out = torch.arange(8.0), torch.empty(8)
triton_counter.launch(norm, (1,), x, out, BLOCK=8)
assert out.tolist() == [v - 7.0 for v in range(8)], out
assert type(tl.sum).__name__ == "JITFunction"  # left as it was
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    (tmp_path / "kernel.py").write_text(code)  # @triton.jit reads the function's source from its file
    done = subprocess.run([sys.executable, str(tmp_path / "kernel.py")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_widest_access_is_the_block_a_kernel_worked_on():
    """softmax_kernel's check fails a kernel that ignores BLOCK (a copy test passed Triton's tutorial, one fixed
    1024-wide block, since every row of the check fit it): the counter reports the lanes of the widest load or store,
    masked lanes included."""
    x, y = torch.randn(100), torch.randn(100)
    assert tc.launch(_add, (4,), x, y, torch.empty(100), 100, BLOCK=32).widest == 32
    assert tc.launch(_add, (1,), x, y, torch.empty(100), 100, BLOCK=1024).widest == 1024
    assert "widest" in tc.launch(_add, (1,), x, y, torch.empty(100), 100, BLOCK=128).summary()


def test_bytes_are_counted_at_each_tensors_element_size():
    """A float16 launch moves 2 bytes an element: the counter reads the element size of each pointer's tensor."""
    n = 100
    x, y, out = torch.randn(n).half(), torch.randn(n).half(), torch.full((n,), float("nan")).half()
    c = tc.launch(_add, (4,), x, y, out, n, BLOCK=32)
    assert (c.loaded_bytes, c.stored_bytes) == (2 * n * 2, n * 2) and torch.equal(out, x + y)
