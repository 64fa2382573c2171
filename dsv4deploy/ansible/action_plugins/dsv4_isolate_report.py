"""Action plugin: write the isolation report (PD versus combined) on the controller."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from dsv4deploy.inventory import plain
from dsv4deploy.isolate_report import build_isolate_report, headline, write_isolate_report
from dsv4deploy.report import free_name, update_latest

DOCUMENTATION = r"""
action: dsv4_isolate_report
short_description: Write reports/isolate/<timestamp>/report.json and report.md, point reports/isolate/latest at them
description:
  - Builds the side-by-side report of playbooks/isolate.yml (dsv4deploy.isolate_report) and returns
    C(report) (verdict, why, status, restored, serving_release, sides) and C(paths).
options:
  reports_dir: {description: The isolation reports folder on the controller, required: true}
  suite: {description: Suites run on each side, required: true}
  original: {description: Gate targets of the release that served (release_id, endpoint), required: true}
  combined: {description: Plan of the temporary combined release (may be empty when refused)}
  gates: {description: Every gate result of the run, each with its phase (original, pd, combined, restore)}
  settings: {description: What each side runs, side by side}
  notes: {description: How the combined server had to differ}
  pd_error: {description: Why the PD side stopped early}
  combined_error: {description: Why the combined side stopped early}
  restored: {description: The original release is back and verified, required: true}
  restore_error: {description: Why the restore failed}
  manual_steps: {description: What an operator must do by hand after a failed restore}
  refused: {description: Why the run stopped before changing anything}
"""

display = Display()


class ActionModule(ActionBase):
    """Runs on the controller; use run_once."""

    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = plain(self._task.args)
        data = build_isolate_report(
            suite=args["suite"], original=args["original"], combined=args.get("combined") or {},
            gates=args.get("gates") or [], settings=args.get("settings") or [], notes=args.get("notes") or [],
            pd_error=args.get("pd_error") or None,
            combined_error=args.get("combined_error") or None, restored=bool(args["restored"]),
            restore_error=args.get("restore_error") or None, manual_steps=args.get("manual_steps") or None,
            refused=args.get("refused") or None,
        )
        root = Path(args["reports_dir"])
        root.mkdir(parents=True, exist_ok=True)
        name = free_name(root, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        paths = list(write_isolate_report(root / name, data).values())
        update_latest(root, name)
        for path in paths:
            display.display(f"  report: {path}")
        # The report is a controller-side record, not a change to any host.
        result.update(changed=False, report=data, headline=headline(data), paths=[str(p) for p in paths])
        return result
