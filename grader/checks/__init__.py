"""Checks the notebooks call after each exercise: one module per lesson.

A check takes the learner's function, tries it on cases and on known mistakes,
and raises AssertionError with a message that names the mistake. It prints a
one-line confirmation on success and never writes to stderr. The hidden tests'
answers live only in the instructor notebooks; a keyed check (_keys.py) holds
digests of its visible answers, its judge in solutions/judges/. The checks not
yet keyed still compute their answers here (README, "Writing a lesson").
"""
