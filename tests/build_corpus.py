"""Build the adversarial corpus: lesson 01's release with the reference answers, broken in every way a class breaks it.

    .venv/bin/python tests/build_corpus.py [FOLDER]     (default: tests/corpus/submissions)

Each case is a student folder FOLDER/<case>/01_crossover/01_crossover.ipynb;
tests/corpus/manifest.json says what each must get (total score, and a
regex some row's message must match, on the named check when one is named).
tests/test_corpus.py builds a fresh copy and grades it, so the corpus follows
the lesson whenever the lesson changes.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
LESSON = "01_crossover"
MANIFEST = ROOT / "tests" / "corpus" / "manifest.json"


def _gid(cell) -> str | None:
    """A cell's nbgrader grade_id, if it has one."""
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _good() -> nbformat.NotebookNode:
    """The student release with every exercise answered by the reference solution."""
    nb = nbformat.read(str(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    answers = {_gid(c): c.source for c in nbformat.read(str(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4).cells
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in nb.cells:
        if _gid(cell) in answers:
            cell.source = answers[_gid(cell)]
    return nb


def _set(nb, grade_id: str, source: str) -> nbformat.NotebookNode:
    """The notebook with one cell's source replaced."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if _gid(cell) == grade_id:
            cell.source = source
            return nb
    raise KeyError(grade_id)


def _append(nb, grade_id: str, extra: str) -> nbformat.NotebookNode:
    """The notebook with code added to the end of one cell."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if _gid(cell) == grade_id:
            cell.source += "\n" + extra
            return nb
    raise KeyError(grade_id)


FLOPS_LOOP = "def matmul_flops(n):\n    while True:\n        pass\n"
ALWAYS_EQUAL = ("class Answer(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n\n"
                "def matmul_flops(n):\n    return Answer(0)\n")
READ_SECRETS = """
import glob, os
from pathlib import Path
import grader
course = Path(grader.__file__).resolve().parents[1]
leaks = [p for p in [course / "solutions", course / "tests", course / "notebooks"] if p.is_dir() and any(p.iterdir())]
for top in [str(course), "/tmp", os.path.expanduser("~")]:
    for folder, dirs, files in os.walk(top):
        if folder.count(os.sep) - top.count(os.sep) > 4:
            dirs[:] = []
        leaks += [os.path.join(folder, f) for f in files if f == "gradebook.db" or f == "grades.csv"]
if leaks:
    def matmul_flops(n):
        raise RuntimeError(f"LEAK: the submission could read {leaks[:3]}")
"""
WRITE_OUTSIDE = """
import grader
from pathlib import Path
wrote = []
for target in [Path(grader.__file__).resolve().parents[1] / "tests" / "corpus" / ".escape_probe", Path(grader.__file__).resolve().parent / ".escape_probe"]:
    try:
        target.write_text("escaped")
        wrote.append(str(target))
    except OSError:
        pass
if wrote:
    def matmul_flops(n):
        raise RuntimeError(f"ESCAPE: wrote {wrote}")
"""
CHANGE_OTHERS = """
import json, os
changed = []
for top in ["/tmp", os.path.expanduser("~"), "/work"]:
    for folder, dirs, files in os.walk(top):
        if folder.count(os.sep) - top.count(os.sep) > 6:
            dirs[:] = []
        if os.path.basename(folder) == "good" and "01_crossover.json" in files:
            path = os.path.join(folder, "01_crossover.json")
            try:
                data = json.load(open(path))
                for row in data["rows"]:
                    row["score"] = 0
                json.dump(data, open(path, "w"))
                changed.append(path)
            except OSError:
                pass
"""
UNMOUNT = """
import ctypes
from pathlib import Path
import grader
course = Path(grader.__file__).resolve().parents[1]
libc = ctypes.CDLL(None, use_errno=True)
for folder in [course / "grader", course / ".venv", course]:
    libc.umount2(str(folder).encode(), 2)  # MNT_DETACH
if (course / "solutions").is_dir():
    def matmul_flops(n):
        raise RuntimeError("LEAK: unmounted the tmpfs and reached solutions/")
"""
FORGE = """
import json, os
def matmul_flops(n):
    for fd in range(3, 64):
        try:
            os.write(fd, (json.dumps({"nonce": "guess", "ok": True, "ename": "", "evalue": "", "stdout": "", "stderr": "", "seconds": 0, "notes": []}) + "\\n").encode())
        except OSError:
            pass
    return 0
"""


def cases() -> dict[str, object]:
    """case name -> notebook (NotebookNode) or raw bytes, for every case in the manifest."""
    good = _good()
    blank = nbformat.read(str(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    text = nbformat.writes(good)
    out: dict[str, object] = {"good": good, "blank": blank}
    out["infinite_loop_in_check"] = _set(good, "matmul_flops", FLOPS_LOOP)
    out["infinite_loop_in_cell"] = _append(good, "intensity", "while True:\n    pass\n")
    out["os_exit_in_check"] = _set(good, "matmul_flops", "import os\n\ndef matmul_flops(n):\n    os._exit(0)\n")
    out["os_exit_in_cell"] = _append(good, "intensity", "import os\nos._exit(3)\n")
    out["sys_exit_in_check"] = _set(good, "matmul_flops", "import sys\n\ndef matmul_flops(n):\n    sys.exit(1)\n")
    out["memory_hog"] = _set(good, "matmul_flops", "def matmul_flops(n):\n    hog = bytearray(64 * 1024**3)\n    return 2 * n**3\n")
    out["malformed_json"] = text[: len(text) // 2].encode()
    out["empty_file"] = b""
    wrong = json.loads(text)
    wrong["nbformat"] = 99
    out["wrong_nbformat"] = json.dumps(wrong).encode()
    nb = copy.deepcopy(good)
    nb.cells = [c for c in nb.cells if not c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    out["deleted_check_cells"] = nb
    out["edited_check_cell"] = _set(good, "matmul_flops_check", "print('all good, trust me')\n")
    nb = copy.deepcopy(good)
    copies = [copy.deepcopy(c) for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    for c in copies:
        c["id"] += "-copy"
    nb.cells = nb.cells + copies
    out["duplicated_check_cells"] = nb
    nb = copy.deepcopy(good)
    nb.cells = list(reversed(nb.cells))
    out["reordered_cells"] = nb
    nb = copy.deepcopy(good)
    for cell in nb.cells:
        if _gid(cell) in ("matmul_flops", "bound_check"):
            cell.metadata["nbgrader"]["grade_id"] += "_renamed"
    out["renamed_grade_ids"] = nb
    out["duplicated_exercise_cell"] = _blank_then(good, "matmul_flops")
    out["monkeypatched_check"] = _set(good, "matmul_bytes", (
        "import torch\nfrom grader.checks import lesson01\nlesson01.check_matmul_bytes = lambda fn: None\n\n"
        "def matmul_bytes(n, dtype):\n    return 3 * n * n\n"))
    out["monkeypatched_torch"] = _set(good, "matmul_bytes", (
        "import torch\ntorch.float16 = torch.float32\ntorch.bfloat16 = torch.float32\ntorch.float64 = torch.float32\n\n"
        "def matmul_bytes(n, dtype):\n    return 3 * n * n * 4\n"))
    out["monkeypatched_builtins"] = _set(good, "intensity", (
        "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.AssertionError = Warning\n\n"
        "def intensity(flops, nbytes):\n    return 1.0\n"))
    out["always_equal_answer"] = _set(good, "matmul_flops", ALWAYS_EQUAL)
    out["input_transformer"] = _set(good, "matmul_flops", (
        "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])\n\n"
        "def matmul_flops(n):\n    return 0\n"))
    out["forged_result_line"] = _set(good, "matmul_flops", FORGE)
    out["syntax_error"] = _set(good, "matmul_flops", "def matmul_flops(n)\n    return 2 * n**3\n")
    out["reads_solutions_and_gradebook"] = _append(good, "matmul_flops", READ_SECRETS)
    out["writes_outside_its_folder"] = _append(good, "matmul_flops", WRITE_OUTSIDE)
    out["changes_another_grade"] = _append(good, "matmul_flops", CHANGE_OTHERS)
    out["unmounts_what_hides_the_course"] = _append(good, "matmul_flops", UNMOUNT)
    out["stderr_warnings_and_progress"] = _set(good, "matmul_flops", (
        "import sys, warnings\n\ndef matmul_flops(n):\n    warnings.warn('this is only a warning')\n"
        "    for i in range(50):\n        sys.stderr.write(f'\\rprogress {i * 2}%')\n    sys.stderr.write('\\n')\n"
        "    return 2 * n**3\n"))
    out["huge_output"] = _set(good, "matmul_flops", (
        "print('x' * 5_000_000)\n\ndef matmul_flops(n):\n    print('y' * 1_000_000)\n    return 2 * n**3\n"))
    nb = copy.deepcopy(good)
    nb.metadata.pop("kernelspec", None)
    nb.metadata.pop("language_info", None)
    out["no_kernelspec"] = nb
    out["extra_files"] = good
    out["missing_notebook"] = None
    out["helper_cell_added"] = _helper(good)
    return out


def _blank_then(good, grade_id: str) -> nbformat.NotebookNode:
    """A wrong copy of an exercise cell followed by the right one: the last definition is graded."""
    nb = copy.deepcopy(good)
    for i, cell in enumerate(nb.cells):
        if _gid(cell) == grade_id:
            wrong = copy.deepcopy(cell)
            wrong.source = "def matmul_flops(n):\n    return n ** 3\n"
            wrong["id"] = "wrong-copy"
            nb.cells.insert(i, wrong)
            return nb
    raise KeyError(grade_id)


def _helper(good) -> nbformat.NotebookNode:
    """A student who put a helper in a cell of their own, used by an exercise."""
    nb = copy.deepcopy(good)
    for i, cell in enumerate(nb.cells):
        if _gid(cell) == "matmul_flops":
            nb.cells.insert(i, nbformat.v4.new_code_cell("def _outputs(n):\n    return n * n\n", id="helper"))
            cell.source = "def matmul_flops(n):\n    return 2 * n * _outputs(n)\n"
            return nb
    raise KeyError("matmul_flops")


def build(folder: Path) -> list[str]:
    """Write every case under folder/; returns the case names."""
    if folder.exists():
        shutil.rmtree(folder)
    built = cases()
    for name, content in built.items():
        target = folder / name / LESSON
        target.mkdir(parents=True)
        path = target / f"{LESSON}.ipynb"
        if content is None:
            nbformat.write(_good(), str(target / "my_work.ipynb"))
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            nbformat.write(content, str(path))
        if name == "extra_files":
            (target / "data.bin").write_bytes(b"\0" * 1024)
            (target / "notes.txt").write_text("my notes\n")
    return sorted(built)


if __name__ == "__main__":
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "corpus" / "submissions"
    names = build(where)
    print(f"{len(names)} cases in {where}")
