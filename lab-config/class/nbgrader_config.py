"""nbgrader settings for everyone in a class on one machine (students and instructor).

Install it where every user's nbgrader reads it: /etc/jupyter/nbgrader_config.py
(README, "Running a class"), or point JUPYTER_CONFIG_PATH at this folder.
"""

c = get_config()  # noqa: F821  (nbgrader injects get_config)

c.CourseDirectory.course_id = "why-slow-will-it-fit"
# The exchange: made once by root with `install -d -m 1777 /srv/nbgrader/exchange`.
c.Exchange.root = "/srv/nbgrader/exchange"
# Submissions readable by the student and the instructor's group only (nbgrader's own are 0777).
c.ExchangeFactory.submit = "grader.pipeline.exchange.Submit"
c.ExchangeFactory.release_assignment = "grader.pipeline.exchange.ReleaseAssignment"
# Collect as the instructor: the student from the folder's owner, never through a symlink, dated by the exchange
# (the inode's ctime, which no student can set back), every submission kept (grader/pipeline/exchange.py).
c.ExchangeFactory.collect = "grader.pipeline.exchange.Collect"
c.ExchangeFactory.release_feedback = "grader.pipeline.exchange.ReleaseFeedback"

# Deadlines (grader/pipeline/deadlines.py; README, "Running a class"). A lesson's due date, in UTC: nbgrader's own
# (`nbgrader db assignment add 03_float_formats --duedate="2026-12-01 17:00:00 UTC"` in the instructor's clone),
# else this: c.Deadlines.duedates = {"03_float_formats": "2026-12-01 17:00:00 UTC"}
# Which submission counts: the last one made by the due date, else the last one (False: always the last one).
c.ExchangeCollect.before_duedate = True
# The late penalty (nbgrader's LateSubmissionPlugin): "none" (nbgrader's default), "zero" (the whole score), or
# "per_day" (per_day x the score for each started day late, at most the score).
c.AssignLatePenalties.plugin_class = "grader.pipeline.deadlines.LatePenalty"
c.LatePenalty.penalty_method = "none"
c.LatePenalty.per_day = 0.1
