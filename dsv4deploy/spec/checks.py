"""Cross-field checks of a structurally valid spec: topology, placement, GPUs, ports, agreement, flags.

`check_deployment` runs them all (and the checks of values written onto hosts, dsv4deploy.spec.values).
"""

from __future__ import annotations

import json
from typing import Any

from dsv4deploy.sglang import flags, routers, versions
from dsv4deploy.spec.engine_checks import engine_problems
from dsv4deploy.spec.extra_args import check_extra_args
from dsv4deploy.spec.models import MODEL_AFFECTING, Deployment, PrefillSpec, Problem
from dsv4deploy.spec.reachability import reachability_problems
from dsv4deploy.spec.recipes import check_recipes
from dsv4deploy.spec.secret_flags import secret_flag_problems, url_credential_env_problems
from dsv4deploy.spec.values import check_values

# -- cross-field checks ------------------------------------------------------------------------

def check_deployment(spec: Deployment) -> list[Problem]:
    """Every cross-field problem of a structurally valid spec."""
    problems: list[Problem] = []
    problems += _check_topology(spec)
    if problems:
        return problems
    problems += _check_hosts_known(spec)
    if problems:
        return problems
    problems += _check_versions(spec)
    problems += _check_tp(spec)
    problems += _check_gpus(spec)
    problems += _check_ports(spec)
    problems += _check_agreement(spec)
    problems += _check_overrides(spec)
    problems += _check_extra_args(spec)
    problems += check_recipes(spec)
    problems += check_extra_args(spec, RENDERED_SERVER_FLAGS)
    problems += secret_flag_problems(spec)
    problems += url_credential_env_problems(spec)
    problems += check_values(spec)
    problems += _check_router_launcher(spec)
    problems += engine_problems(spec)
    problems += _check_router_policies(spec)
    problems += reachability_problems(spec)
    return _unique(problems)


def _unique(problems: list[Problem]) -> list[Problem]:
    """Drop repeats (e.g. one top-level index_topk refused once per worker on the same host)."""
    seen: set[str] = set()
    out = []
    for p in problems:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out


def _check_topology(spec: Deployment) -> list[Problem]:
    if spec.topology == "combined":
        if spec.combined is None:
            return [Problem(field="combined", message="topology is 'combined' but no combined server is defined",
                            fix="define combined: {host, gpus, tp_size, port, mem_fraction_static}")]
        return []
    out = []
    for role in ("prefill", "decode"):
        if not getattr(spec, role):
            out.append(Problem(field=role, message=f"topology is 'pd' but no {role} worker is defined",
                               fix=f"define at least one {role} worker"))
    if spec.router is None:
        out.append(Problem(field="router", message="topology is 'pd' but no router is defined",
                           fix="define router: {host, port}"))
    return out


def _check_hosts_known(spec: Deployment) -> list[Problem]:
    out = []
    placed = [(path, w.host) for path, w in spec.workers()]
    # The other nodes of a server that spans several (`nodes`, rank 0 first).
    placed += [(f"{path}.nodes", node) for path, w in spec.workers() for node in w.node_names() if node != w.host]
    if spec.topology == "pd" and spec.router:
        placed.append(("router", spec.router.host))
    for path, host in placed:
        if host not in spec.hosts:
            field = path if path.endswith(".nodes") else f"{path}.host"
            out.append(Problem(field=field, host=host, message=f"host '{host}' is not in the inventory",
                               fix=f"add {host} to the inventory or use one of: {', '.join(sorted(spec.hosts))}"))
    return out


def _check_versions(spec: Deployment) -> list[Problem]:
    out = []
    for name in spec.hosts_in_use():
        version = spec.host(name).sglang_version
        if not versions.is_supported(version):
            out.append(Problem(field="sglang_version", host=name,
                               message=f"sglang {version} is older than, or of another series than, the releases "
                                       f"dsv4deploy knows the flags of ({', '.join(versions.known_versions())}; a "
                                       "newer patch release uses the nearest of them)",
                               fix="set sglang_version to the version installed on the host (python -c 'import "
                                   "sglang; print(sglang.__version__)'); for an older or newer series, install a "
                                   "known release"))
    return out


def _check_tp(spec: Deployment) -> list[Problem]:
    out = []
    for path, w in spec.workers():
        nodes = len(w.node_names())
        if nodes > 1 and w.gpu_total() != w.tp_size:
            out.append(Problem(field=f"{path}.tp_size", host=w.host,
                               message=f"tp_size {w.tp_size} does not match {len(w.gpus)} GPUs {w.gpus} on each of "
                                       f"{nodes} nodes ({w.gpu_total()})",
                               fix=f"set tp_size: {w.gpu_total()}, or list {w.tp_size // nodes} GPUs per node"))
        elif nodes == 1 and len(w.gpus) != w.tp_size:
            out.append(Problem(field=f"{path}.tp_size", host=w.host,
                               message=f"tp_size {w.tp_size} does not match {len(w.gpus)} GPUs {w.gpus}",
                               fix=_tp_fix(w.tp_size, list(w.gpus))))
        if len(set(w.gpus)) != len(w.gpus):
            out.append(Problem(field=f"{path}.gpus", host=w.host, message=f"GPU list {w.gpus} repeats a GPU",
                               fix="list each GPU once"))
        for node in w.node_names():
            if node not in spec.hosts:
                continue
            count = spec.host(node).gpu_count
            missing = [g for g in w.gpus if g >= count]
            if missing:
                out.append(Problem(field=f"{path}.gpus", host=node,
                                   message=f"GPUs {missing} do not exist (the host has "
                                           f"{f'{count}: 0-{count - 1}' if count else 'none'})",
                                   fix="use GPU indices the host has, or set gpu_count for the host"))
    return out


# Tensor-parallel sizes a model splits over: its attention heads divide by them (powers of two).
TP_SIZES = (1, 2, 4, 8, 16)


def _tp_fix(tp_size: int, gpus: list[int]) -> str:
    """How to make tp_size and the GPU list agree, never suggesting a tp size no model splits over."""
    listed = f"list {tp_size} GPUs (e.g. {gpus[:tp_size]})" if tp_size <= len(gpus) else f"list {tp_size} GPUs"
    if len(gpus) in TP_SIZES:
        return f"set tp_size: {len(gpus)} or {listed}"
    return f"{listed}; tp_size is one of {', '.join(map(str, TP_SIZES))} (the model's heads split evenly)"


def _check_gpus(spec: Deployment) -> list[Problem]:
    out = []
    owner: dict[tuple[str, int], str] = {}
    for path, w in spec.workers():
        for node in w.node_names():
            clash = sorted({owner[(node, g)] for g in w.gpus if (node, g) in owner})
            for other in clash:
                shared = sorted(g for g in w.gpus if owner.get((node, g)) == other)
                out.append(Problem(field=f"{path}.gpus", host=node,
                                   message=f"GPUs {shared} are also used by {other}",
                                   fix="give each server its own GPUs on a host (e.g. prefill 0-3, decode 4-7)"))
            for g in w.gpus:
                owner.setdefault((node, g), path)
    return out


# sglang-router 0.3.2 serves Prometheus metrics on this port (on 0.0.0.0) when --prometheus-port is not given.
ROUTER_DEFAULT_PROMETHEUS_PORT = 29000
PORT_FIX = "give every listener on a host its own port"
# Ports below this need CAP_NET_BIND_SERVICE; the units grant no capability.
PRIVILEGED_PORTS = 1024


def _check_ports(spec: Deployment) -> list[Problem]:
    out = []
    used: dict[tuple[str, int], str] = {}

    def claim(host: str, port: int, field: str, fix: str = PORT_FIX) -> None:
        if port < PRIVILEGED_PORTS:
            out.append(Problem(field=field, host=host,
                               message=f"port {port} is below {PRIVILEGED_PORTS}: binding it needs "
                                       "CAP_NET_BIND_SERVICE, which the services do not have",
                               fix=f"use a port of {PRIVILEGED_PORTS} or above (put a reverse proxy in front "
                                   "for 80 or 443)"))
        if (host, port) in used:
            out.append(Problem(field=field, host=host, message=f"port {port} is also used by {used[(host, port)]}",
                               fix=fix))
        else:
            used[(host, port)] = field

    for path, w in spec.workers():
        for node in w.node_names():
            claim(node, w.port, f"{path}.port")
        if isinstance(w, PrefillSpec):
            claim(w.host, w.bootstrap_port, f"{path}.bootstrap_port")
        if len(w.node_names()) > 1 and w.dist_init_port is not None:
            claim(w.host, w.dist_init_port, f"{path}.dist_init_port")
    if spec.topology == "pd" and spec.router:
        claim(spec.router.host, spec.router.port, "router.port")
        if spec.router.prometheus_port is not None:
            claim(spec.router.host, spec.router.prometheus_port, "router.prometheus_port")
        else:
            claim(spec.router.host, ROUTER_DEFAULT_PROMETHEUS_PORT, "router.prometheus_port",
                  f"set router.prometheus_port to a free port (unset, sglang-router serves metrics on "
                  f"{ROUTER_DEFAULT_PROMETHEUS_PORT})")
    return out


def _check_agreement(spec: Deployment) -> list[Problem]:
    """Prefill and decode must compute the same model: unequal settings hang or garble in PD."""
    if spec.topology != "pd":
        return []
    out = []
    workers = spec.workers()
    ref_path, ref = workers[0]
    for path, w in workers[1:]:
        for name in MODEL_AFFECTING:
            a, b = spec.effective(ref, name), spec.effective(w, name)
            if name == "model_overrides":
                # index_topk is compared on its own; here only the other override keys.
                a = {**(spec.model_overrides or {}), **(ref.model_overrides or {})}
                b = {**(spec.model_overrides or {}), **(w.model_overrides or {})}
            if a != b:
                out.append(Problem(field=f"{path}.{name}", host=w.host,
                                   message=f"{name} {_show(b)} differs from {ref_path} ({_show(a)})",
                                   fix=f"set {name} once at the top level, or to the same value on every worker"))
    return out


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else repr(value)


def _check_overrides(spec: Deployment) -> list[Problem]:
    out = []
    for path, w in spec.workers():
        topk = spec.effective(w, "index_topk")
        if topk is None:
            continue
        version = spec.host(w.host).sglang_version
        if not versions.is_supported(version):
            continue
        allowed = versions.release(version).index_topk_allowed
        if allowed and topk not in allowed:
            field = f"{path}.index_topk" if w.index_topk is not None else "index_topk"
            out.append(Problem(field=field, host=w.host,
                               message=f"sglang {version}'s DeepSeek-V4 backend accepts index_topk "
                                       f"{' or '.join(map(str, allowed))} only, got {topk}",
                               fix=f"set index_topk to {' or '.join(map(str, allowed))}"))
    return out


# Flags the tool renders itself: setting them again through extra_args would be ambiguous.
RENDERED_SERVER_FLAGS = (
    "--model-path", "--served-model-name", "--tp-size", "--base-gpu-id", "--host", "--port",
    "--mem-fraction-static", "--json-model-override-args", "--chat-template", "--page-size",
    "--kv-cache-dtype", "--context-length", "--disaggregation-mode", "--disaggregation-bootstrap-port",
    "--disaggregation-transfer-backend", "--disaggregation-ib-device", "--api-key",
    "--reasoning-parser", "--tool-call-parser",
    # cuda_graph: {enabled, max_bs}, spelled per sglang version (dsv4deploy.sglang.flags).
    "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill",
    "--disable-cuda-graph", "--disable-decode-cuda-graph", "--disable-prefill-cuda-graph",
    # The recipes' settings (attn_dp_size, moe, speculative, max_running_requests, nodes; dsv4deploy.spec.recipes).
    "--dp-size", "--enable-dp-attention", "--attn-dp-size", "--ep-size", "--moe-a2a-backend", "--moe-runner-backend",
    "--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--max-running-requests", "--nnodes", "--node-rank", "--dist-init-addr",
)
# Everything dsv4deploy.plan.services.router_argv renders (router.{policy, retry, circuit_breaker, ...}).
RENDERED_ROUTER_FLAGS = routers.rendered_flags()
# What to use instead of a flag a sglang version refuses or deprecates (dsv4deploy.sglang.flags, `forbidden`).
FORBIDDEN_FLAG_REPLACEMENTS = {
    "--cuda-graph-max-bs": "cuda_graph.max_bs (rendered as --cuda-graph-max-bs-decode or --cuda-graph-max-bs-prefill)",
    "--cuda-graph-bs": "--cuda-graph-bs-decode or --cuda-graph-bs-prefill",
    "--disable-cuda-graph": "cuda_graph.enabled: false (rendered as --disable-decode-cuda-graph "
                            "and/or --disable-prefill-cuda-graph)",
    "--disable-piecewise-cuda-graph": "--cuda-graph-backend-prefill disabled",
    "--nsa-prefill-backend": "--dsa-prefill-backend",
    "--nsa-decode-backend": "--dsa-decode-backend",
    "--enable-dp-attention": "--attn-dp-size N",
}


def _check_extra_args(spec: Deployment) -> list[Problem]:
    out = []
    for path, w in spec.workers():
        version = spec.host(w.host).sglang_version
        forbidden = flags.forbidden_flags_in(version, w.extra_args) if versions.is_supported(version) else []
        out += [_forbidden_flag(path, w.host, version, arg) for arg in forbidden]
        out += _rendered_flags(path, w.host, [a for a in w.extra_args if a not in forbidden], RENDERED_SERVER_FLAGS)
    if spec.topology == "pd" and spec.router:
        impl = routers.implementation(spec.router_implementation)
        refused = [a for a in spec.router.extra_args if a.split("=", 1)[0] in impl.forbidden]
        out += [Problem(field="router.extra_args", host=spec.router.host,
                        message=f"{impl.title} has no '{a.split('=', 1)[0]}'",
                        fix="remove it (or set router_implementation to a router that has it)") for a in refused]
        out += _rendered_flags("router", spec.router.host, spec.router.extra_args, RENDERED_ROUTER_FLAGS)
    return out


def _forbidden_flag(path: str, host: str, version: str, arg: str) -> Problem:
    flag = arg.split("=", 1)[0]
    replacement = FORBIDDEN_FLAG_REPLACEMENTS.get(flag, "the spelling of this sglang version")
    return Problem(field=f"{path}.extra_args", host=host,
                   message=f"sglang {version} has removed or deprecated '{flag}'",
                   fix=f"remove it and use {replacement}")


def _rendered_flags(path: str, host: str, args: list[str], rendered: tuple[str, ...]) -> list[Problem]:
    """Flags in `args` (or argparse abbreviations of them) that the tool renders itself."""
    out = []
    for arg in args:
        flag = arg.split("=", 1)[0]
        if not flag.startswith("--"):
            continue
        hit = [flag] if flag in rendered else [r for r in rendered if len(flag) > 3 and r.startswith(flag)]
        if hit:
            out.append(Problem(field=f"{path}.extra_args", host=host,
                               message=f"'{flag}' is rendered from the spec already ({hit[0]})",
                               fix="remove it from extra_args and set the spec field instead"))
        if "--api-key" in arg:
            out.append(Problem(field=f"{path}.extra_args", host=host,
                               message="an API key must not be given inline",
                               fix="use api_key: {file: PATH} or {vault_var: NAME}"))
    return out


def _check_router_launcher(spec: Deployment) -> list[Problem]:
    """A per-implementation launcher mapping must name known routers and hold non-empty argvs."""
    launcher = spec.router_launcher
    if not isinstance(launcher, dict):
        return [] if launcher is None or launcher else [
            Problem(field="router_launcher", message="is an empty command", fix="give the router's argv or unset it")]
    out = [Problem(field=f"router_launcher.{name}", message=f"unknown router implementation '{name}'",
                   fix=f"use the keys {' and '.join(routers.IMPLEMENTATIONS)}")
           for name in launcher if name not in routers.IMPLEMENTATIONS]
    out += [Problem(field=f"router_launcher.{name}", message="is an empty command", fix="give the router's argv")
            for name, argv in launcher.items() if name in routers.IMPLEMENTATIONS and not argv]
    return out


def _check_router_policies(spec: Deployment) -> list[Problem]:
    """router.policy, prefill_policy and decode_policy must be choices of the chosen router's parser."""
    if spec.topology != "pd" or spec.router is None:
        return []
    impl = routers.implementation(spec.router_implementation)
    out = []
    for name in ("policy", "prefill_policy", "decode_policy"):
        value = getattr(spec.router, name)
        allowed = impl.policies + (routers.PREFILL_ONLY_POLICIES if name == "prefill_policy" else ())
        if value is None or not allowed or value in allowed:
            continue
        meant = _closest_choice(value, allowed)
        out.append(Problem(field=f"router.{name}", host=spec.router.host,
                           message=f"{impl.title} has no policy {value!r}",
                           fix=(f"did you mean {meant}? " if meant else "") + f"use one of {', '.join(allowed)}"))
    return out


def _closest_choice(value: str, choices: tuple[str, ...]) -> str | None:
    import difflib

    aliases = {"rr": "round_robin", "p2c": "power_of_two"}
    if value in aliases and aliases[value] in choices:
        return aliases[value]
    found = difflib.get_close_matches(value.replace("-", "_"), choices, n=1, cutoff=0.6)
    return found[0] if found else None
