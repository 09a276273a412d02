"""The course's own Triton kernels for lesson 08: the unfused bias + GELU chain, a tiled matmul, and a FlashAttention forward.

These are given, not exercises: the lesson reads them, runs them under grader.triton_counter and asks the
learner to predict what they move. Importing this module needs triton (Linux); the counter runs the
kernels in Triton's interpreter whatever TRITON_INTERPRET said when they were decorated, and on an NVIDIA
GPU (scripts/gpu_run.py) the same code compiles.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from grader.shortcuts import course_only


@triton.jit
def bias_add_kernel(x_ptr, bias_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # flat indices into the (rows, cols) x
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(bias_ptr + offs % cols, mask=mask)  # one bias per column
    tl.store(y_ptr + offs, x + b, mask=mask)

@triton.jit
def gelu_kernel(y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476)), mask=mask)

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)  # this program's tile of C: rows pid_m*BM.., cols pid_n*BN..
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)  # the C tile stays on chip while we step along K
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)  # (BM, BK)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)  # (BK, BN)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),  # C's dtype
             mask=(rm[:, None] < M) & (rn[None, :] < N))

@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, s, scale, D: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # this program's query rows
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :], mask=rm[:, None] < s, other=0.0)  # (BLOCK_M, D)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running max per query row
    l = tl.zeros((BLOCK_M,), tl.float32)  # running sum per query row
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for j in range(0, s, BLOCK_N):
        rn = j + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + rn[:, None] * D + rd[None, :], mask=rn[:, None] < s, other=0.0)  # (BLOCK_N, D)
        v = tl.load(v_ptr + rn[:, None] * D + rd[None, :], mask=rn[:, None] < s, other=0.0)
        scores = tl.dot(q, tl.trans(k)) * scale  # (BLOCK_M, BLOCK_N): on chip only, never stored
        scores = tl.where(rn[None, :] < s, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # p in v's dtype for the dot; acc stays float32
        m = m_new
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], (acc / l[:, None]).to(o_ptr.dtype.element_ty), mask=rm[:, None] < s)


def kernels() -> dict:
    """{name: kernel}: bias_add_kernel, gelu_kernel, matmul_kernel, flash_attention_kernel."""
    return {"bias_add_kernel": bias_add_kernel, "gelu_kernel": gelu_kernel, "matmul_kernel": matmul_kernel,
            "flash_attention_kernel": flash_attention_kernel}


def source(name: str) -> str:
    """The Python source of one of the course's kernels, to show in the lesson."""
    import inspect
    import textwrap

    return textwrap.dedent(inspect.getsource(kernels()[name].fn))


@course_only("grader.triton_kernels.unfused_bias_gelu")
def unfused_bias_gelu(x, bias, block: int = 1024):
    """x + bias, then GELU, as two kernels under the counter: (z, counts of the add, counts of the GELU)."""
    import torch

    from grader import triton_counter

    n, cols = x.numel(), x.shape[-1]
    y, z = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    grid = (math.ceil(n / block),)
    first = triton_counter.launch(kernels()["bias_add_kernel"], grid, x, bias, y, n, cols, BLOCK=block)
    second = triton_counter.launch(kernels()["gelu_kernel"], grid, y, z, n, BLOCK=block)
    return z, first, second


@course_only("grader.triton_kernels.matmul")
def matmul(a, b, bm: int, bn: int, bk: int):
    """a @ b with the course's tiled kernel under the counter: (c, counts); c in the inputs' dtype, as torch's matmul
    returns it (rounded from the float32 accumulator)."""
    import torch

    from grader import triton_counter

    (M, K), N = a.shape, b.shape[1]
    c = torch.full((M, N), float("nan"), dtype=torch.promote_types(a.dtype, b.dtype))
    counts = triton_counter.launch(kernels()["matmul_kernel"], (math.ceil(M / bm), math.ceil(N / bn)), a, b, c, M, N, K,
                                   *a.stride(), *b.stride(), *c.stride(), BM=bm, BN=bn, BK=bk)
    return c, counts


@course_only("grader.triton_kernels.flash_attention")
def flash_attention(q, k, v, block_m: int, block_n: int):
    """softmax(q kᵀ/√d) v for (s, d) inputs with the course's FlashAttention kernel under the counter: (o, counts);
    o in q's dtype."""
    import torch

    from grader import triton_counter

    s, d = q.shape
    o = torch.full((s, d), float("nan"), dtype=q.dtype)
    counts = triton_counter.launch(kernels()["flash_attention_kernel"], (math.ceil(s / block_m),), q, k, v, o, s,
                                   1.0 / math.sqrt(d), D=d, BLOCK_M=block_m, BLOCK_N=block_n)
    return o, counts
