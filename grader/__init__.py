"""Helpers, checks and the grading pipeline for "Why is it slow? Will it fit?".

Nothing runs on import: import the module you need, e.g. ``from grader import device``.
"""

__version__ = "0.1.0"
