"""The repository's promises: installs agree, CI runs README's command, the wheel carries no answers."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile


from conftest import ROOT


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    conda = set()
    text = (ROOT / "environment.yml").read_text()
    for line in text.split("dependencies:", 1)[1].splitlines():
        m = re.match(r"\s+-\s+([A-Za-z][\w.-]*)", line)
        if m and m.group(1) not in ("pip", "python"):
            conda.add(m.group(1).lower())
    conda = {"torch" if n == "pytorch" else n for n in conda}
    assert wanted == conda, f"only in pyproject: {wanted - conda}; only in environment.yml: {conda - wanted}"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make lab" in readme
    assert re.search(r"^make test$", ci, re.M), ".ci/run must run README's test command"


def test_console_script_and_module_agree():
    out = subprocess.run([sys.executable, "-m", "grader", "--help"], capture_output=True, text=True, check=True)
    for verb in ("release", "run", "autograde", "doctor"):
        assert verb in out.stdout


def test_doctor_runs():
    out = subprocess.run([sys.executable, "-m", "grader", "doctor"], capture_output=True, text=True)
    assert "torch" in out.stdout and "data" in out.stdout


def test_nbgrader_config_points_at_the_course():
    text = (ROOT / "nbgrader_config.py").read_text()
    assert 'source_directory = "solutions"' in text and 'release_directory = "notebooks"' in text


def _hidden_assert_lines() -> set[str]:
    """Every line of a hidden test (a check call with its `want` and `why`) in the instructor notebooks."""
    import nbformat

    lines = set()
    for path in (ROOT / "solutions").glob("*/*.ipynb"):
        for cell in nbformat.read(str(path), as_version=4).cells:
            if "### BEGIN HIDDEN TESTS" in cell.source:
                hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
                lines |= {ln.strip() for ln in hidden.splitlines() if len(ln.strip()) > 12}
    return lines


def test_wheel_has_data_and_no_answers(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    wheel = zipfile.ZipFile(next(tmp_path.glob("*.whl")))
    names = wheel.namelist()
    assert "grader/data/chips.csv" in names
    assert "grader/checks/keys/01_crossover.json" in names  # the keyed checks' digests travel with the package
    assert not [n for n in names if "judges" in n]  # their judges, which hold the answers, do not
    assert not [n for n in names if n.endswith(".ipynb") or n.startswith(("solutions/", "tests/", "scripts/"))]
    hidden = _hidden_assert_lines()
    assert hidden
    for name in names:
        text = wheel.read(name).decode("utf-8", "replace")
        leaked = [line for line in hidden if line in text]
        assert not leaked, f"{name} holds hidden tests: {leaked[:2]}"
    # Installed from the wheel alone (no checkout anywhere on the path), grader finds its data inside itself.
    site = tmp_path / "site"
    wheel.extractall(site)
    code = "from grader.specs import data_dir, load_chips; print(data_dir()); print(len(load_chips()))"
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {code}"],
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    found, count = out.stdout.split()
    assert found == str(site / "grader" / "data") and int(count) > 5
    keyed = ("from grader.checks import lesson01; lesson01.check_intensity(lambda f, b: f / b)")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {keyed}"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0 and "✓" in out.stdout, out.stderr[-2000:]
