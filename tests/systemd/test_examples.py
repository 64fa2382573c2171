"""Every shipped example inventory deploys as written on real systemd hosts, over ssh.

Each example of inventory/examples is deployed to a lab of its own hosts with only what a site
changes: the addresses, the launchers and the simulated GPUs (tests/systemd/hostkit.py
write_inventory), and the operator's files on each host (the API key file at the path the example
names, the model folder). Its own gate settings (group_vars/all/gates.yml) apply. The gates run
each worker check where that worker is reachable: from the controller when it listens on its host's
address, on the host itself when it listens on a loopback address.

pd-single-host is proven in test_loopback_workers.py (with the failed-start check on the same lab).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.systemd import checks, example_site
from tests.systemd.hostkit import REPO

EXAMPLES = REPO / "inventory" / "examples"
ELSEWHERE = {"pd-single-host": "test_loopback_workers.py"}


def _layout(example: str) -> tuple[list[str], str]:
    """(host names, router host) of an example."""
    hosts = yaml.safe_load((EXAMPLES / example / "hosts.yml").read_text())["all"]["children"]["dsv4"]["hosts"]
    deployment = yaml.safe_load((EXAMPLES / example / "group_vars" / "all" / "deployment.yml").read_text())
    return list(hosts), deployment["router"]["host"]


def test_every_example_is_deployed_by_this_tier() -> None:
    shipped = {p.name for p in EXAMPLES.iterdir() if (p / "hosts.yml").exists()}
    covered = set(PARAMS) | set(ELSEWHERE)
    assert shipped == covered, f"examples without a real-host deploy test: {sorted(shipped - covered)}"


PARAMS = ["1p1d-three-hosts", "2p1d"]


@pytest.mark.parametrize("example", PARAMS)
def test_example_deploys_as_written(hostkit, tmp_path: Path, example: str) -> None:
    names, router = _layout(example)
    with hostkit.lab(names, routers=[router]) as lab:
        for name in names:
            example_site.prepare(lab.hosts[name], f"sk-{example}")
        inventory = lab.write_inventory(tmp_path / "inventory", example=example)
        proc = lab.playbook("deploy.yml", inventory, reports=tmp_path / "reports")
        assert proc.returncode == 0, checks.output(proc)
        report = checks.report(tmp_path / "reports")
        assert report["verdict"] == "promoted"
        assert all(g["status"] in ("passed", "skipped") for g in report["gates"]), report["gates"]
        readiness = next(g for g in report["gates"] if g["name"] == "readiness")
        workers = [e for e in readiness["evidence"]["endpoints"] if e["check"].endswith("/health")]
        assert workers and all(e["ready"] for e in workers), workers
        for entry in workers:
            # Listening on the host's own address (listen: 0.0.0.0): asked from the controller.
            address = entry["url"].split("//", 1)[1].rsplit(":", 1)[0]
            assert address in {h.address for h in lab.hosts.values()}, entry
            assert "checked_on" not in entry, entry
        for name in names:
            units = [u for u in checks.PD_UNITS if lab.hosts[name].exec(
                ["test", "-e", f"/etc/systemd/system/{u}.service"], check=False).returncode == 0]
            assert units, f"{name} runs nothing"
            for unit in units:
                assert checks.unit_state(lab.hosts[name], unit)[0] == "active", f"{name} {unit}"
