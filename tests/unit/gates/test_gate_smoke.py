"""Smoke gate: survives the first-request transient and the router's circuit breaker, keeps raw bodies."""

from __future__ import annotations

import pytest

from dsv4deploy.gates import GateStatus, run_smoke

from .stubs import after, always, completion

CHAT = "POST /v1/chat/completions"
BREAKER = (503, "No available prefill workers (all circuits open or unhealthy)")
# What the seeds met right after the router said ready: a body without "choices".
TRANSIENT = (200, {"error": {"message": "Prefill server not fully registered yet", "code": 500}})


class Sleeps(list):
    """Records the waits the gate asked for instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_first_request_transient_is_retried_and_its_body_kept(stub):
    server = stub({CHAT: after(1, TRANSIENT, (200, completion("OK")))})
    sleeps = Sleeps()
    result = run_smoke(server.url, "dsv4", deadline_s=60, sleep=sleeps)
    assert result.status is GateStatus.PASSED, result.summary
    assert result.summary == "answer 'OK' after 2 tries"
    assert result.evidence["content"] == "OK" and result.evidence["tries"] == 2
    [failure] = result.evidence["failures"]
    assert failure["kind"] == "no_choices" and failure["status"] == 200
    assert "Prefill server not fully registered yet" in failure["body"]
    assert len(sleeps) == 1


def test_request_is_the_contract_conversation(stub):
    server = stub({CHAT: always((200, completion("OK")))})
    seen = []
    server.routes[CHAT] = lambda request: (seen.append(request.body), (200, completion("OK")))[1]
    run_smoke(server.url, "dsv4", deadline_s=10, api_key="sk-1")
    assert seen[0]["messages"] == [{"role": "user", "content": "Say OK"}]
    assert seen[0]["model"] == "dsv4" and seen[0]["max_tokens"] == 16
    assert server.auth_headers == ["Bearer sk-1"]


def test_breaker_window_is_waited_out_not_hammered(stub):
    server = stub({CHAT: after(3, BREAKER, (200, completion("OK.")))})
    sleeps = Sleeps()
    result = run_smoke(server.url, "dsv4", deadline_s=600, breaker_cooldown_s=60, sleep=sleeps)
    assert result.status is GateStatus.PASSED, result.summary
    assert server.count(CHAT) == 4  # three 503s, then the answer: no burst of tries inside the window
    assert len(sleeps) == 3 and all(60 <= s <= 61 for s in sleeps)
    assert result.evidence["waits_s"] == sleeps
    assert all("all circuits open" in f["body"] and f["status"] == 503 for f in result.evidence["failures"])


def test_breaker_wait_is_cut_to_the_deadline(stub):
    server = stub({CHAT: always(BREAKER)})
    result = run_smoke(server.url, "dsv4", deadline_s=1.0, breaker_cooldown_s=60)
    assert result.status is GateStatus.FAILED
    assert server.count(CHAT) == 2  # one try, one wait to just before the deadline, one last try
    assert result.summary.startswith("no good answer after 2 tries (deadline 1 s reached); last: 503 router")
    assert "No available prefill workers (all circuits open or unhealthy)" in result.summary


def test_ordinary_failures_back_off_exponentially(stub):
    server = stub({CHAT: after(4, (500, {"code": "prefill_internal_error"}), (200, completion("OK")))})
    sleeps = Sleeps()
    result = run_smoke(server.url, "dsv4", deadline_s=600, initial_backoff_s=1, max_backoff_s=16, sleep=sleeps)
    assert result.status is GateStatus.PASSED
    assert len(sleeps) == 4
    assert all(2**i <= s <= 2**i + 1 for i, s in enumerate(sleeps)), sleeps


def test_failing_server_reports_every_raw_body(stub):
    server = stub({CHAT: lambda r: (500, f"decode_internal_error: boom #{r.n}")})
    result = run_smoke(server.url, "dsv4", deadline_s=0.8, initial_backoff_s=0.05, max_backoff_s=0.1)
    assert result.status is GateStatus.FAILED
    assert "decode_internal_error: boom" in result.summary
    bodies = [f["body"] for f in result.evidence["failures"]]
    assert len(bodies) == result.evidence["tries"] == server.count(CHAT) >= 2
    assert bodies == [f"decode_internal_error: boom #{i}" for i in range(len(bodies))]


def test_wrong_key_is_not_retried(stub):
    server = stub({CHAT: always((401, {"error": "Unauthorized"}))})
    result = run_smoke(server.url, "dsv4", deadline_s=60, api_key="wrong")
    assert result.status is GateStatus.FAILED
    assert result.summary == 'no good answer after 1 try (gave up); last: 401 {"error": "Unauthorized"}'


def test_answer_without_ok_fails_and_is_recorded(stub):
    server = stub({CHAT: always((200, completion("blue blue blue")))})
    result = run_smoke(server.url, "dsv4", deadline_s=60)
    assert result.status is GateStatus.FAILED
    assert "answer 'blue blue blue' does not contain OK" in result.summary
    assert result.evidence["content"] == "blue blue blue"


def test_reasoning_that_eats_max_tokens_is_explained(stub):
    body = completion("")
    body["choices"][0]["message"]["reasoning_content"] = "The user wants me to say OK. I should"
    server = stub({CHAT: always((200, body))})
    result = run_smoke(server.url, "dsv4", deadline_s=60)
    assert result.status is GateStatus.FAILED
    assert "reasoning used up max_tokens" in result.summary
    assert result.evidence["reasoning"].startswith("The user wants")


def test_unreachable_server_fails_with_transport_error(dead_url):
    result = run_smoke(dead_url, "dsv4", deadline_s=0.5, initial_backoff_s=0.05, max_backoff_s=0.1)
    assert result.status is GateStatus.FAILED
    assert "ConnectError" in result.summary
    assert result.evidence["failures"][0]["status"] is None


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="must be an http"):
        run_smoke("127.0.0.1:8000", "dsv4", deadline_s=10)
    with pytest.raises(ValueError, match="positive"):
        run_smoke("http://127.0.0.1:8000", "dsv4", deadline_s=0)


def test_without_the_content_expectation_any_finished_answer_passes(stub):
    # A random or generic model: smoke demands a 200 with a non-empty completion that finished.
    server = stub({CHAT: always((200, completion("V\u00e9V\u00e9 noise")))})
    result = run_smoke(server.url, "tiny", deadline_s=10, expect_ok=False)
    assert result.status is GateStatus.PASSED, result.summary
    assert result.evidence["expect_ok"] is False
    assert "content not checked: smoke_expect_ok is off" in result.summary


def test_the_content_expectation_still_fails_a_wrong_answer(stub):
    server = stub({CHAT: always((200, completion("noise")))})
    result = run_smoke(server.url, "dsv4", deadline_s=10)
    assert result.status is GateStatus.FAILED
    assert "does not contain OK" in result.summary and server.count(CHAT) == 1


def test_a_completion_without_finish_reason_fails_even_without_the_expectation(stub):
    body = completion("OK")
    body["choices"][0]["finish_reason"] = None
    server = stub({CHAT: always((200, body))})
    result = run_smoke(server.url, "tiny", deadline_s=10, expect_ok=False)
    assert result.status is GateStatus.FAILED
    assert "has no finish_reason" in result.summary
