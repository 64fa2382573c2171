"""The accuracy gate's judgement: evidence.py's sequential test on the wrong-answer rate."""

from __future__ import annotations

import pytest

from dsv4deploy.gates.accuracy import AccuracyPlan, judge, reference_score, score_figures, sequential_test
from dsv4deploy.gates.evidence import Outcome

GSM8K = AccuracyPlan(expected=0.9613, margin=0.05, count=200)


def test_a_clean_run_passes_and_a_bad_one_fails_early() -> None:
    assert judge([True] * 60, GSM8K).outcome is Outcome.PASSED
    failed = judge([False, True, False, False, True, False], GSM8K)
    assert failed.outcome is Outcome.FAILED and failed.trials == 6


def test_a_budget_spent_undecided_is_inconclusive_with_what_would_decide() -> None:
    decision = judge([True] * 15 + [False] + [True] * 4, AccuracyPlan(expected=0.9613, count=20))
    assert decision.outcome is Outcome.INCONCLUSIVE and decision.more_trials and decision.more_trials > 0


def test_the_test_refuses_the_expected_score_minus_the_margin() -> None:
    test = sequential_test(GSM8K)
    assert test.p0 == pytest.approx(1 - 0.9613) and test.p1 == pytest.approx(1 - 0.9113)
    with pytest.raises(ValueError, match="accuracy_margin"):
        sequential_test(AccuracyPlan(expected=0.04, margin=0.05))


def test_the_score_comes_with_its_standard_error_and_exact_interval() -> None:
    figures = score_figures(180, 200)
    assert figures["score"] == 0.9 and figures["standard_error"] == pytest.approx(0.0212, abs=1e-4)
    low, high = figures["interval_95"]
    assert low < 0.9 < high and figures["n"] == 200


def test_the_reference_score_comes_from_the_profile() -> None:
    refs = {"gsm8k": {"score": 0.9613, "source": "cookbook"}}
    assert reference_score(refs, "gsm8k") == (0.9613, "cookbook") and reference_score(refs, "gpqa") is None


def test_a_perfect_score_is_shown_with_its_exact_interval_not_plus_or_minus_zero() -> None:
    from dsv4deploy.gates.accuracy import summary

    figures = score_figures(44, 44)
    line = summary(judge([True] * 44, GSM8K), figures, GSM8K)
    assert "score 100.0% (95% interval 92.0%-100.0%, n=44)" in line and "±" not in line
    assert "as observed when the sequential test stopped (biased" in line
