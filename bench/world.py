"""Simulated hosts for the benchmarks and the records of playbook runs against them.

Each host is a private copy of `inventory/local` (tests/integration/simhost.py: own ports, install
root and reports) with the servers' load fixed (`DSV4_SIM_STARTUP_S`) and an 8-cell needle grid.
Playbooks run as a user runs them; an Ansible callback (bench/callbacks) records when each task
started and ended, and a watcher notes when each server logs that it is ready.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.integration.simhost import REPO, VENV_BIN, SimHost, make_sim_host

CALLBACKS = Path(__file__).resolve().parent / "callbacks"
READY_LINE = "The server is fired up and ready to roll!"
# 8 cells, the longest the required 5.5K tokens (index_topk 1024 recalls it; 512 does not).
NEEDLE = {"needle_lengths": [1000, 2000, 4000, 5500], "needle_depths": [0.25, 0.75], "needle_required_tokens": 5500}
WORKERS = ("sglang-dsv4-prefill", "sglang-dsv4-decode")


@dataclass
class Run:
    """One playbook run: wall time, exit code, per-task records, the report it wrote."""

    wall_s: float
    rc: int
    started: float  # epoch seconds when the command started
    tasks: list[dict[str, Any]]
    stdout: str
    report: dict[str, Any] | None = None
    ready_at: dict[str, float] = field(default_factory=dict)  # worker -> epoch of its ready line
    cpu_main_s: float | None = None  # CPU seconds of ansible-playbook's main process (the callback's record)
    cpu_tree_s: float = 0.0  # CPU seconds of ansible-playbook and everything it ran and reaped (modules too)

    def gates(self) -> list[dict[str, Any]]:
        """Gate task records in order (name, passed, seconds, start, end). Where one host waits, the readiness
        wait's own task judges readiness (dsv4_worker_probe verdict) and its result is hidden (no_log): that
        task's record stands for the gate, with the report's readiness entry (in order) for its outcome."""
        reported = iter([g for g in (self.report or {}).get("gates", []) if g.get("name") == "readiness"])
        out: list[dict[str, Any]] = []
        for i, t in enumerate(self.tasks):
            if t.get("gate"):
                if t["gate"] == "readiness":
                    next(reported, None)
                out.append(t)
                continue
            if not (str(t.get("action", "")).endswith("dsv4_worker_probe") and t["status"] == "ok"
                    and "readiness" in t.get("task", "").partition(":")[2]):
                continue
            after = next((n for n in self.tasks[i + 1:] if n.get("gate")
                          or str(n.get("action", "")).endswith("dsv4_worker_probe")), None)
            if after is not None and after.get("gate") == "readiness":
                continue  # a gate task of its own judged it
            gate = next(reported, None)
            if gate is not None:
                out.append({**t, "gate": "readiness", "passed": gate.get("status") != "failed",
                            "seconds": gate.get("seconds")})
        return out

    def gate_seconds(self, name: str) -> float:
        """Seconds of the report's gate `name` (promote phase)."""
        for gate in (self.report or {}).get("gates", []):
            if gate["name"] == name and gate.get("phase", "deploy") != "rollback":
                return float(gate["seconds"])
        return 0.0

    def gate_evidence(self, name: str) -> dict[str, Any]:
        for gate in (self.report or {}).get("gates", []):
            if gate["name"] == name:
                return gate.get("evidence") or {}
        return {}

    def task_durations(self) -> list[float]:
        """Seconds of every task that ran (not skipped), gates excluded (their time is their work)."""
        return [t["end"] - t["start"] for t in self.tasks
                if t.get("start") and t["status"] != "skipped" and not t.get("gate")]


def bench_host(root: Path, load_s: float, extra: dict[str, Any] | None = None) -> SimHost:
    """A private simulated host whose servers take `load_s` to load and ready, with the bench grid."""
    host = make_sim_host(root)
    group = host.inventory / "group_vars" / "all"
    sim = yaml.safe_load((group / "sim.yml").read_text())
    env = {**sim["server_env"], "DSV4_SIM_STARTUP_S": f"{load_s:g}"}
    (group / "zz_bench.yml").write_text(yaml.safe_dump({"server_env": env, **NEEDLE, **(extra or {})}))
    return host


class ReadyWatch:
    """Notes the moment each log file gains the server's ready line (polled every 10 ms)."""

    def __init__(self, logs: dict[str, Path]) -> None:
        self.logs = logs
        self.offsets = {n: (p.stat().st_size if p.exists() else 0) for n, p in logs.items()}
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            for name, path in self.logs.items():
                if name in self.seen or not path.exists():
                    continue
                size = path.stat().st_size
                if size < self.offsets[name]:
                    self.offsets[name] = 0  # rotated or recreated
                with path.open(encoding="utf-8", errors="replace") as fh:
                    fh.seek(self.offsets[name])
                    if READY_LINE in fh.read():
                        self.seen[name] = time.time()
            time.sleep(0.01)


def worker_logs(host: SimHost, names: tuple[str, ...] = WORKERS) -> dict[str, Path]:
    return {n: host.install_root / "logs" / f"{n}.log" for n in names}


def run_playbook(host: SimHost, name: str, *args: str, watch: dict[str, Path] | None = None,
                 timeout: float = 1200, inventory: Path | None = None, env: dict[str, str] | None = None) -> Run:
    """Run playbooks/`name` against `host` with the timing callback; optionally watch logs for ready lines;
    `env` adds Ansible settings (e.g. another strategy)."""
    timing = host.root / f"timing-{time.monotonic_ns()}.jsonl"
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS), "ANSIBLE_CALLBACKS_ENABLED": "dsv4_timing",
           "DSV4_BENCH_TIMING": str(timing), **(env or {})}
    cmd = [str(VENV_BIN / "ansible-playbook"), f"playbooks/{name}", "-i", str(inventory or host.inventory),
           "-e", f"dsv4_report_dir={host.reports}", *args]
    watcher = ReadyWatch(watch or {})
    with watcher:
        started, t0, cpu0 = time.time(), time.monotonic(), _children_cpu()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
        wall, cpu_tree = time.monotonic() - t0, _children_cpu() - cpu0
    records = [json.loads(line) for line in timing.read_text().splitlines()] if timing.exists() else []
    tasks = [r for r in records if r["event"] == "task"]
    cpu_main = next((r.get("cpu_main_s") for r in records if r["event"] == "playbook_end"), None)
    latest = host.reports / "latest" / "report.json"
    report = json.loads(latest.read_text()) if latest.exists() and latest.stat().st_mtime >= started else None
    return Run(wall, proc.returncode, started, tasks, proc.stdout + proc.stderr, report, dict(watcher.seen),
               cpu_main, cpu_tree)


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's reaped descendants so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def deploy_series(prog: str, doc: str, row: Callable[[Run, SimHost, float, str], dict[str, Any]],
                  medians: tuple[str, ...], default_repeat: int = 2) -> int:
    """The command line of a before/after bench (`--repeat`, `--load`, `--label`, `--out`): one private simulated
    host, release A primed off the clock, then one new release per repetition; prints each deploy's `row` as a
    JSON line (appended to `--out` too) and the medians of the keys in `medians`."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=default_repeat)
    parser.add_argument("--load", type=float, default=5.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, help="append the rows (JSON lines) here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dsv4-bench-series-"))
    host = bench_host(root, args.load)
    rows = []
    try:
        # A distinct warmup makes each deploy a new release.
        for n in range(1, args.repeat + 2):
            run = run_playbook(host, "deploy.yml", "-e", f"sim_faults=warmup_s={0.001 * n:.3f}",
                               watch=worker_logs(host) if n > 1 else None)
            if run.rc != 0:
                raise RuntimeError(f"deploy {n} failed (rc {run.rc}):\n{run.stdout[-3000:]}")
            if n == 1:
                continue  # release A, off the clock
            rows.append(row(run, host, args.load, args.label))
            print(json.dumps(rows[-1]), flush=True)
            if args.out:
                with args.out.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(rows[-1]) + "\n")
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)
    for key in medians:
        values = [r[key] for r in rows if r.get(key) is not None]
        print(f"median {key}: {statistics.median(values) if values else None}")
    return 0
