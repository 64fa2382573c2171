"""Action plugin: write the deploy report (JSON, Markdown, heatmap) on the controller.

Documented in modules/dsv4_write_report.py (ansible-doc dsv4.deploy.dsv4_write_report); ARGUMENT_SPEC follows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible import constants as C
from ansible.utils.display import Display

from dsv4deploy.controller.action import ReportAction
from dsv4deploy.gates import GateResult
from dsv4deploy.plan import env_switches
from dsv4deploy.report import MD_NAME, build_report, free_name, update_latest, write_report
from dsv4deploy.report.fleet import fleet_rows
from dsv4deploy.report.hardening import score_plan
from dsv4deploy.report.rollout_section import rollout_section

ARGUMENT_SPEC = {
    "reports_dir": {"type": "path", "required": True},
    "verdict": {"type": "str", "required": True, "choices": ["promoted", "unchanged", "rolled_back", "failed"]},
    "plan": {"type": "dict", "required": True},
    "release": {"type": "str", "default": ""},
    "previous_release": {"type": "str", "default": ""},
    "serving_release": {"type": "str", "default": ""},
    "failed_gate": {"type": "str", "default": ""},
    "failure": {"type": "str", "default": ""},
    "gates": {"type": "list", "elements": "dict", "default": []},
    "failure_logs": {"type": "dict", "default": {}},
    "cause": {"type": "dict", "default": {}},
    "rolling_table": {"type": "list", "elements": "str", "default": []},
    "downtime": {"type": "dict", "default": {}},
}

display = Display()


class ActionModule(ReportAction):
    """Runs on the controller; use run_once."""

    argument_spec = ARGUMENT_SPEC

    def write(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Write the deploy report (JSON, Markdown, plots) and point latest at it."""
        plan = args["plan"]
        gates = [GateResult.model_validate(g) for g in args.get("gates") or []]
        data = build_report(
            release=args.get("release") or plan["release_id"],
            previous_release=args.get("previous_release") or None,
            topology=plan["topology"],
            router=plan.get("router"),
            verdict=args["verdict"],
            endpoint=plan["endpoint"],
            gates=gates,
            metadata={
                "gate_phases": [g.get("phase", "deploy") for g in args.get("gates") or []],
                "memory": plan.get("memory", []),
                # An experiment's env switches on top of the inventory's (server_env_extra...).
                "env_switches": env_switches(plan.get("spec") or {}),
            },
        )
        # A failure outside the gates (preflight, switchover) is named by the stage it happened in.
        data["failed_gate"] = args.get("failed_gate") or data["failed_gate"]
        data["serving_release"] = args.get("serving_release") or None
        data["failure"] = args.get("failure") or None
        data["failure_logs"] = {h: lines for h, lines in (args.get("failure_logs") or {}).items() if lines}
        # Why it failed, as data (stage, message, gate, the hosts it names, their log lines, the fix).
        data["cause"] = args.get("cause") or None
        # Settings weaker than the spec implies (dsv4_build_plan named them): said on the first line.
        data["weakened"] = list(task_vars.get("dsv4_plan_weakened") or [])
        if args.get("rolling_table"):
            data["rolling_table"] = list(args["rolling_table"])
        # How exposed each rendered unit is (systemd hosts only), so a loosened unit shows in the numbers.
        data["hardening"] = score_plan(plan)
        # What serves where (hosts, GPUs, sglang, memory per GPU): the report's "At a glance".
        data["fleet"] = fleet_rows(plan)
        # How the release replaced the serving one, and what the continuous client saw meanwhile.
        data["rollout"] = rollout_section(plan.get("rollout")) if plan.get("rollout") else None
        data["downtime"] = args.get("downtime") or None
        # Relative to where ansible-playbook runs (the controller's working directory), not to the playbook.
        root = Path(args["reports_dir"]).expanduser().absolute()
        name = free_name(root, data["release"])
        # The needle heatmap, drawn while the soak ran (dsv4_run_gates), is in this run's local temp folder.
        paths = list(write_report(root / name, data, drawn=C.DEFAULT_LOCAL_TMP).values())
        update_latest(root, name)
        for path in paths:
            display.display(f"  report: {path}")
        # The report itself at -v (its path above otherwise): the gates said their lines as they ran, and the run's
        # outcome ends the output.
        display.v(next(p for p in paths if p.name == MD_NAME).read_text(encoding="utf-8"))
        # The report is a controller-side record, not a change to any host.
        result.update(changed=False, report=data, paths=[str(p) for p in paths])
        return result
