"""Memory feasibility per server: do the weights, the KV pool and the headroom fit on its GPUs?

SGLang splits each GPU in two: the static pool (`mem_fraction_static` of the GPU: the weight shard
plus the KV cache pool) and everything else (CUDA context, activations, CUDA graphs, NCCL, the
DeepSeek-V4 sparse-attention top-k buffers). A server fits when the static pool holds its weight
shard plus a minimal KV pool, and what is left outside it covers the headroom. The constants live in
`profiles.yml` beside this module; the inventory variable `memory_profile` deep-merges over them.

Pure functions: `check_memory(spec)` returns one `WorkerMemory` per server, `problems_from_memory`
turns the infeasible ones into spec `Problem`s for the preflight gate and the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dsv4deploy.spec import CombinedSpec, Deployment, PrefillSpec, Problem, SpecError, WorkerSpec

GIB = 2**30
Role = Literal["prefill", "decode", "combined"]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelProfile(_Strict):
    """Size of one model's weights (see profiles.yml)."""

    description: str = ""
    params_billion: Positive
    active_params_billion: Positive | None = None
    bits_per_param: Positive
    default_index_topk: Annotated[int, Field(ge=1)] = 512
    # Whether the smoke gate also wants the answer to "Say OK" to contain OK (an instruction-following
    # model); the gate setting smoke_expect_ok overrides it.
    smoke_expects_ok: bool = True
    # Reference task scores ({task: {score: fraction, source}}) the accuracy gate judges a release by.
    reference_scores: dict[str, dict[str, Any]] = {}
    # This model's own headroom, merged key by key over the shared `headroom` (a dense model has no
    # sparse top-k buffers, a small one needs less context and graph memory).
    headroom: dict[str, Any] = {}
    # The recipes' settings (see profiles.yml for where each number comes from).
    precision_bits: dict[str, Positive] = {}
    mtp_params_billion: NonNegative = 0.0
    mtp_gib_per_draft_token: NonNegative = 0.0
    kv_layers: Annotated[int, Field(ge=0)] = 0
    kv_bytes_per_token_layer: dict[str, Positive] = {}
    # Start-up: the readiness gate's default deadline, and log lines that fail readiness at once.
    readiness_deadline_s: Positive | None = None
    fatal_log_patterns: list[str] = []
    # What the checkpoint's config.json says (preflight compares it: dsv4deploy.plan.model_needs):
    # `architectures` (any one matching is enough; empty = not checked), `num_attention_heads` (tp_size
    # must divide it) and `max_position_embeddings` (the longest context_length the model takes).
    architectures: list[str] = []
    attention_heads: Annotated[int, Field(ge=1)] | None = None
    max_context_length: Annotated[int, Field(ge=1)] | None = None

    def bits(self, precision: str | None) -> float:
        """Bits per parameter of the checkpoint's `precision` (None or unknown: bits_per_param)."""
        return self.precision_bits.get(precision or "", self.bits_per_param)

    def weights_gib(self, precision: str | None = None) -> float:
        """All weights, in GiB."""
        return self.params_billion * 1e9 * self.bits(precision) / 8 / GIB

    def kv_bytes_per_token(self, kv_cache_dtype: str | None) -> float | None:
        """KV bytes one token takes on one GPU over all layers, or None when the profile does not say."""
        per_layer = self.kv_bytes_per_token_layer.get(kv_cache_dtype or "auto")
        return per_layer * self.kv_layers if per_layer and self.kv_layers else None


class HeadroomProfile(_Strict):
    """What a GPU needs outside the static pool, and the smallest useful KV pool (see profiles.yml)."""

    base_gib: NonNegative
    cuda_graph_gib: NonNegative
    cuda_graph_reference_bs: Annotated[int, Field(ge=1)]
    topk_gib_per_512: dict[Role, NonNegative]
    min_kv_pool_gib: NonNegative


class MemoryProfile(_Strict):
    """profiles.yml, after the inventory's `memory_profile` is merged over it."""

    models: dict[str, ModelProfile]
    headroom: HeadroomProfile


class WorkerMemory(_Strict):
    """The memory budget of one server, per GPU, with the reasoning in `explanation`."""

    field: str  # spec path of the worker, e.g. decode[0]
    role: Role
    host: str
    tp_size: int
    index_topk: int
    gpu_memory_gib: float
    mem_fraction_static: float
    weights_gib: float  # weight shard per GPU at tp_size
    static_pool_gib: float  # mem_fraction_static x GPU memory
    kv_pool_gib: float  # static pool minus weights
    min_kv_pool_gib: float
    headroom_available_gib: float  # GPU memory outside the static pool
    headroom_needed_gib: float
    headroom_parts: dict[str, float]  # base, cuda_graphs, topk_buffers (, mtp_buffers)
    draft_weights_gib: float = 0.0  # the MTP draft layer's shard per GPU, inside the static pool
    attn_dp_size: int = 1
    # Tokens the KV pool holds per attention-DP rank, and in all (None when the profile has no KV size).
    kv_tokens_per_rank: int | None = None
    kv_tokens_total: int | None = None
    feasible: bool
    # The feasible range of mem_fraction_static, in steps of 0.01 (None when nothing fits).
    min_feasible_fraction: float | None
    max_feasible_fraction: float | None
    explanation: list[str]


# -- profiles --------------------------------------------------------------------------------------

@cache
def _packaged_profile() -> dict[str, Any]:
    text = resources.files("dsv4deploy.plan").joinpath("profiles.yml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`: mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_profile(override: Mapping[str, Any] | None = None) -> MemoryProfile:
    """The packaged profiles with `override` (the inventory's `memory_profile`) merged over them.

    Raises SpecError naming the `memory_profile` key at fault.
    """
    data = deep_merge(_packaged_profile(), override or {})
    try:
        return MemoryProfile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = "memory_profile." + ".".join(str(p) for p in err["loc"])
            problems.append(Problem(field=field, message=f"{err['msg']} (got {err.get('input')!r})",
                                    fix="correct it; dsv4deploy/plan/profiles.yml documents every key"))
        raise SpecError(problems) from None


# -- the check -------------------------------------------------------------------------------------

def check_memory(spec: Deployment) -> list[WorkerMemory]:
    """The memory budget of every server of the active topology, in spec order.

    Raises SpecError when the memory profile override is malformed or `model.profile` is unknown.
    """
    profile = load_profile(spec.memory_profile)
    model = profile.models.get(spec.model.profile)
    if model is None:
        raise SpecError([Problem(
            field="model.profile", message=f"no memory profile '{spec.model.profile}'",
            fix=f"use one of {', '.join(sorted(profile.models))} or define memory_profile.models."
                f"{spec.model.profile}")])
    headroom = model_headroom(profile, spec.model.profile)
    from dsv4deploy.plan.model_needs import profile_problems

    if problems := profile_problems(spec, model):
        raise SpecError(problems)
    return [
        worker_memory(path, _role(worker), worker, spec.host(worker.host).gpu_memory_gib,
                      spec.effective(worker, "index_topk") or model.default_index_topk, model, headroom,
                      precision=spec.model.precision, kv_cache_dtype=spec.effective(worker, "kv_cache_dtype"))
        for path, worker in spec.workers()
    ]


def model_headroom(profile: MemoryProfile, name: str) -> HeadroomProfile:
    """The headroom of model `name`: the shared one with the model's own `headroom` merged over it."""
    own = profile.models[name].headroom
    if not own:
        return profile.headroom
    try:
        return HeadroomProfile.model_validate(deep_merge(profile.headroom.model_dump(), own))
    except ValidationError as exc:
        raise SpecError([Problem(field=f"memory_profile.models.{name}.headroom." + ".".join(map(str, e["loc"])),
                                 message=f"{e['msg']} (got {e.get('input')!r})",
                                 fix="correct it; dsv4deploy/plan/profiles.yml documents every key")
                         for e in exc.errors()]) from None


def startup_window(spec: Deployment) -> dict[str, Any]:
    """The model profile's readiness deadline and fatal log patterns (gate targets); unknown profile: none."""
    model = load_profile(spec.memory_profile).models.get(spec.model.profile)
    if model is None:
        return {"readiness_deadline_s": None, "fatal_log_patterns": []}
    return {"readiness_deadline_s": model.readiness_deadline_s, "fatal_log_patterns": list(model.fatal_log_patterns)}


def smoke_expects_ok(spec: Deployment) -> bool:
    """Whether the model of `spec` is expected to answer ``Say OK`` with OK (its profile; True if unknown)."""
    model = load_profile(spec.memory_profile).models.get(spec.model.profile)
    return True if model is None else model.smoke_expects_ok


def reference_scores(spec: Deployment) -> dict[str, dict[str, Any]]:
    """The reference task scores of the model of `spec` (its profile's; none if unknown)."""
    model = load_profile(spec.memory_profile).models.get(spec.model.profile)
    return {} if model is None else dict(model.reference_scores)


def _role(worker: WorkerSpec) -> Role:
    if isinstance(worker, PrefillSpec):
        return "prefill"
    return "combined" if isinstance(worker, CombinedSpec) else "decode"


def worker_memory(field: str, role: Role, worker: WorkerSpec, gpu_memory_gib: float, index_topk: int,
                  model: ModelProfile, headroom: HeadroomProfile, precision: str | None = None,
                  kv_cache_dtype: str | None = None) -> WorkerMemory:
    """The budget of one server on GPUs of `gpu_memory_gib`, explained."""
    total = gpu_memory_gib
    fraction = worker.mem_fraction_static
    bits = model.bits(precision)
    mtp = worker.speculative
    # MTP's draft layer is resident beside the model, split over the same ranks.
    draft = model.mtp_params_billion * 1e9 * bits / 8 / GIB / worker.tp_size if mtp else 0.0
    weights = model.weights_gib(precision) / worker.tp_size + draft
    static_pool = fraction * total
    kv_pool = static_pool - weights
    outside = total - static_pool

    graphs = 0.0
    if worker.cuda_graph.enabled:
        scale = (worker.cuda_graph.max_bs or headroom.cuda_graph_reference_bs) / headroom.cuda_graph_reference_bs
        graphs = headroom.cuda_graph_gib * scale
    topk = headroom.topk_gib_per_512.get(role, 0.0) * index_topk / 512
    parts = {"base": headroom.base_gib, "cuda_graphs": graphs, "topk_buffers": topk}
    if mtp:
        parts["mtp_buffers"] = model.mtp_gib_per_draft_token * mtp.num_draft_tokens
    needed = sum(parts.values())
    # DeepSeek-V4's KV row is not split over TP ranks: each GPU holds whole rows for its requests, so
    # attention DP (each rank its own requests) multiplies the server's capacity by attn_dp_size.
    dp = worker.attn_dp_size or 1
    per_token = model.kv_bytes_per_token(kv_cache_dtype)
    kv_tokens = int(max(kv_pool, 0) * GIB / per_token) if per_token else None

    # The feasible fractions: pool >= weights + min KV, and outside >= headroom; 0 < f < 1.
    low = max(_ceil_01((weights + headroom.min_kv_pool_gib) / total), 0.01)
    high = min(_floor_01((total - needed) / total), 0.99)
    feasible_range = (low, high) if low <= high else (None, None)
    feasible = kv_pool >= headroom.min_kv_pool_gib and outside >= needed

    graphs_text = (f"CUDA graphs {graphs:.1f}" if worker.cuda_graph.enabled else "CUDA graphs off 0.0")
    draft_text = f" + MTP draft layer {draft:.1f} GiB" if mtp else ""
    explanation = [
        f"weights: {model.params_billion:g}B params x {bits:g} bits{f' ({precision})' if precision else ''} = "
        f"{model.weights_gib(precision):.1f} GiB, / tp_size {worker.tp_size}{draft_text} = {weights:.1f} GiB "
        f"({weights * GIB / 1e9:.1f} GB) per GPU",
        f"static pool: mem_fraction_static {fraction:.2f} x {total:g} GiB = {static_pool:.1f} GiB, "
        f"leaving {kv_pool:.1f} GiB of KV cache after the weights (at least "
        f"{headroom.min_kv_pool_gib:.1f} GiB needed)",
        f"headroom: {outside:.1f} GiB outside the static pool, {needed:.1f} GiB needed = base "
        f"{headroom.base_gib:.1f} + {graphs_text} + top-k buffers {topk:.1f} (index_topk {index_topk}, {role})",
    ]
    if mtp:
        explanation.append(f"MTP: {mtp.num_draft_tokens} draft tokens x {model.mtp_gib_per_draft_token:g} GiB "
                           f"of draft buffers = {parts['mtp_buffers']:.1f} GiB of the headroom")
    if kv_tokens is not None:
        explanation.append(f"KV cache: {per_token:.0f} bytes per token ({kv_cache_dtype or 'auto'}) -> about "
                           f"{kv_tokens} tokens per attention-DP rank, {kv_tokens * dp} in all (attn_dp_size {dp})")
    verdict = "fits" if feasible else "does not fit"
    if feasible_range[1] is not None:
        explanation.append(f"{verdict}: mem_fraction_static may be {feasible_range[0]:.2f} to "
                           f"{feasible_range[1]:.2f}")
    else:
        explanation.append(f"{verdict}: no mem_fraction_static in steps of 0.01 leaves room for the weights, "
                           "the minimal KV pool and the headroom together")
    return WorkerMemory(
        field=field, role=role, host=worker.host, tp_size=worker.tp_size, index_topk=index_topk,
        gpu_memory_gib=total, mem_fraction_static=fraction, weights_gib=weights, static_pool_gib=static_pool,
        kv_pool_gib=kv_pool, min_kv_pool_gib=headroom.min_kv_pool_gib, headroom_available_gib=outside,
        headroom_needed_gib=needed, headroom_parts=parts, feasible=feasible,
        min_feasible_fraction=feasible_range[0], max_feasible_fraction=feasible_range[1],
        explanation=explanation, draft_weights_gib=draft, attn_dp_size=dp, kv_tokens_per_rank=kv_tokens,
        kv_tokens_total=kv_tokens * dp if kv_tokens is not None else None,
    )


def _floor_01(x: float) -> float:
    # The epsilon keeps 0.80 from becoming 0.79 when float arithmetic lands just below it.
    return math.floor(x * 100 + 1e-9) / 100


def _ceil_01(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


def problems_from_memory(reports: list[WorkerMemory]) -> list[Problem]:
    """A Problem (field, host, fix) for every server that does not fit."""
    out = []
    for r in reports:
        if r.feasible:
            continue
        if r.max_feasible_fraction is None:
            out.append(Problem(
                field=f"{r.field}.tp_size", host=r.host,
                message=f"no mem_fraction_static fits: {r.weights_gib:.1f} GiB of weights per GPU at tp_size "
                        f"{r.tp_size} + {r.min_kv_pool_gib:.1f} GiB KV + {r.headroom_needed_gib:.1f} GiB headroom "
                        f"exceed {r.gpu_memory_gib:g} GiB",
                fix="raise tp_size (more GPUs per server), lower index_topk or disable CUDA graphs"))
        elif r.headroom_available_gib < r.headroom_needed_gib:
            p = r.headroom_parts
            out.append(Problem(
                field=f"{r.field}.mem_fraction_static", host=r.host,
                message=f"{r.mem_fraction_static:.2f} leaves {r.headroom_available_gib:.1f} GiB outside the static "
                        f"pool, {r.headroom_needed_gib:.1f} GiB needed with index_topk {r.index_topk} (base "
                        f"{p['base']:.1f} + CUDA graphs {p['cuda_graphs']:.1f} + top-k buffers "
                        f"{p['topk_buffers']:.1f})",
                fix=f"set mem_fraction_static to {r.max_feasible_fraction:.2f} or less"))
        else:
            out.append(Problem(
                field=f"{r.field}.mem_fraction_static", host=r.host,
                message=f"{r.mem_fraction_static:.2f} gives a {r.static_pool_gib:.1f} GiB static pool, too small for "
                        f"{r.weights_gib:.1f} GiB of weights per GPU and a {r.min_kv_pool_gib:.1f} GiB KV pool",
                fix=f"set mem_fraction_static to at least {r.min_feasible_fraction:.2f}"))
    return out
