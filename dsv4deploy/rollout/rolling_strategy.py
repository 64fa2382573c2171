"""rolling as a strategy (the steps themselves are `rolling`'s): its part of the plan - the steps, the preview
router's ports, the lone workers rolled by surge - and the surge workers' places and slot release (blue_green's
placement for one worker, `slot`)."""

from __future__ import annotations

from typing import Any

from dsv4deploy.plan import services
from dsv4deploy.rollout import rolling
from dsv4deploy.rollout.settings import RolloutSettings
from dsv4deploy.rollout.slot import beside, fit_one, listeners, port_problems, preview_router_port, slot_spec
from dsv4deploy.spec import Deployment, Problem, SpecError


def plan(spec: Deployment, settings: RolloutSettings) -> dict[str, Any]:
    """rolling's part of the plan's `rollout`: why, the steps, the preview router's port, the surge; SpecError
    when the router could not keep serving through a step or a surge worker does not fit."""
    problems = rolling.roll_problems(spec, settings.max_unavailable,
                                     surge_fit=lambda path: surge_problems(spec, settings, path))
    if problems:
        raise SpecError(problems)
    surge = surge_places(spec, settings)
    # The steps' preview router listens where blue_green's does (router port + port offset), its
    # metrics on the production router's metrics port + the offset: neither may land on a listener.
    preview = preview_router_port(spec, settings) or 0
    metrics = services.prometheus_port(spec.router) + settings.port_offset if spec.router else 0
    problems = [p for what, port in (("the preview router", preview), ("the preview router's metrics", metrics))
                for p in port_problems(spec.router.host if spec.router else "", port, what, listeners(spec),
                                       settings)]
    if problems:
        raise SpecError(problems)
    steps = rolling.roll_steps(spec, settings.max_unavailable)
    by_surge = (f"; {', '.join(surge)} alone in its role, rolled by surge (its new worker starts beside it on "
                "spare GPUs and shifted ports, joins before the old one leaves, then moves home)") if surge else ""
    return {"why": f"rolling: {len(steps)} steps of at most {settings.max_unavailable} worker(s) of each "
                   "role, prefill and decode in step, each new batch gated behind a preview router "
                   "before it joins the production router through its worker API; the router keeps a "
                   f"serving prefill and decode at every step{by_surge}",
            "max_unavailable": settings.max_unavailable, "steps": steps, "preview_router_port": preview,
            "port_offset": settings.port_offset, "surge": surge}


def surge_places(spec: Deployment, settings: RolloutSettings) -> dict[str, dict[str, Any]]:
    """Where a roll's surge worker for each lone worker of its role (`rolling.lone_paths`) starts beside
    it - blue_green's placement for one worker: on its ports shifted by the port offset, and on its GPUs
    shifted by the set GPU offset or, with none set, on the host's lowest spare GPUs (used by no worker
    of the spec nor by an earlier surge worker)."""
    workers = dict(spec.workers())
    taken = {(node, g) for w in workers.values() for node in w.node_names() for g in w.gpus}
    out: dict[str, dict[str, Any]] = {}
    for path in rolling.lone_paths(spec):
        w, place = workers[path], beside(spec, settings)[path]
        if settings.gpu_offset is None:
            # A server over several nodes: GPUs spare on every one of them (each rank takes the same).
            count = min(spec.host(node).gpu_count for node in w.node_names())
            spare = [g for g in range(count) if not any((node, g) in taken for node in w.node_names())]
            if len(spare) >= len(w.gpus):
                place["gpus"] = spare[:len(w.gpus)]
        taken |= {(node, g) for node in w.node_names() for g in place["gpus"]}
        out[path] = place
    return out


def surge_problems(spec: Deployment, settings: RolloutSettings, path: str) -> list[Problem]:
    """Why the surge worker for `path` does not fit beside the serving one (empty: it fits)."""
    used = {(node, g): p for p, o in spec.workers() for node in o.node_names() for g in o.gpus}
    workers = dict(spec.workers())
    for other, place in surge_places(spec, settings).items():
        if other != path:
            used.update({(node, g): f"surge {other}" for node in workers[other].node_names() for g in place["gpus"]})
    return fit_one(spec, settings, path, dict(spec.workers())[path], surge_places(spec, settings)[path],
                    "a surge", used, listeners(spec))


def surge_spec(spec: Deployment, settings: RolloutSettings) -> Deployment:
    """The slot release of a roll's surge workers (rolling with a role of one worker): `slot_spec` with
    each lone worker at `surge_places` and every other worker where it is (never started in the slot)."""
    return slot_spec(spec, surge_places(spec, settings), settings.port_offset)
