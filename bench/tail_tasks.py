"""Where a recreate deploy spends its time outside the load and the gates: the start, the tasks after the
last gate, and the count of small controller tasks, per deploy (the tail's before/after figures).

    PYTHONPATH=. .venv/bin/python -m bench.tail_tasks [--repeat 2] [--load 5] [--label X] [--out rows.jsonl]

Like bench.recreate (one private simulated host, release A primed off the clock), each repetition deploys
a new release and records one JSON row: the first task's start after the command's, the seconds from the
last gate's verdict to the playbook's end, the tasks that ran (not skipped) and the argument validations
among them, the module runs, and the controller's and the whole tree's CPU seconds.
"""

from __future__ import annotations

import sys
from typing import Any

from bench import metrics
from bench.world import Run, deploy_series
from tests.integration.simhost import SimHost

VALIDATE = "ansible.builtin.validate_argument_spec"


def row(run: Run, host: SimHost, load_s: float, label: str) -> dict[str, Any]:
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


def main() -> int:
    return deploy_series("python -m bench.tail_tasks", __doc__, row, medians=(
        "first_task_s", "after_gates_s", "tasks_ran", "module_runs", "controller_cpu_s", "all_cpu_s"))


if __name__ == "__main__":
    sys.exit(main())
