"""Every shipped example inventory deploys as written on real systemd hosts, over ssh.

Each example of inventory/examples is deployed to a lab of its own hosts with only what a site
changes: the addresses, the launchers and the simulated GPUs (tests/systemd/hostkit.py
write_inventory), and the operator's files on each host (the API key file at the path the example
names, the model folder). Its own gate settings (group_vars/all/gates.yml) apply. The gates run
each worker check where that worker is reachable: from the controller when it listens on its host's
address, on the host itself when it listens on a loopback address.

pd-single-host is proven in test_loopback_workers.py (with the failed-start check on the same lab).
The examples share one gates.yml (a unit test, tests/unit/gates/test_gate_settings.py, accepts each): the
first two run it as shipped; the recipe examples, whose subject is their servers' flags on real hosts,
run the tier's small gates (checks.GATES) to keep CI's time. The lab has no InfiniBand device:
multi-node-pd's transport is tcp there, the one site change beyond those above.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.systemd import checks, example_site
from tests.systemd.hostkit import REPO

EXAMPLES = REPO / "inventory" / "examples"
ELSEWHERE = {"pd-single-host": "test_loopback_workers.py"}


def _layout(example: str) -> tuple[list[str], list[str], str]:
    """(host names, router hosts, model folder) of an example (a combined one has no router)."""
    hosts = yaml.safe_load((EXAMPLES / example / "hosts.yml").read_text())["all"]["children"]["dsv4"]["hosts"]
    deployment = yaml.safe_load((EXAMPLES / example / "group_vars" / "all" / "deployment.yml").read_text())
    routers = [deployment["router"]["host"]] if deployment.get("topology") == "pd" else []
    return list(hosts), routers, deployment["model"]["path"]


def _site_vars(example: str) -> dict:
    """What this lab changes in `example` beyond addresses and launchers (see the module's docstring)."""
    deployment = yaml.safe_load((EXAMPLES / example / "group_vars" / "all" / "deployment.yml").read_text())
    changed: dict = {} if example in OWN_GATES else dict(checks.GATES)
    # the requirement follows the example's index_topk (the recipes keep DeepSeek-V4's 512: 2000 tokens)
    if example not in OWN_GATES:
        changed.pop("needle_required_tokens")
        changed["needle_lengths"] = [1000, 2000]
    for role in ("prefill", "decode"):
        workers = deployment.get(role)
        if isinstance(workers, list) and any(w.get("transport") == "rdma" for w in workers):
            changed[role] = [{k: v for k, v in w.items() if k != "ib_device"} | {"transport": "tcp"} for w in workers]
    return changed


def test_every_example_is_deployed_by_this_tier() -> None:
    shipped = {p.name for p in EXAMPLES.iterdir() if (p / "hosts.yml").exists()}
    covered = set(PARAMS) | set(ELSEWHERE)
    assert shipped == covered, f"examples without a real-host deploy test: {sorted(shipped - covered)}"


PARAMS = ["1p1d-three-hosts", "2p1d", "h200-tp4", "h200-fp8", "h200-dp-attention", "multi-node-pd"]
OWN_GATES = {"1p1d-three-hosts", "2p1d"}


@pytest.mark.parametrize("example", PARAMS)
def test_example_deploys_as_written(hostkit, tmp_path: Path, example: str) -> None:
    names, routers, model_dir = _layout(example)
    with hostkit.lab(names, routers=routers) as lab:
        for name in names:
            example_site.prepare(lab.hosts[name], f"sk-{example}", model_dir)
        inventory = lab.write_inventory(tmp_path / "inventory", example=example, group_vars=_site_vars(example))
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
            # every unit the deploy installed (multi-node-pd's gpu3 runs decode's rank 1 only)
            units = [u.removesuffix(".service") for u in lab.hosts[name].sh(
                "cd /etc/systemd/system && ls -1 sglang-dsv4*.service 2>/dev/null || true").stdout.split()]
            assert units, f"{name} runs nothing"
            if example == "multi-node-pd" and name == "gpu3":
                assert units == ["sglang-dsv4-decode-rank1"], units
            for unit in units:
                assert checks.unit_state(lab.hosts[name], unit)[0] == "active", f"{name} {unit}"
