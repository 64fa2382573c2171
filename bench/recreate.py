"""A gated recreate deploy on one private simulated host, timed: the before/after figures of a change.

    .venv/bin/python -m bench.recreate [--repeat 3] [--load 5] [--label after] [--out rows.jsonl]

Release A is primed off the clock; each repetition then deploys a new release and records one JSON row:
wall time, overhead and its ratio to the limit (bench/metrics.py), module runs, the controller's CPU
seconds, the readiness latency (last worker ready line -> the readiness verdict) and, when the router
was spawned after the workers' ready lines, its two parts. Run it from two checkouts (the same venv
works: PYTHONPATH picks the tree's dsv4deploy) to compare them; it prints the rows and their medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import metrics
from bench.world import bench_host, run_playbook, worker_logs


def one(host: Any, n: int, load_s: float, label: str) -> dict[str, Any]:
    """Deploy the `n`th distinct release; its row."""
    run = run_playbook(host, "deploy.yml", "-e", f"sim_faults=warmup_s={0.001 * n:.3f}", watch=worker_logs(host))
    if run.rc != 0:
        raise RuntimeError(f"deploy {n} failed (rc {run.rc}):\n{run.stdout[-3000:]}")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recreate", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--load", type=float, default=5.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, help="append the rows (JSON lines) here")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dsv4-bench-recreate-"))
    host = bench_host(root, args.load)
    rows = []
    try:
        prime = run_playbook(host, "deploy.yml", "-e", "sim_faults=warmup_s=0.001")
        if prime.rc != 0:
            raise RuntimeError(prime.stdout[-3000:])
        for i in range(args.repeat):
            rows.append(one(host, i + 2, args.load, args.label))
            print(json.dumps(rows[-1]), flush=True)
            if args.out:
                with args.out.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rows[-1]) + "\n")
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)
    for key in ("wall_s", "overhead_vs_limit", "module_runs", "controller_cpu_s", "readiness_latency_s"):
        values = [r[key] for r in rows if r[key] is not None]
        print(f"median {key}: {statistics.median(values) if values else None}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
