"""What run_gate takes from the plan: the router's rendered breaker window, the soak switch."""

from __future__ import annotations

from dsv4deploy.gates import GateStatus
from dsv4deploy.gates.runner import GateSettings, run_gate

from .stubs import always, completion


def plan(url: str, **more) -> dict:
    return {"served_model_name": "dsv4", "endpoint": url, "router_url": url, "workers": [],
            "expected_overrides": {}, **more}


def test_smoke_waits_the_router_breaker_window_the_plan_rendered(stub):
    server = stub({"POST /v1/chat/completions": always((200, completion("OK")))})
    result = run_gate("smoke", plan(server.url, router_breaker_s=7), GateSettings(smoke_deadline_s=10))
    assert result.status is GateStatus.PASSED and result.evidence["breaker_cooldown_s"] == 7.0


def test_soak_switched_off_asks_nothing(stub):
    server = stub({})
    result = run_gate("soak", plan(server.url), GateSettings(soak_enabled=False))
    assert (result.status, result.summary) == (GateStatus.SKIPPED, "soak_enabled is false")
    assert server.calls == []


def test_a_program_that_died_on_its_host_fails_readiness_at_once_asking_nothing(stub):
    server = stub({})
    died = {"name": "sglang-dsv4-decode", "host": "gpu2", "why": "exited (exit status 1; not expected) and "
            "supervisord started it again", "seconds": 61.5, "log": "RuntimeError: CUDA out of memory",
            "log_source": "last log lines", "was_healthy": False}
    probes = {"gpu1": {"local": True, "seconds": 61.5, "workers": {}}, "gpu2": {"local": False, "died": died}}
    result = run_gate("readiness", plan(server.url, workers=[{"name": "sglang-dsv4-decode", "role": "decode",
                                                               "url": server.url, "host": "gpu2"}]),
                      GateSettings(readiness_deadline_s=600), probes=probes)
    assert result.status is GateStatus.FAILED and server.calls == []
    assert result.summary.startswith("sglang-dsv4-decode on host gpu2 did not start: it exited (exit status 1")
    assert "61.5 s into the readiness wait" in result.summary and "CUDA out of memory" in result.summary
    assert result.evidence["failures"][0]["what"] == "sglang-dsv4-decode (gpu2)"


def test_ranks_that_died_on_two_hosts_are_all_named_before_any_log(stub):
    # Rank 1 killed on nb takes rank 0 on na down with it: the cause, shortened to its head on the console, must
    # still name both, whichever host's wait reported first.
    server = stub({})
    dead = {"na": ("sglang-dsv4-decode", "exited (exit status 1; not expected)"),
            "nb": ("sglang-dsv4-decode-rank1", "exited (terminated by SIGKILL; not expected)")}
    probes = {host: {"local": True, "died": {"name": name, "host": host, "why": why, "seconds": 3.0,
                                               "log": "x" * 2000 + f" last words of {host}", "was_healthy": False}}
              for host, (name, why) in dead.items()}
    workers = [{"name": name, "role": "decode", "url": server.url, "host": host} for host, (name, _) in dead.items()]
    result = run_gate("readiness", plan(server.url, workers=workers), GateSettings(readiness_deadline_s=600),
                      probes=probes)
    head = result.summary.split("\n", 1)[0]
    assert "sglang-dsv4-decode on host na did not start" in head
    assert "sglang-dsv4-decode-rank1 on host nb did not start: it exited (terminated by SIGKILL" in head
    assert "xxxx" not in head  # no log inside the line that names them
    assert "--- sglang-dsv4-decode-rank1 (nb): " in result.summary and "last words of nb" in result.summary


def test_a_router_the_wait_never_started_is_named_with_why(stub):
    # The host's wait was to start the router once its workers answered /health; they never did, so the
    # router's own "not ready" (here: 503) must not be the whole story.
    server = stub({"GET /readiness": always((503, '{"status":"not ready"}')),
                   "GET /health": always((503, "loading"))})
    probes = {"gpu1": {"local": True, "seconds": 600.0, "workers": {}, "not_started": ["sglang-dsv4-router"]}}
    result = run_gate("readiness", plan(server.url, workers=[{"name": "sglang-dsv4-decode", "role": "decode",
                                                               "url": server.url, "host": "gpu1"}]),
                      GateSettings(readiness_deadline_s=600), probes=probes)
    assert result.status is GateStatus.FAILED
    assert "not started, as its workers never all answered /health: sglang-dsv4-router on host gpu1" in result.summary
    assert result.evidence["not_started"] == ["sglang-dsv4-router on host gpu1"]


def test_smoke_takes_the_content_expectation_from_the_plan_unless_set(stub):
    server = stub({"POST /v1/chat/completions": always((200, completion("noise")))})
    generic = run_gate("smoke", plan(server.url, smoke_expects_ok=False), GateSettings(smoke_deadline_s=10))
    assert generic.status is GateStatus.PASSED and generic.evidence["expect_ok"] is False
    forced = run_gate("smoke", plan(server.url, smoke_expects_ok=False),
                      GateSettings(smoke_deadline_s=10, smoke_expect_ok=True))
    assert forced.status is GateStatus.FAILED and "does not contain OK" in forced.summary
