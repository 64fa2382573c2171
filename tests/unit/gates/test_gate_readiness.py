"""Readiness gate against stub workers and a stub router that behave like the contract."""

from __future__ import annotations

import pytest

from dsv4deploy.gates import GateStatus, WorkerEndpoint, check_readiness

from .stubs import after, always

NOT_READY = (503, {"status": "not ready", "reason": "insufficient healthy workers"})
READY = (200, {"status": "ready", "healthy_workers": 2, "total_workers": 2})
MODELS = (200, {"object": "list", "data": [{"id": "dsv4", "object": "model", "max_model_len": 65536}]})


def worker(stub, warmup_503s: int = 0):
    return stub({"GET /health": after(warmup_503s, (503, ""), (200, "")), "GET /v1/models": always(MODELS)})


def router(stub, not_ready: int = 0, models=MODELS):
    # /health and /v1/models say yes from the start, as the real router does: they must not count.
    return stub(
        {
            "GET /health": always((200, "OK")),
            "GET /readiness": after(not_ready, NOT_READY, READY),
            "GET /v1/models": always(models),
        }
    )


def pd(stub, prefill_503s: int = 0, decode_503s: int = 0) -> list[WorkerEndpoint]:
    return [
        WorkerEndpoint(name="prefill", role="prefill", url=worker(stub, prefill_503s).url),
        WorkerEndpoint(name="decode", role="decode", url=worker(stub, decode_503s).url),
    ]


def test_waits_through_warmup_and_router_readiness(stub):
    workers = pd(stub, prefill_503s=3, decode_503s=5)
    rtr = router(stub, not_ready=4)
    seen = []
    result = check_readiness(
        workers,
        rtr.url,
        "dsv4",
        deadline_s=10,
        poll_interval_s=0.01,
        progress=lambda done, total, note: seen.append((done, total, note)),
    )
    assert result.status is GateStatus.PASSED, result.summary
    assert "router /readiness 200" in result.summary and "'dsv4' listed" in result.summary
    checks = {e["check"]: e for e in result.evidence["endpoints"]}
    assert checks["prefill /health"]["attempts"] == 4 and checks["decode /health"]["attempts"] == 6
    assert checks["router /readiness"]["attempts"] == 5
    assert checks["router /readiness"]["last_status"] == 200
    assert all(e["ready"] and e["seconds_to_ready"] is not None for e in checks.values())
    assert rtr.count("GET /health") == 0  # the router's /health says OK with no worker: never asked
    assert sorted(s[0] for s in seen) == [1, 2, 3, 4] and {s[1] for s in seen} == {4}


def test_router_never_ready_fails_with_its_body(stub):
    rtr = router(stub, not_ready=10**6)
    result = check_readiness(pd(stub), rtr.url, "dsv4", deadline_s=0.5, poll_interval_s=0.02)
    assert result.status is GateStatus.FAILED
    assert result.summary.startswith("not ready after 0.5 s: router /readiness 503")
    assert "insufficient healthy workers" in result.summary
    [failure] = result.evidence["failures"]
    assert failure["what"] == "router /readiness" and failure["status"] == 503
    assert "insufficient healthy workers" in failure["body"]
    ready = {e["check"]: e["ready"] for e in result.evidence["endpoints"]}
    assert ready == {
        "prefill /health": True,
        "decode /health": True,
        "router /readiness": False,
        "router /v1/models": True,
    }


def test_a_heartbeat_says_what_each_waiting_server_answers(stub):
    rtr = router(stub, not_ready=10**6)
    seen = []
    check_readiness(pd(stub, decode_503s=10**6), rtr.url, "dsv4", deadline_s=0.7, poll_interval_s=0.02,
                    heartbeat_s=0.2, progress=lambda done, total, note: seen.append(note))
    beats = [note for note in seen if note.startswith("waiting ")]
    assert beats, seen
    assert "decode /health 503" in beats[-1] and "router /readiness 503" in beats[-1]
    assert "insufficient healthy workers" in beats[-1] and "prefill /health" not in beats[-1]


def test_missing_model_card_fails_naming_the_model(stub):
    rtr = router(stub, models=(200, {"object": "list", "data": [{"id": "other-model"}]}))
    result = check_readiness(pd(stub), rtr.url, "dsv4", deadline_s=0.3, poll_interval_s=0.02)
    assert result.status is GateStatus.FAILED
    assert "router /v1/models does not list 'dsv4' (seen: other-model)" in result.summary


def test_combined_server_without_router(stub):
    server = worker(stub, warmup_503s=2)
    result = check_readiness(
        [WorkerEndpoint(name="combined", role="combined", url=server.url)],
        None,
        "dsv4",
        deadline_s=5,
        poll_interval_s=0.01,
    )
    assert result.status is GateStatus.PASSED, result.summary
    assert [e["check"] for e in result.evidence["endpoints"]] == ["combined /health", "combined /v1/models"]


def test_unreachable_worker_is_reported_not_raised(stub, dead_url):
    workers = [WorkerEndpoint(name="decode", role="decode", url=dead_url)]
    result = check_readiness(workers, None, "dsv4", deadline_s=0.3, poll_interval_s=0.05)
    assert result.status is GateStatus.FAILED
    assert "decode /health unreachable (ConnectError" in result.summary
    assert result.evidence["failures"][0]["status"] is None


def test_sends_the_api_key(stub):
    server = worker(stub)
    check_readiness(
        [WorkerEndpoint(name="w", role="combined", url=server.url)], None, "dsv4", deadline_s=2, api_key="sk-test"
    )
    assert set(server.auth_headers) == {"Bearer sk-test"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": []}, "at least one worker"),
        ({"served_model_name": ""}, "served_model_name"),
        ({"deadline_s": 0}, "must be positive"),
        ({"router_url": "localhost:8000"}, "router_url must be an http"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    args = {
        "workers": [WorkerEndpoint(name="w", role="combined", url="http://127.0.0.1:1")],
        "router_url": None,
        "served_model_name": "dsv4",
        "deadline_s": 1.0,
    } | kwargs
    with pytest.raises(ValueError, match=message):
        check_readiness(**args)


def test_worker_url_is_validated():
    with pytest.raises(ValueError, match="worker url must be an http"):
        WorkerEndpoint(name="w", role="prefill", url="ftp://x")


def test_ready_is_asked_only_where_the_version_has_it(stub):
    """0.5.23 serves /ready (503 until up): it must be 200 too. 0.5.18 has none (404): never asked."""
    new = stub({"GET /health": always((200, "")), "GET /ready": after(3, (503, ""), (200, "")),
                "GET /v1/models": always(MODELS)})
    old = stub({"GET /health": always((200, "")), "GET /ready": always((404, '{"detail":"Not Found"}')),
                "GET /v1/models": always(MODELS)})
    workers = [WorkerEndpoint(name="new", role="combined", url=new.url, sglang_version="0.5.23"),
               WorkerEndpoint(name="old", role="combined", url=old.url, sglang_version="0.5.18")]
    result = check_readiness(workers, None, "dsv4", deadline_s=10, poll_interval_s=0.01)
    assert result.status is GateStatus.PASSED, result.summary
    checks = {e["check"]: e for e in result.evidence["endpoints"]}
    assert checks["new /ready"]["attempts"] == 4 and checks["new /ready"]["last_status"] == 200
    assert "old /ready" not in checks


def test_a_ready_that_stays_503_fails_the_gate(stub):
    srv = stub({"GET /health": always((200, "")), "GET /ready": always((503, "")), "GET /v1/models": always(MODELS)})
    workers = [WorkerEndpoint(name="c", role="combined", url=srv.url, sglang_version="0.5.23")]
    result = check_readiness(workers, None, "dsv4", deadline_s=0.5, poll_interval_s=0.05)
    assert result.status is GateStatus.FAILED and "c /ready 503" in result.summary
