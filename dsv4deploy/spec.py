"""The typed deployment spec: one model for a DeepSeek-V4-Flash deployment on SGLang.

The spec is read from Ansible variables (inventory plus `-e`), so the playbooks and the CLI agree.
`load_spec` turns variables into a validated `Deployment` or raises `SpecError`, whose problems each
name the field, the host and the fix. Structural checks (types, ranges, unknown keys) come from
pydantic; cross-field checks (GPU overlap, port clashes, prefill/decode agreement, version support)
are in `check_deployment`.
"""

from __future__ import annotations

import ipaddress
import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from dsv4deploy import flags, routers, versions

Port = Annotated[int, Field(ge=1, le=65535)]
Fraction = Annotated[float, Field(gt=0, lt=1)]


def _env_as_text(value: Any) -> Any:
    # Inventory YAML gives 1 or true; the environment only knows strings.
    if isinstance(value, Mapping):
        return {str(k): _env_text(v) for k, v in value.items()}
    return value


EnvMap = Annotated[dict[str, str], BeforeValidator(_env_as_text)]


class StrictModel(BaseModel):
    """Base for every spec model: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Problem(BaseModel):
    """One validation failure: where it is, what is wrong, how to fix it."""

    field: str
    host: str | None = None
    message: str
    fix: str

    def __str__(self) -> str:
        where = f"{self.field} (host {self.host})" if self.host else self.field
        return f"{where}: {self.message}; fix: {self.fix}"


class SpecError(ValueError):
    """The spec is invalid; `problems` lists every failure found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class ModelSpec(StrictModel):
    """Which weights to serve and under which name."""

    path: str = Field(min_length=1)
    served_name: str = Field(min_length=1)
    profile: str = "deepseek-v4-flash"


class CudaGraphSpec(StrictModel):
    """CUDA-graph capture settings; rendered per sglang version."""

    enabled: bool = True
    max_bs: Annotated[int, Field(ge=1)] | None = None


class ModelSettings(StrictModel):
    """Settings that change what the model computes: prefill and decode must agree on them."""

    index_topk: Annotated[int, Field(ge=1)] | None = None
    model_overrides: dict[str, Any] | None = None
    chat_template: str | None = None
    page_size: Annotated[int, Field(ge=1)] | None = None
    kv_cache_dtype: str | None = None
    context_length: Annotated[int, Field(ge=1)] | None = None


MODEL_AFFECTING = tuple(ModelSettings.model_fields)


class WorkerSpec(ModelSettings):
    """One SGLang server process (a prefill, a decode or the combined server)."""

    host: str = Field(min_length=1)
    gpus: list[Annotated[int, Field(ge=0)]] = Field(min_length=1)
    tp_size: Annotated[int, Field(ge=1)]
    port: Port
    mem_fraction_static: Fraction
    cuda_graph: CudaGraphSpec = CudaGraphSpec()
    env: EnvMap = {}
    extra_args: list[str] = []


class PrefillSpec(WorkerSpec):
    """A prefill worker: also serves KV to decodes on its bootstrap port."""

    bootstrap_port: Port = 8998
    transfer_backend: str | None = None
    ib_device: str | None = None


class DecodeSpec(WorkerSpec):
    """A decode worker."""

    transfer_backend: str | None = None
    ib_device: str | None = None


class CombinedSpec(WorkerSpec):
    """The single server of the combined topology."""


class RetrySpec(StrictModel):
    """Router request retries."""

    enabled: bool = True
    max_retries: Annotated[int, Field(ge=0)] = 3
    initial_backoff_ms: Annotated[int, Field(ge=0)] = 100
    max_backoff_ms: Annotated[int, Field(ge=0)] = 2000


class CircuitBreakerSpec(StrictModel):
    """Router circuit breaker.

    sglang-router's defaults (10 failures, 60 s open) turn a warm-up transient into a minute of
    503s while /readiness says ready; these defaults open later and close sooner.
    """

    enabled: bool = True
    failure_threshold: Annotated[int, Field(ge=1)] = 30
    timeout_s: Annotated[int, Field(ge=1)] = 10


class HealthCheckSpec(StrictModel):
    """How the router probes its workers."""

    endpoint: str = "/health"
    interval_s: Annotated[int, Field(ge=1)] = 10
    failure_threshold: Annotated[int, Field(ge=1)] = 3
    timeout_s: Annotated[int, Field(ge=1)] = 5


class RouterSpec(StrictModel):
    """The router (sglang-router or smg, see `router_implementation`) in front of a PD pair (or several)."""

    host: str = Field(min_length=1)
    port: Port = 8000
    listen: str = "127.0.0.1"
    policy: str | None = None
    prefill_policy: str | None = None
    decode_policy: str | None = None
    retry: RetrySpec = RetrySpec()
    circuit_breaker: CircuitBreakerSpec = CircuitBreakerSpec()
    health_check: HealthCheckSpec = HealthCheckSpec()
    worker_startup_timeout_s: Annotated[int, Field(ge=1)] = 1800
    # The router's default (30 s) delays readiness by up to 30 s after the workers are up.
    worker_startup_check_interval_s: Annotated[int, Field(ge=1)] = 1
    prometheus_port: Port | None = None
    # Metrics stay on loopback unless asked: they name every worker and need no key.
    prometheus_listen: str = "127.0.0.1"
    env: EnvMap = {}
    extra_args: list[str] = []


class ApiKeyRef(StrictModel):
    """Where the API key comes from; only the file path is ever rendered."""

    file: str | None = None
    vault_var: str | None = None

    def model_post_init(self, __context: Any) -> None:
        if (self.file is None) == (self.vault_var is None):
            raise ValueError("give exactly one of 'file' or 'vault_var'")


class HostSpec(StrictModel):
    """Per-host facts and settings (Ansible host variables)."""

    name: str
    address: str = "127.0.0.1"
    sglang_version: str = versions.DEFAULT_VERSION
    # 0 for a host that only runs the router.
    gpu_count: Annotated[int, Field(ge=0)] = 8
    gpu_memory_gib: Annotated[float, Field(gt=0)] = 96.0
    service_manager: Literal["systemd", "supervisor"] = "systemd"
    install_root: str = "/opt/dsv4deploy"
    service_user: str = "sglang"
    # Where a server listens: 0.0.0.0 when other hosts (router, decode) must reach it.
    listen: str = "127.0.0.1"


class Deployment(ModelSettings):
    """A whole deployment: topology, model, roles, router and hosts."""

    topology: Literal["pd", "combined"]
    model: ModelSpec
    prefill: list[PrefillSpec] = []
    decode: list[DecodeSpec] = []
    combined: CombinedSpec | None = None
    router: RouterSpec | None = None
    api_key: ApiKeyRef | None = None
    hosts: dict[str, HostSpec]
    server_launcher: list[str] = Field(default=["python3", "-m", "sglang.launch_server"], min_length=1)
    # Which router runs in front of the PD workers (dsv4deploy.routers).
    router_implementation: Literal["sglang-router", "smg"] = routers.DEFAULT_ROUTER
    # The router's launcher: one argv, or one per implementation (so `-e router_implementation=smg`
    # alone switches); unset = the implementation's default (`python3 -m ...`).
    router_launcher: list[str] | dict[str, list[str]] | None = None
    # Seconds a switchover or rollback lets in-flight requests finish: the router stops taking new ones
    # and exits when those are done (--shutdown-grace-period-secs), before any worker is stopped.
    drain_deadline_s: Annotated[int, Field(ge=1)] = 60
    # Tells this deployment's systemd units apart from another deployment's on the same host
    # (sglang-dsv4_NAME-prefill, ...); unset = derived from each host's install_root (dsv4deploy.services).
    deployment_name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9]{0,23}$")] | None = None
    server_env: EnvMap = {}
    # Switches added for an experiment on top of the inventory's (server_env and each worker's env):
    # for every server, and per role (prefill, decode, combined, router), e.g.
    # -e '{"server_env_extra": {"SGLANG_DSV4_BF16_INDEX_K": "1"}}'. They win over both; the plan and
    # the report list them.
    server_env_extra: EnvMap = {}
    server_env_extra_by_role: dict[Literal["prefill", "decode", "combined", "router"], EnvMap] = {}
    # Environment names whose values are secret besides those matched by name (TOKEN, SECRET, KEY,
    # PASSWORD, ...; dsv4deploy.secret_env): written to a 0600 env file, never into a release.
    secret_env: list[str] = []
    gpu_query_command: list[str] = Field(default=["nvidia-smi"], min_length=1)
    # Deep-merged over dsv4deploy/profiles.yml by dsv4deploy.memory (which validates its shape).
    memory_profile: dict[str, Any] = {}

    @field_validator("prefill", "decode", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        # A single worker may be written as a mapping instead of a list of one.
        return [value] if isinstance(value, Mapping) else value

    # -- derived views -------------------------------------------------------------------------
    def workers(self) -> list[tuple[str, WorkerSpec]]:
        """The server processes of the active topology as (field path, spec)."""
        if self.topology == "combined":
            return [("combined", self.combined)] if self.combined else []
        return [(f"prefill[{i}]", w) for i, w in enumerate(self.prefill)] + [
            (f"decode[{i}]", w) for i, w in enumerate(self.decode)
        ]

    def effective(self, worker: WorkerSpec, name: str) -> Any:
        """A model-affecting setting for `worker`: its own value, else the deployment's."""
        own = getattr(worker, name)
        return own if own is not None else getattr(self, name)

    def model_override_args(self, worker: WorkerSpec) -> dict[str, Any]:
        """The merged `--json-model-override-args` object for `worker` (keys sorted)."""
        merged: dict[str, Any] = dict(self.model_overrides or {})
        merged.update(worker.model_overrides or {})
        topk = self.effective(worker, "index_topk")
        if topk is not None:
            merged["index_topk"] = topk
        return dict(sorted(merged.items()))

    def router_command(self) -> list[str]:
        """The launcher of the chosen router (validated to exist by check_deployment)."""
        impl = routers.implementation(self.router_implementation)
        launcher = self.router_launcher
        if isinstance(launcher, dict):
            launcher = launcher.get(self.router_implementation)
        return list(launcher) if launcher else list(impl.launcher)

    def host(self, name: str) -> HostSpec:
        """Settings of the inventory host `name`."""
        return self.hosts[name]

    def hosts_in_use(self) -> list[str]:
        """Inventory hosts that run something in the active topology, sorted."""
        names = {w.host for _, w in self.workers()}
        if self.topology == "pd" and self.router:
            names.add(self.router.host)
        return sorted(names)


# Variables that make up the deployment-wide part of the spec (everything else in the inventory,
# e.g. ansible_* or needle_* gate settings, is not ours to judge here).
DEPLOYMENT_KEYS = tuple(k for k in Deployment.model_fields if k != "hosts")
HOST_KEYS = tuple(k for k in HostSpec.model_fields if k not in ("name", "address"))


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def load_spec(common: Mapping[str, Any], hostvars: Mapping[str, Mapping[str, Any]]) -> Deployment:
    """Build and validate the deployment from Ansible variables.

    `common` holds the deployment-wide variables (group_vars/all plus `-e`), `hostvars` each
    inventory host's variables. Raises SpecError listing every problem found.
    """
    data: dict[str, Any] = {k: common[k] for k in DEPLOYMENT_KEYS if common.get(k) is not None}
    data["hosts"] = {
        name: {"name": name, "address": hv.get("ansible_host", name if _looks_like_ip(name) else "127.0.0.1"),
               **{k: hv[k] for k in HOST_KEYS if hv.get(k) is not None}}
        for name, hv in hostvars.items()
    }
    try:
        spec = Deployment.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_problem_from_pydantic(err, data) for err in exc.errors()]) from None
    problems = check_deployment(spec)
    if problems:
        raise SpecError(problems)
    return spec


def _looks_like_ip(name: str) -> bool:
    parts = name.split(".")
    return len(parts) == 4 and all(p.isdigit() for p in parts)


def _problem_from_pydantic(err: Mapping[str, Any], data: Mapping[str, Any]) -> Problem:
    loc = err["loc"]
    host = _host_of(loc, data)
    # Host settings are host variables: name them as the user writes them (install_root, not hosts.gpu1...).
    field = _field_path(loc[2:] if loc[0] == "hosts" and len(loc) > 2 else loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _field_path(loc[:-1]) or "the spec"
        return Problem(field=field, host=host, message=f"unknown key '{loc[-1]}'",
                       fix=f"remove it or check its spelling against the keys of {parent}")
    if kind == "missing":
        return Problem(field=field, host=host, message="is required", fix=f"set {field}")
    if field.endswith("mem_fraction_static"):
        return Problem(field=field, host=host, message=f"{err.get('input')!r} is outside (0, 1)",
                       fix="use a fraction such as 0.80 (see `dsv4deploy plan` for the largest that fits)")
    if isinstance(err.get("input"), str) and kind in ("list_type", "dict_type", "model_type", "model_attributes_type"):
        # `-e decode=[...]` gives Ansible a string; structured values need a JSON/YAML -e, and -e
        # replaces a whole top-level variable (there is no -e for a field inside one).
        top = str(loc[0]) if loc[0] != "hosts" else field
        example = _list_example(err["input"]) if kind == "list_type" else None
        shape = f"as a list such as {example}" if example else "as YAML"
        how = (f"or on the command line as JSON: -e '{{\"{top}\": ...}}'" if top == field else
               f"on the command line -e replaces the whole {top}, as JSON: -e '{{\"{top}\": ...}}'")
        return Problem(field=field, host=host, message=f"{err['msg']} (got the string {err['input']!r})",
                       fix=f"give {field} {shape} in the inventory, {how} (key=value always gives a string)")
    if kind == "literal_error" and loc[-1] == "[key]":  # a mapping key, e.g. server_env_extra_by_role.docode
        field = _field_path(loc[:-1])
        return Problem(field=field, host=host, message=f"{err['msg']} (got {err.get('input')!r})",
                       fix=f"use one of {_literal_choices(err)} as the key")
    if kind == "literal_error":
        return Problem(field=field, host=host, message=f"{err['msg']} (got {err.get('input')!r})",
                       fix=f"set {field} to {_literal_choices(err)}")
    return Problem(field=field, host=host, message=f"{err['msg']} (got {err.get('input')!r})",
                   fix=f"correct {field}")


def _literal_choices(err: Mapping[str, Any]) -> str:
    """The allowed values of a Literal field, with a note when only the case was wrong."""
    choices = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
    given = err.get("input")
    text = " or ".join(choices) or "an allowed value"
    if isinstance(given, str) and given.lower() in choices and given not in choices:
        return f"{text} (lower case: {given.lower()})"
    return f"{text} (exactly, lower case)" if choices and all(c == c.lower() for c in choices) else text


def _list_example(text: str) -> str | None:
    """`[4, 5, 6, 7]` for a range written as "4-7" (or "4,5,6,7"); None when it is not one."""
    span = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text)
    if span and int(span[1]) <= int(span[2]) < int(span[1]) + 64:
        return str(list(range(int(span[1]), int(span[2]) + 1)))
    parts = [p.strip() for p in text.strip("[] ").split(",")]
    return f"[{', '.join(parts)}]" if len(parts) > 1 and all(p.isdigit() for p in parts) else None


def _field_path(loc: Iterable[Any]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _host_of(loc: tuple[Any, ...], data: Mapping[str, Any]) -> str | None:
    """The host a field belongs to, when the location points inside a worker or router."""
    if not loc:
        return None
    if loc[0] == "hosts" and len(loc) > 1:
        return str(loc[1])
    node: Any = data.get(loc[0])
    if loc[0] in ("prefill", "decode") and isinstance(node, Mapping):
        node = [node]
    if isinstance(node, list) and len(loc) > 1 and isinstance(loc[1], int) and loc[1] < len(node):
        node = node[loc[1]]
    return str(node["host"]) if isinstance(node, Mapping) and "host" in node else None


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
    problems += _check_env(spec)
    problems += _check_text(spec)
    problems += _check_host_settings(spec)
    problems += _check_listeners(spec)
    problems += _check_api_key(spec)
    problems += _check_router_launcher(spec)
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
    if spec.topology == "pd" and spec.router:
        placed.append(("router", spec.router.host))
    for path, host in placed:
        if host not in spec.hosts:
            out.append(Problem(field=f"{path}.host", host=host, message=f"host '{host}' is not in the inventory",
                               fix=f"add {host} to the inventory or use one of: {', '.join(sorted(spec.hosts))}"))
    return out


def _check_versions(spec: Deployment) -> list[Problem]:
    out = []
    for name in spec.hosts_in_use():
        version = spec.host(name).sglang_version
        if version not in versions.RELEASES:
            out.append(Problem(field="sglang_version", host=name,
                               message=f"no flag table for sglang {version}",
                               fix=f"set sglang_version to one of {', '.join(versions.known_versions())} "
                                   "or add a flag table for it to dsv4deploy/flags.py"))
    return out


def _check_tp(spec: Deployment) -> list[Problem]:
    out = []
    for path, w in spec.workers():
        if len(w.gpus) != w.tp_size:
            out.append(Problem(field=f"{path}.tp_size", host=w.host,
                               message=f"tp_size {w.tp_size} does not match {len(w.gpus)} GPUs {w.gpus}",
                               fix=_tp_fix(w.tp_size, list(w.gpus))))
        if len(set(w.gpus)) != len(w.gpus):
            out.append(Problem(field=f"{path}.gpus", host=w.host, message=f"GPU list {w.gpus} repeats a GPU",
                               fix="list each GPU once"))
        count = spec.host(w.host).gpu_count
        missing = [g for g in w.gpus if g >= count]
        if missing:
            out.append(Problem(field=f"{path}.gpus", host=w.host,
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
        clash = sorted({owner[(w.host, g)] for g in w.gpus if (w.host, g) in owner})
        for other in clash:
            shared = sorted(g for g in w.gpus if owner.get((w.host, g)) == other)
            out.append(Problem(field=f"{path}.gpus", host=w.host,
                               message=f"GPUs {shared} are also used by {other}",
                               fix="give each server its own GPUs on a host (e.g. prefill 0-3, decode 4-7)"))
        for g in w.gpus:
            owner.setdefault((w.host, g), path)
    return out


# sglang-router 0.3.2 serves Prometheus metrics on this port (on 0.0.0.0) when --prometheus-port is not given.
ROUTER_DEFAULT_PROMETHEUS_PORT = 29000
PORT_FIX = "give every listener on a host its own port"


def _check_ports(spec: Deployment) -> list[Problem]:
    out = []
    used: dict[tuple[str, int], str] = {}

    def claim(host: str, port: int, field: str, fix: str = PORT_FIX) -> None:
        if (host, port) in used:
            out.append(Problem(field=field, host=host, message=f"port {port} is also used by {used[(host, port)]}",
                               fix=fix))
        else:
            used[(host, port)] = field

    for path, w in spec.workers():
        claim(w.host, w.port, f"{path}.port")
        if isinstance(w, PrefillSpec):
            claim(w.host, w.bootstrap_port, f"{path}.bootstrap_port")
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
        if version not in versions.RELEASES:
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
    # cuda_graph: {enabled, max_bs}, spelled per sglang version (dsv4deploy.flags).
    "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill",
    "--disable-cuda-graph", "--disable-decode-cuda-graph", "--disable-prefill-cuda-graph",
)
# Everything dsv4deploy.services.router_argv renders (router.{policy, retry, circuit_breaker, ...}).
RENDERED_ROUTER_FLAGS = routers.rendered_flags()
# What to use instead of a flag a sglang version refuses or deprecates (dsv4deploy.flags, `forbidden`).
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
        forbidden = flags.forbidden_flags_in(version, w.extra_args) if version in versions.RELEASES else []
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


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _check_env(spec: Deployment) -> list[Problem]:
    """Environment names become `export NAME=...` in serve scripts: only shell variable names."""
    from dsv4deploy.secret_env import is_secret

    targets: list[tuple[str, str | None, dict[str, str]]] = [("server_env", None, spec.server_env),
                                                             ("server_env_extra", None, spec.server_env_extra)]
    targets += [(f"server_env_extra_by_role.{role}", None, env) for role, env in spec.server_env_extra_by_role.items()]
    targets += [(f"{path}.env", w.host, w.env) for path, w in spec.workers()]
    if spec.topology == "pd" and spec.router:
        targets.append(("router.env", spec.router.host, spec.router.env))
    targets.append(("secret_env", None, dict.fromkeys(spec.secret_env, "")))
    out = [Problem(field=field, host=host, message=f"{name!r} is not a valid environment variable name",
                   fix="use letters, digits and underscores only, not starting with a digit")
           for field, host, env in targets for name in env if not ENV_NAME.match(name)]
    # A secret goes into an env file of NAME="value" lines: one line each.
    out += [Problem(field=f"{field}.{name}", host=host, message="a secret value contains a control character "
                                                               "(newline, tab, ...)",
                    fix="remove it; secret values are written one per line into the host's env file")
            for field, host, env in targets if field != "secret_env" for name, value in env.items()
            if is_secret(name, spec.secret_env) and CONTROL.search(value)]
    return out


# -- values written into scripts, unit files, supervisord programs and paths --------------------

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Inventory host names become file names (render --out DIR/<host>) and comments in scripts.
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}\Z")
# install_root lands unquoted in supervisord.conf (which expands %, and ends a value at " ;" or
# " #"), in unit paths and in rm -rf on purge: only plain path characters.
INSTALL_ROOT = re.compile(r"/[A-Za-z0-9_.+@,=:/-]*\Z")
# Directories whose removal (stop.yml -e dsv4_stop_purge=true) would wreck the host.
SYSTEM_DIRS = frozenset({
    "/usr/local", "/usr/lib", "/usr/share", "/usr/bin", "/usr/sbin", "/usr/src", "/var/lib", "/var/log",
    "/var/tmp", "/var/cache", "/var/spool", "/var/mail", "/var/run", "/etc/systemd", "/etc/ssh",
})
# Top-level folders of the operating system: an install root never lives under them.
SYSTEM_TOPS = frozenset({"etc", "proc", "sys", "dev", "boot", "bin", "sbin", "lib", "lib32", "lib64", "usr", "run"})
# A Unix socket path holds at most 107 bytes; supervisord's lives under the install root.
SOCKET_PATH_MAX = 107
SUPERVISOR_SOCKET = "/supervisor/supervisor.sock"
# POSIX portable user names (useradd's default check), as systemd's User= and supervisord take them.
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _walk_text(value: Any, path: str) -> Iterable[tuple[str, str]]:
    """Every string in `value` (keys included) with its field path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield f"{path}.{k}" if path else str(k), str(k)
            yield from _walk_text(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _walk_text(v, f"{path}[{i}]")


# Values that only ever reach a serve script, shell-quoted (a newline there is data, not syntax).
SHELL_ONLY = re.compile(r"(^|\.)(env|server_env|server_env_extra|server_env_extra_by_role\.[a-z]+)\.[A-Za-z0-9_]+\Z"
                        r"|extra_args\[\d+\]\Z")


# Names (they also reach unit descriptions, comments and the report) and paths: plain characters only.
NAME_FIELDS = re.compile(r"^model\.(served_name|profile)\Z|(^|\.)(kv_cache_dtype|transfer_backend|ib_device)\Z"
                         r"|^router\.(policy|prefill_policy|decode_policy)\Z")
PATH_FIELDS = re.compile(r"^model\.path\Z|(^|\.)chat_template\Z|^api_key\.file\Z|^router\.health_check\.endpoint\Z")
PLAIN_TEXT = re.compile(r"[A-Za-z0-9_.:@+/=,~-]+\Z")


def _check_text(spec: Deployment) -> list[Problem]:
    """No control characters (a newline would end a comment or a unit line); names and paths plain."""
    out = []
    data = spec.model_dump(mode="json", exclude={"hosts"})
    for field, text in _walk_text(data, ""):
        if (NAME_FIELDS.search(field) or PATH_FIELDS.search(field)) and not PLAIN_TEXT.match(text):
            out.append(Problem(field=field, message=f"{text!r} has characters other than letters, digits and "
                                                    "_ . : @ + / = , ~ -",
                               fix=f"use a plain {'path' if PATH_FIELDS.search(field) else 'name'}"))
        elif "\x00" in text or (CONTROL.search(text) and not SHELL_ONLY.search(field)):
            out.append(Problem(field=field, message=f"{text!r} contains a control character (newline, tab, ...)",
                               fix="remove it; values are written into scripts and unit files"))
    for name, host in spec.hosts.items():
        for key in ("sglang_version", "address"):
            text = getattr(host, key)
            if CONTROL.search(text):
                out.append(Problem(field=key, host=name, message=f"{text!r} contains a control character",
                                   fix=f"correct {key}"))
    return out


def _check_host_settings(spec: Deployment) -> list[Problem]:
    out = []
    if spec.deployment_name and spec.deployment_name.endswith("router"):
        # The host modules tell a router by its unit name's ending; a combined server is named sglang-dsv4_NAME.
        out.append(Problem(field="deployment_name", message=f"{spec.deployment_name!r} ends in 'router', which "
                                                            "would make its combined server look like a router",
                           fix="choose another name (lower-case letters and digits, e.g. blue)"))
    for name in spec.hosts_in_use():
        host = spec.host(name)
        if not HOST_NAME.match(name) or ".." in name:
            out.append(Problem(field="inventory host name", host=repr(name),
                               message="is not a plain host name (letters, digits, '.', '-', '_'; it names files "
                                       "and is written into scripts)",
                               fix="rename the inventory host and set ansible_host to its address"))
        out += install_root_problems(name, host.install_root, host.service_manager)
        if not USER_NAME.match(host.service_user):
            out.append(Problem(field="service_user", host=name,
                               message=f"{host.service_user!r} is not a user name"
                                       + (" (an empty user would run the servers as root)"
                                          if not host.service_user else ""),
                               fix="name the user the servers run as (e.g. sglang; root only if you mean it)"))
    return out


def install_root_problems(name: str, root: str, service_manager: str = "systemd") -> list[Problem]:
    """Why `root` cannot be host `name`'s install root (empty when it can)."""

    def problem(message: str, fix: str = "use an absolute path of its own, e.g. /opt/dsv4deploy") -> Problem:
        return Problem(field="install_root", host=name, message=f"{root!r} {message}", fix=fix)

    if not INSTALL_ROOT.match(root):
        return [problem("must be an absolute path of letters, digits and . _ - + @ , = : / only "
                        "(it is written unquoted into supervisord.conf, which expands % and cuts at ' ;')")]
    parts = [p for p in root.split("/") if p]
    if posixpath.normpath(root) != root or any(p in (".", "..") for p in parts):
        return [problem("is not a normalised path ('..', '.', '//' or a trailing '/')")]
    if len(parts) < 2 or root in SYSTEM_DIRS or (parts[0] in SYSTEM_TOPS and root[:11] != "/usr/local/"):
        return [problem("is a system directory (stop.yml -e dsv4_stop_purge=true removes the install root)")]
    if service_manager == "supervisor" and len((root + SUPERVISOR_SOCKET).encode()) > SOCKET_PATH_MAX:
        return [problem(f"is too long: supervisord's socket {root}{SUPERVISOR_SOCKET} exceeds "
                        f"{SOCKET_PATH_MAX} bytes", fix="use a shorter install_root")]
    return []


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address.strip("[]")).is_loopback


def _listen_problem(field: str, host: str | None, address: str) -> Problem | None:
    try:
        ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return Problem(field=field, host=host, message=f"{address!r} is not an IP address",
                       fix="listen on 127.0.0.1, on one address of the host, or on 0.0.0.0 with an api_key")
    return None


def _check_listeners(spec: Deployment) -> list[Problem]:
    """Bind addresses are IP literals; anything but loopback needs an API key."""
    out = []
    listeners = [("listen", name, spec.host(name).listen) for name in spec.hosts_in_use()
                 if any(w.host == name for _, w in spec.workers())]
    if spec.topology == "pd" and spec.router:
        listeners += [("router.listen", spec.router.host, spec.router.listen),
                      ("router.prometheus_listen", spec.router.host, spec.router.prometheus_listen)]
    for field, host, address in listeners:
        bad = _listen_problem(field, host, address)
        if bad:
            out.append(bad)
        elif spec.api_key is None and not _is_loopback(address) and field != "router.prometheus_listen":
            out.append(Problem(field=field, host=host,
                               message=f"{address} is reachable from other machines but no api_key is set",
                               fix="set api_key: {file: PATH} or {vault_var: NAME}, or listen on 127.0.0.1"))
    return out


def _check_api_key(spec: Deployment) -> list[Problem]:
    key = spec.api_key
    if key is None:
        return []
    if key.file is not None and (not key.file.startswith("/") or ".." in key.file.split("/")):
        return [Problem(field="api_key.file", message=f"{key.file!r} is not an absolute path",
                        fix="give the key file's absolute path on the hosts, e.g. /etc/dsv4deploy/api_key")]
    if key.vault_var is not None and not VAR_NAME.match(key.vault_var):
        return [Problem(field="api_key.vault_var", message=f"{key.vault_var!r} is not a variable name",
                        fix="name the (vaulted) Ansible variable that holds the key")]
    return []


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
