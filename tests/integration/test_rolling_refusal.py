"""dsv4_rollout_strategy: rolling through the playbook on the embedded host: the default 1P1D is refused by
role, host and fix at the plan, before anything changes (docs/rolling.md). The 2P2D roll itself runs in
test_rolling.py."""

from __future__ import annotations

import pytest

from tests.integration.simhost import SimHost

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
