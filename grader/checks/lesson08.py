"""Checks for lesson 08 (inside a kernel): Triton kernels run in Triton's CPU interpreter under the course's counter.

Each kernel check launches the learner's kernel through `grader.triton_counter.launch` on the check's own
inputs (made from fixed seeds, so the judge can make them again in its own process), with every output
the check allocates filled with NaN: an element the kernel never wrote stays NaN, whatever the memory
held before. The observation is plain data: the outputs, the counter's totals, or the error the launch
raised (an out-of-bounds lane is stopped by the counter before it runs, so a missing mask is a message,
not a crashed interpreter). The judges compare against torch and name the usual mistakes.

The pure functions (fusion_bytes, tile_traffic, best_tiles, flash_traffic) are recorded and replayed
like every other lesson's; attention_blocked runs in torch under a TorchFunctionMode that notes the largest
tensor it creates, so the judge can tell an online softmax from one that builds the s x s scores.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from grader import triton_counter
from grader.checks import _plain
from grader.checks._common import Check, Raised, Replay, _key, call, close, fail, is_number, record, recorded
from grader.checks._common import expect  # noqa: F401  the hidden tests call lesson08.expect
from grader.notebook import CheckFailed, NotDone

NAN = float("nan")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _launch(kernel: Any, name: str, grid: Any, args: tuple, kwargs: dict, outs: dict) -> dict:
    """Run a learner's kernel under the counter; what came out (outputs, counts) or what it raised, as plain data."""
    try:
        counts = triton_counter.launch(kernel, grid, *args, **kwargs)
    except NotImplementedError:
        raise NotDone(name) from None
    except triton_counter.OutOfBounds as exc:
        return {"error": "OutOfBounds", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001  the judge says which launch raised what
        return {"error": type(exc).__name__, "message": str(exc)[:2000]}
    return {"outs": {k: v.clone() for k, v in outs.items()}, "counts": counts.summary()}


def _launch_failed(run: Any, label: str) -> None:
    """Fail with the launch's own error, when it raised one (an out-of-bounds lane, a crash in the kernel)."""
    if not isinstance(run, dict):
        fail(f"{label}: the check could not read what your kernel did")
    if "error" in run:
        if run["error"] == "OutOfBounds":
            fail(f"{label}: {run['message']}")
        fail(f"{label} raised {run['error']}: {run.get('message', '')}")
    if not isinstance(run.get("outs"), dict) or not isinstance(run.get("counts"), dict):
        fail(f"{label}: the check could not read what your kernel did")


def _out(run: dict, key: str, shape: tuple, label: str) -> torch.Tensor:
    got = run["outs"].get(key)
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(shape):
        fail(f"{label}: the check could not read the output back")
    return got.float()


def _unwritten(got: torch.Tensor) -> str | None:
    """Which elements are still NaN (never written), as text; None when all were written."""
    idx = torch.nonzero(torch.isnan(got.flatten())).flatten()
    if idx.numel() == 0:
        return None
    first, last = int(idx[0]), int(idx[-1])
    return f"{idx.numel()} of its {got.numel()} elements (flat indices {first} .. {last}) were never written (still NaN)"


# --- exercise 1: add_kernel and its grid -----------------------------------------------------------

_ADD_CASES = [(1000, 256), (1024, 256), (7, 64), (300, 32)]  # (n, BLOCK)


def _add_inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(n)
    return torch.randn(n, generator=g), torch.randn(n, generator=g)


def _as_grid(value: Any) -> tuple | None:
    if isinstance(value, (tuple, list)) and 1 <= len(value) <= 3 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                        for v in value):
        return tuple(value)
    return None


def _observe_add(add_kernel: Any, add_grid: Callable, masked_lanes: Callable) -> dict:
    # add_kernel comes first in the exercise cell: an unfinished one is named before add_grid (one program, 7 lanes)
    x, y = _add_inputs(7)
    _launch(add_kernel, "add_kernel", (1,), (x, y, torch.full((7,), NAN), 7), {"BLOCK": 64}, {})
    grids = record(add_grid, "add_grid", _ADD_CASES)
    masks = record(masked_lanes, "masked_lanes", _ADD_CASES)
    runs = []
    for n, block in _ADD_CASES:
        outcome = dict(grids["calls"]).get(_key((n, block)), {})
        grid = _as_grid(_plain.decode(outcome["value"])) if "value" in outcome else None
        if grid is None or math.prod(grid) > 2 * (n // block + 1):
            runs.append(None)  # far more programs than blocks: the judge names the grid without running them all
            continue
        x, y = _add_inputs(n)
        out = torch.full((n,), NAN)
        runs.append(_launch(add_kernel, "add_kernel", grid, (x, y, out, n), {"BLOCK": block}, {"out": out}))
    return {"grids": grids, "masks": masks, "runs": runs}


def _judge_add(observation: dict) -> None:
    grids, masks, runs = Replay(observation.get("grids")), Replay(observation.get("masks")), observation.get("runs")
    if not isinstance(runs, list) or len(runs) != len(_ADD_CASES):
        fail("the check could not read what your kernel did")
    for (n, block), run in zip(_ADD_CASES, runs):
        programs = -(-n // block)
        grid = call(grids, n, block)
        shape = _as_grid(grid)
        label = f"add_grid({n}, {block})"
        if shape is None:
            fail(f"{label} returned {grid!r}; return the grid as a tuple of whole numbers, like (programs,).")
        if math.prod(shape) != programs:
            if math.prod(shape) == n // block:
                fail(f"{label} returned {shape}: {n // block} programs cover {n // block * block} of the {n} elements, "
                     f"and the last {n - n // block * block} are never written. n // BLOCK rounds down; the grid must "
                     f"round up, ceil(n / BLOCK) = (n + BLOCK - 1) // BLOCK = {programs} programs, and the mask turns "
                     "off the lanes past the end.")
            if math.prod(shape) == n:
                fail(f"{label} returned {shape}: one program per element. Each program handles a block of BLOCK "
                     f"elements, so ceil(n / BLOCK) = {programs} programs cover n.")
            fail(f"{label} returned {shape} ({math.prod(shape)} programs); {n} elements in blocks of {block} need "
                 f"ceil(n / BLOCK) = {programs} programs.")
        kernel_label = f"add_kernel on n={n}, BLOCK={block} (grid {shape})"
        _launch_failed(run, kernel_label)
        counts = run["counts"]
        x, y = _add_inputs(n)
        got = _out(run, "out", (n,), kernel_label)
        if counts.get("overwritten", 0) > 0:
            fail(f"{kernel_label}: different programs stored into the same elements ({counts['overwritten']} stores "
                 f"landed on elements another program had written), and {_unwritten(got) or 'some were never written'}. "
                 "Every program works on its own block: offsets = pid * BLOCK + tl.arange(0, BLOCK), with "
                 "pid = tl.program_id(0).")
        missing = _unwritten(got)
        if missing:
            fail(f"{kernel_label}: {missing}. Each program stores its whole block (with the mask for the tail).")
        if not torch.allclose(got, x + y, rtol=1e-6, atol=1e-6):
            fail(f"{kernel_label}: out is not x + y (largest difference {float((got - (x + y)).abs().max()):.3g}).")
        if counts.get("stored_bytes") != 4 * n or counts.get("loaded_bytes") != 8 * n:
            fail(f"{kernel_label}: the counter saw {counts.get('loaded_bytes')} bytes loaded and "
                 f"{counts.get('stored_bytes')} stored; x and y are read once and out written once: {8 * n} and "
                 f"{4 * n} bytes (float32, masked-off lanes move nothing).")
        lanes = call(masks, n, block)
        want = programs * block - n
        if not (is_number(lanes) and lanes == want):
            if lanes == n % block and want != n % block:
                fail(f"masked_lanes({n}, {block}) returned {lanes}: that is n % BLOCK, the elements in the last block. "
                     f"The masked lanes are the rest of that block: {programs} programs × {block} lanes − {n} "
                     f"elements = {want}.")
            if want == 0:
                fail(f"masked_lanes({n}, {block}) returned {lanes}: when BLOCK divides n every lane has an element, "
                     "so no lane is masked (0).")
            fail(f"masked_lanes({n}, {block}) returned {lanes!r}; {programs} programs × {block} lanes cover "
                 f"{programs * block} positions for {n} elements: {want} lanes are masked off.")


check_add = Check("add_kernel, add_grid and masked_lanes", _observe_add, _judge_add)


# --- exercise 2: fusion_bytes, then a fused bias + GELU kernel ----------------------------------------

_FUSION_CASES = [(1024, 4096, 2), (4, 8, 4), (3, 5, 4), (1, 1, 8), (256, 1000, 4)]  # (rows, cols, dtype_bytes)


def _fusion(rows: int, cols: int, b: int) -> tuple[int, int]:
    """(unfused, fused) bytes: x + bias writes y, gelu reads y back; fused reads x and bias once and writes once."""
    n = rows * cols
    return (4 * n + cols) * b, (2 * n + cols) * b


def _judge_fusion(fn: Callable) -> None:
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
        fail(f"{label} returned ({unfused:.0f}, {fused:.0f}): swapped; return (unfused, fused).")
    if close(unfused, (2 * n + cols) * b) and close(fused, (n + cols) * b):
        fail(f"{label} returned ({unfused:.0f}, {fused:.0f}): only the reads. Writes move bytes too: the separate ops "
             f"write y and then z (n elements each), the fused kernel writes its output once (n). Expected "
             f"({want_u}, {want_f}).")
    if close(unfused, 5 * n * b) or close(fused, 3 * n * b):
        fail(f"{label} returned ({unfused:.0f}, {fused:.0f}): the bias counted once per element. The bias has one "
             f"value per column ({cols} values); each is read from memory once and reused for every row (a cache "
             f"keeps it; the counter's unique bytes show it). Expected ({want_u}, {want_f}).")
    if close(unfused, (3 * n + cols) * b):
        fail(f"{label} returned unfused {unfused:.0f}: the intermediate y counted once. As separate ops y goes to "
             f"memory twice: x + bias writes it, and gelu reads it back: x (n) + bias (cols) + y written (n) + "
             f"y read (n) + z written (n) = (4n + cols) × bytes = {want_u}.")
    if not close(unfused, want_u):
        fail(f"{label} returned unfused {unfused:.0f}; the two ops read x and bias, write y, read y, write z: "
             f"(4n + cols) × dtype_bytes = {want_u} bytes (n = rows × cols).")
    if not close(fused, want_f):
        fail(f"{label} returned fused {fused:.0f}; one kernel reads x and bias and writes the output once: "
             f"(2n + cols) × dtype_bytes = {want_f} bytes.")
    for case in _FUSION_CASES[1:]:
        got, want = call(fn, *case), _fusion(*case)
        if not (close(float(got[0]), want[0]) and close(float(got[1]), want[1])):
            fail(f"fusion_bytes{case} returned {tuple(got)}; expected {want} (rows × cols elements of dtype_bytes).")


check_fusion_bytes = recorded("fusion_bytes", "fusion_bytes", _FUSION_CASES, _judge_fusion)

_GELU_CASES = [(4, 100, 128), (3, 7, 16), (2, 1000, 256)]  # (rows, cols, BLOCK)


def _gelu_inputs(rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(rows * 1000 + cols)
    return 3 * torch.randn(rows, cols, generator=g), torch.randn(cols, generator=g)


def _observe_bias_gelu(kernel: Any, cases: list | None = None) -> dict:
    runs = []
    for rows, cols, block in cases or _GELU_CASES:
        x, bias = _gelu_inputs(rows, cols)
        out = torch.full((rows, cols), NAN)
        n = rows * cols
        runs.append(_launch(kernel, "bias_gelu_kernel", (-(-n // block),), (x, bias, out, n, cols), {"BLOCK": block},
                            {"out": out}))
    return {"runs": runs}


def _judge_bias_gelu(observation: dict, cases: list | None = None) -> None:
    cases = cases or _GELU_CASES
    runs = observation.get("runs")
    if not isinstance(runs, list) or len(runs) != len(cases):
        fail("the check could not read what your kernel did")
    for (rows, cols, block), run in zip(cases, runs):
        n = rows * cols
        label = f"bias_gelu_kernel on a {rows}×{cols} x (n={n}, BLOCK={block})"
        _launch_failed(run, label)
        x, bias = _gelu_inputs(rows, cols)
        got, want = _out(run, "out", (rows, cols), label), torch.nn.functional.gelu(x + bias)
        missing = _unwritten(got)
        if missing:
            fail(f"{label}: {missing}.")
        by_row = torch.nn.functional.gelu(x + bias.repeat(math.ceil(rows / cols))[:rows, None]) if cols != rows else None
        if by_row is not None and torch.allclose(got, by_row, atol=1e-4):
            fail(f"{label}: the bias was indexed by row. bias has one value per column; element i of the flat x is in "
                 "column i % cols, so load bias at offsets % cols.")
        if torch.allclose(got, torch.nn.functional.gelu(x), atol=1e-4):
            fail(f"{label}: out is gelu(x): the bias was never added.")
        if torch.allclose(got, x + bias, atol=1e-4):
            fail(f"{label}: out is x + bias: GELU was never applied.")
        err = float((got - want).abs().max())
        if err > 1e-4:
            approx = torch.nn.functional.gelu(x + bias, approximate="tanh")
            hint = (" Close to GELU, not GELU: an approximation (tanh or sigmoid form). The check wants the exact "
                    "form, 0.5 · y · (1 + erf(y / √2)); tl.erf exists (tl has no tanh)."
                    if err < 0.05 or torch.allclose(got, approx, atol=1e-3) else
                    " GELU(y) = 0.5 · y · (1 + erf(y / √2)) with y = x + bias.")
            fail(f"{label}: out differs from gelu(x + bias) by up to {err:.3g}.{hint}")
        counts = run["counts"]
        if counts.get("stored_bytes") != 4 * n:
            fail(f"{label}: the counter saw {counts.get('stored_bytes')} bytes stored; a fused kernel writes its output "
                 f"once, n × 4 = {4 * n} bytes, and keeps the intermediate x + bias in registers. Storing it (and "
                 "loading it back) is the unfused chain's traffic inside one kernel.")
        if counts.get("unique_loaded_bytes") != 4 * (n + cols):
            fail(f"{label}: the kernel read {counts.get('unique_loaded_bytes')} distinct bytes; it needs x (n) and "
                 f"bias (cols) once each: {4 * (n + cols)} bytes. Did it load something it does not use?")


check_bias_gelu = Check("bias_gelu_kernel", _observe_bias_gelu, _judge_bias_gelu)


def _observe_bias_gelu_on(kernel: Any, rows: int, cols: int, block: int) -> dict:
    return _observe_bias_gelu(kernel, [(rows, cols, block)])


def _judge_bias_gelu_on(observation: dict, rows: int, cols: int, block: int, why: str) -> None:
    try:
        _judge_bias_gelu(observation, [(rows, cols, block)])
    except CheckFailed as exc:
        fail(f"{why}: {exc}")


bias_gelu_on = Check("bias_gelu_kernel on another shape", _observe_bias_gelu_on, _judge_bias_gelu_on,
                     inputs=("rows", "cols", "block"), announce=False)
bias_gelu_on.__doc__ = "Hidden test: bias_gelu_kernel on a (rows, cols) x of 3·randn with this BLOCK."


# --- exercise 3: row softmax ------------------------------------------------------------------------

# (label, rows, cols, scale, shift, strided): normal rows; rows x50; rows near -200; a strided view of a wider tensor
_SOFTMAX_CASES = [("normal rows", 6, 37, 1.0, 0.0, False), ("normal rows, strided view", 5, 37, 1.0, 0.0, True),
                  ("rows × 50", 4, 37, 50.0, 0.0, False), ("rows near −200", 4, 37, 1.0, -200.0, True),
                  ("a row of 64", 3, 64, 1.0, 0.0, False)]


def _softmax_input(rows: int, cols: int, scale: float, shift: float, strided: bool) -> torch.Tensor:
    g = _gen(rows * 100 + cols + int(scale))
    wide = torch.randn(rows, cols + 13, generator=g) * scale + shift
    return wide[:, 5:5 + cols] if strided else wide[:, :cols].contiguous()


def _observe_softmax(kernel: Any, cases: list | None = None) -> dict:
    runs = []
    for _, rows, cols, scale, shift, strided in cases or _SOFTMAX_CASES:
        x = _softmax_input(rows, cols, scale, shift, strided)
        out = torch.full((rows, cols), NAN)
        block = 1 << max(cols - 1, 0).bit_length()
        runs.append(_launch(kernel, "softmax_kernel", (rows,), (x, out, cols, x.stride(0), out.stride(0)),
                            {"BLOCK": block}, {"out": out}))
    return {"runs": runs}


def _softmax_zero_padded(x: torch.Tensor) -> torch.Tensor:
    """What a kernel computes when masked lanes load 0: zeros join the max and the sum."""
    block = 1 << max(x.shape[1] - 1, 0).bit_length()
    padded = torch.cat([x, torch.zeros(x.shape[0], block - x.shape[1])], dim=1)
    return torch.softmax(padded, dim=1)[:, :x.shape[1]]


def _judge_softmax(observation: dict, cases: list | None = None) -> None:
    cases = cases or _SOFTMAX_CASES
    runs = observation.get("runs")
    if not isinstance(runs, list) or len(runs) != len(cases):
        fail("the check could not read what your kernel did")
    results = {}
    for (label, rows, cols, scale, shift, strided), run in zip(cases, runs):
        text = f"softmax_kernel on {label} ({rows}×{cols}{', row stride ' + str(cols + 13) if strided else ''})"
        _launch_failed(run, text)
        got = _out(run, "out", (rows, cols), text)
        results[label] = (got, _softmax_input(rows, cols, scale, shift, strided), text, strided, run["counts"])
    for label, (got, x, text, strided, counts) in results.items():
        want = torch.softmax(x, dim=1)
        if torch.allclose(got, want, atol=1e-5):
            continue
        if counts.get("stored_bytes", 0) < 4 * x.numel() or counts.get("overwritten", 0):
            fail(f"{text}: the counter saw {counts.get('stored_bytes')} bytes stored for {x.numel()} elements "
                 f"({x.numel() * 4} bytes){' and programs storing over each other' if counts.get('overwritten') else ''}"
                 f": {_unwritten(got) or 'some elements were not written by their own row'}. One program per row "
                 "stores its n_cols results at out_ptr + row * out_row_stride + cols, masked.")
        if strided and _rows_as_if_contiguous(got, x):
            fail(f"{text}: wrong rows. This x is a view of a wider tensor, so its rows are x_row_stride elements apart, "
                 "not n_cols: row r starts at x_ptr + r * x_row_stride. (Right on contiguous rows, wrong here.)")
        if torch.allclose(got, _softmax_zero_padded(x), atol=1e-5):
            fail(f"{text}: the lanes past n_cols were loaded as 0, and a 0 joins the row's max and sum "
                 "(e^(0 − max) for every masked lane). Load them as −inf: other=float('-inf'); e^(−inf) = 0.")
        if not torch.isfinite(got).all():
            fail(f"{text}: the output holds inf or NaN. e^x overflows float32 above x ≈ 88.7 (rows × 50) and "
                 "underflows to 0 below about −103 (rows near −200), so the sum is inf or 0 and the division NaN. "
                 "Subtract the row's max before tl.exp: softmax(x) = softmax(x − max(x)), and the largest exponent "
                 "is then e^0 = 1.")
        fail(f"{text}: out differs from torch.softmax(x, dim=1) by up to {float((got - want).abs().max()):.3g}.")


def _rows_as_if_contiguous(got: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether `got` is the softmax of rows read n_cols apart from x's first element (the stride taken as n_cols)."""
    flat = x.as_strided((x.numel(),), (1,), x.storage_offset())
    return torch.allclose(got, torch.softmax(flat.view_as(x), 1), atol=1e-5)


check_softmax = Check("softmax_kernel", _observe_softmax, _judge_softmax)


def _observe_softmax_on(kernel: Any, rows: int, cols: int, scale: float, shift: float) -> dict:
    return _observe_softmax(kernel, [("the hidden test's rows", rows, cols, scale, shift, True)])


def _judge_softmax_on(observation: dict, rows: int, cols: int, scale: float, shift: float, why: str) -> None:
    try:
        _judge_softmax(observation, [("the hidden test's rows", rows, cols, scale, shift, True)])
    except CheckFailed as exc:
        fail(f"{why}: {exc}")


softmax_on = Check("softmax_kernel on other rows", _observe_softmax_on, _judge_softmax_on,
                   inputs=("rows", "cols", "scale", "shift"), announce=False)
softmax_on.__doc__ = "Hidden test: softmax_kernel on a strided rows × cols input of randn × scale + shift."


# --- exercise 4: tile traffic and the best tiles under an on-chip budget -----------------------------

_TILE_CASES = [(256, 256, 256, 64, 64, 32, 2), (256, 256, 256, 64, 64, 64, 2), (1000, 300, 130, 128, 64, 32, 4),
               (64, 64, 64, 64, 64, 64, 4), (512, 128, 1024, 32, 128, 16, 2)]


def _traffic(M: int, N: int, K: int, BM: int, BN: int, BK: int, b: int) -> int:
    return b * (M * K * -(-N // BN) + K * N * -(-M // BM) + M * N)


def _judge_tile_traffic(fn: Callable) -> None:
    got = {case: call(fn, *case) for case in _TILE_CASES}
    for case, value in got.items():
        if not is_number(value):
            fail(f"tile_traffic{case} returned {value!r}; return a number of bytes.")
    M, N, K, BM, BN, BK, b = case = _TILE_CASES[2]
    value, want = float(got[case]), _traffic(*case)
    label = f"tile_traffic(M={M}, N={N}, K={K}, BM={BM}, BN={BN}, BK={BK}, dtype_bytes={b})"
    cN, cM = -(-N // BN), -(-M // BM)
    if close(value, b * (M * K + K * N + M * N)):
        fail(f"{label} returned {value:.0f}: each matrix once. That is the floor a perfect cache gives, not what the "
             f"programs request: the {cM} × {cN} programs each read a BM × K strip of A and a K × BN strip of B, so A "
             f"is read once per column of tiles ({cN}×) and B once per row of tiles ({cM}×). Expected {want}.")
    if close(value, b * (M * K * cN + K * N * cM + M * N * -(-K // BK))):
        fail(f"{label} returned {value:.0f}: C written once per K step. A program keeps its BM × BN accumulator on "
             f"chip while it steps along K and stores C once at the end. Expected {want}.")
    if not close(float(got[_TILE_CASES[0]]), float(got[_TILE_CASES[1]])):
        fail(f"tile_traffic changed when only BK changed ({float(got[_TILE_CASES[0]]):.0f} bytes with BK=32, "
             f"{float(got[_TILE_CASES[1]]):.0f} with BK=64). BK only cuts each strip into steps: a program still reads "
             "its whole BM × K strip of A and K × BN strip of B, whatever the step.")
    if not close(value, want):
        fail(f"{label} returned {value:.0f}; A (M×K) is read once per column of tiles, ceil(N/BN) = {cN}×, B (K×N) "
             f"once per row of tiles, ceil(M/BM) = {cM}×, C (M×N) written once: {want} bytes.")
    for case, value in got.items():
        if not close(float(value), _traffic(*case)):
            fail(f"tile_traffic{case} returned {float(value):.0f}; expected {_traffic(*case)}.")


check_tile_traffic = recorded("tile_traffic", "tile_traffic", _TILE_CASES, _judge_tile_traffic)

_SIZES = (16, 32, 64, 128, 256)
# (M, N, K, BK, dtype_bytes, smem_bytes, num_stages, sizes)
_BEST_CASES = [(4096, 4096, 4096, 64, 2, 233472, 4, _SIZES), (4096, 4096, 4096, 64, 2, 233472, 1, _SIZES),
               (8192, 1024, 4096, 32, 4, 167936, 3, _SIZES), (512, 512, 512, 64, 2, 49152, 2, _SIZES),
               (8192, 64, 1024, 64, 2, 233472, 3, _SIZES),  # N = 64: wider tiles than 64 columns buy nothing
               (512, 512, 512, 64, 2, 49152, 4, _SIZES)]


def _footprint(BM: int, BN: int, BK: int, b: int, stages: int) -> int:
    return stages * (BM * BK + BK * BN) * b


def _best(M, N, K, BK, b, smem, stages, sizes, footprint=_footprint):
    fits = [(BM, BN) for BM in sizes for BN in sizes if footprint(BM, BN, BK, b, stages) <= smem]
    if not fits:
        return None
    return min(fits, key=lambda t: (_traffic(M, N, K, t[0], t[1], BK, b), _footprint(t[0], t[1], BK, b, stages), -t[0]))


_BUDGET_MISTAKES = [
    (lambda BM, BN, BK, b, s: s * BM * BK * b, "The budget left out one input tile: each stage holds an A tile (BM × BK) "
     "and a B tile (BK × BN): num_stages × (BM·BK + BK·BN) × dtype_bytes."),
    (lambda BM, BN, BK, b, s: s * BK * BN * b, "The budget left out one input tile: each stage holds an A tile (BM × BK) "
     "and a B tile (BK × BN): num_stages × (BM·BK + BK·BN) × dtype_bytes."),
    (lambda BM, BN, BK, b, s: (BM * BK + BK * BN) * b, "Each pipeline stage holds its own pair of tiles, so the "
     "footprint is multiplied by num_stages."),
]


def _judge_best_tiles(fn: Callable) -> None:
    got = {}
    for case in _BEST_CASES:
        value = call(fn, *case)
        if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value)):
            fail(f"best_tiles{case[:7]} returned {value!r}; return (BM, BN), two tile sizes from `sizes`.")
        got[case] = tuple(value)
    wrong = [case for case in _BEST_CASES if got[case] != tuple(_best(*case))]
    if not wrong:
        return
    for footprint, why in _BUDGET_MISTAKES:  # a mistake in the budget shows on every case
        if all(got[case] == _best(*case, footprint=footprint) for case in _BEST_CASES):
            case = next(c for c in wrong if _footprint(*got[c], c[3], c[4], c[6]) > c[5])
            M, N, K, BK, b, smem, stages, _ = case
            fail(f"best_tiles(M={M}, N={N}, K={K}, BK={BK}, dtype_bytes={b}, smem_bytes={smem}, num_stages={stages}) "
                 f"returned {got[case]}: its tiles need {_footprint(*got[case], BK, b, stages):,} bytes on chip, more "
                 f"than the {smem:,} there are. {why} Expected {tuple(_best(*case))}.")
    case = wrong[0]
    M, N, K, BK, b, smem, stages, _ = case
    label = f"best_tiles(M={M}, N={N}, K={K}, BK={BK}, dtype_bytes={b}, smem_bytes={smem}, num_stages={stages})"
    mine, want = got[case], tuple(_best(*case))
    need = _footprint(*mine, BK, b, stages)
    if need > smem:
        fail(f"{label} returned {mine}, whose tiles need num_stages × (BM·BK + BK·BN) × dtype_bytes = {need:,} "
             f"bytes on chip, more than {smem:,}. Expected {want}.")
    t_mine, t_want = _traffic(M, N, K, *mine, BK, b), _traffic(M, N, K, *want, BK, b)
    if t_mine == t_want:
        fail(f"{label} returned {mine}: the same traffic as {want} ({t_want:,} bytes) with a larger footprint "
             f"({need:,} bytes against {_footprint(*want, BK, b, stages):,}). Bigger tiles only pay while they cut "
             "traffic (here N is small: columns past N buy nothing); on a tie take the smaller footprint.")
    fail(f"{label} returned {mine} ({t_mine:,} bytes of traffic); {want} fits too and moves {t_want:,}. Among the "
         "tiles that fit, take the least traffic (ties: the smaller footprint, then the larger BM).")


check_best_tiles = recorded("best_tiles", "best_tiles", _BEST_CASES, _judge_best_tiles)


# --- exercise 5: blocked attention with the online softmax -------------------------------------------

# (label, s, d, block, kind): kind picks the scores: random; very negative; high in the first block, then falling
_ATTN_CASES = [("random scores", 64, 16, 16, "random"), ("random scores, a ragged last block", 50, 8, 16, "random"),
               ("very negative scores", 48, 8, 16, "negative"), ("scores falling block by block", 48, 8, 16, "falling")]


def attention_inputs(s: int, d: int, kind: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of shape (s, d) whose scores q·kᵀ/√d are random, all very negative, or fall by ~200 after block 1."""
    g = _gen(seed * 1000 + s * 10 + d)
    q, k, v = (torch.randn(s, d, generator=g) for _ in range(3))
    if kind == "negative":
        q = q.abs() + 1.0
        k = -(k.abs() + 1.0) * 40.0
    elif kind == "falling":
        q = q.abs() + 1.0
        k = k.abs() + 1.0
        k[16:] *= -30.0  # keys after the first block score far below the first block's
    return q, k, v


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: bool = True) -> torch.Tensor:
    """softmax(q kᵀ / √d) v, in float64 (the judge's answer)."""
    scores = q.double() @ k.double().T / (math.sqrt(q.shape[1]) if scale else 1.0)
    return (torch.softmax(scores, dim=1) @ v.double()).float()


def _no_rescale(q, k, v, block):
    """The online softmax without the rescale: blocks summed as if each block's max were the final one."""
    s, d = q.shape
    m = torch.full((s, 1), -math.inf, dtype=torch.float64)
    acc, l = torch.zeros(s, d, dtype=torch.float64), torch.zeros(s, 1, dtype=torch.float64)
    for j in range(0, k.shape[0], block):
        sc = q.double() @ k[j:j + block].double().T / math.sqrt(d)
        m = torch.maximum(m, sc.max(1, keepdim=True).values)
        p = torch.exp(sc - m)
        l = l + p.sum(1, keepdim=True)
        acc = acc + p @ v[j:j + block].double()
    return (acc / l).float()


class _Largest(torch.overrides.TorchFunctionMode):
    """Notes the largest tensor any torch function returns (in elements)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def _observe_attention(fn: Callable, cases: list | None = None) -> dict:
    runs = []
    for label, s, d, block, kind in cases or _ATTN_CASES:
        q, k, v = attention_inputs(s, d, kind)
        mode = _Largest()
        with mode:
            got = call(fn, q, k, v, block, label=f"attention_blocked(q, k, v, block={block}) on {label}")
        runs.append({"out": got if isinstance(got, torch.Tensor) else repr(got)[:200], "largest": mode.largest})
    return {"runs": runs}


def _judge_attention(observation: dict, cases: list | None = None) -> None:
    cases = cases or _ATTN_CASES
    runs = observation.get("runs")
    if not isinstance(runs, list) or len(runs) != len(cases):
        fail("the check could not read what your function did")
    for (label, s, d, block, kind), run in zip(cases, runs):
        text = f"attention_blocked on {label} (s={s}, d={d}, block={block})"
        got = run.get("out") if isinstance(run, dict) else None
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (s, d):
            fail(f"{text} returned {got!r}; return the (s, d) output tensor.")
        q, k, v = attention_inputs(s, d, kind)
        want = reference_attention(q, k, v)
        if torch.allclose(got.float(), want, atol=1e-4, rtol=1e-4):
            if run.get("largest", 0) >= s * s and s > block:
                fail(f"{text}: right, but a tensor of {run['largest']} elements was made: the {s}×{s} scores. The "
                     f"point of the online softmax is to need only a {s}×{block} block of scores at a time.")
            continue
        if not torch.isfinite(got).all():
            if kind == "negative":
                fail(f"{text}: the output holds NaN or inf. With every score far below 0, a running max that starts "
                     "at 0 makes e^(score − 0) underflow to 0 for every key, so l = 0 and acc / l = 0/0. Start the "
                     "running max at −inf (the first block then sets it).")
            if kind == "falling":
                fail(f"{text}: the output holds NaN or inf. The first block's scores are far above the later ones: "
                     "taking each block's own max as m_new makes exp(m_old − m_new) = e^(+200), which overflows. The "
                     "running max never falls: m_new = max(m_old, max of this block).")
            fail(f"{text}: the output holds NaN or inf.")
        if torch.allclose(got.float(), reference_attention(q, k, v, scale=False), atol=1e-4, rtol=1e-4):
            fail(f"{text}: this is softmax(q kᵀ) v: the scores were not divided by √d (= {math.sqrt(d):.3g}).")
        if torch.allclose(got.float(), _no_rescale(q, k, v, block), atol=1e-4, rtol=1e-4):
            fail(f"{text}: when a block raises the running max, what was summed before is relative to the old max. "
                 "Multiply both l and the accumulator by exp(m_old − m_new) before adding the new block.")
        fail(f"{text}: differs from softmax(q kᵀ/√d) v by up to {float((got.float() - want).abs().max()):.3g}. Per "
             "block: m_new = max(m, block max); rescale l and acc by exp(m − m_new); add the block's "
             "exp(scores − m_new) to l and exp(scores − m_new) @ v_block to acc; divide acc by l once at the end.")


check_attention_blocked = Check("attention_blocked", _observe_attention, _judge_attention)


def _observe_attention_on(fn: Callable, s: int, d: int, block: int, seed: int) -> dict:
    return _observe_attention(fn, [("the hidden test's q, k, v", s, d, block, "random")])


def _judge_attention_on(observation: dict, s: int, d: int, block: int, seed: int, why: str) -> None:
    try:
        _judge_attention(observation, [("the hidden test's q, k, v", s, d, block, "random")])
    except CheckFailed as exc:
        fail(f"{why}: {exc}")


attention_on = Check("attention_blocked on other sizes", _observe_attention_on, _judge_attention_on,
                     inputs=("s", "d", "block", "seed"), announce=False)
attention_on.__doc__ = "Hidden test: attention_blocked on random (s, d) inputs with this block."


# --- exercise 6: FlashAttention's traffic ---------------------------------------------------------------

_FLASH_CASES = [(1024, 64, 128, 64, 2), (4096, 128, 64, 128, 2), (100, 16, 32, 16, 4), (256, 32, 256, 32, 4)]


def flash_bytes(s: int, d: int, block_m: int, block_n: int, b: int) -> tuple[int, int]:
    """(loaded, stored) bytes of the course's attention kernel: Q once, K and V once per query block, O once."""
    return b * (s * d + 2 * s * d * -(-s // block_m)), b * s * d


def _judge_flash(fn: Callable) -> None:
    for case in _FLASH_CASES:
        got = call(fn, *case)
        if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(is_number(v) for v in got)):
            fail(f"flash_traffic{case} returned {got!r}; return (load_bytes, store_bytes).")
    s, d, bm, bn, b = case = _FLASH_CASES[0]
    loads, stores = (float(v) for v in call(fn, *case))
    want_l, want_s = flash_bytes(*case)
    label = f"flash_traffic(s={s}, d={d}, block_m={bm}, block_n={bn}, dtype_bytes={b})"
    if close(stores, want_s + b * s * s) or close(stores, want_s + 4 * s * s):
        fail(f"{label} returned {stores:.0f} stored bytes: that counts the s × s score matrix. This kernel never "
             f"writes it: each block of scores lives in registers and is gone after its step. It stores only O, "
             f"s × d × dtype_bytes = {want_s}.")
    if close(loads, 3 * b * s * d):
        fail(f"{label} returned {loads:.0f} loaded bytes: Q, K and V read once. Each of the ceil(s/block_m) = "
             f"{-(-s // bm)} programs (one per query block) walks all of K and V, so K and V are read once per "
             f"query block: s·d + 2·s·d·ceil(s/block_m), times dtype_bytes = {want_l}.")
    if close(loads, b * (s * d + 2 * s * d * -(-s // bn))):
        fail(f"{label} returned {loads:.0f} loaded bytes: K and V re-read once per key block. They are re-read once "
             f"per program, and there is one program per query block: ceil(s / block_m) = {-(-s // bm)}, not "
             f"ceil(s / block_n) = {-(-s // bn)}. Expected {want_l}.")
    if not close(loads, want_l) or not close(stores, want_s):
        fail(f"{label} returned ({loads:.0f}, {stores:.0f}); expected ({want_l}, {want_s}): Q read once, K and V "
             "once per query block, O written once.")
    for case in _FLASH_CASES[1:]:
        got, want = call(fn, *case), flash_bytes(*case)
        if not (close(float(got[0]), want[0]) and close(float(got[1]), want[1])):
            fail(f"flash_traffic{case} returned {tuple(got)}; expected {want}.")


check_flash_traffic = recorded("flash_traffic", "flash_traffic", _FLASH_CASES, _judge_flash)

__all__ = ["check_add", "check_fusion_bytes", "check_bias_gelu", "bias_gelu_on", "check_softmax", "softmax_on", "check_tile_traffic",
           "check_best_tiles", "check_attention_blocked", "attention_on", "check_flash_traffic", "expect", "Raised"]
