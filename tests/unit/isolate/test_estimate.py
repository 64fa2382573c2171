"""The isolation plan line's estimated time, from the sample sizes the experiment chose."""

from __future__ import annotations

from dsv4deploy.gates.runner import GateSettings
from dsv4deploy.isolate.estimate import CELL_S, SESSION_S, SWITCH_S, estimate, needle_cells


def test_the_estimate_names_each_sample_size_and_adds_both_sides_and_the_switches() -> None:
    settings = GateSettings(soak_sessions=150, soak_concurrency=16, needle_trials=12, needle_min_recalled=9)
    plan = estimate(["needle", "soak"], settings)
    # 18 cells x 12 trials, 4 at once: 54 batches; 150 sessions, 16 at once: 10 batches; each side, then two
    # switches.
    assert plan["seconds"] == round(2 * (54 * CELL_S + 10 * SESSION_S) + 2 * SWITCH_S)
    assert plan["line"] == ("estimated time about 13 min: 150 soak sessions a side, 16 at once (assumed 5 s a "
                            "session); at most 216 needle prompts a side (18 cells x 12 trials), 4 at once (assumed "
                            "4 s a prompt); 4 min for the switch and the restore")


def test_more_sessions_take_longer_and_a_suite_left_out_costs_nothing() -> None:
    small = estimate(["soak"], GateSettings(soak_sessions=50, soak_sequential=False))["seconds"]
    large = estimate(["soak"], GateSettings(soak_sessions=300, soak_sequential=False))["seconds"]
    assert large > small
    assert "needle" not in estimate(["soak"], GateSettings())["line"]
    assert needle_cells(GateSettings(needle_lengths=[1000, 2000], needle_depths=[0.5], needle_trials=3,
                                     needle_min_recalled=3)) == 6
