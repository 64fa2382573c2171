"""From parsed flags to the server's resolved settings, and the checks that stop a start."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .env import SimEnv
from .memory import auto_fraction

MODEL_DEFAULT_INDEX_TOPK = 512
MODEL_MAX_POSITION_EMBEDDINGS = 65536
ARCHITECTURE = "DeepseekV4ForCausalLM"


class StartupError(Exception):
    """A start that fails after the log began: ``text`` is what goes to the log, exit 1."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True)
class Settings:
    """The effective settings of one simulated server (what it applied, not what it was told)."""

    args: dict[str, Any]  # every resolved server arg, as /server_info reports them
    overrides: dict[str, Any]
    index_topk: int  # effective
    cuda_graph: bool
    cuda_graph_max_bs: int
    mode: str  # "null", "prefill" or "decode"
    gpus: list[int]
    served_name: str
    context_length: int

    @property
    def pd(self) -> bool:
        """True for a prefill or decode worker."""
        return self.mode in ("prefill", "decode")

    def model_affecting(self) -> dict[str, Any]:
        """Settings prefill and decode must agree on (a mismatch garbles the transfer)."""
        return {
            "index_topk": self.index_topk,
            "page_size": self.args.get("page_size"),
            "kv_cache_dtype": self.args.get("kv_cache_dtype"),
            "context_length": self.context_length,
        }


def parse_overrides(raw: str) -> dict[str, Any]:
    """``--json-model-override-args``; invalid JSON fails the start as in sglang's ModelConfig."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise StartupError(f"json.decoder.JSONDecodeError: {exc}") from None
    if not isinstance(value, dict):
        raise StartupError(f"TypeError: json_model_override_args must be a JSON object, got {raw!r}")
    return value


def select_gpus(env: SimEnv, base_gpu_id: int, count: int) -> list[int]:
    """Physical GPU indices: CUDA_VISIBLE_DEVICES narrowed by --base-gpu-id and the TP size."""
    if env.cuda_visible_devices is None or env.cuda_visible_devices.strip() == "":
        visible = list(range(env.gpu_count))
    else:
        try:
            visible = [int(x) for x in env.cuda_visible_devices.split(",") if x.strip()]
        except ValueError:
            raise StartupError(
                "RuntimeError: CUDA error: invalid device ordinal "
                f"(CUDA_VISIBLE_DEVICES={env.cuda_visible_devices!r})") from None
    chosen = visible[base_gpu_id: base_gpu_id + count]
    if len(chosen) < count or any(g >= env.gpu_count or g < 0 for g in chosen):
        raise StartupError(
            "RuntimeError: CUDA error: invalid device ordinal\n"
            f"CUDA kernel errors might be asynchronously reported at some other API call "
            f"(wanted {count} GPUs from base_gpu_id={base_gpu_id} among visible {visible})")
    return chosen


def _cuda_graph_enabled(args: dict[str, Any]) -> bool:
    return not (
        args.get("disable_cuda_graph")
        or args.get("disable_decode_cuda_graph")
        or args.get("cuda_graph_backend_decode") == "disabled"
    )


def resolve(args: dict[str, Any], env: SimEnv) -> Settings:
    """Fill the defaults sglang resolves at start and work out the effective settings."""
    args = dict(args)
    overrides = parse_overrides(args.get("json_model_override_args") or "{}")
    requested = overrides.get("index_topk", MODEL_DEFAULT_INDEX_TOPK)
    index_topk = MODEL_DEFAULT_INDEX_TOPK if env.faults.ignore_override else requested
    cuda_graph = _cuda_graph_enabled(args)
    args["tokenizer_path"] = args.get("tokenizer_path") or args["model_path"]
    args["served_model_name"] = args.get("served_model_name") or args["model_path"]
    max_pos = int(overrides.get("max_position_embeddings", MODEL_MAX_POSITION_EMBEDDINGS))
    args["context_length"] = args.get("context_length") or max_pos
    if args.get("page_size") is None:
        args["page_size"] = 64
    if args.get("chunked_prefill_size") is None:
        args["chunked_prefill_size"] = 8192
    if args.get("max_running_requests") is None:
        args["max_running_requests"] = 256
    bs_key = "cuda_graph_max_bs_decode" if "cuda_graph_max_bs_decode" in args else "cuda_graph_max_bs"
    if args.get(bs_key) is None:
        args[bs_key] = 128
    if args.get("mem_fraction_static") is None:
        topk = index_topk if isinstance(index_topk, int) else MODEL_DEFAULT_INDEX_TOPK
        args["mem_fraction_static"] = auto_fraction(env.gpu_memory_gib, topk, cuda_graph)
    nnodes = max(1, int(args.get("nnodes") or 1))
    per_node = max(1, int(args.get("tp_size") or 1) // nnodes)
    gpus = select_gpus(env, int(args.get("base_gpu_id") or 0), per_node)
    return Settings(
        args=args,
        overrides=overrides,
        index_topk=index_topk,
        cuda_graph=cuda_graph,
        cuda_graph_max_bs=int(args[bs_key]),
        mode=str(args.get("disaggregation_mode") or "null"),
        gpus=gpus,
        served_name=str(args["served_model_name"]),
        context_length=int(args["context_length"]),
    )
