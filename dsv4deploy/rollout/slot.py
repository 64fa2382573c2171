"""What the strategies that start a release beside the serving one share (blue_green's slot, a roll's surge
workers): where a worker of the other slot runs (GPUs and ports shifted), why it cannot run there, and the
slot's deployment under its own install root (`slot_spec`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsv4deploy.plan.services import derived_name, prometheus_port
from dsv4deploy.rollout.settings import VARS, RolloutSettings
from dsv4deploy.spec import Deployment, PrefillSpec, Problem

MAX_PORT = 65535


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
        if multi_node(w) and w.dist_init_port is not None:
            out[path]["dist_init_port"] = w.dist_init_port + settings.port_offset
    return out


def multi_node(w: Any) -> bool:
    """Whether worker `w` is one server over several nodes (a rank on each)."""
    return len(w.node_names()) > 1


def preview_router_port(spec: Deployment, settings: RolloutSettings) -> int | None:
    """The preview router's port: the production router's plus the port offset (None without a router)."""
    return spec.router.port + settings.port_offset if spec.router else None


def fit_one(spec: Deployment, settings: RolloutSettings, path: str, w: Any, new: Mapping[str, Any], who: str,
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
                               fix=gpu_fix(spec, node)))
        shared = sorted({used_gpus[(node, g)] for g in new["gpus"] if (node, g) in used_gpus})
        if shared:
            out.append(Problem(field=var, host=node,
                               message=f"{who} puts the new {path} on GPUs {new['gpus']}, which the serving "
                                       f"{', '.join(shared)} uses: both releases cannot run at once",
                               fix=gpu_fix(spec, node)))
        out += port_problems(node, new["port"], f"the new {path}.port", listeners, settings)
    for port_key in ("bootstrap_port", "dist_init_port"):
        port = new.get(port_key)
        if port is not None:
            out += port_problems(w.host, port, f"the new {path}.{port_key}", listeners, settings)
    return out


def gpu_fix(spec: Deployment, host: str) -> str:
    """The fix for a slot that does not fit `host`'s GPUs."""
    taken = sum(len(w.gpus) for _, w in spec.workers() if host in w.node_names())
    return (f"give each release at most half of a host's GPUs (e.g. tp 2 per role on 8 GPUs with "
            f"{VARS['gpu_offset']}: 4; this release takes {taken} of {host}'s {spec.host(host).gpu_count}), "
            f"or set {VARS['strategy']}: recreate")


def listeners(spec: Deployment) -> dict[tuple[str, int], str]:
    """Every port the serving slot listens on, per host (a multi-node server's rank on each of its nodes,
    and its ranks' rendezvous on rank 0's)."""
    out: dict[tuple[str, int], str] = {}
    for path, w in spec.workers():
        for node in w.node_names():
            out[(node, w.port)] = f"{path}.port"
        if isinstance(w, PrefillSpec):
            out[(w.host, w.bootstrap_port)] = f"{path}.bootstrap_port"
        if multi_node(w) and w.dist_init_port is not None:
            out[(w.host, w.dist_init_port)] = f"{path}.dist_init_port"
    if spec.router:
        out[(spec.router.host, spec.router.port)] = "router.port"
        out[(spec.router.host, prometheus_port(spec.router))] = "router.prometheus_port"
    return out


def port_problems(host: str, port: int, what: str, listeners: Mapping[tuple[str, int], str],
                  settings: RolloutSettings) -> list[Problem]:
    """Why `what` on `host`:`port` cannot listen beside the serving slot (`listeners`)."""
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


# The other slot's install root, under the serving one's: its own current link, releases, logs,
# secrets and supervisord (or, with systemd, unit names of its own), so nothing of the two releases
# shares a path or a program name. The serving slot's layout stays exactly what recreate uses.
SLOT_DIR = "slot-b"


def slot_root(install_root: str) -> str:
    """The other slot's install root beside `install_root` (the serving slot's)."""
    return f"{install_root.rstrip('/')}/{SLOT_DIR}"


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
    # Unset, both routers would take sglang-router's default metrics port and the second would not start.
    data["router"]["prometheus_port"] = prometheus_port(spec.router) + port_offset
    for host in data["hosts"].values():
        host["install_root"] = slot_root(host["install_root"])
    base = spec.deployment_name or derived_name(spec.host(spec.router.host).install_root)
    data["deployment_name"] = f"{base[:22]}{SLOT_DIR[-1]}"
    return Deployment.model_validate(data)
