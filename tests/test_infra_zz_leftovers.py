"""After the infrastructure tests (same xdist group, so the same worker, after them): no daemon they started is left."""

from __future__ import annotations

import pytest

from infra_machine import leftover_daemons

pytestmark = pytest.mark.xdist_group("infra")


def test_no_slurm_munge_hub_or_proxy_daemon_is_left_running():
    assert leftover_daemons() == []
