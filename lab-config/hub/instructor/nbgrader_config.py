"""The instructor's formgrader on the hub: the gradebook `python -m grader autograde` wrote, not an empty one.

The hub starts an instructor's server in their home folder, where nbgrader
finds no course. This file (read through JUPYTER_CONFIG_PATH) loads the
nbgrader_config.py that the course's autograde writes beside its gradebook,
~/gpu-course/grades/course/ by default (README, "Running a class": the
instructor's clone and `--out grades`); GPU_COURSE_GRADES names another
folder. Until that folder exists the formgrader shows no lessons.
"""

import os

c = get_config()  # noqa: F821  (nbgrader injects get_config)

_course = os.path.expanduser(os.environ.get("GPU_COURSE_GRADES", "~/gpu-course/grades/course"))
if os.path.isfile(os.path.join(_course, "nbgrader_config.py")):
    load_subconfig(os.path.join(_course, "nbgrader_config.py"))  # noqa: F821  (traitlets injects load_subconfig)
