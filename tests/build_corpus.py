"""Build the adversarial corpus: lesson 01's release with the reference answers, broken in every way a class breaks it.

    .venv/bin/python tests/build_corpus.py [FOLDER]     (default: tests/corpus/submissions)

Each case is a student folder FOLDER/<case>/01_crossover/01_crossover.ipynb;
tests/corpus/manifest.json says what each must get (total score, and a
regex some row's message must match, on the named check when one is named).
tests/test_corpus.py builds a fresh copy and grades it, so the corpus follows
the lesson whenever the lesson changes.

Some cases cannot live in git: symlinks (to solutions/, to another student's
folder), folder names that are not UTF-8 (git stores names as bytes, but
checkouts on other systems and many tools mangle them), stray files where
folders belong, and a notebook over the size cap. build(folder,
with_special=True) makes those in the folder it builds (the test's temporary
copy); the committed corpus leaves them out. The manifest marks them
"special": true.
"""

from __future__ import annotations

import copy
import json
import os
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


SCRIPT = "<script>alert('feedback')</script><img src=x onerror=alert('img')>"
DISK_HOG = """for i in range(32):  # 2 GB in 64 MB files
    with open(f"hog{i}.bin", "wb") as f:
        f.write(b"x" * 64 * 1024**2)
"""
SHM_HOG = """with open("/dev/shm/hog", "wb") as f:
    for i in range(16):  # 1 GB
        f.write(b"x" * 64 * 1024**2)
"""
FORK_BOMB = "import os\nwhile True:\n    os.fork()\n"
THREAD_BOMB = """import threading, time
for i in range(2000):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
"""
DAEMON = """import subprocess
subprocess.Popen(["sh", "-c", "sleep 5.32; echo late > /tmp/daemon_wrote; echo late > $HOME/daemon_wrote"],
                 start_new_session=True)  # a daemon in a session of its own, never waited for
"""
ORPHAN = """import os
if os.fork() == 0:  # a child that leaves the session and outlives its parent, then writes later
    os.setsid()
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", "sleep 5.31; echo late > /tmp/orphan_wrote; echo late > $HOME/orphan_wrote"])
    os._exit(0)
os.wait()
"""
FORGED_RUNNER = r'''import json, os, sys
fd = int(sys.argv[sys.argv.index("--result-fd") + 1])
out = os.fdopen(fd, "w")
out.write(json.dumps({"nonce": "ready"}) + "\n"); out.flush()
for line in sys.stdin:
    req = json.loads(line)
    out.write(json.dumps({"nonce": req["nonce"], "ok": True, "ename": "", "evalue": "", "stdout": "", "stderr": "",
                          "seconds": 0, "notes": []}) + "\n"); out.flush()
'''
OWN_RUNNER = f"""import os
FORGED = {FORGED_RUNNER!r}
os.makedirs("grader/pipeline", exist_ok=True)
for name in ("grader/__init__.py", "grader/pipeline/__init__.py"):
    open(name, "w").write("")
for name in ("grader/pipeline/cellrunner.py", "sitecustomize.py", "usercustomize.py"):
    open(name, "w").write(FORGED)
os._exit(0)
"""


# issue 10: attacks on the verdict, which is decided outside the submission's process
WRONG_FLOPS = "def matmul_flops(n):\n    return n ** 3\n"
PATCH_REPLY_ENCODER = WRONG_FLOPS + """
import json
_dumps = json.dumps
def _forged(obj, *a, **k):
    if isinstance(obj, dict) and "nonce" in obj:
        obj.update(ok=True, ename="", evalue="")
    return _dumps(obj, *a, **k)
json.dumps = _forged
"""
PATCH_REQUEST_PARSER = WRONG_FLOPS + """
import json
_loads = json.loads
def _blind(text, *a, **k):
    request = _loads(text, *a, **k)
    if isinstance(request, dict) and request.get("kind") == "observe":
        return {"kind": "student", "source": "pass", "nonce": request.get("nonce")}
    return request
json.loads = _blind
"""
AUDIT_HOOK = """def matmul_flops(n):
    return 2 * n**3

import sys
def _spy(event, args):
    if event in ("exec", "compile", "open"):
        try:
            print("SPY", event, str(args[0])[:4000])
        except Exception:
            pass
sys.addaudithook(_spy)
"""
TRACER = """def matmul_flops(n):
    return 2 * n**3

import gc, sys, threading
def _tracer(frame, event, arg):
    names = frame.f_locals
    if "want" in names or "why" in names:
        print("LEAKED" + "!", names.get("want"), names.get("why"))
    return _tracer
sys.settrace(_tracer)
threading.settrace(_tracer)
for obj in gc.get_objects():
    if isinstance(obj, dict) and "why" in obj and "want" in obj:
        print("LEAKED" + "!", obj)
"""
SWAP_JUDGES = WRONG_FLOPS + """
import grader.checks._common as common
import grader.checks.lesson01 as lesson01
def _nothing(*args, **kwargs):
    return None
common.Check.judge = _nothing
lesson01._judge_matmul_flops.__code__ = _nothing.__code__
common._judge_expect.__code__ = _nothing.__code__
common.fail.__code__ = _nothing.__code__
"""
FORGE_RECORDINGS = WRONG_FLOPS + """
import grader.checks._common as common
def _forged(fn, name, cases):
    return {"name": name, "calls": []}
common.record = _forged
"""
REACH_THE_RUNNER = WRONG_FLOPS + """
import sys
runner = sys.modules.get("__main__")
for module in list(sys.modules.values()):
    if hasattr(module, "_observe") and hasattr(module, "Changes"):
        module._observe = lambda request, namespace: {"name": "matmul_flops", "calls": []}
        runner = module
import grader.checks._plain as plain
plain.encode = lambda value, depth=0: {"name": "matmul_flops", "calls": []}
"""


def _deep(levels: int) -> bytes:
    """JSON nested `levels` deep: json.loads itself raises RecursionError on it."""
    return b'{"cells": ' + b"[" * levels + b"]" * levels + b', "nbformat": 4, "nbformat_minor": 5, "metadata": {}}'


def _raw(good, change) -> bytes:
    """The notebook's JSON with `change(raw)` applied: shapes nbformat would refuse to write."""
    raw = json.loads(nbformat.writes(good))
    change(raw)
    return json.dumps(raw).encode()


def _cell(raw, grade_id: str) -> dict:
    """The cell with this grade_id, in raw JSON."""
    return next(c for c in raw["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)


def _meta(raw, grade_id: str) -> dict:
    """The metadata of the cell with this grade_id, in raw JSON."""
    return _cell(raw, grade_id)["metadata"]


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
        "def matmul_bytes(n, dtype, out_dtype=None):\n    return 3 * n * n\n"))
    out["monkeypatched_torch"] = _set(good, "matmul_bytes", (
        "import torch\ntorch.float16 = torch.float32\ntorch.bfloat16 = torch.float32\ntorch.float64 = torch.float32\n\n"
        "def matmul_bytes(n, dtype, out_dtype=None):\n    return 3 * n * n * 4\n"))
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
    # issue 10: any bytes, any shape
    out["notebook_metadata_is_a_list"] = _raw(good, lambda raw: raw.update(metadata=["kernelspec", "python3"]))
    out["notebook_metadata_is_a_string"] = _raw(good, lambda raw: raw.update(metadata="python3"))
    out["cell_metadata_is_a_list"] = _raw(good, lambda raw: _cell(raw, "matmul_flops").update(metadata=["nbgrader"]))
    out["nbgrader_metadata_is_a_string"] = _raw(good, lambda raw: _meta(raw, "intensity").update(nbgrader="solution"))
    out["grade_id_is_a_list"] = _raw(good, lambda raw: _meta(raw, "matmul_flops")["nbgrader"].update(grade_id=["matmul_flops"]))
    out["grade_id_is_a_dict"] = _raw(good, lambda raw: _meta(raw, "bound_check")["nbgrader"].update(grade_id={"id": 1}))
    out["source_is_not_text"] = _raw(good, lambda raw: _cell(raw, "matmul_flops").update(source={"code": 1}))
    out["json_nested_100000_deep"] = _deep(100_000)
    out["metadata_nested_500_deep"] = _raw(good, lambda raw: raw["metadata"].update(deep=json.loads("[" * 500 + "]" * 500)))
    out["lone_surrogate_in_output"] = _set(good, "matmul_flops", (
        "print('\\ud800 and \\udcff')\n\ndef matmul_flops(n):\n    print('\\udfff')\n    return 2 * n**3\n"))
    out["lone_surrogate_in_source"] = _raw(good, lambda raw: _cell(raw, "matmul_flops").update(
        source="# \ud800 a lone surrogate in a comment\ndef matmul_flops(n):\n    return 2 * n**3\n"))
    out["html_in_output"] = _set(good, "matmul_flops", (
        f"print({SCRIPT!r})\n\ndef matmul_flops(n):\n    print({SCRIPT!r})\n    return 2 * n**3\n"))
    out["html_in_message"] = _set(good, "matmul_flops", f"def matmul_flops(n):\n    raise AssertionError({SCRIPT!r})\n")
    out["csv_formula_as_exception_name"] = _set(good, "matmul_flops", (
        "Formula = type('=HYPERLINK(\"http://evil.example\",\"click\")', (Exception,), {})\n\n"
        "def matmul_flops(n):\n    raise Formula('open me')\n"))
    out["csv_formula_in_message"] = _set(good, "matmul_flops", (
        "def matmul_flops(n):\n    raise ValueError('=HYPERLINK(\"http://evil.example\",\"click\")')\n"))
    # issue 10: what its processes and files can do
    out["disk_hog"] = _set(good, "matmul_flops", DISK_HOG + "\ndef matmul_flops(n):\n    return 2 * n**3\n")
    out["shm_hog"] = _set(good, "matmul_bytes", SHM_HOG + "\ndef matmul_bytes(n, dtype, out_dtype=None):\n    return 0\n")
    out["fork_bomb"] = _set(good, "intensity", FORK_BOMB + "\ndef intensity(flops, nbytes):\n    return flops / nbytes\n")
    out["thread_bomb"] = _set(good, "matmul_flops", THREAD_BOMB + "\ndef matmul_flops(n):\n    return 2 * n**3\n")
    out["daemon_in_its_own_session"] = _set(good, "matmul_bytes", DAEMON + (
        "\ndef matmul_bytes(n, dtype, out_dtype=None):\n    import torch\n    size = lambda d: torch.empty(0, dtype=d).element_size()\n"
        "    return n * n * (2 * size(dtype) + size(out_dtype or dtype))\n"))
    out["orphan_child_writes_later"] = _set(good, "matmul_flops", ORPHAN + "\ndef matmul_flops(n):\n    return 2 * n**3\n")
    out["writes_its_own_runner_then_exits"] = _set(good, "matmul_flops", OWN_RUNNER)
    # issue 10: the verdict is decided where the submission's code cannot reach
    out["patches_reply_encoder"] = _set(good, "matmul_flops", PATCH_REPLY_ENCODER)
    out["patches_request_parser"] = _set(good, "matmul_flops", PATCH_REQUEST_PARSER)
    out["audit_hook_copies_hidden_tests"] = _set(good, "matmul_flops", AUDIT_HOOK)
    out["tracer_and_gc_look_for_answers"] = _set(good, "matmul_flops", TRACER)
    out["swaps_judges_code_objects"] = _set(good, "matmul_flops", SWAP_JUDGES)
    out["forges_every_recording"] = _set(good, "matmul_flops", FORGE_RECORDINGS)
    out["reaches_the_runners_functions"] = _set(good, "matmul_flops", REACH_THE_RUNNER)
    out["shadows_the_checks_then_exits"] = _set(good, "matmul_flops", (
        "import os\nos.makedirs('grader/checks', exist_ok=True)\n"
        "for name in ('grader/__init__.py', 'grader/checks/__init__.py'):\n    open(name, 'w').write('')\n"
        "open('grader/checks/lesson01.py', 'w').write('def __getattr__(name):\\n    return None\\n')\n"
        "open('grader/checks/_common.py', 'w').write('')\n"
        "os.environ['PYTHONPATH'] = os.getcwd()\nos._exit(0)\n\n"
        "def matmul_flops(n):\n    return n ** 3\n"))
    out["forks_a_second_runner"] = _set(good, "matmul_flops", (
        "import os\nchild = os.fork()  # the child would read the grader's next request\n\n"
        "def matmul_flops(n):\n    return 2 * n**3\n"))
    out["huge_tensor_shape"] = _set(good, "matmul_flops", HUGE_SHAPE)
    out["many_small_values"] = _set(good, "matmul_flops", NESTED_TUPLES)
    out["opaque_type_names_forged"] = _set(good, "matmul_flops", OPAQUE_NAMES)
    out["opaque_type_names_returned"] = _set(good, "matmul_flops", MANY_TYPES)
    out["busy_processes_in_own_sessions"] = _append(good, "linear_forecast", BUSY)
    out["busy_forks_in_own_sessions"] = _append(good, "linear_forecast", BUSY_THREADS)
    out["memory_in_many_processes"] = _append(good, "linear_forecast", MEMORY_IN_PROCESSES)
    out["long_wrong_answer"] = _set(good, "matmul_flops", LONG_LIST)
    out["long_answer_with_nul_and_formula"] = _set(good, "matmul_flops", LONG_TEXT)
    out["tensor_torch_cannot_rebuild"] = _set(good, "matmul_flops", TENSOR_INT8)
    out["tensor_int_too_big"] = _set(good, "matmul_flops", TENSOR_HUGE_INT)
    out["kills_its_keeper_leaves_a_daemon"] = _append(good, "linear_forecast", KILL_KEEPER)
    out["kills_every_process_it_can"] = _append(good, "linear_forecast", KILL_ALL)
    out["observation_over_4_mib"] = _set(good, "matmul_flops", OVER_CAP)
    out["giant_line_on_the_result_pipe"] = _set(good, "matmul_flops", GIANT_LINE)
    out["output_flood_in_added_cells"] = output_flood(120)
    out["thousands_of_one_line_cells"] = many_one_line_cells(2000)
    for name in NEIGHBOURED:  # a good copy graded beside each: what the attack costs another student
        out[f"{name}{NEIGHBOUR}"] = good
    return out


NEIGHBOUR = "_neighbour"  # suffix of the good copy graded beside a hostile case (next in sorted order)
NEIGHBOURED = ["huge_tensor_shape", "many_small_values", "opaque_type_names_forged", "opaque_type_names_returned",
               "busy_processes_in_own_sessions", "busy_forks_in_own_sessions", "memory_in_many_processes",
               "long_wrong_answer", "long_answer_with_nul_and_formula", "tensor_torch_cannot_rebuild",
               "tensor_int_too_big", "kills_its_keeper_leaves_a_daemon", "kills_every_process_it_can",
               "observation_over_4_mib", "giant_line_on_the_result_pipe", "output_flood_in_added_cells",
               "thousands_of_one_line_cells"]


# issue 21: what a submission does to the grader's side and to its neighbours (each graded beside a good copy)
def _forge(raw: str) -> str:
    """A matmul_flops cell whose observation reaches the grader as the raw JSON `raw` (encode bypassed), other checks untouched."""
    return f"""import grader.checks._common as common
import grader.checks._plain as plain
_encode, _record = plain.encode, common.record
def _raw(value, depth=0):
    if isinstance(value, dict) and value.get("forged") is True:
        return value["raw"]
    return _encode(value, depth)
def _forged(fn, name, cases):
    if name == "matmul_flops":
        return {{"forged": True, "raw": {raw}}}
    return _record(fn, name, cases)
plain.encode, common.record = _raw, _forged

def matmul_flops(n):
    return 2 * n**3
"""


def _recording(value: str) -> str:
    """The raw JSON of a recording whose one call returned `value` (raw JSON, as Python source)."""
    return f'{{"name": "matmul_flops", "calls": [["(4,)", {{"value": {value}}}]]}}'


HUGE_SHAPE = _forge(_recording('{"__tensor__": {"dtype": "float32", "shape": [1000003] * 400000, "values": [1.0], '
                               '"device": "cpu", "grad": False}}'))
NESTED_TUPLES = _forge(_recording('{"__tuple__": [[0] * 3 for _ in range(300000)]}'))
TENSOR_INT8 = _forge(_recording('{"__tensor__": {"dtype": "int8", "shape": [2], "values": [1000, 1e300], '
                                '"device": "cpu", "grad": False}}'))
TENSOR_HUGE_INT = _forge(_recording('{"__tensor__": {"dtype": "int64", "shape": [1], "values": [10**30], '
                                    '"device": "cpu", "grad": False}}'))
OPAQUE_NAMES = _forge(_recording('[{"__opaque__": f"m.Type{i}", "repr": "x"} for i in range(60000)]'))
MANY_TYPES = """def matmul_flops(n):
    return [type(f"Answer{n}_{i}", (), {})() for i in range(6000)]
"""
LONG_LIST = "def matmul_flops(n):\n    return [0] * 60000\n"
LONG_TEXT = "def matmul_flops(n):\n    return '=\\x00\\r\\n\"' * 50000 + 'end'\n"
OVER_CAP = "def matmul_flops(n):\n    return 'x' * 5_000_000\n"
GIANT_LINE = """import os, stat
def matmul_flops(n):
    for fd in range(3, 64):  # every pipe it holds, the result pipe among them
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b'{"nonce": ' + b'[' * (6 << 20) + b'\\n')
        except OSError:
            pass
    return 2 * n**3
"""
BUSY = """
import subprocess
for i in range(96):  # each in a session of its own: a scheduler group each, without a cgroup
    subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
"""
BUSY_THREADS = """
import os
for i in range(48):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
"""
MEMORY_IN_PROCESSES = """
import os, time
for i in range(4):  # 4 x 1 GiB: each process under its own limit, together over the submission's
    if os.fork() == 0:
        try:
            hog = b"x" * (1 << 30)
            time.sleep(8)
        finally:
            os._exit(0)
time.sleep(4)
"""
KILL_KEEPER = """
import os, signal, subprocess
subprocess.Popen(["sh", "-c", "sleep 5.33; echo late > /tmp/keeper_daemon_wrote"], start_new_session=True)
try:
    os.kill(os.getppid(), signal.SIGKILL)  # without bwrap: the keeper, when it runs as the same uid
except OSError:
    pass
"""
KILL_ALL = """
import os, signal
os.kill(-1, signal.SIGKILL)  # every process it may signal
"""


# issue 28: what one submission makes the grader keep, write and render
FLOOD = ("import sys\nprint('x' * 30000)\nsys.stderr.write('y' * 30000)\nraise ValueError('z' * 30000)\n"
         "# {i}")  # each run: 20,000 characters of stdout, of stderr and of error kept, before issue 28's bound


def output_flood(cells: int) -> nbformat.NotebookNode:
    """The good notebook with `cells` added cells, each printing 30,000 characters to stdout and stderr and raising 30,000 more."""
    return _added(_good(), [FLOOD.format(i=i) for i in range(cells)])


def many_one_line_cells(cells: int) -> nbformat.NotebookNode:
    """The good notebook with `cells` added one-line cells (4.5 MB at 45,000): cheap to hand in, costly to run and render."""
    return _added(_good(), [f"x{i} = {i}" for i in range(cells)])


def _added(nb, sources: list[str]) -> nbformat.NotebookNode:
    """`nb` with code cells of these sources added before its first exercise cell."""
    nb = copy.deepcopy(nb)
    first = next(i for i, c in enumerate(nb.cells) if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    nb.cells[first:first] = [nbformat.v4.new_code_cell(src, id=f"added-{i}") for i, src in enumerate(sources)]
    return nb


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


FORMULA_NAME = "=2+5+cmd|' -c calc'!A0"


def special(folder: Path) -> list[str]:
    """Make, in `folder`, the cases git cannot hold (manifest: "special"); returns their manifest names."""
    good = _good()
    here = folder / "symlink_to_solutions" / LESSON
    here.mkdir(parents=True)
    (here / f"{LESSON}.ipynb").symlink_to(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb")
    (folder / "symlink_to_another_student").mkdir()
    (folder / "symlink_to_another_student" / LESSON).symlink_to(folder / "good" / LESSON, target_is_directory=True)
    (folder / "symlinked_student_folder").symlink_to(folder / "good", target_is_directory=True)
    (folder / "stray_file_at_top").write_text("a file where a student folder is expected\n")
    (folder / "unknown_lesson" / "99_unknown").mkdir(parents=True)
    nbformat.write(good, str(folder / "unknown_lesson" / "99_unknown" / "99_unknown.ipynb"))
    (folder / "stray_file_in_student" / LESSON).mkdir(parents=True)
    nbformat.write(good, str(folder / "stray_file_in_student" / LESSON / f"{LESSON}.ipynb"))
    (folder / "stray_file_in_student" / "notes.txt").write_text("a file where a lesson folder is expected\n")
    bad = os.fsencode(folder) + b"/non_utf8_student_\xff/" + LESSON.encode()
    os.makedirs(bad)
    nbformat.write(good, os.fsdecode(bad + b"/" + LESSON.encode() + b".ipynb"))
    (folder / "non_utf8_lesson" / LESSON).mkdir(parents=True)
    nbformat.write(good, str(folder / "non_utf8_lesson" / LESSON / f"{LESSON}.ipynb"))
    os.makedirs(os.fsencode(folder / "non_utf8_lesson") + b"/01_crossover_\xfe")
    (folder / FORMULA_NAME / LESSON).mkdir(parents=True)  # a student folder named like a spreadsheet formula
    nbformat.write(_set(good, "matmul_flops", "def matmul_flops(n):\n    return n**3\n"),
                   str(folder / FORMULA_NAME / LESSON / f"{LESSON}.ipynb"))
    (folder / "oversized_notebook" / LESSON).mkdir(parents=True)
    with open(folder / "oversized_notebook" / LESSON / f"{LESSON}.ipynb", "wb") as f:
        f.truncate(21 * 1024**2)  # sparse: 21 MB to the grader, nothing on the disk
    return ["symlink_to_solutions", "symlink_to_another_student", "symlinked_student_folder", "stray_file_at_top",
            "unknown_lesson", "stray_file_in_student", "non_utf8_student", "non_utf8_lesson", "oversized_notebook",
            FORMULA_NAME]


def build(folder: Path, with_special: bool = False) -> list[str]:
    """Write every case under folder/ (and the cases git cannot hold, when asked); returns the case names."""
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
    return sorted([*built, *(special(folder) if with_special else [])])


if __name__ == "__main__":
    where = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "corpus" / "submissions"
    names = build(where)
    print(f"{len(names)} cases in {where}")
