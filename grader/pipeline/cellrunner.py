"""The process that runs one submission's code inside the sandbox, as the grader asks, and decides nothing.

    python -I -m grader.pipeline.cellrunner --result-fd N --memory-gib G LESSON_MODULE...
    (or, in a warm runner, `serve` called in a fork of grader.pipeline.zygote)
    (started by grader.pipeline.runner, never by hand)

The grader (outside the sandbox) sends one request per line on stdin:

- {"kind": "student", "source", "nonce"}: run one of the learner's cells
  through IPython (magics work);
- {"kind": "observe", "module", "check", "names", "inputs", "nonce"}: run the
  observing half of one check (grader.checks._common.Check) on the learner's
  objects named `names`, with `inputs` (plain data), and reply with the plain
  observation.

It writes one JSON reply line per request on file descriptor N: {"nonce", "ok",
"ename", "evalue", "stdout", "stderr", "seconds", "observation_bytes", "changed"} ("changed": what a
student cell replaced in builtins or the course's modules, for the summary); when
"observation_bytes" is not 0, the observation follows on a line of its own, as that
many bytes of JSON (at most grader.checks._plain.MAX_BYTES). The grader never parses
that line: it hands it to a judge process of its own (grader.pipeline.judging). No hidden
test and no expected value is ever sent here, and no verdict is made here:
the grader judges each observation in its own process
(grader.pipeline.judging), so whatever the learner's code does to this
process (patched modules, tracers, audit hooks, a forged reply) can change at
most what it reports, never how that is judged.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import sys
import time
import types

OUTPUT_CHARS = 20_000  # per stream per request: a huge output is cut here, and says so


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


def _observe(request: dict, namespace: dict):
    """Run one check's observing half on the learner's objects; its plain observation."""
    from grader.checks import _plain

    from grader.checks._common import Check

    check = getattr(importlib.import_module(request["module"]), request["check"], None)
    if not isinstance(check, Check):
        raise TypeError(f"your code replaced the course's check {request['module']}.{request['check']}, so it could not run")
    missing = [n for n in request["names"] if n not in namespace]
    if missing:
        raise NameError(f"name '{missing[0]}' is not defined: its cell did not run, or it was renamed")
    inputs = _plain.decode(request["inputs"])
    return _plain.encode(check.observe(*[namespace[n] for n in request["names"]], **inputs))


class Changes:
    """What the learner's code replaced in builtins and the course's own modules: named in the grading summary.

    Only for information (the verdicts do not depend on it); torch's and the
    standard library's own lazy patching is not watched, so it is never blamed
    on the learner.
    """

    def __init__(self):
        self.saved = {name: dict(vars(module)) for name, module in list(sys.modules.items())
                      if (name == "builtins" or name == "grader" or name.startswith("grader.")) and hasattr(module, "__dict__")}
        self.told: set[str] = set()

    def new(self) -> list[str]:
        """Names replaced or added since the last call, e.g. 'builtins.abs'."""
        found = []
        for name, saved in self.saved.items():
            live = vars(sys.modules.get(name) or _EMPTY)
            found += [f"{name}.{key}" for key, value in saved.items() if live.get(key, _MISSING) is not value]
            if name != "builtins":  # a submodule imported later is not a change (`from grader import plots`)
                found += [f"{name}.{key}" for key, value in live.items()
                          if key not in saved and not isinstance(value, types.ModuleType)]
        fresh = [n for n in found if n not in self.told]
        self.told.update(fresh)
        return fresh[:20]


class _Empty:
    pass


_EMPTY, _MISSING = _Empty(), object()


def main(argv: list[str]) -> int:
    """Answer the grader's requests, one at a time, until it closes stdin."""
    return serve(int(argv[1]), float(argv[3]), argv[4:])  # --result-fd N --memory-gib G MODULE...


def serve(result_fd: int, gib: float, modules: list[str]) -> int:
    """The cell loop: requests on stdin, replies on `result_fd`; a cold runner's main, and a warm one's after its fork."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    results = os.fdopen(os.dup(result_fd), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # learner code reading stdin gets nothing, not the next request
    os.close(result_fd)
    _limit_memory(gib)
    import warnings

    warnings.simplefilter("default")
    for module in modules:  # the lesson's checks, imported before any learner code (their import is not its time)
        __import__(module)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(colors="nocolor")
    shell.showtraceback = lambda *a, **k: None
    real_stdout, real_stderr = sys.stdout, sys.stderr
    changes = Changes()
    runner_pid = os.getpid()
    results.write(json.dumps({"nonce": "ready"}) + "\n")  # imports done: the grader's cell clocks start now
    results.flush()
    for line in requests:
        request = json.loads(line)
        out, err = _Capture(), _Capture()
        error, observation, observed = None, None, False
        start = time.perf_counter()
        sys.stdout, sys.stderr = out, err
        try:
            if request["kind"] == "student":
                result = shell.run_cell(request["source"], store_history=False, silent=False)
                error = result.error_before_exec or result.error_in_exec
            else:
                observation, observed = _observe(request, shell.user_ns), True
        except BaseException as exc:  # noqa: BLE001  anything the learner's code raised, SystemExit included
            error = exc
        finally:
            sys.stdout, sys.stderr = real_stdout, real_stderr
        if os.getpid() != runner_pid:  # a child the learner's code forked: it must not answer or read requests
            os._exit(0)
        text = None
        if observed and error is None:  # sent after the reply line, as JSON text of the length the reply gives
            try:
                text = json.dumps(observation, ensure_ascii=True, allow_nan=False)
                if len(text) > _plain_bytes():
                    raise ValueError(f"it is {len(text)} bytes of JSON; the grader takes at most {_plain_bytes()}")
            except (TypeError, ValueError, RecursionError) as exc:
                text = None
                error = ValueError(f"the observation could not be sent: {_text(exc)}")
        reply = {
            "nonce": request["nonce"],
            "ok": error is None,
            "ename": type(error).__name__ if error is not None else "",
            "evalue": _text(error) if error is not None else "",
            "stdout": out.text(),
            "stderr": err.text(),
            "seconds": time.perf_counter() - start,
            "observation_bytes": len(text) if text is not None else 0,
            "changed": changes.new() if request["kind"] == "student" else [],
        }
        results.write(json.dumps(reply, ensure_ascii=True) + "\n" + (text + "\n" if reply["observation_bytes"] else ""))
        results.flush()
    return 0


def _plain_bytes() -> int:
    from grader.checks._plain import MAX_BYTES

    return MAX_BYTES


def _text(error: BaseException) -> str:
    """An exception's message, safe against a learner's exception whose __str__ itself raises."""
    try:
        return str(error)[:OUTPUT_CHARS]
    except Exception:  # noqa: BLE001
        return f"<{type(error).__name__} whose message could not be shown>"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
