"""The benchmark's figures, computed from run records (pure functions, unit-tested).

Definitions (every one a ratio or a duration within the same run):
- readiness latency: from the moment the last worker logged its ready line to the readiness gate's
  verdict (PD: the router's own registration retry included); per worker, from its ready line to
  the gate seeing its /health 200.
- needle grid vs slowest cell: the needle gate's wall time over its slowest cell's, both at the
  configured concurrency (a grid that wastes nothing between cells is close to 1).
- rollback: from the failing gate's verdict to the restored release passing its smoke gate; the
  budget is the old release's load time + 5 s.
- overhead: wall time minus the servers' load and the gates' own work (config, smoke, needle; the
  readiness gate only waits for the load), over that limit (load + gates' work).
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.world import Run

LOAD_SLACK_S = 5.0


def summary(values: list[float]) -> dict[str, Any]:
    """Median, min, max and spread ((max - min) / median) of the samples; None for no samples."""
    clean = [float(v) for v in values if v is not None]
    if not clean:
        return {"median": None, "min": None, "max": None, "spread": None, "n": 0}
    median = statistics.median(clean)
    spread = (max(clean) - min(clean)) / median if median else None
    return {"median": round(median, 4), "min": round(min(clean), 4), "max": round(max(clean), 4),
            "spread": None if spread is None else round(spread, 3), "n": len(clean)}


def readiness_latency(run: Run) -> float | None:
    """Last worker ready line -> the first readiness gate's verdict (seconds)."""
    gate = next((g for g in run.gates() if g["gate"] == "readiness"), None)
    if gate is None or not run.ready_at:
        return None
    return gate["end"] - max(run.ready_at.values())


def router_start(run: Run, spawned_at: float | None) -> tuple[float, float] | None:
    """The readiness latency in two parts, given when the router was spawned (epoch): (last worker ready
    line -> router spawned: the deploy noticing the workers; router spawned -> the readiness verdict: the
    router's own start, which registers the healthy workers at its first probe). None without a spawn
    after the workers' ready lines (a router started with its workers)."""
    gate = next((g for g in run.gates() if g["gate"] == "readiness"), None)
    if gate is None or not run.ready_at or spawned_at is None or spawned_at < max(run.ready_at.values()):
        return None
    return spawned_at - max(run.ready_at.values()), gate["end"] - spawned_at


def worker_notice_latencies(run: Run) -> list[float]:
    """Per worker: its ready line -> the readiness gate's poll that saw its /health 200."""
    gate = next((g for g in run.gates() if g["gate"] == "readiness"), None)
    if gate is None:
        return []
    began = gate["end"] - float(gate.get("seconds") or 0.0)
    out = []
    for entry in run.gate_evidence("readiness").get("endpoints", []):
        name = str(entry.get("check", "")).split(" ")[0]
        if name in run.ready_at and entry.get("seconds_to_ready") is not None:
            out.append(began + float(entry["seconds_to_ready"]) - run.ready_at[name])
    return out


def needle_ratio(run: Run) -> float | None:
    """The needle grid's wall time over its slowest cell."""
    cells = run.gate_evidence("needle").get("cells") or []
    slowest = max((float(c.get("seconds") or 0.0) for c in cells), default=0.0)
    grid = run.gate_seconds("needle")
    return grid / slowest if slowest and grid else None


def gates_work_s(run: Run) -> float:
    """Seconds the gates spend on their own work (readiness excluded: it waits for the load)."""
    return sum(run.gate_seconds(name) for name in ("config", "smoke", "needle", "soak"))


def overhead(run: Run, load_s: float) -> tuple[float, float]:
    """(overhead seconds, overhead over the limit = load + gates' work)."""
    limit = load_s + gates_work_s(run)
    spent = run.wall_s - limit
    return spent, spent / limit


def rollback_to_verified(run: Run) -> float | None:
    """The failing gate's verdict -> the restored release's smoke gate passing (seconds)."""
    gates = run.gates()
    failed = next((i for i, g in enumerate(gates) if not g["passed"]), None)
    if failed is None:
        return None
    smoke = next((g for g in gates[failed + 1:] if g["gate"] == "smoke" and g["passed"]), None)
    return None if smoke is None else smoke["end"] - gates[failed]["end"]


def rollback_budget(load_s: float) -> float:
    """What a rollback may take: the old release's load + 5 s."""
    return load_s + LOAD_SLACK_S


def task_overhead(runs: list[Run]) -> list[float]:
    """Every non-gate task's duration across `runs`."""
    return [d for run in runs for d in run.task_durations()]


def slowest_tasks(runs: list[Run], top: int = 15) -> list[dict[str, Any]]:
    """The tasks that took longest (median over the runs, gates included): where a deploy's time goes."""
    by_name: dict[str, list[float]] = {}
    for run in runs:
        seen: dict[str, float] = {}
        for t in run.tasks:
            if t.get("start") and t["status"] != "skipped" and not t.get("gate"):
                # A task of several hosts counts once, with its slowest host (the others wait for it).
                seen[t["task"]] = max(seen.get(t["task"], 0.0), t["end"] - t["start"])
        for name, seconds in seen.items():
            by_name.setdefault(name, []).append(seconds)
    ranked = sorted(((statistics.median(v), k) for k, v in by_name.items()), reverse=True)[:top]
    return [{"task": name, "median_s": round(seconds, 3)} for seconds, name in ranked]


# Tasks that run no module (controller-side actions of ansible-core itself).
NO_MODULE = {"ansible.builtin.set_fact", "set_fact", "ansible.builtin.debug", "debug", "ansible.builtin.include_role",
             "include_role", "ansible.builtin.include_tasks", "include_tasks", "ansible.builtin.meta", "meta",
             "ansible.builtin.assert", "assert", "ansible.builtin.fail", "fail"}


def module_runs(run: Run) -> int:
    """Task runs (per host) that ran a module or a collection action: what each costs ~0.25 s."""
    return len([t for t in run.tasks if t["status"] != "skipped" and t.get("action") not in NO_MODULE])
