"""Action plugin: run a gate's worker checks on the host, for workers the controller cannot reach.

Documented in modules/dsv4_worker_probe.py (ansible-doc dsv4.deploy.dsv4_worker_probe); ARGUMENT_SPEC
follows it. The check itself is the module dsv4_worker_check, of the same collection (or library).
"""

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

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "plan": {"type": "dict", "required": True},
    "settings": {"type": "dict", "default": {}},
}


display = Display()


class ActionModule(ActionBase):
    """One task for all hosts; each host checks its own workers."""

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = plain(self.validate_argument_spec(ARGUMENT_SPEC)[1])
        name, plan = args["name"], args["plan"]
        host = task_vars["inventory_hostname"]
        local = self._connection.transport == "local"
        probe: dict[str, Any] = {"local": local, "seconds": 0.0, "workers": {}}
        checks = host_checks(plan, host, local) if name in WORKER_GATES else []
        if not checks:
            result.update(changed=False, probe=probe)
            return result
        try:
            settings = settings_from_vars(task_vars, lambda v: plain(self._templar.template(v)), args["settings"],
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
        # The module beside this action: dsv4.deploy.dsv4_worker_check in the collection, else the library's.
        collection = self._task.resolved_action.rpartition(".")[0] if self._task.resolved_action else ""
        module = f"{collection}.dsv4_worker_check" if collection else "dsv4_worker_check"
        found = self._execute_module(module_name=module, module_args=module_args, task_vars=task_vars)
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
