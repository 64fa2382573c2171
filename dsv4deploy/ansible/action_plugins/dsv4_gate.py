"""Action plugin: run one verification gate from the controller and return its evidence."""

from __future__ import annotations

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
    returns C(gate) (name, status, seconds, summary, evidence) and C(passed), so the playbook decides
    on every host at once. Settings come from the variables named in GateSettings; an unknown
    variable with a gate's prefix (needle_, soak_, ...) fails the task naming it.
options:
  name: {description: Gate to run, required: true}
  plan: {description: The dsv4_plan fact, required: true}
  logs: {description: Service name to log text since this start (config gate)}
  api_key: {description: API key for the servers (never logged)}
  settings: {description: Overrides of the settings for this task}
  probes: {description: "What dsv4_worker_probe found on each host ({host: result}): worker checks run there"}
"""

display = Display()


class ActionModule(ActionBase):
    """One gate per task; run it with run_once."""

    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = plain(self._task.args)
        name = args.get("name")
        if name not in GATES:
            result.update(failed=True, msg=f"dsv4_gate: name must be one of {', '.join(GATES)}, got {name!r}")
            return result
        try:
            settings = settings_from_vars(task_vars, lambda v: plain(self._templar.template(v)), args.get("settings"),
                                          plan_index_topk(args["plan"]))
        except GateSettingsError as exc:
            result.update(failed=True, msg="gate settings: " + "; ".join(exc.problems))
            return result

        def progress(done: int, total: int, note: str) -> None:
            display.display(f"  [{name}] {done}/{total} {note}" if total else f"  [{name}] {note}")

        gate = run_gate(name, args["plan"], settings, logs=args.get("logs"), api_key=args.get("api_key") or None,
                        progress=progress, probes=args.get("probes") or {})
        data = gate.model_dump(mode="json")
        display.display(f"  gate {name}: {data['status']} in {data['seconds']:.1f} s: {data['summary']}")
        result.update(changed=False, gate=data, passed=gate.passed)
        return result
