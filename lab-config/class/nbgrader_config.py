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
