"""The needle's per-cell rule keeps its design risks (docs/evidence.md), exactly and when run over trials."""

from __future__ import annotations

import pytest
from scipy.stats import binom

from dsv4deploy.gates.evidence import Outcome
from dsv4deploy.gates.oc import simulate_cell
from dsv4deploy.gates.recall_rule import BAD_RECALL, CLEAN_RECALL, RecallRule

DEFAULT = RecallRule()
#: The rule before early acceptance: its risks are the ones the default must keep.
NINE_OF_TWELVE = RecallRule(12, 9)


def test_the_default_keeps_the_former_risks_at_both_design_points_or_better() -> None:
    assert (DEFAULT.trials, DEFAULT.min_recalled, DEFAULT.early) == (19, 15, (4, 9, 12, 14))
    assert DEFAULT.pass_probability(CLEAN_RECALL) == pytest.approx(0.9757, abs=1e-4)
    assert DEFAULT.pass_probability(BAD_RECALL) == pytest.approx(0.0727, abs=1e-4)
    assert DEFAULT.pass_probability(CLEAN_RECALL) >= NINE_OF_TWELVE.pass_probability(CLEAN_RECALL)
    assert DEFAULT.pass_probability(BAD_RECALL) <= NINE_OF_TWELVE.pass_probability(BAD_RECALL)
    # the requirement: twelve required cells that each recall 90 % pass together 74 % of the time (73 % under
    # 9 of 12), at 95 % 97 %
    assert DEFAULT.risks(12)["requirement_pass_at_clean"] == pytest.approx(0.7441, abs=1e-4)
    assert DEFAULT.pass_probability(0.95) ** 12 > 0.97 and RecallRule(1, 1).pass_probability(0.9) ** 12 < 0.29


def test_a_clean_cell_costs_four_trials_where_it_cost_nine() -> None:
    assert DEFAULT.expected_trials(1.0) == 4.0 and NINE_OF_TWELVE.expected_trials(1.0) == 9.0
    assert DEFAULT.expected_trials(CLEAN_RECALL) < 7.2 < 9.9 < NINE_OF_TWELVE.expected_trials(CLEAN_RECALL)
    assert DEFAULT.expected_trials(0.0) == 5.0  # five misses decide a lost cell (four under 9 of 12)


def test_the_exact_oc_is_the_binomial_sum_for_a_plain_rule_and_matches_the_simulated_decision() -> None:
    for recall in (0.3, BAD_RECALL, 0.7, CLEAN_RECALL):
        assert NINE_OF_TWELVE.pass_probability(recall) == pytest.approx(float(binom.sf(8, 12, recall)), abs=1e-12)
        assert simulate_cell(DEFAULT, recall, runs=4000).passed == pytest.approx(
            DEFAULT.pass_probability(recall), abs=0.015)


def test_the_exact_oc_is_the_sum_over_every_sequence_of_trials() -> None:
    # Every sequence of outcomes up to its decision, read by replay (the gate's decision), each with its
    # own probability: the sum the dynamic programming must equal.
    recall = 0.8

    def passed(seq: list[bool]) -> float:
        outcome, used, _ = DEFAULT.replay(seq)
        if outcome is not None:
            assert used == len(seq)  # replay decides on the last outcome read, never later
            return float(outcome is Outcome.PASSED)
        return recall * passed([*seq, True]) + (1 - recall) * passed([*seq, False])

    assert passed([]) == pytest.approx(DEFAULT.pass_probability(recall), abs=1e-12)


def test_the_rule_decides_as_soon_as_it_is_certain_and_no_later() -> None:
    assert DEFAULT.state(4, 0) is Outcome.PASSED and DEFAULT.state(8, 1) is None
    assert DEFAULT.state(9, 1) is Outcome.PASSED and DEFAULT.state(14, 3) is Outcome.PASSED
    assert DEFAULT.state(14, 4) is None and DEFAULT.state(15, 4) is Outcome.PASSED
    assert DEFAULT.state(0, 5) is Outcome.FAILED and DEFAULT.state(14, 5) is Outcome.FAILED
    assert DEFAULT.still_needed(0, 0) == 4 and DEFAULT.still_needed(3, 1) == 4 and DEFAULT.still_needed(14, 4) == 1
    assert NINE_OF_TWELVE.still_needed(8, 3) == 1 and NINE_OF_TWELVE.still_needed(0, 0) == 4
    # read in order: a miss first means nine recalls are needed, not four
    assert DEFAULT.replay([False, True, True, True, True]) == (None, 5, 4)
    assert DEFAULT.replay([True] * 4 + [False] * 3) == (Outcome.PASSED, 4, 4)


def test_a_rule_that_cannot_pass_or_an_unordered_schedule_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="needle_min_recalled <= needle_trials"):
        RecallRule(trials=3, min_recalled=4)
    with pytest.raises(ValueError, match=r"needle_pass_early \[5, 3\] must rise"):
        RecallRule(19, 15, (5, 3))
    with pytest.raises(ValueError, match=r"needle_pass_early \[4\] .*at most 0 with 3 of 3"):
        RecallRule(3, 3, (4,))
    assert RecallRule(3, 3).early == () and RecallRule(12, 9).early == ()  # other trials: a plain k of n
