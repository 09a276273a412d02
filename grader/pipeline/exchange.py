"""nbgrader's exchange the way a shared machine needs it (named in lab-config/class/nbgrader_config.py).

Submit: nbgrader's own exchange leaves each submission folder in inbound/
world-writable (0777, "so the instructor can delete later"): anyone who learns
its name can read or change another student's work. `Submit` closes it to the
instructor's group instead (inbound/ is setgid, so a submission takes the
instructor's group): 2770 for folders, 0640 for files.

ReleaseAssignment: nbgrader insists that the exchange root be exactly 0777 and
tries to chmod it, which fails when root made it 1777 (sticky: nobody can
rename or delete another user's course folder in it). `ReleaseAssignment`
accepts any existing root that everyone can write to and enter.

Collect (run as the instructor): nbgrader's own takes the student and the time
from the folder's name in inbound/, which every student can write, follows
symlinks with the instructor's rights, and stops at the first name or entry it
cannot handle. `Collect` instead:

- takes the student from the folder's owner (the kernel's record: only root
  can give a file away), and skips, with the reason, a folder whose name
  claims another student;
- copies only regular files and folders the student owns, each opened without
  following a symlink (O_NOFOLLOW, checked again by fstat after opening), at
  most MAX_FILE_BYTES each, MAX_SUBMISSION_BYTES, MAX_ENTRIES entries and
  MAX_DEPTH levels per submission; anything else is left out with the reason;
- dates a submission by the latest ctime of its folder and entries as the
  instructor sees them (grader/pipeline/deadlines.py, `exchange_time`: the
  kernel sets it at every change and a student cannot set it back), never by
  the name or the student's timestamp.txt, and writes that time as the
  collected submission's timestamp.txt (nbgrader's file, which autograde reads);
- keeps every submission, each once, in course/collected/<student>/<lesson>/,
  and puts the one that counts (deadlines.counted: the last on time under
  nbgrader's `before_duedate`, else the last) in
  course/submitted/<student>/<lesson>/ with `collected.json`, the record of all
  of them the feedback names;
- goes on after any bad entry, and ends with a summary of what it skipped, why,
  and what it collected (also in course/collected/summary-<lesson>.txt).

ReleaseFeedback (run as the instructor): a student's feedback is written to
the exchange under nbgrader's name for it (md5 of that submission's secret and
the notebook's name, which only the student and the instructor know) in a
folder nobody but the instructor can list, readable (0644) so that the student,
who is not in the instructor's group, can fetch it; the page and the secret are
read without following a symlink, and two students whose submissions carry the
same secret get neither's feedback released (one would overwrite the other).
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import stat
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.exchange.default.submit import ExchangeSubmit

from grader.pipeline import deadlines
from grader.pipeline.submissions import MAX_NOTEBOOK_BYTES, shown

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


MAX_FILE_BYTES = MAX_NOTEBOOK_BYTES  # one file of a submission (the grader reads no bigger notebook)
MAX_SUBMISSION_BYTES = 64 * 1024**2  # all files of one submission
MAX_ENTRIES = 256  # files, folders and anything else in one submission
MAX_DEPTH = 8  # folders inside folders
MAX_SUBMISSIONS = 50  # one student's submissions of one lesson taken in one collect (the latest by ctime)
MAX_PAGE_BYTES = 64 * 1024**2  # a feedback page release_feedback copies
RECORD = "collected.json"  # beside the counted submission: what collect found (deadlines.submission_facts reads it)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _name(name: str) -> str:
    """A name a student chose, as a summary line shows it: quoted, escaped (no line breaks), cut short."""
    return repr(shown(name))[:160]


class _Copy:
    """One submission copied from inbound/ by file descriptor: regular files and folders of its owner only, bounded."""

    def __init__(self, uid: int):
        self.uid, self.entries, self.bytes, self.ctime_ns = uid, 0, 0, 0
        self.skipped: list[str] = []

    def skip(self, path: str, why: str) -> None:
        self.skipped.append(f"{_name(path)}: {why}, not collected")

    def tree(self, fd: int, dest: str, where: str = "", depth: int = 0) -> None:
        os.mkdir(dest, 0o750)
        for name in sorted(os.listdir(fd)):
            path = f"{where}/{name}" if where else name
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                self.skip(path, f"over {MAX_ENTRIES} entries in one submission: this and the rest")
                break
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                self.skip(path, f"unreadable ({exc.strerror})")
                continue
            self.ctime_ns = max(self.ctime_ns, info.st_ctime_ns)
            if stat.S_ISLNK(info.st_mode):
                self.skip(path, "a symlink, not followed")
            elif info.st_uid != self.uid:
                self.skip(path, "owned by another user")
            elif stat.S_ISDIR(info.st_mode):
                if depth + 1 >= MAX_DEPTH:
                    self.skip(path, f"a folder more than {MAX_DEPTH} deep")
                    continue
                try:
                    sub = os.open(name, _DIR, dir_fd=fd)
                except OSError as exc:
                    self.skip(path, f"a folder that changed while collected ({exc.strerror})")
                    continue
                try:
                    if os.fstat(sub).st_uid == self.uid:
                        self.tree(sub, os.path.join(dest, name), path, depth + 1)
                    else:
                        self.skip(path, "owned by another user")
                finally:
                    os.close(sub)
            elif stat.S_ISREG(info.st_mode):
                self.file(fd, name, os.path.join(dest, name), path)
            else:
                self.skip(path, "not a regular file or folder (a FIFO, socket or device)")
        self.ctime_ns = max(self.ctime_ns, os.fstat(fd).st_ctime_ns)  # after listing: a later change is seen

    def file(self, fd: int, name: str, dest: str, path: str) -> None:
        try:
            src = os.open(name, _FILE, dir_fd=fd)
        except OSError as exc:
            return self.skip(path, f"unreadable ({exc.strerror})")
        try:
            info = os.fstat(src)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != self.uid:
                return self.skip(path, "changed while collected")
            if info.st_size > MAX_FILE_BYTES:
                return self.skip(path, f"{info.st_size} bytes, over the limit of {MAX_FILE_BYTES} per file")
            if self.bytes + info.st_size > MAX_SUBMISSION_BYTES:
                return self.skip(path, f"over the limit of {MAX_SUBMISSION_BYTES} bytes per submission")
            chunks, size = [], 0
            while size <= MAX_FILE_BYTES:
                chunk = os.read(src, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_FILE_BYTES or self.bytes + size > MAX_SUBMISSION_BYTES:
                return self.skip(path, "grew over the limit while collected")
            self.bytes += size
            out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
            with os.fdopen(out, "wb") as f:
                f.write(b"".join(chunks))
            self.ctime_ns = max(self.ctime_ns, os.fstat(src).st_ctime_ns)  # after reading: a write during it counts
        finally:
            os.close(src)


def _archive_one(inbound_fd: int, name: str, uid: int, folder: Path) -> str | None:
    """Copy one inbound submission into folder/<time>-<inode>/ (once: never over an earlier copy); why not, or None."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(name, _DIR, dir_fd=inbound_fd)
    except OSError as exc:
        return f"{_name(name)}: skipped: it changed while collected ({exc.strerror})"
    tmp = folder / f".collect-{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        info = os.fstat(fd)
        if info.st_uid != uid:
            return f"{_name(name)}: skipped: it changed owner while collected"
        copy = _Copy(uid)
        copy.tree(fd, str(tmp))
    finally:
        os.close(fd)
    when = deadlines.exchange_time(max(copy.ctime_ns, info.st_ctime_ns))
    final = folder / f"{when:%Y%m%dT%H%M%S.%fZ}-{info.st_ino}"
    if final.exists():  # collected before and not changed since (a change would have moved its ctime)
        shutil.rmtree(tmp)
        return None
    os.rename(tmp, final)
    note = {"inbound": shown(name), "timestamp": deadlines.said(when), "skipped": copy.skipped}
    (folder / f"{final.name}.json").write_text(json.dumps(note, indent=1))
    return None


def _kept(folder: Path) -> list[tuple[Path, dict]]:
    """Every submission kept for one student and lesson: (its folder, its note), by time."""
    found = []
    for note_path in sorted(folder.glob("*.json")):
        try:
            note = json.loads(note_path.read_text())
            deadlines.utc(note["timestamp"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (folder / note_path.stem).is_dir():
            found.append((folder / note_path.stem, note))
    return sorted(found, key=lambda kept: deadlines.utc(kept[1]["timestamp"]))


def _place(kept: list[tuple[Path, dict]], chosen: int, due, policy: str, dest: Path, student: str, lesson: str) -> None:
    """The counted submission into dest (replacing the last collect's), with the trusted timestamp.txt and the record."""
    source, note = kept[chosen]
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, tmp, symlinks=True)  # the course's own copy: regular files and folders only
    for name in ("timestamp.txt", RECORD):  # the student's files of these names give way to the exchange's record
        if (tmp / name).is_dir() and not (tmp / name).is_symlink():
            shutil.rmtree(tmp / name)
    (tmp / "timestamp.txt").write_text(note["timestamp"])
    times = [deadlines.utc(n["timestamp"]) for _, n in kept]
    record = {"student": student, "lesson": lesson, "timestamp": note["timestamp"], "duedate": deadlines.said(due),
              "policy": policy, "skipped": note["skipped"],
              "submissions": [{"timestamp": n["timestamp"], "late": deadlines.seconds_late(t, due) > 0,
                               "counted": i == chosen} for i, ((_, n), t) in enumerate(zip(kept, times))]}
    (tmp / RECORD).write_text(json.dumps(record, indent=1))
    if dest.exists():
        shutil.rmtree(dest)
    os.rename(tmp, dest)


def collect_lesson(inbound: Path, lesson: str, submitted: Path, archive: Path, due, before_duedate: bool,
                   only: str | None = None) -> list[str]:
    """Collect one lesson from inbound/ into submitted/<student>/<lesson>/ and archive/; the summary's lines."""
    lines: list[str] = []
    found: dict[tuple[str, int], list[tuple[os.stat_result, str]]] = {}
    inbound_fd = os.open(inbound, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in sorted(os.listdir(inbound_fd)):
            if name.startswith("."):  # as nbgrader: Submit's own folder while it is being made
                continue
            claimed, sep, _ = name.partition(f"+{lesson}+")
            if not sep:
                if name.count("+") < 2:
                    lines.append(f"{_name(name)}: skipped: not a submission's name (student+lesson+time)")
                continue
            try:
                info = os.stat(name, dir_fd=inbound_fd, follow_symlinks=False)
            except OSError as exc:
                lines.append(f"{_name(name)}: skipped: unreadable ({exc.strerror})")
                continue
            if not stat.S_ISDIR(info.st_mode):
                lines.append(f"{_name(name)}: skipped: not a folder (a symlink or a file), not followed")
                continue
            try:
                owner = pwd.getpwuid(info.st_uid).pw_name
            except KeyError:
                lines.append(f"{_name(name)}: skipped: its owner (uid {info.st_uid}) is no user here")
                continue
            if claimed != owner:
                lines.append(f"{_name(name)}: skipped: the name claims {_name(claimed)} but {owner} made it")
                continue
            if only is None or owner == only:
                found.setdefault((owner, info.st_uid), []).append((info, name))
        policy = ("the last submission made by the due date counts (else the last one)" if before_duedate
                  else "the last submission counts")
        for (student, uid), entries in sorted(found.items()):
            entries.sort(key=lambda e: e[0].st_ctime_ns)
            if len(entries) > MAX_SUBMISSIONS:
                lines.append(f"{student}: {len(entries) - MAX_SUBMISSIONS} of {len(entries)} submissions skipped "
                             f"(at most {MAX_SUBMISSIONS} per collect: the latest are taken)")
                entries = entries[-MAX_SUBMISSIONS:]
            folder = archive / student / lesson
            for _, name in entries:
                try:
                    why = _archive_one(inbound_fd, name, uid, folder)
                except OSError as exc:  # the instructor's disk, say: this submission is left, the class goes on
                    why = f"{_name(name)}: skipped: collect could not copy it ({exc.strerror})"
                lines += [why] if why else []
            kept = _kept(folder)
            if not kept:
                continue
            times = [deadlines.utc(n["timestamp"]) for _, n in kept]
            chosen = deadlines.counted(times, due, before_duedate)
            _place(kept, chosen, due, policy, submitted / student / lesson, student, lesson)
            late = deadlines.seconds_late(times[chosen], due) > 0
            lines += [f"{student}: {skip}" for skip in kept[chosen][1]["skipped"]]
            lines.append(f"{student}: {len(kept)} submission(s) kept; counted: {kept[chosen][1]['timestamp']}"
                         f"{' (late)' if late else ''}")
    finally:
        os.close(inbound_fd)
    return lines


class Collect(ExchangeCollect):
    """nbgrader collect the course's way (the module's docstring): identity from the owner, no symlink, every submission kept."""

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.inbound_path = os.path.join(self.root, self.coursedir.course_id, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        self.duedate = deadlines.due_date(self.coursedir.assignment_id, self.config, Path(self.coursedir.root))

    def copy_files(self):
        lesson = self.coursedir.assignment_id
        submitted = Path(self.coursedir.format_path(self.coursedir.submitted_directory, "x", lesson)).parent.parent
        archive = submitted.parent / "collected"
        only = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else None
        lines = collect_lesson(Path(self.inbound_path), lesson, submitted, archive, self.duedate, self.before_duedate,
                               only)
        due = f"due {deadlines.said(self.duedate)}" if self.duedate else "no due date"
        lines.insert(0, f"collect {lesson} ({due}): {sum(' kept; counted' in x for x in lines)} students collected, "
                        f"{sum(': skipped' in x or 'not collected' in x for x in lines)} entries skipped")
        archive.mkdir(parents=True, exist_ok=True)
        (archive / f"summary-{lesson}.txt").write_text("\n".join(lines) + "\n")
        for line in lines:
            self.log.info(line)


class ReleaseFeedback(ExchangeReleaseFeedback):
    """nbgrader release_feedback, each page readable only under its own student's secret name (the module's docstring)."""

    def copy_files(self):
        from nbgrader.utils import notebook_hash

        exclude = set(self.coursedir.student_id_exclude.split(",")) if self.coursedir.student_id_exclude else set()
        try:
            os.chmod(self.dest_path, 0o711)  # the instructor's folder: anyone may open a page by name, nobody may list
        except OSError:  # another instructor's: nbgrader made it 0711 too
            pass
        pages: dict[str, list[tuple[str, Path]]] = {}
        for folder in map(Path, sorted(glob.glob(self.src_path))):
            student = folder.parent.name
            secret = deadlines.read_small(folder / "submission_secret.txt")
            if student in exclude:
                continue
            if not secret:
                self.log.warning(f"{_name(student)}: no submission secret beside the feedback: not released")
                continue
            for page in sorted(folder.glob("*.html")):
                pages.setdefault(notebook_hash(secret=secret, notebook_id=page.stem), []).append((student, page))
        for name, found in sorted(pages.items()):
            if len({student for student, _ in found}) > 1:
                self.log.warning(f"{', '.join(_name(s) for s, _ in found)}: their submissions carry the same secret: "
                                 "feedback not released to any of them")
                continue
            student, page = found[0]
            data = deadlines.read_small(page, MAX_PAGE_BYTES)
            if data is None:
                self.log.warning(f"{_name(student)}: {_name(page.name)} is not a regular file of at most "
                                 f"{MAX_PAGE_BYTES} bytes: not released")
                continue
            tmp = os.path.join(self.dest_path, f".{name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                os.fchmod(f.fileno(), 0o644)  # whatever the umask: the student is not in the instructor's group
                f.write(data)
            os.replace(tmp, os.path.join(self.dest_path, f"{name}.html"))
            self.log.info(f"Released feedback for {student} on {self.coursedir.assignment_id}/{page.stem}")
