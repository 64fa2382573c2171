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

from tests.systemd import example_site
from tests.systemd.hostkit import VENV_BIN, Lab

API_KEY = "sk-loopback-workers"


@pytest.fixture(scope="module")
def lab(hostkit) -> Iterator[Lab]:
    with hostkit.lab(["gpu1"], routers=["gpu1"]) as booted:
        example_site.prepare(booted.hosts["gpu1"], API_KEY)
        yield booted


def _fail_text(proc) -> str:
    return f"rc {proc.returncode}\n{proc.stdout[-8000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def deployed(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    """The example deployed once, at -v: (inventory, reports folder, ansible-playbook's result)."""
    tmp = tmp_path_factory.mktemp("loopback")
    inventory = lab.write_inventory(tmp / "inventory", example="pd-single-host")
    return inventory, tmp / "reports", lab.playbook("deploy.yml", inventory, "-v", reports=tmp / "reports")


def test_example_as_shipped_promotes_with_worker_checks_on_the_host(lab: Lab, deployed) -> None:
    inventory, reports, proc = deployed
    assert "listen: 127.0.0.1" in (inventory / "host_vars" / "gpu1.yml").read_text()
    assert proc.returncode == 0, _fail_text(proc)
    report = json.loads((reports / "latest" / "report.json").read_text())
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


def test_the_api_key_of_the_host_side_checks_never_reaches_the_controller(deployed) -> None:
    # The worker checks read /server_info on gpu1, whose body holds api_key: masked there, it is neither in
    # the -v output (each task's result) nor in the report.
    _, reports, proc = deployed
    assert proc.returncode == 0, _fail_text(proc)
    assert "server_info" in proc.stdout, "-v shows the host side's results"
    assert API_KEY not in proc.stdout + proc.stderr
    assert API_KEY not in (reports / "latest" / "report.json").read_text()


def test_a_unit_that_cannot_start_says_why_from_its_journal(lab: Lab, deployed) -> None:
    """After the deploy above: the decode unit, pointed (by a drop-in) at a user that does not exist,
    is started as a switchover starts it; the failure carries systemd's own journal lines."""
    gpu1 = lab.hosts["gpu1"]
    unit = "sglang-dsv4-decode"
    gpu1.sh(f"systemctl stop {unit} && install -d /etc/systemd/system/{unit}.service.d && "
            f"printf '[Service]\\nUser=dsv4-gone\\n' > /etc/systemd/system/{unit}.service.d/zz-test.conf && "
            "systemctl daemon-reload")
    try:
        args = '{"manager": "systemd", "install_root": "/opt/dsv4deploy", "state": "started", "only": "workers"}'
        proc = lab.run([str(VENV_BIN / "ansible"), "gpu1", "-i", str(deployed[0]), "-m", "dsv4_service_state",
                        "-a", args])
    finally:
        gpu1.sh(f"rm -r /etc/systemd/system/{unit}.service.d && systemctl daemon-reload && systemctl start {unit}")
    out = proc.stdout
    assert proc.returncode != 0, out
    assert f"{unit} did not start" in out, out
    assert "status=217/USER" in out and "Failed at step USER spawning" in out, out
    assert "journal since this start" in out, out


def test_a_failed_gate_rolls_back_and_the_restored_release_is_checked_on_the_host(
        lab: Lab, deployed, tmp_path: Path) -> None:
    """index_topk 512 loses the needle the operator requires (5.5K tokens): the release is rolled
    back, and the restored one's readiness (its workers on 127.0.0.1 again) is proven from gpu1
    itself; verify.yml then passes the same way."""
    inventory, _, first = deployed
    assert first.returncode == 0
    reports = tmp_path / "reports"
    proc = lab.playbook("deploy.yml", inventory, "-e", "index_topk=512", "-e", "needle_required_tokens=5500",
                        reports=reports)
    assert proc.returncode != 0
    report = json.loads((reports / "latest" / "report.json").read_text())
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "needle"), report["failure"]
    phases = report["metadata"]["gate_phases"]
    restored = [g for g, phase in zip(report["gates"], phases, strict=True)
                if g["name"] == "readiness" and phase == "rollback"]
    assert restored and restored[0]["status"] == "passed", report["gates"]
    workers = [e for e in restored[0]["evidence"]["endpoints"] if e["check"].endswith("/health")]
    assert len(workers) == 2 and all(e["checked_on"] == "gpu1" for e in workers), workers
    verify = lab.playbook("verify.yml", inventory, reports=tmp_path / "verify")
    assert verify.returncode == 0, _fail_text(verify)
