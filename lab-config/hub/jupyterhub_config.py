"""JupyterHub for a class on one machine: students and instructors log in with their Unix accounts.

Run as root, from the folder that keeps the hub's state (its database and
cookie secret), with the course venv (README, "Running a class"):

    cd /srv/jupyterhub && /opt/gpu-course/.venv/bin/jupyterhub -f /opt/gpu-course/lab-config/hub/jupyterhub_config.py

Each user's JupyterLab is started as that user (JupyterHub's local process
spawner), with JUPYTER_CONFIG_PATH set to

- lab-config/hub/student + lab-config/class for students: nbgrader's Assignments
  panel (fetch, validate, submit, fetch feedback) on; the formgrader, Create
  Assignment and the course list off, and /formgrader not served; idle kernels
  culled after 30 minutes;
- lab-config/hub/instructor + lab-config/class for members of the Unix group
  named by GPU_COURSE_INSTRUCTORS (default gpu-course-instructors): all of nbgrader's UI,
  the formgrader on the gradebook the course's autograde wrote
  (~/gpu-course/grades/course, or GPU_COURSE_GRADES; lab-config/hub/instructor/nbgrader_config.py).

Every server gets PATH = the course venv's bin, then /usr/local/bin:/usr/bin:/bin,
so `nbgrader` works in a JupyterLab terminal and from a notebook.

lab-config/class/nbgrader_config.py names the course and its exchange for
both; GPU_COURSE_CLASS_CONFIG names another folder holding one.
"""

import grp
import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (JupyterHub injects get_config)

HERE = Path(__file__).resolve().parent
CLASS = Path(os.environ.get("GPU_COURSE_CLASS_CONFIG", HERE.parent / "class"))
INSTRUCTORS = os.environ.get("GPU_COURSE_INSTRUCTORS", "gpu-course-instructors")

c.JupyterHub.authenticator_class = "pam"  # Unix accounts and passwords
c.Authenticator.allow_all = True  # anyone with a Unix account here; narrow it with c.Authenticator.allowed_users
c.Spawner.cmd = [str(Path(sys.executable).parent / "jupyterhub-singleuser")]  # from the course venv
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"


def instructors() -> set[str]:
    """Login names in the instructors' Unix group (none when the group does not exist)."""
    try:
        return set(grp.getgrnam(INSTRUCTORS).gr_mem)
    except KeyError:
        return set()


VENV_BIN = str(Path(sys.executable).parent)
# What a terminal, a kernel's `!nbgrader ...` and nbgrader itself (it runs `alembic`) find: the course venv first,
# then the system's; never the PATH of the root shell that started the hub (JupyterHub passes it on otherwise).
USER_PATH = os.pathsep.join([VENV_BIN, "/usr/local/bin", "/usr/bin", "/bin"])


def choose_config(spawner):
    """Start each user's server with the student or the instructor configuration, and the course venv on PATH."""
    role = "instructor" if spawner.user.name in instructors() else "student"
    spawner.environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(HERE / role), str(CLASS)])
    spawner.environment["PATH"] = USER_PATH


c.Spawner.pre_spawn_hook = choose_config
