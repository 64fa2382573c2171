"""What the deploy playbook needs to run a roll (`dsv4_rollout_strategy: rolling`), on the controller.

`dsv4deploy.rollout.rolling` plans the steps; this turns them into what each step's tasks act on: per host the
programs to stop and start and their GPUs, the step's entries for the production router's worker API,
its preview router (host, argv, port) and the gate targets that point the gates at that preview router
with the step's new workers only. It also refuses, before anything changes, a change a roll cannot
carry: `rolling.compatibility_problems` against the serving release's `spec.json`, and any program
file (supervisord program, systemd unit) that differs between the releases - the service manager
would restart every worker whose file changed when the new release's programs are loaded, old ones
included, all at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dsv4deploy.net import is_loopback
from dsv4deploy.plan import gate_targets, services
from dsv4deploy.rollout import rolling
from dsv4deploy.rollout.slot import slot_spec
from dsv4deploy.spec import Deployment, Problem

# A release's program files: what the service manager loads (the serve scripts read `current`).
PROGRAM_DIRS = ("supervisor/", "units/")


def program_file_problems(serving_files: Mapping[str, Mapping[str, str]],
                          new_files: Mapping[str, Mapping[str, str]]) -> list[Problem]:
    """Program files (per host: relative path -> text) that differ between the serving and the new release."""
    out: list[Problem] = []
    for host, files in sorted(new_files.items()):
        old = serving_files.get(host, {})
        for path in sorted(p for p in {*files, *old} if p.startswith(PROGRAM_DIRS)):
            if files.get(path) != old.get(path):
                out.append(Problem(
                    field=path, host=host,
                    message=f"the program file {path} differs between the serving release and the new one: loading "
                            "the new release's programs would restart the workers still serving the old release",
                    fix=f"roll out this change with {rolling.STRATEGY_VAR}: blue_green or recreate"))
    return out


def run_plan(plan: Mapping[str, Any], serving_spec: str, serving_files: Mapping[str, Mapping[str, str]],
             new_files: Mapping[str, Mapping[str, str]]) -> tuple[list[Problem], dict[str, Any]]:
    """The problems that refuse the roll (empty: it can run) and the roll as the step tasks take it.

    `plan` is the playbook's plan (its `spec` and `rollout`), `serving_spec` the serving release's spec.json
    text, `serving_files` and `new_files` each host's program files in the serving and in the new release.
    """
    new = Deployment.model_validate(plan["spec"])
    serving = Deployment.model_validate(json.loads(serving_spec)["deployment"])
    problems = rolling.compatibility_problems(serving, new) + program_file_problems(serving_files, new_files)
    if problems:
        return problems, {}
    rollout = plan["rollout"]
    port = int(rollout["preview_router_port"])
    offset = int(rollout.get("port_offset") or port - new.router.port)
    metrics_port = services.prometheus_port(new.router) + offset
    targets = gate_targets(new)
    steps = [_step(new, step, targets, port, metrics_port) for step in rollout["steps"]]
    placed = rollout.get("surge") or {}
    if placed:
        # The surge workers' slot: the new release with each lone worker beside its serving one.
        slot = slot_spec(new, placed, offset)
        slot_targets = gate_targets(slot)
        for step, planned in zip(steps, rollout["steps"], strict=True):
            if planned.get("surge"):
                step["surge"] = _surge(new, slot, planned, slot_targets, port, metrics_port)
                step["rest"] = _rest(new, planned, targets, port, metrics_port)
    # What the step tasks ask the production router with, kept in the roll itself: the next run repairs a
    # dead roll from its record (rolling_record.py), whatever that run's own inventory says. The key file
    # is the production router's own (api_key.file, or the vault key's file the release's install wrote on
    # the router's host); the preview router module reads it there. None: no key.
    key_file = services.api_key_file(new, new.host(new.router.host))
    # The preview router runs as the production router does: as the service user, with its secret env file,
    # under the host's service manager (a transient unit with the router unit's hardening, or a program).
    router = next(s for s in services.build_services(new) if s.role == "router")
    unit = new_files.get(new.router.host, {}).get(f"units/{router.name}.service", "")
    return [], {"steps": steps, "router_host": new.router.host, "preview_router_port": port,
                "router_url": plan.get("router_url"), "router": plan.get("router"), "drain_s": new.drain_deadline_s,
                "api_key_file": key_file, "gpu_query_command": plan.get("gpu_query_command"),
                "router_user": new.host(new.router.host).service_user, "router_env_file": router.secret_env_file,
                "preview_name": f"{router.name}-preview", "preview_properties": rolling.unit_properties(unit)}


def _surge(spec: Deployment, slot: Deployment, step: Mapping[str, Any], targets: Mapping[str, Any], port: int,
           metrics_port: int) -> dict[str, Any]:
    """A step's surge part: the lone workers' programs in the slot (names, GPUs, worker API entries), the
    step's preview router and gates with them there, and the same of the workers at home."""
    paths = list(step["surge"])
    in_slot = _step(slot, step, targets, port, metrics_port)
    home = _step(spec, {**step, "workers": [w for w in step["workers"] if w["path"] in paths]}, targets, port,
                 metrics_port)
    slot_workers = {w.path: w for ws in rolling.roll_workers(slot).values() for w in ws}
    names: dict[str, list[str]] = {}
    gpus: dict[str, list[int]] = {}
    by_path = {f"{role}[{i}]": w for role in rolling.ROLES for i, w in enumerate(getattr(slot, role))}
    for path in paths:
        _add_programs(slot, slot_workers[path].name, slot_workers[path].host, by_path[path].gpus, names, gpus)
    api = [_api_entry(slot, p, by_path) for p in paths]
    # The gates judge the surge workers by the slot's names, the others by their own (they run at home).
    in_slot_names = {slot_workers[p].name for p in paths}
    home_names = {w.name for ws in rolling.roll_workers(spec).values() for w in ws if w.path in paths}
    at_home = _step(spec, step, gate_targets(spec), port, metrics_port)["gates"]
    gates = dict(in_slot["gates"])
    gates["workers"] = ([w for w in in_slot["gates"]["workers"] if w["name"] in in_slot_names]
                        + [w for w in at_home["workers"] if w["name"] not in home_names])
    for key in ("expected_overrides", "expected_settings"):
        gates[key] = {w["name"]: (in_slot["gates"] if w["name"] in in_slot_names else at_home)[key][w["name"]]
                      for w in gates["workers"]}
    return {"paths": paths, "names": names, "gpus": gpus, "api": api, "preview": in_slot["preview"], "gates": gates,
            "home": {"names": home["names"], "gpus": home["gpus"], "api": home["api"]}}


def _rest(spec: Deployment, step: Mapping[str, Any], targets: Mapping[str, Any], port: int,
          metrics_port: int) -> dict[str, Any]:
    """A surge step without its surge workers: what is replaced in place (empty `paths`: nothing)."""
    rest = {**step, "workers": [w for w in step["workers"] if w["path"] not in step["surge"]], "surge": []}
    return _step(spec, rest, targets, port, metrics_port)


def _step(spec: Deployment, step: Mapping[str, Any], targets: Mapping[str, Any], port: int,
          metrics_port: int) -> dict[str, Any]:
    """One step as its tasks take it."""
    by_path = {f"{role}[{i}]": w for role in rolling.ROLES for i, w in enumerate(getattr(spec, role))}
    names: dict[str, list[str]] = {}
    gpus: dict[str, list[int]] = {}
    for w in step["workers"]:
        _add_programs(spec, w["name"], w["host"], by_path[w["path"]].gpus, names, gpus)
    api = [_api_entry(spec, w["path"], by_path) for w in step["workers"]]
    preview_names = {w.name for ws in rolling.roll_workers(spec).values() for w in ws if w.path in step["preview"]}
    router = spec.router
    assert router is not None  # rolling.roll_problems refuses a deployment without one
    # Never every interface (rolling.preview_listen): the address the gates reach it at, loopback where they can.
    listen = rolling.preview_listen(spec)
    url = f"http://{services.url_host(listen)}:{port}"
    metrics = router.prometheus_listen if is_loopback(router.prometheus_listen) else listen
    gate_plan = {**targets, "endpoint": url, "router_url": url,
                 "router_metrics_url": f"http://{services.url_host(metrics)}:{metrics_port}",
                 # Nothing for the readiness wait to start: the step's tasks start the preview router.
                 "router_service": None,
                 "workers": [w for w in targets["workers"] if w["name"] in preview_names],
                 "ranks": [r for r in targets.get("ranks") or [] if r["rank0"] in preview_names],
                 "expected_overrides": {k: v for k, v in targets["expected_overrides"].items() if k in preview_names},
                 "expected_settings": {k: v for k, v in targets["expected_settings"].items() if k in preview_names}}
    return {"step": step["step"], "paths": [w["path"] for w in step["workers"]], "names": names, "gpus": gpus,
            "api": api, "preview": {"paths": list(step["preview"]), "url": url, "port": port,
                                    "argv": rolling.preview_router_argv(spec, step, port, metrics_port)},
            "gates": gate_plan}


def _add_programs(spec: Deployment, name: str, host: str, worker_gpus: list[int], names: dict[str, list[str]],
                  gpus: dict[str, list[int]]) -> None:
    """Add worker `name` on `host` to a step's programs and GPUs per host, with its ranks 1 and up on their
    nodes (a server over several nodes is replaced as one: every rank holds the same GPUs on its node)."""
    names.setdefault(host, []).append(name)
    gpus.setdefault(host, []).extend(worker_gpus)
    for rank in services.build_services(spec):
        if rank.rank0 == name:
            names.setdefault(rank.host, []).append(rank.name)
            gpus.setdefault(rank.host, []).extend(worker_gpus)


def _api_entry(spec: Deployment, path: str, by_path: Mapping[str, Any]) -> dict[str, Any]:
    """The worker API's entry of one worker (as roles/dsv4_blue_green/templates/workers.j2 writes a plan's)."""
    w = by_path[path]
    entry: dict[str, Any] = {"url": f"http://{spec.host(w.host).address}:{w.port}",
                             "worker_type": path.split("[")[0], "model_id": spec.model.served_name}
    if path.startswith("prefill"):
        entry["bootstrap_port"] = w.bootstrap_port
    return entry


def table_lines(steps: list[dict[str, Any]], old: str, new: str, done: int, failed_step: int | None,
                restored: bool) -> list[str]:
    """The report's table (rolling.release_table), with a last row once a failed roll put the old release
    back on every worker."""
    lines = rolling.release_table(steps, old, new, done, failed_step)
    if restored:
        count = sum(len(s["workers"]) for s in steps)
        lines.append("| rolled back | " + " | ".join([old] * count) + " |")
    return lines
