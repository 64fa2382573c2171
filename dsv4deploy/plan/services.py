"""Service definitions: for each process of a deployment, exactly what runs, where and how.

`build_services(spec)` turns a validated `Deployment` into one `ServiceDefinition` per process
(prefill and decode workers plus the router for `pd`, the single server for `combined`). Templates
render these and nothing else, so every decision (argv, environment, ports, order) is made and
unit-tested here.

Secrets: the API key is never part of a definition. `api_key_file` names the file the serve script
reads at start (`api_key.file`, or `{install_root}/secrets/api_key` that the playbook writes with
mode 0400 from a vault variable); the script appends `--api-key "$key"` itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dsv4deploy.sglang import flags, routers
from dsv4deploy.spec import (
    ROUTER_DEFAULT_PROMETHEUS_PORT,
    DecodeSpec,
    Deployment,
    HostSpec,
    PrefillSpec,
    RouterSpec,
    WorkerSpec,
    secret_env,
)

Role = Literal["prefill", "decode", "combined", "router"]

BASE_NAME = "sglang-dsv4"
DEFAULT_INSTALL_ROOT = HostSpec.model_fields["install_root"].default
# The host modules tell a router by its name's ending: a combined server's name may not end so.
RESERVED_ENDING = "router"
WORKER_START_ORDER = 10
ROUTER_START_ORDER = 20
# Seconds a stopping server gets before SIGKILL: sglang tears down TP ranks and frees GPU memory.
SERVER_STOP_TIMEOUT_S = 60
# A router's stop timeout is the drain deadline plus this: the service manager must not kill it mid-drain.
ROUTER_STOP_MARGIN_S = 15
# Where the playbook writes a key given as a vault variable (mode 0400, owned by the service user).
VAULT_KEY_RELPATH = "secrets/api_key"


class ServiceDefinition(BaseModel):
    """One process of the deployment, as the templates and the playbooks see it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    role: Role
    host: str
    argv: list[str]
    env: dict[str, str]
    workdir: str
    # File the process's output goes to under supervisor; None under systemd (the journal).
    log_path: str | None
    ports: list[int]
    gpus: list[int]
    # User to run as (spec validation refuses an empty one: it would silently mean root).
    user: str
    start_order: int
    url: str
    service_manager: Literal["systemd", "supervisor"]
    install_root: str
    # The serve script in the active release: what the unit / program executes.
    exec_path: str
    description: str
    # File holding the API key, read by the serve script at start; None = no key.
    api_key_file: str | None
    # Units on the same host this one starts after (the router after its local workers).
    after: list[str]
    stop_timeout_s: int
    # sglang version the server is rendered for; None for the router.
    sglang_version: str | None
    # A server over several nodes has one service per node: rank 0 serves, ranks 1 and up only compute
    # (their /health is a dummy, sglang #12297: never a readiness signal); `rank0` names rank 0's service.
    node_rank: int = 0
    rank0: str | None = None
    # Secret environment (dsv4deploy.spec.secret_env): never dumped, so never rendered or put in the plan;
    # the unit reads it from secret_env_file, whose content the serve script names by its digest, keyed
    # by the host's salt (set at render: dsv4deploy.plan.render.render_release).
    secret_env: dict[str, str] = Field(default={}, exclude=True, repr=False)
    secret_env_file: str | None = None
    secret_env_names: list[str] = []
    secret_env_digest: str | None = None
    # The API key's content as a digest keyed by the host's salt (dsv4deploy.spec.secret_env.api_key_digest), in
    # the serve script: a rotated key changes the release (set at render, like secret_env_digest).
    api_key_digest: str | None = None


def build_services(spec: Deployment) -> list[ServiceDefinition]:
    """Every service of the active topology, workers first (in spec order), then the router."""
    if spec.topology == "combined":
        assert spec.combined is not None  # guaranteed by spec validation
        combined = _server(spec, "combined", base_name(spec, spec.host(spec.combined.host)), spec.combined)
        return [combined, *_other_ranks(spec, combined, spec.combined)]
    prefills = [_server(spec, "prefill", _numbered(base_name(spec, spec.host(w.host)), "prefill", i), w)
                for i, w in enumerate(spec.prefill)]
    decodes = [_server(spec, "decode", _numbered(base_name(spec, spec.host(w.host)), "decode", i), w)
               for i, w in enumerate(spec.decode)]
    ranks = [r for svc, w in zip([*prefills, *decodes], [*spec.prefill, *spec.decode], strict=True)
             for r in _other_ranks(spec, svc, w)]
    return [*prefills, *decodes, *ranks, _router(spec, prefills, decodes)]


def deployment_part(spec: Deployment, host: HostSpec) -> str | None:
    """The part of `host`'s service names that is this deployment's own, or None for the plain names.

    systemd units share one folder per host, so two deployments there need different names: set
    `deployment_name`, or it is derived from the install root (its last folder's letters and
    digits, else a hash). The default install root keeps the plain names, so a deployment made
    before this keeps its units. supervisord programs live in the deployment's own supervisord under
    its install root and clash with nobody: they keep the plain names unless `deployment_name` is set.
    """
    if spec.deployment_name:
        return spec.deployment_name
    if host.service_manager != "systemd" or host.install_root == DEFAULT_INSTALL_ROOT:
        return None
    return derived_name(host.install_root)


def derived_name(install_root: str) -> str:
    """A deployment name for `install_root`: its last folder as [a-z0-9] (24 at most), else a hash."""
    tail = re.sub(r"[^a-z0-9]", "", install_root.rstrip("/").rsplit("/", 1)[-1].lower())[:24]
    if tail[:1].isalpha() and not tail.endswith(RESERVED_ENDING):
        return tail
    return "d" + hashlib.sha256(install_root.encode()).hexdigest()[:8]


def base_name(spec: Deployment, host: HostSpec) -> str:
    """The name every service of this deployment on `host` starts with (the combined server's whole name)."""
    part = deployment_part(spec, host)
    return f"{BASE_NAME}_{part}" if part else BASE_NAME


def services_on(spec: Deployment, host: str) -> list[ServiceDefinition]:
    """The services of `host`, in start order."""
    return sorted((s for s in build_services(spec) if s.host == host), key=lambda s: s.start_order)


def _numbered(base: str, role: str, index: int) -> str:
    # The first keeps the plain name (as the seeds' units were called); -2, -3 ... from the second on.
    return f"{base}-{role}" if index == 0 else f"{base}-{role}-{index + 1}"


def url_host(address: str) -> str:
    """`address` as the host part of a URL (IPv6 literals in brackets)."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


WILDCARDS = ("0.0.0.0", "::", "[::]")


def reach_address(host: HostSpec, listen: str) -> str:
    """Where others reach a listener on `host` bound to `listen`.

    A wildcard listener is reached at the host's inventory address; a listener bound to one
    address (loopback included) only there, whatever the inventory says.
    """
    return host.address if listen in WILDCARDS else listen


def api_key_file(spec: Deployment, host: HostSpec) -> str | None:
    """The file a service on `host` reads its API key from, or None without a key."""
    if spec.api_key is None:
        return None
    if spec.api_key.file is not None:
        return spec.api_key.file
    return f"{host.install_root}/{VAULT_KEY_RELPATH}"


def _common(spec: Deployment, name: str, host: HostSpec) -> dict:
    return {
        "name": name,
        "host": host.name,
        "workdir": f"{host.install_root}/current",
        "log_path": f"{host.install_root}/logs/{name}.log" if host.service_manager == "supervisor" else None,
        "user": host.service_user,
        "service_manager": host.service_manager,
        "install_root": host.install_root,
        "exec_path": f"{host.install_root}/current/bin/serve-{name}.sh",
        "api_key_file": api_key_file(spec, host),
    }


def server_argv(spec: Deployment, role: Literal["prefill", "decode", "combined"], worker: WorkerSpec,
                node_rank: int = 0) -> list[str]:
    """The full server command for `worker` (launcher + flags, extra_args last; no API key); a server over
    several nodes runs the same command on each, but for `--node-rank` and the address it listens on (its
    own node's `listen`)."""
    host = spec.host(worker.host)
    node = spec.host(worker.node_names()[node_rank])
    t = flags.table(host.sglang_version)
    f = t.flag
    argv = [
        *spec.server_command(node.name),
        f("model_path"), spec.model.path,
        f("served_model_name"), spec.model.served_name,
        f("tp_size"), str(worker.tp_size),
        # CUDA_VISIBLE_DEVICES narrows the server to its GPUs; counting starts at 0 inside them.
        f("base_gpu_id"), "0",
        f("host"), node.listen,
        f("port"), str(worker.port),
        # Unset, sglang picks it itself (its default for the GPU and the server's settings).
        *([f("mem_fraction_static"), _fraction(worker.mem_fraction_static)]
          if worker.mem_fraction_static is not None else []),
        # /metrics on the server's own host and port, open without the API key as in sglang.
        f("enable_metrics"),
    ]
    overrides = spec.model_override_args(worker)
    if overrides:
        # Compact and key-sorted, so the same spec gives the same bytes (and release hash).
        argv += [f("json_model_override_args"), json.dumps(overrides, sort_keys=True, separators=(",", ":"))]
    for setting in ("chat_template", "page_size", "kv_cache_dtype", "context_length"):
        value = spec.effective(worker, setting)
        if value is not None:
            argv += [f(setting), str(value)]
    if role != "combined":
        argv += [f("disaggregation_mode"), role]
    if isinstance(worker, PrefillSpec):
        argv += [f("disaggregation_bootstrap_port"), str(worker.bootstrap_port)]
    if isinstance(worker, PrefillSpec | DecodeSpec):
        backend = transfer_backend(t, worker)
        if backend:
            argv += [f("disaggregation_transfer_backend"), backend]
        if worker.ib_device:
            argv += [f("disaggregation_ib_device"), worker.ib_device]
    argv += t.cuda_graph_args(role, worker.cuda_graph.enabled, worker.cuda_graph.max_bs)
    argv += recipe_args(t, worker, node_rank, dist_init_addr(spec, worker))
    if _is_dsv4(spec):
        # Without these the chat API returns the raw reasoning and tool-call markup of DeepSeek-V4.
        # The attention backend is not forced: sglang picks its dsv4 backend for this architecture.
        argv += [f("reasoning_parser"), t.dsv4_reasoning_parser, f("tool_call_parser"), t.dsv4_tool_call_parser]
    return [*argv, *worker.extra_args]


def dist_init_addr(spec: Deployment, worker: WorkerSpec) -> str:
    """Where the ranks of a multi-node server meet: rank 0's inventory address and dist_init_port."""
    if len(worker.node_names()) < 2 or worker.dist_init_port is None:
        return ""
    return f"{url_host(spec.host(worker.host).address)}:{worker.dist_init_port}"


def _other_ranks(spec: Deployment, rank0: ServiceDefinition, worker: WorkerSpec) -> list[ServiceDefinition]:
    """The services of ranks 1 and up of a server over several nodes (none for a one-node server)."""
    out = []
    for rank, node in enumerate(worker.node_names()[1:], start=1):
        host = spec.host(node)
        name = f"{rank0.name}-rank{rank}"
        argv = server_argv(spec, rank0.role, worker, rank)  # type: ignore[arg-type]
        out.append(rank0.model_copy(update={
            **_common(spec, name, host), "argv": argv,
            **_env_fields(spec, host, name, server_env(spec, worker, rank0.role)),
            "ports": [worker.port], "url": f"http://{url_host(reach_address(host, host.listen))}:{worker.port}",
            "description": f"{rank0.description} rank {rank}", "sglang_version": host.sglang_version,
            "node_rank": rank, "rank0": rank0.name}))
    return out


def transfer_backend(t: flags.FlagTable, worker: PrefillSpec | DecodeSpec) -> str | None:
    """The `--disaggregation-transfer-backend` value: the spec's, or what its transport means for mooncake
    (validation refuses a transport the release cannot give, dsv4deploy.spec.recipes)."""
    if worker.transport is None or worker.transfer_backend not in (None, "mooncake"):
        return worker.transfer_backend
    return t.mooncake_transports.get(worker.transport, worker.transfer_backend)


def recipe_args(t: flags.FlagTable, worker: WorkerSpec, node_rank: int = 0, dist_init_addr: str = "") -> list[str]:
    """The recipes' settings of `worker` in release `t`'s flags (nothing for what is unset)."""
    f = t.flag
    argv = t.attn_dp_args(worker.attn_dp_size or 1)
    moe = worker.moe
    if moe is not None:
        for setting, value in (("ep_size", moe.ep_size), ("moe_a2a_backend", moe.a2a_backend),
                               ("moe_runner_backend", moe.runner_backend)):
            if value is not None:
                argv += [f(setting), str(value)]
    spec = worker.speculative
    if spec is not None:
        argv += [f("speculative_algorithm"), spec.algorithm, f("speculative_num_steps"), str(spec.num_steps),
                 f("speculative_eagle_topk"), str(spec.eagle_topk),
                 f("speculative_num_draft_tokens"), str(spec.num_draft_tokens)]
    if worker.max_running_requests is not None:
        argv += [f("max_running_requests"), str(worker.max_running_requests)]
    if len(worker.node_names()) > 1:
        argv += [f("nnodes"), str(len(worker.node_names())), f("node_rank"), str(node_rank),
                 f("dist_init_addr"), dist_init_addr]
    return argv


def recipe_env(spec: Deployment, worker: WorkerSpec) -> dict[str, str]:
    """The environment switches the recipes' settings imply (the inventory's env wins over them)."""
    env: dict[str, str] = {}
    if spec.model.precision == "fp8":
        # sgl-project/DeepSeek-V4-Flash-FP8 holds FP8 experts; sglang defaults to FP4 ones (srt/environ.py).
        env["SGLANG_DSV4_FP4_EXPERTS"] = "0"
    if worker.moe is not None and worker.moe.deepep_max_dispatch_tokens_per_rank is not None:
        env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] = str(worker.moe.deepep_max_dispatch_tokens_per_rank)
    if worker.speculative is not None:
        env.update(flags.table(spec.host(worker.host).sglang_version).speculative_env)
    return env


def _is_dsv4(spec: Deployment) -> bool:
    return spec.model.profile.startswith("deepseek-v4")


def _fraction(value: float) -> str:
    # repr keeps 0.8 as "0.8" (not "0.80000001"); the exact float round-trips through argparse.
    return repr(value)


def server_env(spec: Deployment, worker: WorkerSpec, role: str = "") -> dict[str, str]:
    """The recipes' switches (recipe_env), server_env, then the worker's env (the worker wins), then the
    experiment's server_env_extra and server_env_extra_by_role[role], then CUDA_VISIBLE_DEVICES.

    The GPU list is the spec's (preflight checks it against the host), so no env may override it.
    Keys are sorted so the rendered files do not depend on inventory order.
    """
    env = {**recipe_env(spec, worker), **spec.server_env, **worker.env, **spec.server_env_extra,
           **spec.server_env_extra_by_role.get(role, {}), "CUDA_VISIBLE_DEVICES": ",".join(map(str, worker.gpus))}
    return dict(sorted(env.items()))


def _env_fields(spec: Deployment, host: HostSpec, name: str, env: dict[str, str]) -> dict:
    """The env a service's files show, and its secret part (kept out of them)."""
    plain, secret = secret_env.split(env, spec.secret_env)
    return {"env": plain, "secret_env": secret,
            "secret_env_file": secret_env.file_path(host.install_root, name) if secret else None,
            "secret_env_names": sorted(secret)}


def secret_env_files(spec: Deployment, host: str) -> dict[str, str]:
    """The secret env file of every service on `host` that has one (absolute path -> content)."""
    return {s.secret_env_file: secret_env.file_content(s.secret_env)
            for s in services_on(spec, host) if s.secret_env_file}


def _server(spec: Deployment, role: Literal["prefill", "decode", "combined"], name: str,
            worker: WorkerSpec) -> ServiceDefinition:
    host = spec.host(worker.host)
    ports = [worker.port]
    if isinstance(worker, PrefillSpec):
        ports.append(worker.bootstrap_port)
    return ServiceDefinition(
        **_common(spec, name, host),
        role=role,
        argv=server_argv(spec, role, worker),
        **_env_fields(spec, host, name, server_env(spec, worker, role)),
        ports=ports,
        gpus=list(worker.gpus),
        start_order=WORKER_START_ORDER,
        url=f"http://{url_host(reach_address(host, host.listen))}:{worker.port}",
        description=f"SGLang {role} server for {spec.model.served_name} (dsv4deploy)",
        after=[],
        stop_timeout_s=SERVER_STOP_TIMEOUT_S,
        sglang_version=host.sglang_version,
    )


def router_argv(spec: Deployment, prefills: list[ServiceDefinition], decodes: list[ServiceDefinition]) -> list[str]:
    """The router command in the chosen router's flags (dsv4deploy.sglang.routers; extra_args last; no API key)."""
    router = spec.router
    assert router is not None  # guaranteed by spec validation for pd
    f = routers.implementation(spec.router_implementation).flag
    argv = [*spec.router_command(router.host), f("pd_disaggregation")]
    for svc, worker in zip(prefills, spec.prefill, strict=True):
        # The port after the URL is the prefill's bootstrap port, which the router hands to decode.
        argv += [f("prefill"), svc.url, str(worker.bootstrap_port)]
    for svc in decodes:
        argv += [f("decode"), svc.url]
    argv += [f("host"), router.listen, f("port"), str(router.port)]
    for setting in ("policy", "prefill_policy", "decode_policy"):
        value = getattr(router, setting)
        if value:
            argv += [f(setting), value]
    retry = router.retry
    if retry.enabled:
        argv += [f("retry_max_retries"), str(retry.max_retries),
                 f("retry_initial_backoff_ms"), str(retry.initial_backoff_ms),
                 f("retry_max_backoff_ms"), str(retry.max_backoff_ms)]
    else:
        argv += [f("disable_retries")]
    cb = router.circuit_breaker
    if cb.enabled:
        # Rendered always: the router's own defaults (10 failures, 60 s open) turn warm-up errors
        # into a minute of 503s while /readiness says ready.
        argv += [f("cb_failure_threshold"), str(cb.failure_threshold),
                 f("cb_timeout_duration_secs"), str(cb.timeout_s)]
    else:
        argv += [f("disable_circuit_breaker")]
    hc = router.health_check
    argv += [f("health_check_endpoint"), hc.endpoint,
             f("health_check_interval_secs"), str(hc.interval_s),
             f("health_failure_threshold"), str(hc.failure_threshold),
             f("health_check_timeout_secs"), str(hc.timeout_s),
             f("worker_startup_timeout_secs"), str(router.worker_startup_timeout_s),
             f("worker_startup_check_interval"), str(router.worker_startup_check_interval_s)]
    # Always explicit: the router otherwise binds 0.0.0.0:29000, exposing metrics on every interface
    # and clashing with a second deployment on the host. Metrics stay on loopback (prometheus_listen)
    # even when the router itself listens on every interface: they need no key.
    argv += [f("prometheus_port"), str(prometheus_port(router)), f("prometheus_host"), router.prometheus_listen]
    # On SIGTERM the router refuses new requests and exits once those in flight are done, or at this.
    argv += [f("shutdown_grace_period_secs"), str(spec.drain_deadline_s)]
    return [*argv, *router.extra_args]


def prometheus_port(router: RouterSpec) -> int:
    """The router's metrics port: the spec's, else sglang-router's default."""
    return router.prometheus_port if router.prometheus_port is not None else ROUTER_DEFAULT_PROMETHEUS_PORT


def _router(spec: Deployment, prefills: list[ServiceDefinition], decodes: list[ServiceDefinition]) -> ServiceDefinition:
    router = spec.router
    assert router is not None
    host = spec.host(router.host)
    ports = [router.port, prometheus_port(router)]
    # Only workers on the router's own host can be ordered by the service manager.
    local_workers = [s.name for s in [*prefills, *decodes] if s.host == router.host]
    return ServiceDefinition(
        **_common(spec, f"{base_name(spec, host)}-router", host),
        role="router",
        argv=router_argv(spec, prefills, decodes),
        **_env_fields(spec, host, f"{BASE_NAME}-router",
                      {**router.env, **spec.server_env_extra_by_role.get("router", {})}),
        ports=ports,
        gpus=[],
        start_order=ROUTER_START_ORDER,
        url=f"http://{url_host(reach_address(host, router.listen))}:{router.port}",
        description=f"{spec.router_implementation} (PD) for {spec.model.served_name} (dsv4deploy)",
        after=local_workers,
        stop_timeout_s=spec.drain_deadline_s + ROUTER_STOP_MARGIN_S,
        sglang_version=None,
    )
