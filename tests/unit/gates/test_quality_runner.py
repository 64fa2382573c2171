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
