"""blue_green: the new release starts beside the serving one - each worker on its own host (over several hosts
each gets the slot where it has workers, `slot_hosts`), on GPUs shifted by ``dsv4_rollout_blue_green_gpu_offset``
and ports shifted by ``dsv4_rollout_blue_green_port_offset`` - behind a preview router of its own on the
production router's port plus the port offset (the other "slot", `beside_spec`); once gated there and switched
to, it moves to the spec's own GPUs and ports (roles/dsv4_blue_green/tasks/main.yml). It is refused, by field,
host and fix, unless both slots fit each host at once: GPUs that exist and are not shared, memory per GPU,
ports. A server over several nodes moves as one: each rank beside its own on its node, the ranks meeting at a
shifted dist_init_port."""

from __future__ import annotations

from typing import Any

from dsv4deploy.plan import memory
from dsv4deploy.rollout.settings import VARS, RolloutSettings
from dsv4deploy.rollout.slot import beside, fit_one, listeners, port_problems, preview_router_port, slot_spec
from dsv4deploy.spec import Deployment, Problem, SpecError


def plan(spec: Deployment, settings: RolloutSettings) -> dict[str, Any]:
    """blue_green's part of the plan's `rollout`: why, where each worker of the slot runs, the preview router's
    port; SpecError when the new release cannot fit beside the serving one."""
    problems = fit_problems(spec, settings)
    if problems:
        raise SpecError(problems)
    return {"why": "blue_green: the new release fits beside the serving one (GPUs, memory per GPU, ports), "
                   "so it starts and is gated behind a preview router while the serving one goes on; "
                   "the production router switches workers through its worker API. If the router's own "
                   f"settings change, replacing it is a short outage{_slot_hosts_line(spec, settings)}",
            "beside": beside(spec, settings), "preview_router_port": preview_router_port(spec, settings),
            "port_offset": settings.port_offset}


def fit_problems(spec: Deployment, settings: RolloutSettings) -> list[Problem]:
    """Why the new release cannot run beside the serving one (empty when both slots fit)."""
    if spec.topology != "pd" or spec.router is None:
        return [Problem(field=VARS["strategy"], message="blue_green switches workers behind a router, and a "
                        "combined deployment has none", fix="use dsv4_rollout_strategy: recreate, or topology: pd")]
    out: list[Problem] = []
    other = beside(spec, settings)
    # A server over several nodes holds its GPUs on each of them (every rank takes the same ones).
    used_gpus: dict[tuple[str, int], str] = {(node, g): path for path, w in spec.workers()
                                             for node in w.node_names() for g in w.gpus}
    serving = listeners(spec)
    for path, w in spec.workers():
        out += fit_one(spec, settings, path, w, other[path], "blue_green", used_gpus, serving)
    out += port_problems(spec.router.host, preview_router_port(spec, settings) or 0, "the preview router",
                         serving, settings)
    # Memory per GPU: the new slot's servers on its own GPUs, as the memory check judges the serving one.
    out += [Problem(field=p.field, host=p.host, message=f"blue_green (the new release beside the serving one): "
                                                        f"{p.message}", fix=p.fix)
            for p in memory.problems_from_memory(memory.check_memory(spec))]
    return out


def slot_hosts(spec: Deployment) -> dict[str, list[str]]:
    """The hosts that get the other slot and what each runs there: its workers' field paths, and
    `router` on the router's host (the preview router); a multi-node server's rank i >= 1 as
    `<path> rank <i>` on its node. A host of the inventory that runs neither gets no slot."""
    out: dict[str, list[str]] = {}
    for path, w in spec.workers():
        for rank, node in enumerate(w.node_names()):
            out.setdefault(node, []).append(f"{path} rank {rank}" if rank else path)
    if spec.router is not None:
        out.setdefault(spec.router.host, []).append("router")
    return dict(sorted(out.items()))


def _slot_hosts_line(spec: Deployment, settings: RolloutSettings) -> str:
    """The plan line's part for a deployment over several hosts: where the slot runs (empty for one host)."""
    hosts = slot_hosts(spec)
    if len(hosts) < 2 or spec.router is None:
        return ""
    each = "; ".join(f"{host}: {', '.join(workers)}" for host, paths in hosts.items()
                     if (workers := [p for p in paths if p != "router"]))
    return (f". Over {len(hosts)} hosts: each gets the slot where it has workers ({each}), and the preview "
            f"router on {spec.router.host} (port {preview_router_port(spec, settings)}) fronts them across hosts")


def beside_spec(spec: Deployment, settings: RolloutSettings) -> Deployment:
    """The deployment the new release runs as beside the serving one: each worker on the GPUs and ports
    `beside` gives, the router on the preview router's port (and its metrics port shifted too), every
    host's install root moved to `slot_root`, and a deployment name of its own so systemd units differ.

    Rendered with `render.render_release` it is the new slot's release; its files differ from the
    serving slot's only where the slot does (GPUs, ports, paths, names). Raises SpecError when
    blue_green does not fit (`fit_problems`)."""
    problems = fit_problems(spec, settings)
    if problems:
        raise SpecError(problems)
    return slot_spec(spec, beside(spec, settings), settings.port_offset)
