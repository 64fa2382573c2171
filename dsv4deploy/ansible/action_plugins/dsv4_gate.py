"""Action plugin: run verification gates from the controller and return their evidence."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from dsv4deploy.gate_runner import GATES, GateSettingsError, plan_index_topk, run_gate, settings_from_vars
from dsv4deploy.inventory import plain

DOCUMENTATION = r"""
action: dsv4_gate
short_description: Run a dsv4deploy gate (readiness, config, smoke, needle, soak) against the deployed servers
description:
  - Calls dsv4deploy.gates on the controller. The task itself never fails for a failing server: it
    returns C(gates) (per gate: name, status, seconds, summary, evidence), C(gate) (the first failed
    one, else the first) and C(passed), so the playbook decides on every host at once. Several gates
    named together (independent ones, see the dsv4_gate_groups filter) run at the same time.
  - Settings come from the variables named in GateSettings; an unknown variable with a gate's
    prefix (needle_, soak_, ...) fails the task naming it.
options:
  name: {description: "Gate to run, or a list of gates to run at the same time", required: true}
  plan: {description: The dsv4_plan fact, required: true}
  logs: {description: Service name to log text since this start (config gate)}
  api_key: {description: API key for the servers (never logged)}
  settings: {description: Overrides of the settings for this task}
  probes: {description: "What dsv4_worker_probe found on each host ({host: result}): worker checks run there"}
"""

display = Display()


class ActionModule(ActionBase):
    """One gate, or several independent ones at the same time (a list), per task; run it with run_once."""

    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = plain(self._task.args)
        names = args.get("name")
        names = names if isinstance(names, list) else [names]
        bad = [n for n in names if n not in GATES]
        if bad or not names:
            result.update(failed=True, msg=f"dsv4_gate: name must be one of {', '.join(GATES)} (or a list of them), "
                                           f"got {args.get('name')!r}")
            return result
        try:
            settings = settings_from_vars(task_vars, lambda v: plain(self._templar.template(v)), args.get("settings"),
                                          plan_index_topk(args["plan"]))
        except GateSettingsError as exc:
            result.update(failed=True, msg="gate settings: " + "; ".join(exc.problems))
            return result

        def run_one(name: str) -> dict[str, Any]:
            def progress(done: int, total: int, note: str) -> None:
                display.display(f"  [{name}] {done}/{total} {note}" if total else f"  [{name}] {note}")

            gate = run_gate(name, args["plan"], settings, logs=args.get("logs"), api_key=args.get("api_key") or None,
                            progress=progress, probes=args.get("probes") or {})
            data = gate.model_dump(mode="json")
            display.display(f"  gate {name}: {data['status']} in {data['seconds']:.1f} s: {data['summary']}")
            return data

        # Independent gates (the playbook groups them: dsv4_gate_groups) run at the same time.
        with ThreadPoolExecutor(len(names)) as pool:
            gates = list(pool.map(run_one, names))
        failed = [g for g in gates if g["status"] == "failed"]
        result.update(changed=False, gates=gates, gate=(failed or gates)[0], passed=not failed)
        return result
