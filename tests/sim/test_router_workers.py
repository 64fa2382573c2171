"""The worker-API client (plugins/module_utils/router_workers.py) and its host module dsv4_router_workers
against the REAL routers, sglang-router 0.3.2 and smg 1.13.0, with simulated PD workers on loopback: two
pairs ("blue" serving, "green" new) on one simulated 8-GPU host, tp 2 each."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from simhelpers import PYTHON, REPO, Launcher, chat, free_port, http, pd_pair, wait_status

from ansible_collections.dsv4.deploy.plugins.module_utils.router_workers import (
    RouterWorkers,
    RouterWorkersError,
    api_for,
)
from dsv4deploy.rollout.downtime import DowntimeClient
from tests.unit.plugins.runner import run_module

pytest.importorskip("sglang_router", reason="needs sglang-router 0.3.2 (extra 'sim')")
pytestmark = pytest.mark.integration

SMG_PYTHON = REPO / ".smg-venv" / "bin" / "python"
ROUTERS = {"sglang-router": ([PYTHON, "-m", "sglang_router.launch_router"], "0.3.2"),
           "smg": ([str(SMG_PYTHON), "-m", "smg.launch_router"], "1.13.0")}


@pytest.fixture(scope="module")
def pairs(module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Both pairs, shared by every router of this module (the routers only route to them)."""
    state = tmp_path_factory.mktemp("host")
    return {"blue": pd_pair(module_launcher, state, 0)[0], "green": pd_pair(module_launcher, state, 4)[0]}


@pytest.fixture(params=list(ROUTERS))
def router(request: pytest.FixtureRequest, pairs: dict, tmp_path: Path) -> Iterator[dict]:
    """The real router, started with the blue pair as its workers; stopped when the test ends."""
    argv, version = ROUTERS[request.param]
    if request.param == "smg" and not SMG_PYTHON.exists():
        pytest.skip(f"needs smg 1.13.0 in its own venv ({SMG_PYTHON}); ./scripts/setup.sh builds it")
    prefill, decode = pairs["blue"]
    port = free_port()
    launcher = Launcher(tmp_path)
    try:
        launcher.start([*argv, "--pd-disaggregation", "--prefill", prefill["url"], str(prefill["bootstrap_port"]),
                        "--decode", decode["url"], "--host", "127.0.0.1", "--port", str(port),
                        "--worker-startup-check-interval", "1", "--shutdown-grace-period-secs", "1",
                        "--prometheus-host", "127.0.0.1",
                        "--prometheus-port", str(free_port())], port=port, name=request.param, timeout=30)
        url = f"http://127.0.0.1:{port}"
        wait_status(f"{url}/readiness", 200, timeout=30)
        yield {"name": request.param, "version": version, "url": url}
    finally:
        launcher.close()


def _module(tmp_path: Path, router: dict, check_mode: bool = False, **args: object) -> dict:
    return run_module("dsv4_router_workers", tmp_path, check_mode=check_mode, router_url=router["url"],
                      router=router["name"], router_version=router["version"], **args)


def _urls(workers: Iterable[dict]) -> set[str]:
    return {w["url"] for w in workers}


def test_switch_the_router_from_blue_to_green(router: dict, pairs: dict, tmp_path: Path) -> None:
    """Check mode says what it would do and changes nothing; the switch adds green before removing blue,
    the router then serves green alone (and answers); a second run changes nothing."""
    blue, green = _urls(pairs["blue"]), _urls(pairs["green"])
    planned = _module(tmp_path, router, check_mode=True, workers=pairs["green"], exclusive=True)
    assert planned["changed"] and len(planned["would"]) == 4, planned
    assert _urls(planned["before"]) == blue and set(planned["removed"]) == blue
    assert _urls(RouterWorkers(router["url"], api_for(router["name"], router["version"])).list()) == blue

    done = _module(tmp_path, router, workers=pairs["green"], exclusive=True)
    assert not done.get("failed"), done
    assert done["changed"] and set(done["added"]) == green and set(done["removed"]) == blue
    serving = [w for w in done["workers"] if w["status"] != "draining"]
    assert _urls(serving) == green
    assert {w["worker_type"] for w in serving} == {"prefill", "decode"}
    prefill = next(w for w in serving if w["worker_type"] == "prefill")
    assert prefill["bootstrap_port"] == pairs["green"][0]["bootstrap_port"]
    status, reply = chat(router["url"], "Say OK", max_tokens=5)
    assert status == 200, reply

    again = _module(tmp_path, router, workers=pairs["green"])
    assert not again.get("failed") and not again["changed"] and again["added"] == []


def test_switch_and_switch_back_under_load_fail_no_request(router: dict, pairs: dict, tmp_path: Path) -> None:
    """Blue/green through the worker API while a continuous client asks the router: switch to green with
    the removed blue workers drained (judged from their own /metrics), then back to blue (a rollback
    while the old servers still run): not one request fails."""
    with DowntimeClient(router["url"], "dsv4", concurrency=2) as client:
        for new, old in (("green", "blue"), ("blue", "green")):
            time.sleep(0.5)
            out = _module(tmp_path, router, workers=pairs[new], exclusive=True, drain_s=10)
            assert not out.get("failed") and set(out["removed"]) == _urls(pairs[old]), out
            assert [d["idle"] for d in out["drained"]] == [True, True], out["drained"]
        time.sleep(0.5)
    figures = client.figures
    print(f"{router['name']} blue/green switch and back: {figures.line()}")  # the figure, with pytest -s
    assert figures.sent > 20 and figures.failed == 0, figures.line() + f" {figures.failures}"


def test_a_half_done_switch_is_finished_by_the_next_run(router: dict, pairs: dict, tmp_path: Path) -> None:
    """A controller killed between adding green and removing blue leaves both registered; the same
    exclusive switch run again removes blue, leaving no worker the target release does not own."""
    half = _module(tmp_path, router, workers=pairs["green"])
    assert half["changed"] and _urls(half["workers"]) == _urls(pairs["blue"]) | _urls(pairs["green"]), half
    again = _module(tmp_path, router, workers=pairs["green"], exclusive=True)
    assert again["changed"] and again["added"] == [] and set(again["removed"]) == _urls(pairs["blue"]), again
    assert _urls(w for w in again["workers"] if w["status"] != "draining") == _urls(pairs["green"])


def test_remove_then_add_back(router: dict, pairs: dict, tmp_path: Path) -> None:
    """state=absent takes a pair out (readiness then fails: no prefill, no decode); present puts it back."""
    out = _module(tmp_path, router, workers=pairs["blue"], state="absent")
    assert out["changed"] and set(out["removed"]) == _urls(pairs["blue"]), out
    wait_status(f"{router['url']}/readiness", 503, timeout=15)
    out = _module(tmp_path, router, workers=pairs["blue"], state="absent")
    assert not out["changed"]
    back = _module(tmp_path, router, workers=pairs["blue"])
    assert back["changed"] and not back.get("failed"), back
    wait_status(f"{router['url']}/readiness", 200, timeout=15)


def test_a_worker_that_never_answers_is_refused_and_not_left_pending(router: dict, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    out = _module(tmp_path, router, workers=[{"url": dead, "worker_type": "decode"}], timeout_s=2)
    assert out["failed"] and dead in out["msg"] and router["url"] in out["msg"], out
    assert dead not in _urls(_module(tmp_path, router, state="query")["workers"])


@pytest.mark.parametrize(("kind", "version", "api"), [
    ("smg", "1.13.0", "uuid"), ("sglang-router", "0.3.2", "uuid"), ("sglang-router", "0.3.0", "uuid"),
    ("sglang-router", "0.2.4", "url"), ("sglang-router", "0.2.2", "url"), ("sglang-router", "0.2.1", "legacy"),
    ("sglang-router", "0.1.9", "legacy")])
def test_the_worker_api_follows_router_and_version(kind: str, version: str, api: str) -> None:
    assert api_for(kind, version) == api


def test_an_old_router_cannot_take_pd_workers_at_run_time() -> None:
    """sglang-router <= 0.2.1 adds regular workers only: refused before any request, naming the fix."""
    client = RouterWorkers(f"http://127.0.0.1:{free_port()}", "legacy")
    with pytest.raises(RouterWorkersError, match=r"only add regular.*upgrade it to 0\.3"):
        client.add("http://127.0.0.1:1", "prefill", 8998)


def test_sglang_router_0_3_2_has_no_legacy_routes(router: dict) -> None:
    """What the version switch rests on: 0.3.2 and smg have no /add_worker, and want UUIDs as ids."""
    assert http("POST", f"{router['url']}/add_worker?url=http://127.0.0.1:1")[0] == 404
    status, body = http("DELETE", f"{router['url']}/workers/http%3A%2F%2F127.0.0.1%3A1")
    assert status == 400 and "UUID" in json.loads(body)["error"]


@pytest.mark.parametrize("name", list(ROUTERS))
def test_a_router_with_an_api_key_wants_it_for_its_worker_api(name: str, tmp_path: Path) -> None:
    """--api-key guards /workers too (401 without the Bearer key, on both wheels): the module sends it."""
    argv, version = ROUTERS[name]
    if name == "smg" and not SMG_PYTHON.exists():
        pytest.skip(f"needs smg 1.13.0 in its own venv ({SMG_PYTHON}); ./scripts/setup.sh builds it")
    port, launcher = free_port(), Launcher(tmp_path)
    try:
        launcher.start([*argv, "--pd-disaggregation", "--host", "127.0.0.1", "--port", str(port), "--api-key", "k3y",
                        "--shutdown-grace-period-secs", "1", "--prometheus-host", "127.0.0.1",
                        "--prometheus-port", str(free_port())], port=port, name=name, timeout=30)
        router = {"url": f"http://127.0.0.1:{port}", "name": name, "version": version}
        refused = _module(tmp_path, router, state="query")
        assert refused["failed"] and "HTTP 401" in refused["msg"], refused
        ok = _module(tmp_path, router, state="query", api_key="k3y")
        assert not ok.get("failed") and ok["workers"] == [] and "k3y" not in json.dumps(ok), ok
    finally:
        launcher.close()
