"""The perf gate's arithmetic: Prometheus text read with prometheus_client, histogram deltas and
quantiles, and the judgement against the last good release's figures."""

from __future__ import annotations

import math
import re

import pytest

from dsv4deploy.gates import prom
from dsv4deploy.gates.perf import Timing, client_figures, quantile
from dsv4deploy.gates.perf_compare import baseline_problem, judge, samples, smallest_p, worse_factor
from dsv4deploy.sim.metrics import Metrics

# As a real sglang 0.5.x /metrics writes it (two label sets, a counter, a gauge).
SGLANG_TEXT = """\
# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{model_name="dsv4",tp_rank="0",le="0.01"} 10.0
sglang:inter_token_latency_seconds_bucket{model_name="dsv4",tp_rank="0",le="0.02"} 30.0
sglang:inter_token_latency_seconds_bucket{model_name="dsv4",tp_rank="0",le="+Inf"} 40.0
sglang:inter_token_latency_seconds_sum{model_name="dsv4",tp_rank="0"} 0.7
sglang:inter_token_latency_seconds_count{model_name="dsv4",tp_rank="0"} 40.0
sglang:inter_token_latency_seconds_bucket{model_name="dsv4",tp_rank="1",le="0.01"} 0.0
sglang:inter_token_latency_seconds_bucket{model_name="dsv4",tp_rank="1",le="0.02"} 0.0
sglang:inter_token_latency_seconds_bucket{model_name="dsv4",tp_rank="1",le="+Inf"} 0.0
sglang:inter_token_latency_seconds_sum{model_name="dsv4",tp_rank="1"} 0.0
sglang:inter_token_latency_seconds_count{model_name="dsv4",tp_rank="1"} 0.0
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="dsv4"} 12.0
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="dsv4"} 3.0
"""


def test_prometheus_text_is_read_with_its_types():
    scrape = prom.parse(SGLANG_TEXT)
    itl = scrape.histograms["sglang:inter_token_latency_seconds"]
    assert itl.count == 40 and itl.buckets == {0.01: 10, 0.02: 30, float("inf"): 40}
    assert scrape.values["sglang:num_requests_total"] == 12
    assert scrape.values["sglang:num_running_reqs"] == 3


def test_quantiles_interpolate_inside_the_bucket_as_histogram_quantile_does():
    itl = prom.parse(SGLANG_TEXT).histograms["sglang:inter_token_latency_seconds"]
    assert itl.quantile(0.25) == pytest.approx(0.01)  # rank 10: the top of the first bucket
    assert itl.quantile(0.5) == pytest.approx(0.015)  # rank 20: half way through the second
    assert itl.quantile(0.99) == pytest.approx(0.02)  # in the +Inf bucket: its lower bound
    assert prom.Hist().quantile(0.5) is None


def test_a_delta_keeps_only_what_happened_between_two_scrapes():
    before = prom.parse(SGLANG_TEXT)
    after = prom.parse(SGLANG_TEXT.replace('le="0.02"} 30.0', 'le="0.02"} 50.0')
                       .replace('le="+Inf"} 40.0', 'le="+Inf"} 60.0')
                       .replace('tp_rank="0"} 40.0', 'tp_rank="0"} 60.0')
                       .replace('"dsv4"} 12.0', '"dsv4"} 17.0'))
    change = prom.delta(before, after)
    itl = change.histograms["sglang:inter_token_latency_seconds"]
    assert itl.count == 20 and itl.buckets[0.01] == 0 and itl.quantile(0.5) == pytest.approx(0.015)
    assert change.values["sglang:num_requests_total"] == 5
    assert change.values["sglang:num_running_reqs"] == 3  # a gauge is what it is now


def test_text_that_is_not_prometheus_is_refused_with_why():
    with pytest.raises(prom.MetricsFormatError, match="not Prometheus text"):
        prom.parse('sglang:x{model_name="a" 1\n')


def test_the_simulators_metrics_parse_with_sglangs_names_and_types():
    metrics = Metrics("dsv4", 1000)
    metrics.request_done(100, 3, 0.02, [0.01, 0.012], 0.05)
    metrics.aborted()
    scrape = prom.parse(metrics.text(running=2, used_tokens=250))
    for name in ("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                 "sglang:e2e_request_latency_seconds"):
        assert name in scrape.histograms, name
    assert scrape.histograms["sglang:inter_token_latency_seconds"].count == 2
    assert scrape.histograms["sglang:time_to_first_token_seconds"].total == pytest.approx(0.02)
    assert scrape.values["sglang:num_requests_total"] == 1
    assert scrape.values["sglang:num_aborted_requests_total"] == 1
    assert scrape.values["sglang:generation_tokens_total"] == 3
    assert scrape.values["sglang:num_running_reqs"] == 2
    assert scrape.values["sglang:token_usage"] == pytest.approx(0.25)


def _rounds(itl: float, rate: float, ttft: float = 0.02, n: int = 5, spread: float = 0.02) -> dict:
    """A perf record of `n` rounds around the given figures (each round a little apart, as measured)."""
    def around(value: float) -> list[float]:
        return [value * (1 + spread * (i - n // 2)) for i in range(n)]

    record = _figures(itl, rate, ttft)
    record["samples"] = {"client": {f: around(v) for f, v in record["client"].items()},
                         "servers": {name: {f: around(v) for f, v in figs.items()}
                                     for name, figs in record["servers"].items()}}
    return record


def _figures(itl: float, rate: float, ttft: float = 0.02) -> dict:
    """A record of one point per figure, as releases before the rounds stored it."""
    return {"client": {"ttft_p50_s": ttft, "ttft_p99_s": ttft * 2, "itl_p50_s": itl, "output_tokens_per_s": rate},
            "servers": {"decode": {"itl_p50_s": itl, "requests": 16}}}


def _regressed(now: dict, before: dict, **kw) -> set[tuple[str, str]]:
    settings = {"alpha": 0.02, "band": 0.25, "noise_floor_s": 0.005, **kw}
    return {(j.where, j.figure) for j in judge(now, before, **settings)[0] if j.regressed}


def test_a_one_and_a_half_times_slower_decode_regresses_and_names_each_figure():
    judged, skipped = judge(_rounds(0.015, 200), _rounds(0.01, 300), alpha=0.02, band=0.25, noise_floor_s=0.001)
    assert {(j.where, j.figure) for j in judged if j.regressed} == {
        ("client", "itl_p50_s"), ("client", "output_tokens_per_s"), ("decode", "itl_p50_s")}
    itl = next(j for j in judged if j.figure == "itl_p50_s" and j.where == "client")
    # Five rounds each, every one slower: the smallest p-value five against five can give, 1/252.
    assert itl.p_value == pytest.approx(1 / 252) and itl.factor == pytest.approx(1.5)
    assert itl.line() == "client itl_p50_s 0.015 vs 0.01 (1.50x worse, p=0.004)"
    assert skipped == []


def test_a_shift_must_be_significant_and_beyond_the_band():
    # 10 % slower in every round: significant, but inside the 25 % band (a loaded machine does that).
    assert _regressed(_rounds(0.011, 300), _rounds(0.01, 300), noise_floor_s=0) == set()
    assert ("client", "itl_p50_s") in _regressed(_rounds(0.011, 300), _rounds(0.01, 300), band=0.05, noise_floor_s=0)
    # Twice as slow in the median, but the rounds overlap: not significant, no regression.
    now, before = _rounds(0.02, 300, spread=0.2), _rounds(0.01, 300, spread=0.2)
    now["samples"]["client"]["itl_p50_s"] = [0.005, 0.006, 0.02, 0.03, 0.04]
    before["samples"]["client"]["itl_p50_s"] = [0.007, 0.008, 0.01, 0.012, 0.05]
    assert ("client", "itl_p50_s") not in _regressed(now, before)
    # Under the noise floor: 1 ms to 2.5 ms is 2.5 times worse, but scheduling noise.
    assert _regressed(_rounds(0.01, 300, ttft=0.0025), _rounds(0.01, 300, ttft=0.001)) == set()


def test_faster_is_never_a_regression_and_throughput_is_judged_the_other_way():
    assert worse_factor("itl_p50_s", 0.02, 0.01) == 0.5
    assert worse_factor("output_tokens_per_s", 100, 200) == 0.5
    assert _regressed(_rounds(0.005, 600), _rounds(0.01, 300), band=0.01, noise_floor_s=0) == set()
    assert _regressed(_rounds(0.01, 150), _rounds(0.01, 300)) == {("client", "output_tokens_per_s")}


def test_the_time_to_first_token_is_judged_with_its_own_band():
    # TTFT is mostly queueing: a busy machine moves it most (1.3x in a clean integration deploy).
    now, before = _rounds(0.01, 300, ttft=0.02), _rounds(0.01, 300, ttft=0.02)
    for figure in ("ttft_p50_s", "ttft_p99_s"):
        now["samples"]["client"][figure] = [v * 1.4 for v in before["samples"]["client"][figure]]
    assert _regressed(now, before) == {("client", "ttft_p50_s"), ("client", "ttft_p99_s")}
    assert _regressed(now, before, ttft_band=1.0) == set()
    now["samples"]["client"]["ttft_p50_s"] = [v * 2.5 for v in before["samples"]["client"]["ttft_p50_s"]]
    assert _regressed(now, before, ttft_band=1.0) == {("client", "ttft_p50_s")}


def test_counts_are_recorded_not_judged_as_latencies():
    now, before = _rounds(0.01, 300), _rounds(0.01, 300)
    now["samples"]["servers"]["decode"]["requests"] = [32.0] * 5  # twice the requests is no slower release
    judged, skipped = judge(now, before, alpha=0.02, band=0.25, noise_floor_s=0)
    assert "requests" not in {j.figure for j in judged} and not any("requests" in s for s in skipped)


def test_figures_missing_or_renamed_on_one_side_are_listed_as_not_judged():
    now, before = _rounds(0.01, 300), _rounds(0.01, 300)
    decode = now["samples"]["servers"]["decode"]
    decode["itl_median_s"] = decode.pop("itl_p50_s")  # renamed
    before["samples"]["servers"]["prefill"] = {"ttft_p50_s": [0.1] * 5}
    del now["samples"]["client"]["ttft_p99_s"]
    skipped = judge(now, before, alpha=0.02, band=0.25, noise_floor_s=0)[1]
    assert skipped == ["prefill (no server figures now)", "client ttft_p99_s (no figure now)",
                       "decode itl_median_s (no figure before)", "decode itl_p50_s (no figure now)"]


def test_a_baseline_recorded_before_the_rounds_loads_and_is_said_too_few_to_judge():
    # state.json of a release recorded before figures kept their samples: one point per figure.
    judged, skipped = judge(_rounds(0.01, 300), _figures(0.01, 300), alpha=0.02, band=0.25, noise_floor_s=0)
    assert judged == []
    assert "client itl_p50_s (too few rounds for a rank test at alpha 0.02: 5 now, 1 before)" in skipped
    assert samples(_figures(0.01, 300))["client"]["itl_p50_s"] == [0.01]
    # A rank test can reach alpha only with enough rounds on both sides.
    assert smallest_p(5, 5) == pytest.approx(1 / 252) and smallest_p(5, 1) == pytest.approx(1 / 6)


def test_figures_of_other_hosts_or_none_are_not_a_baseline():
    assert "first release" in baseline_problem("k", None)
    assert "first release" in baseline_problem("k", {})
    why = baseline_problem("pd|a", {"key": "combined|b", "release": "r1", "client": {"itl_p50_s": 0.01}})
    assert "r1" in why and "other hosts" in why
    assert baseline_problem("k", {"key": "k", "client": {"itl_p50_s": 0.01}}) == ""


def test_client_figures_from_streamed_timings():
    timings = [Timing(ok=True, ttft_s=0.01 * (i + 1), tokens=5, token_times=[1.0, 1.04]) for i in range(4)]
    figs = client_figures(timings, wall_s=2.0)
    assert figs["ttft_p50_s"] == pytest.approx(0.02) and figs["ttft_p99_s"] == pytest.approx(0.04)
    assert figs["itl_p50_s"] == pytest.approx(0.01)  # 40 ms over 4 gaps
    assert figs["output_tokens_per_s"] == pytest.approx(10.0)
    assert quantile([], 0.5) is None


def _run(monkeypatch, baseline: dict | None, itl_gap: float = 0.01, rounds: int = 5):
    from dsv4deploy.gates import perf

    monkeypatch.setattr(perf, "stream_once", lambda *a: Timing(ok=True, ttft_s=0.02, tokens=5,
                                                               token_times=[1.0, 1.0 + 4 * itl_gap]))
    return perf.run_perf("http://127.0.0.1:1", "m", workers=[], key="k", load=perf.PerfLoad(requests=2),
                         tolerance=0.25, noise_floor_s=0.005, baseline=baseline, deadline_s=5, rounds=rounds)


def test_the_perf_verdict_names_what_it_did_not_judge(monkeypatch):
    baseline = {"key": "k", "release": "r1", **_rounds(0.01, 300)}
    result = _run(monkeypatch, baseline)
    assert result.status.value == "passed", result.summary
    assert result.summary.startswith("4 figure(s) judged, none slower than release r1 (one-sided Mann-Whitney U "
                                     "at alpha 0.02 and a median worse by at least 25%"), result.summary
    assert result.summary.endswith("; not judged: decode (no server figures now)"), result.summary
    assert result.evidence["not_judged"] == ["decode (no server figures now)"]
    # The record keeps every round's figures for the next release.
    assert len(result.evidence["figures"]["samples"]["client"]["itl_p50_s"]) == 5


def test_not_judged_is_never_a_pass(monkeypatch):
    first = _run(monkeypatch, None)
    assert first.status.value == "skipped" and first.summary.startswith("recorded, not judged (no earlier figures")
    old = _run(monkeypatch, {"key": "k", "release": "r0", **_figures(0.01, 300)})
    assert old.status.value == "skipped", old.summary
    assert old.summary.startswith("recorded, not judged (no figure could be judged against release r0)")
    assert "client itl_p50_s (too few rounds for a rank test at alpha 0.02: 5 now, 1 before)" in old.summary


def test_a_slower_release_fails_with_its_evidence(monkeypatch):
    baseline = {"key": "k", "release": "r1", **_rounds(0.01, 300)}
    result = _run(monkeypatch, baseline, itl_gap=0.02)
    assert result.status.value == "failed", result.summary
    assert re.search(r"client itl_p50_s 0.02 vs 0.01 \(2.00x worse, p=0.00\d+\)", result.summary), result.summary
    assert {r["figure"] for r in result.evidence["regressions"]} == {"itl_p50_s"}


def test_the_default_rule_refuses_a_one_and_a_half_times_slower_figure_and_lets_a_loaded_machine_pass():
    from dsv4deploy.gates.runner import GateSettings

    g = GateSettings()
    rule = {"alpha": g.perf_alpha, "band": g.perf_tolerance, "noise_floor_s": g.perf_noise_floor_s,
            "ttft_band": g.perf_ttft_tolerance}
    # The embedded host's decode: 11.6 ms a token, 1.5x slower is 17.4 ms, each round within a few %.
    assert ("decode", "itl_p50_s") in _regressed(_rounds(0.0174, 200), _rounds(0.0116, 300), **rule)
    # 1.2x in every round (a busy machine): significant, inside the band.
    assert _regressed(_rounds(0.0139, 250), _rounds(0.0116, 300), **rule) == set()
    assert math.comb(2 * g.perf_rounds, g.perf_rounds) >= 1 / g.perf_alpha  # the rounds can reach alpha
