"""rolling a 2P1D by surge through the playbook on the embedded simulated host (tp 2 per worker: GPUs
0-5, 6-7 spare; behind the real sglang-router 0.3.2; inventory/rolling-2p1d-local.yml's layout).

The lone decode cannot leave the router while it is replaced: its new worker starts beside it in the
surge slot ({root}/slot-b, GPUs 6-7, its port shifted), is gated with step 1's new prefill behind the
preview router, joins, the old decode leaves, drains and stops, and the new one moves home. The
continuous client asks the production router throughout and sees no failed request. A release whose
new decode crashes in the slot fails step 1's gate and is put back with no failed request either: the
old decode never left.

A controller killed once the surge decode has joined the production router leaves the roll's record
(rolling.json): the next deploy puts the old release back first, step by step behind the router (no failed
request), the surge decode removed and its slot stopped; stop.yml after such a kill leaves nothing running,
the slot included, and every host pointed at the release the roll started from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
import yaml

from dsv4deploy.rollout.downtime import DowntimeClient
from tests.integration.simhost import SimHost, assign_ports, stop_supervisord
from tests.integration.test_blue_green import FAST, READINESS, _listening, _registered_ports
from tests.integration.test_interrupted import kill_when, start
from tests.integration.test_rolling import _worker, assert_active, roll_under_load
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

# Ports from the base: router, prefill[0], decode[0], its bootstrap, router metrics (assign_ports), then
# prefill[1] and its bootstrap; the preview router on the router's port + PORT_OFFSET, the surge decode
# on decode[0]'s + PORT_OFFSET.
PORT_OFFSET = 8
WORKERS = ["sglang-dsv4-router", "sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-prefill-2"]


@pytest.fixture(scope="module")
def surge_host(sim_host: SimHost) -> Iterator[SimHost]:
    """The module's simulated host as a 2P1D with its own ports, a release serving."""
    base = sim_host.base_port = free_port_block(PORT_OFFSET + 5)
    assign_ports(sim_host.inventory, base, install_root=sim_host.install_root)
    dep_path = sim_host.inventory / "group_vars" / "all" / "deployment.yml"
    dep = yaml.safe_load(dep_path.read_text())
    faults = "{{ sim_faults_by_role.%s | default(sim_faults) }}"
    dep["prefill"] = [
        _worker([0, 1], base + 1, "prefill", faults % "prefill", bootstrap_port=base + 3),
        _worker([2, 3], base + 5, "prefill", faults % "prefill", bootstrap_port=base + 6)]
    dep["decode"] = [_worker([4, 5], base + 2, "decode", faults % "decode")]
    # tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
    dep.update(dsv4_rollout_strategy="rolling", dsv4_rollout_blue_green_port_offset=PORT_OFFSET, gpu_memory_gib=141)
    dep_path.write_text(yaml.safe_dump(dep, sort_keys=False))
    try:
        # Nothing serves yet: the first release starts as recreate starts it (readiness alone: not the subject).
        sim_host.playbook("deploy.yml", *FAST, *READINESS, check=True)
        yield sim_host
    finally:
        # The slot's supervisord, should a failed run have left it (the module's teardown stops the rest).
        stop_supervisord(sim_host.install_root / "slot-b")


def _slot_runs_nothing(host: SimHost) -> None:
    assert not _listening(host.base_port + PORT_OFFSET), "the preview router still listens"
    assert not _listening(host.base_port + 2 + PORT_OFFSET), "the surge decode still listens"
    assert not (host.install_root / "slot-b" / "supervisor" / "supervisord.pid").exists(), "the slot's supervisord"


def test_rolling_2p1d_by_surge_promotes_with_no_failed_request(surge_host: SimHost) -> None:
    first = surge_host.active_release()
    roll_under_load(surge_host, "rolling 2P1D by surge, promotion", "-e",
                    '{"server_env_extra": {"DSV4_SURGE_TEST": "2"}}', promoted=True,
                    says="Readiness and config of the workers at home through the preview router: step 1")
    second = surge_host.active_release()
    assert second != first
    assert_active(surge_host, second)
    # Every worker is home again, on the spec's own ports; nothing runs in the slot.
    assert set(surge_host.pids()) >= set(WORKERS)
    assert all(_listening(surge_host.base_port + i) for i in (0, 1, 2, 5))
    _slot_runs_nothing(surge_host)
    report = surge_host.report()
    assert report["verdict"] == "promoted"
    assert report["rolling_table"][-1] == f"| 2 | {second} | {second} | {second} |", report["rolling_table"]


def test_a_surge_worker_that_fails_its_gate_leaves_the_old_decode_serving(surge_host: SimHost) -> None:
    serving = surge_host.active_release()
    # The new decode crashes in the slot: step 1's readiness fails before it joins; the old one never left.
    roll_under_load(surge_host, "rolling 2P1D by surge, step 1 failed and put back",
                    "-e", '{"server_env_extra": {"DSV4_SURGE_TEST": "3"}}',
                    "-e", '{"sim_faults_by_role": {"decode": "crash_on_start"}}',
                    promoted=False, says="ROLLED BACK: rolling step 1: readiness failed")
    assert_active(surge_host, serving)
    assert set(surge_host.pids()) >= set(WORKERS)
    _slot_runs_nothing(surge_host)
    report = surge_host.report()
    assert report["verdict"] == "rolled_back" and report["release"] != serving


def _killed_once_the_surge_decode_joined(host: SimHost, *extra: str) -> dict:
    """Start a roll and SIGKILL its controller once the production router lists the surge decode; the
    roll's record it left. Step 1's gates are readiness alone: the kill after them is the subject."""
    surge_port = host.base_port + 2 + PORT_OFFSET
    kill_when(start(host, "deploy.yml", *FAST, *READINESS, *extra), lambda: surge_port in _registered_ports(host),
              "the surge decode joined the production router")
    return json.loads((host.install_root / "rolling.json").read_text())


def _deployed_with(host: SimHost, release: str) -> list[str]:
    """The -e that deploys `release` again: the env switches its spec.json recorded (the module's tests
    differ only in those)."""
    spec = json.loads((host.install_root / "releases" / release / "spec.json").read_text())["deployment"]
    return ["-e", json.dumps({"server_env_extra": spec.get("server_env_extra") or {}})]


def _every_worker_runs(host: SimHost, release: str) -> None:
    """Each worker's process runs from `release` (its working directory, `current` resolved at its start).
    The router is left out: a roll never restarts it (its program is the same in both releases)."""
    pids = host.pids()
    assert set(pids) >= set(WORKERS), pids
    runs = {name: os.path.basename(os.readlink(f"/proc/{pid}/cwd")) for name, pid in pids.items()
            if not name.endswith("-router")}
    assert set(runs.values()) == {release}, runs


def test_a_controller_killed_mid_surge_is_undone_by_the_next_deploy(surge_host: SimHost) -> None:
    serving, home = surge_host.active_release(), _registered_ports(surge_host)
    record = _killed_once_the_surge_decode_joined(surge_host, "-e", '{"server_env_extra": {"DSV4_SURGE_TEST": "4"}}')
    assert record["old"] == serving and record["at"] == 1, {k: record[k] for k in ("old", "new", "at", "left")}
    # The next run deploys the serving release again: the roll is undone first, with no failed request.
    with DowntimeClient(surge_host.endpoint, "deepseek-v4-flash", api_key=surge_host.api_key, concurrency=2) as client:
        again = surge_host.playbook("deploy.yml", *FAST, *READINESS, *_deployed_with(surge_host, serving))
    out = again.stdout + again.stderr
    flat = " ".join(out.split())  # the callback wraps long lines
    assert again.returncode == 0 and f"a roll from {serving} to {record['new']} died at step 1" in flat, out[-6000:]
    assert "UNCHANGED" in out, out[-3000:]
    print(f"a roll killed mid-surge, undone by the next deploy, under the continuous client: {client.figures.line()}")
    figures = client.figures
    assert figures.sent > 10 and figures.failed == 0, figures.line() + f" {figures.failures}"
    # One release everywhere, the router listing exactly its workers, nothing left in the slot, no record.
    assert_active(surge_host, serving)
    _every_worker_runs(surge_host, serving)
    assert _registered_ports(surge_host) == home
    _slot_runs_nothing(surge_host)
    assert not (surge_host.install_root / "rolling.json").exists()


def test_stop_after_a_controller_killed_mid_surge_stops_the_slot_too(surge_host: SimHost) -> None:
    serving = surge_host.active_release()
    _killed_once_the_surge_decode_joined(surge_host, "-e", '{"server_env_extra": {"DSV4_SURGE_TEST": "5"}}')
    stop = surge_host.playbook("stop.yml")
    out = stop.stdout + stop.stderr
    assert stop.returncode == 0 and "rolling repair: a roll from" in out, out[-6000:]
    assert surge_host.pids() == {}
    _slot_runs_nothing(surge_host)
    assert not any(_listening(surge_host.base_port + i) for i in range(PORT_OFFSET + 5))
    assert_active(surge_host, serving)
    assert not (surge_host.install_root / "rolling.json").exists()
