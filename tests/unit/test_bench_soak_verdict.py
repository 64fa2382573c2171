"""python -m bench: the soak's time to a verdict, before and after the sequential test, judged by its targets."""

from __future__ import annotations

import bench.__main__ as bench_main
from tests.unit.test_bench_mitogen import _inputs


def test_the_soaks_time_to_a_verdict_is_reported_before_and_after_and_judged() -> None:
    vr, sc = _inputs(mitogen=False)
    sv = {"clean_before": [20.0], "clean_after": [15.0], "faulty_before": [20.0], "faulty_after": [4.0],
          "wrong": [0.0, 0.0, 0.0, 0.0]}
    result = bench_main.figures(vr, sc, 20.0, 16, sv=sv)
    targets = bench_main.judge(result["figures"], 16)
    assert result["details"]["soak_verdict_faulty_after_vs_before"]["median"] == 0.2
    assert targets["soak_verdict_clean_after_vs_before"] == {"target": "<= 1", "met": True}
    assert targets["soak_verdict_wrong"]["met"] is True
    # Without the soak's figures the targets are not met: a figure not measured is never a pass.
    assert bench_main.judge(bench_main.figures(vr, sc, 20.0, 16)["figures"], 16)["soak_verdict_wrong"]["met"] is False
