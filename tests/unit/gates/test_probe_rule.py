"""The bake's tool-call probe rule: its counts hold the stated false-alarm risk for the whole bake, exactly."""

from __future__ import annotations

import itertools
import threading

import pytest
from scipy.stats import binom

from dsv4deploy.gates import bake
from dsv4deploy.gates.bake import Analysis, BakeSettings, Phase, tool_probe_analysis
from dsv4deploy.gates.probe_rule import ProbeRule, bake_fail_probability, former_bake_fail_probability
from dsv4deploy.gates.result import GateResult, GateStatus

from .test_gate_soak import CHAT, model


def test_one_corrupted_session_no_longer_fails_a_clean_release_a_quarter_of_the_time() -> None:
    rule = ProbeRule(sessions=16, intervals=10, failure_limit=1)
    assert former_bake_fail_probability(rule, 0.005) == pytest.approx(0.2520, abs=1e-4)
    assert rule.fail_at == (2, 3)
    # The operating characteristic docs/evidence.md publishes (no model mistakes).
    assert [round(rule.bake_fail_probability(r), 4) for r in (0.0, 0.005, 0.02, 0.10)] == \
        [0.0, 0.0059, 0.1131, 0.9888]


@pytest.mark.parametrize("intervals", [1, 2, 3, 5, 10, 30, 60])
@pytest.mark.parametrize("failure_limit", [0, 1, 3])
def test_the_bake_refuses_a_release_at_the_acceptable_rates_at_most_alpha(intervals, failure_limit) -> None:
    rule = ProbeRule(sessions=16, intervals=intervals, failure_limit=failure_limit)
    assert rule.bake_fail_probability(0.005, 0.02) <= rule.alpha
    corrupt_at, mistake_at = rule.fail_at
    # The counts are the smallest that hold alpha/2 each: one fewer would not.
    for at, rate in ((corrupt_at, 0.005), (mistake_at, 0.02)):
        one_fewer = binom.sf(at - 2, 16, rate)  # P(at least at - 1 of 16)
        assert at == 1 or bake_fail_probability(one_fewer, intervals, failure_limit) > rule.alpha / 2


def _bake_fails(monkeypatch: pytest.MonkeyPatch, pattern: tuple[bool, ...], failure_limit: int) -> bool:
    script = iter(pattern)
    monkeypatch.setattr(bake, "probe_analyses", lambda *a, **k: [
        Analysis("tool-call probe", Phase.FAILED if next(script) else Phase.SUCCESSFUL, "x")])
    monkeypatch.setattr(bake, "metric_analyses", lambda *a, **k: [])
    settings = BakeSettings(seconds=len(pattern), interval_s=1, failure_limit=failure_limit)
    result = bake.run_bake("http://127.0.0.1:9", "m", workers=[], settings=settings, topology="pd",
                           sleep=lambda _: None)
    return result.status == "failed"


@pytest.mark.parametrize("failure_limit", [0, 1, 2])
def test_the_exact_sum_is_the_bakes_own_failure_rule(monkeypatch, failure_limit) -> None:
    q, n = 0.3, 5
    enumerated = sum(q ** sum(p) * (1 - q) ** (n - sum(p))
                     for p in itertools.product((False, True), repeat=n)
                     if _bake_fails(monkeypatch, p, failure_limit))
    assert bake_fail_probability(q, n, failure_limit) == pytest.approx(enumerated, abs=1e-12)


def _tools(corrupted: int, mistaken: int, status: GateStatus = GateStatus.PASSED) -> GateResult:
    return GateResult(name="soak", status=status, seconds=1.0, summary="2 of 16 sessions did not finish",
                      evidence={"corrupted_sessions": corrupted, "mistaken_sessions": mistaken, "finished": 16})


def test_an_interval_fails_at_the_rules_counts_and_when_a_session_could_not_finish() -> None:
    rule = ProbeRule(sessions=16, intervals=10, failure_limit=1)
    one = tool_probe_analysis(_tools(1, 2), rule)
    assert one.phase is Phase.SUCCESSFUL and "fails this 10-interval bake with probability 0.0142" in one.detail
    assert tool_probe_analysis(_tools(2, 0), rule).phase is Phase.FAILED
    assert tool_probe_analysis(_tools(0, 3), rule).phase is Phase.FAILED
    unfinished = tool_probe_analysis(_tools(0, 0, GateStatus.FAILED), rule)
    assert unfinished.phase is Phase.FAILED and "did not finish" in unfinished.detail


@pytest.mark.parametrize(("corrupted", "phase"), [(0, Phase.SUCCESSFUL), (1, Phase.SUCCESSFUL), (2, Phase.FAILED)])
def test_a_bake_interval_judges_the_probes_sessions_by_the_rule(stub, monkeypatch, corrupted, phase) -> None:
    # The canary needle is not the subject: it passes.
    monkeypatch.setattr(bake, "run_needle", lambda *a, **k: GateResult(name="needle", status=GateStatus.PASSED,
                                                                       seconds=0.1, summary="recalled"))
    lock, seen = threading.Lock(), [0]

    def first_calls_corrupted(call, request):
        with lock:
            seen[0] += 1
            bad = seen[0] <= corrupted
        return {"content": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"} if bad else None

    server = stub({CHAT: model(first_calls_corrupted)})
    analyses = bake.probe_analyses(server.url, "dsv4", BakeSettings(seconds=600, interval_s=60), 0, None)
    probe = next(a for a in analyses if a.name == "tool-call probe")
    assert probe.phase is phase, probe.detail
    assert probe.detail.startswith(f"{corrupted} corrupted and 0 mistaken of 16 sessions; an interval fails at 2")
