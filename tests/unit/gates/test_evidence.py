"""The decision rule and the statistics every gate's verdict rests on."""

from __future__ import annotations

import math

import pytest

from dsv4deploy.gates.evidence import (
    BernoulliSPRT,
    Decision,
    Outcome,
    exact_interval,
    fisher_greater,
    mann_whitney_greater,
    mcnemar_p_value,
    rate_above_p_value,
)

# The soak's defaults: a clean release is at most 0.5 % corrupted sessions, a bad one at least 5 %.
SOAK = dict(p0=0.005, p1=0.05, alpha=0.01, beta=0.05, budget=300)


def _run(test: BernoulliSPRT, trials: list[bool]) -> Outcome | None:
    outcome = None
    for event in trials:
        outcome = test.observe(event)
        if outcome is not None:
            break
    return outcome


def test_the_bounds_are_walds() -> None:
    test = BernoulliSPRT(**SOAK)
    assert test.upper == pytest.approx(math.log(0.95 / 0.01))
    assert test.lower == pytest.approx(math.log(0.05 / 0.99))
    assert test.step_event == pytest.approx(math.log(10))


def test_a_clean_release_passes_after_the_fewest_clean_sessions_the_risks_allow() -> None:
    test = BernoulliSPRT(**SOAK)
    assert test.more_to_pass() == 65
    assert _run(test, [False] * 300) is Outcome.PASSED
    assert test.trials == 65
    decision = test.decision("sessions")
    assert decision.outcome is Outcome.PASSED and decision.interval == pytest.approx((0.0, 0.0552), abs=1e-4)
    assert "below the refused 5.0%" in decision.reason


def test_two_corrupted_sessions_at_the_start_fail_it() -> None:
    test = BernoulliSPRT(**SOAK)
    assert _run(test, [True, True]) is Outcome.FAILED
    decision = test.decision("sessions")
    assert decision.outcome is Outcome.FAILED and decision.trials == 2
    # No fixed-sample p-value after a data-chosen stop: the test's own statement, and the rate labelled biased
    assert decision.p_value is None and "p_value" not in decision.evidence()
    assert "reached the rejection bound" in decision.evidence()["statement"]
    assert "biased" in decision.evidence()["rate_note"]
    assert decision.evidence()["risks"]["beta"] == 0.05


def test_a_budget_spent_undecided_is_inconclusive_and_says_how_many_more_would_decide() -> None:
    test = BernoulliSPRT(**{**SOAK, "budget": 100})
    # one corrupted session early: 65 clean ones no longer suffice, 115 would
    assert _run(test, [True] + [False] * 99) is Outcome.INCONCLUSIVE
    decision = test.decision("sessions")
    assert decision.outcome is Outcome.INCONCLUSIVE and decision.more_trials == test.more_to_pass() > 0
    assert f"{decision.more_trials} more clean sessions would pass it" in decision.reason
    # the stated number is right: that many more clean trials on an unbounded test pass it, one fewer not
    longer = BernoulliSPRT(**{**SOAK, "budget": 10_000})
    _run(longer, [True] + [False] * 99)
    assert _run(longer, [False] * (decision.more_trials - 1)) is None
    assert longer.observe(False) is Outcome.PASSED


def test_a_deadline_before_the_budget_is_inconclusive_naming_it() -> None:
    test = BernoulliSPRT(**SOAK)
    _run(test, [False] * 10)
    decision = test.decision("sessions", cut_short="the gate deadline (900 s) passed")
    assert decision.outcome is Outcome.INCONCLUSIVE and "deadline (900 s)" in decision.reason
    assert decision.more_trials == 65 - 10


def test_trials_after_a_pass_are_still_counted() -> None:
    # the soak's two tests stop together: corruption seen after one passed takes the pass back
    test = BernoulliSPRT(**SOAK)
    _run(test, [False] * 65)
    assert test.state() is Outcome.PASSED
    assert test.observe(True) is None and test.events == 1


@pytest.mark.parametrize("bad", [dict(p0=0.05, p1=0.01), dict(p0=0.0), dict(alpha=0.6), dict(budget=0)])
def test_a_design_that_cannot_work_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        BernoulliSPRT(**{**SOAK, **bad})


def test_exact_intervals_are_clopper_pearson() -> None:
    assert exact_interval(0, 50) == pytest.approx((0.0, 0.0711), abs=1e-4)
    assert exact_interval(5, 50) == pytest.approx((0.0333, 0.2181), abs=1e-4)
    assert exact_interval(0, 0) == (0.0, 1.0)


def test_the_comparisons_are_scipys_exact_tests() -> None:
    # seed 002 on the embedded host: PD 24 of 150 corrupted, combined 0 of 150
    assert fisher_greater(24, 150, 0, 150) == pytest.approx(2.19e-8, rel=0.01)
    assert fisher_greater(3, 150, 3, 150) > 0.5
    assert mcnemar_p_value(8, 0) == pytest.approx(2 / 2 ** 8)
    assert mcnemar_p_value(0, 0) == 1.0
    assert rate_above_p_value(0, 50, 0.005) == 1.0
    assert mann_whitney_greater([3.0, 4.0, 5.0], [0.0, 1.0, 2.0]) == pytest.approx(0.05)


def test_a_decision_shows_its_evidence() -> None:
    decision = Decision(Outcome.FAILED, "why", 3, 40, (0.016, 0.204), 0.004, {"alpha": 0.01}, None)
    assert decision.stats() == "3 of 40 (7.5%, 95% interval 1.6%-20.4%), p=0.004"
    assert decision.evidence() == {"outcome": "failed", "reason": "why", "events": 3, "trials": 40, "rate": 0.075,
                                   "interval_95": [0.016, 0.204], "p_value": 0.004, "risks": {"alpha": 0.01}}
    assert Decision(Outcome.ERROR, "metrics unreadable").stats() == "no trials"

