"""nbgrader settings: solutions/ is the instructor source, notebooks/ the student release."""

c = get_config()  # noqa: F821  (nbgrader injects get_config)

c.CourseDirectory.course_id = "why-slow-will-it-fit"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "course/submitted"
c.CourseDirectory.autograded_directory = "course/autograded"
c.CourseDirectory.feedback_directory = "course/feedback"
c.CourseDirectory.db_url = "sqlite:///course/gradebook.db"

# Student code must not hang the grader: a cell gets this many seconds.
c.ExecutePreprocessor.timeout = 300
# formgrader's Autograde button (plain `nbgrader autograde`) without the widget-cell stall (nbclient#312)
from grader.pipeline.grades import AUTOGRADE_PREPROCESSORS  # noqa: E402

c.Autograde.autograde_preprocessors = AUTOGRADE_PREPROCESSORS
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# nbgrader's own course folder (gradebook, collected submissions) is gitignored:
# make it here, so `nbgrader collect` works on a fresh clone.
import os  # noqa: E402

try:
    os.makedirs(os.path.join(os.path.dirname(os.path.abspath(__file__)), "course"), exist_ok=True)
except OSError:  # a checkout this user cannot write to (a shared, read-only one): nothing to collect into here
    pass
