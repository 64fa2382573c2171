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

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.systemd import checks, example_site
from tests.systemd.checks import ROUTER_UNIT, assert_moved, assert_no_failed_request, main_pids, new_release, output
from tests.systemd.hostkit import REPO, Lab

EXAMPLE = REPO / "inventory" / "examples" / "pd-single-host"
API_KEY = "sk-blue-green-hosts-" + "3c9e71d0"
PORTS = {"sglang-dsv4-prefill": 30001, "sglang-dsv4-decode": 30002}
WORKERS = list(PORTS)


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
    group_vars = {**example_site.rollout_block("pd-single-host"), "readiness_deadline_s": 120, "smoke_deadline_s": 60}
    inv = lab.write_inventory(tmp / "inventory", example="pd-single-host", group_vars=group_vars,
                              host_vars={"gpu1": {"listen": "0.0.0.0"}, "gpu2": gpu2})
    proc = lab.playbook("deploy.yml", inv, "-e", '{"dsv4_gates_names": ["readiness"]}', reports=tmp / "first")
    assert proc.returncode == 0, output(proc)
    assert checks.report(tmp / "first")["verdict"] == "promoted"
    return inv


def serves_on(serving: str, idle: str) -> dict:
    """assert_serves_on's arguments: `serving`'s workers listed by the router on gpu1, `idle`'s stopped."""
    return {"workers": {serving: PORTS}, "idle": {serving: idle}, "router": "gpu1", "key": API_KEY}


def test_a_release_moves_to_the_second_box_with_no_failed_request(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    router_pid = main_pids(lab.hosts["gpu1"], [ROUTER_UNIT])
    checks.assert_serves_on(lab, **serves_on("gpu1", "gpu2"))
    proc, report, line = new_release(lab, inventory, tmp_path, "2")
    print(f"blue_green_hosts gpu1 -> gpu2 on systemd hosts, under the continuous client: {line}")
    assert_moved(lab, proc, report, "gpu1 -> gpu2", router_pid, **serves_on("gpu2", "gpu1"))


def test_a_gate_failure_on_the_way_back_leaves_production_serving(lab: Lab, inventory: Path, tmp_path: Path) -> None:
    serving = checks.active_release(lab.hosts["gpu1"])
    before = main_pids(lab.hosts["gpu2"], WORKERS) | main_pids(lab.hosts["gpu1"], [ROUTER_UNIT])
    # The new servers on gpu1 die a moment after their start (Type=exec: the start succeeds): readiness fails there.
    proc, report, line = new_release(lab, inventory, tmp_path, "3", "-e", "sim_faults=crash_on_start")
    assert proc.returncode != 0, output(proc)
    print(f"blue_green_hosts gpu2 -> gpu1 on systemd hosts, the new servers dying on gpu1: {line}")
    assert "This deploy: gpu2 -> gpu1" in report["rollout"]["why"], report["rollout"]
    assert "production was not touched, no rollback" in proc.stdout, output(proc)
    assert (report["verdict"], report["serving_release"]) == ("failed", serving), report
    assert "gpu1" in report["failed_gate"] + report["failure"], report
    assert_no_failed_request(report)
    # gpu2's workers and gpu1's router are the same processes; gpu1's new workers are stopped.
    assert main_pids(lab.hosts["gpu2"], WORKERS) | main_pids(lab.hosts["gpu1"], [ROUTER_UNIT]) == before
    checks.assert_serves_on(lab, **serves_on("gpu2", "gpu1"))
    assert checks.active_release(lab.hosts["gpu1"]) == checks.active_release(lab.hosts["gpu2"]) == serving


def test_the_next_release_goes_back_to_the_first_box_with_no_failed_request(lab: Lab, inventory: Path,
                                                                            tmp_path: Path) -> None:
    router_pid = main_pids(lab.hosts["gpu1"], [ROUTER_UNIT])
    proc, report, line = new_release(lab, inventory, tmp_path, "4")
    print(f"blue_green_hosts gpu2 -> gpu1 on systemd hosts, under the continuous client: {line}")
    assert_moved(lab, proc, report, "gpu2 -> gpu1", router_pid, **serves_on("gpu1", "gpu2"))
