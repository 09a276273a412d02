"""One command for the course: lab, release, run, autograde, doctor.

    python -m grader lab                     # JupyterLab on my-work/ for a learner; prints the URL to open
    python -m grader lab --instructor        # at the course root, with nbgrader's formgrader
    python -m grader lab --presenter         # the presenter copies (run --demo), one slides URL per deck
    python -m grader release                 # notebooks/ from solutions/
    python -m grader run --device cuda -p sizes "[256, 1024, 4096]"
    python -m grader run --demo              # presenter copies in runs/presenter/: outputs, no solutions
    python -m grader autograde SUBMISSIONS --out grades/   # isolated, parallel, resumable
    python -m grader autograde SUBMISSIONS --shard 0/4 --out grades/shard-0
    python -m grader merge grades/shard-* --out grades/     # one result from many shards
    python -m grader report grades/                         # the class's scores and mistakes
    python -m grader doctor                  # what the course will use here
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import shutil
import sys
from pathlib import Path


def _parse_value(text: str):
    """A parameter value as papermill would take it: JSON/YAML-ish literals, else the string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _root(args) -> Path:
    from grader.pipeline.tools import find_root

    return find_root(Path(args.root) if args.root else None)


def cmd_release(args) -> int:
    from grader.pipeline.release import release

    root = _root(args)
    for path in release(root, Path(args.out) if args.out else None, args.lesson or None):
        print(f"released {path.relative_to(root) if path.is_relative_to(root) else path}")
    return 0


def cmd_workspace(args) -> int:
    from grader.pipeline.release import workspace

    target = Path(args.folder)
    copied = workspace(_root(args), target)
    print(f"{target}: " + (f"added {', '.join(copied)}" if copied else "every lesson is already there; nothing overwritten"))
    return 0


def cmd_lab(args) -> int:
    from grader.pipeline.lab import lab, stop

    folder = Path(args.folder or ("runs/presenter" if args.presenter else "my-work"))
    if args.instructor:
        folder = _root(args)
    if args.stop:
        return stop(folder)
    return lab(_root(args), folder, instructor=args.instructor, port=args.port,
               open_browser=not args.no_browser, presenter=args.presenter, decks=args.deck)


def cmd_run(args) -> int:
    from grader.pipeline.run import presenter_copies, run

    params = {name: _parse_value(value) for name, value in args.parameter}
    if args.device:
        params["device"] = args.device
    if args.demo:
        if args.student:
            raise ValueError("--demo runs the solutions and hides them itself; leave out --student")
        results = presenter_copies(_root(args), args.lesson or None, params, Path(args.out) if args.out else None)
        return 1 if any(r[2] != "ok" for r in results) else 0
    results = run(_root(args), args.lesson or None, params, Path(args.out) if args.out else None, student=args.student)
    failed = [r for r in results if r[2] != "ok"]
    return 1 if failed and not args.student else 0


def cmd_autograde(args) -> int:
    from grader.pipeline.classroom import grade_class
    from grader.pipeline.settings import Settings
    from grader.pipeline.submissions import parse_shard

    settings = Settings(cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                        memory_gib=args.memory_gib, sandbox=args.sandbox, shard=parse_shard(args.shard),
                        disk_mib=args.disk_mib, shm_mib=args.shm_mib, max_processes=args.max_processes,
                        regrade=args.regrade, hide=[Path(p) for p in args.hide], warm=not args.cold)
    if args.workers:
        settings.workers = args.workers
    path = grade_class(_root(args), Path(args.submissions), Path(args.out), settings, args.lesson or None)
    print(f"grades: {path}")
    return 0


def cmd_merge(args) -> int:
    from grader.pipeline.classroom import merge

    path = merge(_root(args), [Path(p) for p in args.shards], Path(args.out))
    print(f"grades: {path}")
    return 0


def cmd_report(args) -> int:
    from grader.pipeline.report import report

    for path in report(Path(args.grades), Path(args.out) if args.out else None):
        print(f"report: {path}")
    return 0


def cmd_export(args) -> int:
    from grader.pipeline.exports import WRITERS, ungraded

    grades = Path(args.grades)
    grades = grades / "grades.csv" if grades.is_dir() else grades
    out = Path(args.out) if args.out else grades.with_name(f"{args.to}.csv")
    from grader.pipeline.privacy import private_files

    with private_files(out.parent):  # the class's grades: the instructor's group only
        print(f"{args.to}: {WRITERS[args.to](grades, out)}")
    left = ungraded(grades)
    if left:
        print(f"left blank: {len(left)} submissions the grader could not grade ({', '.join(left[:5])}"
              f"{', ...' if len(left) > 5 else ''}): run the same autograde again, then export again")
    return 0


def doctor_lines() -> list[str]:
    """What the course will use on this machine, and what is missing."""
    lines = [f"python      {sys.version.split()[0]} ({sys.executable})", f"platform    {platform.platform()}"]
    missing = []
    try:
        import torch

        from grader import device

        cuda = torch.version.cuda or "none (CPU-only build)"
        lines.append(f"torch       {torch.__version__}, CUDA build: {cuda}")
        lines.append(f"devices     {', '.join(device.available())}; the lessons will use {device.pick_device('auto')}")
        lines.append(f"threads     torch uses {torch.get_num_threads()} of {device.cpu_threads()} cores")
        chosen = device.pick_device("auto")
        lines.append(f"            {device.describe(chosen)}")
    except ImportError as exc:
        missing.append(f"torch ({exc})")
    for module in ("jupyterlab", "nbgrader", "papermill", "ipywidgets", "matplotlib", "pandas", "nbclient"):
        try:
            mod = importlib.import_module(module)
            lines.append(f"{module:<11} {getattr(mod, '__version__', '?')}")
        except ImportError:
            missing.append(module)
    try:
        from grader.specs import data_dir, load_chips

        lines.append(f"data        {data_dir()} ({len(load_chips())} chips)")
    except (FileNotFoundError, OSError) as exc:
        missing.append(f"data/ ({exc})")
    from grader import triton_counter

    why = triton_counter.unavailable()
    usable = f"{triton_counter.PINNED} (lesson 08 runs its kernels in Triton's interpreter)"
    lines.append(f"triton      {'not usable: ' + why if why else usable}")
    if why and sys.platform.startswith("linux"):
        missing.append(f"triton=={triton_counter.PINNED} (lesson 08)")
    for tool, why in (("bwrap", "sandboxed autograde"), ("chromium", "the browser test")):
        found = shutil.which(tool)
        lines.append(f"{tool:<11} {found or 'not found'} ({why})")
    lines.append(f"class       {shared_python_note()}")
    from grader.pipeline.privacy import exposed

    open_now = exposed(Path(__file__).resolve().parents[1], Path.home())
    lines.append("            other users could read: " + ("; ".join(open_now) + " (README, 'Running a class')"
                                                          if open_now else "nothing of the course's or in any home"))
    lines.append("missing     " + (", ".join(missing) if missing else "nothing"))
    return lines


def shared_python_note() -> str:
    """Whether other Unix users (a class's students) can run this venv's Python: every folder above it enterable."""
    real = Path(os.path.realpath(sys.executable))
    closed = next((folder for folder in real.parents if os.stat(folder).st_mode & 0o001 == 0), None)
    if closed is None:
        return f"other users can run this Python ({real})"
    return (f"other users cannot run this Python: {closed} is closed to them; for a class, make the venv from a "
            "Python everyone can run: rm -rf .venv && make doctor PYTHON=/usr/bin/python3")


def cmd_doctor(args) -> int:
    lines = doctor_lines()
    print("\n".join(lines))
    return 1 if not lines[-1].endswith("nothing") else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-course", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", help="the course checkout (default: found from the current folder)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="generate notebooks/ (student versions) from solutions/ with nbgrader")
    p.add_argument("lesson", nargs="*", help="lesson ids, e.g. 01_crossover (default: all)")
    p.add_argument("--out", help="release folder (default: notebooks/)")
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("workspace", help="copy the student notebooks into your own folder (never overwrites)")
    p.add_argument("folder", nargs="?", default="my-work", help="default: my-work/")
    p.set_defaults(func=cmd_workspace)

    p = sub.add_parser("lab", help="start JupyterLab on your own copy of the lessons and print the URL to open")
    p.add_argument("folder", nargs="?", help="the learner's folder (default: my-work/; runs/presenter/ with --presenter)")
    p.add_argument("--instructor", action="store_true",
                   help="at the course root, with nbgrader's instructor menus and formgrader")
    p.add_argument("--presenter", action="store_true",
                   help="the presenter copies (make demo), printing each deck's full-screen slides URL")
    p.add_argument("--deck", action="append", help="with --presenter: only this lesson's deck (repeatable; default all)")
    p.add_argument("--stop", action="store_true", help="stop the course server running on the folder")
    p.add_argument("--port", type=int, help="default: 8888, or the next free port")
    p.add_argument("--no-browser", action="store_true", help="only print the URL; do not try to open a browser")
    p.set_defaults(func=cmd_lab)

    p = sub.add_parser("run", help="execute lessons with papermill")
    p.add_argument("lesson", nargs="*", help="lesson ids (default: all)")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="set a parameter of the lessons' parameters cell, e.g. -p repeats 11")
    p.add_argument("--device", help="auto, cpu, cuda, cuda:1 or mps (default: the lesson's own, auto)")
    p.add_argument("--out", help="folder for executed notebooks (default: runs/)")
    p.add_argument("--student", action="store_true", help="run the student versions from notebooks/ instead")
    p.add_argument("--demo", action="store_true",
                   help="presenter copies: run the solutions with demo=True, then show the learners' stubs and "
                        "no hidden tests, outputs kept, slides marked (default --out runs/presenter/)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("autograde", help="grade SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb with nbgrader")
    p.add_argument("submissions", help="folder of submissions")
    p.add_argument("--out", default="grades", help="output folder: course/, grades.csv (default: grades/)")
    p.add_argument("--lesson", action="append", help="grade only this lesson (repeatable)")
    p.add_argument("--workers", type=int, help="submissions graded at once (default: the machine's cores)")
    p.add_argument("--cell-timeout", type=float, default=60.0, help="seconds one cell may run (default 60)")
    p.add_argument("--notebook-timeout", type=float, default=600.0,
                   help="seconds all of one submission's cells may run (default 600)")
    p.add_argument("--memory-gib", type=float, default=4.0, help="memory (address space) per submission (default 4)")
    p.add_argument("--disk-mib", type=float, default=512.0,
                   help="what one submission may write, in MiB (a tmpfs: it counts as memory) (default 512)")
    p.add_argument("--shm-mib", type=float, default=64.0, help="the size of a submission's /dev/shm in MiB (default 64)")
    p.add_argument("--max-processes", type=int, default=128,
                   help="processes and threads one submission may have at once (default 128)")
    p.add_argument("--sandbox", default="auto", choices=["auto", "bwrap", "none"],
                   help="auto or bwrap: bubblewrap, or an error saying how to install it; none (only by name): a "
                        "limited subprocess that hides no files and caps no disk")
    p.add_argument("--shard", default="0/1", help="grade only slice I of N (I from 0), e.g. $SLURM_ARRAY_TASK_ID/8")
    p.add_argument("--regrade", action="store_true", help="grade again submissions that already have a result")
    p.add_argument("--hide", action="append", default=[], help="another folder the sandbox must hide (repeatable)")
    p.add_argument("--cold", action="store_true",
                   help="start every runner as a fresh Python in a bwrap of its own, not forked from a warm one")
    p.set_defaults(func=cmd_autograde)

    p = sub.add_parser("merge", help="merge the out folders of autograde shards into one result")
    p.add_argument("shards", nargs="+", help="the shards' out folders")
    p.add_argument("--out", default="grades", help="the merged folder (default: grades/)")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("report", help="the instructor's report: scores and common mistakes per exercise")
    p.add_argument("grades", help="a folder with grades.csv (or the CSV itself)")
    p.add_argument("--out", help="folder for report.md and report.png (default: next to grades.csv)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("export", help="grades for a learning platform: a Canvas or Moodle import CSV")
    p.add_argument("grades", help="a folder with grades.csv (or the CSV itself)")
    p.add_argument("--to", required=True, choices=["canvas", "moodle"], help="the platform")
    p.add_argument("--out", help="the file to write (default: canvas.csv or moodle.csv next to grades.csv)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("doctor", help="print what the course will use here and what is missing")
    p.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"gpu-course {args.command}: {exc}", file=sys.stderr)
        return 2
