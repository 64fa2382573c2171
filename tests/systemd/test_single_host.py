"""The seeds' 8-GPU box over ssh: prefill, decode and router on one real systemd host.

The inventory is inventory/examples/pd-single-host as a user would copy it, with the lab's address,
the simulator standing in for sglang and nvidia-smi, and the operator's API key file on the host.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.systemd.hostkit import Lab

UNITS = ["sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"]
# A needle grid the simulator recalls at index_topk 1024, small enough for CI.
GATES = {"needle_required_tokens": 4000, "needle_lengths": [1000, 4000], "needle_depths": [0.5],
         "readiness_deadline_s": 120, "smoke_deadline_s": 60, "needle_deadline_s": 300}


@pytest.fixture(scope="module")
def lab(hostkit) -> Iterator[Lab]:
    with hostkit.lab(["gpu1"], routers=["gpu1"]) as booted:
        yield booted


@pytest.fixture(scope="module")
def inventory(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    gpu1 = lab.hosts["gpu1"]
    # The operator's key file: readable by the service user only.
    gpu1.write_file("/etc/dsv4deploy/api_key", "sk-hostkit-single\n", owner="sglang", mode="0400")
    # Workers listen on the host's address: the gates (on the controller) reach them there.
    return lab.write_inventory(tmp_path_factory.mktemp("single") / "inventory", example="pd-single-host",
                               group_vars=GATES, host_vars={"gpu1": {"listen": "0.0.0.0"}})


def _fail_text(proc) -> str:
    return f"rc {proc.returncode}\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"


def test_promote_over_ssh(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path)
    assert proc.returncode == 0, _fail_text(proc)
    report = json.loads((tmp_path / "latest" / "report.json").read_text())
    assert report["verdict"] == "promoted"
    gpu1 = lab.hosts["gpu1"]
    for unit in UNITS:
        assert gpu1.exec(["systemctl", "is-active", unit], check=False).stdout.strip() == "active", unit
        user = gpu1.exec(["systemctl", "show", "-p", "User", "--value", unit]).stdout.strip()
        assert user == "sglang", unit
