"""The benchmark's figures from run records: readiness, needle, rollback, overhead, summaries."""

from __future__ import annotations

from bench import metrics
from bench.world import Run


def _gate(name: str, end: float, seconds: float, passed: bool = True) -> dict:
    return {"event": "task", "task": f"Gate: {name}", "action": "dsv4_run_gates", "status": "ok", "host": "local",
            "start": end - seconds - 0.05, "end": end, "gate": name, "passed": passed, "seconds": seconds}


def _run(tasks: list[dict], report: dict | None = None, ready_at: dict | None = None, wall: float = 40.0) -> Run:
    return Run(wall_s=wall, rc=0, started=0.0, tasks=tasks, stdout="", report=report, ready_at=ready_at or {})


def test_readiness_latency_is_last_ready_line_to_the_gate_verdict() -> None:
    run = _run([_gate("readiness", end=121.0, seconds=18.0)], ready_at={"p": 119.5, "d": 120.6})
    assert abs(metrics.readiness_latency(run) - 0.4) < 1e-9


def _probe(end: float, names: str = "readiness, config") -> dict:
    return {"event": "task", "task": f"dsv4_gates : Host side of the gates: {names}", "action": "dsv4_worker_probe",
            "status": "ok", "host": "local", "start": end - 20.0, "end": end}


def test_readiness_judged_by_the_wait_counts_its_task_as_the_gate() -> None:
    # One host waits: the wait's task (no_log) gave the verdict; the report says how it went, in order.
    report = {"gates": [{"name": "readiness", "status": "passed", "seconds": 0.1},
                        {"name": "config", "status": "failed", "seconds": 0.2},
                        {"name": "readiness", "status": "passed", "seconds": 0.1},
                        {"name": "smoke", "status": "passed", "seconds": 1.0}]}
    tasks = [_probe(121.0), _gate("config", 122.0, 0.2, passed=False), _probe(150.0, "readiness"),
             _gate("smoke", 151.5, 1.0)]
    run = _run(tasks, report, ready_at={"p": 120.5, "d": 120.8})
    assert [(g["gate"], g["end"], g["passed"]) for g in run.gates()] == [
        ("readiness", 121.0, True), ("config", 122.0, False), ("readiness", 150.0, True), ("smoke", 151.5, True)]
    assert abs(metrics.readiness_latency(run) - 0.2) < 1e-9
    assert metrics.rollback_to_verified(run) == 29.5
    # A gate task of its own after the wait (several hosts waited): that task is the gate, not the wait.
    both = _run([_probe(121.0), _gate("readiness", 121.4, 0.1)], {"gates": report["gates"][:1]}, {"p": 120.5})
    assert [(g["action"], g["end"]) for g in both.gates()] == [("dsv4_run_gates", 121.4)]
    # A wait without readiness (config's checks only) is no gate.
    assert _run([_probe(10.0, "config")], {"gates": []}).gates() == []


def test_worker_notice_uses_the_gate_evidence_time_to_ready() -> None:
    report = {"gates": [{"name": "readiness", "seconds": 10.0, "evidence": {"endpoints": [
        {"check": "p /health", "seconds_to_ready": 8.2}, {"check": "router /readiness", "seconds_to_ready": 9.9}]}}]}
    run = _run([_gate("readiness", end=110.0, seconds=10.0)], report, ready_at={"p": 108.0})
    assert [round(x, 3) for x in metrics.worker_notice_latencies(run)] == [0.2]


def test_needle_ratio_is_grid_over_its_slowest_cell() -> None:
    cells = [{"seconds": 1.0}, {"seconds": 2.0}]
    report = {"gates": [{"name": "needle", "seconds": 3.0, "evidence": {"cells": cells}}]}
    assert metrics.needle_ratio(_run([], report)) == 1.5
    assert metrics.needle_ratio(_run([], {"gates": []})) is None


def test_rollback_runs_from_the_failing_verdict_to_the_restored_smoke() -> None:
    tasks = [_gate("readiness", 10, 5), _gate("needle", 20, 3, passed=False), _gate("readiness", 44, 20),
             _gate("smoke", 45.5, 1)]
    assert metrics.rollback_to_verified(_run(tasks)) == 25.5
    # No failure, or a restored release that never passed smoke: no figure.
    assert metrics.rollback_to_verified(_run(tasks[:1])) is None
    assert metrics.rollback_to_verified(_run(tasks[:3])) is None
    assert metrics.rollback_budget(20) == 25


def test_overhead_takes_out_load_and_the_gates_own_work() -> None:
    report = {"gates": [{"name": "readiness", "seconds": 19.0}, {"name": "config", "seconds": 0.5},
                        {"name": "smoke", "seconds": 0.5}, {"name": "needle", "seconds": 3.0}]}
    spent, ratio = metrics.overhead(_run([], report, wall=30.0), load_s=20.0)
    assert (spent, ratio) == (6.0, 0.25)


def test_task_overhead_leaves_out_gates_and_skipped_tasks() -> None:
    tasks = [{"status": "ok", "start": 1.0, "end": 1.5}, {"status": "skipped", "start": 2.0, "end": 2.1},
             _gate("smoke", 5.0, 1.0)]
    assert metrics.task_overhead([_run(tasks)]) == [0.5]


def test_summary_median_spread_and_empty() -> None:
    assert metrics.summary([1.0, 3.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "spread": 1.0, "n": 3}
    assert metrics.summary([None])["n"] == 0


def test_slowest_tasks_take_each_tasks_slowest_host_and_the_median_over_runs() -> None:
    def task(name: str, host: str, seconds: float, status: str = "ok") -> dict:
        return {"task": name, "host": host, "status": status, "start": 10.0, "end": 10.0 + seconds}

    runs = [_run([task("start", "a", 1.0), task("start", "b", 3.0), task("lock", "a", 0.5),
                  task("skip", "a", 9.0, status="skipped")]),
            _run([task("start", "a", 5.0), task("lock", "a", 0.7)]),
            _run([task("start", "a", 4.0), task("lock", "a", 0.6)])]
    assert metrics.slowest_tasks(runs) == [{"task": "start", "median_s": 4.0}, {"task": "lock", "median_s": 0.6}]


def test_router_start_splits_the_readiness_latency_at_the_routers_spawn() -> None:
    run = _run([_gate("readiness", end=121.0, seconds=18.0)], ready_at={"p": 119.5, "d": 120.2})
    notice, own = metrics.router_start(run, 120.35)
    assert (round(notice, 3), round(own, 3)) == (0.15, 0.65)
    # A router spawned before the workers were ready (started with them) is not split.
    assert metrics.router_start(run, 100.0) is None and metrics.router_start(run, None) is None


def test_module_runs_count_every_host_module_and_no_set_fact_or_skipped_task() -> None:
    tasks = [{"task": "lock", "action": "dsv4_lock", "status": "ok"},
             {"task": "lock", "action": "dsv4_lock", "status": "ok"},  # a second host
             {"task": "facts", "action": "ansible.builtin.set_fact", "status": "ok"},
             {"task": "say", "action": "ansible.builtin.debug", "status": "ok"},
             {"task": "install", "action": "dsv4_host_releases", "status": "skipped"},
             {"task": "gates", "action": "dsv4_run_gates", "status": "failed"}]
    assert metrics.module_runs(_run(tasks)) == 3
