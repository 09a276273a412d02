"""What a learner sees in a lesson when something is not done or not right: one line, never a traceback into the package.

    with skip_if_not_done():          # a cell that only shows something
        display(table_of(matmul_flops))

`NotDone` and `CheckFailed` render themselves in IPython as one line (IPython
calls `_render_traceback_` instead of printing frames). nbgrader and papermill
still see an error, so an unfinished or wrong exercise scores nothing. A cell
inside `skip_if_not_done()` that reaches an unfinished exercise prints one
line and carries on, so later cells run; a later cell that needs a name only
a skipped cell would have defined is skipped the same way.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap

_PACKAGE = os.path.dirname(os.path.abspath(__file__))

_SKIPPED: list[str] = []  # what skipped cells could not show, for the cells after them
# JupyterLab breaks a long error line anywhere (`word-break: break-all`: "divi / de"); lines this short
# (in characters) fit a 1024-px window's output area, so the message is wrapped at spaces instead.
SHOWN_WIDTH = 72


def _shown(mark: str, message: str) -> list[str]:
    """`mark message` wrapped at word boundaries to SHOWN_WIDTH, continuation lines indented under the text."""
    lines = []
    for k, paragraph in enumerate(str(message).splitlines() or [""]):
        lines += textwrap.wrap(paragraph, SHOWN_WIDTH, initial_indent=f"{mark} " if k == 0 else "  ",
                               subsequent_indent="  ", break_long_words=False, break_on_hyphens=False) or [""]
    return ["\n".join(lines)]


class NotDone(NotImplementedError):
    """An exercise still raises NotImplementedError: its check says so in one line."""

    def __init__(self, name: str):
        super().__init__(f"exercise not done yet: write `{name}` above, then run its cell and this one again")
        self.name = name

    def _render_traceback_(self) -> list[str]:
        return [f"✎ {self}"]


class NotPassed(NotDone):
    """A show cell measures what an exercise answers: it waits for that exercise's check to pass in this kernel."""

    def __init__(self, name: str, said: str | None = None):
        super().__init__(name)
        self.args = (said or f"this cell measures what `{name}` answers: it runs once the check of `{name}` has "
                     "passed in this kernel",)


class CheckFailed(AssertionError):
    """A check found a mistake; the message names it in the learner's terms."""

    def _render_traceback_(self) -> list[str]:
        return _shown("✗", self)


def _needs(exc: BaseException) -> str:
    """The learner's name an unfinished exercise raised from, read from the traceback's innermost learner frame."""
    if isinstance(exc, NotDone):
        return exc.name
    tb, name = exc.__traceback__, ""
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith((_PACKAGE, sys.prefix, sys.base_prefix)):
            name = code.co_name
        tb = tb.tb_next
    return name if name and name != "<module>" else "an exercise above"


def needs(*exercises) -> None:
    """Raise NotDone, so that `skip_if_not_done` skips the cell here, when one of `exercises` is still its stub.

    For a show cell that runs an instrument (a counter, a probe, a widget) before it first calls the learner's
    function: an unfinished exercise must skip the cell before the instrument runs, since running it before a
    prediction's first guess is recorded counts as a reveal. A stub is a function that does nothing but
    nbgrader's `raise NotImplementedError()`: it names nothing else and reads no argument or variable.

    An exercise may also be a check whose instruments measure its answer (a guard with `earlier=`): the cell then
    waits until that check has passed in this kernel (NotPassed). Run before, the instrument would make the check
    refuse even an honest answer, as one taken from the measurement, until the kernel restarts."""
    import dis

    for fn in exercises:
        passed = getattr(fn, "passed", None)
        if isinstance(passed, list):
            if not passed:
                raise NotPassed(str(getattr(fn, "what", "an exercise above")))
            continue
        code = getattr(getattr(fn, "fn", fn), "__code__", None)  # a triton kernel keeps its function in .fn
        if code is None or set(code.co_names) != {"NotImplementedError"}:
            continue
        if {i.opname for i in dis.get_instructions(code)} <= _STUB_OPS:
            raise NotDone(getattr(fn, "__name__", "an exercise above"))


# What `raise NotImplementedError()` compiles to, from Python 3.10 to 3.13: a body with anything else is written.
_STUB_OPS = {"RESUME", "NOP", "CACHE", "EXTENDED_ARG", "LOAD_GLOBAL", "PUSH_NULL", "PRECALL", "CALL", "CALL_FUNCTION",
             "RAISE_VARARGS", "COPY_FREE_VARS", "MAKE_CELL"}


class skip_if_not_done:  # noqa: N801  (used as `with skip_if_not_done():`, like a function)
    """Run a show cell's body; if it reaches an unfinished exercise, print one line instead of failing."""

    def __enter__(self) -> "skip_if_not_done":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None:
            return False
        if isinstance(exc, NotPassed):
            _SKIPPED.append(exc.name)
            print(f"⏭ skipped: {exc}")
            return True
        if issubclass(kind, NotImplementedError):
            name = _needs(exc)
            _SKIPPED.append(name)
            shown = f"`{name}`" if re.fullmatch(r"[A-Za-z_][\w.]*", name) else name
            print(f"⏭ skipped: this cell needs {shown}, which is not done yet")
            return True
        if issubclass(kind, NameError) and _SKIPPED:
            print(f"⏭ skipped: this cell needs what an earlier skipped cell would have made (it needed `{_SKIPPED[-1]}`)")
            return True
        return False
