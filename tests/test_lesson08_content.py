"""Lesson 08 (inside a kernel): the checks' models agree with the counter on the course's kernels, and judges on forged data."""

from __future__ import annotations

import math
import sys

import pytest
import torch

pytest.importorskip("triton")

from conftest import ROOT, quiet_model  # noqa: E402
from grader import shortcuts, triton_kernels  # noqa: E402
from grader.checks import lesson08  # noqa: E402
from grader.notebook import CheckFailed  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import build_keys  # noqa: E402

JUDGES = build_keys.instructor_judges("08_inside_a_kernel")  # the answers live with the instructor, not in the package


def test_fusion_model_is_the_counters_unique_bytes_for_the_course_kernels():
    x, bias = torch.randn(8, 40), torch.randn(40)
    z, first, second = triton_kernels.unfused_bias_gelu(x, bias, block=64)
    assert torch.allclose(z, torch.nn.functional.gelu(x + bias), atol=1e-6)
    assert first.unique_bytes + second.unique_bytes == JUDGES._fusion(8, 40, 4)[0]
    assert first.loaded_bytes + first.stored_bytes + second.bytes == (5 * 320) * 4  # the bias requested per element


@pytest.mark.parametrize("tiles", [(16, 16, 16), (32, 16, 32)])
def test_tile_model_is_the_counters_requested_bytes_ragged_shapes_included(tiles):
    a, b = torch.randn(40, 24), torch.randn(24, 36)
    c, counts = triton_kernels.matmul(a, b, *tiles)
    assert torch.allclose(c, a @ b, atol=1e-4)
    assert counts.bytes == JUDGES._traffic(40, 36, 24, *tiles, 4)
    assert counts.unique_bytes == 4 * (40 * 24 + 24 * 36 + 40 * 36)


def test_flash_model_is_the_counters_bytes_and_the_kernel_is_attention():
    q, k, v = lesson08.attention_inputs(40, 16, "random")
    o, counts = triton_kernels.flash_attention(q, k, v, 16, 8)
    assert torch.allclose(o, lesson08.reference_attention(q, k, v), atol=1e-5)
    assert (counts.loaded_bytes, counts.stored_bytes) == JUDGES.flash_bytes(40, 16, 16, 8, 4)


def test_attention_cases_break_the_mistakes_they_are_meant_to():
    q, k, v = lesson08.attention_inputs(48, 8, "falling")
    scores = q @ k.T / math.sqrt(8)
    assert (scores[:, :16].max(1).values - scores[:, 16:].max(1).values).min() > 100  # exp(+100) overflows float32
    q, k, v = lesson08.attention_inputs(48, 8, "negative")
    assert (q @ k.T / math.sqrt(8)).max() < -104  # e^score underflows to 0 with a running max of 0
    q, k, v = lesson08.attention_inputs(64, 16, "random")
    assert not torch.allclose(lesson08._no_rescale(q, k, v, 16), lesson08.reference_attention(q, k, v), atol=1e-3)


def test_best_tile_cases_tell_every_budget_mistake_apart():
    picks = [[JUDGES._best(*c, fits=f) for c in lesson08._BEST_CASES] for f, _ in JUDGES._BUDGET_MISTAKES]
    right = [JUDGES._best(*c) for c in lesson08._BEST_CASES]
    assert all(p != right for p in picks) and len({tuple(map(tuple, p)) for p in picks}) == len(picks)


def test_h100_fp16_best_tile_does_not_spill():
    """Third edition: best_tiles picked 256 × 256 for an fp16 matmul on an H100, whose float32 accumulator
    (256·256·4 B) is the SM's whole 64K-register file, so it spills. The lesson's solution and the judge's model
    now count the accumulator against data/sm.csv's register file."""
    from grader import specs
    from notebook_cells import namespace

    sm = specs.load_sm()["NVIDIA H100 SXM5 80GB"]
    smem, regs = int(sm["shared_kb_per_sm"] * 1024), int(sm["registers_kb_per_sm"] * 1024)
    assert regs == 65536 * 4
    sizes = (16, 32, 64, 128, 256, 512)
    pick = namespace("08_inside_a_kernel")["best_tiles"](8192, 8192, 8192, 64, 2, smem, regs, 3, sizes)
    assert pick[0] * pick[1] * 4 < regs and pick != (256, 256)
    assert 3 * (256 * 64 + 64 * 256) * 2 <= smem  # shared memory alone would have let 256 × 256 through
    best, limit = lesson08._tile_model()
    assert f"{pick[0]}x{pick[1]}" in best and limit == "registers"


def test_the_tile_predictions_model_is_the_instructors_best_tile_on_its_case():
    """TILE_PREDICTION's model is kept in the package as digests only (a copy test copied the budget functions that
    used to be there, and read the 256 × 256 limit off a comment): they must be what the instructor's judge works
    out from data/sm.csv, and the package must hold no on-chip budget that answers best_tiles."""
    want = JUDGES.tile_model_keys()
    assert {k: sorted(v) if isinstance(v, tuple) else v for k, v in quiet_model(lesson08._tile_keys)().items()} == want
    assert not hasattr(lesson08, "_fits") and not hasattr(lesson08, "_footprint")
    text = open(lesson08.__file__, encoding="utf-8").read()
    assert "256 × 256 fits" not in text and "spills too" not in text and "would still admit" not in text


def test_the_tile_explorer_says_256_squared_spills_on_an_h100():
    """The explorer said 'fits' for any tile within shared memory; 256 × 256 on an H100 fits there and spills its
    accumulator (the same finding as best_tiles')."""
    from grader import specs, widgets

    chips = [(specs.chip("NVIDIA H100 SXM5 80GB"), specs.load_sm()["NVIDIA H100 SXM5 80GB"])]
    panel = widgets.tile_explorer(JUDGES._traffic, chips, start_tile=256)
    verdict = next(w for w in panel.children if type(w).__name__ == "HTML").value
    assert "in 228 KB per SM" in verdict and "256 KB register file: <b>spills</b>" in verdict
    tile = next(w for row in panel.children[:2] for w in getattr(row, "children", []) if getattr(w, "description", "") == "BM = BN")
    tile.value = 128
    verdict = next(w for w in panel.children if type(w).__name__ == "HTML").value
    assert "256 KB register file: fits" in verdict


def test_a_forged_observation_cannot_pass_the_add_check():
    with pytest.raises(CheckFailed):
        lesson08._judge_add({"grids": {"name": "add_grid", "calls": []}, "masks": {"name": "m", "calls": []}, "runs": []})
    with pytest.raises(CheckFailed):
        lesson08._judge_softmax({"runs": [{"outs": {}, "counts": {}}] * len(lesson08._SOFTMAX_CASES)})


def test_the_judges_carry_no_hidden_answers():
    """The hidden tests' values live in the solution notebook only: the package has none of them."""
    text = open(lesson08.__file__, encoding="utf-8").read()
    for hidden in ("100_000, 1024", "8192, 12288", "8192, 128, 128, 64"):
        assert hidden not in text


def test_registers_spill_silently_and_torch_softmax_is_one_kernel():
    """08 said a GPU rejects a kernel whose tiles do not fit in shared memory and registers: Triton's compiler raises
    OutOfResources for shared memory only (triton/compiler/compiler.py), registers spill silently (n_spills). And it
    called torch's eager softmax several passes 'unless a kernel fuses it': it is one fused kernel."""
    from conftest import ROOT, read_notebook

    name = "08_inside_a_kernel"
    text = "\n".join(c.source for c in read_notebook(ROOT / "solutions" / name / f"{name}.ipynb").cells)
    assert "do not fit in its shared memory and registers" not in text, "08 still says registers are refused"
    assert "spills" in text and "OutOfResources" in text
    assert "(max, then sum, then divide) unless a kernel fuses it" not in text
    assert "eager softmax is one fused kernel" in text


def test_a_blank_add_kernel_is_named_first_as_its_cell_lists_it(tmp_path, monkeypatch):
    """Run All on a blank lesson 08 stops at check_add: the line names add_kernel (first in the cell), not add_grid."""
    import importlib
    import json

    from conftest import ROOT
    from grader.notebook import NotDone
    from mutants import lesson08 as mutants

    cells = json.loads((ROOT / "notebooks" / "08_inside_a_kernel" / "08_inside_a_kernel.ipynb").read_text())["cells"]
    stub = next("".join(c["source"]) for c in cells if "def add_kernel" in "".join(c["source"]))
    (tmp_path / "blank_add.py").write_text(stub)  # files: triton.jit reads the kernel's source
    (tmp_path / "done_add.py").write_text(mutants._ADD_KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    blank, done = importlib.import_module("blank_add"), importlib.import_module("done_add")
    with pytest.raises(NotDone) as raised:
        lesson08.check_add(blank.add_kernel, blank.add_grid, blank.masked_lanes)
    assert raised.value.name == "add_kernel"
    with pytest.raises(NotDone) as raised:  # the kernel written, the grid not: then add_grid is named
        lesson08.check_add(done.add_kernel, blank.add_grid, blank.masked_lanes)
    assert raised.value.name == "add_grid"


def test_the_lesson_says_what_tl_dot_needs_on_a_gpu_and_when_l2_serves_k_and_v():
    """Third edition: tl.dot's minimum sizes on a GPU (Triton 3.9's NVIDIA backend, min_dot_size) are not the
    interpreter's, and at long sequence one head's K and V fit in L2, so the HBM time of the attention re-reads is
    an upper bound. The lesson said neither."""
    import inspect

    from triton.backends.nvidia import compiler as nvidia

    from conftest import ROOT, read_notebook

    check = nvidia.min_dot_size(None)

    class _T:
        def __init__(self, bits):
            self.scalar = type("S", (), {"primitive_bitwidth": bits})()

    assert [check(_T(b), _T(b))[2] for b in (16, 32, 8)] == [16, 8, 32]
    assert '"min_dot_size"] = lambda lhsType, rhsType: (1, 1, 1)' in inspect.getsource(
        __import__("triton.runtime.interpreter", fromlist=["x"]))
    cells = [c.source for c in read_notebook(ROOT / "solutions" / "08_inside_a_kernel" / "08_inside_a_kernel.ipynb").cells]
    text = "\n".join(cells)
    assert "K of at least 16 for 16-bit inputs, 8 for float32 and 32 for 8-bit" in text
    attention = next(c for c in cells if "The score matrix alone outgrows" in c)
    assert "SM[\"l2_mb\"]" in attention and "upper bound" in attention
    assert 2 * 65536 * 128 * 2 < 50e6  # s = 64k, d = 128, bf16: 33.5 MB in an H100's 50 MB L2


def test_opening_the_tile_explorer_before_the_first_guess_is_a_reveal(tmp_path, monkeypatch, capsys):
    """The explorer says whether 256 × 256 spills on an H100: TILE_PREDICTION's answer, so opened from a cell before
    the first guess it counts as asking for it (like the model it is scored against)."""
    from grader import predictions, specs

    monkeypatch.setenv(predictions.ENV_PATH, str(tmp_path / predictions.FILE_NAME))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv(predictions.ENV_GRADING, raising=False)
    predictions._MEMORY.clear()
    predictions._SHOWN.clear()
    chips = [(specs.chip(lesson08.TILE_CHIP), specs.load_sm()[lesson08.TILE_CHIP])]
    exec(compile("from grader import widgets\nwidgets.tile_explorer(lambda *a: 1.0, chips, start_tile=256)\n", "<cell>",
                 "exec"), {"chips": chips})
    assert lesson08.check_tile_prediction({"tile": "256x128", "256x256": "registers", "why": "read it off"}) == 0.0
    assert "counts as asking for the answer" in capsys.readouterr().out


def test_every_exercise_cell_imports_what_its_definitions_need():
    """The class grader runs exercise cells and checks alone: a cell whose decorator or annotations use a module it
    does not import itself (torch, triton, tl, math) fails with a NameError when an earlier exercise cell, rewritten by
    the learner, no longer imports it. The pipeline's own mistaken add_kernel did that: attention_blocked then
    failed with "name 'attention_blocked' is not defined"."""
    import ast
    import json

    from conftest import ROOT

    cells = json.loads((ROOT / "notebooks" / "08_inside_a_kernel" / "08_inside_a_kernel.ipynb").read_text())["cells"]
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("solution") or cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names}
        needed = set()
        for f in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            roots = [*f.decorator_list, f.returns, *(a.annotation for a in f.args.args + f.args.kwonlyargs)]
            needed |= {n.id for r in roots if r is not None for n in ast.walk(r) if isinstance(n, ast.Name)}
        needed -= {"int", "float", "tuple", "list", "dict", "str", "bool", "object"}
        assert needed <= imported, f"{meta['grade_id']} uses {sorted(needed - imported)} without importing it"


def test_a_copy_of_a_course_kernel_launched_before_the_check_counts(tmp_path, monkeypatch):
    """Copy test, round 3: measuring with the course's kernels under the counter in a cell before the byte check passed
    fusion_bytes. A launch of a course kernel from a cell counts for the guard's earlier=, and so does a launch of a
    copy of its printed code (renamed variables and all: same bytecode)."""
    import importlib
    import sys

    import pytest

    pytest.importorskip("triton")
    from grader import shortcuts, triton_counter
    from grader.checks import lesson08
    from grader.notebook import CheckFailed

    (tmp_path / "copied_gelu.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def my_gelu(a_ptr, b_ptr, count, BLOCK: tl.constexpr):  # the printed gelu_kernel, renamed\n"
        "    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = o < count\n"
        "    v = tl.load(a_ptr + o, mask=m)\n"
        "    tl.store(b_ptr + o, 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476)), mask=m)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    copied = importlib.import_module("copied_gelu")
    try:
        shortcuts._fresh_kernel()
        cell = compile("triton_counter.launch(my_gelu, (1,), torch.zeros(8), torch.zeros(8), 8, BLOCK=8)\n", "<cell>",
                       "exec")
        exec(cell, {"triton_counter": triton_counter, "torch": torch, "my_gelu": copied.my_gelu})
        assert triton_counter.launched_label("gelu_kernel") in shortcuts._EVER

        def fusion_bytes(rows, cols, dtype_bytes):
            n = rows * cols
            return (4 * n + cols) * dtype_bytes, (2 * n + cols) * dtype_bytes

        with pytest.raises(CheckFailed, match="called the course's gelu_kernel .*before your fusion_bytes"):
            lesson08.check_fusion_bytes(fusion_bytes)
        shortcuts._fresh_kernel()
        lesson08.check_fusion_bytes(fusion_bytes)  # a fresh kernel: the same function passes
    finally:
        sys.modules.pop("copied_gelu", None)
        shortcuts._fresh_kernel()


def test_show_cells_call_the_learners_functions_before_they_draw():
    """Copy test r22: the attention-memory cell drew its figure, then called flash_traffic and skipped, so a learner
    without it saw half a cell. A show cell under skip_if_not_done calls the learner's functions before it displays."""
    from conftest import ROOT, read_notebook

    learner = ("flash_traffic(", "tile_traffic(", "best_tiles(", "attention_blocked(", "fusion_bytes(")
    for cell in read_notebook(ROOT / "solutions" / "08_inside_a_kernel" / "08_inside_a_kernel.ipynb").cells:
        source = cell.source
        if cell.cell_type != "code" or "skip_if_not_done" not in source or "display(fig)" not in source:
            continue
        drawn = source.index("display(fig)")
        calls = [source.index(f) for f in learner if f in source and "def " + f not in source]
        assert all(at < drawn for at in calls), source[:200]


def test_the_flash_kernel_leaves_its_traffic_to_be_read_from_its_code():
    """Copy test r22 restated flash_traffic from the kernel's comments ('read once', 'all of K and V, for every query
    block') and the page's 'walking all keys': the exercise asks the learner to read the kernel, so neither says it."""
    from conftest import ROOT, read_notebook
    from grader import triton_kernels

    source = triton_kernels.source("flash_attention_kernel")
    for told in ("read once", "all of K and V", "every query block"):
        assert told not in source, told
    text = "\n".join(c.source for c in read_notebook(ROOT / "notebooks" / "08_inside_a_kernel" /
                                                     "08_inside_a_kernel.ipynb").cells)
    assert "walking all keys" not in text


def test_fusion_bytes_gives_the_principle_not_the_count():
    """Copy test r22 restated fusion_bytes from its text: 'count each tensor each time a kernel reads or writes it; a
    value a kernel uses many times (the bias, one per column) comes from memory once'. The text now points to lesson
    01's least traffic; which tensors cross, and the bias once, are the learner's to work out."""
    from conftest import ROOT, read_notebook

    text = "\n".join(c.source for c in read_notebook(ROOT / "notebooks" / "08_inside_a_kernel" /
                                                     "08_inside_a_kernel.ipynb").cells)
    flat = " ".join(text.split())
    for told in ("each time a kernel reads or writes it", "comes from memory once", "the bias, one per column"):
        assert told not in flat, told
    assert "least bytes" in text


def test_the_flash_kernel_runs_on_16_bit_inputs_and_moves_what_flash_traffic_counts():
    """An outside tester: tl.dot(p, v) took a float32 p and a float16 v, which Triton refuses ('Both operands must be
    same dtype', triton/language/semantic.py, the GPU compiler's path too), yet flash_traffic is checked and used at 2
    bytes. p is cast to v's dtype for the second dot, as FlashAttention does; the accumulator stays float32."""
    source = triton_kernels.source("flash_attention_kernel")
    assert "tl.dot(p.to(v.dtype), v)" in source and "acc = tl.zeros((BLOCK_M, D), tl.float32)" in source
    q, k, v = (t.half() for t in lesson08.attention_inputs(40, 16, "random"))  # s = 40: neither block divides it
    o, counts = triton_kernels.flash_attention(q, k, v, 16, 8)
    assert o.dtype == torch.float16
    assert torch.allclose(o.float(), lesson08.reference_attention(q.float(), k.float(), v.float()), atol=1e-2)
    assert (counts.loaded_bytes, counts.stored_bytes) == JUDGES.flash_bytes(40, 16, 16, 8, 2)
    # bfloat16 moves the same bytes; its values are not compared: the interpreter's bfloat16 arithmetic on this CPU
    # build gives wrong numbers (measured: errors of 1e8), so float16 stands for the 2-byte formats above
    o, counts = triton_kernels.flash_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), 16, 8)
    assert o.dtype == torch.bfloat16 and (counts.loaded_bytes, counts.stored_bytes) == JUDGES.flash_bytes(40, 16, 16, 8, 2)


def test_the_matmul_stores_c_in_the_inputs_dtype_as_tile_traffic_counts_it():
    """An outside tester: the course's matmul stored C as float32 for float16 inputs (12288 B for 64 × 48), while
    tile_traffic's check counts C at dtype_bytes. C is now allocated in the inputs' dtype and the float32 accumulator
    rounded to it on the store, as torch's matmul returns it; the exercise says so."""
    from conftest import read_notebook

    a, b = torch.randn(64, 32).half(), torch.randn(32, 48).half()
    c, counts = triton_kernels.matmul(a, b, 16, 16, 16)
    assert c.dtype == torch.float16 and counts.per_argument()["c_ptr"]["stored"] == 64 * 48 * 2
    assert counts.bytes == JUDGES._traffic(64, 48, 32, 16, 16, 16, 2)
    assert torch.allclose(c.float(), a.float() @ b.float(), atol=1e-2, rtol=2e-3)
    assert "acc.to(c_ptr.dtype.element_ty)" in triton_kernels.source("matmul_kernel")
    name = "08_inside_a_kernel"
    text = " ".join(" ".join(c.source for c in read_notebook(ROOT / "solutions" / name / f"{name}.ipynb").cells).split())
    assert "rounds it to C's dtype when it stores, as torch's matmul returns C in its inputs' dtype" in text
    assert "torch.float16" in next(c.source for c in read_notebook(ROOT / "solutions" / name / f"{name}.ipynb").cells
                                   if "triton_kernels.matmul(" in c.source)


def test_the_softmax_case_whose_max_lies_in_a_later_block_overflows_one_blocks_max():
    """An outside tester: a kernel that subtracts only its first block's max passed every case. The case added has
    its rows' max in a later block, so high above the first block's that e^(x − that max) overflows float32."""
    case = next(c for c in lesson08._SOFTMAX_CASES if c[-1] > 0)
    label, rows, cols, scale, shift, strided, block, rise = case
    x = lesson08._softmax_input(rows, cols, scale, shift, strided, rise, block)
    assert cols > block
    first, whole = x[:, :block].max(1).values, x.max(1).values
    assert (whole - first).min() > 88.8 and torch.isinf(torch.exp(whole - first)).all()
    assert torch.isfinite(torch.softmax(x, 1)).all()


def test_the_page_says_what_the_on_chip_model_assumes():
    """An outside tester: the shared-memory limit is one thread block's (227 KB on an H100, data/sm.csv's note), and
    one thread holds at most 255 registers, so the register model holds only with warps enough: the page says both,
    and the reveal prints what the per-block figure and num_warps = 4 do to the pick."""
    from conftest import read_notebook

    name = "08_inside_a_kernel"
    cells = [c.source for c in read_notebook(ROOT / "solutions" / name / f"{name}.ipynb").cells]
    text = " ".join(" ".join(cells).split())
    assert "more shared memory than an SM has" not in text
    assert "more shared memory than one program (one thread block) may use: on an H100, 227 KB" in text
    assert "227 KB" in open(ROOT / "data" / "sm.csv", encoding="utf-8").read()
    assert "at most 255 registers" in text and "`num_warps = 4`" in text and "**8 warps**" in text
    reveal = next(c for c in cells if "block_smem = smem - 1024" in c)
    assert "for warps in (8, 4)" in reveal and "255" in reveal
    assert "compiles these kernels" not in text and "that they compile on a GPU is untested" in text
    assert 256 * 128 / (4 * 32) > 255 >= 256 * 128 / (8 * 32)  # the answer's tile: over the cap at 4 warps, not at 8
