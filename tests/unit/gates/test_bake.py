"""The bake's analysis: the routers' and servers' counters read with prometheus_client, each analysis
successful, failed or inconclusive, and Argo-like verdicts (failure limit, inconclusive in a row)."""

from __future__ import annotations

import pytest

from dsv4deploy.gates import bake
from dsv4deploy.gates.bake import Analysis, BakeSettings, Counters, Phase, interval_phase, rate, router_counts

# As sglang-router 0.3.2 (and smg) serve it: every answer by status code.
SMG_TEXT = """\
# TYPE smg_http_responses_total counter
smg_http_responses_total{status_code="200",error_code=""} 95
smg_http_responses_total{status_code="503",error_code=""} 4
smg_http_responses_total{status_code="400",error_code=""} 1
"""
# As sglang-router 0.2.x serves it.
SGL_ROUTER_TEXT = """\
# TYPE sgl_router_requests_total counter
sgl_router_requests_total{route="/v1/chat/completions"} 50
sgl_router_requests_total{route="/generate"} 10
# TYPE sgl_router_request_errors_total counter
sgl_router_request_errors_total{route="/generate"} 1
# TYPE sgl_router_pd_decode_errors_total counter
sgl_router_pd_decode_errors_total{worker="http://d:1"} 3
"""


def test_router_errors_are_5xx_answers_of_sglang_router_03_and_smg() -> None:
    assert router_counts(SMG_TEXT) == (100, 4)  # a 400 is the client's error, not the release's


def test_router_errors_of_sglang_router_02_take_the_larger_of_its_counters() -> None:
    assert router_counts(SGL_ROUTER_TEXT) == (60, 3)


@pytest.mark.parametrize(("bad", "total", "phase"), [
    (0, 40, Phase.SUCCESSFUL), (1, 100, Phase.SUCCESSFUL), (0, 10, Phase.INCONCLUSIVE),
    (2, 100, Phase.INCONCLUSIVE),  # 2 % against a 1 % limit over 100 requests: p=0.26, no evidence
    (6, 100, Phase.FAILED),  # p=0.0005
    (1, 6, Phase.INCONCLUSIVE),  # one 5xx among six probe requests: fewer than min_requests
    (30, 30, Phase.FAILED),  # every request an error
    (0, 0, Phase.INCONCLUSIVE), (None, None, Phase.ERROR)])
def test_a_rate_fails_only_when_significantly_above_its_limit(bad, total, phase) -> None:
    assert rate("error rate", bad, total, 0.01, "router", min_requests=20).phase is phase


def test_counters_change_over_an_interval_and_a_source_missing_on_either_side_is_missing() -> None:
    before = Counters((10, 1), {"sglang:num_requests_total": 5})
    after = Counters((30, 1), {"sglang:num_requests_total": 25}, ["x"])
    change = after.minus(before)
    assert change.router == (20, 0) and change.servers == {"sglang:num_requests_total": 20}
    assert Counters(None, None).minus(before).router is None


def test_an_interval_fails_on_any_failed_analysis_and_is_inconclusive_only_without_one() -> None:
    ok, bad, unsure, unread = (Analysis("a", p, "") for p in (Phase.SUCCESSFUL, Phase.FAILED, Phase.INCONCLUSIVE,
                                                               Phase.ERROR))
    assert interval_phase([ok, unsure, unread, bad]) is Phase.FAILED
    assert interval_phase([ok, unsure, unread]) is Phase.ERROR
    assert interval_phase([ok, unsure]) is Phase.INCONCLUSIVE
    assert interval_phase([ok, ok]) is Phase.SUCCESSFUL


def _scripted(monkeypatch: pytest.MonkeyPatch, phases: list[Phase]) -> None:
    """Probes that answer `phases` interval by interval (no server: the metrics are unread, left out here)."""
    script = iter(phases)
    monkeypatch.setattr(bake, "probe_analyses", lambda *a, **k: [Analysis("canary needle", next(script), "x")])
    monkeypatch.setattr(bake, "metric_analyses", lambda *a, **k: [])


def _run(settings: BakeSettings):
    return bake.run_bake("http://127.0.0.1:9", "m", workers=[], settings=settings, topology="pd",
                         sleep=lambda _: None)


def test_the_bake_fails_once_more_intervals_failed_than_the_failure_limit(monkeypatch) -> None:
    _scripted(monkeypatch, [Phase.SUCCESSFUL, Phase.FAILED, Phase.SUCCESSFUL, Phase.FAILED, Phase.SUCCESSFUL])
    result = _run(BakeSettings(seconds=5, interval_s=1, failure_limit=1))
    assert result.status == "failed" and len(result.evidence["intervals"]) == 4
    assert result.summary.startswith("failed after 4 of 5 interval(s)")
    assert [f["what"] for f in result.evidence["failures"]] == ["bake interval 2: canary needle",
                                                                 "bake interval 4: canary needle"]


def test_the_bake_passes_within_its_failure_limit(monkeypatch) -> None:
    _scripted(monkeypatch, [Phase.FAILED, Phase.SUCCESSFUL, Phase.SUCCESSFUL])
    result = _run(BakeSettings(seconds=3, interval_s=1, failure_limit=1))
    assert result.status == "passed" and result.summary.startswith("baked 3 s: 2 successful, 1 failed")


def test_inconclusive_intervals_in_a_row_end_the_bake_inconclusive_and_say_so(monkeypatch) -> None:
    _scripted(monkeypatch, [Phase.INCONCLUSIVE, Phase.SUCCESSFUL, Phase.INCONCLUSIVE, Phase.INCONCLUSIVE, Phase.FAILED])
    result = _run(BakeSettings(seconds=5, interval_s=1, inconclusive_limit=2))
    assert result.status == "inconclusive" and result.evidence["verdict"] == "inconclusive"
    assert result.summary.startswith("inconclusive: 2 interval(s) in a row could not be judged")
    assert len(result.evidence["intervals"]) == 4


def test_a_bake_of_one_interval_can_fail(monkeypatch) -> None:
    # failure_limit 1 used to need two failed intervals: one interval with everything failed read "passed"
    _scripted(monkeypatch, [Phase.FAILED])
    result = _run(BakeSettings(seconds=1, interval_s=1, failure_limit=1))
    assert result.status == "failed", result.summary
    assert "a failed interval with no more intervals left than the failure limit (1)" in result.summary


def test_a_failed_interval_near_the_end_fails_the_bake(monkeypatch) -> None:
    _scripted(monkeypatch, [Phase.SUCCESSFUL, Phase.SUCCESSFUL, Phase.FAILED, Phase.SUCCESSFUL])
    result = _run(BakeSettings(seconds=4, interval_s=1, failure_limit=1))
    assert result.status == "failed" and len(result.evidence["intervals"]) == 3


def test_a_bake_with_no_interval_successful_is_inconclusive_not_passed(monkeypatch) -> None:
    _scripted(monkeypatch, [Phase.INCONCLUSIVE, Phase.INCONCLUSIVE])
    result = _run(BakeSettings(seconds=2, interval_s=1, inconclusive_limit=3))
    assert result.status == "inconclusive", result.summary
    assert result.summary.startswith("inconclusive: its time was up with no interval successful")


def test_metrics_that_cannot_be_read_end_the_bake_in_error_not_inconclusive(monkeypatch) -> None:
    _scripted(monkeypatch, [Phase.ERROR, Phase.ERROR, Phase.SUCCESSFUL])
    result = _run(BakeSettings(seconds=3, interval_s=1, error_limit=2))
    assert result.status == "error" and result.evidence["verdict"] == "error"
    assert result.summary.startswith("error: 2 interval(s) in a row could not be measured")


def test_bad_bake_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        BakeSettings(seconds=10, interval_s=0)


def test_sources_not_read_by_design_give_no_analysis_and_read_ones_that_fail_are_errors() -> None:
    settings = BakeSettings(seconds=1)
    # No router, no worker the controller reaches (loopback on a remote host): nothing to be unsure of.
    assert bake.metric_analyses(Counters(), settings, pd=True, has_router=False, has_servers=False) == []
    unread = bake.metric_analyses(Counters(), settings, pd=True, has_router=True, has_servers=True)
    assert [a.name for a in unread] == ["error rate", "abort rate", "transfer failures"]
    assert {a.phase for a in unread} == {Phase.ERROR}
    change = Counters((40, 0), {"sglang:num_requests_total": 40, "sglang:num_transfer_failed_reqs_total": 1})
    judged = {a.name: a.phase for a in bake.metric_analyses(change, settings, pd=True, has_router=True)}
    assert judged == {"error rate": Phase.SUCCESSFUL, "abort rate": Phase.SUCCESSFUL,
                      "transfer failures": Phase.FAILED}
