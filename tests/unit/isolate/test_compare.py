"""The isolation experiment's comparisons answer the seeds' two questions with exact tests."""

from __future__ import annotations

import pytest

from dsv4deploy.isolate.compare import combine_suites, compare_needle, compare_soak, sessions_to_show_clean


def soak(corrupted: int, finished: int) -> dict:
    return {"corrupted_sessions": corrupted, "finished": finished, "design": {"acceptable_rate": 0.005}}


def test_seed_002_pd_corrupts_and_the_combined_server_is_shown_clean() -> None:
    verdict, why, ev = compare_soak(soak(24, 150), soak(0, 150))
    assert verdict == "pd_specific", why
    assert ev["fisher_p"] == pytest.approx(2.19e-8, rel=0.01) and ev["combined_below_2pct_p"] < 0.05
    assert "combined 0 of 150 sessions corrupted (95% interval 0.0%-2.4%)" in why and "Fisher p=2.2e-08" in why


def test_zero_of_fifty_cannot_rule_out_the_seeds_2_percent_and_says_how_many_more_would() -> None:
    # the measurement: PD 16 of 50, combined 0 of 50 (interval 0-7.1 %) read PD_SPECIFIC before
    verdict, why, _ = compare_soak(soak(16, 50), soak(0, 50))
    assert verdict == "inconclusive", why
    assert f"{sessions_to_show_clean() - 50} more clean sessions on the combined side" in why
    assert sessions_to_show_clean() == 149


def test_both_corrupting_pd_significantly_more_is_pd_amplified_and_alike_is_shared_path() -> None:
    assert compare_soak(soak(24, 150), soak(5, 150))[0] == "pd_amplified"
    assert compare_soak(soak(6, 150), soak(5, 150))[0] == "shared_path"
    assert compare_soak(soak(0, 150), soak(0, 150))[0] == "clean"
    assert compare_soak(soak(0, 150), soak(9, 150))[0] == "inconclusive"


def needle(recalled: dict[int, int], depths: int = 6) -> dict:
    """Cells at 2K, 4K, 8K, each length with `depths` depths; `recalled[n]` of them recalled."""
    return {"cells": [{"context_tokens": n, "depth": d / depths, "code": f"c{n}-{d}", "recalled": d < recalled[n]}
                      for n in recalled for d in range(depths)]}


def test_seed_000_both_curves_collapsing_alike_is_shared_path_even_when_both_pass_the_requirement() -> None:
    # index_topk 512: both sides recall to 2K and lose 4K and 8K alike, on identical prompts
    curve = {2000: 6, 4000: 0, 8000: 0}
    verdict, why, ev = compare_needle(needle(curve), needle(curve), 4000, 4000)
    assert verdict == "shared_path", why
    assert ev["mcnemar_p"] == 1.0 and "recall breaks at 4000 (PD) and 4000 (combined)" in why


def test_pd_losing_cells_the_combined_server_recalls_is_pd_specific_with_enough_pairs() -> None:
    verdict, why, ev = compare_needle(needle({2000: 0, 4000: 0}), needle({2000: 6, 4000: 6}), 2000, None)
    assert verdict == "pd_specific" and ev["only_pd"] == 12 and ev["mcnemar_p"] < 0.001
    few, why, _ = compare_needle(needle({2000: 0}, depths=2), needle({2000: 2}, depths=2), 2000, None)
    assert few == "inconclusive" and "at least 6 such prompts would decide" in why


def test_pd_worse_on_a_curve_both_lose_is_pd_amplified() -> None:
    verdict, _, _ = compare_needle(needle({2000: 0, 4000: 0, 8000: 0}), needle({2000: 6, 4000: 6, 8000: 0}),
                                   2000, 8000)
    assert verdict == "pd_amplified"


def test_suites_judged_together_name_the_pd_finding_first() -> None:
    verdict, why = combine_suites([("clean", "needle: fine"), ("pd_specific", "soak: PD corrupts")])
    assert verdict == "pd_specific" and why == "needle: fine; soak: PD corrupts"
    assert combine_suites([("clean", "a"), ("inconclusive", "b")])[0] == "inconclusive"


def trials(recalled: dict[int, int], asked: int = 9) -> dict:
    """One cell per length with `asked` trials (each its own needle), the first `recalled[n]` recalled."""
    return {"cells": [{"context_tokens": n, "depth": 0.5, "code": f"c{n}-0", "recalled": recalled[n] >= 9,
                       "trials": [{"trial": t, "code": f"c{n}-{t}", "recalled": t < recalled[n], "error": None}
                                  for t in range(asked if recalled[n] >= 9 else 4)]}
                      for n in recalled]}


def test_cells_of_several_trials_are_paired_trial_by_trial_on_identical_prompts() -> None:
    # PD loses every trial at 4K and 8K (its cells stop at four misses), the combined server recalls them:
    # the four trials asked on both sides pair, so 8 discordant prompts, where one trial a cell had 2
    verdict, why, ev = compare_needle(trials({2000: 9, 4000: 0, 8000: 0}), trials({2000: 9, 4000: 9, 8000: 9}),
                                      4000, None)
    assert verdict == "pd_specific", why
    assert (ev["paired_prompts"], ev["only_pd"], ev["only_combined"]) == (17, 8, 0) and ev["mcnemar_p"] < 0.01
    same, why, _ = compare_needle(trials({2000: 9, 4000: 0}), trials({2000: 9, 4000: 0}), 4000, 4000)
    assert same == "shared_path", why
