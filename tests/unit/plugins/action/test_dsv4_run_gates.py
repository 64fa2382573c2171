"""dsv4_run_gates run by ansible-playbook on the controller, against stub routers on loopback: a gate that
passes and one that fails (refused, with its evidence), each group of `then` after the one before; check mode
asks nothing; a gate name, a setting, a bake setting or an unreadable key file is refused naming it."""

from __future__ import annotations

import pytest

from tests.unit.gates.stubs import StubServer, always, completion
from tests.unit.plugins.runner import run_play

KEY = "sk-gates-" + "41c9"


def plan(url: str) -> dict:
    """What the gates read of a plan: a router at `url` serving dsv4, no workers to check."""
    return {"served_model_name": "dsv4", "endpoint": url, "router_url": url, "workers": [], "expected_overrides": {}}


def gates(url: str, **args: object) -> dict:
    """A dsv4_run_gates task against the router at `url`."""
    return {"dsv4_run_gates": {"plan": plan(url), "settings": {"smoke_deadline_s": 5}, **args}}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, StubServer], list[dict]]:
    """One play of every call; the stub routers (stopped by now), and the results."""
    good = StubServer({"POST /v1/chat/completions": always((200, completion("OK")))})
    garbled = StubServer({"POST /v1/chat/completions": always((200, completion("Lorem ipsum")))})
    asked = StubServer({})  # what no call may ask
    try:
        results = run_play(tmp_path_factory.mktemp("run_gates"), [
            gates(good.url, name=["smoke"], api_key=KEY),
            gates(garbled.url, name=["smoke"], then=[["smoke"]]),
            {**gates(asked.url, name=["readiness"], then=[["config", "smoke"], "needle"]), "check_mode": True},
            gates(asked.url, name=["smok"]),
            gates(asked.url, name=["smoke"], then=["needle", "soke"]),
            gates(asked.url, name=["readiness", "smoke"]),
            gates(asked.url, name=["smoke"], settings={"smoke_deadline": 5}),
            gates(asked.url, name=["smoke"], bake={"seconds": "a while"}),
            gates(asked.url, name=["smoke"], api_key_problem="cannot read the API key file /etc/dsv4/key on gpu1"),
            gates(asked.url, name=[]),
        ])
    finally:
        for server in (good, garbled, asked):
            server.stop()
    return {"good": good, "garbled": garbled, "asked": asked}, results


def test_a_passing_gate_gives_its_evidence_and_sends_the_key(run: tuple[dict, list[dict]]) -> None:
    servers, results = run
    ok = results[0]
    assert not ok.get("failed") and not ok["changed"] and ok["passed"], ok
    assert [(g["name"], g["status"], g["refused"]) for g in ok["gates"]] == [("smoke", "passed", False)]
    assert ok["gate"]["name"] == "smoke" and ok["gate"]["evidence"]["model"] == "dsv4"
    assert ok["gate"]["evidence"]["content"] == "OK" and ok["gate"]["evidence"]["deadline_s"] == 5
    assert servers["good"].auth_headers and set(servers["good"].auth_headers) == {f"Bearer {KEY}"}
    assert KEY not in str(ok)


def test_a_failing_gate_is_refused_with_why_and_what_follows_it_does_not_run(run: tuple[dict, list[dict]]) -> None:
    servers, results = run
    failed = results[1]
    # The task itself succeeds: the gate's verdict is data (the rollout decides), the failure its first gate.
    assert not failed.get("failed") and failed["passed"] is False, failed
    assert [g["name"] for g in failed["gates"]] == ["smoke"] and failed["gate"]["refused"]
    assert failed["gate"]["status"] == "failed" and "does not contain OK" in failed["gate"]["summary"]
    assert servers["garbled"].count("POST /v1/chat/completions") == 1


def test_check_mode_asks_nothing_and_names_every_gate_skipped(run: tuple[dict, list[dict]]) -> None:
    servers, results = run
    checked = results[2]
    assert checked["skipped"] and checked["passed"] and not checked["changed"]
    assert checked["msg"] == "check mode: not run (a gate talks to the running servers)"
    assert [(g["name"], g["status"]) for g in checked["gates"]] == [
        ("readiness", "skipped"), ("config", "skipped"), ("smoke", "skipped"), ("needle", "skipped")]
    assert servers["asked"].calls == []


def test_an_unknown_gate_or_a_group_that_cannot_run_together_is_refused_naming_it(
        run: tuple[dict, list[dict]]) -> None:
    _, results = run
    in_name, in_then, together, empty = results[3], results[4], results[5], results[9]
    assert in_name["failed"] and "value of name must be one or more of:" in in_name["msg"]
    assert in_name["msg"].endswith("Got no match for: smok"), in_name["msg"]
    assert in_then["failed"] and in_then["msg"].startswith("dsv4_run_gates: unknown gate soke; choose from readiness")
    assert together["failed"] and together["msg"] == (
        "dsv4_run_gates: gate smoke needs readiness passed first: run them one after the other (separate entries "
        "of dsv4_gates_names), not together")
    assert empty["failed"] and empty["msg"] == "dsv4_run_gates: name a gate to run", empty


def test_bad_settings_and_an_unreadable_key_are_refused_before_any_gate_asks(run: tuple[dict, list[dict]]) -> None:
    servers, results = run
    setting, bake, key = results[6], results[7], results[8]
    assert setting["failed"] and setting["msg"].startswith("gate settings: ") and "smoke_deadline" in setting["msg"]
    assert bake["failed"] and bake["msg"].startswith("bake settings (dsv4_bake_*): ") and "seconds" in bake["msg"]
    assert key["failed"] and key["msg"] == "cannot read the API key file /etc/dsv4/key on gpu1"
    assert all("gates" not in r for r in (setting, bake, key)) and servers["asked"].calls == []
