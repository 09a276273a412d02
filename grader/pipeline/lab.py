"""`make lab`: start JupyterLab for a learner (or an instructor) and say plainly which URL to open.

    python -m grader lab                 # the learner's JupyterLab on my-work/, opening 00_START_HERE.ipynb
    python -m grader lab --instructor    # at the course root, with nbgrader's formgrader and menus
    python -m grader lab --presenter     # the presenter copies (runs/presenter/), one slides URL per deck
    python -m grader lab --stop          # stop the course server of that folder (a closed terminal leaves it running)

The server's own log goes to a file (my-work/.jupyter-server.log), so the last thing in
the terminal is the URL; the tabs JupyterLab reopens are the folder's own
(my-work/.jupyter-workspaces/). A learner's server reads lab-config/learner/ through
JUPYTER_CONFIG_PATH (nbgrader's instructor UI off), a presenter's lab-config/presenter/,
and every server culls the idle kernels of closed notebooks after CULL_IDLE_MINUTES.
A server already running on the same folder (found through Jupyter's runtime files) is
reused: its URL is printed again and no second server writes to the same log.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import webbrowser
from pathlib import Path

from grader.pipeline.release import CULL_IDLE_MINUTES, INDEX, workspace

LOG_NAME = ".jupyter-server.log"
# JupyterLab remembers which tabs were open (its workspaces) in ~/.jupyter/lab/workspaces by default, one file
# for every server of the user: a presenter's lab then reopened tabs left open in the learner's folder (or in a
# course folder of last week) wherever a notebook of the same name was there. Each folder keeps its own.
WORKSPACES_NAME = ".jupyter-workspaces"


def free_port(start: int = 8888, tries: int = 50) -> int:
    """The first free loopback port from `start` (JupyterLab's usual 8888 when it is free)."""
    for port in range(start, start + tries):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(folder: Path, port: int, token: str, instructor: bool = False, presenter: bool = False) -> list[str]:
    """The `jupyter lab` command line: loopback, our token, kernel culling (not a presenter's: its decks' kernels
    are set up before the talk), the index page for a learner."""
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
        f"--LabApp.workspaces_dir={folder / WORKSPACES_NAME}",
    ]
    if not presenter:  # kernels of closed notebooks pile up (about 0.5 GB each): shut them down once idle this long
        cmd += [f"--MappingKernelManager.cull_idle_timeout={CULL_IDLE_MINUTES * 60}",
                "--MappingKernelManager.cull_interval=300", "--MappingKernelManager.cull_connected=False"]
    if not (instructor or presenter):
        cmd.append(f"--ServerApp.default_url=/lab/tree/{INDEX}")
    if hasattr(os, "getuid") and os.getuid() == 0:  # containers, cloud notebooks
        cmd.append("--allow-root")
    return cmd


def server_env(root: Path, instructor: bool = False, presenter: bool = False) -> dict[str, str]:
    """This interpreter's bin first on PATH; a learner's server also reads lab-config/learner/, a presenter's
    lab-config/presenter/. Only a learner's kernels keep a ledger of first guesses (grader.predictions.ledger_path)."""
    from grader import predictions

    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if instructor or presenter:  # their kernels run the solutions: no answer of theirs goes in the user's own ledger
        env[predictions.ENV_LEDGER] = ""
    if presenter:
        extra = str(root / "lab-config" / "presenter")
    elif not instructor:
        extra = str(root / "lab-config" / "learner")
    else:
        return env
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in (extra, env.get("JUPYTER_CONFIG_PATH", "")) if p)
    return env


def running_servers() -> list[dict]:
    """Jupyter servers running now, from Jupyter's runtime files (pid, port, token, root_dir, url ...)."""
    try:
        from jupyter_server.serverapp import list_running_servers

        return list(list_running_servers())
    except Exception:  # an unreadable runtime folder: nothing to reuse
        return []


def server_for(folder: Path) -> dict | None:
    """The running Jupyter server whose root is `folder` and that answers its own token, or None."""
    want = folder.resolve()
    for info in running_servers():
        try:
            same = Path(info.get("root_dir", "")).resolve() == want
        except OSError:
            same = False
        if same and _answers(f"http://127.0.0.1:{info['port']}", info.get("token", "")):
            return info
    return None


def _answers(base: str, token: str) -> bool:
    try:
        urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
        return True
    except OSError:
        return False


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def port_taken(port: int) -> str:
    """One line for a port another program holds: which port, what holds it if Jupyter knows, and what to do."""
    holder = next((i for i in running_servers() if i.get("port") == port), None)
    who = (f"a Jupyter server on {holder.get('root_dir')} (pid {holder.get('pid')})" if holder
           else "another program")
    return (f"Port {port} is already in use by {who}. Pick another: make lab LAB_FLAGS=\"--port {port + 1}\" "
            f"(or leave out --port: make lab takes the first free port from 8888)"
            + (f", or stop it: kill {holder.get('pid')}." if holder else "."))


def stop(folder: Path, out=print, wait: float = 30.0) -> int:
    """Stop the course server running on `folder` (and its kernels); 0 if one was stopped or none was running."""
    info = server_for(folder)
    if info is None:
        out(f"No course server is running on {folder}.")
        return 0
    os.kill(int(info["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _alive(int(info["pid"])):
        time.sleep(0.2)
    out(f"Stopped the course server on {folder} (pid {info['pid']}, port {info['port']}).")
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of this process counts as gone
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def wait_until_up(base: str, token: str, server: subprocess.Popen, seconds: float = 180.0) -> bool:
    """True once the server answers /api/status; False if it exits or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            return True
        except OSError:
            time.sleep(0.3)
    return False


def banner(url: str, log: Path, instructor: bool, stop_hint: str = "press Ctrl-C here to stop",
           slides: list[str] | None = None) -> str:
    """The last thing `make lab` prints: the URL, alone on its line, in a box (a presenter's: one slides URL per deck)."""
    who = "nbgrader's Formgrader is in the Nbgrader menu" if instructor else "the course index opens first"
    lines = ["The course is running. Open this URL in your browser:", "", url, "",
             f"({who}; server log: {log}; {stop_hint})"]
    if slides:
        lines = ["The presenter copies are served. Each deck's slides, full screen in their own tab",
                 "(F11; arrows move; Ctrl-Enter reruns a cell on its slide, Shift-Enter runs it and moves on):", "", *slides, "",
                 "Each deck has run in the kernel it is shown with: its widgets are live, and its cells",
                 "rerun with the instructor's answers. The decks in JupyterLab:", "", url, "",
                 f"(server log: {log}; {stop_hint})"]
    width = max(len(line) for line in lines)
    bar = "=" * (width + 4)
    return "\n".join([bar, *(f"  {line}" for line in lines), bar])


def _has_display() -> bool:
    """True where a browser window can open (macOS, Windows, or a Linux desktop), so no text browser takes the terminal."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _url(base: str, token: str, instructor: bool, presenter: bool) -> str:
    return f"{base}/lab" + ("" if instructor or presenter else f"/tree/{INDEX}") + f"?token={token}"


def slide_urls(base: str, token: str, folder: Path) -> list[str]:
    """Each presenter copy's full-screen slides (jupyterlab-rise's own page)."""
    return [f"{base}/rise/{nb.name}?token={token}" for nb in sorted(folder.glob("[0-9][0-9]_*.ipynb"))]


def _deck_kernel(base: str, token: str, name: str):
    """A kernel manager attached to the kernel the server runs for the notebook `name` (a new session for it)."""
    import json

    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.paths import jupyter_runtime_dir

    class Attached(AsyncKernelManager):  # the server owns the kernel: nbclient only talks to it, never stops it
        @property
        def has_kernel(self) -> bool:
            return True

        async def _async_is_alive(self) -> bool:
            return True

        async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
            return None

        is_alive, shutdown_kernel = _async_is_alive, _async_shutdown_kernel

    body = json.dumps({"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}).encode()
    request = urllib.request.Request(f"{base}/api/sessions", data=body, method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        kernel_id = json.load(reply)["kernel"]["id"]
    connection = Path(jupyter_runtime_dir()) / f"kernel-{kernel_id}.json"
    for _ in range(100):  # the server writes it as the kernel starts
        if connection.exists():
            break
        time.sleep(0.1)
    km = Attached(connection_file=str(connection))
    km.load_connection_file()
    return km


def set_up_decks(root: Path, folder: Path, base: str, token: str, decks: list[str] | None = None, out=print) -> None:
    """Run each lesson's deck (solutions, demo=True) in the kernel the server presents it with, then write the copy.

    So, once this is done, every widget on the slides is live (its model is in that kernel),
    and every code cell reruns on its slide with the instructor's answers defined, while the
    copy itself shows only the learners' stubs (grader.pipeline.run.presented).
    """
    import nbformat

    from grader.pipeline.run import _lesson_source_module, _release, presented, run_deck, write_deck_styles
    from grader.pipeline.tools import lessons

    folder.mkdir(parents=True, exist_ok=True)
    slides = _lesson_source_module(root)
    chosen = decks or lessons(root)
    write_deck_styles(root, folder, chosen)
    for i, lesson in enumerate(chosen, 1):
        started = time.monotonic()
        executed, status = run_deck(root, lesson, km=_deck_kernel(base, token, f"{lesson}.ipynb"))
        nbformat.write(presented(executed, _release(root, lesson), slides), str(folder / f"{lesson}.ipynb"))
        out(f"[{i}/{len(chosen)}] {lesson}: {status}, set up in its kernel ({time.monotonic() - started:.1f} s)")


def _interrupt(signum, frame):
    """SIGTERM as Ctrl-C: the launcher's `finally` stops the server (in a session of its own) with its kernels."""
    raise KeyboardInterrupt


def _graded_course(root: Path) -> Path | None:
    """grades/course/ when `python -m grader autograde ... --out grades` has written its gradebook there."""
    course = root / "grades" / "course"
    return course if (course / "nbgrader_config.py").is_file() and (course / "gradebook.db").is_file() else None


def lab(root: Path, folder: Path, instructor: bool = False, port: int | None = None,
        open_browser: bool = True, out=print, presenter: bool = False, decks: list[str] | None = None) -> int:
    """Prepare the workspace, start JupyterLab in the background, print the URL, wait until Ctrl-C.

    A course server already running on the folder is reused (its URL printed again, nothing started);
    a `port` another program holds is named in one line, and nothing is started.
    """
    started = time.monotonic()
    if instructor:
        folder = root
        (root / "course").mkdir(exist_ok=True)  # where nbgrader_config.py keeps the formgrader's gradebook
    elif presenter:
        folder.mkdir(parents=True, exist_ok=True)
    else:
        copied = workspace(root, folder)
        out(f"{folder}: " + (f"added {', '.join(copied)}; " if copied else "") + f"data/ refreshed, {INDEX} written")
    log = folder / LOG_NAME
    running = server_for(folder)
    if running is not None:
        base = f"http://127.0.0.1:{running['port']}"
        how = ("make lab-stop" if not (instructor or presenter) and folder.name == "my-work" else
               "make present-stop" if presenter and folder.resolve() == (root / "runs" / "presenter").resolve() else
               f".venv/bin/python -m grader lab {'--instructor' if instructor else ('--presenter ' if presenter else '') + str(folder)} --stop")
        out(f"A course server is already running on {folder} (pid {running['pid']}, port {running['port']}): "
            f"using it, not starting another. To stop it: {how} (or kill {running['pid']}).")
        out(banner(_url(base, running.get("token", ""), instructor, presenter), log, instructor,
                   f"{how} stops it", slide_urls(base, running.get("token", ""), folder) if presenter else None))
        return 0
    if port and not _port_free(port):
        out(port_taken(port))
        return 1
    token = secrets.token_hex(16)
    chosen, port = port, port or free_port()
    if threading.current_thread() is threading.main_thread():  # `kill` or Ctrl-C: stop the server and its kernels
        for stop_signal in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop_signal, _interrupt)
    formgrader = _graded_course(root) if instructor else None
    if formgrader is not None:
        out(f"The formgrader shows the gradebook in {formgrader} (the course's autograde wrote it).")
    for attempt in range(3):
        base = f"http://127.0.0.1:{port}"
        with open(log, "w") as log_file:
            # Its own session: Ctrl-C reaches this launcher only, which then stops the server cleanly.
            server = subprocess.Popen(server_command(folder.resolve(), port, token, instructor, presenter),
                                      cwd=formgrader or folder,  # nbgrader reads nbgrader_config.py from here
                                      env=server_env(root, instructor, presenter), stdout=log_file,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            if wait_until_up(base, token, server):
                break
        except KeyboardInterrupt:
            server.terminate()
            raise
        server.terminate()
        server.wait(timeout=30)
        text = log.read_text(errors="replace")
        if "already in use" not in text:
            tail = "".join(text.splitlines(keepends=True)[-20:])
            raise RuntimeError(f"JupyterLab did not start; the end of its log ({log}):\n{tail}")
        if chosen or attempt == 2:  # the port asked for, or three lost races: say so, not the log's last lines
            raise RuntimeError(port_taken(port))
        out(f"Port {port} was taken as JupyterLab started (another server starting at the same moment): "
            f"trying {free_port(port + 1)}.")
        port = free_port(port + 1)
    try:
        if presenter:
            out(f"JupyterLab is up; running each deck in the kernel it is presented with (demo sizes) ...")
            set_up_decks(root, folder, base, token, decks, out)
        url = _url(base, token, instructor, presenter)
        if open_browser and _has_display():
            try:
                webbrowser.open(url)
            except Exception:  # no browser here (a server, a container): the URL below is enough
                pass
        out(f"JupyterLab is up after {time.monotonic() - started:.0f} s.")
        out(banner(url, log, instructor, slides=slide_urls(base, token, folder) if presenter else None))
        sys.stdout.flush()
        return server.wait()
    except KeyboardInterrupt:
        out("\nstopping JupyterLab (and its kernels) ...")
        return 0
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
