"""Action plugin: the isolation soak's interim look, on the controller.

Documented in modules/dsv4_isolate_look.py (ansible-doc dsv4.deploy.dsv4_isolate_look); ARGUMENT_SPEC follows it.
"""

from __future__ import annotations

from typing import Any

from dsv4deploy.controller.action import ValidatedAction
from dsv4deploy.isolate.sequential import look

ARGUMENT_SPEC = {
    "gates": {"type": "list", "elements": "dict", "required": True},
    "rounds": {"type": "int", "required": True},
}


class ActionModule(ValidatedAction):
    """Runs on the controller; use run_once."""

    argument_spec = ARGUMENT_SPEC
    _requires_connection = False

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Pool each side's soak blocks and judge them at this look's level."""
        gates = args["gates"]
        seen = look([g for g in gates if g.get("phase") == "pd"], [g for g in gates if g.get("phase") == "combined"],
                    int(args["rounds"]))
        result.update(changed=False, **seen)
        return result
