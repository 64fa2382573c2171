"""The seeds' box as shipped: inventory/examples/pd-single-host keeps `listen: 127.0.0.1` for its workers.

The controller (the lab's own namespace) cannot reach gpu1's loopback, so the worker checks
(readiness /health, config /server_info) must run on gpu1 itself, while the router-facing checks
(router /readiness, smoke, needle) stay on the controller. Only the address, the launchers and the
simulated GPUs differ from the example (tests/systemd/hostkit.py write_inventory).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.systemd.hostkit import Lab

KEY_FILE = "/etc/dsv4deploy/api_key"
MODEL_DIR = "/models/DeepSeek-V4-Flash-NVFP4"


@pytest.fixture(scope="module")
def lab(hostkit) -> Iterator[Lab]:
    with hostkit.lab(["gpu1"], routers=["gpu1"]) as booted:
        gpu1 = booted.hosts["gpu1"]
        # What the operator has on the box before deploying: the key file (the service user's only)
        # and the model folder with its chat template.
        gpu1.write_file(KEY_FILE, "sk-loopback-workers\n", owner="sglang", mode="0400")
        gpu1.sh(f"install -d -m 0755 {MODEL_DIR} && printf '{{}}' > {MODEL_DIR}/chat_template.jinja")
        yield booted


def _fail_text(proc) -> str:
    return f"rc {proc.returncode}\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"


def test_example_as_shipped_promotes_with_worker_checks_on_the_host(lab: Lab, tmp_path: Path) -> None:
    inventory = lab.write_inventory(tmp_path / "inventory", example="pd-single-host")
    assert "listen: 127.0.0.1" in (inventory / "host_vars" / "gpu1.yml").read_text()
    proc = lab.playbook("deploy.yml", inventory, reports=tmp_path / "reports")
    assert proc.returncode == 0, _fail_text(proc)
    report = json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())
    assert report["verdict"] == "promoted"
    gates = {g["name"]: g for g in report["gates"]}
    endpoints = {e["check"]: e for e in gates["readiness"]["evidence"]["endpoints"]}
    for worker in ("sglang-dsv4-prefill", "sglang-dsv4-decode"):
        check = endpoints[f"{worker} /health"]
        assert check["ready"] and check["last_status"] == 200, check
        assert check["checked_on"] == "gpu1" and check["url"].startswith("http://127.0.0.1:")
    router = endpoints["router /readiness"]
    assert router["ready"] and "checked_on" not in router and router["url"].startswith(f"http://{lab.hosts['gpu1'].address}:")
    rows = {r["name"]: r for r in gates["config"]["evidence"]["servers"]}
    assert all(r["ok"] and r["checked_on"] == "gpu1" for r in rows.values()), rows
    assert gates["smoke"]["status"] == "passed" and gates["needle"]["status"] == "passed"
