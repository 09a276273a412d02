"""`make lab`: start JupyterLab for a learner (or an instructor) and say plainly which URL to open.

    python -m grader lab                 # the learner's JupyterLab on my-work/, opening 00_START_HERE.ipynb
    python -m grader lab --instructor    # at the course root, with nbgrader's formgrader and menus

The server's own log goes to a file (my-work/.jupyter-server.log), so the last thing in
the terminal is the URL. A learner's server reads lab-config/learner/ through
JUPYTER_CONFIG_PATH (nbgrader's instructor UI off), and every server culls the idle
kernels of closed notebooks after CULL_IDLE_MINUTES.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import webbrowser
from pathlib import Path

from grader.pipeline.release import CULL_IDLE_MINUTES, INDEX, workspace

LOG_NAME = ".jupyter-server.log"


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


def server_command(folder: Path, port: int, token: str, instructor: bool = False) -> list[str]:
    """The `jupyter lab` command line: loopback, our token, kernel culling, the index page for a learner."""
    cmd = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
        # Kernels of closed notebooks pile up (about 0.5 GB each): shut them down once idle this long.
        f"--MappingKernelManager.cull_idle_timeout={CULL_IDLE_MINUTES * 60}",
        "--MappingKernelManager.cull_interval=300",
        "--MappingKernelManager.cull_connected=False",
    ]
    if not instructor:
        cmd.append(f"--ServerApp.default_url=/lab/tree/{INDEX}")
    if hasattr(os, "getuid") and os.getuid() == 0:  # containers, cloud notebooks
        cmd.append("--allow-root")
    return cmd


def server_env(root: Path, instructor: bool = False) -> dict[str, str]:
    """This interpreter's bin first on PATH; a learner's server also reads lab-config/learner/."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if not instructor:
        extra = str(root / "lab-config" / "learner")
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in (extra, env.get("JUPYTER_CONFIG_PATH", "")) if p)
    return env


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


def banner(url: str, log: Path, instructor: bool) -> str:
    """The last thing `make lab` prints: the URL, alone on its line, in a box."""
    who = "nbgrader's Formgrader is in the Nbgrader menu" if instructor else "the course index opens first"
    lines = ["The course is running. Open this URL in your browser:", "", url, "",
             f"({who}; server log: {log}; press Ctrl-C here to stop)"]
    width = max(len(line) for line in lines)
    bar = "=" * (width + 4)
    return "\n".join([bar, *(f"  {line}" for line in lines), bar])


def _has_display() -> bool:
    """True where a browser window can open (macOS, Windows, or a Linux desktop), so no text browser takes the terminal."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def lab(root: Path, folder: Path, instructor: bool = False, port: int | None = None,
        open_browser: bool = True, out=print) -> int:
    """Prepare the workspace, start JupyterLab in the background, print the URL, wait until Ctrl-C."""
    started = time.monotonic()
    if instructor:
        folder = root
        (root / "course").mkdir(exist_ok=True)  # where nbgrader_config.py keeps the formgrader's gradebook
    else:
        copied = workspace(root, folder)
        out(f"{folder}: " + (f"added {', '.join(copied)}; " if copied else "") + f"data/ refreshed, {INDEX} written")
    log = folder / LOG_NAME
    token = secrets.token_hex(16)
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    with open(log, "w") as log_file:
        # Its own session: Ctrl-C reaches this launcher only, which then stops the server cleanly.
        server = subprocess.Popen(server_command(folder.resolve(), port, token, instructor), cwd=folder,
                                  env=server_env(root, instructor), stdout=log_file, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        if not wait_until_up(base, token, server):
            server.terminate()
            tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-20:])
            raise RuntimeError(f"JupyterLab did not start; the end of its log ({log}):\n{tail}")
        url = f"{base}/lab" + ("" if instructor else f"/tree/{INDEX}") + f"?token={token}"
        if open_browser and _has_display():
            try:
                webbrowser.open(url)
            except Exception:  # no browser here (a server, a container): the URL below is enough
                pass
        out(f"JupyterLab is up after {time.monotonic() - started:.0f} s.")
        out(banner(url, log, instructor))
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
