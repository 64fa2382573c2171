"""dsv4_rollout_strategy through the playbook on the embedded host: a blue_green that cannot fit beside
the serving release is refused by field, host and fix at the plan, before anything on the host changes;
one that fits is planned as blue_green, the plan saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.simhost import REPO, SimHost

pytestmark = pytest.mark.integration


def test_blue_green_that_does_not_fit_is_refused_before_any_change(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", "-e", "dsv4_rollout_strategy=blue_green")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "nothing was changed" in out and "dsv4_rollout_blue_green_gpu_offset (host local)" in out, out[-3000:]
    assert "or set dsv4_rollout_strategy: recreate" in out
    assert not (sim_host.install_root / "releases").exists() or not any((sim_host.install_root / "releases").iterdir())


def test_a_strategy_that_is_not_one_is_named(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", "-e", "dsv4_rollout_strategy=bluegreen")
    out = proc.stdout + proc.stderr
    # The role's argument spec refuses it first, naming the choices.
    assert proc.returncode != 0 and "dsv4_rollout_strategy" in out
    assert "recreate, blue_green, blue_green_hosts, rolling" in out, out[-3000:]


def test_the_side_by_side_example_is_planned_as_blue_green(sim_host: SimHost) -> None:
    """Check mode shows the plan and changes nothing (tests/integration/test_blue_green.py runs it for real)."""
    example = Path(REPO) / "inventory" / "blue-green-local.yml"
    proc = sim_host.playbook("deploy.yml", "-e", f"@{example}", "--check")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "rollout blue_green: the new release fits beside the serving one" in proc.stdout
    assert not (sim_host.install_root / "releases").exists() or not any((sim_host.install_root / "releases").iterdir())
