"""What run_gate takes from the plan: the router's rendered breaker window, the soak switch."""

from __future__ import annotations

from dsv4deploy.gate_runner import GateSettings, run_gate
from dsv4deploy.gates import GateStatus

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
