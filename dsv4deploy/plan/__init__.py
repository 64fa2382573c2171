"""The rollout plan: everything the playbooks need to know about one deploy, computed once.

`make_plan` validates the spec, checks memory, renders every host's release and orders the
services. The result is plain JSON-able data so Ansible can carry it between tasks and hosts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from dsv4deploy.plan import access, host_parsers, memory, model_needs, render, services
from dsv4deploy.plan.models import GateTargets, Plan
from dsv4deploy.sglang import routers
from dsv4deploy.spec import Deployment, Problem, SpecError, secret_env
from dsv4deploy.spec.reachability import cross_host_paths


def release_id(host_hashes: dict[str, str], now: float | None = None) -> str:
    """`<UTC timestamp>-<10 hex>`: sortable by time, identified by the content of all hosts."""
    digest = hashlib.sha256("".join(f"{h}={c}\n" for h, c in sorted(host_hashes.items())).encode()).hexdigest()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{digest[:10]}"


def reach_plan(spec: Deployment, host: str, play_hosts: list[str]) -> dict[str, list[dict[str, Any]]]:
    """What preflight proves from and to `host`: the ports it listens on for other hosts (at its servers'
    bind address) and the paths it connects along; paths to or from a host outside the play are left out."""
    paths = [p for p in cross_host_paths(spec) if p.source in play_hosts and p.target in play_hosts]
    # A server bound to one address listens there; one on every address (and the rendezvous) on 0.0.0.0, or at
    # the address the others connect to when a serving release holds the port on another (`reach`).
    binds = {(p.address if p.field == "listen" else "0.0.0.0", p.port, p.address) for p in paths if p.target == host}
    return {"listen": [{"address": address, "port": port, "reach": reach}
                       for address, port, reach in sorted(binds, key=lambda b: b[1])],
            "connect": [dataclasses.asdict(p) for p in paths if p.source == host]}


def make_plan(spec: Deployment, play_hosts: list[str], now: float | None = None,
              rollout: dict[str, Any] | None = None, keys: Mapping[str, str] | None = None,
              api_key_digests: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The plan for deploying `spec` to `play_hosts`; raises SpecError when memory does not fit.

    `rollout` is `dsv4deploy.rollout.strategy.rollout_plan`'s answer (unset: recreate). `keys` are the
    hosts' digest salts (host -> 64 hex, `dsv4_digest_salt`): each host's release shows its secret env values
    as digests keyed by its own; every host with secret env values needs one. None: a plan made on the
    controller alone (`dsv4deploy plan`, the isolation twin), whose secret values show as `<secret>`.
    `api_key_digests` (host -> 12 hex, `secret_env.api_key_digest` under the host's salt) name the API key's
    content in the serve scripts that read it, so that a rotated key makes a new release."""
    reports = memory.check_memory(spec)
    problems = memory.problems_from_memory(reports) + (_missing_keys(spec, keys) if keys is not None else [])
    if problems:
        raise SpecError(problems)
    defs = _ordered_services(spec)
    rendered = render.render_all(spec, keys, api_key_digests)
    model = model_needs.model_facts(spec, memory.load_profile(spec.memory_profile).models.get(spec.model.profile))
    hosts: dict[str, Any] = {}
    for name, layout in _layouts(spec, play_hosts, defs).items():
        files = rendered.get(name, {})
        host_defs = [d for d in defs if d.host == name]
        hosts[name] = {
            "files": files,
            "content_hash": render.content_hash(files) if files else "",
            **layout,
            # Preflight (dsv4_access): the paths the services need.
            "access": access.host_needs(host_defs, files, spec.server_command(name), spec.router_command(name), model)
            + access.ib_device_needs(spec, name),
            # Preflight (dsv4_host parsers): the command lines for the host's own sglang and router parsers.
            "parsers": host_parsers.host_checks(spec, host_defs),
            # Preflight (dsv4_reach): the cross-host paths this host listens for and connects along.
            "reach": reach_plan(spec, name, play_hosts),
            # Preflight (dsv4_engine): the venv this host's release runs, installed before anything stops.
            "engine": spec.engine_record(name) if files else {},
        }
    plan = {
        "release_id": release_id({h: v["content_hash"] for h, v in hosts.items()}, now),
        **_targets(spec, defs),
        "hosts": hosts,
        "memory": [r.model_dump(mode="json") for r in reports],
        # Secret env values as `<secret>`: the plan is a fact, shown at -v and handed to the report (each
        # host's spec.json has the keyed digests).
        "spec": secret_env.redact_spec(spec.model_dump(mode="json")),
        **({"rollout": rollout} if rollout else {}),
    }
    # Typed: a plan of the wrong shape fails here, on the controller, before any host is touched.
    return Plan.model_validate(plan).model_dump(mode="json")


def secret_hosts(spec: Deployment, play_hosts: list[str]) -> dict[str, str]:
    """Each play host whose services have secret env values or read the API key, with its install root: where
    the plan needs the host's digest salt (`<install_root>/secrets/digest_salt`)."""
    return {name: spec.hosts[name].install_root for name in play_hosts
            if name in spec.hosts and any(s.secret_env or s.api_key_file for s in services.services_on(spec, name))}


def _missing_keys(spec: Deployment, keys: Mapping[str, str]) -> list[Problem]:
    # Without its salt a host's release would carry no digest, and a changed secret would change nothing.
    return [Problem(field="server_env", host=name, message="the host's digest salt was not read (its secret env "
                                                          "values and API key are shown by a digest keyed with it)",
                    fix="plan through the role dsv4_plan, which reads each host's salt (dsv4_digest_salt)")
            for name in sorted(secret_hosts(spec, list(spec.hosts_in_use())))
            if not secret_env.SALT_PATTERN.match(keys.get(name) or "")]


ALL_SERVERS = "all servers"


def env_switches(spec_data: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """server_env_extra (as "all servers") and server_env_extra_by_role, secret values redacted.

    From a Deployment's dump (the plan's `spec`, which the report reads), so the plan needs no key of its own.
    """
    extra = dict(spec_data.get("server_env_extra") or {})
    out = {ALL_SERVERS: extra} if extra else {}
    out.update({role: dict(env) for role, env in sorted((spec_data.get("server_env_extra_by_role") or {}).items())
                if env})
    listed = spec_data.get("secret_env") or []
    return {who: secret_env.redact_env(dict(sorted(env.items())), listed) for who, env in out.items()}


def env_switch_lines(switches: dict[str, dict[str, str]]) -> list[str]:
    """One line per role: `decode: SGLANG_X=1, SGLANG_Y=0`."""
    return [f"{who}: {', '.join(f'{k}={v}' for k, v in env.items())}" for who, env in switches.items()]


def secret_files(spec: Deployment, play_hosts: list[str], planned: dict[str, Any] | None = None,
                 keys: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Per play host, its services' secret env files (absolute path -> content); for a no_log task only.

    `spec` is the inventory's. `planned` is the (redacted) spec of the plan being installed, e.g. the
    other slot's, or the isolation twin derived from a release's spec.json: its secrets are taken from
    `spec` by name and place (`<secret>`) or by digest, keyed with one of `keys` (the hosts' salts) or
    unsalted (an older release), and SpecError names any the inventory no longer has.
    """
    target = spec
    if planned is not None:
        data, missing = secret_env.unredact_spec(planned, spec.model_dump(mode="json"), (keys or {}).values())
        if missing:
            raise SpecError([Problem(field="server_env", message=f"the secret values of {', '.join(missing)} in "
                                                                 "this release differ from the inventory's",
                                     fix="deploy with the inventory's secrets first (playbooks/deploy.yml)")])
        target = Deployment.model_validate(data)
    return {name: services.secret_env_files(target, name) for name in play_hosts if name in target.hosts}


def host_layouts(spec: Deployment, play_hosts: list[str]) -> dict[str, Any]:
    """Per play host: its services, GPUs, ports, install root and service manager (no files)."""
    return _layouts(spec, play_hosts, _ordered_services(spec))


def _layouts(spec: Deployment, play_hosts: list[str], defs: list[services.ServiceDefinition]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in play_hosts:
        host_defs = [d for d in defs if d.host == name]
        settings = spec.hosts.get(name)
        out[name] = {
            "services": [d.name for d in host_defs],
            "gpus": sorted({g for d in host_defs for g in d.gpus}),
            "ports": sorted({p for d in host_defs for p in d.ports}),
            # The address a server's ports are bound to (its node's listen): preflight lets a listener on another
            # address keep them. The router's are left out (they count as bound to every address).
            "port_addresses": {str(p): settings.listen for d in host_defs if d.role != "router" for p in d.ports}
            if settings else {},
            "install_root": settings.install_root if settings else "",
            "service_manager": settings.service_manager if settings else "supervisor",
            # Preflight (dsv4_access): the user the services run as.
            "service_user": settings.service_user if settings else "",
        }
    return out


def _ordered_services(spec: Deployment) -> list[services.ServiceDefinition]:
    """Every service of the deployment in start order (workers, then the router)."""
    return sorted(services.build_services(spec), key=lambda s: (s.start_order, s.name))


def gate_targets(spec: Deployment) -> dict[str, Any]:
    """What the gates talk to: endpoint, router, workers and the overrides each must show."""
    return _targets(spec, _ordered_services(spec))


def _router_metrics_url(spec: Deployment) -> str | None:
    """Where the controller reads the router's metrics (PD only): its listener, or its host's address
    when it listens on every interface."""
    if spec.topology != "pd":
        return None
    listen = spec.router.prometheus_listen
    address = spec.host(spec.router.host).address if listen in ("0.0.0.0", "::") else listen
    address = f"[{address}]" if ":" in address else address
    return f"http://{address}:{services.prometheus_port(spec.router)}"


def _targets(spec: Deployment, defs: list[services.ServiceDefinition]) -> dict[str, Any]:
    by_port = {(w.host, w.port): w for _, w in spec.workers()}
    # A multi-node server is gated at rank 0: ranks 1 and up answer only a dummy /health (sglang #12297).
    workers = [d for d in defs if d.role != "router" and d.rank0 is None]
    served = _endpoint_service(spec, defs)
    endpoint = served.url
    targets = {
        "topology": spec.topology,
        # Which router serves a PD deployment (sglang-router or smg); None without one.
        "router": spec.router_implementation if spec.topology == "pd" else None,
        "served_model_name": spec.model.served_name,
        # Whether smoke also wants the answer to say OK (the model profile's smoke_expects_ok).
        "smoke_expects_ok": memory.smoke_expects_ok(spec),
        # The model profile's reference task scores (the accuracy gate's expected score).
        "reference_scores": memory.reference_scores(spec),
        "endpoint": endpoint,
        "router_url": endpoint if spec.topology == "pd" else None,
        "router_metrics_url": _router_metrics_url(spec),
        # How long the router's circuit breaker stays open once tripped (smoke waits one window).
        "router_breaker_s": _breaker_window(spec),
        "endpoint_host": served.host,
        # The router's program (PD): the readiness wait can start it once its workers are healthy.
        "router_service": served.name if spec.topology == "pd" else None,
        "router_takes_workers": spec.topology == "pd"
        and routers.implementation(spec.router_implementation).takes_workers_at_run_time,
        # host_address: where the controller reaches the worker's host (dsv4deploy.gates.reach decides
        # whether a worker's checks run there or on the host); api_key_file: the key on that host.
        "workers": [{"name": d.name, "role": d.role, "host": d.host, "url": d.url,
                     "host_address": spec.host(d.host).address, "api_key_file": d.api_key_file,
                     "sglang_version": d.sglang_version,
                     "bootstrap_port": getattr(by_port[(d.host, d.ports[0])], "bootstrap_port", None)
                     if d.role == "prefill" else None} for d in workers],
        # A worker's first port is its HTTP port (a prefill's bootstrap port follows it).
        "expected_overrides": {d.name: spec.model_override_args(by_port[(d.host, d.ports[0])]) for d in workers},
        # What each server's /server_info must report for the settings the spec sets (config gate).
        "expected_settings": {d.name: _expected_settings(spec, by_port[(d.host, d.ports[0])]) for d in workers},
        "hosts_in_use": spec.hosts_in_use(),
        "gpu_query_command": spec.gpu_query_command,
        **memory.startup_window(spec),
        "ranks": [{"name": d.name, "host": d.host, "rank0": d.rank0,
                   "rank0_url": next(w.url for w in workers if w.name == d.rank0)}
                  for d in defs if d.rank0 is not None],
        "expected_transports": {d.name: by_port[(d.host, d.ports[0])].transport for d in workers
                                if getattr(by_port[(d.host, d.ports[0])], "transport", None)},
    }
    return GateTargets.model_validate(targets).model_dump(mode="json")


def _expected_settings(spec: Deployment, worker: Any) -> dict[str, Any]:
    wanted = {"model_path": spec.model.path}
    for key in ("chat_template", "page_size", "kv_cache_dtype", "context_length"):
        value = spec.effective(worker, key)
        if value is not None:
            wanted[key] = value
    return wanted


def _breaker_window(spec: Deployment) -> int | None:
    router = spec.router if spec.topology == "pd" else None
    if router is None or not router.circuit_breaker.enabled:
        return None
    return router.circuit_breaker.timeout_s


def targets_from_release_spec(spec_json: str) -> dict[str, Any]:
    """Gate targets of an installed release, from its spec.json (for verifying a rollback)."""
    data = json.loads(spec_json)
    return gate_targets(Deployment.model_validate(data["deployment"]))


def _endpoint_service(spec: Deployment, defs: list[services.ServiceDefinition]) -> services.ServiceDefinition:
    """The service clients use: the router in PD, the combined server otherwise."""
    wanted = "router" if spec.topology == "pd" else "combined"
    # A validated spec always has one: pd requires a router, combined a combined server.
    return next(d for d in defs if d.role == wanted)
