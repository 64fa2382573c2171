"""dsv4_worker_probe run by ansible-playbook on a host (here localhost over the local connection), with a real
supervisord and a program that dies as it starts: the readiness wait names the program, its host and its last
log line, and with `verdict` the readiness gate's failure comes back in the same task; in check mode the wait
starts nothing; a wait that cannot run says why, naming the host; gates with no host-side part run nothing.
The workers the wait registers with a router that takes them at run time, from a real 2P2D plan."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.dsv4.deploy.plugins.action.dsv4_worker_probe import register_workers
from dsv4deploy.sglang import routers
from tests.ports import free_port
from tests.unit.plugins.conftest import BIN_DIR, PROGRAM, release_root, supervisord_runs, write_release
from tests.unit.plugins.runner import run_play
from tests.unit.rollout.test_rolling_plan import _plan, xpyd_spec

# It dies a second after its start (as a server does while loading): one that exits at once may be refused by
# supervisord's start itself (SPAWN_ERROR, on a loaded machine), before any wait.
DIES = "echo 'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB'\nsleep 1\nexit 1"


def plan(url: str) -> dict:
    """A combined server on localhost at `url` (nothing listens there), no router of its own."""
    return {"served_model_name": "dsv4", "endpoint": url, "router_url": url, "expected_overrides": {},
            "workers": [{"name": PROGRAM, "role": "combined", "url": url, "host": "localhost"}]}


def probe(url: str, services: dict, **args: object) -> dict:
    """A dsv4_worker_probe task for the readiness gate, its wait short."""
    return {"dsv4_worker_probe": {"name": ["readiness"], "plan": plan(url), "services": services,
                                  "settings": {"readiness_deadline_s": 20}, **args}}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[dict]]]:
    """One play: the wait in check mode (nothing started), whether supervisord's pid file is there then; a
    release that dies as it starts, started, and the wait with its verdict; a wait over an unknown service
    manager; gates with no host-side part. The install root, and the results."""
    tmp_path = tmp_path_factory.mktemp("worker_probe")
    url = f"http://127.0.0.1:{free_port()}"
    with release_root(tmp_path) as root:
        write_release(root, "r2", DIES)
        services = {"manager": "supervisor", "install_root": str(root), "supervisor_bin_dir": BIN_DIR}
        results = run_play(tmp_path, [
            {**probe(url, services), "check_mode": True},
            # Asked on the controller (no module run): the same machine here.
            {"ansible.builtin.debug": {"msg": f"{{{{ '{root}/supervisor/supervisord.pid' is exists }}}}"}},
            {"dsv4_service_state": {**services, "state": "started"}},
            probe(url, {**services, "since": "{{ r2.programs }}", "log_offsets": "{{ r2.log_offsets }}"},
                  verdict=True),
            probe(url, {**services, "manager": "upstart"}),
            {"dsv4_worker_probe": {"name": ["smoke", "needle"], "plan": plan(url), "services": services}},
            {"dsv4_worker_probe": {"name": ["readiness"], "services": services}},
        ])
        yield root, results


def test_the_wait_names_the_program_that_died_its_host_and_its_log(run: tuple[Path, list[dict]]) -> None:
    _, results = run
    waited = results[3]
    assert not waited.get("failed") and not waited["changed"], waited
    died = waited["probe"]["died"]
    assert (died["name"], died["host"], died["was_healthy"]) == (PROGRAM, "localhost", False), died
    assert "exit status 1" in died["why"] and "CUDA out of memory" in died["log"], died
    assert waited["probe"]["local"] and waited["probe"]["seconds"] < 20


def test_with_verdict_the_readiness_gate_fails_in_the_same_task_naming_the_host(run: tuple[Path, list[dict]]) -> None:
    _, results = run
    verdict = results[3]["verdict"]
    assert verdict["passed"] is False and verdict["gate"]["name"] == "readiness" and verdict["gate"]["refused"]
    summary = verdict["gate"]["summary"]
    assert summary.startswith(f"{PROGRAM} on host localhost did not start: it exited"), summary
    assert "CUDA out of memory" in summary and verdict["gate"]["hosts"] == ["localhost"], verdict["gate"]


def test_the_wait_in_check_mode_starts_nothing(run: tuple[Path, list[dict]]) -> None:
    root, results = run
    checked, pidfile = results[0], results[1]
    assert not checked.get("failed") and not checked["changed"] and "verdict" not in checked, checked
    assert checked["probe"]["died"]["name"] == PROGRAM  # nothing runs: the wait says so at once
    assert pidfile["msg"] is False, "check mode started supervisord"
    assert results[2]["changed"] and supervisord_runs(root)  # the real start, after it


def test_a_wait_that_cannot_run_says_why_naming_the_host(run: tuple[Path, list[dict]]) -> None:
    _, results = run
    died = results[4]["probe"]["died"]
    assert (died["host"], died["name"]) == ("localhost", "(the wait)") and not results[4].get("failed"), died
    assert died["why"] == "could not watch the services: services.manager must be systemd or supervisor, not 'upstart'"


def test_gates_with_no_host_side_part_run_nothing_and_a_missing_plan_is_named(run: tuple[Path, list[dict]]) -> None:
    _, results = run
    nothing, no_plan = results[5], results[6]
    assert nothing["probe"] == {"local": True, "seconds": 0.0, "workers": {}} and not nothing["changed"], nothing
    assert no_plan["failed"] and no_plan["msg"] == "missing required arguments: plan"


def test_the_router_is_told_every_worker_as_its_worker_api_takes_them() -> None:
    plan = _plan(xpyd_spec())
    told = register_workers(plan, "gpu1")
    impl = routers.implementation(plan["router"])
    assert (told["program"], told["router"], told["router_version"], told["router_url"]) == (
        plan["router_service"], impl.name, impl.version, plan["router_url"])
    # Every worker of the plan, whichever host runs it; a prefill with its bootstrap port, a decode without.
    assert [(w["name"], w["url"], w["worker_type"], w["bootstrap_port"]) for w in told["workers"]] == [
        (w["name"], w["url"], w["role"], w["bootstrap_port"]) for w in plan["workers"]]
    assert {w["worker_type"] for w in told["workers"]} == {"prefill", "decode"}
    assert all(w["model_id"] == "deepseek-v4-flash" for w in told["workers"])
    assert all((w["bootstrap_port"] is None) == (w["worker_type"] == "decode") for w in told["workers"])
    # The router's key: the file a worker of this host reads; a host with no worker has none to give.
    assert told["api_key_file"] == "/opt/dsv4deploy/secrets/api_key"
    assert register_workers(plan, "router-only")["api_key_file"] == ""
