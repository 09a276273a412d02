"""The process that runs one submission's cells inside the sandbox, one cell at a time, as the grader asks.

    python -m grader.pipeline.cellrunner LESSON_MODULE...    (started by grader.pipeline.runner, never by hand)

The grader (outside the sandbox) sends one request per line on stdin,
{"kind": "student" | "check", "source": ..., "nonce": ...}, and reads one JSON
result per request on file descriptor 3: {"nonce", "ok", "ename", "evalue",
"stdout", "stderr", "seconds", "notes"}. Only the cell being run is ever in this
process: the hidden tests of later checks are not here while the learner's code runs.

Learner cells run through IPython (magics work). Check cells (the instructor's
code) do not: before each one the runner puts back every module attribute,
sys.modules entry and builtin the learner's code replaced (so a monkeypatched
check, torch function or `AssertionError` is undone, and named in a note), then
executes the check compiled here, with each `==` in an assert made exact: an
object that is not a plain value (an always-equal object, say) never compares
equal to an expected answer. A check passes when its code finishes without an
exception; what it wrote to stderr does not count against it.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import os
import sys
import time

OUTPUT_CHARS = 20_000  # per stream per cell: a huge output is cut here, and says so
PLAIN_TYPES = (int, float, complex, str, bytes, bool, type(None))
# Modules whose attributes (and classes) are put back before each check: the ones checks rely on.
GUARDED = ("builtins", "grader", "torch", "numpy", "math", "cmath", "statistics", "time", "timeit", "numbers",
           "operator", "functools", "copy", "random", "inspect", "types", "abc", "re", "json", "decimal", "fractions")


def strict_eq(got, want) -> bool:
    """`got == want` for grading: plain values compare by value, and an object of a learner-made class never matches."""
    if isinstance(got, (list, tuple)) and type(got) in (list, tuple) and type(want) in (list, tuple):
        return len(got) == len(want) and all(strict_eq(a, b) for a, b in zip(got, want))
    if type(got) in PLAIN_TYPES and type(want) in PLAIN_TYPES:
        return got == want
    trusted = type(got).__module__.split(".")[0] in ("builtins", "torch", "numpy")
    return trusted and bool(got == want)


class _ExactAsserts(ast.NodeTransformer):
    """Rewrite `assert a == b` (and chains with ==) into `assert __grader_strict_eq__(a, b)`."""

    def visit_Assert(self, node: ast.Assert) -> ast.Assert:
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            node.test = ast.Call(ast.Name("__grader_strict_eq__", ast.Load()), [test.left, test.comparators[0]], [])
        return ast.fix_missing_locations(node)


def compile_check(source: str):
    """The instructor's check cell, compiled with exact comparisons in its asserts."""
    tree = _ExactAsserts().visit(ast.parse(source))
    return compile(tree, "<check cell>", "exec")


class Snapshot:
    """Every module's attributes, sys.modules and builtins as they were before any learner code ran."""

    def __init__(self):
        self.modules = dict(sys.modules)
        self.attrs = {name: dict(vars(m)) for name, m in self.modules.items()
                      if name.split(".")[0] in GUARDED and hasattr(m, "__dict__")}
        self.classes = {}
        for name in self.attrs:
            for value in list(self.attrs[name].values()):
                if isinstance(value, type) and getattr(value, "__module__", None) == name:
                    self.classes[value] = dict(vars(value))
        self.path, self.meta_path, self.path_hooks = list(sys.path), list(sys.meta_path), list(sys.path_hooks)

    def restore(self) -> list[str]:
        """Put back whatever learner code changed; returns what was changed, for the notes."""
        changed = []
        for name, mod in self.modules.items():
            if sys.modules.get(name) is not mod:
                sys.modules[name] = mod
                changed.append(f"sys.modules[{name!r}]")
        for name in [n for n in sys.modules if n.startswith("grader") and n not in self.modules]:
            del sys.modules[name]
        for name, saved in self.attrs.items():
            live = vars(self.modules[name])
            if live == saved:
                continue
            for key, value in saved.items():
                if live.get(key, _MISSING) is not value:
                    live[key] = value
                    changed.append(f"{name}.{key}")
            for key in [k for k in live if k not in saved]:
                if name == "builtins" or name.startswith("grader"):
                    del live[key]
                    changed.append(f"{name}.{key}")
        for cls, saved in self.classes.items():
            live = vars(cls)
            for key, value in saved.items():
                if live.get(key, _MISSING) is not value:
                    try:
                        setattr(cls, key, value)
                        changed.append(f"{cls.__module__}.{cls.__qualname__}.{key}")
                    except (TypeError, AttributeError):
                        pass
            for key in [k for k in live if k not in saved]:
                try:
                    delattr(cls, key)
                    changed.append(f"{cls.__module__}.{cls.__qualname__}.{key}")
                except (TypeError, AttributeError):
                    pass
        sys.path[:], sys.meta_path[:], sys.path_hooks[:] = self.path, self.meta_path, self.path_hooks
        sys.settrace(None)
        sys.setprofile(None)
        return changed


_MISSING = object()


class _Capture(io.TextIOBase):
    """A text stream that keeps at most OUTPUT_CHARS characters and counts the rest."""

    def __init__(self):
        self.parts, self.size, self.dropped = [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        """Keep what fits, count what does not."""
        text = str(text)
        room = OUTPUT_CHARS - self.size
        self.parts.append(text[:max(room, 0)])
        self.size += min(len(text), max(room, 0))
        self.dropped += max(len(text) - max(room, 0), 0)
        return len(text)

    def text(self) -> str:
        """What was written, with a line saying how much was cut."""
        cut = f"\n[... {self.dropped} more characters of output cut by the grader]" if self.dropped else ""
        return "".join(self.parts) + cut


def _limit_memory(gib: float) -> None:
    """Cap memory (address space), CPU seconds and file size: a memory hog gets MemoryError, not the machine."""
    import resource
    import signal

    nbytes = int(gib * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    resource.setrlimit(resource.RLIMIT_CPU, (3600, 3600))  # the grader's wall-clock limits come first
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024**2, 64 * 1024**2))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big file write fails instead of killing us


def main(argv: list[str]) -> int:
    """Answer the grader's requests, one cell at a time, until it closes stdin."""
    result_fd, gib, modules = int(argv[1]), float(argv[3]), argv[4:]  # --result-fd N --memory-gib G MODULE...
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    results = os.fdopen(os.dup(result_fd), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # learner code reading stdin gets nothing, not the next request
    os.close(result_fd)
    _limit_memory(gib)
    import warnings

    warnings.simplefilter("default")
    for module in modules:  # the lesson's checks, imported clean before any learner code
        __import__(module)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(colors="nocolor")
    shell.showtraceback = lambda *a, **k: None
    shell.user_ns["__grader_strict_eq__"] = strict_eq
    real_stdout, real_stderr = sys.stdout, sys.stderr
    real_exec, real_print_exc = builtins.exec, BaseException
    snapshot = Snapshot()
    results.write(json.dumps({"nonce": "ready"}) + "\n")  # imports done: the grader's cell clocks start now
    results.flush()
    for line in requests:
        request = json.loads(line)
        out, err = _Capture(), _Capture()
        error, notes = None, []
        start = time.perf_counter()
        sys.stdout, sys.stderr = out, err
        try:
            if request["kind"] == "student":
                result = shell.run_cell(request["source"], store_history=False, silent=False)
                error = result.error_before_exec or result.error_in_exec
            else:
                changed = snapshot.restore()
                if changed:
                    notes.append("the grader undid changes your code made to " + ", ".join(sorted(set(changed))[:8]))
                shell.user_ns["__grader_strict_eq__"] = strict_eq
                code = compile_check(request["source"])
                real_exec(code, shell.user_ns)
        except real_print_exc as exc:  # noqa: BLE001  anything the cell raised, SystemExit included
            error = exc
        finally:
            sys.stdout, sys.stderr = real_stdout, real_stderr
        reply = {
            "nonce": request["nonce"],
            "ok": error is None,
            "ename": type(error).__name__ if error is not None else "",
            "evalue": _text(error) if error is not None else "",
            "stdout": out.text(),
            "stderr": err.text(),
            "seconds": time.perf_counter() - start,
            "notes": notes,
        }
        results.write(json.dumps(reply) + "\n")
        results.flush()
    return 0


def _text(error: BaseException) -> str:
    """An exception's message, safe against a learner's exception whose __str__ itself raises."""
    try:
        return str(error)[:OUTPUT_CHARS]
    except Exception:  # noqa: BLE001
        return f"<{type(error).__name__} whose message could not be shown>"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
