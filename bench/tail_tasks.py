"""Where a recreate deploy spends its time outside the load and the gates: the start, the tasks after the
last gate, and the count of small controller tasks, per deploy (the #22 tail's before/after figures).

    PYTHONPATH=. .venv/bin/python -m bench.tail_tasks [--repeat 2] [--load 5] [--label X] [--out rows.jsonl]

Like bench.recreate (one private simulated host, release A primed off the clock), each repetition deploys
a new release and records one JSON row: the first task's start after the command's, the seconds from the
last gate's verdict to the playbook's end, the tasks that ran (not skipped) and the argument validations
among them, the module runs, and the controller's and the whole tree's CPU seconds.
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
from bench.world import Run, bench_host, run_playbook

VALIDATE = "ansible.builtin.validate_argument_spec"


def row(run: Run, label: str) -> dict[str, Any]:
    """The tail figures of one deploy."""
    ran = [t for t in run.tasks if t["status"] != "skipped"]
    starts = [t["start"] for t in run.tasks if t.get("start")]
    gates_end = max((g["end"] for g in run.gates()), default=None)
    end = run.started + run.wall_s
    return {"label": label, "wall_s": round(run.wall_s, 2),
            "first_task_s": round(min(starts) - run.started, 2) if starts else None,
            "after_gates_s": round(end - gates_end, 2) if gates_end else None,
            "tasks_ran": len(ran), "validations": len([t for t in ran if t.get("action") == VALIDATE]),
            "module_runs": metrics.module_runs(run), "controller_cpu_s": round(run.cpu_main_s or 0.0, 2),
            "all_cpu_s": round(run.cpu_tree_s, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tail_tasks", description=__doc__.splitlines()[0])
    for flag, kind, default in (("--repeat", int, 2), ("--load", float, 5.0), ("--label", str, "")):
        parser.add_argument(flag, type=kind, default=default)
    parser.add_argument("--out", type=Path, help="append the rows (JSON lines) here")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dsv4-bench-tail-"))
    host = bench_host(root, args.load)
    try:
        # Release A off the clock, then one new release per repetition (a distinct warmup makes it distinct).
        runs = [run_playbook(host, "deploy.yml", "-e", f"sim_faults=warmup_s={0.001 * n:.3f}")
                for n in range(1, args.repeat + 2)]
    finally:
        host.teardown()
        shutil.rmtree(root, ignore_errors=True)
    failed = [r for r in runs if r.rc != 0]
    if failed:
        raise RuntimeError(f"a deploy failed (rc {failed[0].rc}):\n{failed[0].stdout[-3000:]}")
    rows = [row(r, args.label) for r in runs[1:]]
    lines = [json.dumps(r) for r in rows]
    print("\n".join(lines))
    if args.out:
        with args.out.open("a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
    for key in ("first_task_s", "after_gates_s", "tasks_ran", "module_runs", "controller_cpu_s", "all_cpu_s"):
        values = [r[key] for r in rows if r[key] is not None]
        print(f"median {key}: {statistics.median(values) if values else None}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
