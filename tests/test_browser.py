"""The lessons as a learner opens them: JupyterLab in headless Chromium, driven by Playwright.

For every student notebook: run the blank release cell by cell (the only errors
may be the exercise stubs' NotImplementedError), then run a copy with the
exercises filled in, as a learner who finished would have it (no errors, every
check passes, the figures appear, the widget renders and answers a change).
Screenshots go to test-artifacts/browser/. Skipped, with the reason, where
Chromium or Playwright is missing; .ci/run installs both.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, lesson_ids
from notebook_cells import solution_cells

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "test-artifacts" / "browser"
TOKEN = "course-browser-test"

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
    pytest.mark.xdist_group("browser"),  # one JupyterLab server and one browser for all of them
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _filled_in(lesson: str) -> nbformat.NotebookNode:
    """The student notebook with every exercise written, as a learner who finished would save it."""
    nb = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    answers = solution_cells(lesson)
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in answers and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            cell.source = answers[grade_id]  # the solution markers are only comments
    return nb


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on loopback, serving a scratch copy of the student notebooks."""
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    work = tmp_path_factory.mktemp("lab")
    for lesson in lesson_ids():
        shutil.copytree(ROOT / "notebooks" / lesson, work / lesson)
        nbformat.write(_filled_in(lesson), str(work / lesson / f"{lesson}_done.ipynb"))
    # A learner's JupyterLab, minus the "get notified about Jupyter news?" prompt over the outputs.
    settings = work / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port = _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(work / ".jupyter"), JUPYTER_RUNTIME_DIR=str(work / ".runtime"))
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", "--allow-root", f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.user_settings_dir={work / '.settings'}",
         "--ServerApp.disable_check_xsrf=True", "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail("JupyterLab did not start within 60 s")
    yield base
    server.terminate()
    server.wait(timeout=20)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"],
        )
        yield chromium
        chromium.close()


# JavaScript run in the page through the app JupyterLab exposes (expose_app_in_browser).
_WAIT_READY = """async () => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  await panel.context.ready;
  await panel.sessionContext.ready;
  return panel.content.widgets.length;
}"""

_RUN_CELL = """async (i) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  panel.content.activeCellIndex = i;
  await app.commands.execute('notebook:run-cell');
  return true;
}"""

_RUN_ALL = """async () => {
  const app = window.jupyterapp;
  await app.commands.execute('notebook:run-all-cells');
  return true;
}"""

_OUTPUTS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets.map((cell, i) => {
    if (cell.model.type !== 'code') return {i, type: cell.model.type, outputs: []};
    return {i, type: 'code', count: cell.model.executionCount, outputs: cell.model.outputs.toJSON()};
  });
}"""


def _open(page, base: str, path: str) -> int:
    page.goto(f"{base}/lab/tree/{path}?token={TOKEN}&reset", wait_until="domcontentloaded")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                           "window.jupyterapp.shell.currentWidget.sessionContext", timeout=60_000)
    return page.evaluate(_WAIT_READY)


def _change_first_control(box) -> None:
    """Change the widget's first control as a person would: pick another option, or type a new number."""
    dropdown = box.locator(".widget-dropdown select")
    if dropdown.count():
        options = dropdown.first.locator("option")
        assert options.count() >= 2, "the widget's dropdown has a single option"
        dropdown.first.select_option(index=options.count() - 1)
        return
    text = box.locator(".widget-text input")
    assert text.count(), "the widget has neither a dropdown nor a text box to change"
    text.first.fill("65504")
    text.first.press("Enter")


def _errors(cells) -> list[tuple[int, str, str]]:
    return [(c["i"], o.get("ename"), o.get("evalue")) for c in cells for o in c["outputs"] if o.get("output_type") == "error"]


@pytest.mark.parametrize("lesson", lesson_ids())
def test_blank_notebook_fails_only_at_the_exercises(lab, browser, lesson):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    n = _open(page, lab, f"{lesson}/{lesson}.ipynb")
    for i in range(n):
        page.evaluate(_RUN_CELL, i)
    cells = page.evaluate(_OUTPUTS)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{lesson}-blank.png"), full_page=False)
    errors = _errors(cells)
    assert errors, "the blank notebook raised nothing: are the exercises stubs?"
    assert {e[1] for e in errors} == {"NotImplementedError"}, f"errors other than the stubs: {errors}"
    page.close()


@pytest.mark.parametrize("lesson", lesson_ids())
def test_finished_notebook_shows_figures_and_a_live_widget(lab, browser, lesson):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    _open(page, lab, f"{lesson}/{lesson}_done.ipynb")
    page.evaluate(_RUN_ALL)
    cells = page.evaluate(_OUTPUTS)
    assert not _errors(cells), f"a finished notebook raised: {_errors(cells)}"
    unrun = [c["i"] for c in cells if c["type"] == "code" and c["count"] is None]
    assert not unrun, f"cells {unrun} did not run"
    text = json.dumps(cells)
    assert "all checks passed" in text
    images = page.locator(".jp-OutputArea-output img")
    images.first.wait_for(timeout=30_000)
    assert images.count() >= 1, "no figure appeared"
    box = page.locator(".jp-OutputArea-output .widget-vbox").first
    box.wait_for(timeout=30_000)
    box.scroll_into_view_if_needed()
    before = box.inner_text()
    figure = box.locator("img").first
    figure_before = figure.get_attribute("src") if figure.count() else None
    _change_first_control(box)
    page.wait_for_function("([el, before]) => el.innerText !== before", arg=[box.element_handle(), before], timeout=30_000)
    if figure_before is not None:  # the widget's figure is redrawn too, not only its text
        page.wait_for_function("([el, src]) => { const img = el.querySelector('img'); return img && img.src !== src; }",
                               arg=[box.element_handle(), figure_before], timeout=30_000)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    box.screenshot(path=str(ARTIFACTS / f"{lesson}-widget.png"))
    page.screenshot(path=str(ARTIFACTS / f"{lesson}-done.png"), full_page=False)
    page.close()


@pytest.mark.parametrize("lesson", lesson_ids())
def test_presenter_slides_render_with_maths(lab, browser, lesson):
    """jupyterlab-rise turns the notebook into slides, one per section heading, with the maths typeset."""
    nb = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    headings = [c for c in nb.cells if c.get("metadata", {}).get("slideshow", {}).get("slide_type") == "slide"]
    has_maths = any("$" in c.source for c in nb.cells if c.cell_type == "markdown")
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{lab}/rise/{lesson}/{lesson}.ipynb?token={TOKEN}", wait_until="domcontentloaded")
    page.locator(".reveal .slides > section").first.wait_for(timeout=60_000)
    assert page.locator(".reveal .slides > section").count() == len(headings) >= 3
    if has_maths:
        page.locator("mjx-container").first.wait_for(state="attached", timeout=30_000)
    page.keyboard.press("ArrowRight")
    page.wait_for_timeout(500)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{lesson}-slides.png"))
    page.close()
