"""Action plugin: write the deploy report (JSON, Markdown, heatmap) on the controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from dsv4deploy.gates import GateResult
from dsv4deploy.hardening import score_plan
from dsv4deploy.inventory import plain
from dsv4deploy.report import build_report, update_latest, write_report

DOCUMENTATION = r"""
action: dsv4_report
short_description: Write reports/<release>/report.json and report.md and point reports/latest at them
options:
  reports_dir: {description: Root of the reports folder on the controller, required: true}
  verdict: {description: promoted, unchanged, rolled_back or failed, required: true}
  plan: {description: The dsv4_plan fact, required: true}
  release: {description: Release deployed}
  previous_release: {description: Release active before}
  serving_release: {description: Release serving after the deploy (verified or not)}
  failed_gate: {description: Gate or stage that failed}
  failure: {description: One line saying what failed}
  gates: {description: Gate results in order}
  failure_logs: {description: "Per host, the log lines of a service that did not start ({host: [lines]})"}
"""

display = Display()


def _free_name(root: Path, release: str) -> str:
    """`release`, or `release-N` when that release already has a report (a re-run keeps the first)."""
    name, n = release, 1
    while (root / name).exists():
        n += 1
        name = f"{release}-{n}"
    return name


class ActionModule(ActionBase):
    """Runs on the controller; use run_once."""

    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict | None = None) -> dict:
        result = super().run(tmp, task_vars)
        args = plain(self._task.args)
        plan = args["plan"]
        gates = [GateResult.model_validate(g) for g in args.get("gates") or []]
        data = build_report(
            release=args.get("release") or plan["release_id"],
            previous_release=args.get("previous_release") or None,
            topology=plan["topology"],
            verdict=args["verdict"],
            endpoint=plan["endpoint"],
            gates=gates,
            metadata={
                "gate_phases": [g.get("phase", "deploy") for g in args.get("gates") or []],
                "memory": plan.get("memory", []),
            },
        )
        # A failure outside the gates (preflight, switchover) is named by the stage it happened in.
        data["failed_gate"] = args.get("failed_gate") or data["failed_gate"]
        data["serving_release"] = args.get("serving_release") or None
        data["failure"] = args.get("failure") or None
        data["failure_logs"] = {h: lines for h, lines in (args.get("failure_logs") or {}).items() if lines}
        # How exposed each rendered unit is (systemd hosts only), so a loosened unit shows in the numbers.
        data["hardening"] = score_plan(plan)
        root = Path(args["reports_dir"])
        name = _free_name(root, data["release"])
        paths = list(write_report(root / name, data).values())
        update_latest(root, name)
        for path in paths:
            display.display(f"  report: {path}")
        # The report is a controller-side record, not a change to any host.
        result.update(changed=False, report=data, paths=[str(p) for p in paths])
        return result
