"""Action plugin: write the isolation report (PD versus combined) on the controller.

Documented in modules/dsv4_isolate_report.py (ansible-doc dsv4.deploy.dsv4_isolate_report); ARGUMENT_SPEC follows it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ansible.utils.display import Display

from dsv4deploy.controller.action import ReportAction
from dsv4deploy.isolate.report import build_isolate_report, headline, write_isolate_report
from dsv4deploy.report import free_name, update_latest

ARGUMENT_SPEC = {
    "reports_dir": {"type": "path", "required": True},
    "suite": {"type": "list", "elements": "str", "required": True},
    "original": {"type": "dict", "required": True},
    "combined": {"type": "dict", "default": {}},
    "gates": {"type": "list", "elements": "dict", "default": []},
    "settings": {"type": "list", "elements": "dict", "default": []},
    "notes": {"type": "list", "elements": "str", "default": []},
    "pd_error": {"type": "str", "default": ""},
    "combined_error": {"type": "str", "default": ""},
    "restored": {"type": "bool", "required": True},
    "restore_error": {"type": "str", "default": ""},
    "manual_steps": {"type": "str", "default": ""},
    "refused": {"type": "str", "default": ""},
    "soak_rounds": {"type": "int", "default": 1},
}

display = Display()


class ActionModule(ReportAction):
    """Runs on the controller; use run_once."""

    argument_spec = ARGUMENT_SPEC

    def write(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Write the isolation report and point latest at it."""
        data = build_isolate_report(
            suite=args["suite"], original=args["original"], combined=args.get("combined") or {},
            gates=args.get("gates") or [], settings=args.get("settings") or [], notes=args.get("notes") or [],
            pd_error=args.get("pd_error") or None,
            combined_error=args.get("combined_error") or None, restored=bool(args["restored"]),
            restore_error=args.get("restore_error") or None, manual_steps=args.get("manual_steps") or None,
            refused=args.get("refused") or None, soak_rounds=int(args.get("soak_rounds") or 1),
        )
        # Relative to where ansible-playbook runs (the controller's working directory), not to the playbook.
        root = Path(args["reports_dir"]).expanduser().absolute()
        root.mkdir(parents=True, exist_ok=True)
        name = free_name(root, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        paths = list(write_isolate_report(root / name, data).values())
        update_latest(root, name)
        for path in paths:
            display.display(f"  report: {path}")
        # The report is a controller-side record, not a change to any host.
        result.update(changed=False, report=data, headline=headline(data), paths=[str(p) for p in paths])
        return result
