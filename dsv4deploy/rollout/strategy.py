"""How a release replaces the serving one: `recreate`, `blue_green` or `rolling` (`dsv4_rollout_strategy`).

- ``recreate`` (the default): the serving release stops, then the new one starts and is gated. An outage
  of the load time plus the gates.
- ``blue_green``: the new release starts beside the serving one - each worker on its own host (over
  several hosts each gets the slot where it has workers, `slot_hosts`), on GPUs shifted by
  ``dsv4_rollout_blue_green_gpu_offset`` and ports shifted by ``dsv4_rollout_blue_green_port_offset`` -
  behind a preview router of its own on the production router's port plus the port offset (the other
  "slot", `beside_spec`); once gated there and switched to, it moves to the spec's own GPUs and ports
  (roles/dsv4_blue_green/tasks/main.yml). It is refused, by field, host and fix, unless both slots
  fit each host at once: GPUs that exist and are not shared, memory per GPU, ports. A server over several
  nodes moves as one: each rank beside its own on its node, the ranks meeting at a shifted dist_init_port.
- ``rolling``: xPyD over hosts, ``dsv4_rollout_rolling_max_unavailable`` workers of each role at a time, prefill
  and decode in step (``rolling.py``: the steps, and the refusal of a layout the router cannot keep serving
  through).

The settings are playbook inputs (role ``dsv4_rollout``), not part of the deployment spec: they choose how
a release is rolled out, not what it is, so they never change a release's files or its id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from dsv4deploy.plan import memory, services
from dsv4deploy.plan.services import derived_name
from dsv4deploy.rollout import rolling
from dsv4deploy.spec import Deployment, PrefillSpec, Problem, SpecError, StrictModel

Strategy = Literal["recreate", "blue_green", "rolling"]
VARS = {
    "strategy": "dsv4_rollout_strategy",
    "gpu_offset": "dsv4_rollout_blue_green_gpu_offset",
    "port_offset": "dsv4_rollout_blue_green_port_offset",
    "keep_previous_s": "dsv4_rollout_keep_previous_s",
    "max_unavailable": rolling.MAX_UNAVAILABLE_VAR,
}
MAX_PORT = 65535


class RolloutSettings(StrictModel):
    """The rollout's own inputs (the `dsv4_rollout_*` variables)."""

    strategy: Strategy = "recreate"
    # Unset: half the host's GPUs (4 on 8), so tp 2 per role on 8 GPUs fits twice.
    gpu_offset: Annotated[int, Field(ge=1)] | None = None
    port_offset: Annotated[int, Field(ge=1)] = 100
    # How long the previous release's servers stay warm after a blue_green switch (a rollback then is a
    # switch back); after that the next run stops them and a rollback is a recreate. 0: stopped at once.
    keep_previous_s: Annotated[int, Field(ge=0)] = 0
    # rolling: how many workers of each role are out of the production router at once.
    max_unavailable: Annotated[int, Field(ge=1)] = 1


def load_rollout(variables: Mapping[str, Any]) -> RolloutSettings:
    """The rollout settings from Ansible variables; SpecError names each bad variable."""
    data = {key: variables[var] for key, var in VARS.items() if variables.get(var) is not None}
    try:
        return RolloutSettings.model_validate(data)
    except ValidationError as exc:
        raise SpecError([Problem(field=VARS.get(str(err["loc"][0]), str(err["loc"][0])),
                                 message=f"{err['msg']} (got {err.get('input')!r})",
                                 fix=_fix_for(str(err["loc"][0])))
                         for err in exc.errors()]) from None


def _fix_for(key: str) -> str:
    return {"strategy": "set dsv4_rollout_strategy to recreate, blue_green or rolling"}.get(
        key, f"set {VARS.get(key, key)} to a whole number of at least 1")


def gpu_offset(spec: Deployment, settings: RolloutSettings, host: str) -> int:
    """The GPU shift of the other slot on `host`."""
    return settings.gpu_offset if settings.gpu_offset is not None else max(1, spec.host(host).gpu_count // 2)


def beside(spec: Deployment, settings: RolloutSettings) -> dict[str, dict[str, Any]]:
    """Where each worker of the other slot runs: field path -> {host, gpus, port, bootstrap_port}, and
    dist_init_port for a server over several nodes. Such a server moves as one: every rank, on its own
    node, takes the same shifted GPUs and port, and the ranks meet at the shifted dist_init_port (the
    serving ranks' rendezvous port stays theirs)."""
    out: dict[str, dict[str, Any]] = {}
    for path, w in spec.workers():
        shift = gpu_offset(spec, settings, w.host)
        out[path] = {"host": w.host, "gpus": [g + shift for g in w.gpus], "port": w.port + settings.port_offset,
                     "bootstrap_port": (w.bootstrap_port + settings.port_offset
                                        if isinstance(w, PrefillSpec) else None)}
        if _multi_node(w) and w.dist_init_port is not None:
            out[path]["dist_init_port"] = w.dist_init_port + settings.port_offset
    return out


def _multi_node(w: Any) -> bool:
    """Whether worker `w` is one server over several nodes (a rank on each)."""
    return len(w.node_names()) > 1


def preview_router_port(spec: Deployment, settings: RolloutSettings) -> int | None:
    """The preview router's port: the production router's plus the port offset (None without a router)."""
    return spec.router.port + settings.port_offset if spec.router else None


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
    listeners = _listeners(spec)
    for path, w in spec.workers():
        out += _fit_one(spec, settings, path, w, other[path], "blue_green", used_gpus, listeners)
    out += _port_problems(spec.router.host, preview_router_port(spec, settings) or 0, "the preview router",
                          listeners, settings)
    # Memory per GPU: the new slot's servers on its own GPUs, as the memory check judges the serving one.
    out += [Problem(field=p.field, host=p.host, message=f"blue_green (the new release beside the serving one): "
                                                        f"{p.message}", fix=p.fix)
            for p in memory.problems_from_memory(memory.check_memory(spec))]
    return out


def _fit_one(spec: Deployment, settings: RolloutSettings, path: str, w: Any, new: Mapping[str, Any], who: str,
             used_gpus: Mapping[tuple[str, int], str], listeners: Mapping[tuple[str, int], str]) -> list[Problem]:
    """Why the new `path` on `new`'s GPUs and ports cannot run beside the serving one (`who` puts it there).
    A server over several nodes is judged on each: every rank takes the GPUs and the port there."""
    out: list[Problem] = []
    var = VARS["gpu_offset"]
    for node in w.node_names():
        count = spec.host(node).gpu_count
        missing = [g for g in new["gpus"] if g >= count]
        if missing:
            out.append(Problem(field=var, host=node,
                               message=f"{who} puts the new {path} on GPUs {new['gpus']} beside the serving "
                                       f"one's {list(w.gpus)}, but {node} has {count} GPUs (0-{count - 1})",
                               fix=_gpu_fix(spec, node)))
        shared = sorted({used_gpus[(node, g)] for g in new["gpus"] if (node, g) in used_gpus})
        if shared:
            out.append(Problem(field=var, host=node,
                               message=f"{who} puts the new {path} on GPUs {new['gpus']}, which the serving "
                                       f"{', '.join(shared)} uses: both releases cannot run at once",
                               fix=_gpu_fix(spec, node)))
        out += _port_problems(node, new["port"], f"the new {path}.port", listeners, settings)
    for port_key in ("bootstrap_port", "dist_init_port"):
        port = new.get(port_key)
        if port is not None:
            out += _port_problems(w.host, port, f"the new {path}.{port_key}", listeners, settings)
    return out


def _gpu_fix(spec: Deployment, host: str) -> str:
    taken = sum(len(w.gpus) for _, w in spec.workers() if host in w.node_names())
    return (f"give each release at most half of a host's GPUs (e.g. tp 2 per role on 8 GPUs with "
            f"{VARS['gpu_offset']}: 4; this release takes {taken} of {host}'s {spec.host(host).gpu_count}), "
            f"or set {VARS['strategy']}: recreate")


def _listeners(spec: Deployment) -> dict[tuple[str, int], str]:
    """Every port the serving slot listens on, per host (a multi-node server's rank on each of its nodes,
    and its ranks' rendezvous on rank 0's)."""
    out: dict[tuple[str, int], str] = {}
    for path, w in spec.workers():
        for node in w.node_names():
            out[(node, w.port)] = f"{path}.port"
        if isinstance(w, PrefillSpec):
            out[(w.host, w.bootstrap_port)] = f"{path}.bootstrap_port"
        if _multi_node(w) and w.dist_init_port is not None:
            out[(w.host, w.dist_init_port)] = f"{path}.dist_init_port"
    if spec.router:
        out[(spec.router.host, spec.router.port)] = "router.port"
        if spec.router.prometheus_port is not None:
            out[(spec.router.host, spec.router.prometheus_port)] = "router.prometheus_port"
    return out


def _port_problems(host: str, port: int, what: str, listeners: Mapping[tuple[str, int], str],
                   settings: RolloutSettings) -> list[Problem]:
    var = VARS["port_offset"]
    if port > MAX_PORT:
        return [Problem(field=var, host=host, message=f"{what} would listen on port {port} (over {MAX_PORT})",
                        fix=f"set {var} lower (now {settings.port_offset})")]
    if (host, port) in listeners:
        return [Problem(field=var, host=host,
                        message=f"{what} would listen on port {port}, which the serving {listeners[(host, port)]} "
                                "uses",
                        fix=f"set {var} so no shifted port lands on another (now {settings.port_offset})")]
    return []


def rollout_plan(spec: Deployment, settings: RolloutSettings) -> dict[str, Any]:
    """The plan's `rollout` part: the strategy that applies and why; SpecError when blue_green cannot fit."""
    base = {"strategy": settings.strategy, "keep_previous_s": settings.keep_previous_s}
    if settings.strategy == "recreate":
        return {**base, "why": "recreate (the default): the serving release stops before the new one starts; "
                               "clients see an outage of the load time and the gates"}
    if settings.strategy == "rolling":
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
                    for p in _port_problems(spec.router.host if spec.router else "", port, what, _listeners(spec),
                                            settings)]
        if problems:
            raise SpecError(problems)
        steps = rolling.roll_steps(spec, settings.max_unavailable)
        by_surge = (f"; {', '.join(surge)} alone in its role, rolled by surge (its new worker starts beside it on "
                    "spare GPUs and shifted ports, joins before the old one leaves, then moves home)") if surge else ""
        return {**base, "why": f"rolling: {len(steps)} steps of at most {settings.max_unavailable} worker(s) of each "
                               "role, prefill and decode in step, each new batch gated behind a preview router "
                               "before it joins the production router through its worker API; the router keeps a "
                               f"serving prefill and decode at every step{by_surge}",
                "max_unavailable": settings.max_unavailable, "steps": steps, "preview_router_port": preview,
                "port_offset": settings.port_offset, "surge": surge}
    problems = fit_problems(spec, settings)
    if problems:
        raise SpecError(problems)
    return {**base, "why": "blue_green: the new release fits beside the serving one (GPUs, memory per GPU, ports), "
                           "so it starts and is gated behind a preview router while the serving one goes on; "
                           "the production router switches workers through its worker API. If the router's own "
                           f"settings change, replacing it is a short outage{_slot_hosts_line(spec, settings)}",
            "beside": beside(spec, settings), "preview_router_port": preview_router_port(spec, settings),
            "port_offset": settings.port_offset}


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


# The other slot's install root, under the serving one's: its own current link, releases, logs,
# secrets and supervisord (or, with systemd, unit names of its own), so nothing of the two releases
# shares a path or a program name. The serving slot's layout stays exactly what recreate uses.
SLOT_DIR = "slot-b"


def slot_root(install_root: str) -> str:
    """The other slot's install root beside `install_root` (the serving slot's)."""
    return f"{install_root.rstrip('/')}/{SLOT_DIR}"


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


def slot_spec(spec: Deployment, placed: Mapping[str, Mapping[str, Any]], port_offset: int) -> Deployment:
    """`spec` as the other slot runs it: the workers in `placed` (field path -> {gpus, port,
    bootstrap_port, dist_init_port}) moved there, the router on its port + `port_offset` (metrics too),
    every host's install root moved to `slot_root` and a deployment name of its own (systemd unit names
    differ)."""
    data = spec.model_dump()
    for path, place in placed.items():
        role, index = path.rstrip("]").split("[")
        worker = data[role][int(index)]
        worker["gpus"], worker["port"] = place["gpus"], place["port"]
        for key in ("bootstrap_port", "dist_init_port"):
            if place.get(key) is not None:
                worker[key] = place[key]
    assert spec.router is not None  # callers refuse a deployment without one
    data["router"]["port"] = spec.router.port + port_offset
    if data["router"].get("prometheus_port") is not None:
        data["router"]["prometheus_port"] += port_offset
    for host in data["hosts"].values():
        host["install_root"] = slot_root(host["install_root"])
    base = spec.deployment_name or derived_name(spec.host(spec.router.host).install_root)
    data["deployment_name"] = f"{base[:22]}{SLOT_DIR[-1]}"
    return Deployment.model_validate(data)


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
    return _fit_one(spec, settings, path, dict(spec.workers())[path], surge_places(spec, settings)[path],
                    "a surge", used, _listeners(spec))


def surge_spec(spec: Deployment, settings: RolloutSettings) -> Deployment:
    """The slot release of a roll's surge workers (rolling with a role of one worker): `slot_spec` with
    each lone worker at `surge_places` and every other worker where it is (never started in the slot)."""
    return slot_spec(spec, surge_places(spec, settings), settings.port_offset)
