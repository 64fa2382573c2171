"""The isolation experiment's verdicts are a decision procedure: each stated only from tests that rejected."""

from __future__ import annotations

import itertools

import pytest
from scipy.stats import fisher_exact

from dsv4deploy.isolate.compare import (
    combine_suites,
    compare_soak,
    decide_rates,
    fisher_greater,
    ratio_interval,
    sessions_to_show_clean,
)
from dsv4deploy.isolate.needle_compare import compare_needle, holm


def soak(corrupted: int, finished: int) -> dict:
    return {"corrupted_sessions": corrupted, "finished": finished, "design": {"acceptable_rate": 0.005}}


def test_seed_002_pd_corrupts_and_the_combined_server_is_shown_below_the_acceptable_rate() -> None:
    verdict, why, ev = compare_soak(soak(108, 600), soak(0, 600))
    assert verdict == "pd_specific", why
    assert ev["combined_below_p"] < 0.05 and ev["pd_worse_p"] < 1e-30
    assert "combined 0 of 600 sessions corrupted (95% interval 0.0%-0.6%)" in why


def test_zero_of_150_cannot_show_the_combined_side_below_half_a_percent_and_says_how_many_more_would() -> None:
    verdict, why, _ = compare_soak(soak(24, 150), soak(0, 150))
    assert verdict == "inconclusive", why
    assert f"{sessions_to_show_clean() - 150} more clean sessions on the combined side" in why
    assert sessions_to_show_clean() == 598


def test_pd_specific_needs_the_between_side_test_to_reject() -> None:
    # 3 of 600 against 0 of 600: the combined side is shown clean, but Fisher p = 0.125
    verdict, why, ev = compare_soak(soak(3, 600), soak(0, 600))
    assert verdict == "inconclusive" and ev["pd_worse_p"] > 0.05, why


def test_the_seeds_amplification_and_a_threefold_one_read_pd_amplified() -> None:
    assert compare_soak(soak(108, 600), soak(12, 600))[0] == "pd_amplified"
    assert compare_soak(soak(36, 600), soak(12, 600))[0] == "pd_amplified"


def test_shared_path_only_when_the_ratio_interval_is_within_the_margin() -> None:
    verdict, why, ev = compare_soak(soak(60, 600), soak(60, 600))
    assert verdict == "shared_path" and ev["ratio_95"][1] < 2, why
    # both corrupt alike, but 12 against 12 cannot show the ratio below 2: not a verdict from non-rejection
    verdict, why, ev = compare_soak(soak(12, 600), soak(12, 600))
    assert verdict == "inconclusive" and ev["ratio_95"][1] > 2 and "more sessions a side" in why


def test_clean_only_when_both_upper_bounds_are_below_the_acceptable_rate() -> None:
    assert compare_soak(soak(0, 600), soak(0, 600))[0] == "clean"
    verdict, why, _ = compare_soak(soak(0, 150), soak(0, 150))
    assert verdict == "inconclusive" and "598 clean sessions a side" in why
    assert compare_soak(soak(0, 600), soak(9, 600))[0] == "inconclusive"


def test_a_side_with_no_finished_session_is_inconclusive_and_named() -> None:
    verdict, why, _ = compare_soak(soak(0, 0), soak(0, 600))
    assert verdict == "inconclusive" and "no session finished on the PD side" in why


def test_fisher_is_scipys_fisher_exact_and_the_ratio_interval_is_clopper_pearson() -> None:
    for kp, np_, kc, nc in [(100, 600, 12, 600), (0, 600, 0, 600), (3, 150, 0, 150), (5, 10, 7, 12)]:
        expect = fisher_exact([[kp, np_ - kp], [kc, nc - kc]], alternative="greater").pvalue
        assert fisher_greater(kp, np_, kc, nc) == pytest.approx(expect, rel=1e-9)
    low, high = ratio_interval(20, 40, 20, 40)
    assert (low, high) == pytest.approx((0.3380 / 0.6620, 0.6620 / 0.3380), rel=1e-3)


def test_no_count_pair_reads_pd_specific_or_amplified_without_fisher_rejecting() -> None:
    for kp, kc in itertools.product(range(0, 40, 3), range(0, 20, 2)):
        r = decide_rates(kp, 300, kc, 300, 0.005)
        if r.verdict in ("pd_specific", "pd_amplified"):
            assert r.pd_worse_p < 0.05
        if r.verdict == "shared_path":
            assert r.ratio_95 is not None and r.ratio_95[1] < 2


def cells(recall: dict[int, bool], required: int, misses_stop: int = 4, passes_stop: int = 9,
          depths: tuple[float, ...] = (0.3, 0.6)) -> list[dict]:
    """Cells per length and depth as the gate asks them: stopped at 9 recalled or 4 missed."""
    out = []
    for n, ok in recall.items():
        for d in depths:
            asked = passes_stop if ok else misses_stop
            out.append({"context_tokens": n, "depth": d, "outcome": "recalled" if ok else "missed",
                        "asked_trials": asked, "required": n <= required,
                        "trials": [{"trial": t, "code": f"{n}-{d}-{t}", "recalled": ok, "error": None}
                                   for t in range(asked)]})
    return out


def gate(recall: dict[int, bool], required: int, **kw: object) -> dict:
    c = cells(recall, required, **kw)  # type: ignore[arg-type]
    failed = any(x["required"] and x["outcome"] == "missed" for x in c)
    return {"status": "failed" if failed else "passed", "summary": "s", "evidence": {"cells": c}}


def test_pd_only_truncation_is_pd_specific_with_the_models_limit_named_apart() -> None:
    pd = gate({2000: False, 5500: False, 12000: False}, 5500)
    combined = gate({2000: True, 5500: True, 12000: False}, 5500)
    verdict, why, ev = compare_needle(pd, combined)
    assert verdict == "pd_specific", why
    assert "at 2000, 5500 tokens" in why and "the model's limit at 12000 tokens" in why
    assert ev["limits"] == [12000]


def test_misses_beyond_the_requirement_alike_leave_a_clean_verdict_with_the_limit() -> None:
    both = {1000: True, 2000: True, 4000: False, 8000: False}
    verdict, why, _ = compare_needle(gate(both, 2000), gate(both, 2000))
    assert verdict == "clean" and "the model's limit at 4000, 8000 tokens" in why, why


def test_the_recall_limit_within_the_requirement_on_both_sides_is_shared_path() -> None:
    both = {1000: True, 2000: True, 4000: False, 5500: False}
    three = (0.1, 0.5, 0.9)
    verdict, why, ev = compare_needle(gate(both, 5500, depths=three), gate(both, 5500, depths=three))
    assert verdict == "shared_path" and ev["ratio_95"][1] < 2, why
    # one dead cell a side (4 misses each) bounds the ratio only to 0.4-2.5: inconclusive, saying what decides
    few = {1000: True, 5500: False}
    verdict, why, _ = compare_needle(gate(few, 5500, depths=(0.5,)), gate(few, 5500, depths=(0.5,)))
    assert verdict == "inconclusive" and "more required cells" in why


def test_one_cell_a_length_cannot_show_pd_worse_after_the_correction() -> None:
    pd = gate({2000: False, 2200: False}, 2200, depths=(0.5,))
    combined = gate({2000: True, 2200: True}, 2200, depths=(0.5,))
    verdict, why, _ = compare_needle(pd, combined)
    assert verdict == "inconclusive" and "more depths per length" in why, why


def test_pd_worse_where_the_combined_side_also_fails_is_pd_amplified() -> None:
    pd = gate({2000: False, 4000: False}, 4000)
    combined = gate({2000: True, 4000: False}, 4000)
    assert compare_needle(pd, combined)[0] == "pd_amplified"


def test_a_needle_side_that_could_not_measure_is_inconclusive() -> None:
    fine = gate({2000: True}, 2000)
    broken = {"status": "error", "summary": "HTTP 500 on every cell", "evidence": {"cells": []}}
    verdict, why, _ = compare_needle(broken, fine)
    assert verdict == "inconclusive" and "PD side could not measure" in why and "HTTP 500" in why
    nothing = {"status": "failed", "summary": "no cell asked", "evidence": {"cells": [
        {"context_tokens": 2000, "depth": 0.5, "outcome": "error", "asked_trials": 0, "trials": []}]}}
    assert compare_needle(fine, nothing)[0] == "inconclusive"


def test_holm_rejects_step_down() -> None:
    assert holm({1: 0.01, 2: 0.02, 3: 0.04}) == {1, 2, 3}  # 0.01 < 0.05/3, 0.02 < 0.05/2, 0.04 < 0.05
    assert holm({1: 0.01, 2: 0.03, 3: 0.04}) == {1}  # 0.03 >= 0.05/2 stops
    assert holm({1: 0.02, 2: 0.001}) == {1, 2}
    assert holm({1: 0.03, 2: 0.04}) == set()


def test_suites_judged_together_name_the_pd_finding_first() -> None:
    verdict, why = combine_suites([("clean", "needle: fine"), ("pd_specific", "soak: PD corrupts")])
    assert verdict == "pd_specific" and why == "needle: fine; soak: PD corrupts"
    assert combine_suites([("clean", "a"), ("inconclusive", "b")])[0] == "inconclusive"


def occupancy(decode: float) -> list[dict]:
    return [{"name": "d", "role": "decode", "mean_running": decode},
            {"name": "p", "role": "prefill", "mean_running": 1}]


def test_sides_whose_decode_occupancy_differs_beyond_the_factor_are_confounded_by_load() -> None:
    pd = {**soak(108, 600), "occupancy": occupancy(30.0)}
    combined = {**soak(12, 600), "occupancy": [{"name": "c", "role": "combined", "mean_running": 12.0}]}
    verdict, why, ev = compare_soak(pd, combined)
    assert verdict == "pd_amplified" and "CONFOUNDED BY LOAD" in why
    assert "PD's decode ran 30 requests" in why and "combined server 12" in why
    assert ev["confounded_by_load"] is True
    combined["occupancy"][0]["mean_running"] = 25.0
    _, why, ev = compare_soak(pd, combined)
    assert "load comparable" in why and ev["confounded_by_load"] is False
    _, why, ev = compare_soak(soak(108, 600), combined)
    assert "occupancy not measured" in why and ev["confounded_by_load"] is None
