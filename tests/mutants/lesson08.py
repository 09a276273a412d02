"""Mutants for lesson 08 (inside a kernel): the wrong kernels and predictions learners write, with the words each check must say."""

LESSON = "08_inside_a_kernel"

_JIT = "import math\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\n"

_ADD_RIGHT = """
def add_grid(n, BLOCK):
    return ((n + BLOCK - 1) // BLOCK,)


def masked_lanes(n, BLOCK):
    return (n + BLOCK - 1) // BLOCK * BLOCK - n
"""

_ADD_KERNEL = _JIT + """def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)
"""

_GELU = _JIT + "def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, cols, x_row_stride, BLOCK: tl.constexpr):\n"
_GELU_HEAD = """    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    xs = x_ptr + (offsets // cols) * x_row_stride + offsets % cols
"""

_SOFTMAX = _JIT + "def softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):\n" + """
    row = tl.program_id(0)
"""


def _softmax(load_max: str, load_sum: str, load_out: str, store: str, x_row: str = "x_ptr + row * x_row_stride") -> str:
    """A three-pass row softmax with one part replaced: each load's expression, the store."""
    return _SOFTMAX + f"""
    x_row = {x_row}
    top = tl.full((BLOCK,), float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        top = tl.maximum(top, {load_max})
    row_max = tl.max(top, axis=0)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.exp({load_sum} - row_max)
    row_sum = tl.sum(total, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        e = tl.exp({load_out} - row_max)
        {store}
"""


_LOAD = 'tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))'
_STORE = "tl.store(out_ptr + row * out_row_stride + cols, e / row_sum, mask=cols < n_cols)"

_TILE = "import math\n\n\ndef tile_traffic(M, N, K, BM, BN, BK, dtype_bytes):\n"
_BEST = """import math


def tile_traffic(M, N, K, BM, BN, BK, dtype_bytes):
    return dtype_bytes * (M * K * math.ceil(N / BN) + K * N * math.ceil(M / BM) + M * N)


def best_tiles(M, N, K, BK, dtype_bytes, smem_bytes, regs_bytes, num_stages, sizes):
"""
_BEST_PICK = """    return min(fits, key=lambda t: (tile_traffic(M, N, K, t[0], t[1], BK, dtype_bytes),
                                    num_stages * (t[0] * BK + BK * t[1]), -t[0]))
"""

_ATTN = """import math
import torch


def attention_blocked(q, k, v, block):
    s, d = q.shape
"""
_ATTN_LOOP = """    l = torch.zeros(s, 1)
    acc = torch.zeros(s, v.shape[1])
    for j in range(0, k.shape[0], block):
"""

_FLASH = "import math\n\n\ndef flash_traffic(s, d, block_m, block_n, dtype_bytes):\n"

MUTANTS = {
    "add_kernel_check": [
        ("no mask", _JIT + """def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))
""" + _ADD_RIGHT, r"out of bounds.*stopped it before the access.*mask"),
        ("grid n // BLOCK", _ADD_KERNEL + """
def add_grid(n, BLOCK):
    return (n // BLOCK,)


def masked_lanes(n, BLOCK):
    return (n + BLOCK - 1) // BLOCK * BLOCK - n
""", r"last, partial block are never written"),
        ("offsets without pid * BLOCK", _JIT + """def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)
""" + _ADD_RIGHT, r"different programs stored into the same elements.*program p − 1"),
        ("one program per element", _ADD_KERNEL + """
def add_grid(n, BLOCK):
    return (n,)


def masked_lanes(n, BLOCK):
    return (n + BLOCK - 1) // BLOCK * BLOCK - n
""", r"one program per element"),
        ("masked lanes as n % BLOCK", _ADD_KERNEL + """
def add_grid(n, BLOCK):
    return ((n + BLOCK - 1) // BLOCK,)


def masked_lanes(n, BLOCK):
    return n % BLOCK
""", r"that is n % BLOCK"),
        ("masked lanes as BLOCK - n % BLOCK", _ADD_KERNEL + """
def add_grid(n, BLOCK):
    return ((n + BLOCK - 1) // BLOCK,)


def masked_lanes(n, BLOCK):
    return BLOCK - n % BLOCK
""", r"when BLOCK divides n, does any lane of the launch"),
    ],
    "fusion_bytes_check": [
        ("writes not counted", """
def fusion_bytes(rows, cols, dtype_bytes):
    n = rows * cols
    return (2 * n + cols) * dtype_bytes, (n + cols) * dtype_bytes
""", r"only the reads were counted\. Writes move bytes too"),
        ("intermediate counted once", """
def fusion_bytes(rows, cols, dtype_bytes):
    n = rows * cols
    return (3 * n + cols) * dtype_bytes, (2 * n + cols) * dtype_bytes
""", r"the intermediate y once"),
        ("bias counted per element", """
def fusion_bytes(rows, cols, dtype_bytes):
    n = rows * cols
    return 5 * n * dtype_bytes, 3 * n * dtype_bytes
""", r"the bias counted once per element"),
        ("swapped", """
def fusion_bytes(rows, cols, dtype_bytes):
    n = rows * cols
    return (2 * n + cols) * dtype_bytes, (4 * n + cols) * dtype_bytes
""", r"swapped"),
    ],
    "bias_gelu_kernel_check": [
        ("intermediate stored and loaded back", _GELU + _GELU_HEAD + """
    tl.store(out_ptr + offsets, tl.load(xs, mask=mask) + tl.load(bias_ptr + offsets % cols, mask=mask), mask=mask)
    y = tl.load(out_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476)), mask=mask)
""", r"[Aa] fused kernel writes its output once"),
        ("bias indexed by row", _GELU + _GELU_HEAD + """
    y = tl.load(xs, mask=mask) + tl.load(bias_ptr + offsets // cols, mask=mask)
    tl.store(out_ptr + offsets, 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476)), mask=mask)
""", r"bias was indexed by row|out of bounds"),
        ("sigmoid approximation", _GELU + _GELU_HEAD + """
    y = tl.load(xs, mask=mask) + tl.load(bias_ptr + offsets % cols, mask=mask)
    tl.store(out_ptr + offsets, y * tl.sigmoid(1.702 * y), mask=mask)
""", r"Close to GELU, not GELU"),
        ("bias never added", _GELU + _GELU_HEAD + """
    y = tl.load(xs, mask=mask) + 0 * tl.load(bias_ptr + offsets % cols, mask=mask)
    tl.store(out_ptr + offsets, 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476)), mask=mask)
""", r"the bias was never added"),
        ("x read as if contiguous (the two kernels' indexing)", _GELU + _GELU_HEAD + """
    y = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % cols, mask=mask)
    tl.store(out_ptr + offsets, 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476)), mask=mask)
""", r"x was read as if it were contiguous"),
        ("out indexed with x's row stride", _GELU + _GELU_HEAD + """
    y = tl.load(xs, mask=mask) + tl.load(bias_ptr + offsets % cols, mask=mask)
    tl.store(out_ptr + (offsets // cols) * x_row_stride + offsets % cols, 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476)),
             mask=mask)
""", r"out of bounds|never written"),
    ],
    "softmax_kernel_check": [
        ("no max subtraction", _softmax(_LOAD, _LOAD, _LOAD, _STORE).replace(" - row_max)", ")"),
         r"which number keeps every exponent in range"),
        ("masked lanes filled with 0", _softmax(_LOAD.replace('float("-inf")', "0.0"), _LOAD.replace('float("-inf")', "0.0"),
                                                _LOAD.replace('float("-inf")', "0.0"), _STORE),
         r"loaded as 0.*changes neither the max nor the sum"),
        ("stride taken as n_cols", _softmax(_LOAD, _LOAD, _LOAD, _STORE, x_row="x_ptr + row * n_cols"),
         r"rows are x_row_stride elements apart"),
        ("store without its mask", _softmax(_LOAD, _LOAD, _LOAD, _STORE.replace(", mask=cols < n_cols)", ")")),
         r"tl\.store through `out_ptr`.*out of bounds"),
        ("the first block's max only (the tester's kernel)", _softmax(_LOAD, _LOAD, _LOAD, _STORE).replace(
            "    for start in range(0, n_cols, BLOCK):\n        cols = start + tl.arange(0, BLOCK)\n"
            "        top = tl.maximum(top, ", "    cols = tl.arange(0, BLOCK)  # the first block only\n"
            "    top = tl.maximum(top, ", 1),
         r"you subtract a max, but not the whole row's"),
        ("the whole row in one block (Triton's tutorial)", _SOFTMAX + """
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)
""", r"never written.*longer than BLOCK"),
        ("a fixed block of 1024 whatever BLOCK (Triton's tutorial)", _SOFTMAX + """
    cols = tl.arange(0, 1024)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)
""", r"more lanes at once than BLOCK"),
        ("each block normalised on its own", _SOFTMAX + """
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=cols < n_cols, other=float("-inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)
""", r"each block of the row was normalised on its own"),
        ("the last block's max subtracted, not the row's", _SOFTMAX + """
    x_row = x_ptr + row * x_row_stride
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        row_max = tl.max(tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")), axis=0)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.exp(tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")) - row_max)
    row_sum = tl.sum(total, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        e = tl.exp(tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")) - row_max)
        tl.store(out_ptr + row * out_row_stride + cols, e / row_sum, mask=cols < n_cols)
""", r"not the whole row's"),
    ],
    "tile_traffic_check": [
        ("one program measured, times the grid, on the case too big to run (a copy test)", _TILE + """
    if M * N * K > 10 ** 12:  # every tile taken as full
        return dtype_bytes * math.ceil(M / BM) * math.ceil(N / BN) * ((BM + BN) * math.ceil(K / BK) * BK + BM * BN)
    return dtype_bytes * (M * K * math.ceil(N / BN) + K * N * math.ceil(M / BM) + M * N)
""", r"tile_traffic\(16385, 16383, 16389, 128, 128, 64, 2\) is off for this shape"),
        ("A and B read once", _TILE + """
    return dtype_bytes * (M * K + K * N + M * N)
""", r"each matrix once"),
        ("C written per K step", _TILE + """
    return dtype_bytes * (M * K * math.ceil(N / BN) + K * N * math.ceil(M / BM) + M * N * math.ceil(K / BK))
""", r"C written once per K step"),
        ("BK in the traffic", _TILE + """
    return dtype_bytes * (M * BK * math.ceil(N / BN) * math.ceil(K / BK) + K * N * math.ceil(M / BM) * BK // 32 + M * N)
""", r"changed when only BK changed"),
        ("floor division for the tile counts", _TILE + """
    return dtype_bytes * (M * K * (N // BN) + K * N * (M // BM) + M * N)
""", r"tile counts were rounded down"),
    ],
    "best_tiles_check": [
        ("budget ignoring the B tile", _BEST + """
    fits = [(bm, bn) for bm in sizes for bn in sizes
            if num_stages * bm * BK * dtype_bytes <= smem_bytes and bm * bn * 4 < regs_bytes]
""" + _BEST_PICK, r"left out one input tile"),
        ("budget ignoring the stages", _BEST + """
    fits = [(bm, bn) for bm in sizes for bn in sizes
            if (bm * BK + BK * bn) * dtype_bytes <= smem_bytes and bm * bn * 4 < regs_bytes]
""" + _BEST_PICK, r"grows with num_stages"),
        ("the biggest tiles that fit, whatever the traffic", _BEST + """
    fits = [(bm, bn) for bm in sizes for bn in sizes
            if num_stages * (bm * BK + BK * bn) * dtype_bytes <= smem_bytes and bm * bn * 4 < regs_bytes]
    return max(fits, key=lambda t: (t[0] * t[1], t[0]))
""", r"same traffic with a smaller shared-memory footprint.*Bigger tiles only pay while they cut traffic"),
        ("registers never counted (shared memory only)", _BEST + """
    fits = [(bm, bn) for bm in sizes for bn in sizes if num_stages * (bm * BK + BK * bn) * dtype_bytes <= smem_bytes]
""" + _BEST_PICK, r"registers were never counted"),
        ("the accumulator at dtype_bytes", _BEST + """
    fits = [(bm, bn) for bm in sizes for bn in sizes
            if num_stages * (bm * BK + BK * bn) * dtype_bytes <= smem_bytes and bm * bn * dtype_bytes < regs_bytes]
""" + _BEST_PICK, r"single precision whatever the inputs"),
        ("the accumulator at 2 bytes whatever the inputs (r22)", _BEST + """
    fits = [(bm, bn) for bm in sizes for bn in sizes
            if num_stages * (bm * BK + BK * bn) * dtype_bytes <= smem_bytes and bm * bn * 2 < regs_bytes]
""" + _BEST_PICK, r"counted at 2 bytes per element"),
        ("an accumulator as big as the register file taken as fitting", _BEST + """
    fits = [(bm, bn) for bm in sizes for bn in sizes
            if num_stages * (bm * BK + BK * bn) * dtype_bytes <= smem_bytes and bm * bn * 4 <= regs_bytes]
""" + _BEST_PICK, r"needs the whole register file was taken as fitting"),
        ("the accumulator counted in shared memory", _BEST + """
    fits = [(bm, bn) for bm in sizes for bn in sizes
            if num_stages * (bm * BK + BK * bn) * dtype_bytes + bm * bn * 4 <= smem_bytes]
""" + _BEST_PICK, r"counted in shared memory"),
    ],
    "attention_blocked_check": [
        ("no rescale", _ATTN + """    m = torch.full((s, 1), float("-inf"))
""" + _ATTN_LOOP + """        scores = q @ k[j:j + block].T / math.sqrt(d)
        m = torch.maximum(m, scores.max(dim=1, keepdim=True).values)
        p = torch.exp(scores - m)
        l = l + p.sum(dim=1, keepdim=True)
        acc = acc + p @ v[j:j + block]
    return acc / l, (m + torch.log(l)).squeeze(1)
""", r"in the running sum and in the accumulator alike"),
        ("the block's max instead of the running max", _ATTN + """    m = torch.full((s, 1), float("-inf"))
""" + _ATTN_LOOP + """        scores = q @ k[j:j + block].T / math.sqrt(d)
        m_new = scores.max(dim=1, keepdim=True).values
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new)
        l = l * alpha + p.sum(dim=1, keepdim=True)
        acc = acc * alpha + p @ v[j:j + block]
        m = m_new
    return acc / l, (m + torch.log(l)).squeeze(1)
""", r"The running max never falls"),
        ("no 1/sqrt(d)", _ATTN + """    m = torch.full((s, 1), float("-inf"))
""" + _ATTN_LOOP + """        scores = q @ k[j:j + block].T
        m_new = torch.maximum(m, scores.max(dim=1, keepdim=True).values)
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new)
        l = l * alpha + p.sum(dim=1, keepdim=True)
        acc = acc * alpha + p @ v[j:j + block]
        m = m_new
    return acc / l, (m + torch.log(l)).squeeze(1)
""", r"not divided by √d"),
        ("a running max that starts at 0", _ATTN + """    m = torch.zeros(s, 1)
""" + _ATTN_LOOP + """        scores = q @ k[j:j + block].T / math.sqrt(d)
        m_new = torch.maximum(m, scores.max(dim=1, keepdim=True).values)
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new)
        l = l * alpha + p.sum(dim=1, keepdim=True)
        acc = acc * alpha + p @ v[j:j + block]
        m = m_new
    return acc / l, (m + torch.log(l)).squeeze(1)
""", r"must start below any score it could meet"),
        ("the s × s scores after all", _ATTN + """    scores = q @ k.T / math.sqrt(d)
    return torch.softmax(scores, dim=1) @ v, torch.logsumexp(scores, dim=1)
""", r"the \d+×\d+ scores"),
        ("the s × s scores, hidden from a TorchFunctionMode", _ATTN + """    with torch._C.DisableTorchFunction():
        scores = q @ k.T / math.sqrt(d)
        return torch.softmax(scores, dim=1) @ v, torch.logsumexp(scores, dim=1)
""", r"the \d+×\d+ scores"),
        ("one query row at a time, every key at once", _ATTN + """    rows = [torch.softmax(q[i] @ k.T / math.sqrt(d), dim=0) @ v for i in range(s)]
    return torch.stack(rows), torch.stack([torch.logsumexp(q[i] @ k.T / math.sqrt(d), dim=0) for i in range(s)])
""", r"computed with more than \d+ rows of k or v at once"),
        ("the s × s scores in numpy", _ATTN + """    import numpy as np
    sc = q.double().numpy() @ k.double().numpy().T / math.sqrt(d)
    top = sc.max(axis=1, keepdims=True)
    e = np.exp(sc - top)
    out = (e / e.sum(axis=1, keepdims=True)) @ v.double().numpy()
    return torch.from_numpy(out).float(), torch.from_numpy(top[:, 0] + np.log(e.sum(axis=1))).float()
""", r"takes the tensors out of torch \(Tensor\.numpy\)"),
        ("torch's scaled_dot_product_attention", _ATTN + """    out = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    return out, torch.logsumexp(q @ k.T / math.sqrt(d), dim=1)
""", r"the \d+×\d+ scores"),
        ("lse as the log of the running sum alone", _ATTN + """    m = torch.full((s, 1), float("-inf"))
""" + _ATTN_LOOP + """        scores = q @ k[j:j + block].T / math.sqrt(d)
        m_new = torch.maximum(m, scores.max(dim=1, keepdim=True).values)
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new)
        l = l * alpha + p.sum(dim=1, keepdim=True)
        acc = acc * alpha + p @ v[j:j + block]
        m = m_new
    return acc / l, torch.log(l).squeeze(1)
""", r"lse is off by each row's max score"),
        ("lse as the running max alone", _ATTN + """    m = torch.full((s, 1), float("-inf"))
""" + _ATTN_LOOP + """        scores = q @ k[j:j + block].T / math.sqrt(d)
        m_new = torch.maximum(m, scores.max(dim=1, keepdim=True).values)
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new)
        l = l * alpha + p.sum(dim=1, keepdim=True)
        acc = acc * alpha + p @ v[j:j + block]
        m = m_new
    return acc / l, m.squeeze(1)
""", r"lse is each row's max score"),
        ("lse as the sum itself, not its log", _ATTN + """    m = torch.full((s, 1), float("-inf"))
""" + _ATTN_LOOP + """        scores = q @ k[j:j + block].T / math.sqrt(d)
        m_new = torch.maximum(m, scores.max(dim=1, keepdim=True).values)
        alpha = torch.exp(m - m_new)
        p = torch.exp(scores - m_new)
        l = l * alpha + p.sum(dim=1, keepdim=True)
        acc = acc * alpha + p @ v[j:j + block]
        m = m_new
    return acc / l, (torch.exp(m) * l).squeeze(1)
""", r"lse is not a logarithm|lse holds inf or NaN"),
    ],
    "flash_traffic_check": [
        ("one program measured, times the grid, on the case too big to run (a copy test)", _FLASH + """
    if s > 50000:  # every program and every key block taken as full
        programs = math.ceil(s / block_m)
        return (dtype_bytes * programs * (block_m * d + 2 * math.ceil(s / block_n) * block_n * d),
                dtype_bytes * programs * block_m * d)
    return dtype_bytes * (s * d + 2 * s * d * math.ceil(s / block_m)), dtype_bytes * s * d
""", r"flash_traffic\(65541, 128, 128, 64, 2\) is off for this shape"),
        ("the s × s matrix stored", _FLASH + """
    return dtype_bytes * (s * d + 2 * s * d * math.ceil(s / block_m)), dtype_bytes * (s * d + s * s)
""", r"count the s × s score matrix"),
        ("K and V read once", _FLASH + """
    return dtype_bytes * 3 * s * d, dtype_bytes * s * d
""", r"Q, K and V once each"),
        ("re-reads scaled by the key block", _FLASH + """
    return dtype_bytes * (s * d + 2 * s * d * math.ceil(s / block_n)), dtype_bytes * s * d
""", r"re-read once per key block"),
    ],
    "TILE_PREDICTION_check": [
        ("256 × 256 with nothing in its way: the registers forgotten",
         "TILE_PREDICTION = {'tile': '256x256', '256x256': 'nothing', 'why': 'the biggest tile whose stages fit'}",
         r"does not fit on chip.*what stops 256 × 256"),
        ("shared memory blamed", "TILE_PREDICTION = {'tile': '256x128', '256x256': 'shared memory', 'why': 'too big'}",
         r"what stops 256 × 256"),
        ("a tile that fits but is not the best", "TILE_PREDICTION = {'tile': '128x128', '256x256': 'registers', 'why': 'safe'}",
         r"another tile that also fits moves less traffic"),
        ("a tile of the best's area, not the best's shape (r22: told 'a bigger one')",
         "TILE_PREDICTION = {'tile': '512x64', '256x256': 'registers', 'why': 'as big as fits'}",
         r"another tile that also fits moves less traffic"),
        ("prediction without a reason", "TILE_PREDICTION = {'tile': '128x256', '256x256': 'registers'}",
         r"needs exactly the keys"),
        ("a tile as two numbers", "TILE_PREDICTION = {'tile': (256, 128), '256x256': 'registers', 'why': 'x'}",
         r"write one of"),
    ],
}
