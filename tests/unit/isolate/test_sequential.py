"""The alternating group-sequential soak: its levels, its stopping, its design points and its pooling."""

from __future__ import annotations

import random

import pytest

from dsv4deploy.isolate.compare import decide_rates, fisher_greater
from dsv4deploy.isolate.sequential import (
    Design,
    block_rows,
    choose_rounds,
    operating_characteristics,
    run_design,
    spending,
)


def test_the_looks_spend_the_whole_significance_and_no_more() -> None:
    for rounds in (1, 2, 4, 7):
        levels = Design(block=100, rounds=rounds).levels()
        assert sum(levels) == pytest.approx(0.05) and all(x > 0 for x in levels)
    assert spending(0.0) == 0.0 and spending(1.0) == 0.05
    # O'Brien-Fleming-like: the first of two looks gets little, the last most.
    first, last = Design().levels()
    assert first < 0.01 < 0.04 < last


def test_the_design_stops_at_the_first_decided_look_and_judges_at_that_looks_level() -> None:
    design = Design(block=350, rounds=2)
    # 18 % against 2 % after one block each is already decided at the first look's 0.006.
    assert run_design([(63, 7), (60, 8)], design) == ("pd_amplified", 1)
    # Both clean: 0 of 350 cannot show 0.5 % at 0.006, 0 of 700 shows it at 0.044.
    assert run_design([(0, 0), (0, 0)], design) == ("clean", 2)
    # One block each, both clean, shows neither side below 0.5 % at the first look's level: the design goes on.
    assert decide_rates(0, 350, 0, 350, 0.005, significance=design.levels()[0]).verdict == "inconclusive"
    assert run_design([(0, 0)], design) == ("inconclusive", 1)


def test_each_blocks_figures_are_reported() -> None:
    rows = block_rows([(63, 7), (60, 8)], 350)
    assert [(r["block"], r["pd"], r["combined"]) for r in rows] == [(1, 63, 7), (2, 60, 8)]
    assert rows[1]["combined_rate"] == pytest.approx(8 / 350)


def test_the_seeds_amplification_reads_pd_amplified_for_fewer_sessions_than_the_fixed_design() -> None:
    oc = operating_characteristics(Design(), 0.18, 0.02)
    assert oc.verdicts["pd_amplified"] >= 0.9, oc
    # The fixed design runs 600 a side every time and reads it 0.9557 (bench/isolation_oc.py's soak rows).
    assert oc.verdicts["pd_amplified"] > 0.9557 and oc.expected_sessions < 600 * 0.9, oc
    assert sum(oc.verdicts.values()) == pytest.approx(1.0, abs=1e-6)
    assert sum(oc.stop_at) == pytest.approx(1.0, abs=1e-6)


def test_clean_sides_read_clean_and_pd_only_corruption_pd_specific_at_the_budget() -> None:
    assert operating_characteristics(Design(), 0.0, 0.0).verdicts["clean"] == pytest.approx(1.0)
    specific = operating_characteristics(Design(), 0.18, 0.0)
    assert specific.verdicts["pd_specific"] == pytest.approx(1.0) and specific.expected_rounds == pytest.approx(2)


def test_pooling_equal_blocks_keeps_fishers_size_under_drift() -> None:
    # Both sides share a rate that drifts from 0.5 % to 8 % between the blocks (no between-side difference):
    # the pooled one-sided Fisher test must reject at most 5 % (plus Monte Carlo error).
    rng = random.Random(49)
    runs, block, rates = 2000, 175, (0.005, 0.02, 0.05, 0.08)
    rejections = 0
    for _ in range(runs):
        kp = sum(sum(rng.random() < r for _ in range(block)) for r in rates)
        kc = sum(sum(rng.random() < r for _ in range(block)) for r in rates)
        rejections += fisher_greater(kp, block * 4, kc, block * 4) < 0.05
    rate = rejections / runs
    assert rate <= 0.05 + 3 * (0.05 * 0.95 / runs) ** 0.5, rate


def test_the_block_count_follows_the_switch_cost_and_keeps_two_blocks_a_side() -> None:
    # Slow restarts: as few rounds as alternation allows (A-B-A-B); cheap restarts: more rounds stop sooner.
    assert choose_rounds(400, 5 / 32, 120.0, candidates=(2, 4)).rounds == 2
    assert choose_rounds(400, 5 / 32, 1.0, candidates=(2, 4)).rounds == 4
    assert choose_rounds(1, 5 / 32, 120.0).rounds == 1


def test_the_exact_characteristics_are_the_procedures_own() -> None:
    # Simulated runs of run_design (the procedure itself) agree with the dynamic programme within 4 standard errors.
    design, runs = Design(block=100, rounds=3), 600
    rng = random.Random(7)
    exact = operating_characteristics(design, 0.18, 0.02)
    amplified = stops_first = 0
    for _ in range(runs):
        blocks = [(sum(rng.random() < 0.18 for _ in range(100)), sum(rng.random() < 0.02 for _ in range(100)))
                  for _ in range(design.rounds)]
        verdict, rounds = run_design(blocks, design)
        amplified += verdict == "pd_amplified"
        stops_first += rounds == 1
    for seen, p in ((amplified, exact.verdicts["pd_amplified"]), (stops_first, exact.stop_at[0])):
        assert abs(seen / runs - p) <= 4 * (p * (1 - p) / runs) ** 0.5 + 1e-9, (seen, p)


def test_a_sides_soak_blocks_pool_into_one_result_judged_at_its_look() -> None:
    from dsv4deploy.isolate.sequential import pool_soak

    def block(k: int, status: str = "passed") -> dict:
        return {"name": "soak", "status": status, "seconds": 2.0, "summary": f"{k} corrupted",
                "evidence": {"corrupted_sessions": k, "finished": 12, "occupancy": [{"role": "decode"}]}}

    gates = [{"name": "readiness", "status": "passed"}, block(1), block(0, "failed")]
    pooled = pool_soak(gates, 2)
    assert [g["name"] for g in pooled] == ["readiness", "soak"]
    soak = pooled[-1]
    assert (soak["status"], soak["seconds"]) == ("failed", 4.0)
    ev = soak["evidence"]
    assert (ev["corrupted_sessions"], ev["finished"], ev["look"], ev["rounds"]) == (1, 24, 2, 2)
    assert ev["significance"] == pytest.approx(Design().levels()[1]) and len(ev["occupancy"]) == 2
    # The fixed design (one round, one block) is left as it was.
    assert pool_soak(gates[:2], 1) == gates[:2]


def test_the_plan_line_states_the_budget_its_rounds_and_their_switches() -> None:
    from dsv4deploy.gates.runner import GateSettings
    from dsv4deploy.isolate.estimate import SWITCH_S, estimate

    settings = GateSettings(soak_sessions=700)
    plan = estimate(["soak"], settings, rounds=2)
    assert "at most 700 soak sessions a side in 2 rounds of 350" in plan["line"] and "4 switches" in plan["line"]
    assert plan["seconds"] - estimate(["soak"], settings)["seconds"] == 2 * SWITCH_S
    # Without a soak there are no rounds: one switch and the restore.
    assert "for the switch and the restore" in estimate(["needle"], settings, rounds=2)["line"]


def test_a_budget_that_cannot_be_split_into_its_rounds_is_refused_naming_the_field() -> None:
    from dsv4deploy.isolate.sequential import split_budget
    from dsv4deploy.spec import SpecError

    assert split_budget(700, 2) == Design(block=350, rounds=2)
    for sessions, rounds in ((1, 2), (700, 0)):
        with pytest.raises(SpecError) as caught:
            split_budget(sessions, rounds)
        (problem,) = caught.value.problems
        assert problem.field == "dsv4_isolate_soak_rounds" and "dsv4_isolate_soak_sessions" in problem.fix
