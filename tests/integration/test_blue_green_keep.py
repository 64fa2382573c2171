"""blue_green with the previous release kept warm (dsv4_rollout_keep_previous_s) on the embedded host,
through the playbooks (one host for the module, shared with test_blue_green's setup: tp 2 per role, both
slots' ports reserved).

Inside the window the new release serves from the other slot while the previous one runs on at home,
unregistered; a rollback then is a switch of the production router back to those very processes, with no
failed request under the continuous client. After the window (and for a stop) the next run moves the new
release home first, and a rollback is a recreate.
"""

from __future__ import annotations

import json
import time

import pytest

from dsv4deploy.downtime import DowntimeClient
from tests.integration.simhost import SimHost
from tests.integration.test_blue_green import (  # noqa: F401  (bg_host is the module's host fixture)
    FAST,
    PORT_OFFSET,
    _deploy_under_load,
    _listening,
    _registered_ports,
    _slot,
    bg_host,
)
from tests.integration.test_interrupted import kill_at, start

pytestmark = pytest.mark.integration

KEEP = ["-e", "dsv4_rollout_keep_previous_s=600"]


def _record(host: SimHost) -> dict | None:
    path = host.install_root / "blue_green.json"
    return json.loads(path.read_text()) if path.exists() else None


def _slot_running(host: SimHost) -> bool:
    return (_slot(host) / "supervisor" / "supervisor.sock").exists()


def _env(n: int) -> list[str]:
    return ["-e", json.dumps({"server_env_extra": {"DSV4_KEEP_TEST": str(n)}})]


@pytest.fixture(scope="module")
def first(bg_host: SimHost) -> str:  # noqa: F811
    """The first release, started as recreate starts it (nothing served before); readiness alone."""
    bg_host.playbook("deploy.yml", *FAST, "-e", '{"dsv4_gates_names": ["readiness"]}', *_env(1), check=True)
    return bg_host.active_release() or ""


def test_rollback_inside_the_window_is_a_switch_back_with_no_failed_request(bg_host: SimHost, first: str) -> None:  # noqa: F811
    home_pids = bg_host.pids()
    home_ports = _registered_ports(bg_host)
    proc, figures = _deploy_under_load(bg_host, *KEEP, *_env(2))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert figures.failed == 0, figures.line()
    record = _record(bg_host)
    assert record and record["previous"] == first and record["until"] > time.time() + 500, record
    # The new release serves from the slot; the previous one runs on at home, the same processes, unregistered.
    assert _slot_running(bg_host) and bg_host.active_release() == first
    assert bg_host.pids() == home_pids
    assert all(p >= bg_host.base_port + PORT_OFFSET for p in _registered_ports(bg_host))
    assert not _listening(bg_host.base_port + PORT_OFFSET), "the slot's preview router still runs"

    with DowntimeClient(bg_host.endpoint, "deepseek-v4-flash", api_key=bg_host.api_key, concurrency=2) as client:
        back = bg_host.playbook("rollback.yml")
    out = back.stdout + back.stderr
    assert back.returncode == 0 and "ROLLED BACK by a switch" in out, out[-5000:]
    print(f"rollback inside the window under the continuous client: {client.figures.line()}")
    assert client.figures.sent > 10 and client.figures.failed == 0, client.figures.line()
    # The warm processes serve again, untouched; the new release's are gone with the slot and the record.
    assert bg_host.pids() == home_pids and _registered_ports(bg_host) == home_ports
    assert bg_host.active_release() == first and not _slot_running(bg_host) and _record(bg_host) is None
    report = bg_host.report()
    assert report["verdict"] == "rolled_back", report


def test_controller_killed_mid_switch_back_is_finished_by_the_next_rollback(bg_host: SimHost, first: str) -> None:  # noqa: F811
    home_pids, home_ports = bg_host.pids(), _registered_ports(bg_host)
    proc, _ = _deploy_under_load(bg_host, *KEEP, *_env(5))
    assert proc.returncode == 0 and _record(bg_host), (proc.stdout + proc.stderr)[-5000:]
    killed = kill_at(bg_host, start(bg_host, "rollback.yml"), "rollback: switch back")
    assert killed["target"] == first and _slot_running(bg_host), killed
    # The next rollback takes the dead run's lock over and finishes the switch back: the same warm processes.
    with DowntimeClient(bg_host.endpoint, "deepseek-v4-flash", api_key=bg_host.api_key, concurrency=2) as client:
        again = bg_host.playbook("rollback.yml")
    out = again.stdout + again.stderr
    assert again.returncode == 0 and "died during phase 'rollback: switch back'" in out, out[-5000:]
    assert "ROLLED BACK by a switch" in out, out[-5000:]
    print(f"rollback after a controller killed mid switch back: {client.figures.line()}")
    assert client.figures.failed == 0, client.figures.line()
    assert bg_host.pids() == home_pids and _registered_ports(bg_host) == home_ports
    assert bg_host.active_release() == first and not _slot_running(bg_host) and _record(bg_host) is None


def test_after_the_window_the_next_run_moves_home_and_rollback_is_recreate(bg_host: SimHost, first: str) -> None:  # noqa: F811
    proc, figures = _deploy_under_load(bg_host, "-e", "dsv4_rollout_keep_previous_s=1", *_env(3))
    assert proc.returncode == 0 and figures.failed == 0, (proc.stdout + proc.stderr)[-5000:]
    new = (_record(bg_host) or {}).get("release")
    assert new and new != first
    time.sleep(1.5)  # the window is over
    # verify.yml moves the new release home first (its workers restarted at home), then verifies it.
    with DowntimeClient(bg_host.endpoint, "deepseek-v4-flash", api_key=bg_host.api_key, concurrency=2) as client:
        verify = bg_host.playbook("verify.yml")
    out = verify.stdout + verify.stderr
    assert verify.returncode == 0 and "move_home" in out, out[-5000:]
    print(f"the move home after the window under the continuous client: {client.figures.line()}")
    assert client.figures.failed == 0, client.figures.line()
    assert bg_host.active_release() == new and _record(bg_host) is None and not _slot_running(bg_host)
    assert all(p < bg_host.base_port + PORT_OFFSET for p in _registered_ports(bg_host))
    # From here on a rollback is a recreate (the restore), to the release verified before.
    back = bg_host.playbook("rollback.yml")
    out = back.stdout + back.stderr
    assert back.returncode == 0 and "ROLLED BACK by hand" in out and "by a switch" not in out, out[-5000:]
    assert bg_host.active_release() != new


def test_stop_inside_the_window_stops_both_and_leaves_the_new_release_active(bg_host: SimHost) -> None:  # noqa: F811
    proc, _ = _deploy_under_load(bg_host, *KEEP, *_env(4))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    new = _record(bg_host)["release"]
    bg_host.playbook("stop.yml", check=True)
    assert bg_host.pids() == {} and not _slot_running(bg_host) and _record(bg_host) is None
    assert bg_host.active_release() == new
    assert not any(_listening(bg_host.base_port + i) for i in range(2 * PORT_OFFSET))
