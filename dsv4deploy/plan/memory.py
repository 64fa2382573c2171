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

from dsv4deploy.plan.sglang_memory import (
    Dsv4Layout,
    ServerShape,
    bytes_per_token,
    default_fraction,
    fixed_bytes,
    pool_tokens,
    reserve_parts_mib,
)
from dsv4deploy.spec import CombinedSpec, Deployment, PrefillSpec, Problem, SpecError, WorkerSpec

GIB = 2**30
Role = Literal["prefill", "decode", "combined"]
LayerType = Literal["experts", "attention", "shared_experts", "embedding", "lm_head"]
BitsKind = Literal["experts", "dense", "embedding"]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KvPoolProfile(_Strict):
    """DeepSeek-V4's KV layout from the checkpoint's config.json (see sglang_memory.Dsv4Layout)."""

    layers: Annotated[int, Field(ge=1)]
    c4_layers: Annotated[int, Field(ge=0)]
    c128_layers: Annotated[int, Field(ge=0)]
    head_dim: Annotated[int, Field(ge=1)] = 512
    index_head_dim: Annotated[int, Field(ge=1)] = 128
    page_size: Annotated[int, Field(ge=128)] = 256
    swa_full_tokens_ratio: Annotated[float, Field(ge=0)] = 0.1
    default_max_running_requests: Annotated[int, Field(ge=1)] = 256


class ModelProfile(_Strict):
    """Size of one model's weights (see profiles.yml)."""

    description: str = ""
    params_billion: Positive
    active_params_billion: Positive | None = None
    bits_per_param: Positive
    default_index_topk: Annotated[int, Field(ge=1)] = 512
    # Whether the smoke gate also wants the answer to "Say OK" to contain OK (an instruction-following
    # model); the gate setting smoke_expects_ok overrides it.
    smoke_expects_ok: bool = True
    # Reference task scores ({task: {score: fraction, source}}) the accuracy gate judges a release by.
    reference_scores: dict[str, dict[str, Any]] = {}
    # This model's own headroom, merged key by key over the shared `headroom` (a dense model has no
    # sparse top-k buffers, a small one needs less context and graph memory).
    headroom: dict[str, Any] = {}
    # The recipes' settings (see profiles.yml for where each number comes from).
    precision_bits: dict[str, Positive] = {}
    mtp_params_billion: NonNegative = 0.0
    kv_layers: Annotated[int, Field(ge=0)] = 0
    kv_bytes_per_token_layer: dict[str, Positive] = {}
    # Weights by layer type (billions of parameters: experts, attention, shared_experts, embedding,
    # lm_head) and each checkpoint precision's bits by kind (experts, dense, embedding); empty: the
    # whole model at bits(precision), split over tp_size.
    layer_params_billion: dict[LayerType, NonNegative] = {}
    layer_bits: dict[str, dict[BitsKind, Positive]] = {}
    # The checkpoint precision when model.precision is unset.
    default_precision: str | None = None
    # DeepSeek-V4's KV pool as sglang sizes it; unset: kv_layers x kv_bytes_per_token_layer.
    kv_pool: KvPoolProfile | None = None
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
        return self.precision_bits.get(precision or self.default_precision or "", self.bits_per_param)

    def weights_gib(self, precision: str | None = None) -> float:
        """All weights, in GiB."""
        return self.params_billion * 1e9 * self.bits(precision) / 8 / GIB

    def kv_bytes_per_token(self, kv_cache_dtype: str | None) -> float | None:
        """KV bytes one token takes on one GPU over all layers, or None when the profile does not say."""
        per_layer = self.kv_bytes_per_token_layer.get(kv_cache_dtype or "auto")
        return per_layer * self.kv_layers if per_layer and self.kv_layers else None


class HeadroomProfile(_Strict):
    """What a GPU needs outside the static pool beyond sglang's own reserve, and the smallest useful KV
    pool (see profiles.yml)."""

    # Sparse-attention top-k buffers per 512 of index_topk above the model's default (sglang's reserve
    # is sized for the default).
    topk_gib_per_512: dict[Role, NonNegative]
    # GiB this site keeps free beyond sglang's reserve (other processes on the GPU, a safety margin).
    extra_gib: NonNegative = 0.0
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
    mem_fraction_static: float  # the one in use: the worker's, or sglang's default when unset
    fraction_source: Literal["set", "sglang default"] = "set"
    sglang_default_fraction: float
    weights_gib: float  # weight shard per GPU (target model; replicated layers whole)
    static_pool_gib: float  # mem_fraction_static x GPU memory
    kv_pool_gib: float  # static pool minus weights
    min_kv_pool_gib: float
    headroom_available_gib: float  # GPU memory outside the static pool
    headroom_needed_gib: float
    headroom_parts: dict[str, float]  # sglang's reserve by part, top-k buffers, extra
    draft_weights_gib: float = 0.0  # the MTP draft layer's shard per GPU, loaded after the KV pool
    attn_dp_size: int = 1
    # Tokens the KV pool holds per attention-DP rank, and in all (None when the profile has no KV size).
    kv_tokens_per_rank: int | None = None
    kv_tokens_total: int | None = None
    kv_bytes_per_token: float | None = None
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


def weights_per_gpu(model: ModelProfile, precision: str | None, tp_size: int, attn_dp_size: int = 1) -> float:
    """The target model's weights on one GPU, in GiB.

    Experts and the LM head are split over all tp_size ranks; attention is split over the attention-TP
    group (tp_size / attn_dp_size), so under attention DP every GPU holds it whole, and with it the
    embedding and the shared experts.
    """
    if not model.layer_params_billion:
        return model.weights_gib(precision) / tp_size
    bits = model.layer_bits.get(precision or model.default_precision or "")
    attn_tp = max(tp_size // max(attn_dp_size, 1), 1)
    replicated = attn_dp_size > 1
    total = 0.0
    for layer, params in model.layer_params_billion.items():
        kind = "experts" if layer == "experts" else "embedding" if layer in ("embedding", "lm_head") else "dense"
        layer_bits = bits[kind] if bits and kind in bits else model.bits(precision)
        split = {"experts": tp_size, "lm_head": tp_size, "attention": attn_tp,
                 "embedding": 1 if replicated else tp_size, "shared_experts": 1 if replicated else tp_size}[layer]
        total += params * 1e9 * layer_bits / 8 / split
    return total / GIB


def server_shape(worker: WorkerSpec, role: Role, gpu_memory_gib: float) -> ServerShape:
    """The settings of one server that sglang's memory rules read."""
    moe = worker.moe
    return ServerShape(
        gpu_mib=gpu_memory_gib * 1024, tp_size=worker.tp_size,
        mode="null" if role == "combined" else role, attn_dp_size=worker.attn_dp_size or 1,
        max_running_requests=worker.max_running_requests, cuda_graph=worker.cuda_graph.enabled,
        cuda_graph_max_bs=worker.cuda_graph.max_bs,
        draft_tokens=worker.speculative.num_draft_tokens if worker.speculative else None,
        deepep=bool(moe and moe.a2a_backend == "deepep"))


def worker_memory(field: str, role: Role, worker: WorkerSpec, gpu_memory_gib: float, index_topk: int,
                  model: ModelProfile, headroom: HeadroomProfile, precision: str | None = None,
                  kv_cache_dtype: str | None = None) -> WorkerMemory:
    """The budget of one server on GPUs of `gpu_memory_gib`, explained."""
    total = gpu_memory_gib
    shape = server_shape(worker, role, total)
    default = default_fraction(shape)
    fraction = worker.mem_fraction_static if worker.mem_fraction_static is not None else default
    source: Literal["set", "sglang default"] = "set" if worker.mem_fraction_static is not None else "sglang default"
    dp = worker.attn_dp_size or 1
    weights = weights_per_gpu(model, precision, worker.tp_size, dp)
    # MTP's draft layer loads after the KV pool is sized, out of what is left outside the static pool.
    draft = model.mtp_params_billion * 1e9 * model.bits(precision) / 8 / GIB / worker.tp_size \
        if worker.speculative else 0.0
    static_pool = fraction * total
    kv_pool = static_pool - weights
    outside = total - static_pool

    parts = {k: v / 1024 for k, v in reserve_parts_mib(shape).items()}
    above_default = max(index_topk - model.default_index_topk, 0)
    parts["topk_buffers"] = headroom.topk_gib_per_512.get(role, 0.0) * above_default / 512
    parts["extra"] = headroom.extra_gib
    needed = sum(parts.values())

    if model.kv_pool is not None:
        layout = Dsv4Layout(**model.kv_pool.model_dump())
        per_token: float | None = bytes_per_token(layout, shape)
        fixed = fixed_bytes(layout, shape) / GIB
        kv_tokens: int | None = pool_tokens(layout, shape, max(kv_pool, 0) * GIB)
    else:
        per_token = model.kv_bytes_per_token(kv_cache_dtype)
        fixed = 0.0
        kv_tokens = int(max(kv_pool, 0) * GIB / per_token) if per_token else None

    # The feasible fractions: the pool holds the weights, the fixed KV state and a minimal KV pool; what
    # is outside covers sglang's own reserve (a fraction rounded to two places, as the cookbook writes
    # sglang's three-place defaults) plus what sglang does not reserve.
    low = max(_ceil_01((weights + fixed + headroom.min_kv_pool_gib) / total), 0.01)
    high = min(round((total - needed) / total + 1e-9, 2), 0.99)
    feasible_range = (low, high) if low <= high else (None, None)
    # sglang's own default is its own reserve: refused only for what sglang does not reserve.
    own = source == "sglang default" and not (parts["topk_buffers"] or parts["extra"])
    fits_headroom = own or fraction <= high + 1e-9
    feasible = kv_pool - fixed >= headroom.min_kv_pool_gib and fits_headroom

    state_text = f", {fixed:.1f} of it compress state per request slot" if fixed else ""
    explanation = [
        f"weights: {_weights_text(model, precision, worker.tp_size, dp)} = {weights:.1f} GiB "
        f"({weights * GIB / 1e9:.1f} GB) per GPU",
        f"static pool: mem_fraction_static {fraction:g} ({source}; sglang's own {default:g}) x {total:g} GiB = "
        f"{static_pool:.1f} GiB, leaving {kv_pool:.1f} GiB of KV cache after the weights (at least "
        f"{headroom.min_kv_pool_gib + fixed:.1f} GiB needed{state_text})",
        f"headroom: {outside:.1f} GiB outside the static pool, {needed:.1f} GiB needed = {_reserve_text(parts)} "
        f"(index_topk {index_topk}, {role})",
    ]
    if worker.speculative:
        explanation.append(f"MTP: the draft layer's {draft:.1f} GiB per GPU loads after the KV pool, from the "
                           f"headroom; its KV is in the bytes per token")
    if kv_tokens is not None and per_token:
        explanation.append(f"KV cache: {per_token:.0f} bytes per token ({kv_cache_dtype or 'auto'}"
                           f"{', sglang DeepSeek-V4 pool' if model.kv_pool else ''}) -> about "
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
        gpu_memory_gib=total, mem_fraction_static=fraction, fraction_source=source,
        sglang_default_fraction=default, weights_gib=weights, static_pool_gib=static_pool,
        kv_pool_gib=kv_pool, min_kv_pool_gib=headroom.min_kv_pool_gib + fixed, headroom_available_gib=outside,
        headroom_needed_gib=needed, headroom_parts=parts, feasible=feasible,
        min_feasible_fraction=feasible_range[0], max_feasible_fraction=feasible_range[1],
        explanation=explanation, draft_weights_gib=draft, attn_dp_size=dp, kv_tokens_per_rank=kv_tokens,
        kv_tokens_total=kv_tokens * dp if kv_tokens is not None else None, kv_bytes_per_token=per_token,
    )


def _reserve_text(parts: dict[str, float]) -> str:
    ours = ("topk_buffers", "extra")
    reserve = {k: v for k, v in parts.items() if k not in ours}
    text = f"sglang's reserve {sum(reserve.values()):.1f} (" + " + ".join(
        f"{k.replace('_', ' ')} {v:.1f}" for k, v in reserve.items() if v) + ")"
    return text + "".join(f" + {k.replace('_', ' ')} {parts[k]:.1f}" for k in ours if parts.get(k))


def _weights_text(model: ModelProfile, precision: str | None, tp_size: int, dp: int) -> str:
    name = precision or model.default_precision
    label = f" ({name})" if name else ""
    if not model.layer_params_billion:
        return (f"{model.params_billion:g}B params x {model.bits(precision):g} bits{label} = "
                f"{model.weights_gib(precision):.1f} GiB, / tp_size {tp_size}")
    bits = model.layer_bits.get(name or "", {})
    mix = ", ".join(f"{k} {v:g}" for k, v in bits.items())
    placed = (f"attention, embedding and shared experts whole on every GPU (attn_dp_size {dp}), the rest / "
              f"tp_size {tp_size}" if dp > 1 else f"/ tp_size {tp_size}")
    return f"{model.params_billion:g}B params{label}, bits by layer: {mix}; {placed}"


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
                fix="raise tp_size (more GPUs per server), lower index_topk or the CUDA graphs' max_bs"))
        elif r.mem_fraction_static > r.max_feasible_fraction:
            which = "sglang's default " if r.fraction_source == "sglang default" else ""
            out.append(Problem(
                field=f"{r.field}.mem_fraction_static", host=r.host,
                message=f"{which}{r.mem_fraction_static:g} leaves {r.headroom_available_gib:.1f} GiB outside the "
                        f"static pool, {r.headroom_needed_gib:.1f} GiB needed with index_topk {r.index_topk} "
                        f"({_reserve_text(r.headroom_parts)})",
                fix=f"set mem_fraction_static to {r.max_feasible_fraction:.2f} or less"))
        else:
            out.append(Problem(
                field=f"{r.field}.mem_fraction_static", host=r.host,
                message=f"{r.mem_fraction_static:g} gives a {r.static_pool_gib:.1f} GiB static pool, too small for "
                        f"{r.weights_gib:.1f} GiB of weights per GPU and a {r.min_kv_pool_gib:.1f} GiB KV pool",
                fix=f"set mem_fraction_static to at least {r.min_feasible_fraction:.2f}"))
    return out
