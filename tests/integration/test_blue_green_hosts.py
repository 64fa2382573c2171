"""blue_green over several hosts through the playbook: 1P1D with the prefill on `pa`, the decode on `db`
and the router on `rt`, three inventory hosts of the embedded simulator (each its own install root and
supervisord; the simulated GPUs shared, so each host's workers take GPUs of their own), behind the real
sglang-router 0.3.2.

The continuous client (dsv4deploy.rollout.downtime) asks the production router throughout. A release that passes
its gates behind the preview router on `rt` - fronting the slot's workers on `pa` and `db` - is promoted
with no failed request, every host's slot stopped and the production router never restarted; a release
whose decode (on `db` alone) fails a gate leaves every host's production processes as they were; with
the previous release kept warm, a rollback inside the window is one switch back on every host.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
import yaml

from dsv4deploy.rollout.downtime import Downtime, DowntimeClient
from tests.integration.simhost import HostPart as Part
from tests.integration.simhost import SimHost, assign_ports, split_hosts, stop_supervisord
from tests.integration.test_blue_green import FAST, _deploy_under_load, _listening, _registered_ports
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

PORT_OFFSET = 5
# Where each part runs, and the programs it runs at home.
HOSTS = {"pa": ["sglang-dsv4-prefill"], "db": ["sglang-dsv4-decode"], "rt": ["sglang-dsv4-router"]}


@pytest.fixture(scope="module")
def three(sim_host: SimHost) -> Iterator[dict[str, Part]]:
    """The module's simulated host as three inventory hosts (pa, db, rt), tp 2 per role, ports for both
    slots; a first release serving (started as recreate starts it: nothing served yet)."""
    sim_host.base_port = free_port_block(2 * PORT_OFFSET)
    assign_ports(sim_host.inventory, sim_host.base_port)
    # One simulated GPU ledger for the three hosts (split_hosts): each host's workers take GPUs of their own.
    parts = split_hosts(sim_host, {name: {"gpu_count": 0} if name == "rt" else {} for name in HOSTS})
    dep_path = sim_host.inventory / "group_vars" / "all" / "deployment.yml"
    dep = yaml.safe_load(dep_path.read_text())
    dep["prefill"][0].update(host="pa", gpus=[0, 1], tp_size=2)
    dep["decode"][0].update(host="db", gpus=[2, 3], tp_size=2)
    dep["router"]["host"] = "rt"
    dep["combined"]["host"] = "pa"
    # tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
    dep.update(dsv4_rollout_strategy="blue_green", dsv4_rollout_blue_green_gpu_offset=4,
               dsv4_rollout_blue_green_port_offset=PORT_OFFSET, gpu_memory_gib=141)
    dep_path.write_text(yaml.safe_dump(dep, sort_keys=False))
    try:
        sim_host.playbook("deploy.yml", *FAST, "-e", '{"dsv4_gates_names": ["readiness"]}', check=True)
        yield parts
    finally:
        # stop.yml (sim_host's teardown) stops every host; by PID as a last resort, each slot too.
        for part in parts.values():
            stop_supervisord(part.install_root / "slot-b")
            stop_supervisord(part.install_root)


def _slot_stopped(parts: dict[str, Part]) -> bool:
    return (not any((p.install_root / "slot-b" / "supervisor" / "supervisor.sock").exists() for p in parts.values())
            and not _listening(parts["rt"].base_port + PORT_OFFSET))


def _under_load(host: SimHost, playbook: str) -> tuple[subprocess.CompletedProcess, Downtime]:
    """Run `playbook` while the continuous client asks the production router; its run and the figures."""
    with DowntimeClient(host.endpoint, "deepseek-v4-flash", api_key=host.api_key, concurrency=2) as client:
        proc = host.playbook(playbook)
    return proc, client.figures


def _programs(parts: dict[str, Part]) -> dict[str, dict[str, int]]:
    return {name: part.pids() for name, part in parts.items()}


def test_blue_green_over_three_hosts_promotes_with_no_failed_request(sim_host: SimHost,
                                                                     three: dict[str, Part]) -> None:
    first = {name: part.active_release() for name, part in three.items()}
    assert len(set(first.values())) == 1 and None not in first.values(), first
    router_pid = three["rt"].pids()["sglang-dsv4-router"]
    proc, figures = _deploy_under_load(sim_host, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "PROMOTED" in out and "Gates, through the preview router" in out
    assert "Over 3 hosts: each gets the slot where it has workers (db: decode[0]; pa: prefill[0])" in " ".join(
        out.split()), out[:8000]
    print(f"blue_green over three hosts, under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line() + f" {figures.failures}"
    # Every host on the new release, as recreate leaves it; each runs its own part at home...
    second = {name: part.active_release() for name, part in three.items()}
    assert len(set(second.values())) == 1 and second["pa"] != first["pa"], second
    for name, part in three.items():
        assert json.loads((part.install_root / "state.json").read_text())["active"] == second[name]
        assert set(part.pids()) == set(HOSTS[name]), (name, part.pids())
    # ...the production router was never restarted and lists the home workers only...
    assert three["rt"].pids()["sglang-dsv4-router"] == router_pid
    assert _registered_ports(sim_host) == sorted([sim_host.base_port + 1, sim_host.base_port + 2])
    # ...and every host's slot (its workers, the preview router, its supervisord) is stopped.
    assert _slot_stopped(three)
    report = sim_host.report()
    assert report["verdict"] == "promoted" and report["downtime"]["failed"] == 0, report["downtime"]


def test_a_gate_failure_on_one_host_leaves_every_production_service_untouched(sim_host: SimHost,
                                                                              three: dict[str, Part]) -> None:
    serving = {name: part.active_release() for name, part in three.items()}
    before = _programs(three)
    # Only the decode (on db) ignores its override: its answers garble, and the smoke gate through the
    # preview router fails on that host's slot alone (the needle and soak gates are not the subject).
    proc, figures = _deploy_under_load(sim_host, "-e", '{"sim_faults_by_role": {"decode": "ignore_override"}}',
                                       "-e", '{"dsv4_gates_names": ["readiness", "config", "smoke"]}')
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "production was not touched, no rollback" in out, out[-6000:]
    print(f"blue_green over three hosts, a gate failure on db, under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line() + f" {figures.failures}"
    # Every host: the same release, the same processes; no slot left anywhere.
    assert {name: part.active_release() for name, part in three.items()} == serving
    assert _programs(three) == before
    assert _registered_ports(sim_host) == sorted([sim_host.base_port + 1, sim_host.base_port + 2])
    assert _slot_stopped(three)
    report = sim_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("failed", "smoke"), report


def test_keep_previous_over_three_hosts_rolls_back_by_a_switch_on_every_host(sim_host: SimHost,
                                                                           three: dict[str, Part]) -> None:
    """Each host keeps its own record; the router's host (whose slot runs nothing once its preview router
    stopped) decides for all, so the rollback inside the window is one switch back, not a dropped record."""
    serving = {name: part.active_release() for name, part in three.items()}
    home = _programs(three)
    # The settle is the subject, not the gates: readiness alone.
    proc, figures = _deploy_under_load(sim_host, "-e", "dsv4_rollout_keep_previous_s=600", "-e",
                                       '{"server_env_extra": {"DSV4_BG_TEST": "5"}, "dsv4_gates_names": ["readiness"]}')
    assert proc.returncode == 0 and figures.failed == 0, (proc.stdout + proc.stderr)[-6000:]
    records = {name: json.loads((part.install_root / "blue_green.json").read_text()) for name, part in three.items()}
    assert {r["previous"] for r in records.values()} == {serving["pa"]} and records["rt"]["router_host"] == "rt"
    assert (records["pa"]["gpus"], records["db"]["gpus"], records["rt"]["gpus"]) == ([0, 1], [2, 3], [])
    # The new release serves from the slots on pa and db; the previous one runs on at home, unregistered.
    assert _programs(three) == home
    assert all(p >= sim_host.base_port + PORT_OFFSET for p in _registered_ports(sim_host))

    back, figures = _under_load(sim_host, "rollback.yml")
    assert back.returncode == 0 and "ROLLED BACK by a switch" in back.stdout, (back.stdout + back.stderr)[-6000:]
    print(f"blue_green over three hosts, rollback inside the window: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    # The warm processes serve again on every host; no record, no slot anywhere.
    assert _programs(three) == home
    assert _registered_ports(sim_host) == sorted([sim_host.base_port + 1, sim_host.base_port + 2])
    assert {name: part.active_release() for name, part in three.items()} == serving
    assert not any((part.install_root / "blue_green.json").exists() for part in three.values())
    assert _slot_stopped(three)
