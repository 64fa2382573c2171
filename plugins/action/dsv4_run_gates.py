"""Action plugin: run verification gates from the controller (several independent ones at once) and
return their evidence.

Documented in modules/dsv4_run_gates.py (ansible-doc dsv4.deploy.dsv4_run_gates); ARGUMENT_SPEC follows it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.utils.display import Display

from dsv4deploy.controller_action import ValidatedAction
from dsv4deploy.gate_runner import (
    GATES,
    GateSettingsError,
    group_problem,
    retired_warnings,
    run_gate,
)
from dsv4deploy.gates import skipped
from dsv4deploy.gates.bake import BakeSettings

ARGUMENT_SPEC = {
    "name": {"type": "list", "elements": "str", "required": True, "choices": list(GATES)},
    "plan": {"type": "dict", "required": True},
    "logs": {"type": "dict", "default": {}},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "settings": {"type": "dict", "default": {}},
    "probes": {"type": "dict", "default": {}},
    "baseline": {"type": "dict", "default": {}},
    "bake": {"type": "dict", "default": {}},
}

display = Display()


class ActionModule(ValidatedAction):
    """One gate, or several that do not need each other at the same time, per task; run it with run_once."""

    _requires_connection = False
    argument_spec = ARGUMENT_SPEC

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Run the named gates (at once where they do not need each other) and return their evidence."""
        names = args["name"]
        problem = group_problem(names)
        if problem:
            result.update(failed=True, msg=f"dsv4_run_gates: {problem}")
            return result
        if self._task.check_mode:  # a gate talks to running servers: never in check mode
            why = "check mode: not run (a gate talks to the running servers)"
            gates = [{"name": n, "status": "skipped", "seconds": 0.0, "summary": why, "evidence": {}} for n in names]
            result.update(changed=False, skipped=True, msg=why, gates=gates, gate=gates[0], passed=True)
            return result
        try:
            settings = self.gate_settings(task_vars, args["plan"], args["settings"])
            bake = BakeSettings.model_validate(args["bake"]) if args["bake"] else None
        except GateSettingsError as exc:
            result.update(failed=True, msg="gate settings: " + "; ".join(exc.problems))
            return result
        except ValueError as exc:  # pydantic's ValidationError: the bake's settings, named by field
            result.update(failed=True, msg=f"bake settings (dsv4_bake_*): {exc}")
            return result
        warnings = retired_warnings(task_vars)
        # The retired switch still means what it said: no perf gate.
        perf_off = "perf_enabled" in task_vars and not boolean(self._templar.template(task_vars["perf_enabled"]),
                                                               strict=False)

        def run_one(name: str) -> dict[str, Any]:
            def progress(done: int, total: int, note: str) -> None:
                display.display(f"  [{name}] {done}/{total} {note}" if total else f"  [{name}] {note}")

            if name == "perf" and perf_off:
                gate = skipped("perf", "perf_enabled is false (retired: leave perf out of dsv4_gates_names)")
            else:
                gate = run_gate(name, args["plan"], settings, logs=args["logs"], api_key=args["api_key"] or None,
                                progress=progress, probes=args["probes"], baseline=args["baseline"] or None,
                                bake=bake)
            data = gate.model_dump(mode="json")
            display.display(f"  gate {name}: {data['status']} in {data['seconds']:.1f} s: {data['summary']}")
            return data

        with ThreadPoolExecutor(len(names)) as pool:
            gates = list(pool.map(run_one, names))
        failed = [g for g in gates if g["status"] == "failed"]
        result.update(changed=False, gates=gates, gate=(failed or gates)[0], passed=not failed)
        if warnings:
            result["warnings"] = warnings
        return result
