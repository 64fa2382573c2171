"""What a gate task does on the controller, shared by the two actions that give a gate's verdict:
dsv4_run_gates (the gate tasks) and dsv4_worker_probe (readiness judged in the readiness wait's own task,
where one host waits: no task of its own between the servers being ready and the verdict).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible import constants as C
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.utils.display import Display

from dsv4deploy.controller.action import ValidatedAction
from dsv4deploy.controller.progress import Heartbeat
from dsv4deploy.gates import GateStatus, skipped
from dsv4deploy.gates.bake import BakeSettings
from dsv4deploy.gates.blame import hosts_named
from dsv4deploy.gates.chain import chain_problem, counts_as_failed, run_chain
from dsv4deploy.gates.result import Stopwatch, make_result
from dsv4deploy.gates.runner import GateSettingsError, retired_warnings, run_gate
from dsv4deploy.report import predraw_heatmap

display = Display()


class GateTaskAction(ValidatedAction):
    """An action that runs gates from the controller (`run_gates`)."""

    def run_gates(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """Run the gates `args["name"]` (at once where they do not need each other), then each group of
        `args["then"]` once every gate before it passed; update and return `result` with their evidence
        (`gates`, `gate`, `passed`), or with `failed` and `msg` when the task itself cannot run them.

        `args` holds dsv4_run_gates' options (name, then, keep_going, inconclusive, plan, logs, api_key,
        api_key_problem, settings, probes, baseline, parity_baseline, bake)."""
        groups = [args["name"], *([g] if isinstance(g, str) else list(g) for g in args["then"])]
        problem = next((p for p in map(chain_problem, groups) if p), "")
        if problem:
            result.update(failed=True, msg=f"dsv4_run_gates: {problem}")
            return result
        if args["api_key_problem"]:  # the key file the readiness wait could not read: no gate runs without it
            result.update(failed=True, msg=args["api_key_problem"])
            return result
        if self._task.check_mode:  # a gate talks to running servers: never in check mode
            why = "check mode: not run (a gate talks to the running servers)"
            gates = [{"name": n, "status": "skipped", "seconds": 0.0, "summary": why, "evidence": {}}
                     for group in groups for n in group]
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
        # The config gate's logs: those the readiness wait read on each host, and any collected by a task.
        logs = {name: text for probe in args["probes"].values() if isinstance(probe, dict)
                for name, text in (probe.get("logs") or {}).items()}
        logs.update(args["logs"])

        def run_one(name: str) -> dict[str, Any]:
            with Heartbeat(name, display.display, verbose=display.verbosity >= 1) as progress:
                return judge(name, progress)

        def judge(name: str, progress: Heartbeat) -> dict[str, Any]:
            watch = Stopwatch()
            try:
                if name == "perf" and perf_off:
                    gate = skipped("perf", "perf_enabled is false (retired: leave perf out of dsv4_gates_names)")
                else:
                    gate = run_gate(name, args["plan"], settings, logs=logs, api_key=args["api_key"] or None,
                                    progress=progress, probes=args["probes"], baseline=args["baseline"] or None,
                                    bake=bake, parity_baseline=args.get("parity_baseline") or None)
            except Exception as exc:  # a gate that cannot run fails by its own name (the stage, the rollback)
                why = f"the gate could not run: {type(exc).__name__}: {exc}"
                failure = {"what": name, "status": None, "body": "", "error": str(exc)}
                gate = make_result(name, GateStatus.FAILED, watch, why, {"failures": [failure]})
            data = gate.model_dump(mode="json")
            display.display(f"  gate {name}: {data['status']} in {data['seconds']:.1f} s: {data['summary']}")
            if name == "needle":
                _predraw(gate, args["plan"].get("release_id"))
            return data

        policy = args.get("inconclusive", "fail")
        gates = run_chain(groups, run_one, args["keep_going"], policy)
        for g in gates:  # what the role stops on: failed, or inconclusive under dsv4_gates_inconclusive: fail
            g["refused"] = counts_as_failed(g, policy)
            if g["refused"]:  # the hosts a failed run's cause names (dsv4_rollout's outcome, the report)
                g["hosts"] = hosts_named(g, args["plan"])
        failed = [g for g in gates if g["refused"]]
        # None failed: every group ran, and the gate is the last group's first.
        result.update(changed=False, gates=gates, gate=(failed or gates[-len(groups[-1]):])[0], passed=not failed)
        if warnings:
            result["warnings"] = warnings
        return result


def _predraw(gate: Any, release: str | None) -> None:
    """The report's needle heatmap, drawn now (the soak beside it still runs) into this run's private
    local temp folder, where the report takes it (dsv4_write_report); it draws it itself when it is not there."""
    try:
        predraw_heatmap(Path(C.DEFAULT_LOCAL_TMP), [gate], release)
    except Exception as exc:  # only a head start: the report draws it, or says why not
        display.vvv(f"  needle heatmap not drawn ahead of the report: {type(exc).__name__}: {exc}")
