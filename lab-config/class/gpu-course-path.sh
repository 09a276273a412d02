# /etc/profile.d/gpu-course.sh: the course's commands (nbgrader, jupyter) for every user's login shell, and so in
# every JupyterLab terminal on the hub too (its shells are login shells, which /etc/profile gives a fresh PATH).
# Appended, not first: `python`, `pip` and the system's tools stay the system's. README, "Running a class".
case ":$PATH:" in
  *:/opt/gpu-course/.venv/bin:*) ;;
  *) PATH="$PATH:/opt/gpu-course/.venv/bin" ;;
esac
export PATH
