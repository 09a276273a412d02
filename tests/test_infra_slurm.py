"""README's Slurm recipes, run as written on a real slurm-wlm that the test starts and stops.

munged, slurmctld and two slurmd (two nodes, both this host on 127.0.0.1, each on
a port of its own) come up in about a second. The grading array grades a small class in shards and the merge
joins them; lesson 07's torchrun runs one rank per Slurm node over gloo. Needs
root and Debian's slurm-wlm and munge (.ci/run installs them); skipped elsewhere.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from notebook_cells import honest_predictions
from grader.pipeline.grades import read_csv
from infra_machine import ROOT, Slurm, needs_root
from test_infra_exchange import LESSON, _solved_release

MISSING = needs_root() or next((f"{t} is not installed (apt-get install slurm-wlm munge)" for t in
                                ("munged", "slurmctld", "slurmd", "sbatch") if not shutil.which(t)), None)
pytestmark = [pytest.mark.xdist_group("infra"), pytest.mark.skipif(bool(MISSING), reason=MISSING or "")]


def readme_script(marker: str) -> str:
    """The README's bash block holding `marker` (a line of it), as written."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"README has {len(found)} bash blocks with {marker!r}"
    return found[0]


@pytest.fixture(scope="module")
def slurm():
    folder = Path(tempfile.mkdtemp(prefix="gpu-course-slurm-"))
    folder.chmod(0o755)
    cluster = Slurm(folder, cpus=2)
    start = time.perf_counter()
    try:
        cluster.start()
        cluster.up_seconds = time.perf_counter() - start
        yield cluster
    finally:
        left = cluster.stop()  # every daemon and job step of this cluster, found by its folder and SLURM_CONF
        log = cluster.log()
        shutil.rmtree(folder, ignore_errors=True)
        assert not left, f"Slurm processes outlived the test (killed now): {left}\n{log[-3000:]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_grading_array_runs_as_written_and_merges(slurm, tmp_path):
    submissions, grades = tmp_path / "submissions", tmp_path / "grades"
    for student, notebook in (("ann", _solved_release(LESSON)),
                              ("ben", nbformat.read(str(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"), 4))):
        (submissions / student / LESSON).mkdir(parents=True)
        nbformat.write(notebook, str(submissions / student / LESSON / f"{LESSON}.ipynb"))
        if student == "ann":  # she ran her notebook: her first guesses are handed in beside it
            honest_predictions(LESSON, submissions / student / LESSON)
    script = readme_script("grader autograde /shared/submissions")
    script = (script.replace("/shared/course", str(ROOT)).replace("/shared/submissions", str(submissions))
              .replace("/shared/grades", str(grades)))
    (tmp_path / "grade.sbatch").write_text(script)
    start = time.perf_counter()
    # from an instructor's login shell: the system's PATH, no venv on it (sbatch hands the job this environment)
    plain = {**slurm.env, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    job = subprocess.run(["sbatch", "--wait", "-o", str(tmp_path / "slurm-%A_%a.out"), str(tmp_path / "grade.sbatch")],
                         env=plain, capture_output=True, text=True, timeout=600)
    outs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("slurm-*.out")))
    assert job.returncode == 0, f"{job.stdout}{job.stderr}\n{outs[-3000:]}\n{slurm.log()[-2000:]}"
    array_seconds = time.perf_counter() - start
    shards = sorted(grades.glob("shard-*"))
    assert len(shards) == 4 and any(not list((s / "results").glob("*/*.json")) for s in shards), shards  # empty ones too
    merge = re.search(r"afterwards, once: (.*)", script).group(1)
    start = time.perf_counter()
    merged = subprocess.run(merge, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert merged.returncode == 0, merged.stderr[-3000:]
    rows = read_csv(grades / "all" / "grades.csv")
    totals = {s: (sum(r.score for r in rows if r.student == s), sum(r.max_score for r in rows if r.student == s))
              for s in ("ann", "ben")}
    assert totals["ann"][0] == totals["ann"][1] > 0 and totals["ben"][0] == 0, (totals, outs[-2000:])
    print(f"slurm up in {slurm.up_seconds:.1f} s; array {array_seconds:.1f} s; merge {time.perf_counter() - start:.1f} s")


def test_lesson_07_runs_one_torchrun_per_slurm_node_over_gloo(slurm, tmp_path):
    script = readme_script("scripts/cluster_allreduce.py --sizes small")
    script = (script.replace("/shared/course", str(ROOT)).replace("/shared/recorded", str(tmp_path))
              .replace(":29500", f":{_free_port()}"))
    (tmp_path / "allreduce.sbatch").write_text(script)
    job = subprocess.run(["sbatch", "--wait", "-o", str(tmp_path / "slurm-%j.out"), str(tmp_path / "allreduce.sbatch")],
                         env=slurm.env, capture_output=True, text=True, timeout=300)
    outs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("slurm-*.out")))
    assert job.returncode == 0, f"{job.stdout}{job.stderr}\n{outs[-3000:]}"
    recorded = list(tmp_path.glob("allreduce-*.json"))
    assert len(recorded) == 1, outs[-3000:]
    provenance = json.loads(recorded[0].read_text())["provenance"]
    assert provenance["backend"] == "gloo" and provenance["world_size"] == len(slurm.nodes)
