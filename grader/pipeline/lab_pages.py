"""A Jupyter server extension for the course's own servers: what their pages load.

lab-config/learner/ and lab-config/presenter/ turn it on (`jpserver_extensions`), so only
`make lab` and `make present` (grader.pipeline.lab) use it, never a JupyterLab of your own.

- JupyterLab: lab-config/custom/custom.css, the course's wrapping of printed text (at spaces,
  not mid-word), loaded on every lab page. `LabApp.custom_css` makes the page ask for
  /custom/custom.css, which the server looks up in `ServerApp.static_custom_path`; that list
  is not configurable (it is the user's ~/.jupyter/custom), so this adds the course's folder
  to its front, in place: the handler serving /custom/ holds the same list.

- jupyterlab-rise's slides page (/rise/): it loads every front-end extension installed in the
  environment, and those built for JupyterLab's own page fail on it (Notebook 7's and
  nbgrader's: "Cannot access 'y' before initialization", "The getter for the shared module is
  not a function"). RISE_EXTENSIONS is what a deck needs there (the widget manager: widgets
  on the slides); the page lists only those.

- The slides page's own bundle (jupyterlab-rise 0.43.1) carries @microsoft/fast-foundation
  2.50.0, whose design tokens loop when the notebook's hidden toolbar (a jp-toolbar) is
  attached: a derived token re-evaluates itself from inside its own update, until "RangeError:
  Maximum call stack size exceeded", logged five to forty times on every deck (the same family
  as microsoft/fast#6464). RISE_FIX serves that one file with a re-entrancy guard on the
  update (the outer evaluation's value is kept, the nested one dropped); the installed file is
  not touched. A jupyterlab-rise whose bundle does not hold the exact text is served as it is,
  and the browser test (tests/test_browser.py) fails on the console errors it logs.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CUSTOM = ROOT / "lab-config" / "custom"
# The front-end extensions a deck needs on the slides page, by their package name.
RISE_EXTENSIONS = ("@jupyter-widgets/jupyterlab-manager",)
# (file of jupyterlab-rise's static folder, text in it, what it becomes)
RISE_FIX = (
    "4437.bundle.js",
    "handleChange(){try{this.node.store.set(this.token,this.observer.observe(this.node.target,"
    "s.defaultExecutionContext))}catch(t){console.error(t)}}",
    "handleChange(){if(this._courseBusy)return;this._courseBusy=!0;try{this.node.store.set(this.token,"
    "this.observer.observe(this.node.target,s.defaultExecutionContext))}catch(t){console.error(t)}"
    "finally{this._courseBusy=!1}}",
)


def _jupyter_server_extension_points():
    return [{"module": "grader.pipeline.lab_pages"}]


def _load_jupyter_server_extension(serverapp):
    custom = serverapp.web_app.settings.get("static_custom_path")
    if isinstance(custom, list) and CUSTOM.is_dir() and str(CUSTOM) not in custom:
        custom.insert(0, str(CUSTOM))
    # jupyterlab_rise loads after this extension (they load in name order): adjust it once the server runs
    serverapp.io_loop.add_callback(_adjust_rise, serverapp)


def rise_labextensions(paths: list[str]) -> list[str]:
    """For each of RISE_EXTENSIONS, the scope folder (`@org/`) that holds it, first found in `paths`: the page lists
    what those folders hold (here @jupyter-widgets/: the widget manager alone)."""
    found = []
    for name in RISE_EXTENSIONS:
        scope, _, _ = name.partition("/")
        for base in paths:
            if (Path(base) / name / "package.json").is_file():
                found.append(str(Path(base) / scope))
                break
    return found


def fixed_rise_static(static: Path, out: Path) -> Path | None:
    """`out` holding RISE_FIX's file with the fix applied, or None when `static`'s file has no such text."""
    name, old, new = RISE_FIX
    source = static / name
    text = source.read_text(encoding="utf-8") if source.is_file() else ""
    if text.count(old) != 1:
        return None
    out.mkdir(parents=True, exist_ok=True)
    part = out / f"{name}.{os.getpid()}.part"  # another server may be serving the file: replace it whole
    part.write_text(text.replace(old, new), encoding="utf-8")
    os.replace(part, out / name)
    return out


def _adjust_rise(serverapp) -> None:
    package = serverapp.extension_manager.extensions.get("jupyterlab_rise")
    if package is None:
        return
    for point in package.extension_points.values():
        app = getattr(point, "app", None)
        if app is None or not hasattr(app, "labextensions_path"):
            continue
        own = rise_labextensions(list(app.extra_labextensions_path) + list(app.labextensions_path))
        if len(own) == len(RISE_EXTENSIONS):
            app.extra_labextensions_path, app.labextensions_path = [], own
        paths = getattr(app, "static_paths", None)
        if isinstance(paths, list) and paths:
            from jupyter_core.paths import jupyter_runtime_dir

            # the same text for every server of this user: one folder, rewritten
            fixed = fixed_rise_static(Path(paths[-1]), Path(jupyter_runtime_dir()) / "course-rise-static")
            if fixed is not None:
                paths.insert(0, str(fixed))  # the handler of /static/rise/ holds this list
                serverapp.log.info("course: jupyterlab-rise's %s served with the design-token fix", RISE_FIX[0])
