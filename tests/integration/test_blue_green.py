"""blue_green through the playbook on the embedded simulated host (one host for the module).

The continuous client (dsv4deploy.downtime) asks the production router throughout. A release that passes
its gates beside the serving one is promoted with no failed request, and ends exactly where recreate
would leave it (current, state.json, the router and workers under the install root; the other slot and
its preview router stopped). A release that fails a gate beside it leaves production serving, untouched,
with its own servers stopped. stop.yml then leaves nothing running in either slot.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dsv4deploy.downtime import DowntimeClient
from tests.integration.simhost import SMALL_SOAK, SimHost, assign_ports, stop_supervisord
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

FAST = ["-e", "readiness_deadline_s=20", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK]
PORT_OFFSET = 5


@pytest.fixture(scope="module")
def bg_host(sim_host: SimHost) -> Iterator[SimHost]:
    """The module's simulated host with a release that takes half the GPUs (tp 2 per role) and ports
    reserved for both slots."""
    sim_host.base_port = free_port_block(2 * PORT_OFFSET)
    assign_ports(sim_host.inventory, sim_host.base_port, install_root=sim_host.install_root)
    dep_path = sim_host.inventory / "group_vars" / "all" / "deployment.yml"
    dep = yaml.safe_load(dep_path.read_text())
    dep["prefill"][0].update(gpus=[0, 1], tp_size=2)
    dep["decode"][0].update(gpus=[2, 3], tp_size=2)
    dep.update(dsv4_rollout_strategy="blue_green", dsv4_rollout_blue_green_gpu_offset=4,
               dsv4_rollout_blue_green_port_offset=PORT_OFFSET)
    dep_path.write_text(yaml.safe_dump(dep, sort_keys=False))
    yield sim_host
    # Last resort (stop.yml, in sim_host's teardown, stops the slot too): a slot's supervisord by its PID.
    stop_supervisord(_slot(sim_host))


def _slot(host: SimHost) -> Path:
    return host.install_root / "slot-b"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _deploy_under_load(host: SimHost, *extra: str) -> tuple[object, object]:
    with DowntimeClient(host.endpoint, "deepseek-v4-flash", api_key=host.api_key, concurrency=2) as client:
        proc = host.playbook("deploy.yml", *FAST, *extra)
    return proc, client.figures


def test_blue_green_promotes_with_no_failed_request(bg_host: SimHost) -> None:
    # Nothing serves yet: there is no outage to avoid, and the first release starts as recreate starts it.
    # Its gates are not the subject here: readiness alone.
    bg_host.playbook("deploy.yml", *FAST, "-e", '{"dsv4_gates_names": ["readiness"]}', check=True)
    first = bg_host.active_release()
    proc, figures = _deploy_under_load(bg_host, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "PROMOTED" in out and "Gates, through the preview router" in out
    print(f"blue_green promotion under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    second = bg_host.active_release()
    assert second and second != first
    state = json.loads((bg_host.install_root / "state.json").read_text())
    assert state["active"] == second, state
    # Back home: the router and the new workers run under the install root, on the spec's ports...
    assert set(bg_host.pids()) >= {"sglang-dsv4-router", "sglang-dsv4-prefill", "sglang-dsv4-decode"}
    # ...and the other slot (its workers and the preview router) is stopped, its supervisord too.
    assert not (_slot(bg_host) / "supervisor" / "supervisor.sock").exists()
    assert not _listening(bg_host.base_port + PORT_OFFSET)
    assert bg_host.report()["verdict"] == "promoted"


def test_blue_green_gate_failure_leaves_production_serving(bg_host: SimHost) -> None:
    serving = bg_host.active_release()
    pids = bg_host.pids()
    proc, figures = _deploy_under_load(bg_host, "-e", "sim_faults=ignore_override")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "production was not touched, no rollback" in out, out[-5000:]
    print(f"blue_green gate failure under the continuous client: {figures.line()}")
    assert figures.sent > 10 and figures.failed == 0, figures.line()
    # Production untouched: the same release, the same processes.
    assert bg_host.active_release() == serving and bg_host.pids() == pids
    assert not (_slot(bg_host) / "supervisor" / "supervisor.sock").exists()
    assert not _listening(bg_host.base_port + PORT_OFFSET)
    report = bg_host.report()
    assert report["verdict"] == "failed" and "production was not touched" in json.dumps(report)


def test_stop_leaves_nothing_running(bg_host: SimHost) -> None:
    bg_host.playbook("stop.yml", check=True)
    assert bg_host.pids() == {}
    assert not any(_listening(bg_host.base_port + i) for i in range(2 * PORT_OFFSET))
