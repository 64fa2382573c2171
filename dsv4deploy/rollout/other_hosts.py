"""blue_green onto other hosts: the inventory names, for each host the serving workers run on, the host the new
release starts on instead (`dsv4_rollout_blue_green_hosts`, {serving host: other host}). The new release runs
there on the spec's own GPUs and ports, behind the preview router on the router's host; once switched to, the
other set serves and the next deploy goes the other way (`reverse`).

`pairing_problems` refuses, by field, host and fix and before anything on a host changes, a pairing that
cannot hold the new release: a host of the serving release with no other host named, another host that is not
in the inventory, serves already, is named twice, has too few GPUs or too little memory per GPU, or cannot be
reached from the router's host; or a decode of either set that cannot reach a prefill of the other while the
router lists both (`switch_problems`).
`other_spec` is the deployment the new release runs as on the other set; `plan` is the strategy's part of the
plan's `rollout` (dsv4deploy.rollout.strategy)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from dsv4deploy.plan import memory
from dsv4deploy.plan.services import prometheus_port
from dsv4deploy.rollout.settings import VARS, RolloutSettings
from dsv4deploy.rollout.slot import listeners, port_problems, preview_router_port, slot_spec
from dsv4deploy.spec import Deployment, Problem, SpecError, check_deployment
from dsv4deploy.spec.reachability import reachability_problems

HOSTS_VAR = VARS["hosts"]


def plan(spec: Deployment, settings: RolloutSettings) -> dict[str, Any]:
    """blue_green_hosts' part of the plan's `rollout`: why, the pairing and its reverse (the next deploy's), where
    each worker runs on the other hosts, the preview router's port; SpecError when the other hosts cannot hold
    the new release or the preview router cannot listen beside the production one."""
    problems = pairing_problems(spec, settings.hosts)
    if not problems and spec.router is not None:
        router = spec.router
        serving = listeners(spec)
        problems += port_problems(router.host, preview_router_port(spec, settings) or 0, "the preview router",
                                  serving, settings)
        problems += port_problems(router.host, prometheus_port(router) + settings.port_offset,
                                  "the preview router's metrics", serving, settings)
    if problems:
        raise SpecError(problems)
    pairs = {host: settings.hosts[host] for host in worker_hosts(spec)}
    moved = other_spec(spec, pairs)
    return {"why": "blue_green_hosts: the new release starts on the other hosts "
                   f"({', '.join(f'{a} -> {b}' for a, b in pairs.items())}) on the spec's own GPUs and ports, "
                   "and is gated behind a preview router while the serving hosts go on; the production router "
                   "switches workers through its worker API, and the next deploy goes the other way. If the "
                   "router's own settings change, replacing it is a short outage",
            "pairs": pairs, "back": reverse(pairs),
            "other": {path: {"host": w.host, "nodes": w.node_names()} for path, w in moved.workers()},
            "preview_router_port": preview_router_port(spec, settings), "port_offset": settings.port_offset}


def worker_hosts(spec: Deployment) -> dict[str, list[str]]:
    """Each host a serving worker runs on (every rank's node) and the workers' field paths there."""
    out: dict[str, list[str]] = {}
    for path, w in spec.workers():
        for node in w.node_names():
            out.setdefault(node, []).append(path)
    return dict(sorted(out.items()))


def pairing_problems(spec: Deployment, pairs: Mapping[str, str]) -> list[Problem]:
    """Why the new release cannot start on the other hosts `pairs` names (empty when it can)."""
    if spec.topology != "pd" or spec.router is None:
        return [Problem(field=HOSTS_VAR, message="blue_green onto other hosts switches workers behind a router, "
                        "and a combined deployment has none",
                        fix="use dsv4_rollout_strategy: recreate, or topology: pd")]
    serving = worker_hosts(spec)
    out = [Problem(field=HOSTS_VAR, host=host, message=f"runs {', '.join(paths)} but no other host is named for it",
                   fix=f"add '{host}: <other host>' to {HOSTS_VAR}")
           for host, paths in serving.items() if host not in pairs]
    out += [Problem(field=HOSTS_VAR, host=host, message="runs no worker of the serving release",
                    fix=f"name only the hosts of {', '.join(serving)} in {HOSTS_VAR}")
            for host in pairs if host not in serving]
    twice = {other for other, n in Counter(pairs.values()).items() if n > 1}
    for host, other in sorted(pairs.items()):
        if host not in serving:
            continue
        if other not in spec.hosts:
            # The plan is made of the hosts in the play: an unreachable one has left it already.
            out.append(Problem(field=f"{HOSTS_VAR}.{host}", host=other,
                               message="is not among this run's hosts (not in the group dsv4, or unreachable)",
                               fix=f"add {other} to the group dsv4 with its gpu_count, gpu_memory_gib and "
                                   "install_root, or bring it back up"))
            continue
        if other in serving or other == spec.router.host:
            out.append(Problem(field=f"{HOSTS_VAR}.{host}", host=other, message="runs the serving release already",
                               fix="name a host the serving release does not use"))
        if other in twice:
            out.append(Problem(field=f"{HOSTS_VAR}.{host}", host=other, message="is named for more than one host",
                               fix="name one other host per serving host"))
        out += _gpu_problems(spec, host, other)
    if not out:
        # The moved deployment as the plan judges one: reach across hosts (a worker on loopback the router
        # cannot reach from its host), then memory per GPU.
        moved = other_spec(spec, pairs)
        out += [Problem(field=p.field, host=p.host, message=f"blue_green onto other hosts: {p.message}", fix=p.fix)
                for p in [*check_deployment(moved), *memory.problems_from_memory(memory.check_memory(moved))]]
        out += switch_problems(spec, moved)
    return out


def switch_problems(spec: Deployment, moved: Deployment) -> list[Problem]:
    """While the production router switches it lists both sets' workers and may pair a prefill of one set with a
    decode of the other (either way, on the way back too): each decode must reach every prefill's bootstrap port."""
    both = spec.model_copy(update={role: [*getattr(spec, role), *getattr(moved, role)]
                                   for role in ("prefill", "decode")})
    return [Problem(field=p.field, host=p.host, fix=p.fix,
                    message=f"blue_green onto other hosts, while the router lists both sets' workers: {p.message}")
            for p in reachability_problems(both)]


def _gpu_problems(spec: Deployment, host: str, other: str) -> list[Problem]:
    """The other host lacks a GPU index the workers of `host` use."""
    used = sorted({g for _, w in spec.workers() if host in w.node_names() for g in w.gpus})
    count = spec.host(other).gpu_count
    if used and used[-1] >= count:
        return [Problem(field=f"{HOSTS_VAR}.{host}", host=other,
                        message=f"has {count} GPUs, but the workers of {host} use GPUs {used}",
                        fix=f"name a host with at least {used[-1] + 1} GPUs, or correct {other}'s gpu_count")]
    return []


def other_spec(spec: Deployment, pairs: Mapping[str, str]) -> Deployment:
    """The deployment the new release runs as on the other hosts: every worker (each rank) moved to the host
    `pairs` names for its own, on the same GPUs and ports; the router stays where it is."""
    moved = {}
    for role in ("prefill", "decode"):
        moved[role] = [w.model_copy(update={"host": pairs.get(w.host, w.host),
                                            "nodes": [pairs.get(n, n) for n in w.nodes] if w.nodes else None})
                       for w in getattr(spec, role)]
    return spec.model_copy(update=moved)


def reverse(pairs: Mapping[str, str]) -> dict[str, str]:
    """The next deploy's pairing: from the hosts that serve now back to the ones they replaced."""
    return {other: host for host, other in sorted(pairs.items())}


def serving_deployment(serving_spec_json: str) -> Deployment | None:
    """The serving release's deployment, from its spec.json on the router's host (None when none serves)."""
    if not serving_spec_json.strip():
        return None
    return Deployment.model_validate(json.loads(serving_spec_json)["deployment"])


def directed(spec: Deployment, rollout: Mapping[str, Any], serving_spec_json: str,
             serves_as: Callable[[Deployment], bool] | None = None) -> tuple[Deployment, dict[str, Any]]:
    """Which way this deploy goes: the deployment the new release runs as, and the plan's `rollout` with the
    pairing this deploy uses (`going`, serving host -> new host) and the hosts serving now (`serving`).

    The router's host holds the serving release, so its spec.json says which set serves: where that is the
    other set (`pairs`' values), the new release goes back to the inventory's own hosts; where it is the
    inventory's set, to the other hosts. With none serving (a first deploy: nothing to keep serving, so it
    starts as recreate starts it) and with a release equal to the serving one (an unchanged inventory changes
    nothing), it stays where it is (`going` empty). `serves_as` says whether a deployment renders as the serving
    release (default: the same deployment; the playbook's plan compares the rendered spec.json, secret digests
    and all)."""
    pairs = dict(rollout["pairs"])
    serving = serving_deployment(serving_spec_json)
    if serving is None:
        return spec, {**rollout, "going": {}, "serving": [],
                      "why": f"{rollout['why']}. This deploy: nothing serves yet, so the inventory's own hosts"}
    hosts = list(worker_hosts(serving)) if serving is not None else []
    back = bool(hosts) and set(hosts) <= set(pairs.values())
    staying = other_spec(spec, pairs) if back else spec
    if (serves_as or serving.__eq__)(staying):
        why = f"{rollout['why']}. This deploy: the serving release on {', '.join(hosts)} is unchanged"
        return staying, {**rollout, "going": {}, "serving": hosts, "why": why}
    going = reverse(pairs) if back else pairs
    line = ", ".join(f"{a} -> {b}" for a, b in going.items())
    why = f"{rollout['why']}. This deploy: {line}" + (" (back to the inventory's hosts)" if back else "")
    return (spec if back else other_spec(spec, pairs)), {**rollout, "going": going, "serving": hosts, "why": why}


def preview_spec(spec: Deployment, settings: RolloutSettings) -> Deployment:
    """The preview router's deployment: `spec` (the new release, on the hosts it goes to) with its router on the
    production router's port plus the port offset, under the router host's other slot root. Only the router is
    started from it; the workers it fronts run from their own hosts' install roots."""
    if spec.topology != "pd" or spec.router is None:
        raise SpecError(pairing_problems(spec, {}))
    return slot_spec(spec, {}, settings.port_offset)
