"""python -m bench: the opt-in mitogen_linear arm's figures sit beside linear's, judged by no target."""

from __future__ import annotations

import bench.__main__ as bench_main


def _inputs(mitogen: bool) -> tuple[dict, dict]:
    vr = {k: [1.0] for k in ("verified_s", "ratio", "floor", "readiness", "router_notice", "router_own_start",
                              "worker_notice", "needle", "overhead_s", "overhead_ratio", "rollback", "unchanged_s",
                              "smoke_tries")}
    vr.update(baseline_s=[50.0, 52.0], runs=[])
    sc = {k: [1.0] for k in ("one", "many", "ratio", "cpu_main_one", "cpu_main_many", "cpu_tree_one",
                              "cpu_tree_many")}
    if mitogen:
        vr.update(mitogen_verified_s=[40.0, 39.0], mitogen_overhead_ratio=[0.08, 0.12], mitogen_runs=[])
        sc.update(mitogen_ratio=[1.8], mitogen_cpu_tree_many=[5.5])
    return vr, sc


def test_mitogen_figures_are_reported_against_the_same_baseline_and_judged_by_no_target() -> None:
    result = bench_main.figures(*_inputs(mitogen=True), 20.0, 16)
    targets = bench_main.judge(result["figures"], 16)
    details = result["details"]
    assert details["mitogen_overhead_vs_limit"]["median"] == 0.1
    # Each repetition's mitogen deploy over that repetition's baseline: 40/50 and 39/52.
    assert details["mitogen_ratio_verified_vs_baseline"]["min"] == 0.75
    assert details["mitogen_ratio_verified_vs_baseline"]["max"] == 0.8
    assert details["mitogen_scale_16_vs_1"]["median"] == 1.8
    assert not any(name.startswith("mitogen") for name in targets)


def test_without_mitogen_its_rows_are_empty_not_zero() -> None:
    details = bench_main.figures(*_inputs(mitogen=False), 20.0, 16)["details"]
    assert details["mitogen_overhead_vs_limit"] == {"median": None, "min": None, "max": None, "spread": None, "n": 0}

