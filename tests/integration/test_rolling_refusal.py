"""dsv4_rollout_strategy: rolling through the playbook on the embedded host: the default 1P1D is refused by
role, host and fix at the plan; the 2P2D example (inventory/rolling-local.yml) is planned with its steps,
and a real run refuses it before anything changes rather than recreate (docs/rolling.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.simhost import REPO, SimHost

pytestmark = pytest.mark.integration


def _nothing_installed(sim_host: SimHost) -> bool:
    releases = sim_host.install_root / "releases"
    return not releases.exists() or not any(releases.iterdir())


def test_a_lone_prefill_and_decode_cannot_be_rolled(sim_host: SimHost) -> None:
    proc = sim_host.playbook("deploy.yml", "-e", "dsv4_rollout_strategy=rolling")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "nothing was changed" in out, out[-3000:]
    assert "decode (host local): rolling takes decode workers out of the router" in out
    assert "add a second decode worker" in out
    assert _nothing_installed(sim_host)


def test_the_2p2d_example_is_planned_and_not_recreated(sim_host: SimHost) -> None:
    """The refusal quotes the plan (its steps); a --check run shows the same plan (not run here: CI time)."""
    example = Path(REPO) / "inventory" / "rolling-local.yml"
    real = sim_host.playbook("deploy.yml", "-e", f"@{example}")
    out = real.stdout + real.stderr
    assert real.returncode != 0 and "rolling is planned (rolling: 2 steps of at most 1 worker(s) of each role" in out
    assert "cannot run it yet: it would recreate" in out and "docs/rolling.md" in out, out[-3000:]
    assert _nothing_installed(sim_host)
