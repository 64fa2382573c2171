"""blue_green onto other hosts through the playbook: pd-single-host with a second box. `ga` (127.0.0.1) runs the
prefill, the decode and the router; `gb` (127.0.0.2), the second box, runs nothing until a deploy goes there
(`dsv4_rollout_blue_green_hosts: {ga: gb}`). Each host has its own install root, supervisord and simulated
GPUs (its modules run under a Python that sets DSV4_SIM_NODE), so the workers move to the same GPUs and ports
on the other box, behind the real sglang-router 0.3.2 on ga.

The continuous client (dsv4deploy.rollout.downtime) asks the production router throughout. A release that passes
its gates behind the preview router is promoted with no failed request: gb runs the workers, ga the same
router process (it was never restarted) and no worker, and the router lists gb's workers only. The next deploy
goes back to ga; when its gate fails there, production (gb's workers behind ga's router) serves on untouched.
An old set kept warm is switched back to by a rollback inside the window; after it, the next run (here
rollback.yml) stops it and the rollback restores. stop.yml after a run killed mid-switch repairs, then stops both
boxes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml

from dsv4deploy.rollout.downtime import DowntimeClient
from tests.integration.simhost import READINESS, HostPart, SimHost, assign_ports, node_hosts, stop_parts
from tests.integration.test_blue_green import FAST, _deploy_under_load
from tests.integration.test_interrupted import kill_when, lock_record, start
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

PORT_OFFSET = 5
# gb first in the inventory: stop, rollback and verify must find the serving set by the router's host.
ADDRESSES = {"gb": "127.0.0.2", "ga": "127.0.0.1"}
WORKERS = {"sglang-dsv4-prefill", "sglang-dsv4-decode"}
ROUTER = "sglang-dsv4-router"
# The module installs a sixth release on ga with the dead-run rollback case: kept, so that the first one is still
# there for the rollback case after it (dsv4_release_keep defaults to 5).
KEEP_SIX = ["-e", "dsv4_release_keep=6"]
# The release the module's first deploy put on ga (test_a_release_moves... notes it).
RELEASES: dict[str, str] = {}


@pytest.fixture(scope="module")
def boxes(sim_host: SimHost) -> Iterator[dict[str, HostPart]]:
    """The module's simulated host as two boxes, ga serving a first release (started as recreate starts it:
    nothing served yet), gb paired with it."""
    sim_host.base_port = free_port_block(2 * PORT_OFFSET)
    assign_ports(sim_host.inventory, sim_host.base_port)
    parts = node_hosts(sim_host, ADDRESSES)
    dep_path = sim_host.inventory / "group_vars" / "all" / "deployment.yml"
    dep = yaml.safe_load(dep_path.read_text())
    for role, gpus in (("prefill", [0, 1]), ("decode", [2, 3])):  # the second box gets the same on its own GPUs
        dep[role][0].update(host="ga", gpus=gpus, tp_size=2)
    dep["router"]["host"] = dep["combined"]["host"] = "ga"
    # tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
    dep.update(dsv4_rollout_strategy="blue_green_hosts", dsv4_rollout_blue_green_hosts={"ga": "gb"},
               dsv4_rollout_blue_green_port_offset=PORT_OFFSET, gpu_memory_gib=141)
    dep_path.write_text(yaml.safe_dump(dep, sort_keys=False))
    try:
        sim_host.playbook("deploy.yml", *FAST, *READINESS, check=True)
        yield parts
    finally:
        # stop.yml (sim_host's teardown) stops every host; by PID as a last resort, the preview slot first.
        stop_parts(parts)


def _registered(host: SimHost) -> list[str]:
    """The addresses and ports of the workers the production router lists (GET /workers)."""
    headers = {"Authorization": f"Bearer {host.api_key}"} if host.api_key else {}
    workers = httpx.get(f"{host.endpoint}/workers", timeout=10, trust_env=False, headers=headers).json()
    return sorted(w["url"].split("//", 1)[1] for w in workers["workers"])


def _on(address: str, host: SimHost) -> list[str]:
    return sorted(f"{address}:{host.base_port + i}" for i in (1, 2))


def test_a_release_moves_to_the_other_box_with_no_failed_request(sim_host: SimHost,
                                                                  boxes: dict[str, HostPart]) -> None:
    ga, gb = boxes["ga"], boxes["gb"]
    first = ga.active_release()
    assert first and set(ga.pids()) == {*WORKERS, ROUTER} and gb.pids() == {}
    RELEASES["first"] = first
    router_pid = ga.pids()[ROUTER]
    proc, figures = _deploy_under_load(sim_host, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "PROMOTED" in out and "This deploy: ga -> gb" in out and "Gates, through the preview router" in out
    print(f"blue_green onto the other box, under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line() + f" {figures.failures}"
    # gb runs the workers, ga the same router and no worker; the router lists gb's workers only.
    assert set(gb.pids()) == WORKERS and set(ga.pids()) == {ROUTER}, out[-4000:]
    assert ga.pids()[ROUTER] == router_pid
    assert _registered(sim_host) == _on(ADDRESSES["gb"], sim_host)
    # The router's host records the new release (which set serves); the preview slot is gone.
    assert ga.active_release() == gb.active_release() != first
    assert not (ga.install_root / "slot-b" / "supervisor" / "supervisor.sock").exists()
    report = sim_host.report()
    assert report["verdict"] == "promoted" and report["downtime"]["failed"] == 0, report["downtime"]


def test_the_same_release_again_stays_where_it_serves(sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    before = {name: part.pids() for name, part in boxes.items()}
    proc = sim_host.playbook("deploy.yml", *FAST, *READINESS, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "the serving release on gb is unchanged" in out, out[-6000:]
    assert {name: part.pids() for name, part in boxes.items()} == before


def test_a_gate_failure_on_the_way_back_leaves_production_serving(sim_host: SimHost,
                                                                 boxes: dict[str, HostPart]) -> None:
    ga = boxes["ga"]
    serving = ga.active_release()
    before = {name: part.pids() for name, part in boxes.items()}
    assert set(before["gb"]) == WORKERS, "runs after the move to gb"
    # The decode ignores its override: the config gate through the preview router fails on ga.
    proc, figures = _deploy_under_load(sim_host, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "3"}}',
                                       "-e", '{"sim_faults_by_role": {"decode": "ignore_override"}}',
                                       "-e", json.dumps({"dsv4_gates_names": ["readiness", "config", "smoke"]}))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "This deploy: gb -> ga" in out, out[-6000:]
    assert "production was not touched, no rollback" in out, out[-6000:]
    print(f"blue_green onto the other box, a gate failure there, under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line() + f" {figures.failures}"
    # gb's workers and ga's router serve on, the same processes; ga's new workers are stopped.
    assert {name: part.pids() for name, part in boxes.items()} == before
    assert _registered(sim_host) == _on(ADDRESSES["gb"], sim_host)
    assert ga.active_release() == serving
    assert not (ga.install_root / "slot-b" / "supervisor" / "supervisor.sock").exists()


def test_a_bake_failing_after_the_switch_switches_the_router_back_to_the_old_set(
        sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    ga, gb = boxes["ga"], boxes["gb"]
    serving = ga.active_release()
    before = {name: part.pids() for name, part in boxes.items()}
    assert set(before["gb"]) == WORKERS and set(before["ga"]) == {ROUTER}, "runs after the move to gb"
    # The new servers on ga pass readiness behind the preview router, the router is switched to them, and their
    # /metrics then fail: the bake ends in error after two intervals, with gb's workers still running.
    bake = {"dsv4_bake_s": 3, "dsv4_bake_interval_s": 1, "dsv4_bake_error_limit": 2}
    proc, figures = _deploy_under_load(sim_host, *READINESS, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "4"}}',
                                       "-e", "sim_faults=metrics_error", "-e", json.dumps(bake))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "This deploy: gb -> ga" in out, out[-6000:]
    line = " ".join(out.split())
    assert "ROLLED BACK at bake on " in line and "(blue_green_hosts, after the switch)" in line, out[-6000:]
    assert "the production router is switched back to the serving workers" in line, out[-6000:]
    print(f"blue_green onto the other box, a bake failing after the switch, under the continuous client: "
          f"{figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line() + f" {figures.failures}"
    # The router listed ga's new workers, then gb's again: gb's are the same processes, ga's new ones stopped.
    assert {name: part.pids() for name, part in boxes.items()} == before
    assert _registered(sim_host) == _on(ADDRESSES["gb"], sim_host)
    assert ga.active_release() == gb.active_release() == serving
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "bake"), report
    assert not (ga.install_root / "slot-b" / "supervisor" / "supervisor.sock").exists()


def _killed_at_the_switch(sim_host: SimHost, boxes: dict[str, HostPart], tag: str,
                          to: str = "ga") -> tuple[str, dict, str]:
    """A deploy onto `to` (the way back gb -> ga unless named), killed once the production router lists one of the
    new workers there: the serving release, the processes before, the dead run's release."""
    ga = boxes["ga"]
    serving = ga.active_release()
    before = {name: part.pids() for name, part in boxes.items()}
    assert set(before["gb" if to == "ga" else "ga"]) >= WORKERS and not WORKERS & set(before[to]), before
    env = json.dumps({"server_env_extra": {"DSV4_BG_TEST": tag}})
    proc = start(sim_host, "deploy.yml", *FAST, *READINESS, *KEEP_SIX, "-e", env)
    kill_when(proc, lambda: any(w.startswith(ADDRESSES[to]) for w in _registered(sim_host)), "the switch began")
    lock = lock_record(ga)
    assert lock["phase"] == "other hosts: switch", lock
    return serving, before, lock["target"]


def _gb_serves_as_before(sim_host: SimHost, boxes: dict[str, HostPart], before: dict, serving: str) -> None:
    """gb's workers and ga's router are the processes that served before; the dead run's workers on ga stopped."""
    assert {name: part.pids() for name, part in boxes.items()} == before
    assert _registered(sim_host) == _on(ADDRESSES["gb"], sim_host)
    assert boxes["ga"].active_release() == serving
    assert not (boxes["ga"].install_root / "slot-b" / "supervisor" / "supervisor.sock").exists()


def _rollback_under_load(sim_host: SimHost) -> tuple[object, str, DowntimeClient]:
    """rollback.yml under the continuous client: the run, its output, the client (its figures)."""
    with DowntimeClient(sim_host.endpoint, "deepseek-v4-flash", api_key=sim_host.api_key, concurrency=2) as client:
        back = sim_host.playbook("rollback.yml", *FAST, *KEEP_SIX)
    return back, back.stdout + back.stderr, client


def test_a_run_killed_during_the_switch_is_repaired_by_the_next_deploy(
        sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    serving, before, _ = _killed_at_the_switch(sim_host, boxes, "5")
    # The next run (the serving release deployed again) says what died and puts production back on gb whole.
    with DowntimeClient(sim_host.endpoint, "deepseek-v4-flash", api_key=sim_host.api_key, concurrency=2) as client:
        repair = sim_host.playbook("deploy.yml", *FAST, *READINESS, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}')
    out = repair.stdout + repair.stderr
    line = " ".join(out.split())
    assert repair.returncode == 0 and "died during phase 'other hosts: switch'" in out, out[-6000:]
    assert f"the production router lists the workers of release {serving} only, on gb" in line, out[-6000:]
    assert "workers stopped on ga" in line and "the serving release on gb is unchanged" in line, out[-6000:]
    print(f"blue_green onto the other box, repair after a run killed mid-switch: {client.figures.line()}")
    assert client.figures.sent > 10 and client.figures.failed == 0, client.figures.line()
    _gb_serves_as_before(sim_host, boxes, before, serving)


def test_a_rollback_after_a_run_killed_during_the_switch_switches_back_to_the_serving_set(
        sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    serving, before, dead = _killed_at_the_switch(sim_host, boxes, "7")
    # rollback.yml first puts the router's workers all on gb's (the serving release's), which is the way back.
    back, out, client = _rollback_under_load(sim_host)
    line = " ".join(out.split())
    assert back.returncode == 0 and "blue_green_hosts repair: run " in line, out[-6000:]
    assert "other hosts: switch" in line.split("blue_green_hosts repair: run ", 1)[1][:200], out[-6000:]
    assert f"the production router lists the workers of release {serving} only, on gb" in line, out[-6000:]
    assert f"ROLLED BACK by a switch: release {serving}" in line and f"release {dead} is stopped" in line, out[-6000:]
    print(f"blue_green onto the other box, rollback after a run killed mid-switch: {client.figures.line()}")
    assert client.figures.sent > 10 and client.figures.failed == 0, client.figures.line()
    _gb_serves_as_before(sim_host, boxes, before, serving)
    assert sim_host.report()["verdict"] == "rolled_back"


def test_verify_gates_the_set_that_serves(sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    before = {name: part.pids() for name, part in boxes.items()}
    assert set(before["gb"]) == WORKERS, "runs after the move to gb"
    proc = sim_host.playbook("verify.yml", "-e", json.dumps({"dsv4_gates_names": ["readiness", "smoke"]}))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "gate smoke: passed" in out, out[-6000:]
    # Its readiness found 2 workers answering: gb's, where they serve (ga runs none).
    assert "2 worker(s) /health 200" in out and set(before["ga"]) == {ROUTER}, out[-6000:]
    assert {name: part.pids() for name, part in boxes.items()} == before


def test_rollback_after_the_move_puts_the_first_set_back(
        sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    ga, gb = boxes["ga"], boxes["gb"]
    assert set(gb.pids()) == WORKERS and RELEASES["first"], "runs after the move to gb"
    proc = sim_host.playbook("rollback.yml", *FAST)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and f"release {RELEASES['first']} is serving and verified" in out, out[-6000:]
    # ga runs the first release's workers and the router again, gb nothing; the router lists ga's workers.
    assert set(ga.pids()) == {*WORKERS, ROUTER} and gb.pids() == {}, out[-4000:]
    assert _registered(sim_host) == _on(ADDRESSES["ga"], sim_host)
    assert ga.active_release() == RELEASES["first"]
    # gb (listed first) still names the release it ran: verify reads the one active on the router's host.
    proc = sim_host.playbook("verify.yml", *READINESS)
    assert proc.returncode == 0 and "2 worker(s) /health 200" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]


def _first_set_serves(boxes: dict[str, HostPart]) -> tuple[HostPart, HostPart, str, dict[str, int]]:
    """ga serves the module's first release (a rollback put it back) and gb runs nothing: ga, gb, that release,
    ga's processes."""
    ga, gb = boxes["ga"], boxes["gb"]
    first = ga.active_release()
    assert first == RELEASES["first"] and gb.pids() == {}, "runs after a rollback to the first set"
    assert set(ga.pids()) == {*WORKERS, ROUTER}
    return ga, gb, first, ga.pids()


def test_the_old_set_kept_warm_is_switched_back_to_by_rollback(
        sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    ga, gb, first, warm = _first_set_serves(boxes)
    proc, figures = _deploy_under_load(sim_host, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "6"}}',
                                       "-e", "dsv4_rollout_keep_previous_s=600")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "PROMOTED" in out and "This deploy: ga -> gb" in out, out[-6000:]
    print(f"blue_green onto the other box, the old set kept warm, under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line() + f" {figures.failures}"
    # ga's workers run on, the same processes, out of the router, which lists gb's workers only.
    assert ga.pids() == warm and set(gb.pids()) == WORKERS, out[-4000:]
    assert _registered(sim_host) == _on(ADDRESSES["gb"], sim_host)
    kept = ga.active_release()
    assert kept != first and (ga.install_root / "blue_green_hosts.json").exists()
    # Inside the window a rollback is a switch of the router's workers back to ga's: nothing restarts.
    back, out, client = _rollback_under_load(sim_host)
    line = " ".join(out.split())
    assert back.returncode == 0 and ": switch_back" in line, out[-6000:]
    assert f"ROLLED BACK by a switch: release {first} (warm since the switch) serves again" in line, out[-6000:]
    assert f"release {kept} is stopped" in line, out[-6000:]
    print(f"blue_green onto the other box, rollback by a switch to the warm set: {client.figures.line()}")
    assert client.figures.sent > 10 and client.figures.failed == 0, client.figures.line()
    assert ga.pids() == warm and gb.pids() == {}, out[-4000:]
    assert _registered(sim_host) == _on(ADDRESSES["ga"], sim_host)
    assert ga.active_release() == first and not (ga.install_root / "blue_green_hosts.json").exists()
    report = sim_host.report()
    assert report["verdict"] == "rolled_back" and report["serving_release"] == first, report


def test_after_the_window_the_next_run_stops_the_warm_set_and_a_rollback_restores(
        sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    ga, gb, first, warm = _first_set_serves(boxes)
    # The ten newest releases are kept: the first one is still installed for the rollback to it.
    keep = ["-e", "dsv4_release_keep=10"]
    proc = sim_host.playbook("deploy.yml", *FAST, *READINESS, *keep, "-e", "dsv4_rollout_keep_previous_s=2",
                             "-e", '{"server_env_extra": {"DSV4_BG_TEST": "8"}}')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "This deploy: ga -> gb" in out, out[-6000:]
    assert ga.pids() == warm and set(gb.pids()) == WORKERS, out[-4000:]
    kept = ga.active_release()
    record = json.loads((ga.install_root / "blue_green_hosts.json").read_text())
    # No timer ends the window: the next run does, once the router host's clock is past it.
    time.sleep(max(0.0, float(record["until"]) - time.time() + 0.5))
    back = sim_host.playbook("rollback.yml", *FAST, *keep, "-e", f"dsv4_rollback_release={first}")
    out = back.stdout + back.stderr
    line = " ".join(out.split())
    assert back.returncode == 0, out[-6000:]
    said = f"blue_green_hosts keep: release {kept} serves on gb, previous {first} warm on ga (0 s left): stop"
    assert said in line, out[-6000:]
    # A restore, not a switch back to the workers the run had just stopped: ga's workers are new processes.
    assert "ROLLED BACK by a switch" not in line and f"release {first} is serving and verified" in line, out[-6000:]
    assert set(ga.pids()) == {*WORKERS, ROUTER} and gb.pids() == {}, out[-4000:]
    assert all(ga.pids()[w] != warm[w] for w in WORKERS), (warm, ga.pids())
    assert _registered(sim_host) == _on(ADDRESSES["ga"], sim_host)
    assert ga.active_release() == first and not (ga.install_root / "blue_green_hosts.json").exists()
    assert sim_host.report()["verdict"] == "rolled_back"


def test_stop_after_a_run_killed_during_the_switch_stops_both_sets(
        sim_host: SimHost, boxes: dict[str, HostPart]) -> None:
    ga, gb = boxes["ga"], boxes["gb"]
    # Killed the way out ga -> gb, under the continuous client up to the stop.
    with DowntimeClient(sim_host.endpoint, "deepseek-v4-flash", api_key=sim_host.api_key, concurrency=2) as client:
        serving, _, _ = _killed_at_the_switch(sim_host, boxes, "9", to="gb")
    print(f"blue_green onto the other box, a run killed mid-switch, up to the stop: {client.figures.line()}")
    assert client.figures.sent > 10 and client.figures.failed == 0, client.figures.line()
    assert set(gb.pids()) == WORKERS, "the dead run left its new workers on gb"
    proc = sim_host.playbook("stop.yml")
    out = proc.stdout + proc.stderr
    line = " ".join(out.split())
    assert proc.returncode == 0 and "blue_green_hosts repair: run " in line, out[-6000:]
    said = line.split("blue_green_hosts repair: run ", 1)[1][:600]
    assert "other hosts: switch" in said[:200], said
    assert f"the production router lists the workers of release {serving} only, on ga" in said, said
    # stop.yml stops the serving set and its router; the repair stopped the dead run's workers and its preview slot.
    assert ga.pids() == {} and gb.pids() == {}, out[-4000:]
    assert not (ga.install_root / "slot-b" / "supervisor" / "supervisor.sock").exists()
