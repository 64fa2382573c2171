"""Action plugin: start or stop the continuous client (dsv4deploy.rollout.downtime) on the controller.

Documented in modules/dsv4_downtime.py (ansible-doc dsv4.deploy.dsv4_downtime); ARGUMENT_SPEC follows it.
"""

from __future__ import annotations

import os
from typing import Any

from dsv4deploy.controller.action import ValidatedAction
from dsv4deploy.rollout.downtime import collect, spawn

ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["started", "stopped"], "required": True},
    "endpoint": {"type": "str", "default": ""},
    "model": {"type": "str", "default": ""},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "concurrency": {"type": "int", "default": 1},
    "max_s": {"type": "int", "default": 7200},
    "client": {"type": "dict", "default": {}},
}


class ActionModule(ValidatedAction):
    """Controller only; run it with run_once."""

    _requires_connection = False
    argument_spec = ARGUMENT_SPEC

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Start the client (returns `client`) or stop the one in `client` (returns `downtime`)."""
        if self._task.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: no client was started or stopped")
            return result
        if args["state"] == "started":
            missing = [k for k in ("endpoint", "model") if not args[k]]
            if missing:
                result.update(failed=True, msg=f"dsv4_downtime state=started needs {' and '.join(missing)}")
                return result
            # The worker's parent is ansible-playbook (as the deploy lock records it): the client stops
            # with it, so a killed controller leaves no client asking production.
            client = spawn(args["endpoint"], args["model"], args["api_key"], args["concurrency"],
                           watch_pid=os.getppid(), max_s=args["max_s"])
            result.update(changed=False, client=client,
                          msg=f"continuous client asking {args['endpoint']} (pid {client['pid']})")
            return result
        figures = collect(args["client"]) if args["client"] else {}
        result.update(changed=False, downtime=figures,
                      msg=(f"continuous client: sent {figures['sent']}, failed {figures['failed']}, longest gap "
                           f"between answers {figures['longest_gap_s']} s" if figures else "no client figures"))
        return result
