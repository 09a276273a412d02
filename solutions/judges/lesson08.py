"""The instructor's judges of lesson 08's keyed checks (fusion_bytes, tile_traffic, flash_traffic, best_tiles): they
hold the answers (the byte counts of the fused and unfused chains, of a tiled matmul and of the course's attention
kernel, and the best tile under an on-chip budget), so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson08.py) and keeps
only digests and messages in grader/checks/keys/08_inside_a_kernel.json; the learner's checks
(grader/checks/lesson08.py) judge by those. A message names the kind of mistake and the principle, never the
expected value nor the formula.
"""

from __future__ import annotations

from typing import Callable

from grader.checks._common import call, close, fail, is_number
from grader.checks.lesson08 import _FLASH_CASES, _FUSION_CASES

# --- fusion_bytes ------------------------------------------------------------------------------------


def _fusion(rows: int, cols: int, b: int) -> tuple[int, int]:
    """(unfused, fused) bytes: x + bias writes y, gelu reads y back; fused reads x and bias once and writes once."""
    n = rows * cols
    return (4 * n + cols) * b, (2 * n + cols) * b


def _fusion_bytes(fn: Callable) -> None:
    """fusion_bytes: each kernel's reads and writes, the bias once per column; fused, the intermediate stays on chip."""
    for case in _FUSION_CASES:
        got = call(fn, *case)
        if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(is_number(v) for v in got)):
            fail(f"fusion_bytes{case} returned {got!r}; return (unfused_bytes, fused_bytes), two numbers of bytes.")
    rows, cols, b = _FUSION_CASES[0]
    n = rows * cols
    unfused, fused = (float(v) for v in call(fn, rows, cols, b))
    want_u, want_f = _fusion(rows, cols, b)
    label = f"fusion_bytes({rows}, {cols}, {b})"
    if close(unfused, want_f) and close(fused, want_u):
        fail(f"{label}: swapped; return (unfused, fused).")
    if close(unfused, (2 * n + cols) * b) and close(fused, (n + cols) * b):
        fail(f"{label}: only the reads were counted. Writes move bytes too: each separate op writes its result, and "
             "the fused kernel writes its output.")
    if close(unfused, 5 * n * b) or close(fused, 3 * n * b):
        fail(f"{label}: the bias counted once per element. The bias has one value per column; each is read from "
             "memory once and reused for every row (a cache keeps it; the counter's unique bytes show it).")
    if close(unfused, (3 * n + cols) * b):
        fail(f"{label}: the unfused count has the intermediate y once. As separate ops y goes to memory twice: the "
             "bias add writes it, and GELU reads it back.")
    if not close(unfused, want_u):
        fail(f"{label}: the unfused count is off. Go kernel by kernel: which tensors does each read, which does it "
             "write, and how many elements each (the bias once per column)?")
    if not close(fused, want_f):
        fail(f"{label}: the fused count is off. One kernel reads its inputs once and writes its output once; the "
             "intermediate never leaves the chip.")
    for case in _FUSION_CASES[1:]:
        got, want = call(fn, *case), _fusion(*case)
        if not (close(float(got[0]), want[0]) and close(float(got[1]), want[1])):
            fail(f"fusion_bytes{case} is off for this shape, right for the first: does your count use rows, cols "
                 "and dtype_bytes as given (n = rows × cols elements)?")


# --- flash_traffic -----------------------------------------------------------------------------------


def flash_bytes(s: int, d: int, block_m: int, block_n: int, b: int) -> tuple[int, int]:
    """(loaded, stored) bytes of the course's attention kernel: Q once, K and V once per query block, O once."""
    return b * (s * d + 2 * s * d * -(-s // block_m)), b * s * d


def _flash_traffic(fn: Callable) -> None:
    """flash_traffic: every program (a block of queries) reads its Q block once and walks all of K and V; O once."""
    for case in _FLASH_CASES:
        got = call(fn, *case)
        if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(is_number(v) for v in got)):
            fail(f"flash_traffic{case} returned {got!r}; return (load_bytes, store_bytes).")
    s, d, bm, bn, b = case = _FLASH_CASES[0]
    loads, stores = (float(v) for v in call(fn, *case))
    want_l, want_s = flash_bytes(*case)
    label = f"flash_traffic(s={s}, d={d}, block_m={bm}, block_n={bn}, dtype_bytes={b})"
    if close(stores, want_s + b * s * s) or close(stores, want_s + 4 * s * s):
        fail(f"{label}: the stores count the s × s score matrix. This kernel never writes it: each block of scores "
             "lives in registers and is gone after its step. It stores only what it returns.")
    if close(loads, 3 * b * s * d):
        fail(f"{label}: the loads count Q, K and V once each. Every program (one per query block) walks all of K and "
             "V: how many programs are there?")
    if close(loads, b * (s * d + 2 * s * d * -(-s // bn))):
        fail(f"{label}: K and V re-read once per key block. They are re-read once per program, and a program is a "
             "block of queries, not of keys.")
    if not close(stores, want_s):
        fail(f"{label}: the stores are off. Read the kernel's tl.store: what does it write, and how often?")
    if not close(loads, want_l):
        fail(f"{label}: the loads are off. Read the kernel's tl.load calls: which tensor does each read, in which "
             "loop, and how many programs run it?")
    for case in _FLASH_CASES[1:]:
        got, want = call(fn, *case), flash_bytes(*case)
        if not (close(float(got[0]), want[0]) and close(float(got[1]), want[1])):
            fail(f"flash_traffic{case} is off for this shape, right for another: use each argument as given (round "
                 "a partial query block up).")


JUDGES = {"fusion_bytes": _fusion_bytes, "flash_traffic": _flash_traffic}
