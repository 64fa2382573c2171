"""A gated recreate deploy on one private simulated host, timed: the before/after figures of a change.

    .venv/bin/python -m bench.recreate [--repeat 3] [--load 5] [--label after] [--out rows.jsonl]

Release A is primed off the clock; each repetition then deploys a new release and records one JSON row:
wall time, overhead and its ratio to the limit (bench/metrics.py), module runs, the controller's CPU
seconds, the readiness latency (last worker ready line -> the readiness verdict) and, when the router
was spawned after the workers' ready lines, its two parts. Run it from two checkouts (the same venv
works: PYTHONPATH picks the tree's dsv4deploy) to compare them; it prints the rows and their medians.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import metrics
from bench.world import Run, deploy_series
from tests.integration.simhost import SimHost


def one(run: Run, host: SimHost, load_s: float, label: str) -> dict[str, Any]:
    """One deploy's row."""
    spent, ratio = metrics.overhead(run, load_s)
    parts = metrics.router_start(run, host.last_spawn("sglang-dsv4-router"))
    return {"label": label, "wall_s": round(run.wall_s, 2), "overhead_s": round(spent, 2),
            "overhead_vs_limit": round(ratio, 3), "module_runs": metrics.module_runs(run),
            "controller_cpu_s": round(run.cpu_main_s or 0.0, 2), "all_cpu_s": round(run.cpu_tree_s, 2),
            "readiness_latency_s": _round(metrics.readiness_latency(run)),
            "worker_notice_s": [round(x, 3) for x in metrics.worker_notice_latencies(run)],
            "router_spawn_after_ready_s": _round(parts and parts[0]),
            "router_spawn_to_verdict_s": _round(parts and parts[1])}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main() -> int:
    return deploy_series("python -m bench.recreate", __doc__, one, default_repeat=3, medians=(
        "wall_s", "overhead_vs_limit", "module_runs", "controller_cpu_s", "readiness_latency_s"))


if __name__ == "__main__":
    sys.exit(main())
