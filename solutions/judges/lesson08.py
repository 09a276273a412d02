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

from grader.checks._common import call, close, fail, is_number, quote
from grader.checks._keys import digest
from grader.checks.lesson08 import (_BEST_CASES, _FLASH_CASES, _FUSION_CASES, _LIMITS, _TILE_CASE, _TILE_CASES,
                                    _TILE_WORDS, LESSON, TILE_CHIP, TILE_SIZES, _best_label)

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
        fail(f"{label}: the bias counted once per element of x. How many of its values are there, and how often "
             "must each cross memory?")
    if close(unfused, (3 * n + cols) * b):
        fail(f"{label}: the unfused count has the intermediate y once. Go kernel by kernel: what does the bias add do "
             "with y, and what does GELU?")
    if not close(unfused, want_u):
        fail(f"{label}: the unfused count is off. Go kernel by kernel: which tensors does each read, which does it "
             "write, and how many of their elements must cross memory?")
    if not close(fused, want_f):
        fail(f"{label}: the fused count is off. In one kernel, which tensors must cross memory at all?")
    for case in _FUSION_CASES[1:]:
        got, want = call(fn, *case), _fusion(*case)
        if not (close(float(got[0]), want[0]) and close(float(got[1]), want[1])):
            fail(f"fusion_bytes{case} is off for this shape, right for the first: does your count use rows, cols "
                 "and dtype_bytes as given (n = rows × cols elements)?")


# --- tile_traffic ------------------------------------------------------------------------------------


def _traffic(M: int, N: int, K: int, BM: int, BN: int, BK: int, b: int) -> int:
    """Bytes a tiled matmul requests: each program reads its strips of A and B, and C is written once."""
    return b * (M * K * -(-N // BN) + K * N * -(-M // BM) + M * N)


def _tile_traffic(fn: Callable) -> None:
    """tile_traffic: A re-read once per column of tiles, B once per row of tiles (rounded up), C written once."""
    got = {case: call(fn, *case) for case in _TILE_CASES}
    for case, value in got.items():
        if not is_number(value):
            fail(f"tile_traffic{case} returned {value!r}; return a number of bytes.")
    M, N, K, BM, BN, BK, b = case = _TILE_CASES[2]
    value, want = float(got[case]), _traffic(*case)
    label = f"tile_traffic(M={M}, N={N}, K={K}, BM={BM}, BN={BN}, BK={BK}, dtype_bytes={b})"
    if close(value, b * (M * K + K * N + M * N)):
        fail(f"{label}: each matrix once. That is the floor a perfect cache gives, not what the programs request: "
             "every program reads a BM × K strip of A and a K × BN strip of B. How many programs read the same strip?")
    if close(value, b * (M * K * (N // BN) + K * N * (M // BM) + M * N)):
        fail(f"{label}: the tile counts were rounded down. A partial tile at the edge of C is still a program, and it "
             "reads its strips like any other (masked lanes aside).")
    if close(value, b * (M * K * -(-N // BN) + K * N * -(-M // BM) + M * N * -(-K // BK))):
        fail(f"{label}: C written once per K step. Read the kernel: where does a program keep its tile of C while it "
             "steps along K, and where is its tl.store?")
    if not close(float(got[_TILE_CASES[0]]), float(got[_TILE_CASES[1]])):
        fail("tile_traffic changed when only BK changed. BK only cuts what a program reads into steps along K: "
             "does the step change how much the program reads in all?")
    if not close(value, want):
        fail(f"{label} is off. Each program computes one tile of C: which rows of A and columns of B does it read, how "
             "many programs read the same ones (tiles at the edge included), and how often is C written?")
    for case, value in got.items():
        if not close(float(value), _traffic(*case)):
            fail(f"tile_traffic{case} is off for this shape, right for another: use each argument as given.")


# --- best_tiles --------------------------------------------------------------------------------------


def _footprint(BM: int, BN: int, BK: int, b: int, stages: int) -> int:
    """Bytes of shared memory: num_stages stages, each a BM × BK piece of A and a BK × BN piece of B."""
    return stages * (BM * BK + BK * BN) * b


def _fits(BM: int, BN: int, BK: int, b: int, stages: int, smem: int, regs: int) -> bool:
    """Shared memory holds the staged pieces; the float32 accumulator must leave registers for everything else."""
    return _footprint(BM, BN, BK, b, stages) <= smem and BM * BN * 4 < regs


# What best_tiles' cases (grader.checks.lesson08._BEST_CASES) tell apart, kept here because it names tiles:
# case 7 is fp16 on an H100 with 3 stages, where 256 × 256 fits shared memory only (its accumulator is the whole
# register file); case 8 has half the registers, so 128 × 256 spills too; case 9 a quarter, where fp16's 2 bytes
# (the accumulator counted at dtype_bytes) would still admit 256 × 64. Case 10 has three quarters of the registers: on
# register files of a power of two, an accumulator counted at 2 bytes and one allowed the whole file pick the same
# tiles (copy test r22 was told the second for the first); here they part.
def _best(M, N, K, BK, b, smem, regs, stages, sizes, fits=_fits):
    """The (BM, BN) with the least traffic among those `fits` admits (ties: smaller footprint, larger BM)."""
    ok = [(BM, BN) for BM in sizes for BN in sizes if fits(BM, BN, BK, b, stages, smem, regs)]
    if not ok:
        return None
    return min(ok, key=lambda t: (_traffic(M, N, K, t[0], t[1], BK, b), _footprint(t[0], t[1], BK, b, stages), -t[0]))


_ONE_TILE = ("The shared-memory budget left out one input tile: each stage holds a piece of A and a piece of B.")
_BUDGET_MISTAKES = [  # (what the mistaken budget admits, what the learner is told)
    (lambda BM, BN, BK, b, s, smem, regs: s * BM * BK * b <= smem and BM * BN * 4 < regs, _ONE_TILE),
    (lambda BM, BN, BK, b, s, smem, regs: s * BK * BN * b <= smem and BM * BN * 4 < regs, _ONE_TILE),
    (lambda BM, BN, BK, b, s, smem, regs: (BM * BK + BK * BN) * b <= smem and BM * BN * 4 < regs,
     "Each pipeline stage holds its own pieces of A and B, so the shared-memory footprint grows with num_stages."),
    (lambda BM, BN, BK, b, s, smem, regs: _footprint(BM, BN, BK, b, s) <= smem,
     "The registers were never counted: the program's accumulator, its whole tile of C, lives in registers, and a "
     "tile whose accumulator does not fit there spills. No error says so on a GPU; the kernel is just slow."),
    (lambda BM, BN, BK, b, s, smem, regs: _footprint(BM, BN, BK, b, s) <= smem and BM * BN * b < regs,
     "The accumulator was counted at dtype_bytes per element. tl.dot accumulates in single precision whatever the "
     "inputs, so the accumulator takes 4 bytes per element of the tile."),
    (lambda BM, BN, BK, b, s, smem, regs: _footprint(BM, BN, BK, b, s) <= smem and BM * BN * 2 < regs,
     "The accumulator was counted at 2 bytes per element, as if it were half precision. tl.dot accumulates in single "
     "precision whatever the inputs, so the accumulator takes 4 bytes per element of the tile."),
    (lambda BM, BN, BK, b, s, smem, regs: _footprint(BM, BN, BK, b, s) <= smem and BM * BN * 4 <= regs,
     "A tile whose accumulator needs the whole register file was taken as fitting. Nothing would be left for the "
     "threads' addresses, the pieces of A and B they multiply, or the loop: it spills."),
    (lambda BM, BN, BK, b, s, smem, regs: _footprint(BM, BN, BK, b, s) + BM * BN * 4 <= smem,
     "The accumulator was counted in shared memory. It lives in the registers, a budget of its own: shared memory "
     "holds the staged pieces of A and B."),
]


def _best_tiles(fn: Callable) -> None:
    """best_tiles: the least traffic among the tiles whose staged pieces and accumulator fit on chip."""
    got = {}
    for k, case in enumerate(_BEST_CASES):
        value = call(fn, *case)
        if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value)):
            fail(f"best_tiles on {_best_label(k)} returned {quote(value)}; return (BM, BN), two tile sizes from `sizes`.")
        got[case] = tuple(value)
    wrong = [case for case in _BEST_CASES if got[case] != tuple(_best(*case))]
    if not wrong:
        return
    k = _BEST_CASES.index(wrong[0])
    for fits, why in _BUDGET_MISTAKES:  # a mistake in the budget shows on every case
        if all(got[case] == _best(*case, fits=fits) for case in _BEST_CASES):
            fail(f"best_tiles on {_best_label(k)} picked a tile that does not fit on chip. {why}")
    case = wrong[0]
    M, N, K, BK, b, smem, regs, stages, _ = case
    mine, want = got[case], tuple(_best(*case))
    if not _fits(*mine, BK, b, stages, smem, regs):
        where = ("its staged pieces of A and B overflow shared memory" if _footprint(*mine, BK, b, stages) > smem else
                 "its single-precision accumulator does not leave room in the register file")
        fail(f"best_tiles on {_best_label(k)} picked a tile that does not fit: {where}. Work out both footprints of "
             "every tile you consider.")
    if _traffic(M, N, K, *mine, BK, b) == _traffic(M, N, K, *want, BK, b):
        fail(f"best_tiles on {_best_label(k)}: another tile that fits moves the same traffic with a smaller "
             "shared-memory footprint. Bigger tiles only pay while they cut traffic (here N may be small: columns past "
             "N buy nothing); on a tie take the smaller footprint, then the larger BM.")
    fail(f"best_tiles on {_best_label(k)}: another tile that fits moves less traffic. Among the tiles that fit both "
         "budgets, take the least traffic (ties: the smaller footprint, then the larger BM).")


# --- TILE_PREDICTION's model ------------------------------------------------------------------------


def tile_model(sm: dict | None = None) -> tuple[tuple, str, dict]:
    """(the best tile, what stops 256 × 256, {tile: (fits, traffic, footprint)}) for TILE_PREDICTION's matmul on
    TILE_CHIP (data/sm.csv)."""
    from grader import specs

    sm = sm or specs.load_sm()[TILE_CHIP]
    smem, regs = int(sm["shared_kb_per_sm"] * 1024), int(sm["registers_kb_per_sm"] * 1024)
    n, BK, b, stages = _TILE_CASE
    tiles = {(bm, bn): (_fits(bm, bn, BK, b, stages, smem, regs), _traffic(n, n, n, bm, bn, BK, b),
                        _footprint(bm, bn, BK, b, stages)) for bm in TILE_SIZES for bn in TILE_SIZES}
    best = _best(n, n, n, BK, b, smem, regs, stages, TILE_SIZES)
    staged_ok, acc_ok = _footprint(256, 256, BK, b, stages) <= smem, 256 * 256 * 4 < regs
    limit = "nothing" if staged_ok and acc_ok else "shared memory" if not staged_ok else "registers"
    return best, limit, tiles


def tile_model_keys() -> dict:
    """grader.checks.lesson08._TILE_KEYS: digests of the tile words as good as the best (the same fit, traffic and
    footprint), of those that fit, and of the limit of 256 × 256."""
    best, limit, tiles = tile_model()
    word = {w: tuple(int(v) for v in w.split("x")) for w in _TILE_WORDS}

    def _tile_key(w: str) -> str:  # grader.checks.lesson08._tile_key, which is watched: the instructor's own copy
        return digest(LESSON, "TILE_PREDICTION", w)

    assert limit in _LIMITS
    return {"best": sorted(_tile_key(w) for w, t in word.items() if tiles[t] == tiles[best]),
            "fits": sorted(_tile_key(w) for w, t in word.items() if tiles[t][0]),
            "limit": _tile_key(limit)}


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
        fail(f"{label}: the loads count Q, K and V once each, the floor a perfect cache gives. Which loop of the "
             "kernel loads K and V, and how many times does it run in the whole launch?")
    if close(loads, b * (s * d + 2 * s * d * -(-s // bn))):
        fail(f"{label}: K and V re-read once per key block. What does one program of the kernel stand for, and how "
             "much of K and V does each program load?")
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


JUDGES = {"fusion_bytes": _fusion_bytes, "tile_traffic": _tile_traffic, "best_tiles": _best_tiles,
          "flash_traffic": _flash_traffic}
