"""Action plugin: run a gate's worker checks on the host, for workers the controller cannot reach."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from dsv4deploy.gate_runner import (
    WORKER_GATES,
    GateSettingsError,
    host_checks,
    plan_index_topk,
    settings_from_vars,
)
from dsv4deploy.inventory import plain

DOCUMENTATION = r"""
action: dsv4_worker_probe
short_description: Run a gate's worker checks (readiness /health, config /server_info) on each worker's host
description:
  - Runs on every host (not run_once), before the gate itself (dsv4_gate, run_once on the controller).
    For the workers of this host bound to an address the controller cannot count on reaching (a
    loopback or other address than the one Ansible reaches the host at), it runs the module of the
    same name on the host: one module run per host and gate, whatever the number of tries.
  - Hosts reached through the local connection, and workers the controller reaches, are left to the
    gate; nothing runs on the host then.
  - Returns C(probe) (local, seconds, workers) for dsv4_gate's I(probes). Never fails for a failing
    server; a probe that cannot run is reported per worker as unreachable, with the reason.
options:
  name: {description: Gate being run, required: true}
  plan: {description: The plan (dsv4_plan or a restored release's targets), required: true}
  settings: {description: Overrides of the gate settings for this task}
"""

display = Display()


class ActionModule(ActionBase):
    """One task for all hosts; each host checks its own workers."""

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = plain(self._task.args)
        name, plan = args.get("name"), args["plan"]
        host = task_vars["inventory_hostname"]
        local = self._connection.transport == "local"
        probe: dict[str, Any] = {"local": local, "seconds": 0.0, "workers": {}}
        checks = host_checks(plan, host, local) if name in WORKER_GATES else []
        if not checks:
            result.update(changed=False, probe=probe)
            return result
        try:
            settings = settings_from_vars(task_vars, lambda v: plain(self._templar.template(v)), args.get("settings"),
                                          plan_index_topk(plan))
        except GateSettingsError:
            # dsv4_gate, next, refuses the same settings naming each problem; nothing to run here.
            result.update(changed=False, probe=probe)
            return result
        module_args = {
            "checks": [{"name": w["name"], "url": w["url"]} for w in checks],
            "mode": name,
            "deadline_s": settings.readiness_deadline_s,
        }
        key_file = next((w.get("api_key_file") for w in checks if w.get("api_key_file")), None)
        if key_file:
            module_args["api_key_file"] = key_file
        display.display(f"  [{name}] on {host}: {', '.join(w['name'] for w in checks)} "
                        f"(listening where only {host} reaches them)")
        found = self._execute_module(module_name="dsv4_worker_probe", module_args=module_args, task_vars=task_vars)
        if found.get("failed"):
            # The probe itself could not run (no python3, key file unreadable, ...): the gate says so.
            why = " ".join(str(found.get("msg") or found.get("module_stderr") or "failed").split())[:500]
            probe["workers"] = {w["name"]: {"url": w["url"], "unreachable": f"the check on {host} could not run: {why}"}
                                for w in checks}
        else:
            probe["workers"] = found.get("workers") or {}
            probe["seconds"] = float(found.get("seconds") or 0.0)
        result.update(changed=False, probe=probe)
        return result
