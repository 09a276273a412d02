"""The instructor's pipeline: release, run, autograde a class, merge shards, report.

Dependencies run one way: grader.cli -> classroom -> runner/scoring/submissions/grades -> tools.
The learner's toolkit and the checks never import from here.
"""
