"""The class configurations the course ships, read as their programs read them (no hub, no root needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from infra_machine import ROOT

HUB = ROOT / "lab-config" / "hub"


def test_members_of_the_instructors_group_get_the_instructor_configuration(monkeypatch):
    """The hub's pre-spawn hook (no hub needed): the Unix group decides between the two configurations."""
    import grp
    from types import SimpleNamespace

    from traitlets.config.loader import PyFileConfigLoader

    hook = PyFileConfigLoader("jupyterhub_config.py", path=str(ROOT / "lab-config" / "hub")).load_config().Spawner.pre_spawn_hook
    monkeypatch.setattr(grp, "getgrnam", lambda name: SimpleNamespace(gr_mem=["teacher"]))
    for user, role in (("teacher", "instructor"), ("ann", "student")):
        spawner = SimpleNamespace(user=SimpleNamespace(name=user), environment={})
        hook(spawner)
        first = spawner.environment["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0]
        assert Path(first) == ROOT / "lab-config" / "hub" / role


def test_a_students_server_has_the_assignment_list_and_no_instructor_ui():
    server = json.loads((HUB / "student" / "jupyter_server_config.json").read_text())
    extensions = server["ServerApp"]["jpserver_extensions"]
    assert extensions["nbgrader.server_extensions.assignment_list"] is True
    assert extensions["nbgrader.server_extensions.formgrader"] is False
    assert server["MappingKernelManager"]["cull_idle_timeout"] > 0
    disabled = json.loads((HUB / "student" / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert disabled["@jupyter/nbgrader:formgrader"] and disabled["@jupyter/nbgrader:create-assignment"]
    assert "@jupyter/nbgrader:assignment-list" not in disabled
