"""The parity gate against the last good release, and the accuracy gate without a reference score."""

from __future__ import annotations

from collections.abc import Callable

from dsv4deploy.gates import GateStatus
from dsv4deploy.gates.quality_runner import accuracy_gate, model_settings, parity_gate
from dsv4deploy.gates.runner import GateSettings
from tests.unit.gates.stubs import Request, Route, StubServer


def _generate(shift: float) -> Route:
    def reply(req: Request) -> tuple[int, dict]:
        lp = -0.1 - shift
        return 200, {"text": "x", "meta_info": {"output_token_logprobs": [[lp, 7, None], [lp, 8, None]],
                                                 "output_top_logprobs": [[[lp, 7, None]], [[lp, 8, None]]]}}
    return reply


def _plan(url: str, topk: int = 512) -> dict:
    return {"endpoint": url, "served_model_name": "m", "topology": "combined",
            "workers": [{"name": "c", "role": "combined", "host": "h", "url": url}],
            "expected_overrides": {"c": {"index_topk": topk}}, "expected_settings": {"c": {"model_path": "/m"}}}


def test_parity_records_then_compares_with_the_last_good_release(stub: Callable[..., StubServer]) -> None:
    same = stub({"POST /generate": _generate(0.0)})
    first = parity_gate(_plan(same.url), GateSettings())
    assert first.status is GateStatus.PASSED and "no last good release" in first.summary
    again = parity_gate(_plan(same.url), GateSettings(), baseline=first.evidence["record"])
    assert again.status is GateStatus.PASSED and again.evidence["table"].count("| 0 |") == 7
    moved = stub({"POST /generate": _generate(0.2)})
    baseline = {**first.evidence["record"], "topology": parity_gate(_plan(moved.url), GateSettings())
                .evidence["record"]["topology"]}
    worse = parity_gate(_plan(moved.url), GateSettings(), baseline=baseline)
    assert worse.status is GateStatus.FAILED and "max logprob delta 0.2" in worse.summary


# sglang 0.5.23's answers to a prompt over --context-length 4096, on the server itself and through the router.
SERVER_TOO_LONG = {"error": {"message": "The input (6274 tokens) is longer than the model's context length (4096 "
                                        "tokens)."}}
ROUTER_TOO_LONG = {"error": {"type": "invalid_request_error", "code": "prefill_bad_request", "param": None,
                             "message": "Prefill server error (400 Bad Request): {\"error\":{\"message\":\"The input "
                                        "(9346 tokens) is longer than the model's context length (4096 tokens).\"}}"}}


def _short_context(words: int, too_long: dict) -> Route:
    """A server whose context holds prompts of up to `words` words."""
    fits = _generate(0.0)
    return lambda req: (400, too_long) if len(req.body["text"].split()) > words else fits(req)


def test_parity_leaves_out_the_prompts_longer_than_the_served_context(stub: Callable[..., StubServer]) -> None:
    # A deployment may serve a shorter context than the fixed set's longest prompts: those are named and left
    # out on both sides, not an error that fails (and rolls back) a healthy release.
    for too_long in (SERVER_TOO_LONG, ROUTER_TOO_LONG):
        server = stub({"POST /generate": _short_context(1000, too_long)})
        first = parity_gate(_plan(server.url), GateSettings())
        assert first.status is GateStatus.PASSED, first.summary
        assert "recorded 6 prompts' greedy outputs and top-5 logprobs (3 longer than the served context left out: " \
               "plain-1600, plain-2400, plain-3200)" in first.summary
        outputs = first.evidence["record"]["outputs"]
        assert "The input (" in outputs["plain-3200"]["skipped"] and "(4096 tokens)" in outputs["plain-3200"]["skipped"]
        again = parity_gate(_plan(server.url), GateSettings(), baseline=first.evidence["record"])
        assert again.status is GateStatus.PASSED, again.summary
        assert "0 of 6 prompts out of tolerance" in again.summary and "3 longer than the served context left out" \
            in again.summary


def test_parity_that_could_ask_nothing_fails_saying_so(stub: Callable[..., StubServer]) -> None:
    server = stub({"POST /generate": _short_context(0, SERVER_TOO_LONG)})
    result = parity_gate(_plan(server.url), GateSettings())
    assert result.status is GateStatus.FAILED
    assert result.summary.startswith("parity could not be measured: every prompt is longer than the served context")


def test_parity_is_skipped_naming_the_model_setting_that_differs(stub: Callable[..., StubServer]) -> None:
    server = stub({"POST /generate": _generate(0.0)})
    before = parity_gate(_plan(server.url, 512), GateSettings()).evidence["record"]
    result = parity_gate(_plan(server.url, 1024), GateSettings(), baseline=before)
    assert result.status is GateStatus.SKIPPED and "combined.overrides" in result.summary
    assert "index_topk" in result.summary and result.evidence["record"]["settings"] == model_settings(
        _plan(server.url, 1024))


def test_accuracy_without_a_reference_score_is_recorded_not_judged(stub: Callable[..., StubServer]) -> None:
    answer = {"choices": [{"message": {"role": "assistant", "content": "The answer is 3."},
                           "finish_reason": "stop"}]}
    server = stub({"POST /v1/chat/completions": lambda req: (200, answer)})
    result = accuracy_gate({"endpoint": server.url, "served_model_name": "m"}, GateSettings(accuracy_count=10))
    assert result.status is GateStatus.PASSED and "recorded, not judged" in result.summary
    assert result.evidence["n"] == 10 and len(result.evidence["wrong"]) == 5
