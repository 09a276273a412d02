"""The course's JupyterHub configuration, started for real: a student logs in, fetches and submits through the hub.

JupyterHub (PyPI) with configurable-http-proxy (npm) and PAM logins of a Unix
user made for the test; the student's server is started as that user with the
course's student configuration (lab-config/hub/student): the Assignments API
answers, /formgrader is not served. The same hub (one module fixture: it takes
seconds to start) serves a student's terminal, where README's `nbgrader` must
work as in the student's login shell, and the instructor's server, whose
formgrader must show the class the course's autograde graded. Needs root,
configurable-http-proxy and jupyterhub (.ci/run installs them); skipped
elsewhere with the reason.
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
from infra_machine import ROOT, Users, everyone_python, formgrader_shows, needs_root, wait_for
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


class Hub:
    """The course's hub, started as README says, with a student and an instructor who log in with Unix passwords."""

    def __init__(self, users: Users, scratch: Path, tag: str):
        self.users, self.scratch, self.tag = users, scratch, tag
        self.process = None
        self.base = ""

    def login(self, name: str):
        """A requests session with a token of `name`'s, and `name`'s server started; (session, server URL)."""
        import requests

        browser = requests.Session()
        form = browser.get(f"{self.base}/hub/login", timeout=10).text
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', form).group(1)
        login = browser.post(f"{self.base}/hub/login", data={"username": name, "password": f"Pw-{self.tag}", "_xsrf": xsrf},
                             allow_redirects=False, timeout=30)
        assert login.status_code == 302, (login.status_code, login.text[:500])
        made = browser.post(f"{self.base}/hub/api/users/{name}/tokens", json={"note": "test"}, timeout=10,
                            headers={"X-XSRFToken": browser.cookies.get("_xsrf", path="/hub/") or xsrf})
        assert made.status_code in (200, 201), made.text[:500]
        api = requests.Session()
        api.headers["Authorization"] = f"token {made.json()['token']}"
        api.token = made.json()["token"]
        if not api.get(f"{self.base}/hub/api/users/{name}", timeout=10).json().get("servers", {}).get("", {}).get("ready"):
            assert api.post(f"{self.base}/hub/api/users/{name}/server", timeout=60).status_code in (201, 202)
        wait_for(lambda: api.get(f"{self.base}/hub/api/users/{name}", timeout=10).json().get("servers", {}).get("", {})
                 .get("ready"), 120, f"{name}'s server")
        return api, f"{self.base}/user/{name}"


@pytest.fixture(scope="module")
def hub():
    """README's hub (lab-config/hub/jupyterhub_config.py, root's plain PATH), README's /etc/profile.d file, a released
    lesson in a temporary exchange, a student `ann` and an instructor `teach` in the instructors' group."""
    import requests

    python, why = everyone_python()
    if python is None:
        pytest.skip(why)
    start = time.perf_counter()
    users = Users(python)
    scratch = Path(tempfile.mkdtemp(prefix="gpu-course-hub-"))
    scratch.chmod(0o755)
    tag = uuid.uuid4().hex
    group = f"gci{tag[:8]}"
    profile = Path(f"/etc/profile.d/gpu-course-{tag[:8]}.sh")
    made = Hub(users, scratch, tag)
    try:
        exchange = scratch / "exchange"
        exchange.mkdir()
        exchange.chmod(0o1777)
        config = scratch / "class-config"
        config.mkdir()
        shipped = (ROOT / "lab-config" / "class" / "nbgrader_config.py").read_text()
        (config / "nbgrader_config.py").write_text(shipped + f"\nc.Exchange.root = {str(exchange)!r}\n")
        made.config = config
        env = {**os.environ, "JUPYTER_CONFIG_PATH": str(config), "GRADER_TEST_TAG": tag}
        # README, "Once, as root": the course's commands on every login shell's PATH (the venv is the test's)
        profile.write_text((ROOT / "lab-config" / "class" / "gpu-course-path.sh").read_text()
                           .replace("/opt/gpu-course/.venv/bin", str(python.parent)))
        subprocess.run(["groupadd", group], check=True, capture_output=True)
        made.ann, made.teach = users.add("ann"), users.add("teach")
        subprocess.run(["usermod", "-aG", group, made.teach], check=True, capture_output=True)
        subprocess.run(["chpasswd"], input=f"{made.ann}:Pw-{tag}\n{made.teach}:Pw-{tag}\n", text=True, check=True)
        # the instructor's clone (README: git clone ... ~/gpu-course; here the parts nbgrader reads), released by them
        made.course = course = users.home(made.teach) / "gpu-course"
        users.run(made.teach, ["mkdir", "-p", str(course / "solutions"), str(course / "notebooks")])
        users.run(made.teach, ["cp", "-r", str(ROOT / "solutions" / LESSON), str(course / "solutions")])
        users.run(made.teach, ["cp", "-r", str(ROOT / "notebooks" / LESSON), str(course / "notebooks")])
        users.run(made.teach, ["cp", str(ROOT / "nbgrader_config.py"), str(course)])
        users.run(made.teach, [str(python), "-m", "nbgrader", "release_assignment", LESSON], cwd=course,
                  env={"JUPYTER_CONFIG_PATH": str(config)})
        state = scratch / "hub"
        state.mkdir()
        port = _port()
        hub_env = {**env, "GPU_COURSE_CLASS_CONFIG": str(config), "GPU_COURSE_INSTRUCTORS": group,
                   "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}  # root's, as README runs it
        hub_env.pop("JUPYTER_CONFIG_PATH")
        log = open(state / "hub.log", "wb")
        made.process = hub_process = subprocess.Popen(
            [str(python.parent / "jupyterhub"), "-f", str(ROOT / "lab-config" / "hub" / "jupyterhub_config.py"),
             f"--JupyterHub.bind_url=http://127.0.0.1:{port}", f"--JupyterHub.hub_bind_url=http://127.0.0.1:{_port()}",
             f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{_port()}"],
            cwd=state, env=hub_env, stdout=log, stderr=log, start_new_session=True)
        made.base = f"http://127.0.0.1:{port}"

        def hub_up():
            try:
                return requests.get(f"{made.base}/hub/api", timeout=2).status_code == 200
            except requests.RequestException:
                assert hub_process.poll() is None, (state / "hub.log").read_text()[-3000:]
                return False

        # generous: CI once started the hub while the corpus's fork and thread bombs held the load near 30, and it had
        # not answered after 60 s (alone it answers in seconds); a wait that passes returns as soon as it can
        wait_for(hub_up, 240, "the hub to answer")
        print(f"hub up {time.perf_counter() - start:.1f} s")
        yield made
    finally:
        hub_process = made.process
        if hub_process is not None and hub_process.poll() is None:
            hub_process.send_signal(signal.SIGTERM)  # the hub stops the proxy and the servers it started
            try:
                hub_process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(hub_process.pid, signal.SIGKILL)
                hub_process.wait()
        wait_left = time.monotonic() + 10
        while processes_tagged(f"GRADER_TEST_TAG={tag}") and time.monotonic() < wait_left:
            time.sleep(0.2)
        stray = processes_tagged(f"GRADER_TEST_TAG={tag}")
        for pid in stray:
            os.kill(pid, signal.SIGKILL)
        users.remove()
        subprocess.run(["groupdel", group], capture_output=True)
        profile.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
        assert not stray, f"processes the hub started outlived it: {stray}"


def test_a_student_logs_in_fetches_and_submits_through_the_hub(hub):
    start = time.perf_counter()
    ann, users = hub.ann, hub.users
    api, server = hub.login(ann)
    spawned = time.perf_counter() - start
    assert api.get(f"{server}/formgrader", timeout=30).status_code == 404, "a student's server serves /formgrader"
    listed = api.get(f"{server}/assignments", params={"course_id": COURSE}, timeout=60).json()
    assert listed["success"] and [a["assignment_id"] for a in listed["value"]] == [LESSON], listed
    fetched = api.post(f"{server}/assignments/fetch", json={"course_id": COURSE, "assignment_id": LESSON}, timeout=60)
    assert (users.home(ann) / LESSON / f"{LESSON}.ipynb").is_file(), fetched.text[:1000]
    submitted = api.post(f"{server}/assignments/submit", json={"course_id": COURSE, "assignment_id": LESSON},
                         timeout=60).json()
    assert submitted["success"], submitted
    inbound = list((hub.scratch / "exchange" / COURSE / "inbound").iterdir())
    assert len(inbound) == 1 and inbound[0].name.startswith(f"{ann}+{LESSON}+")
    print(f"student's server ready {spawned:.1f} s; all {time.perf_counter() - start:.1f} s")


def test_nbgrader_works_in_a_students_login_shell_and_hub_terminal(hub):
    """README's student commands, typed where a student types them: a login shell, and a JupyterLab terminal."""
    import json

    import websocket

    config = f"JUPYTER_CONFIG_PATH={hub.config}"  # README puts it in /etc/jupyter; the test's exchange is its own
    shell = subprocess.run(["su", "-", hub.ann, "-c", f"{config} nbgrader list"], capture_output=True, text=True,
                           timeout=120)
    assert shell.returncode == 0 and LESSON in shell.stdout + shell.stderr, (shell.returncode, shell.stdout, shell.stderr)

    api, server = hub.login(hub.ann)
    made = api.post(f"{server}/api/terminals", timeout=30)
    assert made.status_code == 200, made.text[:500]
    name = made.json()["name"]
    ws = websocket.create_connection(f"{server.replace('http', 'ws', 1)}/terminals/websocket/{name}",
                                     header=[f"Authorization: token {api.token}"], timeout=60)
    try:
        ws.send(json.dumps(["stdin", "nbgrader list; echo END$((6*7))\r"]))
        seen = ""
        deadline = time.monotonic() + 90
        while "END42" not in seen and time.monotonic() < deadline:
            message = json.loads(ws.recv())
            if message[0] == "stdout":
                seen += message[1]
    finally:
        ws.close()
        api.delete(f"{server}/api/terminals/{name}", timeout=30)
    assert "END42" in seen and "command not found" not in seen and LESSON in seen, seen[-2000:]


def test_the_instructors_hub_server_formgrader_shows_the_graded_class(hub):
    """README's instructor steps (collect, the course's autograde) as the instructor, then the hub's formgrader."""
    users, teach, ann = hub.users, hub.teach, hub.ann
    env = {"JUPYTER_CONFIG_PATH": str(hub.config)}
    nbgrader = [str(users.python), "-m", "nbgrader"]
    users.run(ann, [*nbgrader, "fetch_assignment", LESSON], env=env, check=False)  # fetched already by the API test
    users.run(ann, [*nbgrader, "submit", LESSON], env=env)
    course = hub.course
    users.run(teach, [*nbgrader, "collect", LESSON], cwd=course, env=env)
    users.run(teach, [str(users.python), "-m", "grader", "autograde", "course/submitted", "--out", "grades",
                      "--lesson", LESSON], cwd=course, env=env)
    api, server = hub.login(teach)
    formgrader_shows(lambda path: api.get(f"{server}{path}", timeout=60).json(), LESSON, {ann: 0.0})


def test_a_student_fetches_and_submits_in_the_assignments_panel_in_chromium(hub):
    """README's first route for a student: log in to the hub in a browser, Nbgrader > Assignment List, Fetch, Submit."""
    from test_browser import CHROMIUM

    if not CHROMIUM:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    shutil.rmtree(hub.users.home(hub.ann) / LESSON, ignore_errors=True)  # fetched by the other tests: fetch it again
    inbound = hub.scratch / "exchange" / COURSE / "inbound"
    before = len(list(inbound.iterdir()))
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{hub.base}/hub/login")
            page.fill("#username_input", hub.ann)
            page.fill("#password_input", f"Pw-{hub.tag}")
            page.click("#login_submit")
            page.wait_for_url(f"**/user/{hub.ann}/**", timeout=120_000)
            page.goto(f"{hub.base}/user/{hub.ann}/lab")
            page.get_by_text("Nbgrader", exact=True).click(timeout=120_000)
            page.get_by_text("Assignment List", exact=True).click()
            page.get_by_role("button", name="Fetch", exact=True).click(timeout=60_000)
            wait_for(lambda: (hub.users.home(hub.ann) / LESSON / f"{LESSON}.ipynb").is_file(), 60, "the fetched lesson")
            page.get_by_role("button", name="Submit", exact=True).first.click(timeout=60_000)
            wait_for(lambda: len(list(inbound.iterdir())) > before, 60, "the submission in the exchange")
        except Exception:
            (ROOT / "test-artifacts" / "browser").mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ROOT / "test-artifacts" / "browser" / "hub-assignments.png"))
            raise
        finally:
            chromium.close()
