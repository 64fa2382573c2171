"""Action plugin: run verification gates from the controller (several independent ones at once) and
return their evidence.

Documented in modules/dsv4_run_gates.py (ansible-doc dsv4.deploy.dsv4_run_gates); ARGUMENT_SPEC follows it.
The work is dsv4deploy.controller.gate_task's, which the readiness wait's action (dsv4_worker_probe) shares.
"""

from __future__ import annotations

from typing import Any

from dsv4deploy.controller.gate_task import GateTaskAction
from dsv4deploy.gates.runner import GATES

ARGUMENT_SPEC = {
    "name": {"type": "list", "elements": "str", "required": True, "choices": list(GATES)},
    "then": {"type": "list", "elements": "raw", "default": []},
    "keep_going": {"type": "bool", "default": False},
    "inconclusive": {"type": "str", "default": "fail", "choices": ["fail", "pass"]},
    "plan": {"type": "dict", "required": True},
    "logs": {"type": "dict", "default": {}},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "api_key_problem": {"type": "str", "default": ""},
    "settings": {"type": "dict", "default": {}},
    "probes": {"type": "dict", "default": {}},
    "baseline": {"type": "dict", "default": {}},
    "parity_baseline": {"type": "dict", "default": {}},
    "bake": {"type": "dict", "default": {}},
}


class ActionModule(GateTaskAction):
    """One gate, or several that do not need each other at the same time, per task; run it with run_once."""

    _requires_connection = False
    argument_spec = ARGUMENT_SPEC

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Run the named gates (at once where they do not need each other), then each group of `then` once
        every gate before it passed, and return their evidence."""
        return self.run_gates(result, args, task_vars)
