"""blue_green onto other hosts: the inventory names, for each host the serving workers run on, the host the new
release starts on instead (`dsv4_rollout_blue_green_hosts`, {serving host: other host}). The new release runs
there on the spec's own GPUs and ports, behind the preview router on the router's host; once switched to, the
other set serves and the next deploy goes the other way (`reverse`).

`pairing_problems` refuses, by field, host and fix and before anything on a host changes, a pairing that
cannot hold the new release: a host of the serving release with no other host named, another host that is not
in the inventory, serves already, is named twice, or has too few GPUs or too little memory per GPU.
`other_spec` is the deployment the new release runs as on the other set."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from dsv4deploy.plan import memory
from dsv4deploy.spec import Deployment, Problem

HOSTS_VAR = "dsv4_rollout_blue_green_hosts"


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
            out.append(Problem(field=f"{HOSTS_VAR}.{host}", host=other, message="is not in the inventory",
                               fix=f"add {other} to the group dsv4 with its gpu_count, gpu_memory_gib and "
                                   "install_root"))
            continue
        if other in serving or other == spec.router.host:
            out.append(Problem(field=f"{HOSTS_VAR}.{host}", host=other, message="runs the serving release already",
                               fix="name a host the serving release does not use"))
        if other in twice:
            out.append(Problem(field=f"{HOSTS_VAR}.{host}", host=other, message="is named for more than one host",
                               fix="name one other host per serving host"))
        out += _gpu_problems(spec, host, other)
    if not out:
        out += [Problem(field=p.field, host=p.host, message=f"blue_green onto other hosts: {p.message}", fix=p.fix)
                for p in memory.problems_from_memory(memory.check_memory(other_spec(spec, pairs)))]
    return out


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
