"""The isolation experiment's operating characteristics meet its design points (bench/isolation_oc.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import isolation_oc


def test_the_seeds_amplification_reads_pd_amplified_at_least_nine_times_in_ten() -> None:
    probs = isolation_oc.soak_oc(0.18, 0.02)
    assert probs["pd_amplified"] >= 0.9 and probs["shared_path"] < 1e-6, probs
    assert sum(probs.values()) > 1 - 1e-6


def test_pd_only_corruption_reads_pd_specific_and_a_side_that_cannot_measure_inconclusive() -> None:
    assert isolation_oc.soak_oc(0.18, 0.0)["pd_specific"] >= 0.99
    assert isolation_oc.soak_oc(0.18, 0.02, n_pd=0)["inconclusive"] == 1.0


def test_the_recall_limit_reads_shared_path_and_pd_only_truncation_pd_specific() -> None:
    topk512 = isolation_oc.reach(512)
    shared = isolation_oc.needle_oc(topk512, topk512, isolation_oc.SEED_000_GRID, 5500, runs=40, seed=1)
    assert shared["shared_path"] >= 0.95, shared
    truncated = isolation_oc.needle_oc(isolation_oc.window_only, isolation_oc.reach(1024), isolation_oc.DEFAULT_GRID,
                                       5500, runs=20, seed=1)
    assert truncated["pd_specific"] >= 0.95, truncated


def test_pd_specific_is_never_stated_without_a_between_side_rejection() -> None:
    # Every count pair near the acceptable rate: where the verdict is pd_specific, Fisher rejected.
    from dsv4deploy.isolate.compare import decide_rates

    for kp in range(25):
        for kc in range(6):
            r = decide_rates(kp, 600, kc, 600, 0.005)
            assert r.verdict != "pd_specific" or r.pd_worse_p < 0.05, (kp, kc)
