"""The course's own code called from a learner's: one module that notices it, for every lesson's checks.

Some of the course's functions must compute what an exercise asks for (a
timer the lesson uses elsewhere, the model a check compares with, an answer
key). A check notices a learner's code that calls one and fails with one
message (`message`) naming it. It is a deterrent, as COURSE.md says, not a
wall: copying the function's source defeats it, and costs about as much as
the exercise.

Two ways to ask, one registry of names:

- `guard(check, name, {function or class: its name})`: the check, failing
  first when the learner's code it runs calls one of them (directly or through
  other code; every method of a class counts). Most checks use this.
- `course_only(name)` marks a course function whose calls from outside the
  `grader` package are counted since the kernel started (`used`, `reset`):
  for an answer a learner could compute in a cell of its own before the check
  runs (a quiz's answer key), where no learner function is there to watch.
  `guard` sees a marked function too (by the function it wraps).
- A prediction (grader.checks._common.Prediction) marks the model it is
  scored against this way (`watch=`, with its own band, feedback and reveal):
  one of them called from a cell before the first guess is recorded makes
  that guess count as asked-for (a reveal), as COURSE.md's protocol says of
  an answer asked for on purpose.
"""

from __future__ import annotations

import _thread
import functools
import multiprocessing.process
import os
import subprocess
import sys
import threading
from typing import Any, Callable

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = _PACKAGE  # the course package's folder
_TRANSPARENT: set = set()  # code objects of course helpers that only call what they are given (_common.call, record)
_USED: dict[str, int] = {}
_EVER: set[str] = set()  # every label called from outside since the kernel started (no reset clears it)
_ON_CALL: dict[str, list[Callable[[str], None]]] = {}  # label -> what to do when code outside the package calls it
_INNER: dict[Callable, Callable] = {}  # a course_only wrapper -> the function it counts calls of


def module_code(frame: Any, roots: tuple[str, ...]) -> bool:
    """True when `frame` runs the code of a module imported from under one of `roots` (folders): the code's file is
    that module's own file. A file name alone is not enough: a copy test compiled its own code under the course's
    file name, and under a name with "site-packages" in it, to pass for the course's code or a library's."""
    filename = frame.f_code.co_filename
    if not (os.path.isabs(filename) and filename.startswith(tuple(r.rstrip(os.sep) + os.sep for r in roots))):
        return False
    module = sys.modules.get(frame.f_globals.get("__name__", ""))
    path = getattr(module, "__file__", None)
    return path is not None and os.path.abspath(path) == os.path.abspath(filename)


def course_only(name: str | None = None) -> Callable:
    """Decorator: count calls of the function from outside the grader package under `name` (default: its
    module and name, e.g. grader.checks.lesson07._ring).

    The wrapper carries no `__wrapped__` (functools.wraps would add one, and calling that skips the count)."""

    def wrap(fn: Callable) -> Callable:
        label = name or f"{fn.__module__}.{fn.__qualname__}"

        def counted(*args, **kwargs):
            if not _asked_by_a_check(sys._getframe(1), counted):  # a cell, or course code a cell drove
                _USED[label] = _USED.get(label, 0) + 1
                _EVER.add(label)
                for then in _ON_CALL.get(label, ()):
                    then(label)
            return fn(*args, **kwargs)

        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(counted, attr, getattr(fn, attr, None))
        counted.course_only = label
        _INNER[counted] = fn
        _WRAPPERS.add(counted.__code__)  # one code object for every wrapper
        return counted

    return wrap


_WRAPPERS: set = set()  # the code of course_only's wrapper: a course_only call inside another is that one's to count
_ENTRIES: dict = {}  # code objects of the checks' entry points -> the local naming the check they run
_CHECKS: set[int] = set()  # ids of entry objects found to be a course check (module-level, so never freed)


def entries(*methods: Callable, check: str = "self") -> None:
    """Mark the functions a check is entered by (Check.__call__, the class grader's judge_here), whose local `check`
    names the check they run: course code reached from one of them, with no code but the package's in between, is
    the course asking, not the learner."""
    _ENTRIES.update({m.__code__: check for m in methods})


_ANY_FUNCTION: set[int] = set()  # ids of course checks that run whatever function they are handed (expect)


def runs_what_it_is_handed(*checks: Any) -> None:
    """Mark checks that call any function given them (the hidden tests' expect): a model handed to one from a cell is
    the cell asking (a copy test used lesson09.expect as a silent oracle on a prediction's band)."""
    _ANY_FUNCTION.update(id(c) for c in checks)


def _a_course_check(obj: Any) -> bool:
    """True when `obj` is one of the course's own checks: an attribute of a module of grader.checks (a Prediction a
    learner builds around a course band would otherwise score guesses unrecorded)."""
    if id(obj) in _ANY_FUNCTION:
        return False
    if id(obj) in _CHECKS:
        return True
    for name, module in list(sys.modules.items()):
        if (name == "grader.checks" or name.startswith("grader.checks.")) and module is not None \
                and any(v is obj for v in vars(module).values()):
            _CHECKS.add(id(obj))
            return True
    return False


def _being_imported(frame: Any) -> bool:
    """Whether `frame`, the top level of a course module, runs because that module is being imported (its spec is
    initializing). A file name is not enough: a copy test compiled its call of a model under importlib's name."""
    module = sys.modules.get(frame.f_globals.get("__name__", ""))
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _asked_by_a_check(frame: Any, wrapper: Callable) -> bool:
    """Whether the course_only `wrapper`, called from `frame`, is the course asking: every frame between it and a
    course check's entry is the package's own code (or the import of a course module). A cell calling it, directly or
    through any course helper that calls what it is handed (serving.quiet, a check's judge with a made-up record,
    Prediction._score), is not: a copy test read models' answers through each of those."""
    while frame is not None:
        code = frame.f_code
        if code in _TRANSPARENT:  # call() or record(): whoever handed them the function decides, if it is this one
            handed = frame.f_locals.get("fn")
            if handed is not wrapper:
                return False  # code a caller handed over (a learner's function, quiet(model)) called it
        elif code in _ENTRIES:
            return _a_course_check(frame.f_locals.get(_ENTRIES[code]))
        elif code in _WRAPPERS:
            return True  # inside another course_only function (lesson 02's probe_rows enters a SyncCounter): the
            # outer call was counted, under its own name, if a cell made it
        elif not module_code(frame, (_PACKAGE,)):
            return False
        elif code.co_name == "<module>" and _being_imported(frame):
            return True  # a course module computing a table as it is imported
        frame = frame.f_back
    return False


def transparent(*helpers: Callable) -> None:
    """Mark course helpers that only call what they are handed (grader.checks._common.call, record): a course_only
    function called through one counts as called by whoever handed it over (a copy test laundered a model's call
    through _common.call)."""
    _TRANSPARENT.update(h.__code__ for h in helpers)


def on_call(label: str, then: Callable[[str], None]) -> None:
    """Run `then(label)` whenever code outside the package calls the course_only function `label` (a prediction records
    a reveal this way, in its record on disk, which no count reset undoes)."""
    _ON_CALL.setdefault(label, []).append(then)


_PASSED: list[list] = []  # each guard's record of its check having passed in this kernel (guard(earlier=...))


def reset(*names: str) -> None:
    """Forget the calls counted under `names` (all names when none is given). What a guard's `earlier=` reads, and a
    prediction's reveal (stamped in its record), stay: a copy test called an instrument, then reset, then checked."""
    for name in names or list(_USED):
        _USED.pop(name, None)


def _fresh_kernel() -> None:
    """Forget everything this process has counted, as a new kernel starts: for the course's tests and key builder,
    which run many kernels' worth of cells in one process (a learner's cell calling it tampers with the record)."""
    _USED.clear()
    _EVER.clear()
    for passed in _PASSED:
        passed.clear()


def used(*names: str) -> list[str]:
    """The names among `names` (all when none is given) that code outside the package has called, sorted."""
    return sorted(n for n in _USED if not names or n in names)


def message(name: str, called: str) -> str:
    """What a check says when the learner's `name` calls the course's `called`."""
    if called.endswith(_UNWATCHED):
        return (f"your {name} calls {called.removesuffix(_UNWATCHED).strip()}, which turns off the check's watch of "
                f"what your code calls: the check cannot vouch for what it does then. Write {name} without it.")
    if called.startswith(("grader.", "the course's")):
        return (f"your {name} calls {called}, the course's own code: write {name} yourself, from the principle the "
                "text gives.")
    return (f"your {name} calls {called}, which does the exercise for you: write {name} yourself, from the "
            "principle the text gives.")


# --- watching a learner's code while a check runs it -------------------------------------------------


def _marks(target: Any) -> tuple[list, list]:
    """What identifies a call of `target`: (code objects of Python functions, C functions by identity). A course_only
    function is watched by the function it wraps; a class, by every function it defines; a C function (a torch op,
    a builtin), by itself, as the profiler reports it in a "c_call" event."""
    found = vars(target).values() if isinstance(target, type) else [target]
    codes, builtins = [], []
    for f in found:
        f = getattr(f, "__func__", f)
        f = _INNER.get(f, f) if getattr(f, "course_only", None) else f
        code = getattr(f, "__code__", None)
        if code is not None:
            codes.append(code)
        elif callable(f) and not isinstance(target, type):
            builtins.append(f)
    return codes, builtins


_ACTIVE: list["watching"] = []  # the watchings in force, innermost last


class watching:  # noqa: N801  used as `with watching(targets) as hits:`
    """While active, notes (in order, once each) which of `targets` ({function, class or C function: name}) are
    called. Watchings nest: each hands every event on to the profile function in force before it."""

    def __init__(self, targets: dict):
        self.labels, self.builtins = {}, {}
        for target, label in {**_UNWATCHING, **targets}.items():
            codes, builtins = _marks(target)
            self.labels.update({code: label for code in codes})
            self.builtins.update({id(f): (f, label) for f in builtins})  # the object kept: its id stays its own
        self.hits: list[str] = []
        self.compiled = _compiled_entries()

    def _profile(self, frame, event, arg):
        label = None
        if event == "call":
            label = self.labels.get(frame.f_code)
            if label is not None and frame.f_back is not None and frame.f_back.f_code in _OWN:
                label = None  # a watching starting or ending (threading.setprofile)
            if label is None and frame.f_code in self.compiled:
                label = _compiled_call(frame, self.compiled[frame.f_code])
        elif event == "c_call" and self.builtins and frame.f_code not in _OWN:
            for _ in range(8):  # a functools.partial of a C function is reported as the partial: look inside it
                found = self.builtins.get(id(arg))
                label = found[1] if found is not None and found[0] is arg else None
                if label is not None or not isinstance(arg, functools.partial):
                    break
                arg = arg.func
        if label is not None and label not in self.hits:
            self.hits.append(label)
        if self.before is not None:
            self.before(frame, event, arg)

    def __enter__(self) -> list[str]:
        self.before = sys.getprofile()
        self.before_threads = threading.getprofile()
        self.installed = self._profile  # one bound method, to compare by identity at the end
        sys.setprofile(self.installed)
        threading.setprofile(self.installed)  # a thread the learner's code starts is watched too (a copy test hid in one)
        self.by_course = module_code(sys._getframe(1), (_PACKAGE,))  # a check's watch, not one a cell opened
        _ACTIVE.append(self)
        return self.hits

    def __exit__(self, *exc) -> bool:
        label = _UNWATCHING[sys.setprofile]
        if sys.getprofile() is not self.installed and label not in self.hits:
            self.hits.append(label)  # switched off in a way no event showed (copy test r5: map(sys.setprofile, [None]))
        sys.setprofile(self.before)
        threading.setprofile(self.before_threads)
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
        return False


def checking() -> bool:
    """Whether a course check's watch is in force (guard's observe): one a cell opened itself does not count (copy test
    r16 wrapped a read of grader.floats in `watching({})` to keep it from being recorded)."""
    return any(getattr(w, "by_course", False) for w in _ACTIVE)


_OWN = {watching.__enter__.__code__, watching.__exit__.__code__}  # where the watch itself sets the profile function
_UNWATCHED = "(it turns off the check's watch)"
# Every watching notes a learner's code switching the watch off (a copy test called sys.setprofile(None) in decode)
_UNWATCHING = {sys.setprofile: f"sys.setprofile {_UNWATCHED}", threading.setprofile: f"threading.setprofile {_UNWATCHED}"}
_TORCHSCRIPT = f"TorchScript {_UNWATCHED}"


def _compiled_entries() -> dict:
    """Where a call into TorchScript shows itself to a profile function (copy test r17 scripted one of torch's observers
    and the check saw nothing: compiled code runs in C++, out of any watch's sight). A scripted function's call makes no
    Python frame but one, torch.compiler.is_exporting, called straight from the caller; a scripted module's goes
    through nn.Module._call_impl with the module as `self`. {} until torch is imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    found = {}
    exporting = getattr(getattr(torch, "compiler", None), "is_exporting", None)
    if getattr(exporting, "__code__", None) is not None:
        found[exporting.__code__] = "function"
    call_impl = getattr(torch.nn.Module, "_call_impl", None)
    if getattr(call_impl, "__code__", None) is not None:
        found[call_impl.__code__] = "module"
    return found


def _compiled_call(frame, kind: str) -> str | None:
    """_TORCHSCRIPT when this call event is a call into TorchScript (see _compiled_entries), else None. A scripted
    function counts when the learner's own code calls it (installed libraries ask is_exporting for reasons of theirs)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if kind == "module":
        return _TORCHSCRIPT if isinstance(frame.f_locals.get("self"), torch.jit.ScriptModule) else None
    caller = frame.f_back  # module_code: a file name alone may be forged to pass for a library's
    if caller is None or module_code(caller, (_PACKAGE, sys.prefix, sys.base_prefix)):
        return None
    return _TORCHSCRIPT


# Work started elsewhere, where a check's watch (a profile function, a torch dispatch mode) does not follow it: guards
# of checks that watch what the learner's code computes list these, so a thread or a process of its own is named.
_RAW_START, _RAW_FORK = _thread.start_new_thread, getattr(os, "fork", None)  # no fork on Windows


def _start_new_thread(function, args, kwargs=None):
    """_thread.start_new_thread, in Python: the profiler reports no call of a C function made through a
    functools.partial (a copy test started its thread that way), but it reports this function's frame whoever calls it."""
    return _RAW_START(function, args, {} if kwargs is None else kwargs)


def _fork():
    """os.fork, in Python, for the same reason."""
    return _RAW_FORK()


# Every way in to a new thread or process goes through these from now on (threading binds its own name at import).
_thread.start_new_thread = _thread.start_new = threading._start_new_thread = _start_new_thread

_THREAD = "a thread of its own (the check watches the thread it runs your code in)"
_PROCESS = "a process of its own (the check watches its own process)"
ELSEWHERE = {threading.Thread.start: _THREAD, _start_new_thread: _THREAD, _RAW_START: _THREAD,
             multiprocessing.process.BaseProcess.start: _PROCESS, _fork: _PROCESS, subprocess.Popen.__init__: _PROCESS}
if _RAW_FORK is not None:
    os.fork = _fork
    ELSEWHERE[_RAW_FORK] = _PROCESS


def seen() -> list[str]:
    """What the innermost watching in force has seen called so far ([] when none is): a check can stop early once
    the learner's code has been caught measuring instead of counting."""
    return list(_ACTIVE[-1].hits) if _ACTIVE else []


_EARLIER = " (in an earlier cell)"


def aten_targets(name: str, label: str, namespace: str = "aten") -> dict:
    """{C function: label} for torch.ops.<namespace>.<name> (aten unless said), to add to a guard's targets beside
    torch.<name>: the op's packet and each of its overloads call a C function of their own, which is what the profiler
    reports (copy tests called torch.ops.aten._amp_update_scale_, torch.ops.aten.quantize_per_channel and
    torch.ops.quantized_decomposed.quantize_per_channel). {} when the namespace has no such op."""
    import torch

    try:
        packet = getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return {}
    return {op._op: label for op in [packet] + [getattr(packet, o) for o in packet.overloads()]}


def guard(check, name: str, targets: dict, earlier: tuple[str, ...] = (), record: bool = False):
    """`check`, failing first when the learner's code it runs calls one of `targets` ({function or class: its name}).

    `record`: keep `.passed` (as `earlier` does) for course code that shows what the check's answer is made of only
    once the check has passed in this kernel (lesson 09's batch-1 reveal waits for decode_step_seconds).

    `earlier` names course_only functions whose answer a learner could take in a cell of its own before the check
    runs (a measurement that prints the answer): called from a cell of this kernel before the check first passed,
    they count too. Once the check has passed, the lesson's own later cells may call them freely."""
    from grader.checks._common import Check, fail

    passed: list = []
    _PASSED.append(passed)

    def observe(*learner: Any, **inputs: Any) -> dict:
        with watching(targets) as hits:
            observed = check.observe(*learner, **inputs)
        before = [f"{n}{_EARLIER}" for n in sorted(_EVER & set(earlier))] if earlier and not passed else []
        return {"observed": observed, "shortcuts": list(hits) + before}

    def judge(observation: Any, **kwargs: Any):
        if not isinstance(observation, dict) or not isinstance(observation.get("shortcuts"), list):
            fail(f"the check could not read what your {name} did (not an observation of this check)")
        if observation["shortcuts"]:
            first = str(observation["shortcuts"][0])
            if first.endswith(_EARLIER):
                fail(f"a cell of this kernel called {first.removesuffix(_EARLIER)} before your {name} was checked: "
                     f"that measures the answer. Restart the kernel and write {name} from the principle the text "
                     "gives; the lesson's own cells measure it after your check passes.")
            fail(message(name, first))
        result = check.judge(observation.get("observed"), **kwargs)
        passed.append(True)
        return result

    guarded = Check(check.what, observe, judge, inputs=check.inputs, announce=check.announce)
    guarded.__doc__ = check.__doc__
    guarded.inner = check  # scripts/build_keys.py finds a keyed check under its guard
    if earlier or record:  # a show cell that runs one of `earlier` waits for this (grader.notebook.needs): run before
        guarded.passed = passed  # the check passed, it would have the check refuse an honest answer until a restart
    return guarded
