"""nbgrader's exchange with the folder permissions a shared machine needs (named in lab-config/class/nbgrader_config.py).

nbgrader's own exchange leaves each submission folder in inbound/ world-writable
(0777, "so the instructor can delete later"): anyone who learns its name can
read or change another student's work. `Submit` closes it to the instructor's
group instead (inbound/ is setgid, so a submission takes the instructor's
group): 2770 for folders, 0640 for files.

nbgrader also insists that the exchange root be exactly 0777 and tries to chmod
it, which fails when root made it 1777 (sticky: nobody can rename or delete
another user's course folder in it). `ReleaseAssignment` accepts any existing
root that everyone can write to and enter.
"""

from __future__ import annotations

import os
import shutil
import stat

from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.submit import ExchangeSubmit

SUBMISSION_DIR = 0o2770  # the student and the instructor's group; nobody else, not even to enter
SUBMISSION_FILE = 0o640


class Submit(ExchangeSubmit):
    """nbgrader submit, leaving the submission readable by the student and the instructor's group only.

    nbgrader copies with copytree, whose copystat takes the setgid bit off the
    new folder, so the files it writes after (timestamp.txt,
    submission_secret.txt) get the student's group, which the instructor is
    not in, and `nbgrader collect` fails on them. The submission is therefore
    copied once more into a folder made fresh in inbound/, where every entry
    takes inbound's group, then closed.
    """

    def copy_files(self):
        super().copy_files()
        dest = os.path.join(self.inbound_path, self.assignment_filename)
        fresh = os.path.join(self.inbound_path, "." + self.assignment_filename)  # `collect` skips hidden names
        _copy_in_group(dest, fresh)
        shutil.rmtree(dest)
        os.rename(fresh, dest)


def _copy_in_group(src: str, dest: str) -> None:
    """Copy a folder's files (contents only: new inodes take the group of a setgid parent), then close them."""
    os.mkdir(dest)
    for name in os.listdir(src):
        here, there = os.path.join(src, name), os.path.join(dest, name)
        if os.path.isdir(here) and not os.path.islink(here):
            _copy_in_group(here, there)
        elif os.path.isfile(here) and not os.path.islink(here):
            shutil.copyfile(here, there)
            os.chmod(there, SUBMISSION_FILE)
    os.chmod(dest, SUBMISSION_DIR)  # the kernel drops the setgid bit for a non-member: the group stays


class ReleaseAssignment(ExchangeReleaseAssignment):
    """nbgrader release_assignment, accepting an exchange root made 1777 by the administrator."""

    def ensure_root(self):
        if os.path.isdir(self.root):
            mode = os.stat(self.root).st_mode
            if mode & (stat.S_IWOTH | stat.S_IXOTH) == stat.S_IWOTH | stat.S_IXOTH:
                return
        super().ensure_root()
