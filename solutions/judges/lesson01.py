"""The instructor's judges of lesson 01's keyed checks: they hold the answers, so they are never packaged nor released.

scripts/build_keys.py runs each on the reference solution and on every mutant (tests/mutants/lesson01.py) and keeps
only digests and messages in grader/checks/keys/01_crossover.json; the learner's check (grader/checks/lesson01.py)
judges by those. A message here names the kind of mistake and the principle, never the expected value nor the
formula: it is what a learner who made that mistake reads.
"""

from __future__ import annotations

import torch

from grader.checks._common import call, close, fail, is_number


def _matmul_flops(matmul_flops) -> None:
    """matmul_flops(n): 2 FLOPs per multiply-add, n multiply-adds per output, n² outputs."""
    n = 4
    got = call(matmul_flops, n)
    if got == n**3:
        fail("matmul_flops counts each multiply-add once. A multiply-add is two floating-point operations "
             "(a multiply and an add), and the course counts both.")
    if got in (n**2, 2 * n**2):
        fail("matmul_flops grows like the number of outputs: each output is itself a dot product, whose work grows "
             "with its length.")
    if got == n * n * (2 * n - 1):
        fail("matmul_flops counts n−1 additions per output. The course's convention counts every multiply-add as 2 "
             "FLOPs, the first one included.")
    small, big = call(matmul_flops, 16), call(matmul_flops, 32)
    if not small or big / small != 8:
        fail("doubling n must multiply the work by 8: n² outputs, each a dot product n long. Yours grows otherwise.")
    if call(matmul_flops, 1) != 2:
        fail("matmul_flops(1) is not the work of one multiply-add.")


def _matmul_bytes(matmul_bytes) -> None:
    """matmul_bytes(n, dtype): read A and B once, write C once, at the dtype's size."""
    n = 8
    got = call(matmul_bytes, n, torch.float32)
    if got == 3 * n * n:
        fail("matmul_bytes counts elements, not bytes. Memory traffic is counted in bytes, and how many bytes an "
             "element takes depends on its dtype.")
    if got == 2 * n * n * 4:
        fail("matmul_bytes counts reading the inputs but not writing C: the result has to go out to memory too.")
    if got == (2 * n**3 + n * n) * 4:
        fail("matmul_bytes counts a read every time an element is used. Each element of A is used n times, but it only "
             "has to cross memory once: the chip keeps it on chip while it is reused. The least any matmul must move "
             "is the figure the roofline works from.")
    if got == 4 * n * n * 4:
        fail("matmul_bytes: you counted C as read and written. The product only writes C: nothing of the old C is needed.")
    if got == 3 * n * n * 32:
        fail("matmul_bytes counts bits: dtype.itemsize is the bytes of one element, and memory traffic is counted in "
             "bytes.")
    if got != 3 * n * n * torch.float32.itemsize:
        fail("matmul_bytes is not the least traffic a matmul must cause: which matrices have to come in from memory, "
             "which has to go back out, and how many bytes is each of them?")
    half = call(matmul_bytes, n, torch.float16)
    if half == got:
        fail("matmul_bytes gives the same bytes for float32 and float16: the dtype was ignored. An element's size "
             "depends on its dtype (dtype.itemsize).")
    if got != 2 * half or call(matmul_bytes, n, torch.float64) != 2 * got:
        fail("matmul_bytes must be proportional to the element size of the dtype.")
    if call(matmul_bytes, 2 * n, torch.float32) != 4 * got:
        fail("Doubling n should multiply the bytes by 4: every matrix has n² elements.")


def _intensity(intensity) -> None:
    """intensity(flops, nbytes) = flops / nbytes, as a float."""
    got = call(intensity, 200, 100)
    if is_number(got) and close(float(got), 0.5):
        fail("intensity is upside down, that is bytes per FLOP: yours grows when an operation moves more bytes for the same arithmetic. "
             "Intensity grows with the arithmetic each byte feeds: more of it is what pushes an operation away from "
             "the memory limit.")
    if not is_number(got) or not close(float(got), 2.0):
        fail("intensity is not the arithmetic an operation does for each byte it moves, as a float.")
    frac = call(intensity, 10, 4)
    if frac == 2:
        fail("intensity(10, 4) lost its fraction: integer division (//) throws it away.")
    if not close(float(frac), 2.5):
        fail("intensity(10, 4) is off: an operation's FLOPs per byte is rarely a whole number; keep the fraction.")


JUDGES = {"matmul_flops": _matmul_flops, "matmul_bytes": _matmul_bytes, "intensity": _intensity}
