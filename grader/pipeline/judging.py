"""Judging a check cell in the grader's own process: the sandbox observes, the grader decides.

A course check cell (from solutions/) is a list of calls to checks:

    from grader.checks import lessonNN

    lessonNN.check_area(area)
    ### BEGIN HIDDEN TESTS
    lessonNN.expect(area, args=(3, 4), want=12, why="a 3 by 4 rectangle has area 12")
    ### END HIDDEN TESTS

`plan_cell` reads that source here, never in the sandbox: each call names a
`Check` (grader.checks._common), the learner's objects by name, and keyword
arguments, which are evaluated here. For each call the sandbox is sent only
the check's name, the learner's names and the keywords the check lists as
`inputs` (a hidden test's arguments); it runs the check's observing half
beside the submission and replies with plain data. `judge_cell` decodes that
strictly (grader.checks._plain) and runs the check's judging half here, with
every keyword, `want` and `why` included. So nothing a submission installs can
see an expected answer or change a verdict: the worst it can do is send an
observation of its own making, which is judged like any other.
"""

from __future__ import annotations

import ast
import importlib
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Callable

from grader.checks import _plain
from grader.checks._common import Check, Raised
from grader.notebook import CheckFailed

_HIDDEN_START = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS", re.M)
TEXT_CAP = 4000  # characters of a message or output taken from the sandbox


class CellFormatError(ValueError):
    """A course check cell that is not a list of check calls (a bug in the course, not the student's)."""


@dataclass
class Step:
    """One check call of a check cell."""

    module: str  # grader.checks.lessonNN
    check: str  # the Check's name in that module
    names: list[str]  # the learner's objects, by name in the notebook
    kwargs: dict = field(default_factory=dict)  # evaluated here; only the check's `inputs` are sent
    hidden: bool = False

    def target(self) -> Check:
        """The Check object, from the grader's own import of the course's checks."""
        found = getattr(importlib.import_module(self.module), self.check, None)
        if not isinstance(found, Check):
            raise CellFormatError(f"{self.module}.{self.check} is not a check")
        return found


def plan_cell(source: str) -> list[Step]:
    """The check calls in a course check cell, in order; CellFormatError if it holds anything else."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise CellFormatError(f"the check cell does not parse: {exc}") from None
    hidden_from = _HIDDEN_START.search(source)
    hidden_line = source[:hidden_from.start()].count("\n") + 1 if hidden_from else None
    aliases: dict[str, str] = {}
    steps: list[Step] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "grader.checks" and node.level == 0:
            aliases.update({a.asname or a.name: f"grader.checks.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import) and all(a.name.startswith("grader.checks.") and a.asname for a in node.names):
            aliases.update({a.asname: a.name for a in node.names})
        elif isinstance(node, ast.Import) and all(a.name in ("torch", "math", "statistics") for a in node.names):
            continue
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute) and isinstance(node.value.func.value, ast.Name)
              and node.value.func.value.id in aliases):
            callee = node.value
            if not all(isinstance(a, ast.Name) for a in callee.args) or any(k.arg is None for k in callee.keywords):
                raise CellFormatError(f"line {node.lineno}: pass the learner's objects by name and the rest as keywords")
            module = importlib.import_module(aliases[callee.func.value.id])
            scope = {"torch": importlib.import_module("torch"), "math": math, "statistics": statistics,
                     **{alias: importlib.import_module(name) for alias, name in aliases.items()}}
            kwargs = {k.arg: eval(compile(ast.Expression(k.value), "<check cell>", "eval"), scope)  # noqa: S307  the course's own source
                      for k in callee.keywords}
            step = Step(module.__name__, callee.func.attr, [a.id for a in callee.args], kwargs,
                        hidden=hidden_line is not None and node.lineno >= hidden_line)
            step.target()
            steps.append(step)
        else:
            raise CellFormatError(f"line {node.lineno}: a check cell may only import checks and call them")
    if not steps:
        raise CellFormatError("the check cell calls no check")
    return steps


Ask = Callable[[dict], tuple[str, "dict | None"]]


def _text(value, cap: int = TEXT_CAP) -> str:
    """A string from the sandbox's reply, whatever it sent, cut to `cap` characters."""
    return value[:cap] if isinstance(value, str) else ""


def judge_cell(source: str, ask: Ask) -> tuple[str, dict]:
    """Run a check cell: observations from the sandbox through `ask`, verdicts here.

    Returns (state, reply) as the runner does for any cell: state 'ok' with a
    reply whose 'ok' says whether every check passed, or 'timeout'/'died' when
    the sandbox did not answer an observation.
    """
    out, err, notes = [], [], []
    for step in plan_cell(source):
        check = step.target()
        request = {"kind": "observe", "module": step.module, "check": step.check, "names": step.names,
                   "inputs": _plain.encode(check.observed(step.kwargs))}
        state, reply = ask(request)
        if state != "ok":
            return state, None
        if not step.hidden:
            out.append(_text(reply.get("stdout")))
            err.append(_text(reply.get("stderr")))
        failure = _verdict(check, step, reply)
        if failure is not None:
            ename, evalue = failure
            return "ok", {"ok": False, "ename": ename, "evalue": evalue, "stdout": "".join(out),
                          "stderr": "".join(err), "notes": notes}
        if check.announce:
            out.append(f"✓ {check.what}: all checks passed\n")
    return "ok", {"ok": True, "ename": "", "evalue": "", "stdout": "".join(out), "stderr": "".join(err), "notes": notes}


def _verdict(check: Check, step: Step, reply: dict) -> tuple[str, str] | None:
    """None when the check passes on what the sandbox observed, else (error name, message)."""
    if reply.get("ok") is not True:
        ename = _text(reply.get("ename"), 100) or "Error"
        evalue = _text(reply.get("evalue"))
        if ename in ("NotDone", "NotImplementedError"):
            return "NotImplementedError", evalue or "not done yet"
        if ename in ("CheckFailed", "AssertionError"):
            return "CheckFailed", evalue
        return ename, f"running your code for the check raised {ename}: {evalue}"
    try:
        observation = _plain.decode(reply.get("observation"))
    except (_plain.PlainError, RecursionError, TypeError, ValueError) as exc:
        return "CheckFailed", f"the check could not read what your code returned: {exc}"
    try:
        check.judge(observation, **step.kwargs)
    except (CheckFailed, Raised) as exc:
        return "CheckFailed", str(exc)
    except Exception as exc:  # noqa: BLE001  an observation of an unexpected shape: the submission's, not the course's
        return "CheckFailed", f"the check could not read what your code returned ({type(exc).__name__}: {exc})"
    return None
