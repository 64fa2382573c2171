"""One benchmark command: how fast a gated rollout reaches a verified release, notices readiness,
runs its needle grid, gets back to service after a failure, how its cost grows with hosts, and what
clients see during a recreate, blue_green and rolling rollout (the continuous client: sent, failed,
longest gap between answers), and how long the soak takes to a verdict on a clean and on a faulty
release. Where mitogen is installed, the timed switch and the scale pair run once more under the
opt-in mitogen_linear strategy (docs/mitogen.md): the `mitogen_*` figures, informational.

    .venv/bin/python -m bench            # full: 3 repetitions, 20 s load, 16 hosts (about 20-30 min)
    .venv/bin/python -m bench --quick    # 1 repetition, 5 s load, 4 hosts (a few minutes)

Writes bench/results/latest.json and latest.md (medians, min, max, spread; the targets and whether
each is met). Everything runs on private simulated hosts (own ports, install roots, GPUs) with the
real sglang-router and supervisord; figures are ratios within one run where the machine's speed
would otherwise dominate. Definitions: bench/metrics.py; the baseline: bench/baseline/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import downtime, metrics, soak_verdict_time
from bench.baseline import prepare as baseline
from bench.mitogen_compare import mitogen_env
from bench.scale import install_roots, scale_host
from bench.world import NEEDLE, Run, bench_host, run_playbook, worker_logs

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {
    "ratio_verified_vs_baseline": ("<=", 0.75),
    "readiness_latency_s_median": ("<=", 0.3),
    "needle_grid_vs_slowest_cell": ("<=", 1.5),
    "rollback_to_verified_s": ("<=", "rollback_budget_s"),
    "overhead_vs_limit": ("<=", 0.10),
    "scale_vs_1": ("<=", 2.0),
    # Controller CPU per host must not grow with the host count (10 % slack for noise).
    "controller_cpu_growth_vs_1": ("<=", 1.1),
    # No request fails while blue_green or rolling replaces the serving release.
    "downtime_blue_green_failed": ("<=", 0),
    "downtime_rolling_failed": ("<=", 0),
    # A clean soak verdict at the stated risks takes no longer than the former 50-session
    # soak (after / before, same run), and every soak verdict is the expected one.
    "soak_verdict_clean_after_vs_before": ("<=", 1.0),
    "soak_verdict_wrong": ("<=", 0),
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _check(run: Run, what: str, want_ok: bool = True) -> None:
    if (run.rc == 0) != want_ok:
        tail = "\n".join(run.stdout.splitlines()[-40:])
        raise RuntimeError(f"{what}: unexpected exit code {run.rc}\n{tail}")


def verified_and_rollback(load_s: float, repeat: int) -> dict[str, list[Any]]:
    """Per repetition: A promoted (off the clock), B promoted (ours, timed), B again (unchanged), C
    failing its needle gate and rolled back to B, then the manual baseline switching A -> B."""
    out: dict[str, list[Any]] = {k: [] for k in (
        "verified_s", "baseline_s", "ratio", "floor", "readiness", "router_notice", "router_own_start",
        "worker_notice", "needle", "overhead_s",
        "overhead_ratio", "rollback", "unchanged_s", "runs", "smoke_tries",
        "mitogen_verified_s", "mitogen_overhead_ratio", "mitogen_runs")}
    strategy_env = _mitogen_env()
    root = Path(tempfile.mkdtemp(prefix="dsv4-bench-"))
    host = bench_host(root, load_s)
    try:
        for i in range(repeat):
            # Distinct, harmless settings make A and B new releases in every repetition.
            a = ("-e", f"sim_faults=warmup_s={0.001 * (2 * i + 1):.3f}")
            b = ("-e", f"sim_faults=warmup_s={0.001 * (2 * i + 2):.3f}")
            log(f"rep {i + 1}: promoting A (off the clock)")
            prime = run_playbook(host, "deploy.yml", *a)
            _check(prime, "deploy A")
            log(f"rep {i + 1}: promoting B (timed)")
            ours = run_playbook(host, "deploy.yml", *b, watch=worker_logs(host))
            _check(ours, "deploy B")
            out["runs"].append(ours)
            out["verified_s"].append(ours.wall_s)
            out["readiness"].append(metrics.readiness_latency(ours))
            out["worker_notice"] += metrics.worker_notice_latencies(ours)
            parts = metrics.router_start(ours, host.last_spawn("sglang-dsv4-router"))
            if parts:
                out["router_notice"].append(parts[0])
                out["router_own_start"].append(parts[1])
            out["needle"].append(metrics.needle_ratio(ours))
            spent, ratio = metrics.overhead(ours, load_s)
            out["overhead_s"].append(spent)
            out["overhead_ratio"].append(ratio)
            log(f"rep {i + 1}: B again (unchanged)")
            same = run_playbook(host, "deploy.yml", *b)
            _check(same, "deploy B again")
            out["unchanged_s"].append(same.wall_s)
            if strategy_env:
                # The same switch (a release running -> a new one) under the opt-in mitogen_linear strategy
                # (docs/mitogen.md): what the tool's own cost is there, beside Ansible's linear above.
                log(f"rep {i + 1}: B' under mitogen_linear (timed)")
                m = ("-e", f"sim_faults=warmup_s={0.001 * (2 * i + 2) + 0.0005:.4f}")
                mito = run_playbook(host, "deploy.yml", *m, env=strategy_env)
                _check(mito, "deploy B' (mitogen_linear)")
                out["mitogen_verified_s"].append(mito.wall_s)
                out["mitogen_overhead_ratio"].append(metrics.overhead(mito, load_s)[1])
                out["mitogen_runs"].append(mito)
            log(f"rep {i + 1}: C with index_topk 512 (fails its needle, rolls back to B)")
            failed = run_playbook(host, "deploy.yml", *b, "-e", "index_topk=512")
            _check(failed, "deploy C", want_ok=False)
            out["rollback"].append(metrics.rollback_to_verified(failed))
            log(f"rep {i + 1}: the manual baseline, A -> B")
            out["baseline_s"].append(_baseline(host, root / f"baseline-{i}", prime, ours))
            out["ratio"].append(out["verified_s"][-1] / out["baseline_s"][-1])
            # The best ratio any gated tool could reach: it must wait out the load and do the gates' own work.
            out["floor"].append((load_s + metrics.gates_work_s(ours)) / out["baseline_s"][-1])
            log(f"rep {i + 1}: ours {ours.wall_s:.1f} s, baseline {out['baseline_s'][-1]:.1f} s")
    except BaseException:  # Ctrl-C included: the servers stop either way
        host.teardown()
        log(f"kept {root} for a look (logs, reports)")
        raise
    # Stop first, then remove: the install root holds supervisord's pid file, which teardown ends it by
    # (removing it first left one supervisord running per benchmark run).
    host.teardown()
    shutil.rmtree(root, ignore_errors=True)
    return out


def _mitogen_env() -> dict[str, str] | None:
    """The settings that select mitogen_linear, or None (and a note) where mitogen is not installed."""
    try:
        return mitogen_env()
    except ImportError:
        log("mitogen is not installed: no mitogen_linear figures (pip install 'dsv4deploy[mitogen]')")
        return None


def _baseline(host: Any, work: Path, old: Run, new: Run) -> float:
    """Our services stopped, release A started by hand, then manual.sh on the clock to B."""
    host.supervisorctl("stop", "all")
    # The same gates as ours: the soak too, with the deploy's own settings (none if the deploy ran none).
    baseline.prepare(host, work, new.report["release"], NEEDLE["needle_lengths"], NEEDLE["needle_depths"],
                     soak=new.gate_evidence("soak") or None)
    try:
        baseline.start_release(host, work, old.report["release"])
        seconds, rc, output = baseline.run_manual(work)
        if rc != 0:
            raise RuntimeError(f"the manual baseline did not verify (rc {rc}):\n{output[-3000:]}")
        return seconds
    finally:
        baseline.stop_all(work)


def scaling(hosts: int, load_s: float, repeat: int) -> dict[str, list[float]]:
    """First deploys of 1 and `hosts` simulated hosts, alternating, `repeat` times each."""
    out: dict[str, list[float]] = {"one": [], "many": [], "ratio": [], "cpu_main_one": [], "cpu_main_many": [],
                                   "cpu_tree_one": [], "cpu_tree_many": [], "mitogen_ratio": [],
                                   "mitogen_cpu_tree_many": []}
    strategy_env = _mitogen_env()
    for i in range(repeat):
        walls, runs = {}, {}
        strategies = ("linear", "mitogen_linear") if strategy_env else ("linear",)
        arms = [(n, strategy) for strategy in strategies for n in (1, hosts)]
        for n, strategy in arms:
            root = Path(tempfile.mkdtemp(prefix=f"dsv4-bench-{n}h-"))
            host = scale_host(root, n, load_s)
            log(f"rep {i + 1}: first deploy on {n} host(s), {strategy}")
            try:
                run = run_playbook(host, "deploy.yml", timeout=1800,
                                   env=strategy_env if strategy == "mitogen_linear" else None)
                _check(run, f"deploy on {n} hosts ({strategy})")
                walls[n, strategy], runs[n, strategy] = run.wall_s, run
            finally:
                _teardown_scale(host)
                shutil.rmtree(root, ignore_errors=True)
        if strategy_env:
            out["mitogen_ratio"].append(walls[hosts, "mitogen_linear"] / walls[1, "mitogen_linear"])
            out["mitogen_cpu_tree_many"].append(runs[hosts, "mitogen_linear"].cpu_tree_s / hosts)
        walls = {n: w for (n, strategy), w in walls.items() if strategy == "linear"}
        runs = {n: r for (n, strategy), r in runs.items() if strategy == "linear"}
        out["one"].append(walls[1])
        out["many"].append(walls[hosts])
        out["ratio"].append(walls[hosts] / walls[1])
        # Per host and deploy: the controller's main process (shared by every host on a real fleet) and, as an
        # upper bound, the whole local tree (here the modules run on the controller too).
        for n, key in ((1, "one"), (hosts, "many")):
            out[f"cpu_main_{key}"].append((runs[n].cpu_main_s or 0.0) / n)
            out[f"cpu_tree_{key}"].append(runs[n].cpu_tree_s / n)
    return out


def _teardown_scale(host: Any) -> None:
    try:
        host.playbook("stop.yml", timeout=600)
    finally:
        for root in install_roots(host):
            pidfile = root / "supervisor" / "supervisord.pid"
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)


def rollouts(load_s: float, repeat: int) -> dict[str, list[dict[str, Any]]]:
    """Per strategy and repetition: a rollout A -> B through the deploy playbook under the continuous client."""
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in downtime.STRATEGIES}
    for i in range(repeat):
        for strategy in downtime.STRATEGIES:
            log(f"rep {i + 1}: {strategy} rollout under the continuous client")
            got = downtime.rollout_downtime(strategy, load_s)
            log(f"rep {i + 1}: {strategy}: sent {got['sent']}, failed {got['failed']}, "
                f"longest gap {got['longest_gap_s']:.2f} s, rollout {got['rollout_s']:.1f} s")
            out[strategy].append(got)
    return out


def figures(vr: dict[str, list[Any]], sc: dict[str, list[float]], load_s: float, hosts: int,
            ro: dict[str, list[dict[str, Any]]] | None = None,
            sv: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Flat figures (medians) and their summaries; `sv` the soak's times to a verdict (soak_verdict_time)."""
    s = metrics.summary
    details = {
        "ratio_verified_vs_baseline": s(vr["ratio"]),
        "ratio_floor_load_and_gates_vs_baseline": s(vr["floor"]),
        "verified_release_s": s(vr["verified_s"]),
        "baseline_s": s(vr["baseline_s"]),
        "readiness_latency_s": s(vr["readiness"]),
        "worker_readiness_notice_s": s(vr["worker_notice"]),
        "router_spawn_after_workers_ready_s": s(vr["router_notice"]),
        "router_spawn_to_readiness_verdict_s": s(vr["router_own_start"]),
        "needle_grid_vs_slowest_cell": s(vr["needle"]),
        "rollback_to_verified_s": s(vr["rollback"]),
        "overhead_s": s(vr["overhead_s"]),
        "overhead_vs_limit": s(vr["overhead_ratio"]),
        "unchanged_deploy_s": s(vr["unchanged_s"]),
        "task_overhead_s": s(metrics.task_overhead(vr["runs"])),
        "tasks_per_verified_deploy": s([len([t for t in r.tasks if t["status"] != "skipped"]) for r in vr["runs"]]),
        "module_runs_per_verified_deploy": s([metrics.module_runs(r) for r in vr["runs"]]),
        f"scale_{hosts}_vs_1": s(sc["ratio"]),
        "deploy_1_host_s": s(sc["one"]),
        f"deploy_{hosts}_hosts_s": s(sc["many"]),
        "controller_cpu_s_per_host_1": s(sc["cpu_main_one"]),
        f"controller_cpu_s_per_host_{hosts}": s(sc["cpu_main_many"]),
        f"controller_cpu_growth_{hosts}_vs_1": s([m / o for m, o in zip(sc["cpu_main_many"], sc["cpu_main_one"],
                                                                      strict=True) if o]),
        "all_cpu_s_per_host_1": s(sc["cpu_tree_one"]),
        f"all_cpu_s_per_host_{hosts}": s(sc["cpu_tree_many"]),
        # The opt-in mitogen_linear strategy (docs/mitogen.md), informational: no target of its own.
        "mitogen_verified_release_s": s(vr.get("mitogen_verified_s", [])),
        "mitogen_overhead_vs_limit": s(vr.get("mitogen_overhead_ratio", [])),
        "mitogen_ratio_verified_vs_baseline": s([v / b for v, b in zip(vr.get("mitogen_verified_s", []),
                                                                      vr["baseline_s"], strict=False)]),
        "mitogen_module_runs_per_verified_deploy": s([metrics.module_runs(r) for r in vr.get("mitogen_runs", [])]),
        f"mitogen_scale_{hosts}_vs_1": s(sc.get("mitogen_ratio", [])),
        f"mitogen_all_cpu_s_per_host_{hosts}": s(sc.get("mitogen_cpu_tree_many", [])),
    }
    for strategy, runs in (ro or {}).items():
        for key in ("failed", "sent", "longest_gap_s", "rollout_s"):
            details[f"downtime_{strategy}_{key}"] = s([r[key] for r in runs])
    details.update(soak_verdict_details(sv or {}))
    flat = {
        "ratio_verified_vs_baseline": details["ratio_verified_vs_baseline"]["median"],
        "readiness_latency_s_median": details["readiness_latency_s"]["median"],
        "worker_readiness_notice_s_median": details["worker_readiness_notice_s"]["median"],
        "needle_grid_vs_slowest_cell": details["needle_grid_vs_slowest_cell"]["median"],
        "rollback_to_verified_s": details["rollback_to_verified_s"]["median"],
        "rollback_budget_s": metrics.rollback_budget(load_s),
        "overhead_vs_limit": details["overhead_vs_limit"]["median"],
        f"scale_{hosts}_vs_1": details[f"scale_{hosts}_vs_1"]["median"],
        "task_overhead_s_median": details["task_overhead_s"]["median"],
        f"controller_cpu_growth_{hosts}_vs_1": details[f"controller_cpu_growth_{hosts}_vs_1"]["median"],
    }
    if sv:
        flat["soak_verdict_clean_after_vs_before"] = details["soak_verdict_clean_after_vs_before"]["median"]
        flat["soak_verdict_wrong"] = details["soak_verdict_wrong"]["max"]
    for strategy in ro or {}:
        # The worst repetition, not the median: one failed request is a failure of the strategy.
        flat[f"downtime_{strategy}_failed"] = details[f"downtime_{strategy}_failed"]["max"]
    return {"figures": flat, "details": details, "slowest_tasks": metrics.slowest_tasks(vr["runs"])}


def soak_verdict_details(sv: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """The soak's seconds to a verdict, a clean release's and a faulty one's (the seeds' PD rate, 15 %), under
    the former rule (50 sessions judged at once: before) and the sequential test (after), and their ratios
    per repetition (each pair on the same machine at about the same time)."""
    s = metrics.summary
    out = {f"soak_verdict_{k}_s": s(sv.get(k, [])) for k in ("clean_before", "clean_after", "faulty_before",
                                                               "faulty_after")}
    for kind in ("clean", "faulty"):
        out[f"soak_verdict_{kind}_after_vs_before"] = s([a / b for a, b in zip(
            sv.get(f"{kind}_after", []), sv.get(f"{kind}_before", []), strict=False) if b])
    out["soak_verdict_wrong"] = s(sv.get("wrong", []))
    return out


def judge(flat: dict[str, Any], hosts: int) -> dict[str, dict[str, Any]]:
    """Each target and whether the median meets it."""
    out = {}
    for name, (op, bound) in TARGETS.items():
        key = name.replace("_vs_1", f"_{hosts}_vs_1") if name.endswith("_vs_1") else name
        value = flat.get(key)
        limit = flat[bound] if isinstance(bound, str) else bound
        out[key] = {"target": f"{op} {limit:g}", "met": value is not None and value <= limit}
    return out


def markdown(result: dict[str, Any]) -> str:
    """The results as a Markdown table (figures first, then the details)."""
    rows = ["| figure | median | min | max | spread | n | target | met |", "|---|---:|---:|---:|---:|---:|---|:-:|"]
    for name, d in result["details"].items():
        target = result["targets"].get(name) or result["targets"].get(name + "_median") or {}
        cells = [_fmt(d[k]) for k in ("median", "min", "max", "spread", "n")]
        met = "" if not target else ("yes" if target["met"] else "**no**")
        rows.append(f"| {name} | {' | '.join(cells)} | {target.get('target', '')} | {met} |")
    s = result["settings"]
    head = (f"# dsv4deploy benchmark ({result['mode']}, {result['when']})\n\n"
            f"{s['repeat']} repetition(s), simulated load {s['load_s']:g} s, {s['scale_hosts']} hosts at "
            f"{s['scale_load_s']:g} s load for the scale figure; {result['machine']['cpus']} CPU(s), "
            f"load average {result['machine']['loadavg_before']} before, {result['machine']['loadavg_after']} after.\n"
            f"rollback budget: {result['figures']['rollback_budget_s']:g} s (load + 5 s).\n\n")
    slow = [f"| {t['task']} | {t['median_s']:.2f} |" for t in result.get("slowest_tasks", [])]
    tail = ("\n\nSlowest tasks of the timed deploy (median s; a task's slowest host):\n\n| task | s |\n|---|---:|\n"
            + "\n".join(slow)) if slow else ""
    return head + "\n".join(rows) + tail + "\n"


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # counts (requests sent) in full, not as 1.32e+03
    return "-" if value is None else (f"{value:.3g}" if isinstance(value, float) else str(value))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repetition, 5 s load, 4 hosts")
    parser.add_argument("--repeat", type=int, help="repetitions (default 3, quick 1)")
    parser.add_argument("--load", type=float, help="simulated load in seconds (default 20, quick 5)")
    parser.add_argument("--hosts", type=int, help="hosts for the scale figure (default 16, quick 4)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder (default bench/results)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    load_s = args.load if args.load is not None else (5.0 if args.quick else 20.0)
    hosts = args.hosts or (4 if args.quick else 16)
    scale_load_s = min(load_s, 5.0)
    before = os.getloadavg()
    vr = verified_and_rollback(load_s, repeat)
    sc = scaling(hosts, scale_load_s, repeat)
    ro = rollouts(scale_load_s, repeat)
    log("soak: time to a verdict, a clean and a faulty release, the former rule and the sequential test")
    sv = soak_verdict_time.verdict_times(repeat)
    result: dict[str, Any] = {
        "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": "quick" if args.quick else "full",
        "settings": {"repeat": repeat, "load_s": load_s, "scale_hosts": hosts, "scale_load_s": scale_load_s,
                     **NEEDLE},
        "machine": {"cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in before],
                    "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
        **figures(vr, sc, load_s, hosts, ro, sv),
    }
    result["targets"] = judge(result["figures"], hosts)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (args.out / "latest.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
