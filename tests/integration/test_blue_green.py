"""blue_green through the playbook on the embedded simulated host (one host for the module).

The continuous client (dsv4deploy.rollout.downtime) asks the production router throughout. A release that passes
its gates beside the serving one is promoted with no failed request, and ends exactly where recreate
would leave it (current, state.json, the router and workers under the install root; the other slot and
its preview router stopped). A release that fails a gate beside it leaves production serving, untouched,
with its own servers stopped.

With the previous release kept warm (dsv4_rollout_keep_previous_s) the new release serves from the other
slot while the previous one runs on at home, unregistered; a rollback then is a switch of the production
router back to those very processes, with no failed request under the continuous client. After the window
the next run moves the new release home first, and a rollback is a recreate. stop.yml inside the window
leaves nothing running in either slot and the new release active.

A controller that rebooted half way through a switch (its lock names another boot) is refused until the
operator removes the lock; the next run then repairs from the switch record with no failed request (right
after the promotion, whose release it deploys again).

The keep-previous cases share this module's host (they were test_blue_green_keep.py, a host and a first
deploy of their own): each starts from whatever release serves, as an operator's next deploy would.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from dsv4deploy.rollout.downtime import DowntimeClient
from tests.integration.simhost import (
    READINESS,
    SMALL_NEEDLE_VARS,
    SMALL_SOAK,
    SimHost,
    assert_cause_named,
    assign_ports,
    stop_supervisord,
)
from tests.integration.test_interrupted import kill_at, kill_when, lock_record, start
from tests.ports import free_port_block

pytestmark = pytest.mark.integration

# Short deadlines, the small soak and a needle grid of 2 cells (the seeds' 5.5K requirement kept) instead of
# the inventory's 18: the gates run and pass through the preview router, but they are not these modules'
# subject (test_gate_promises' and test_fault_matrix's).
FAST = ["-e", "readiness_deadline_s=20", "-e", "smoke_deadline_s=30", "-e", "needle_deadline_s=120", *SMALL_SOAK,
        "-e", json.dumps(SMALL_NEEDLE_VARS)]
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
    # tp 2 holds DeepSeek-V4-Flash (76 GiB of NVFP4 weights per GPU) only on 141 GiB cards (docs/memory.md).
    dep.update(dsv4_rollout_strategy="blue_green", dsv4_rollout_blue_green_gpu_offset=4,
               dsv4_rollout_blue_green_port_offset=PORT_OFFSET, gpu_memory_gib=141)
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
    bg_host.playbook("deploy.yml", *FAST, *READINESS, check=True)
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
    report = bg_host.report()
    assert report["verdict"] == "promoted"
    # The playbook's own continuous client (on by default for blue_green) saw no failure either.
    seen = report["downtime"]
    assert seen["sent"] > 10 and seen["failed"] == 0 and seen["endpoint"] == bg_host.endpoint, seen
    assert "| what clients saw (continuous client on" in (bg_host.reports / "latest" / "report.md").read_text()


def test_a_controller_rebooted_mid_switch_is_repaired_after_its_lock_is_removed(bg_host: SimHost) -> None:
    # Runs right after the promotion: its release (DSV4_BG_TEST 2) serves, and the repair deploys it again.
    serving_env = ["-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}']
    serving, home = bg_host.active_release(), _registered_ports(bg_host)
    spec = json.loads((bg_host.install_root / "releases" / str(serving) / "spec.json").read_text())
    assert spec["deployment"]["server_env_extra"] == {"DSV4_BG_TEST": "2"}, "runs after the promotion"
    proc = start(bg_host, "deploy.yml", *FAST, *READINESS, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "6"}}')
    kill_when(proc, lambda: any(p >= bg_host.base_port + PORT_OFFSET for p in _registered_ports(bg_host)),
              "the switch began")
    assert set(_registered_ports(bg_host)) - set(home), "the kill came after the switch"
    assert (bg_host.install_root / "blue_green_switch.json").exists()
    # The controller rebooted: a new boot id, so its run can never be called dead, and the next run says
    # to remove the lock by hand. The operator does.
    lock = bg_host.install_root / "deploy.lock"
    lock.write_text(json.dumps({**lock_record(bg_host), "controller_boot": "another-boot/pid:[1]"}))
    refused = bg_host.playbook("deploy.yml", *FAST, *READINESS, *serving_env)
    assert refused.returncode != 0 and f"remove {lock} on the host" in refused.stdout, refused.stdout[-4000:]
    lock.unlink()
    # The switch record makes the next run repair first, with no failed request.
    with DowntimeClient(bg_host.endpoint, "deepseek-v4-flash", api_key=bg_host.api_key, concurrency=2) as client:
        repair = bg_host.playbook("deploy.yml", *FAST, *READINESS, *serving_env)
    out = repair.stdout + repair.stderr
    assert repair.returncode == 0 and "was left in progress" in out, out[-5000:]
    assert client.figures.failed == 0, client.figures.line()
    assert bg_host.active_release() == serving and _registered_ports(bg_host) == home
    assert not (bg_host.install_root / "blue_green_switch.json").exists()
    assert not _listening(bg_host.base_port + PORT_OFFSET)
    assert not (_slot(bg_host) / "supervisor" / "supervisor.sock").exists()


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
    assert_cause_named(report, report["cause"]["gate"], "local", out)
    assert report["failed_gate"] == report["cause"]["gate"], report["cause"]
    # The log lines are the new release's, read in the slot where the gates ran (its programs carry the
    # slot's deployment name), not the serving servers'.
    logs = report["cause"]["logs"]["local"]
    assert logs and all(line.startswith("sglang-dsv4_") for line in logs), logs


def test_a_bake_failing_after_the_switch_rolls_every_host_back(bg_host: SimHost) -> None:
    # The bake runs under every strategy once the new release serves (docs/bake.md): here after blue_green moved
    # it home, so the way back is a recreate of the previous release (its outage is the rollback's).
    serving = bg_host.active_release()
    bake = {"dsv4_bake_s": 2, "dsv4_bake_interval_s": 1, "dsv4_bake_error_limit": 2}
    proc = bg_host.playbook("deploy.yml", *FAST, *READINESS, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "5"}}',
                            "-e", "sim_faults=metrics_error", "-e", json.dumps(bake))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "ROLLED BACK" in out, out[-5000:]
    report = bg_host.report()
    assert (report["verdict"], report["failed_gate"]) == ("rolled_back", "bake"), out[-3000:]
    assert next(g for g in report["gates"] if g["name"] == "bake")["status"] == "error"
    assert bg_host.active_release() == serving
    assert set(bg_host.pids()) >= {"sglang-dsv4-router", "sglang-dsv4-prefill", "sglang-dsv4-decode"}
    assert not (_slot(bg_host) / "supervisor" / "supervisor.sock").exists()


def test_router_settings_change_is_named_first_and_replaces_the_router_once(bg_host: SimHost) -> None:
    router_pid = bg_host.pids()["sglang-dsv4-router"]
    proc, figures = _deploy_under_load(bg_host, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}', "-e",
                                       '{"server_env_extra_by_role": {"router": {"DSV4_BG_ROUTER": "1"}}}')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    # Named by field before anything changed (the plan's line comes before the preflight)...
    # The callback wraps long lines and doubles a quote inside a quoted one.
    flat = " ".join(out.split()).replace("''", "'")
    said = flat.find("rollout blue_green: the production router's own settings change "
                     "(server_env_extra_by_role.router)")
    assert 0 <= said < flat.index("Check the other slot's GPUs free"), out[:20000]
    print(f"blue_green with the router replaced, the test's continuous client: {figures.line()}")
    # ...the router replaced once, serving the new workers at home and nothing else...
    assert bg_host.pids()["sglang-dsv4-router"] != router_pid
    assert all(p < bg_host.base_port + PORT_OFFSET for p in _registered_ports(bg_host))
    # ...and the report says so, with the playbook's own figures of the outage.
    report = bg_host.report()
    assert report["rollout"]["router_change"]["fields"] == ["server_env_extra_by_role.router"], report["rollout"]
    assert report["downtime"]["sent"] > 0, report["downtime"]
    print(f"the playbook's continuous client: {report['downtime']}")


def _registered_ports(host: SimHost) -> list[int]:
    """The ports of the workers the production router lists (GET /workers)."""
    headers = {"Authorization": f"Bearer {host.api_key}"} if host.api_key else {}
    workers = httpx.get(f"{host.endpoint}/workers", timeout=10, trust_env=False, headers=headers).json()
    return sorted(int(w["url"].rsplit(":", 1)[1]) for w in workers["workers"])


def _clients_of(endpoint: str) -> list[int]:
    """PIDs of continuous clients (python -m dsv4deploy.rollout.downtime) asking `endpoint`."""
    out = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dsv4deploy.rollout.downtime" in argv and endpoint.encode() in argv:
            out.append(int(proc.name))
    return out


def test_controller_killed_mid_switch_is_repaired_by_the_next_run(bg_host: SimHost) -> None:
    serving, home = bg_host.active_release(), _registered_ports(bg_host)
    args = [*FAST, "-e", '{"server_env_extra_by_role": {"router": {"DSV4_BG_ROUTER": "1"}}}']
    proc = start(bg_host, "deploy.yml", *args, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "4"}}')
    # Killed once the production router has the slot's workers: half way through the switch.
    kill_when(proc, lambda: any(p >= bg_host.base_port + PORT_OFFSET for p in _registered_ports(bg_host)),
              "the switch began")
    assert lock_record(bg_host)["phase"] == "blue_green: switch"
    assert set(_registered_ports(bg_host)) - set(home), "the kill came after the switch"
    # The next run (the serving release deployed again) says what died, and repairs with no failed request.
    with DowntimeClient(bg_host.endpoint, "deepseek-v4-flash", api_key=bg_host.api_key, concurrency=2) as client:
        repair = bg_host.playbook("deploy.yml", *args, "-e", '{"server_env_extra": {"DSV4_BG_TEST": "2"}}')
    out = repair.stdout + repair.stderr
    assert repair.returncode == 0 and "died during phase 'blue_green: switch'" in out, out[-5000:]
    print(f"repair after a controller killed mid-switch, under the continuous client: {client.figures.line()}")
    assert client.figures.failed == 0, client.figures.line()
    assert bg_host.active_release() == serving and _registered_ports(bg_host) == home
    assert not (_slot(bg_host) / "supervisor" / "supervisor.sock").exists()
    assert not _listening(bg_host.base_port + PORT_OFFSET)
    # The dead run's own client noticed its controller was gone and stopped.
    assert not _clients_of(bg_host.endpoint)


def test_recreate_report_shows_its_outage(bg_host: SimHost) -> None:
    # The same host rolled out by recreate, with the client asked for: the report shows the outage.
    proc = bg_host.playbook("deploy.yml", *FAST, "-e", "dsv4_rollout_strategy=recreate", "-e",
                            "dsv4_rollout_measure_downtime=true", "-e", '{"dsv4_gates_names": ["readiness"]}',
                            "-e", '{"server_env_extra": {"DSV4_BG_TEST": "3"}}')
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    report = bg_host.report()
    seen = report["downtime"]
    print(f"recreate, the playbook's continuous client: {seen}")
    assert report["verdict"] == "promoted" and report["rollout"]["strategy"] == "recreate"
    assert seen["failed"] > 0 and seen["longest_gap_s"] > 1.0, seen


# The previous release kept warm: KEEP keeps it for a window longer than any case here.
KEEP = ["-e", "dsv4_rollout_keep_previous_s=600"]


def _record(host: SimHost) -> dict | None:
    path = host.install_root / "blue_green.json"
    return json.loads(path.read_text()) if path.exists() else None


def _slot_running(host: SimHost) -> bool:
    return (_slot(host) / "supervisor" / "supervisor.sock").exists()


def _env(n: int) -> list[str]:
    """A release of its own (a harmless switch), its gates readiness alone: the settle is the subject."""
    return [*READINESS, "-e", json.dumps({"server_env_extra": {"DSV4_KEEP_TEST": str(n)}})]


def test_a_bake_beside_a_previous_release_kept_warm_is_refused_before_anything_changes(bg_host: SimHost) -> None:
    serving, pids = bg_host.active_release(), bg_host.pids()
    proc = bg_host.playbook("deploy.yml", *KEEP, *_env(9), "-e", "dsv4_bake_s=30")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "dsv4_bake_s: 30 with dsv4_rollout_keep_previous_s 600" in out, out[-3000:]
    assert bg_host.active_release() == serving and bg_host.pids() == pids and _record(bg_host) is None


def test_rollback_inside_the_window_is_a_switch_back_with_no_failed_request(bg_host: SimHost) -> None:
    first = bg_host.active_release()
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


def test_controller_killed_mid_switch_back_is_finished_by_the_next_rollback(bg_host: SimHost) -> None:
    first = bg_host.active_release()
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


def test_after_the_window_the_next_run_moves_home_and_rollback_is_recreate(bg_host: SimHost) -> None:
    first = bg_host.active_release()
    proc, figures = _deploy_under_load(bg_host, "-e", "dsv4_rollout_keep_previous_s=1", *_env(3))
    assert proc.returncode == 0 and figures.failed == 0, (proc.stdout + proc.stderr)[-5000:]
    new = (_record(bg_host) or {}).get("release")
    assert new and new != first
    time.sleep(1.5)  # the window is over
    # verify.yml moves the new release home first (its workers restarted at home), then verifies it.
    with DowntimeClient(bg_host.endpoint, "deepseek-v4-flash", api_key=bg_host.api_key, concurrency=2) as client:
        verify = bg_host.playbook("verify.yml", *FAST)  # every gate, small: the move home is the subject
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


# Last in this module: it stops the deployment.
def test_stop_inside_the_window_stops_both_slots_and_leaves_the_new_release_active(bg_host: SimHost) -> None:
    proc, _ = _deploy_under_load(bg_host, *KEEP, *_env(4))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    new = _record(bg_host)["release"]
    assert _slot_running(bg_host), "the slot runs the new release while the previous one runs at home"
    bg_host.playbook("stop.yml", check=True)
    # Nothing runs in either slot: no program, no slot supervisord, no port of either slot listening...
    assert bg_host.pids() == {} and not _slot_running(bg_host) and _record(bg_host) is None
    assert not any(_listening(bg_host.base_port + i) for i in range(2 * PORT_OFFSET))
    # ...and the new release is the active one at home.
    assert bg_host.active_release() == new
