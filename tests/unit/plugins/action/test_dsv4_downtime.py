"""dsv4_downtime run by ansible-playbook on the controller: the continuous client it starts asks the endpoint
(a stub router on loopback) until the stop task, which returns what a user would have seen; bad input and
check mode start nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dsv4deploy.rollout.downtime import collect
from tests.unit.gates.stubs import Reply, Request, StubServer, completion
from tests.unit.plugins.runner import run_play

KEY = "sk-downtime-" + "7e21"


def every_other_fails(seen: Path) -> Callable[[Request], Reply]:
    """A router that answers every second request 503, and touches `seen` once it has had four."""
    def route(request: Request) -> Reply:
        if request.n == 3:
            seen.touch()
        return (200, completion("OK")) if request.n % 2 == 0 else (503, "no healthy workers")
    return route


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """One play: start a client against a stub router, wait for its fourth request, stop it; then the bad calls.
    The router's own count of requests and the keys it was sent come last."""
    tmp_path = tmp_path_factory.mktemp("downtime")
    seen = tmp_path / "four-requests"
    server = StubServer({"POST /v1/chat/completions": every_other_fails(seen)})
    started = {"dsv4_downtime": {"state": "started", "endpoint": server.url, "model": "dsv4", "api_key": KEY}}
    try:
        results = run_play(tmp_path, [
            started,
            # Until the router has had four requests: the stop then has figures to give.
            {"ansible.builtin.stat": {"path": str(seen)}, "until": "r1.stat.exists", "retries": 100, "delay": 0.1},
            {"dsv4_downtime": {"state": "stopped", "client": "{{ r0.client }}"}},
            {"dsv4_downtime": {"state": "stopped"}},
            {"dsv4_downtime": {"state": "started", "model": "dsv4"}},
            {"dsv4_downtime": {"state": "running", "endpoint": server.url, "model": "dsv4"}},
            {**started, "check_mode": True},
            # The rollout's own stop after the report's (its always section): the client is gone.
            {"dsv4_downtime": {"state": "stopped", "client": "{{ r0.client }}"}},
        ])
        if results[0].get("client") and "downtime" not in results[2]:  # not stopped: end the client started here
            collect(results[0]["client"], wait_s=5)
    finally:
        server.stop()
    return [*results, {"requests": server.count("POST /v1/chat/completions"), "auth": sorted(set(server.auth_headers))}]


def test_the_client_asks_until_stopped_and_counts_every_failed_request(results: list[dict]) -> None:
    started, waited, stopped, *_, server = results
    assert waited["stat"]["exists"], waited
    assert not started.get("failed") and not started["changed"], started
    client = started["client"]
    assert started["msg"] == f"continuous client asking {client['endpoint']} (pid {client['pid']})"
    figures = stopped["downtime"]
    # Every request the router had was counted, and every second one (its 503) failed.
    assert figures["sent"] == server["requests"] >= 4 and figures["failed"] == figures["sent"] // 2, (figures, server)
    assert figures["failures"][0] == "503: no healthy workers"
    assert stopped["msg"] == (f"continuous client: sent {figures['sent']}, failed {figures['failed']}, longest gap "
                              f"between answers {figures['longest_gap_s']} s")
    assert server["auth"] == [f"Bearer {KEY}"]
    assert KEY not in str(started) and not Path(client["dir"]).exists()


def test_a_stop_without_a_client_says_there_are_no_figures(results: list[dict]) -> None:
    nothing = results[3]
    assert not nothing.get("failed") and nothing["downtime"] == {} and nothing["msg"] == "no client figures"


def test_a_second_stop_of_a_stopped_client_finds_nothing_and_does_not_wait(results: list[dict]) -> None:
    again = results[7]
    assert not again.get("failed") and again["downtime"] == {} and again["msg"] == "no client figures", again


def test_bad_input_is_refused_naming_the_field(results: list[dict]) -> None:
    no_endpoint, bad_state = results[4], results[5]
    assert no_endpoint["failed"] and no_endpoint["msg"] == "dsv4_downtime state=started needs endpoint"
    assert bad_state["failed"] and "value of state must be one of: started, stopped, got: running" in bad_state["msg"]
    assert "client" not in no_endpoint and "client" not in bad_state


def test_check_mode_starts_no_client(results: list[dict]) -> None:
    checked = results[6]
    assert checked["skipped"] and not checked["changed"] and "client" not in checked
    assert checked["msg"] == "check mode: no client was started or stopped"
