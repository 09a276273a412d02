"""The lessons as a learner and a presenter see them: JupyterLab in headless Chromium, driven by Playwright.

At 1280×800 and 1024×768:
- a blank lesson (the first), Run All: it stops at the first check cell with one short "not done yet"
  line (the show cells before it skip with a note), as the lesson's opening says;
- a finished lesson, Run All: no error, every check passes, figures and widgets appear,
  and no control, figure or table of a widget reaches past its output area or the window; no printed
  word is broken across two lines (lab-config/custom/custom.css, loaded by grader/pipeline/lab_pages.py);
  a widget redraws its verdict and its one figure, in place, when a control changes;
- a presenter copy (`python -m grader run --demo`) as RISE slides: one slide per section,
  each showing no solution, no "BEGIN SOLUTION" and no hidden tests, fitting the window;
- `make present` (one server, every deck set up in its kernel, shared by these tests), each deck's
  slides page at 1280×800: no request outside the server, no 404, no console error at all, Ctrl-Enter
  reruns a printing cell and its slide stays with the new output, no printed word on any slide is broken
  across lines; on one deck, ↓ works without a click, a widget on its slide redraws its verdict and its one
  figure, in place, on a change, and a cell that uses an exercise's answer reruns (Shift-Enter).
And a learner's second day: a second `make lab` while the first server is up reuses it.
And without a browser: a blank release run cell by cell (nbclient), where no show cell
fails and every error a learner meets is one short line with no frames from the package.

Screenshots go to test-artifacts/browser/, named for what they show. The browser tests
skip, saying why, where Chromium or Playwright is missing; .ci/run installs both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, blank_run_group, lesson_ids
from notebook_cells import solution_cells

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "test-artifacts" / "browser"
TOKEN = "course-browser-test"
VIEWPORTS = {"1280x800": {"width": 1280, "height": 800}, "1024x768": {"width": 1024, "height": 768}}
PRESENTED = "01_crossover"  # the lesson whose presenter copy is shown as slides
# The decks presented: every lesson's. Setting them up runs each lesson once (demo sizes) in the kernel its deck
# is shown with; GRADER_DECKS=01_crossover,08_inside_a_kernel presents only those (a quicker local run).
DECKS = [d for d in os.environ.get("GRADER_DECKS", "").split(",") if d] or lesson_ids()
# What a learner may meet as an error: an unfinished exercise, or a check that names a mistake.
LEARNER_ERRORS = {"NotDone", "NotImplementedError", "CheckFailed"}

# Waits in the page are generous (PATIENCE times what they take on a quiet 2-core machine, or more): a wait
# that passes returns as soon as it can, and `make test` on a loaded machine (load average 20) is far slower.
PATIENCE = 4


def _ms(seconds: float) -> float:
    """A page wait of `seconds` on a quiet machine, in Playwright's milliseconds, times PATIENCE."""
    return seconds * 1000 * PATIENCE


# One JupyterLab server and one browser for all the browser tests: they share an xdist worker.
in_browser = pytest.mark.xdist_group("browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _filled_in(lesson: str) -> nbformat.NotebookNode:
    """The student notebook with every exercise written, as a learner who finished would save it.

    Its parameters say demo = True (the quickest settings that still show every point), to keep the test short.
    """
    nb = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    answers = solution_cells(lesson)
    for cell in nb.cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell.source = re.sub(r"^demo = False", "demo = True", cell.source, flags=re.M)
        if _nbgrader(cell).get("grade_id") in answers and _nbgrader(cell).get("solution"):
            cell.source = answers[_nbgrader(cell)["grade_id"]]  # the solution markers are only comments
    return nb


def _secret_lines(lesson: str) -> list[str]:
    """Lines of the instructor source that learners never see: solution bodies and hidden tests."""
    release = json.dumps(nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4).cells)
    source = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    secret = []
    for cell in source.cells:
        for region in re.findall(r"### BEGIN (?:SOLUTION|HIDDEN TESTS)(.*?)### END", cell.source, re.S):
            for line in region.splitlines():
                line = line.strip()
                if len(line) > 15 and json.dumps(line)[1:-1] not in release:
                    secret.append(line)
    return secret


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.fixture(scope="module")
def presenting(tmp_path_factory):
    """`make present` for DECKS, once for all the tests that present: (its banner, its decks' folder).

    One server: each deck is run in the kernel it is shown with (demo sizes), as a presenter's are.
    """
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    folder = tmp_path_factory.mktemp("present")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(folder / "runtime"))
    decks = [arg for lesson in DECKS for arg in ("--deck", lesson)]
    server, text = _lab_until_banner(folder / "decks", env, "--presenter", *decks)
    try:
        assert all(f"{lesson}: ok" in text for lesson in DECKS), text
        yield text, folder / "decks"
    finally:
        server.send_signal(__import__("signal").SIGINT)
        server.wait(timeout=60)


@pytest.fixture(scope="module")
def presenter_copy(presenting) -> Path:
    """The presenter copy of one lesson, as `python -m grader run --demo` writes it (the same `presented` deck)."""
    out = presenting[1]
    assert (out / "rise.css").exists() and (out / f"{PRESENTED}.css").exists()
    return out / f"{PRESENTED}.ipynb"


@pytest.fixture(scope="module")
def lab(tmp_path_factory, presenter_copy):
    """A JupyterLab server on loopback, serving scratch copies of the student notebooks and the presenter copy."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    work = tmp_path_factory.mktemp("lab")
    for lesson in lesson_ids():
        shutil.copytree(ROOT / "notebooks" / lesson, work / lesson)
        nbformat.write(_filled_in(lesson), str(work / lesson / f"{lesson}_done.ipynb"))
    (work / "presenter").mkdir()
    for name in (presenter_copy.name, "rise.css", f"{PRESENTED}.css"):  # the copy and its styles
        shutil.copy(presenter_copy.parent / name, work / "presenter" / name)
    # A learner's JupyterLab, minus the "get notified about Jupyter news?" prompt over the outputs.
    settings = work / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    # No autosave: a test whose page stayed open two minutes (a loaded machine) saved a blank lesson with its errors,
    # and a later Run All on it read the stale errors below where it stopped (CI, 01_crossover at 1024x768).
    docmanager = work / ".settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text('{"autosave": false}')
    port = _free_port()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(work / ".jupyter"), JUPYTER_RUNTIME_DIR=str(work / ".runtime"),
               JUPYTER_CONFIG_PATH=str(ROOT / "lab-config" / "learner"))  # the learner's config, as `make lab`
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", "--allow-root", f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.user_settings_dir={work / '.settings'}",
         "--ServerApp.disable_check_xsrf=True", "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    # Generous: JupyterLab starts in about 5 s on a quiet 2-core machine and took over 60 s at load average 20.
    deadline = time.time() + 300
    while time.time() < deadline and server.poll() is None:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=5)
            break
        except OSError:
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail(f"JupyterLab did not start within 300 s (exit code {server.poll()})")
    yield base
    server.terminate()
    server.wait(timeout=60)


@pytest.fixture(scope="module")
def browser(lab):
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

_RUN_ALL = """async () => {
  const app = window.jupyterapp;
  await app.commands.execute('notebook:clear-all-cell-outputs');  // only this run's outputs are read after it
  await app.commands.execute('notebook:run-all-cells');
  return true;
}"""

_OUTPUTS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  return panel.content.widgets.map((cell, i) => {
    const meta = cell.model.getMetadata ? cell.model.getMetadata('nbgrader') : undefined;
    if (cell.model.type !== 'code') return {i, type: cell.model.type, source: cell.model.sharedModel.getSource(), outputs: []};
    const shown = [...cell.node.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText);
    return {i, type: 'code', nbgrader: meta || null, count: cell.model.executionCount,
            outputs: cell.model.outputs.toJSON(), shown};
  });
}"""

# Every control, figure and table of every widget, measured against its output area and the window.
_CLIPPED = """() => {
  const vw = document.documentElement.clientWidth;
  const bad = [];
  const boxes = [...document.querySelectorAll('.jp-OutputArea-output .widget-vbox')].filter(b => !b.parentElement.closest('.widget-vbox'));
  boxes.forEach((box, k) => {
    const area = box.closest('.jp-OutputArea-output').getBoundingClientRect();
    const parts = box.querySelectorAll('.widget-dropdown, .widget-hslider, .widget-checkbox, .widget-text, '
      + '.widget-button, .widget-toggle-buttons, .widget-inline-hbox, img, table');
    parts.forEach(el => {
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) return;
      if (r.left < area.left - 1 || r.right > area.right + 1 || r.right > vw + 1) {
        bad.push({widget: k, what: el.className || el.tagName, text: (el.innerText || '').slice(0, 40),
                  left: Math.round(r.left), right: Math.round(r.right),
                  area: [Math.round(area.left), Math.round(area.right)], window: vw});
      }
    });
    if (box.scrollWidth > box.clientWidth + 1) bad.push({widget: k, what: 'the panel scrolls sideways', width: box.scrollWidth, room: box.clientWidth});
  });
  return {count: boxes.length, bad};
}"""


# A widget's figures: every <img> in the output area of the cell that shows the widget `box`, whether it is the
# widget's own and comes after the widget's last control; and the controls' chosen values, as shown.
_FIGURES_OF = """(box) => {
  const area = box.closest('.jp-Cell-outputArea') || box.closest('.jp-OutputArea') || box.parentElement;
  const controls = [...box.querySelectorAll('select, input')];
  const last = controls[controls.length - 1];
  return {figures: [...area.querySelectorAll('img')].map(img => ({
            src: img.src, own: box.contains(img),
            afterControls: !!last && !!(last.compareDocumentPosition(img) & Node.DOCUMENT_POSITION_FOLLOWING)})),
          chosen: [...box.querySelectorAll('select')].map(s => s.selectedOptions[0] ? s.selectedOptions[0].text : '')};
}"""


def _one_figure(box) -> str:
    """The src of the one figure the cell showing `box` has: the widget's own, after its controls."""
    figures = box.evaluate(_FIGURES_OF)["figures"]
    assert len(figures) == 1 and figures[0]["own"] and figures[0]["afterControls"], \
        f"the widget's cell should show one figure, the widget's own, after its controls: " \
        f"{[dict(f, src=f['src'][:40] + '...') for f in figures]}"
    return figures[0]["src"]


# Bring an output to the top of the notebook (JupyterLab scrolls its own panel, not the page).
_SCROLL_TO = """async (el) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const node = el.closest('.jp-Cell');
  const i = panel.content.widgets.findIndex(c => c.node === node);
  if (i >= 0) { panel.content.activeCellIndex = i; await panel.content.scrollToItem(i, 'start'); }
  el.scrollIntoView({block: 'start'});
  return i;
}"""


def _page(browser, size: str):
    """A new page at `size`, whose every wait (Playwright's default 30 s) is PATIENCE times longer."""
    page = browser.new_page(viewport=VIEWPORTS[size])
    page.set_default_timeout(_ms(30))
    return page


def _open(page, base: str, path: str) -> int:
    page.goto(f"{base}/lab/tree/{path}?token={TOKEN}&reset", wait_until="domcontentloaded")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                           "window.jupyterapp.shell.currentWidget.sessionContext", timeout=_ms(60))
    return page.evaluate(_WAIT_READY)


def _shot(page_or_element, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page_or_element.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def _shot_output(page, element, name: str) -> None:
    """A screenshot of one output as it sits in the notebook: centred in the notebook's panel, clipped to the window."""
    element.evaluate("el => el.scrollIntoView({block: 'center'})")
    page.wait_for_timeout(150)
    box, view = element.bounding_box(), page.viewport_size
    if not box:
        return
    left, top = max(box["x"], 0), max(box["y"], 0)
    right, bottom = min(box["x"] + box["width"], view["width"]), min(box["y"] + box["height"], view["height"])
    if right > left and bottom > top:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), clip=dict(x=left, y=top, width=right - left, height=bottom - top))


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


def _errors(cells) -> list[dict]:
    return [dict(i=c["i"], ename=o.get("ename"), evalue=o.get("evalue"), nbgrader=c.get("nbgrader"),
                 shown="\n".join(c.get("shown", [])))
            for c in cells for o in c["outputs"] if o.get("output_type") == "error"]


def _is_check(meta: dict | None) -> bool:
    return bool(meta) and bool(meta.get("grade")) and not meta.get("solution")


@in_browser
@pytest.mark.parametrize("lesson", lesson_ids()[:1])
def test_blank_lesson_run_all_stops_at_the_first_check_with_one_line(lab, browser, lesson):
    """Run All once (the kernel's run does not depend on the window), then read what it showed at each size."""
    sizes = list(VIEWPORTS)
    page = _page(browser, sizes[0])
    _open(page, lab, f"{lesson}/{lesson}.ipynb")
    page.evaluate(_RUN_ALL)
    seen = {}
    for size in sizes:
        page.set_viewport_size(VIEWPORTS[size])
        page.wait_for_timeout(300)
        cells = page.evaluate(_OUTPUTS)
        seen[size] = cells
        first_error = next((c for c in cells if c["type"] == "code" and _errors([c])), None)
        if first_error is not None:  # the notebook renders only the cells in view: scroll through the notebook's own API
            page.evaluate("""async (i) => {
              const notebook = window.jupyterapp.shell.currentWidget.content;
              notebook.activeCellIndex = i;
              await notebook.scrollToItem(i, 'center');
            }""", first_error["i"])
            page.wait_for_timeout(500)
        _shot(page, f"{lesson}-blank-run-all-{size}")
    page.close()
    for size, cells in seen.items():
        errors = _errors(cells)
        opening = " ".join(c["source"] for c in cells[:6] if c["type"] == "markdown")
        assert "Run All" in opening, "the lesson's opening does not say where Run All stops"
        assert len(errors) == 1, f"{size}: Run All on a blank lesson should stop at one error, got {errors}"
        (error,) = errors
        assert _is_check(error["nbgrader"]), f"{size}: Run All stopped in cell {error['i']}, which is not a check cell: {error}"
        assert error["ename"] == "NotDone", f"a blank exercise should say NotDone, not {error['ename']}: {error['evalue']}"
        assert "not done yet" in error["evalue"], error["evalue"]
        shown = error["shown"].strip()
        assert len(shown.splitlines()) <= 2 and "Traceback" not in shown and "grader/" not in shown, \
            f"{size}: a learner sees more than one line for an unfinished exercise:\n{shown}"
        ran = [c for c in cells if c["type"] == "code" and c["i"] < error["i"]]
        assert all(c["count"] is not None for c in ran), "Run All skipped cells before the first check"


def _solved(page, lab: str, lesson: str) -> list[dict]:
    _open(page, lab, f"{lesson}/{lesson}_done.ipynb")
    page.evaluate(_RUN_ALL)
    return page.evaluate(_OUTPUTS)


@in_browser
@pytest.mark.parametrize("lesson", lesson_ids())
def test_finished_lesson_shows_figures_and_widgets_that_fit(lab, browser, lesson):
    """Run once at 1024×768, the narrowest window a learner should have, then look again at 1280×800."""
    page = _page(browser, "1024x768")
    cells = _solved(page, lab, lesson)
    assert not _errors(cells), f"a finished notebook raised: {_errors(cells)}"
    unrun = [c["i"] for c in cells if c["type"] == "code" and c["count"] is None]
    assert not unrun, f"cells {unrun} did not run"
    assert "all checks passed" in json.dumps(cells)
    images = page.locator(".jp-OutputArea-output img")
    images.first.wait_for(timeout=_ms(30))
    for k in range(min(images.count(), 8)):
        _shot_output(page, images.nth(k), f"{lesson}-figure-{k + 1}-1024x768")
    box = page.locator(".jp-OutputArea-output .widget-vbox").first
    box.wait_for(timeout=_ms(30))
    clipped, broken = {}, {}
    for size in ("1024x768", "1280x800"):
        page.set_viewport_size(VIEWPORTS[size])
        page.wait_for_timeout(300)
        page.evaluate(_SCROLL_TO, box.element_handle())
        page.wait_for_timeout(300)
        _shot(page, f"{lesson}-widget-{size}")
        found = page.evaluate(_CLIPPED)
        assert found["count"] >= 1, "no widget appeared"
        clipped[size] = found["bad"]
        broken[size] = page.evaluate(_BROKEN_IN_NOTEBOOK)
        page.evaluate(_SCROLL_TO, box.element_handle())  # back to the widget
        page.wait_for_timeout(300)
    # the widget answers a change: its text and its figure are redrawn
    before = box.inner_text()
    figure_before = _one_figure(box) if box.evaluate(_FIGURES_OF)["figures"] else None  # a figure: the widget's own
    _change_first_control(box)
    page.wait_for_function("([el, before]) => el.innerText !== before", arg=[box.element_handle(), before], timeout=_ms(30))
    if figure_before is not None:
        page.wait_for_function("([el, src]) => { const img = el.querySelector('img'); return img && img.src !== src; }",
                               arg=[box.element_handle(), figure_before], timeout=_ms(30))
        _one_figure(box)  # redrawn in its place, not added beside it
    page.close()
    assert not any(clipped.values()), f"widget parts reach past their output area or the window: {clipped}"
    assert not any(broken.values()), f"printed words broken across lines in the lab: {broken}"


@in_browser
def test_presenter_slides_fit_and_show_no_answers(lab, browser, presenter_copy):
    """The presenter copy as RISE slides at each size: one slide per section, no solutions or hidden tests, fitting."""
    nb = nbformat.read(str(presenter_copy), as_version=4)
    sections = [c for c in nb.cells if c.get("metadata", {}).get("slideshow", {}).get("slide_type") == "slide"]
    secrets = _secret_lines(PRESENTED)
    assert secrets, "found no solution lines to look for"
    has_maths = any("$" in c.source for c in nb.cells if c.cell_type == "markdown")
    page = _page(browser, "1280x800")
    page.goto(f"{lab}/rise/presenter/{presenter_copy.name}?token={TOKEN}", wait_until="domcontentloaded")
    slides = page.locator(".reveal .slides > section")
    slides.first.wait_for(timeout=_ms(60))
    assert slides.count() == len(sections) >= 3, f"{slides.count()} slides for {len(sections)} sections"
    if has_maths:
        page.locator("mjx-container").first.wait_for(state="attached", timeout=_ms(30))
    if "widget-view+json" in json.dumps(nb.cells):  # no kernel has run this deck: widgets show from their saved state
        box = page.locator(".reveal .widget-vbox").first
        box.wait_for(state="attached", timeout=_ms(30))
        assert "VBox(" not in page.locator(".reveal .slides").inner_text(), "a widget shows as its text repr"
        box.locator("img").first.wait_for(state="attached", timeout=_ms(30))
        _one_figure(box)  # the widget's figure is in its saved state, not a stale image beside it
    problems = []
    for size in VIEWPORTS:
        page.set_viewport_size(VIEWPORTS[size])
        for k in range(slides.count()):
            page.evaluate(f"() => {{ window.location.hash = '#/{k}'; }}")
            page.wait_for_function(f"() => document.querySelectorAll('.reveal .slides > section')[{k}].classList.contains('present')",
                                   timeout=_ms(10))
            page.wait_for_timeout(250)
            _shot(page, f"presenter-{PRESENTED}-section-{k + 1:02d}-{size}")
            text = slides.nth(k).evaluate("el => el.textContent")
            for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS"):
                if marker in text:
                    problems.append(f"{size} slide {k + 1} shows {marker!r}")
            problems += [f"{size} slide {k + 1} shows solution text {line!r}" for line in secrets if line in text]
            fit = page.evaluate("""() => {
              const el = document.querySelector('.reveal .slides section.present section.present')
                      || document.querySelector('.reveal .slides > section.present');
              const r = el.getBoundingClientRect(), style = getComputedStyle(el);
              return {right: r.right, width: document.documentElement.clientWidth, tall: el.scrollHeight > el.clientHeight + 2,
                      scrolls: ['auto', 'scroll'].includes(style.overflowY)};
            }""")
            if fit["right"] > fit["width"] + 1:
                problems.append(f"{size} slide {k + 1} is wider than the window: {fit}")
            if fit["tall"] and not fit["scrolls"]:
                problems.append(f"{size} slide {k + 1} is taller than the screen and does not scroll: {fit}")
    page.close()
    assert not problems, "\n".join(problems)


def _subslides(nb: nbformat.NotebookNode) -> list[tuple[int, int]]:
    """Where each cell of a marked deck is shown: (slide, subslide), or (-1, -1) for a cell that is no slide."""
    where, i, j = [], -1, 0
    for cell in nb.cells:
        kind = cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")
        if kind == "skip":
            where.append((-1, -1))
            continue
        if kind == "slide" or i < 0:
            i, j = i + 1, 0
        elif kind == "subslide":
            j += 1
        where.append((i, j))
    return where


def _go(page, i: int, j: int) -> None:
    # set again while waiting: a hash set before reveal.js is ready is replaced by the first slide's
    target = f"#/slide-{i}-{j}"
    for _ in range(5):
        page.wait_for_function("(h) => { if (window.location.hash !== h) window.location.hash = h; "
                               "return window.location.hash === h && document.querySelector('.reveal.ready section.present'); }",
                               arg=target, timeout=_ms(10), polling=500)
        page.wait_for_timeout(800)  # RISE selects the subslide's code cell after 450 ms
        # Under a full suite's load RISE can finish starting after the hash took, and move back to the first slide (CI
        # twice: the deck test then waited 120 s on the title slide for a code cell): go again until it stays.
        if page.evaluate("() => window.location.hash") == target:
            return


@in_browser
def test_presenting_live_full_screen(browser, presenting):
    """`make present`, one deck's slides page at 1280×800 as printed: ↓ works without a click, a widget on
    its slide answers a change (its model is in the kernel the deck was run in), and a cell that uses an exercise's
    answer reruns on its slide (Shift-Enter) with the instructor's answer, though the slide shows only the stub."""
    text, decks = presenting
    rise = re.search(rf"^  (http://127\.0\.0\.1:\d+/rise/{PRESENTED}\.ipynb\?token=\w+)$", text, re.M)
    assert rise and f"{PRESENTED}: ok" in text, text
    deck = nbformat.read(str(decks / f"{PRESENTED}.ipynb"), as_version=4)
    where = _subslides(deck)
    answers = {re.search(r"def (\w+)", c.source).group(1) for c in nbformat.read(
        str(ROOT / "solutions" / PRESENTED / f"{PRESENTED}.ipynb"), as_version=4).cells
        if _nbgrader(c).get("solution") and re.search(r"def (\w+)", c.source)}
    uses = next(k for k, c in enumerate(deck.cells) if c.cell_type == "code" and not _nbgrader(c) and where[k][0] >= 0
                and any(re.search(rf"\b{name}\(", c.source) for name in answers) and "def " not in c.source)

    page = _page(browser, "1280x800")
    page.goto(rise.group(1), wait_until="domcontentloaded")
    page.locator(".reveal .slides > section").first.wait_for(timeout=_ms(60))
    page.wait_for_function("() => document.activeElement && document.activeElement.closest('.reveal .jp-Notebook')",
                           timeout=_ms(30))
    page.keyboard.press("ArrowDown")  # no click first
    page.wait_for_function("() => window.location.hash === '#/slide-0-1'", timeout=_ms(10))

    widget = next(k for k, c in enumerate(deck.cells) if "application/vnd.jupyter.widget-view+json" in str(c.get("outputs")))
    _go(page, *where[widget])
    box = page.locator(".reveal section.present section.present .widget-vbox").first
    box.wait_for(timeout=_ms(30))
    assert "VBox(" not in page.locator(".reveal section.present section.present").inner_text()
    box.scroll_into_view_if_needed()
    before = box.inner_text()
    figure = _one_figure(box)
    _change_first_control(box)
    page.wait_for_function("([el, before, src]) => el.innerText !== before && "
                           "[...el.querySelectorAll('img')].some(img => img.src !== src)",
                           arg=[box.element_handle(), before, figure], timeout=_ms(30))
    assert _one_figure(box) != figure, "the figure on the slide was not redrawn"
    chip = box.evaluate(_FIGURES_OF)["chosen"][0]
    assert chip.replace("\xa0", " ") in box.inner_text().replace("\xa0", " "), f"the verdict does not name {chip}"
    box.locator("img").first.evaluate("img => img.scrollIntoView({block: 'end'})")  # the figure, its legend in view
    page.wait_for_timeout(500)
    _shot(page, f"present-{PRESENTED}-live-widget-1280x800")
    page.set_viewport_size(VIEWPORTS["1024x768"])  # a projector's narrower window: the figure still fits
    page.wait_for_timeout(500)
    box.locator("img").first.evaluate("img => img.scrollIntoView({block: 'end'})")
    _shot(page, f"present-{PRESENTED}-live-widget-1024x768")
    right = box.locator("img").first.evaluate("img => img.getBoundingClientRect().right")
    assert right <= VIEWPORTS["1024x768"]["width"], f"the widget's figure reaches past a 1024-px window ({right} px)"
    page.set_viewport_size(VIEWPORTS["1280x800"])

    _go(page, *where[uses])
    slide = page.locator(".reveal section.present section.present")
    count_before = slide.locator(".jp-CodeCell .jp-InputArea-prompt").first.inner_text()
    page.keyboard.press("Shift+Enter")  # RISE runs the selected cell, then moves on (Ctrl-Enter stays: below)
    _go(page, *where[uses])
    page.wait_for_function("(before) => { const p = document.querySelector('.reveal section.present section.present "
                           ".jp-CodeCell .jp-InputArea-prompt'); return p && p.innerText !== before && !p.innerText.includes('*'); }",
                           arg=count_before, timeout=_ms(60))
    page.wait_for_timeout(500)
    _shot(page, f"present-{PRESENTED}-rerun-cell-1280x800")
    shown = slide.inner_text()
    page.close()
    assert "skipped" not in shown and "Error" not in shown and "not done yet" not in shown, shown
    assert not any(line in shown for line in _secret_lines(PRESENTED)), "a slide shows solution code"

    # the presenter's JupyterLab itself: no news prompt over the deck, no nbgrader instructor panels
    lab_url = re.search(r"^  (http://127\.0\.0\.1:\d+/lab\?token=\w+)$", text, re.M).group(1)
    page = _page(browser, "1280x800")
    page.goto(lab_url.replace("/lab?", f"/lab/tree/{PRESENTED}.ipynb?"), wait_until="domcontentloaded")
    page.locator(".jp-Notebook:visible").first.wait_for(timeout=_ms(60))  # the deck asked for (not a tab behind it)
    tabs = page.locator(".jp-NotebookPanel").count()
    assert tabs == 1, f"the presenter's JupyterLab opened {tabs} notebooks: tabs from another server's workspace"
    page.wait_for_timeout(8_000)  # the news prompt, when on, comes a few seconds after the page
    _shot(page, f"present-{PRESENTED}-jupyterlab-1280x800")
    seen = page.locator("body").inner_text()
    page.close()
    assert "Jupyter news" not in seen, "the news prompt covers the presenter's deck"
    assert "Create Assignment" not in seen and "Validate" not in seen and "Nbgrader" not in seen, \
        "nbgrader's instructor panels show in the presenter's JupyterLab"

# Words of printed text that the browser broke across two lines (JupyterLab's word-break: break-all does), in
# `root`'s outputs; a break after a hyphen, a slash or a dash (4.49–5.32) is a normal one. With `everywhere`, every slide of a deck is
# laid out for the count (reveal.js shows only the slides near the present one), then hidden again.
_BROKEN_WORDS = """(root, everywhere) => {
  const shown = document.createElement('style');
  shown.textContent = '.reveal .slides section { display: block !important; }';
  if (everywhere) document.head.appendChild(shown);
  const broken = [];
  for (const pre of root.querySelectorAll('.jp-OutputArea-output pre')) {
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/[^\\s\\-\\/\u2013\u2014]+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1 && m[0].length < 40) broken.push(m[0]);
      }
    }
  }
  shown.remove();
  return broken.slice(0, 10);
}"""


# The same count over a notebook in JupyterLab, cell by cell: each cell that printed is brought into view first
# (JupyterLab lays out only the cells near the view).
_BROKEN_IN_NOTEBOOK = """async () => {
  const count = %s;
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const broken = [];
  for (let i = 0; i < notebook.widgets.length; i++) {
    const cell = notebook.widgets[i];
    if (cell.model.type !== 'code' || !cell.model.outputs.toJSON().some(o => o.output_type === 'stream')) continue;
    await notebook.scrollToItem(i, 'start');
    await new Promise(done => setTimeout(done, 100));
    broken.push(...count(cell.node, false).map(word => `cell ${i}: ${word}`));
  }
  return broken.slice(0, 10);
}""" % _BROKEN_WORDS


def _watch(page, base: str) -> dict:
    """Every request outside the server (answered with an abort), every console error and page error, every 4xx/5xx."""
    seen = {"outside": [], "errors": [], "failed": []}
    page.route(lambda url: not url.startswith(base), lambda route: (seen["outside"].append(route.request.url),
                                                                    route.abort()))
    page.on("console", lambda m: m.type == "error" and seen["errors"].append(m.text[:300]))
    page.on("pageerror", lambda e: seen["errors"].append(f"uncaught: {str(e)[:300]}"))
    page.on("response", lambda r: r.status >= 400 and seen["failed"].append(f"{r.status} {r.url}"))
    return seen


def _printing_cell(deck: nbformat.NotebookNode, where: list) -> int:
    """The deck's shortest shown code cell that printed text (and shows no widget): the one to rerun on its slide."""
    printed = [k for k, c in enumerate(deck.cells) if c.cell_type == "code" and where[k][0] >= 0
               and any(o.get("output_type") == "stream" and o.get("text", "").strip() for o in c.get("outputs", []))
               and "widget-view" not in json.dumps(c.get("outputs"))]
    assert printed, "the deck has no code cell that prints"
    return min(printed, key=lambda k: len(deck.cells[k].source))


@in_browser
@pytest.mark.parametrize("lesson", DECKS)
def test_every_deck_presents_offline_and_reruns_a_cell_on_its_slide(browser, presenting, lesson):
    """Each deck of `make present` at 1280×800: no request leaves the server, no 404, no console error; Ctrl-Enter
    reruns a printing cell and the slide stays, showing the new output; no printed word on any of its slides is broken
    across lines, at 1280×800 or in a 1024×768 window."""
    text, decks = presenting
    url = re.search(rf"^  (http://127\.0\.0\.1:\d+)/rise/{lesson}\.ipynb\?token=(\w+)$", text, re.M)
    assert url, text
    deck = nbformat.read(str(decks / f"{lesson}.ipynb"), as_version=4)
    where = _subslides(deck)
    cell = _printing_cell(deck, where)
    page = _page(browser, "1280x800")
    seen = _watch(page, url.group(1))
    page.goto(f"{url.group(1)}/rise/{lesson}.ipynb?token={url.group(2)}", wait_until="domcontentloaded")
    page.locator(".reveal .slides > section").first.wait_for(timeout=_ms(60))
    page.wait_for_function("() => document.activeElement && document.activeElement.closest('.reveal .jp-Notebook')",
                           timeout=_ms(30))
    _go(page, *where[cell])
    slide = page.locator(".reveal section.present section.present")
    prompt = slide.locator(".jp-CodeCell .jp-InputArea-prompt").first
    count_before = prompt.inner_text()
    page.keyboard.press("Control+Enter")
    page.wait_for_function("(before) => { const p = document.querySelector('.reveal section.present section.present "
                           ".jp-CodeCell .jp-InputArea-prompt'); return p && p.innerText !== before && !p.innerText.includes('*'); }",
                           arg=count_before, timeout=_ms(60))
    page.wait_for_timeout(500)
    _shot(page, f"present-{lesson}-ctrl-enter-1280x800")
    hash_after = page.evaluate("() => window.location.hash")
    shown = " ".join(slide.inner_text().split())
    printed = " ".join("".join(o.get("text", "") for o in deck.cells[cell].outputs if o.get("output_type") == "stream").split())
    broken = {"1280x800": page.locator(".reveal .slides").evaluate(_BROKEN_WORDS, True)}
    page.set_viewport_size(VIEWPORTS["1024x768"])
    page.wait_for_timeout(500)
    broken["1024x768"] = page.locator(".reveal .slides").evaluate(_BROKEN_WORDS, True)
    page.wait_for_timeout(1000)  # late requests (fonts, styles) still count
    page.close()
    assert hash_after == f"#/slide-{where[cell][0]}-{where[cell][1]}", f"Ctrl-Enter left the slide: {hash_after}"
    word = next((w for w in re.findall(r"[A-Za-z]{4,}", printed)), printed[:10])  # a label, not a timing
    assert word in shown, f"the rerun's output is not on its slide: {word!r} (from {printed[:80]!r}) not in {shown[:300]!r}"
    assert not seen["outside"], f"the deck asked for something outside the server: {seen['outside']}"
    assert not seen["failed"], f"requests that failed: {seen['failed']}"
    assert not seen["errors"], f"console errors: {seen['errors']}"
    assert not any(broken.values()), f"printed words broken across lines on the slides: {broken}"



# --- without a browser -----------------------------------------------------------------------------------


@pytest.mark.parametrize("lesson", [pytest.param(lesson, marks=blank_run_group(lesson)) for lesson in lesson_ids()])
def test_blank_release_errors_are_one_line_and_show_cells_skip(lesson, blank_release):
    """Every cell of the blank release run in turn: show cells never fail; each error is short, from the learner's side.

    The run is conftest's `blank_release` (the release as stored), which tests/test_notebooks.py reads too."""
    nb, _ = blank_release(lesson)
    problems = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") != "error":
                continue
            trace = [_strip_ansi(line) for line in out.get("traceback", [])]
            where = f"cell {i} ({_nbgrader(cell).get('grade_id') or 'show cell'})"
            if not _nbgrader(cell):
                problems.append(f"{where}: a show cell failed with {out['ename']}: {out['evalue']}")
            if out["ename"] not in LEARNER_ERRORS:
                problems.append(f"{where}: {out['ename']} is not an unfinished exercise or a failed check: {out['evalue']}")
            frames = [line for line in "\n".join(trace).splitlines() if "grader/" in line or "site-packages" in line]
            if frames:
                problems.append(f"{where}: the learner sees frames from the package: {frames[:3]}")
    assert not problems, "\n".join(problems)


def test_the_course_pages_extension_finds_what_it_changes(tmp_path):
    """grader/pipeline/lab_pages.py: its fix still matches the installed jupyterlab-rise, it finds the widget manager
    for the slides page, the learner's and presenter's configs turn it on, and custom.css keeps its rule."""
    import jupyterlab_rise
    from jupyter_core.paths import jupyter_path

    from grader.pipeline import lab_pages

    name, old, new = lab_pages.RISE_FIX
    fixed = lab_pages.fixed_rise_static(Path(jupyterlab_rise.__file__).parent / "static", tmp_path / "fixed")
    assert fixed is not None, (f"jupyterlab-rise {jupyterlab_rise.__version__}'s {name} no longer holds the design-token "
                               "code RISE_FIX replaces: see whether its slides page still logs 'Maximum call stack size "
                               "exceeded' (the deck test), then update RISE_FIX or drop it")
    text = (fixed / name).read_text()
    assert new in text and old not in text
    assert lab_pages.fixed_rise_static(tmp_path / "nothing", tmp_path / "unused") is None
    found = lab_pages.rise_labextensions(jupyter_path("labextensions"))
    assert [Path(f).name for f in found] == ["@jupyter-widgets"], found
    assert (Path(found[0]) / "jupyterlab-manager" / "package.json").is_file()
    for who in ("learner", "presenter", "hub/student"):
        config = json.loads((ROOT / "lab-config" / who / "jupyter_server_config.json").read_text())
        assert config["ServerApp"]["jpserver_extensions"]["grader.pipeline.lab_pages"] is True, who
        assert config["LabApp"]["custom_css"] is True, who
    css = (ROOT / "lab-config" / "custom" / "custom.css").read_text()
    # a "*/" inside its comment would end the comment early and the browser would drop the rule after it
    assert re.sub(r"/\*.*?\*/", "", css, flags=re.S).strip().startswith("html body .jp-OutputArea-output pre {")


# --- a learner's second day: `make lab` while yesterday's server still runs ----------------------------------


def _lab_until_banner(folder: Path, env: dict, *flags: str) -> tuple[subprocess.Popen, str]:
    """`python -m grader lab FOLDER --no-browser FLAGS` until its banner is printed (or it exits)."""
    proc = subprocess.Popen([sys.executable, "-m", "grader", "--root", str(ROOT), "lab", str(folder), "--no-browser",
                             *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if sum(l.startswith("===") for l in lines) == 2:
            break
    return proc, "".join(lines)


def test_a_second_make_lab_reuses_the_running_server_and_a_taken_port_is_named(tmp_path):
    """The second `make lab` on the same folder prints the running server's URL (one line says so) and starts
    nothing, so its log has one writer; `--port` on a port another program holds says which port and what to do."""
    import signal

    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))  # only this test's servers
    mine = tmp_path / "mine"
    first, text = _lab_until_banner(mine, env)
    try:
        url = re.search(r"^  (http://127\.0\.0\.1:\d+/lab/tree/00_START_HERE\.ipynb\?token=\w+)$", text, re.M)
        assert url, text
        log_before = (mine / ".jupyter-server.log").read_text()
        second = subprocess.run([sys.executable, "-m", "grader", "--root", str(ROOT), "lab", str(mine), "--no-browser"],
                                capture_output=True, text=True, env=env, timeout=600)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "second-make-lab.txt").write_text(f"$ make lab   # again, the first server still up\n{second.stdout}")
        assert second.returncode == 0, second.stdout + second.stderr
        said = [line for line in second.stdout.splitlines() if "already running" in line]
        assert len(said) == 1 and "using it" in said[0] and f"lab {mine} --stop" in said[0], second.stdout
        assert f"\n  {url.group(1)}\n" in second.stdout, "the second make lab prints the running server's URL"
        assert (mine / ".jupyter-server.log").read_text().startswith(log_before), "a second server wrote the log"
        assert first.poll() is None, "the first server stopped"

        with socket.socket() as held:  # a port some other program holds
            held.bind(("127.0.0.1", 0))
            held.listen()
            port = held.getsockname()[1]
            other = subprocess.run([sys.executable, "-m", "grader", "--root", str(ROOT), "lab", str(tmp_path / "other"),
                                    "--no-browser", "--port", str(port)], capture_output=True, text=True, env=env,
                                   timeout=600)
        assert other.returncode == 1
        (line,) = [l for l in other.stdout.splitlines() if f"Port {port}" in l]
        assert "already in use" in line and "--port" in line, other.stdout
        assert not (tmp_path / "other" / ".jupyter-server.log").exists(), "nothing was started on a taken port"

        stopped = subprocess.run([sys.executable, "-m", "grader", "--root", str(ROOT), "lab", str(mine), "--stop"],
                                 capture_output=True, text=True, env=env, timeout=600)
        assert "Stopped the course server" in stopped.stdout, stopped.stdout
        assert first.wait(timeout=60) == 0, "the first launcher ends when its server is stopped"
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGINT)
            first.wait(timeout=60)


def test_every_link_of_the_course_index_opens_a_file(tmp_path):
    """JupyterLab opens a markdown link to a folder as "File Load Error: data is a directory, not a file"."""
    from grader.pipeline.release import INDEX, workspace

    workspace(ROOT, tmp_path)
    text = nbformat.read(str(tmp_path / INDEX), as_version=4).cells[0].source
    targets = re.findall(r"\]\(([^)#?]+)\)", text)
    assert len(targets) >= len(lesson_ids()) + 3, targets
    assert [t for t in targets if not (tmp_path / t).is_file()] == []
