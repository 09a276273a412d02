"""An nbgrader preprocessor for feedback: students see what failed and why, never the hidden tests.

nbgrader's own feedback shows each graded cell as it ran, hidden tests and
their tracebacks included. This removes the hidden region from every source
and reduces each error to its message (the check's words), so the feedback
page says what the mistake was without printing the instructor's test code.
"""

from __future__ import annotations

import re

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

_HIDDEN = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", re.S)


class HideHiddenTests(Preprocessor):
    """Strip hidden tests from sources and tracebacks from error outputs."""

    enabled = Bool(True, help="nbconvert runs a preprocessor only when it is enabled").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            if "BEGIN HIDDEN TESTS" in cell.source:
                cell.source = _HIDDEN.sub("# (hidden tests ran here)\n", cell.source)
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename')}: {out.get('evalue')}"]
        return cell, resources
