"""The needle's k-of-n rule keeps its design risks (docs/evidence.md), exactly and when run over trials."""

from __future__ import annotations

import pytest

from dsv4deploy.gates.evidence import Outcome
from dsv4deploy.gates.oc import simulate_cell
from dsv4deploy.gates.recall_rule import BAD_RECALL, CLEAN_RECALL, RecallRule

DEFAULT = RecallRule()


def test_a_90_percent_cell_passes_at_least_97_percent_and_a_50_percent_one_at_most_8_percent() -> None:
    assert (DEFAULT.trials, DEFAULT.min_recalled) == (12, 9)
    assert DEFAULT.pass_probability(CLEAN_RECALL) == pytest.approx(0.9744, abs=1e-4)
    assert DEFAULT.pass_probability(BAD_RECALL) == pytest.approx(0.0730, abs=1e-4)
    # the requirement: twelve required cells that each recall 90 % pass together 73 % of the time (28 % with
    # one trial a cell, the rule before), at 95 % 97 %
    assert DEFAULT.risks(12)["requirement_pass_at_clean"] == pytest.approx(0.7322, abs=1e-4)
    assert DEFAULT.pass_probability(0.95) ** 12 > 0.97 and RecallRule(1, 1).pass_probability(0.9) ** 12 < 0.29


def test_the_curtailed_decision_keeps_the_exact_risks_and_a_clean_cell_costs_nine_trials() -> None:
    for recall in (BAD_RECALL, CLEAN_RECALL):
        assert simulate_cell(DEFAULT, recall, runs=4000).passed == pytest.approx(
            DEFAULT.pass_probability(recall), abs=0.015)
    clean = simulate_cell(DEFAULT, 1.0, runs=50)
    assert (clean.passed, clean.mean_trials) == (1.0, 9.0)
    assert simulate_cell(DEFAULT, 0.0, runs=50).mean_trials == 4.0  # four misses decide it


def test_the_rule_decides_as_soon_as_it_is_certain_and_no_later() -> None:
    assert DEFAULT.state(9, 0) is Outcome.PASSED and DEFAULT.state(9, 3) is Outcome.PASSED
    assert DEFAULT.state(0, 4) is Outcome.FAILED and DEFAULT.state(8, 4) is Outcome.FAILED
    assert DEFAULT.state(8, 3) is None
    assert DEFAULT.still_needed(8, 3) == 1 and DEFAULT.still_needed(0, 0) == 4 and DEFAULT.still_needed(9, 0) == 0


def test_a_rule_that_cannot_pass_is_refused() -> None:
    with pytest.raises(ValueError, match="needle_min_recalled <= needle_trials"):
        RecallRule(trials=3, min_recalled=4)
