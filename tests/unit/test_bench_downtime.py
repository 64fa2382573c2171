"""python -m bench: the rollouts' downtime figures and their targets (0 failed for blue_green
and rolling), judged on the worst repetition."""

from __future__ import annotations

import bench.__main__ as bench_main


def _rollout(failed: int, gap: float) -> dict:
    return {"failed": failed, "sent": 500, "longest_gap_s": gap, "rollout_s": 40.0}


def _result(ro: dict) -> dict:
    vr = {k: [1.0] for k in ("verified_s", "baseline_s", "ratio", "floor", "readiness", "router_notice",
                              "router_own_start", "worker_notice", "needle", "overhead_s", "overhead_ratio",
                              "rollback", "unchanged_s", "smoke_tries")}
    vr["runs"] = []
    sc = {k: [1.0] for k in ("one", "many", "ratio", "cpu_main_one", "cpu_main_many", "cpu_tree_one",
                              "cpu_tree_many")}
    result = bench_main.figures(vr, sc, 20.0, 16, ro)
    result["targets"] = bench_main.judge(result["figures"], 16)
    return result


def test_one_failed_request_in_any_repetition_misses_the_target() -> None:
    result = _result({"recreate": [_rollout(300, 7.5)], "blue_green": [_rollout(0, 0.3), _rollout(1, 2.0)],
                      "rolling": [_rollout(0, 0.2), _rollout(0, 0.4)]})
    assert result["targets"]["downtime_blue_green_failed"] == {"target": "<= 0", "met": False}
    assert result["targets"]["downtime_rolling_failed"]["met"] is True
    # recreate's outage is reported, not judged: it is the default where nothing fits beside the release.
    assert "downtime_recreate_failed" not in result["targets"]
    assert result["details"]["downtime_recreate_failed"]["median"] == 300
    assert result["details"]["downtime_rolling_longest_gap_s"]["max"] == 0.4


def test_the_table_shows_each_strategys_figures_and_verdict() -> None:
    result = _result({"recreate": [_rollout(12, 7.5)], "blue_green": [_rollout(0, 0.3)], "rolling": [_rollout(0, 0.2)]})
    result.update(mode="quick", when="now", settings={"repeat": 1, "load_s": 5, "scale_hosts": 4, "scale_load_s": 5},
                  machine={"cpus": 2, "loadavg_before": [0], "loadavg_after": [0]})
    table = bench_main.markdown(result)
    assert "| downtime_blue_green_failed | 0 | 0 | 0 |" in table and "| <= 0 | yes |" in table
    assert "| downtime_recreate_longest_gap_s | 7.5 |" in table
    assert "| downtime_rolling_sent | 500 |" in table  # a count in full, not 5e+02


def test_a_strategy_not_measured_is_not_met() -> None:
    result = _result({"recreate": [_rollout(12, 7.5)]})
    assert result["targets"]["downtime_blue_green_failed"]["met"] is False
    assert "downtime_blue_green_failed" not in result["details"]
