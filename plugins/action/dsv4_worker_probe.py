"""Action plugin: run a gate's host-side part on each host - for readiness, the wait for the host's
servers with its programs watched; for readiness and config, the checks of workers the controller
cannot reach.

Documented in modules/dsv4_worker_probe.py (ansible-doc dsv4.deploy.dsv4_worker_probe); ARGUMENT_SPEC
follows it. The wait and the checks are the module dsv4.deploy.dsv4_worker_check (mode=watch, then
readiness or config); a worker is asked what the controller's readiness gate asks (worker_paths). With
`verdict`, the readiness gate itself then runs here, on the controller (controller/gate_task.py, as dsv4_run_gates).
"""

from __future__ import annotations

from typing import Any

from ansible.utils.display import Display

from dsv4deploy.controller.gate_task import GateTaskAction
from dsv4deploy.controller.progress import WAIT_SLICE_S, wait_line
from dsv4deploy.gates.readiness import worker_paths
from dsv4deploy.gates.runner import (
    WORKER_GATES,
    GateSettingsError,
    host_checks,
)
from dsv4deploy.sglang import routers

ARGUMENT_SPEC = {
    "name": {"type": "list", "elements": "str", "required": True},
    "plan": {"type": "dict", "required": True},
    "settings": {"type": "dict", "default": {}},
    "services": {"type": "dict", "default": {}},
    "api_key_file": {"type": "str", "default": ""},
    "verdict": {"type": "bool", "default": False},
    "api_key": {"type": "str", "default": "", "no_log": True},
}


display = Display()
# The host side of the gates, by its full name: the collection is always found (a clone's collections path,
# the wheel's site-packages), whatever name the task used.
CHECK_MODULE = "dsv4.deploy.dsv4_worker_check"


def register_workers(plan: dict[str, Any], host: str) -> dict[str, Any]:
    """The wait's `register_workers` for the router of `plan` on `host`: its workers as its worker API takes
    them, at the URLs its command line names. The wait starts a router that takes workers at run time
    (chosen there by this version) at once and registers each worker as it answers /health."""
    impl = routers.implementation(plan["router"])
    key_file = next((w["api_key_file"] for w in plan["workers"] if w["host"] == host and w.get("api_key_file")), "")
    return {"program": plan["router_service"], "router": impl.name, "router_version": impl.version,
            "router_url": plan["router_url"], "api_key_file": key_file,
            "workers": [{"name": w["name"], "url": w["url"], "worker_type": w["role"],
                         "bootstrap_port": w.get("bootstrap_port"), "model_id": plan["served_model_name"]}
                        for w in plan["workers"]]}


class ActionModule(GateTaskAction):
    """One task for all hosts; each host checks its own workers."""

    argument_spec = ARGUMENT_SPEC

    def act(self, result: dict, args: dict[str, Any], task_vars: dict) -> dict:
        """This host's part of the gates named: the readiness wait, then the checks of its workers, readiness's
        then config's (with config named, the wait also returns the workers' logs it reads)."""
        names, plan = args["name"], args["plan"]
        host = task_vars["inventory_hostname"]
        local = self._connection.transport == "local"
        probe: dict[str, Any] = {"local": local, "seconds": 0.0, "workers": {}}
        modes = [n for n in WORKER_GATES if n in names]
        checks = host_checks(plan, host, local) if modes else []
        services = args["services"]
        watching = "readiness" in names and bool(services.get("install_root"))
        if not checks and not watching:
            result.update(changed=False, probe=probe)
            return result
        try:
            settings = self.gate_settings(task_vars, plan, args["settings"])
        except GateSettingsError:
            # dsv4_run_gates, next, refuses the same settings naming each problem; nothing to run here.
            result.update(changed=False, probe=probe)
            return result
        if watching:
            died = self._watch(plan, host, services, settings.readiness_deadline(plan), task_vars, probe,
                               logs="config" in names, key_file=args["api_key_file"], result=result)
            # A program that died fails readiness at once: its checks would only wait for the deadline.
            modes = [m for m in modes if not (died and m == "readiness")]
        for mode in modes if checks else []:
            self._check(mode, checks, host, settings.readiness_deadline(plan), task_vars, probe)
        result.update(changed=False, probe=probe)
        if args["verdict"] and watching:
            self._verdict(result, args, task_vars)
        return result

    def _verdict(self, result: dict, args: dict[str, Any], task_vars: dict) -> None:
        """Judge readiness now, from this host's probe, as the gate task would (the caller makes this host the
        only one the gates wait on): the gate's result goes into result["verdict"]. When the gate task itself
        could not run (settings, the key file), no verdict: the gate task then runs and fails saying why."""
        host = task_vars["inventory_hostname"]
        gate_args = {"name": ["readiness"], "then": [], "keep_going": False, "inconclusive": "fail",
                     "plan": args["plan"], "logs": {},
                     "api_key": result.get("api_key") or args["api_key"],
                     "api_key_problem": result.get("api_key_problem", ""), "settings": args["settings"],
                     "probes": {host: result["probe"]}, "baseline": {}, "parity_baseline": {},
                     "bake": {}}
        judged = self.run_gates({}, gate_args, task_vars)
        if judged.get("failed"):
            return
        for warning in judged.pop("warnings", []):  # this result may be hidden (no_log): said now instead
            display.warning(warning)
        result["verdict"] = judged

    def _check(self, mode: str, checks: list[dict[str, Any]], host: str, deadline_s: float, task_vars: dict,
               probe: dict[str, Any]) -> None:
        """Run gate `mode`'s checks of the workers only `host` reaches, there; their evidence joins probe["workers"]."""
        module_args = {
            "checks": [{"name": w["name"], "url": w["url"], "paths": list(worker_paths(w.get("sglang_version")))}
                       for w in checks],
            "mode": mode,
            "deadline_s": deadline_s,
        }
        key_file = next((w.get("api_key_file") for w in checks if w.get("api_key_file")), None)
        if key_file:
            module_args["api_key_file"] = key_file
        display.display(f"  [{mode}] on {host}: {', '.join(w['name'] for w in checks)} "
                        f"(listening where only {host} reaches them)")
        found = self._execute_module(module_name=CHECK_MODULE, module_args=module_args,
                                     task_vars=task_vars)
        if found.get("failed"):
            # The probe itself could not run (no python3, key file unreadable, ...): the gate says so.
            why = " ".join(str(found.get("msg") or found.get("module_stderr") or "failed").split())[:500]
            workers = {w["name"]: {"url": w["url"], "unreachable": f"the check on {host} could not run: {why}"}
                       for w in checks}
        else:
            workers = found.get("workers") or {}
            probe["seconds"] += float(found.get("seconds") or 0.0)
        # Readiness's answers (checks) and config's (server_info) side by side, per worker.
        for name, evidence in workers.items():
            probe["workers"][name] = {**probe["workers"].get(name, {}), **evidence}

    def _watch(self, plan: dict[str, Any], host: str, services: dict[str, Any], deadline_s: float,
               task_vars: dict, probe: dict[str, Any], logs: bool = False, key_file: str = "",
               result: dict | None = None) -> bool:
        """Wait on `host` until its workers answer /health, watching its programs; True when one died
        (recorded in probe["died"], with the host named: the gate fails on it at once). With `logs`, the
        workers' logs since this start come back too (probe["logs"], for the config gate). With `key_file`,
        the API key read there goes into `result` (api_key, or api_key_problem), outside the probe."""
        checks = [{"name": w["name"], "url": w["url"]} for w in plan["workers"] if w["host"] == host]
        # A rank >= 1 of a multi-node server waits for its rank 0's /health (its own is a dummy), watched
        # meanwhile: a rank that dies fails readiness at once, with this host's log of it.
        checks += [{"name": r["name"], "url": r["rank0_url"]} for r in plan.get("ranks") or [] if r["host"] == host]
        watched = {k: services[k] for k in ("manager", "install_root", "supervisor_bin_dir") if services.get(k)}
        watched.update(since=services.get("since") or {}, log_offsets=services.get("log_offsets") or {})
        if plan.get("fatal_log_patterns"):
            watched["fatal_log_patterns"] = list(plan["fatal_log_patterns"])
        if logs:
            watched["logs"] = True
        if services.get("lock"):
            watched["lock"] = services["lock"]  # the phase is recorded with this run, not one of its own
        router = plan.get("router_service")
        if services.get("start_router") and router and plan.get("endpoint_host") == host:
            # Started once every worker answers /health, asked at the URLs the router itself uses, when they
            # all run here, where the wait also sees them die. A worker on another host could die or drop
            # off unseen by this wait, which would then hold the gate until its deadline: with one, the router
            # is started at once, as with its workers, and the controller's checks judge.
            workers = plan["workers"]
            alone = all(w["host"] == host for w in workers)
            watched["start_when_healthy"] = {router: {w["name"]: w["url"] for w in workers} if alone else {}}
            if alone:
                watched["register_workers"] = register_workers(plan, host)
        module_args = {"mode": "watch", "checks": checks, "deadline_s": deadline_s, "services": watched,
                       "slice_s": WAIT_SLICE_S}
        if key_file:
            module_args["key_for_controller"] = key_file
        found = self._execute_module(module_name=CHECK_MODULE, module_args=module_args, task_vars=task_vars)
        handed = {k: found[k] for k in ("api_key", "api_key_problem") if k in found}
        # The wait goes on in slices; between them the console says what each worker's log shows.
        while found.get("unfinished") and not found.get("failed"):
            names = [c["name"] for c in checks]
            display.display(wait_line(host, float(found.get("seconds") or 0.0), deadline_s, found.get("progress") or {},
                                      found.get("healthy") or {}, names))
            module_args = {**module_args, "resume": found["resume"]}
            module_args.pop("key_for_controller", None)
            found = self._execute_module(module_name=CHECK_MODULE, module_args=module_args, task_vars=task_vars)
        found.update(handed)
        if result is not None and "api_key" in found:
            # The gates' key, read by the wait instead of a module run of its own: this result is hidden
            # whatever the task says, and the key stays out of the probe the gates get.
            result.update(api_key=found.pop("api_key"), _ansible_no_log=True)
        if result is not None and found.get("api_key_problem"):
            result["api_key_problem"] = found.pop("api_key_problem")
        if found.get("failed"):
            # The wait itself could not run (service manager unreachable, ...): the gate says so.
            why = " ".join(str(found.get("msg") or found.get("module_stderr") or "failed").split())[:500]
            probe["died"] = {"host": host, "name": "(the wait)", "why": f"could not watch the services: {why}",
                             "log": "", "seconds": 0.0, "log_source": ""}
            return True
        probe["seconds"] = float(found.get("seconds") or 0.0)
        probe["healthy_on_host"] = found.get("healthy") or {}
        if "logs" in found:
            probe["logs"] = found["logs"]
        if found.get("not_started"):
            probe["not_started"] = found["not_started"]
        if found.get("registered") is not None:
            probe["registered"] = found["registered"]
        if found.get("died"):
            healthy = probe["healthy_on_host"]
            probe["died"] = {**found["died"], "host": host, "was_healthy": found["died"]["name"] in healthy}
            display.display(f"  [readiness] on {host}: {found['died']['name']} {found['died']['why']}")
            return True
        return False
