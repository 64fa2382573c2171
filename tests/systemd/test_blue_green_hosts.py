"""blue_green onto other hosts on real systemd hosts over ssh: inventory/examples/pd-single-host with a second box.

gpu1 runs the example (prefill, decode and the real sglang-router); gpu2, the second box, is added as the
example's commented block says: gpu1's host variables, both boxes on `listen: 0.0.0.0` (the router on gpu1 reaches
gpu2's workers, and while it switches one box's decode reaches the other's prefill), and the block's two
`dsv4_rollout_*` lines are the deployment's. Each deploy starts the new release on the box that does not serve,
gates it through a preview router on gpu1 and switches the production router's workers; the playbook's continuous
client asks the production router throughout and its figures are in the report. The tests run in order on the
same two hosts: gpu1 -> gpu2, the new servers dying on the way back (production untouched), then gpu2 -> gpu1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.systemd import checks, example_site
from tests.systemd.checks import output
from tests.systemd.hostkit import REPO, Lab

EXAMPLE = REPO / "inventory" / "examples" / "pd-single-host"
API_KEY = "sk-blue-green-hosts-" + "3c9e71d0"
WORKERS = ["sglang-dsv4-prefill", "sglang-dsv4-decode"]
ROUTER = "sglang-dsv4-router"
PORTS = {"sglang-dsv4-prefill": 30001, "sglang-dsv4-decode": 30002}
# The gates run through the preview router; the needle and the soak are the other tiers' subject.
GATES = ("-e", json.dumps({"dsv4_gates_names": ["readiness", "config", "smoke"]}))


def example_block() -> dict:
    """The deployment lines the example shows commented out for a second box (its `dsv4_rollout_*` lines)."""
    text = (EXAMPLE / "group_vars" / "all" / "deployment.yml").read_text()
    lines = [line.removeprefix("# ") for line in text.splitlines() if line.startswith("# dsv4_rollout_")]
    block = yaml.safe_load("\n".join(lines))
    assert block and block["dsv4_rollout_strategy"] == "blue_green_hosts", lines
    return block


@pytest.fixture(scope="module")
def lab(hostkit) -> Iterator[Lab]:
    with hostkit.lab(["gpu1", "gpu2"], routers=["gpu1"]) as booted:
        for name in booted.hosts:
            example_site.prepare(booted.hosts[name], API_KEY)
        yield booted


@pytest.fixture(scope="module")
def inventory(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example with gpu2 added as its comment says, serving a first release on gpu1 (nothing served before:
    it starts there as recreate starts it)."""
    # As the example's comment says: gpu2's host variables are gpu1's, and both boxes listen on 0.0.0.0.
    gpu2 = {**yaml.safe_load((EXAMPLE / "host_vars" / "gpu1.yml").read_text()), "listen": "0.0.0.0"}
    tmp = tmp_path_factory.mktemp("bgh")
    inv = lab.write_inventory(tmp / "inventory", example="pd-single-host",
                              group_vars={**example_block(), "readiness_deadline_s": 120, "smoke_deadline_s": 60},
                              host_vars={"gpu1": {"listen": "0.0.0.0"}, "gpu2": gpu2})
    proc = lab.playbook("deploy.yml", inv, "-e", '{"dsv4_gates_names": ["readiness"]}', reports=tmp / "first")
    assert proc.returncode == 0, output(proc)
    assert checks.report(tmp / "first")["verdict"] == "promoted"
    return inv


def main_pids(lab: Lab, name: str, units: list[str]) -> dict[str, str]:
    """The running units' main PIDs on a host ('0' for a stopped one)."""
    host = lab.hosts[name]
    return {u: host.exec(["systemctl", "show", "-p", "MainPID", "--value", u]).stdout.strip() for u in units}


# GET /workers of the production router, with the key, from the controller side.
WORKERS_LIST = """import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/workers", headers={"Authorization": "Bearer " + sys.argv[2]})
print(json.dumps(sorted(w["url"] for w in json.load(urllib.request.urlopen(req, timeout=30))["workers"])))
"""


def registered(lab: Lab) -> list[str]:
    """The worker URLs the production router lists (read from the router itself)."""
    proc = lab.run([sys.executable, "-c", WORKERS_LIST, f"http://{lab.hosts['gpu1'].address}:30000", API_KEY],
                   timeout=60)
    assert proc.returncode == 0, output(proc)
    return json.loads(proc.stdout)


def workers_on(address: str) -> list[str]:
    return sorted(f"http://{address}:{port}" for port in PORTS.values())


def assert_serves_on(lab: Lab, serving: str, idle: str, address: str) -> None:
    """`serving`'s worker units active and enabled, `idle`'s stopped and not started at boot, the router on gpu1
    active and listing `serving`'s workers only (at `address`)."""
    for unit in WORKERS:
        assert checks.unit_state(lab.hosts[serving], unit) == ("active", "enabled"), f"{serving} {unit}"
        # Not started at boot either: a reboot of the idle box would start workers no router lists.
        active, enabled = checks.unit_state(lab.hosts[idle], unit)
        assert active in ("inactive", "failed") and enabled != "enabled", f"{idle} {unit}: {active}, {enabled}"
    assert checks.unit_state(lab.hosts["gpu1"], ROUTER) == ("active", "enabled")
    assert registered(lab) == workers_on(address)


def deployed(lab: Lab, inventory: Path, reports: Path, tag: str, *extra: str) -> tuple[object, dict, str]:
    """A deploy of a new release (a server environment variable changed): its run, report and figures' line."""
    proc = lab.playbook("deploy.yml", inventory, *GATES, "-e", json.dumps({"server_env_extra": {"DSV4_BGH": tag}}),
                        *extra, reports=reports)
    report = checks.report(reports)
    d = report["downtime"]
    line = f"sent {d.get('sent')}, failed {d.get('failed')}, longest gap {d.get('longest_gap_s')} s"
    return proc, report, line


def test_a_release_moves_to_the_second_box_with_no_failed_request(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    router_pid = main_pids(lab, "gpu1", [ROUTER])
    assert_serves_on(lab, "gpu1", "gpu2", lab.hosts["gpu1"].address)
    proc, report, line = deployed(lab, inventory, tmp_path, "2")
    assert proc.returncode == 0, output(proc)
    print(f"blue_green_hosts gpu1 -> gpu2 on systemd hosts, under the continuous client: {line}")
    assert report["verdict"] == "promoted" and "This deploy: gpu1 -> gpu2" in report["rollout"]["why"], report
    assert report["downtime"]["sent"] > 10 and report["downtime"]["failed"] == 0, json.dumps(report["downtime"])
    assert_serves_on(lab, "gpu2", "gpu1", lab.hosts["gpu2"].address)
    # The router was switched through its worker API, never restarted; gpu1 records the new release.
    assert main_pids(lab, "gpu1", [ROUTER]) == router_pid
    assert checks.active_release(lab.hosts["gpu1"]) == checks.active_release(lab.hosts["gpu2"]) == report["release"]
    assert not lab.hosts["gpu1"].sh("ss -Hltn '( sport = :30100 )'").stdout.strip(), "the preview router listens"


def test_a_gate_failure_on_the_way_back_leaves_production_serving(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    serving = checks.active_release(lab.hosts["gpu1"])
    before = main_pids(lab, "gpu2", WORKERS) | main_pids(lab, "gpu1", [ROUTER])
    # The new servers on gpu1 die a moment after their start (Type=exec: the start succeeds): readiness fails there.
    proc, report, line = deployed(lab, inventory, tmp_path, "3", "-e", "sim_faults=crash_on_start")
    assert proc.returncode != 0, output(proc)
    print(f"blue_green_hosts gpu2 -> gpu1 on systemd hosts, the new servers dying on gpu1: {line}")
    assert "This deploy: gpu2 -> gpu1" in report["rollout"]["why"], report["rollout"]
    assert "production was not touched, no rollback" in proc.stdout, output(proc)
    assert (report["verdict"], report["serving_release"]) == ("failed", serving), report
    assert "gpu1" in report["failed_gate"] + report["failure"], report
    assert report["downtime"]["sent"] > 10 and report["downtime"]["failed"] == 0, json.dumps(report["downtime"])
    # gpu2's workers and gpu1's router are the same processes; gpu1's new workers are stopped.
    assert main_pids(lab, "gpu2", WORKERS) | main_pids(lab, "gpu1", [ROUTER]) == before
    assert_serves_on(lab, "gpu2", "gpu1", lab.hosts["gpu2"].address)
    assert checks.active_release(lab.hosts["gpu1"]) == checks.active_release(lab.hosts["gpu2"]) == serving


def test_the_next_release_goes_back_to_the_first_box_with_no_failed_request(lab: Lab, inventory: Path,
                                                                            tmp_path: Path) -> None:
    proc, report, line = deployed(lab, inventory, tmp_path, "4")
    assert proc.returncode == 0, output(proc)
    print(f"blue_green_hosts gpu2 -> gpu1 on systemd hosts, under the continuous client: {line}")
    assert report["verdict"] == "promoted" and "This deploy: gpu2 -> gpu1" in report["rollout"]["why"], report
    assert report["downtime"]["sent"] > 10 and report["downtime"]["failed"] == 0, json.dumps(report["downtime"])
    assert_serves_on(lab, "gpu1", "gpu2", lab.hosts["gpu1"].address)
    assert checks.active_release(lab.hosts["gpu1"]) == report["release"]
