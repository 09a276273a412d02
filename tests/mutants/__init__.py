"""Known-wrong versions of each exercise (mutants): the mistakes learners really make.

One module per lesson, named lessonNN.py, with LESSON (the lesson id) and MUTANTS:
{check cell grade_id: [(mutant name, source that redefines the exercise, regex the
check's message must match)]}. tests/test_mutants.py runs every check on every
mutant, on the reference solution and on the blank stub.
"""
