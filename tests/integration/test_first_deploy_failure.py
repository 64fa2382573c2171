"""A first deploy that fails has nothing to roll back to: it says so and leaves nothing running."""

from __future__ import annotations

import pytest

from tests.integration.simhost import SimHost

pytestmark = pytest.mark.integration


def test_failed_first_deploy_says_there_is_no_previous_release(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", "-e", "sim_faults=never_ready", "-e", "readiness_deadline_s=5")
    assert proc.returncode != 0
    assert "there is no previous release to roll back to" in proc.stdout
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("failed", "readiness")
    assert sim_host.pids() == {}
    # The failed release stays installed for inspection but is never a rollback target.
    proc = sim_host.playbook("rollback.yml")
    assert proc.returncode != 0
    assert "no earlier verified release on local" in proc.stdout
