"""The controller's time between the gates, timed on recreate deploys: what the gate chain removes.

    PYTHONPATH=. .venv/bin/python -m bench.gate_chain [--repeat 2] [--load 5] [--label after] [--out rows.jsonl]

Per deploy (one private simulated host, release A primed off the clock, as bench.recreate does):
`between_gates_s`, from the readiness gate's verdict to the last gate's, less the gates' own work (each
group of gates run together counted by its slowest); `ready_to_next_gate_s`, from the readiness verdict
to the next gate task's start; how many tasks started in between (skipped ones too). Less sensitive to a loaded
machine than the whole deploy's wall: only the orchestration between the gates is counted.
"""

from __future__ import annotations

import sys
from itertools import groupby
from typing import Any

from bench.world import Run, deploy_series
from tests.integration.simhost import SimHost


def between_gates(run: Run, host: SimHost | None = None, load_s: float = 0.0, label: str = "") -> dict[str, Any]:
    """The figures of one deploy's run (see the module's docstring)."""
    tasks = [t for t in run.tasks if t.get("start")]
    gates = [t for t in tasks if t.get("gate")]
    ready = next(t for t in gates if t["gate"] == "readiness")
    later = [t for t in gates if t["start"] >= ready["end"]]
    # One record per gate with its task's start and end: a task's records are its work.
    work = sum(_task_work(list(records)) for _, records in groupby(later, key=lambda t: (t["task"], t["start"])))
    end = max(t["end"] for t in later)
    last_start = max(t["start"] for t in later)
    # Every task between the readiness verdict and the last gate task's start (skipped ones cost too).
    between = {(t["task"], t["start"]) for t in tasks if ready["end"] <= t["start"] < last_start}
    return {"label": label, "between_gates_s": round(end - ready["end"] - work, 3),
            "ready_to_next_gate_s": round(min(t["start"] for t in later) - ready["end"], 3),
            "tasks_between": len(between)}


# Gates run together in the default list (dsv4_gates_names): their work is the slowest of them.
TOGETHER = ({"config", "smoke"}, {"needle", "soak"})


def _task_work(records: list[dict[str, Any]]) -> float:
    """A gate task's work: its gates' seconds, those run together counted by the slowest."""
    seconds = {r["gate"]: float(r.get("seconds") or 0.0) for r in records}
    work = 0.0
    for group in TOGETHER:
        inside = [s for g, s in seconds.items() if g in group]
        work += max(inside, default=0.0)
    return work + sum(s for g, s in seconds.items() if not any(g in grp for grp in TOGETHER))


def main() -> int:
    return deploy_series("python -m bench.gate_chain", __doc__, between_gates,
                         medians=("between_gates_s", "ready_to_next_gate_s", "tasks_between"))


if __name__ == "__main__":
    sys.exit(main())
