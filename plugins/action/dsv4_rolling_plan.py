"""Action plugin: what a rolling rollout's steps act on, after refusing a change a roll cannot carry.

Documented in modules/dsv4_rolling_plan.py (ansible-doc dsv4.deploy.dsv4_rolling_plan); ARGUMENT_SPEC follows it.
The work is dsv4deploy.rollout.rolling_plan's.
"""

from __future__ import annotations

import base64
from typing import Any

from dsv4deploy.controller.action import ValidatedAction
from dsv4deploy.rollout import rolling_record
from dsv4deploy.rollout.rolling_plan import run_plan, table_lines

ARGUMENT_SPEC = {
    "plan": {"type": "dict", "required": True},
    "serving": {"type": "dict", "default": {}},
    # table: only the report's table of which worker runs which release (old, new, done, failed, restored).
    "table": {"type": "dict"},
    # repair: only what the next run does about a roll that died (dsv4deploy.rollout.rolling_record): records, mode.
    "repair": {"type": "dict"},
}


class ActionModule(ValidatedAction):
    """Runs on the controller once (run_once)."""

    _requires_connection = False
    argument_spec = ARGUMENT_SPEC

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Refuse by field, host and fix, or hand on the roll's steps (`roll`)."""
        plan, serving = args["plan"], args["serving"]
        if args.get("repair") is not None:
            return self._repair(result, args["repair"])
        if args.get("table") is not None:
            t = args["table"]
            # No step failed (0, or none given): the rollout failed after the last step (its bake).
            failed = int(t["failed"]) if t.get("failed") not in (None, "") and int(t["failed"]) > 0 else None
            result.update(changed=False, table=table_lines(plan["rollout"]["steps"], str(t.get("old") or "-"),
                                                           str(t["new"]), int(t.get("done") or 0), failed,
                                                           bool(t.get("restored"))))
            return result
        # {host: {path: base64 text}} as slurp read them; a file the serving release lacks is absent.
        files = {host: {path: base64.b64decode(text).decode() for path, text in found.items()}
                 for host, found in serving.items()}
        spec = next((f["spec.json"] for f in files.values() if "spec.json" in f), "")
        if not spec:
            result.update(failed=True, msg="dsv4_rollout_strategy: rolling needs the serving release's spec.json, and "
                          "no host has it; fix: deploy with dsv4_rollout_strategy: recreate")
            return result
        new_files = {host: part["files"] for host, part in plan["hosts"].items() if host in files}
        problems, roll = run_plan(plan, spec, files, new_files)
        if problems:
            result.update(failed=True, problems=[str(p) for p in problems],
                          msg="dsv4_rollout_strategy: rolling cannot carry this change: "
                              + " | ".join(str(p) for p in problems))
            return result
        result.update(changed=False, roll=roll)
        return result

    @staticmethod
    def _repair(result: dict, args: dict[str, Any]) -> dict:
        """RV(repair): each host's record as slurp read it (base64; empty where none), merged and decided."""
        found = {host: base64.b64decode(text).decode() if text else None
                 for host, text in (args.get("records") or {}).items()}
        try:
            result.update(changed=False, repair=rolling_record.repair(found, str(args.get("mode") or "undo")))
        except ValueError as exc:
            result.update(failed=True, msg=str(exc))
        return result
