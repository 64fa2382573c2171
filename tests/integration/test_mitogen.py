"""Mitogen's mitogen_linear strategy (opt-in, docs/mitogen.md) runs a whole gated deploy: every module,
action plugin and the readiness wait work through its connection, and the release is promoted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.integration.simhost import SMALL_SOAK, SimHost

FAST = ["-e", "readiness_deadline_s=20", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK]


@pytest.fixture
def mitogen(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None:
        pytest.skip("mitogen is not installed (pip install 'dsv4deploy[mitogen]'; scripts/setup.sh installs it)")
    # As docs/mitogen.md tells a user: the strategy folder of the installed package, and the strategy.
    monkeypatch.setenv("ANSIBLE_STRATEGY_PLUGINS", str(Path(spec.origin).parent / "plugins" / "strategy"))
    monkeypatch.setenv("ANSIBLE_STRATEGY", "mitogen_linear")


def test_a_gated_pd_deploy_under_mitogen_is_promoted(sim_host: SimHost, mitogen: None) -> None:
    proc = sim_host.playbook("deploy.yml", "-e", "topology=pd", *FAST)
    # A strategy ansible-core cannot load fails the play ("Invalid play strategy specified"): rc 0 is mitogen's run.
    assert proc.returncode == 0, proc.stdout[-5000:]
    report = sim_host.report()
    assert report["verdict"] == "promoted"
    assert [g["name"] for g in report["gates"]] == ["readiness", "config", "smoke", "needle", "soak", "accuracy"]
    assert all(g["status"] == "passed" for g in report["gates"])
    assert sim_host.active_release() == report["release"]
    assert set(sim_host.pids()) == {"sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"}
