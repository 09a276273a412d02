"""Course code that computes an exercise's answer, marked so a check can notice a learner's code calling it.

Some of the course's own functions must compute what an exercise asks for (a
timer the lesson uses elsewhere, the model a check compares with). Each is
wrapped with `course_only(name)`: a call from code outside the `grader`
package (a learner's function or cell) is counted under `name`. A check
resets the count (`reset`) before it runs the learner's code and reads it
after (`used`), or reads what was called since the kernel started, and fails
with a message saying which function was called.  It is a deterrent, not a
wall: copying the function's source defeats it, and costs about as much as
the exercise.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_USED: dict[str, int] = {}


def course_only(name: str) -> Callable:
    """Decorator: count calls of the function from outside the grader package under `name`."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def counted(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename  # "<string>", a cell's file: outside, whatever the cwd
            if not (os.path.isabs(caller) and caller.startswith(_PACKAGE + os.sep)):
                _USED[name] = _USED.get(name, 0) + 1
            return fn(*args, **kwargs)

        counted.course_only = name
        return counted

    return wrap


def reset(*names: str) -> None:
    """Forget the calls counted under `names` (all names when none is given)."""
    for name in names or list(_USED):
        _USED.pop(name, None)


def used(*names: str) -> list[str]:
    """The names among `names` (all when none is given) that code outside the package has called, sorted."""
    return sorted(n for n in _USED if not names or n in names)
