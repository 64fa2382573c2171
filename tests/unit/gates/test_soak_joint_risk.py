"""The soak's two tests together: the joint risk of refusing a clean release is stated and held, exactly."""

from __future__ import annotations

import random

import pytest

from dsv4deploy.gates.evidence import Outcome
from dsv4deploy.gates.runner import GateSettings
from dsv4deploy.gates.soak import SoakDesign, SoakSession, _Referee
from dsv4deploy.gates.sprt_oc import joint_oc


def test_a_clean_release_is_refused_at_most_soak_alpha_at_the_default_budget() -> None:
    design = GateSettings().soak_design()
    budget = GateSettings().soak_sessions
    risks = design.joint_risks(budget)
    assert risks["refused_when_clean"] <= design.alpha and risks["promoted_when_bad"] <= design.beta
    assert risks == {"refused_when_clean": 0.0061, "failed_when_clean": 0.0054, "inconclusive_when_clean": 0.0008,
                     "promoted_when_bad": 0.0405}
    # Both tests at the full alpha over 300 sessions, as before: 1.5 % against the stated 1 %.
    former = SoakDesign(alpha=2 * design.alpha).joint_risks(300)
    assert former["refused_when_clean"] == pytest.approx(0.0153, abs=1e-4)


def _referee_outcome(design: SoakDesign, budget: int, corrupt: float, mistake: float, rng: random.Random) -> Outcome:
    """One soak judged by the gate's own referee, sessions drawn in order."""
    referee = _Referee(design.tests(budget))
    for n in range(budget):
        draw = rng.random()
        referee.started(n)
        referee.ended(SoakSession(session=n, corrupted=draw < corrupt, mistake=corrupt <= draw < corrupt + mistake))
        if referee.decision_after is not None:
            break
    return referee.outcome() or Outcome.INCONCLUSIVE


def test_the_exact_sum_is_the_soak_referees_own_stopping() -> None:
    design = SoakDesign(acceptable_rate=0.01, max_rate=0.3, acceptable_mistake_rate=0.01, max_mistake_rate=0.3,
                        alpha=0.1, beta=0.1)
    budget, corrupt, mistake = 12, 0.08, 0.05
    exact = joint_oc(*design.tests(budget), corrupt, mistake)
    rng = random.Random(49)
    runs = 6000
    seen = [_referee_outcome(design, budget, corrupt, mistake, rng) for _ in range(runs)]
    for outcome, p in ((Outcome.PASSED, exact.passed), (Outcome.FAILED, exact.failed),
                       (Outcome.INCONCLUSIVE, exact.inconclusive)):
        assert seen.count(outcome) / runs == pytest.approx(p, abs=4 * (p * (1 - p) / runs) ** 0.5 + 1e-3)
