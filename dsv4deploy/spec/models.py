"""The deployment spec's models: what a DeepSeek-V4-Flash deployment on SGLang is made of.

Structural checks (types, ranges, unknown keys) are pydantic's; `Problem` and `SpecError` are how
every check (here, in dsv4deploy.spec.checks and in dsv4deploy.spec.values) reports a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator

from dsv4deploy.sglang import routers, versions
from dsv4deploy.spec.engine import EngineSpec, record

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


# The checkpoint's precision (the recipes' `quant`): fp4 = deepseek-ai's own (FP4 experts), nvfp4 =
# nvidia/DeepSeek-V4-Flash-NVFP4, fp8 = sgl-project/DeepSeek-V4-Flash-FP8 (Hopper; SGLANG_DSV4_FP4_EXPERTS=0).
Precision = Literal["fp4", "nvfp4", "fp8"]


class ModelSpec(StrictModel):
    """Which weights to serve and under which name."""

    path: str = Field(min_length=1)
    served_name: str = Field(min_length=1)
    profile: str = "deepseek-v4-flash"
    # Unset: the profile's bits_per_param and no env switch (as before this setting existed).
    precision: Precision | None = None


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
    # The FP4 KV cache's recipe (`--fp4-kv-cache-recipe nvfp4` with kv_cache_dtype fp4_e2m1).
    kv_cache_recipe: str | None = None


MODEL_AFFECTING = tuple(ModelSettings.model_fields)


class MoeSpec(StrictModel):
    """Expert parallelism and the MoE backends of one server (the recipes' "MoE Parallelism" card)."""

    ep_size: Annotated[int, Field(ge=1)] | None = None
    # `--moe-a2a-backend` (deepep, megamoe, ...): how tokens reach the experts of other ranks.
    a2a_backend: str | None = None
    # `--moe-runner-backend` (marlin, flashinfer_mxfp4, ...): the expert GEMM kernels.
    runner_backend: str | None = None
    # SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK (sglang's default 128, srt/environ.py).
    deepep_max_dispatch_tokens_per_rank: Annotated[int, Field(ge=1)] | None = None


class SpeculativeSpec(StrictModel):
    """Speculative decoding (MTP): `--speculative-*`; the recipes use EAGLE 3-1-4 or 1-1-2."""

    algorithm: Literal["EAGLE", "NEXTN", "EAGLE3", "NGRAM"] = "EAGLE"
    num_steps: Annotated[int, Field(ge=1)]
    eagle_topk: Annotated[int, Field(ge=1)] = 1
    num_draft_tokens: Annotated[int, Field(ge=1)]


# Transports the PD KV transfer can run on (mooncake: RDMA over the IB devices, or TCP).
Transport = Literal["rdma", "tcp", "nvlink", "efa"]


class WorkerSpec(ModelSettings):
    """One SGLang server process (a prefill, a decode or the combined server)."""

    host: str = Field(min_length=1)
    gpus: list[Annotated[int, Field(ge=0)]] = Field(min_length=1)
    tp_size: Annotated[int, Field(ge=1)]
    port: Port
    # Unset: sglang's own default for this GPU and server (resolved at start; the plan shows it).
    mem_fraction_static: Fraction | None = None
    cuda_graph: CudaGraphSpec = CudaGraphSpec()
    env: EnvMap = {}
    extra_args: list[str] = []
    # The recipes' settings (dsv4deploy.spec.recipes validates them); unset = sglang's defaults.
    attn_dp_size: Annotated[int, Field(ge=1)] | None = None
    moe: MoeSpec | None = None
    speculative: SpeculativeSpec | None = None
    max_running_requests: Annotated[int, Field(ge=1)] | None = None
    # A server over several hosts: every host it runs on, rank 0 (`host`) first; each runs `gpus`.
    nodes: list[Annotated[str, Field(min_length=1)]] | None = None
    # Where rank 0 gathers the other ranks (`--dist-init-addr`, on rank 0's address).
    dist_init_port: Port | None = None

    def node_names(self) -> list[str]:
        """The hosts this server runs on, rank 0 first (just `host` for a one-node server)."""
        return list(self.nodes) if self.nodes else [self.host]

    def gpu_total(self) -> int:
        """GPUs of the whole server, on every node."""
        return len(self.gpus) * len(self.node_names())


# Worker keys left out of spec.json while unset, so a spec without them keeps its release identity.
RECIPE_WORKER_KEYS = ("attn_dp_size", "moe", "speculative", "max_running_requests", "nodes", "dist_init_port",
                      "transport", "kv_cache_recipe", "mem_fraction_static")


class PrefillSpec(WorkerSpec):
    """A prefill worker: also serves KV to decodes on its bootstrap port."""

    bootstrap_port: Port = 8998
    transfer_backend: str | None = None
    ib_device: str | None = None
    transport: Transport | None = None


class DecodeSpec(WorkerSpec):
    """A decode worker."""

    transfer_backend: str | None = None
    ib_device: str | None = None
    transport: Transport | None = None


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
    # Root as the service user must be meant: the units' sandbox is weak for root.
    # Not dumped: it changes no release (spec.json, the release id) and is checked only on the inventory.
    service_user_root_ok: bool = Field(default=False, exclude=True)
    # Where a server listens: 0.0.0.0 when other hosts (router, decode) must reach it.
    listen: str = "127.0.0.1"
    # Whether the inventory gives `address` (ansible_host, or a name that is an IP) rather than the
    # loopback guess; not a variable (load_spec sets it), and no part of any release.
    _addressed: bool = PrivateAttr(default=True)

    @property
    def addressed(self) -> bool:
        """Whether the inventory gives this host's address (else `address` is a guess)."""
        return self._addressed


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
    # Which router runs in front of the PD workers (dsv4deploy.sglang.routers).
    router_implementation: Literal["sglang-router", "smg"] = routers.DEFAULT_ROUTER
    # The router's launcher: one argv, or one per implementation (so `-e router_implementation=smg`
    # alone switches); unset = the implementation's default (`python3 -m ...`).
    router_launcher: list[str] | dict[str, list[str]] | None = None
    # Seconds a switchover or rollback lets in-flight requests finish: the router stops taking new ones
    # and exits when those are done (--shutdown-grace-period-secs), before any worker is stopped.
    drain_deadline_s: Annotated[int, Field(ge=1)] = 60
    # Tells this deployment's systemd units apart from another deployment's on the same host
    # (sglang-dsv4_NAME-prefill, ...); unset = derived from each host's install_root (dsv4deploy.plan.services).
    deployment_name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9]{0,23}$")] | None = None
    server_env: EnvMap = {}
    # Switches added for an experiment on top of the inventory's (server_env and each worker's env):
    # for every server, and per role (prefill, decode, combined, router), e.g.
    # -e '{"server_env_extra": {"SGLANG_DSV4_BF16_INDEX_K": "1"}}'. They win over both; the plan and
    # the report list them.
    server_env_extra: EnvMap = {}
    server_env_extra_by_role: dict[Literal["prefill", "decode", "combined", "router"], EnvMap] = {}
    # Environment names whose values are secret besides those matched by name (TOKEN, SECRET, KEY,
    # PASSWORD, ...; dsv4deploy.spec.secret_env): written to a 0600 env file, never into a release.
    secret_env: list[str] = []
    gpu_query_command: list[str] = Field(default=["nvidia-smi"], min_length=1)
    # sglang (and the router) installed per version into a venv on each host; unset: the hosts bring their own.
    engine: EngineSpec | None = None
    # Deep-merged over dsv4deploy/plan/profiles.yml by dsv4deploy.plan.memory (which validates its shape).
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

    def router_command(self, host: str | None = None) -> list[str]:
        """The launcher of the chosen router (validated to exist by check_deployment); on `host`, with the
        engine's interpreter when the engine installs the router."""
        impl = routers.implementation(self.router_implementation)
        launcher = self.router_launcher
        if isinstance(launcher, dict):
            launcher = launcher.get(self.router_implementation)
        argv = list(launcher) if launcher else list(impl.launcher)
        if host is not None and self.engine is not None and self.engine.router is not None:
            argv[0] = self.engine_record(host)["python"]
        return argv

    def server_command(self, host: str) -> list[str]:
        """The server launcher on `host`: as written, or run by the engine's interpreter there."""
        argv = list(self.server_launcher)
        if self.engine is not None:
            argv[0] = self.engine_record(host)["python"]
        return argv

    def engine_record(self, host: str) -> dict[str, Any]:
        """The engine of `host` as its release records it; {} without `engine:`."""
        if self.engine is None:
            return {}
        runs_router = self.topology == "pd" and self.router is not None and self.router.host == host
        return record(self.engine, self.host(host).install_root, self.router_implementation if runs_router else None)

    def host(self, name: str) -> HostSpec:
        """Settings of the inventory host `name`."""
        return self.hosts[name]

    def hosts_in_use(self) -> list[str]:
        """Inventory hosts that run something in the active topology, sorted."""
        names = {n for _, w in self.workers() for n in w.node_names()}
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
