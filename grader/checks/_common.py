"""Small helpers shared by every lesson's checks."""

from __future__ import annotations

import math
from typing import Any, Callable


def fail(message: str) -> None:
    """Raise the AssertionError a learner sees; the message names their mistake."""
    raise AssertionError(message)


def call(fn: Callable, *args: Any, label: str | None = None, **kwargs: Any) -> Any:
    """Call the learner's `fn`; turn a crash into a message that says which call crashed.

    NotImplementedError (the untouched stub) passes through unchanged.
    """
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise
    except AssertionError:
        raise
    except Exception as exc:  # the learner's code crashed: say where, keep the cause
        shown = label or f"{getattr(fn, '__name__', 'your function')}{args!r}"
        raise AssertionError(f"{shown} raised {type(exc).__name__}: {exc}") from exc


def require_callable(fn: Any, name: str) -> None:
    """Fail clearly when the learner passed something that is not a function."""
    if not callable(fn):
        fail(f"{name} should be a function, but it is {type(fn).__name__}. Did you overwrite it with a value?")


def is_number(value: Any) -> bool:
    """True for real numbers (ints, floats, numpy scalars), False for bools, tensors and the rest."""
    if isinstance(value, bool):
        return False
    try:
        import numbers

        return isinstance(value, numbers.Real)
    except Exception:
        return False


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    """Relative closeness that treats two zeros as equal."""
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0) or (a == 0 and b == 0)


def passed(what: str) -> None:
    """The one line a learner sees when every check of an exercise passed."""
    print(f"✓ {what}: all checks passed")
