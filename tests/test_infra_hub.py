"""The course's JupyterHub configuration, started for real: a student logs in, fetches and submits through the hub.

JupyterHub (PyPI) with configurable-http-proxy (npm) and PAM logins of a Unix
user made for the test; the student's server is started as that user with the
course's student configuration (lab-config/hub/student): the Assignments API
answers, /formgrader is not served. Needs root, configurable-http-proxy and
jupyterhub (.ci/run installs them); skipped elsewhere with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import processes_tagged
from infra_machine import ROOT, Users, everyone_python, needs_root, wait_for
from test_infra_exchange import LESSON


def _missing() -> str | None:
    if needs_root():
        return needs_root()
    if not shutil.which("configurable-http-proxy", path=f"/usr/local/bin:/usr/bin:{os.environ.get('PATH', '')}"):
        return "configurable-http-proxy is not installed (npm install -g configurable-http-proxy)"
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        return "jupyterhub is not installed (pip install jupyterhub)"
    return None


pytestmark = [pytest.mark.xdist_group("infra"), pytest.mark.skipif(bool(_missing()), reason=_missing() or "")]
COURSE = "why-slow-will-it-fit"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_student_logs_in_fetches_and_submits_through_the_hub():
    import requests

    python, why = everyone_python()
    if python is None:
        pytest.skip(why)
    start = time.perf_counter()
    users = Users(python)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-hub-"))
    scratch.chmod(0o755)
    tag = uuid.uuid4().hex
    hub = None
    try:
        exchange = scratch / "exchange"
        exchange.mkdir()
        exchange.chmod(0o1777)
        config = scratch / "class-config"
        config.mkdir()
        shipped = (ROOT / "lab-config" / "class" / "nbgrader_config.py").read_text()
        (config / "nbgrader_config.py").write_text(shipped + f"\nc.Exchange.root = {str(exchange)!r}\n")
        course = scratch / "course"
        course.mkdir()
        shutil.copy(ROOT / "nbgrader_config.py", course)
        for part in ("solutions", "notebooks"):
            shutil.copytree(ROOT / part / LESSON, course / part / LESSON)
        env = {**os.environ, "JUPYTER_CONFIG_PATH": str(config), "GRADER_TEST_TAG": tag}
        released = subprocess.run([sys.executable, "-m", "nbgrader", "release_assignment", LESSON], cwd=course, env=env,
                                  capture_output=True, text=True)
        assert released.returncode == 0, released.stderr[-2000:]

        ann = users.add("ann")
        subprocess.run(["chpasswd"], input=f"{ann}:Pw-{tag}\n", text=True, check=True)
        state = scratch / "hub"
        state.mkdir()
        port = _port()
        hub_env = {**env, "GPU_COURSE_CLASS_CONFIG": str(config), "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin"}
        hub_env.pop("JUPYTER_CONFIG_PATH")
        log = open(state / "hub.log", "wb")
        hub = subprocess.Popen([str(python), "-m", "jupyterhub", "-f", str(ROOT / "lab-config" / "hub" / "jupyterhub_config.py"),
                                f"--JupyterHub.bind_url=http://127.0.0.1:{port}",
                                f"--JupyterHub.hub_bind_url=http://127.0.0.1:{_port()}",
                                f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{_port()}"],
                               cwd=state, env=hub_env, stdout=log, stderr=log, start_new_session=True)
        base = f"http://127.0.0.1:{port}"

        def hub_up():
            try:
                return requests.get(f"{base}/hub/api", timeout=2).status_code == 200
            except requests.RequestException:
                assert hub.poll() is None, (state / "hub.log").read_text()[-3000:]
                return False

        wait_for(hub_up, 60, "the hub to answer")
        up = time.perf_counter() - start

        browser = requests.Session()
        form = browser.get(f"{base}/hub/login", timeout=10).text
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', form).group(1)
        login = browser.post(f"{base}/hub/login", data={"username": ann, "password": f"Pw-{tag}", "_xsrf": xsrf},
                             allow_redirects=False, timeout=30)
        assert login.status_code == 302, (login.status_code, login.text[:500])
        made = browser.post(f"{base}/hub/api/users/{ann}/tokens", json={"note": "test"}, timeout=10,
                            headers={"X-XSRFToken": browser.cookies.get("_xsrf", path="/hub/") or xsrf})
        assert made.status_code in (200, 201), made.text[:500]
        api = requests.Session()
        api.headers["Authorization"] = f"token {made.json()['token']}"
        assert api.post(f"{base}/hub/api/users/{ann}/server", timeout=60).status_code in (201, 202)
        wait_for(lambda: api.get(f"{base}/hub/api/users/{ann}", timeout=10).json().get("servers", {}).get("", {}).get("ready"),
                 120, "the student's server")
        spawned = time.perf_counter() - start

        server = f"{base}/user/{ann}"
        assert api.get(f"{server}/formgrader", timeout=30).status_code == 404, "a student's server serves /formgrader"
        listed = api.get(f"{server}/assignments", params={"course_id": COURSE}, timeout=60).json()
        assert listed["success"] and [a["assignment_id"] for a in listed["value"]] == [LESSON], listed
        fetched = api.post(f"{server}/assignments/fetch", json={"course_id": COURSE, "assignment_id": LESSON}, timeout=60)
        assert (users.home(ann) / LESSON / f"{LESSON}.ipynb").is_file(), fetched.text[:1000]
        submitted = api.post(f"{server}/assignments/submit", json={"course_id": COURSE, "assignment_id": LESSON},
                             timeout=60).json()
        assert submitted["success"], submitted
        inbound = list((exchange / COURSE / "inbound").iterdir())
        assert len(inbound) == 1 and inbound[0].name.startswith(f"{ann}+{LESSON}+")
        assert api.delete(f"{base}/hub/api/users/{ann}/server", timeout=60).status_code in (202, 204)
        print(f"hub up {up:.1f} s; student's server ready {spawned:.1f} s; all {time.perf_counter() - start:.1f} s")
    finally:
        if hub is not None and hub.poll() is None:
            hub.send_signal(signal.SIGTERM)  # the hub stops the proxy and the servers it started
            try:
                hub.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(hub.pid, signal.SIGKILL)
                hub.wait()
        wait_left = time.monotonic() + 10
        while processes_tagged(f"GRADER_TEST_TAG={tag}") and time.monotonic() < wait_left:
            time.sleep(0.2)
        stray = processes_tagged(f"GRADER_TEST_TAG={tag}")
        for pid in stray:
            os.kill(pid, signal.SIGKILL)
        users.remove()
        shutil.rmtree(scratch, ignore_errors=True)
        assert not stray, f"processes the hub started outlived it: {stray}"

