"""Per-version sglang flag tables: logical server settings -> the command-line flags of that release.

Every flag here is checked against the real argument parser of its release (the PyPI wheels of
0.5.12, 0.5.18 and 0.5.23, tests/contract): what we render must exist and not be deprecated, what we
refuse must really be gone or deprecated. A version without a table is refused by spec validation:
we never guess flags.

What changed between releases (the traps this table exists for):
- 0.5.12: `--cuda-graph-max-bs N` and `--disable-cuda-graph` (one graph setting per server).
- 0.5.18: per-phase settings `--cuda-graph-max-bs-{decode,prefill}`, `--disable-{decode,prefill}-cuda-graph`;
  the old spellings are deprecated aliases, so we render the new ones. Also deprecated: the
  `--nsa-{prefill,decode}-backend` flags (now `--dsa-*`) and `--disable-piecewise-cuda-graph` (now
  `--cuda-graph-backend-prefill disabled`).
- 0.5.23: those are gone (`--cuda-graph-max-bs` makes argparse exit 2 as ambiguous);
  `--disable-cuda-graph` and `--enable-dp-attention` (now `--attn-dp-size`) are deprecated.

The DeepSeek-V4 recipes' settings (attention DP, EP/MoE backends, MTP, KV dtype, transport) are spelled
here too: attention DP is `--dp-size N --enable-dp-attention` up to 0.5.18 and `--attn-dp-size N` in
0.5.23 (its help: "instead of --dp-size <dp-size> --enable-dp-attention"); the KV dtype choices differ
(`fp4_e2m1` up to 0.5.18, `nvfp4` in 0.5.23); `--fp4-kv-cache-recipe` and `--disaggregation-transport`
are in none of these releases, so a spec asking for them is refused, naming the version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from dsv4deploy.sglang import versions

ServerRole = Literal["prefill", "decode", "combined"]

# Flags whose spelling is the same in every release we know (checked in each wheel).
COMMON_SERVER_FLAGS: Mapping[str, str] = {
    "model_path": "--model-path",
    "served_model_name": "--served-model-name",
    "tp_size": "--tp-size",  # `--tp` only works as an argparse prefix
    "base_gpu_id": "--base-gpu-id",
    "host": "--host",
    "port": "--port",
    "mem_fraction_static": "--mem-fraction-static",
    "json_model_override_args": "--json-model-override-args",
    "chat_template": "--chat-template",
    "page_size": "--page-size",
    "kv_cache_dtype": "--kv-cache-dtype",
    "context_length": "--context-length",
    "disaggregation_mode": "--disaggregation-mode",
    "disaggregation_bootstrap_port": "--disaggregation-bootstrap-port",
    "disaggregation_transfer_backend": "--disaggregation-transfer-backend",
    "disaggregation_ib_device": "--disaggregation-ib-device",
    "reasoning_parser": "--reasoning-parser",
    "tool_call_parser": "--tool-call-parser",
    # Prometheus text at /metrics on the server's own port (the performance gate reads it).
    "enable_metrics": "--enable-metrics",
    "api_key": "--api-key",
    # The DeepSeek-V4 recipes' settings (dsv4deploy.spec.models.WorkerSpec), same in every release.
    "ep_size": "--ep-size",
    "moe_a2a_backend": "--moe-a2a-backend",
    "moe_runner_backend": "--moe-runner-backend",
    "speculative_algorithm": "--speculative-algorithm",
    "speculative_num_steps": "--speculative-num-steps",
    "speculative_eagle_topk": "--speculative-eagle-topk",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
    "max_running_requests": "--max-running-requests",
    "nnodes": "--nnodes",
    "node_rank": "--node-rank",
    "dist_init_addr": "--dist-init-addr",
}


@dataclass(frozen=True)
class CudaGraphFlags:
    """How one release spells the CUDA-graph settings, per server role."""

    max_bs: Mapping[ServerRole, str]
    disable: Mapping[ServerRole, tuple[str, ...]]


@dataclass(frozen=True)
class FlagTable:
    """The flags of one sglang release."""

    version: str
    cuda_graph: CudaGraphFlags
    # Flags this release refuses or deprecates: never rendered, and refused in extra_args.
    forbidden: tuple[str, ...] = ()
    # Parser names of the DeepSeek-V4 family (`--reasoning-parser`, `--tool-call-parser`).
    dsv4_reasoning_parser: str = "deepseek-v4"
    dsv4_tool_call_parser: str = "deepseekv4"
    flags: Mapping[str, str] = field(default_factory=lambda: dict(COMMON_SERVER_FLAGS))
    # Attention data parallelism: `--attn-dp-size N` (0.5.23) or `--dp-size N --enable-dp-attention`.
    attn_dp_flag: str | None = None
    # The values `--kv-cache-dtype` takes (the parser's choices).
    kv_cache_dtypes: tuple[str, ...] = ()
    # transport -> the `--disaggregation-transfer-backend` value that gives it with mooncake; a transport
    # missing here cannot be had from this release (no `--disaggregation-transport` before it exists).
    mooncake_transports: Mapping[str, str] = field(default_factory=lambda: {"rdma": "mooncake"})
    # Environment MTP needs in this release (SGLANG_ENABLE_SPEC_V2 exists only in 0.5.12's environ.py;
    # later releases have speculative v2 always on).
    speculative_env: Mapping[str, str] = field(default_factory=dict)
    # Recipe flags this release does not have (setting -> the flag): a spec using them is refused.
    missing: Mapping[str, str] = field(default_factory=lambda: dict(_NOT_YET))

    def flag(self, setting: str) -> str:
        """The flag for a logical setting (KeyError for a setting this table does not know)."""
        return self.flags[setting]

    def cuda_graph_args(self, role: ServerRole, enabled: bool, max_bs: int | None) -> list[str]:
        """CUDA-graph flags for a server of `role`; [] when sglang's defaults apply.

        A prefill server only runs the prefill phase, so from 0.5.18 on it gets the prefill-phase
        flags; decode gets the decode-phase ones; the combined server runs both, so disabling
        disables both and `max_bs` (a decode batch size, as `--cuda-graph-max-bs` was) goes to decode.
        """
        if not enabled:
            return list(self.cuda_graph.disable[role])
        if max_bs is not None:
            return [self.cuda_graph.max_bs[role], str(max_bs)]
        return []

    def attn_dp_args(self, size: int) -> list[str]:
        """Attention data parallelism over `size` ranks; [] for 1 (sglang's default)."""
        if size <= 1:
            return []
        if self.attn_dp_flag:
            return [self.attn_dp_flag, str(size)]
        return ["--dp-size", str(size), "--enable-dp-attention"]


# Flags of the recipes that no release here has (sglang's main branch, after 0.5.23).
_NOT_YET = {"kv_cache_recipe": "--fp4-kv-cache-recipe", "transport": "--disaggregation-transport"}

_OLD_CUDA_GRAPH = CudaGraphFlags(
    max_bs={"prefill": "--cuda-graph-max-bs", "decode": "--cuda-graph-max-bs", "combined": "--cuda-graph-max-bs"},
    disable={
        "prefill": ("--disable-cuda-graph",),
        "decode": ("--disable-cuda-graph",),
        "combined": ("--disable-cuda-graph",),
    },
)

# 0.5.18 introduced the per-phase settings (dataclass fields cuda_graph_max_bs_{decode,prefill},
# disable_{decode,prefill}_cuda_graph); 0.5.23 keeps them and drops the old alias.
_PER_PHASE_CUDA_GRAPH = CudaGraphFlags(
    max_bs={
        "prefill": "--cuda-graph-max-bs-prefill",
        "decode": "--cuda-graph-max-bs-decode",
        "combined": "--cuda-graph-max-bs-decode",
    },
    disable={
        "prefill": ("--disable-prefill-cuda-graph",),
        "decode": ("--disable-decode-cuda-graph",),
        "combined": ("--disable-prefill-cuda-graph", "--disable-decode-cuda-graph"),
    },
)

# Spellings 0.5.18 deprecates (and 0.5.23 removes).
_FORBIDDEN_0518 = ("--cuda-graph-max-bs", "--cuda-graph-bs", "--disable-cuda-graph", "--disable-piecewise-cuda-graph",
                   "--nsa-prefill-backend", "--nsa-decode-backend")

# `--kv-cache-dtype` choices per release (tests/contract checks them against each parser).
_KV_0512 = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
_KV_0518 = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16", "fp4_e2m1")
_KV_0523 = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
# `mooncake_tcp` is a transfer backend from 0.5.18 on.
_MOONCAKE_TCP = {"rdma": "mooncake", "tcp": "mooncake_tcp"}

TABLES: Mapping[str, FlagTable] = {
    "0.5.12": FlagTable("0.5.12", _OLD_CUDA_GRAPH, kv_cache_dtypes=_KV_0512,
                        speculative_env={"SGLANG_ENABLE_SPEC_V2": "1"}),
    "0.5.18": FlagTable("0.5.18", _PER_PHASE_CUDA_GRAPH, forbidden=_FORBIDDEN_0518, kv_cache_dtypes=_KV_0518,
                        mooncake_transports=_MOONCAKE_TCP),
    "0.5.23": FlagTable("0.5.23", _PER_PHASE_CUDA_GRAPH, forbidden=(*_FORBIDDEN_0518, "--enable-dp-attention"),
                        attn_dp_flag="--attn-dp-size", kv_cache_dtypes=_KV_0523, mooncake_transports=_MOONCAKE_TCP),
}


def table(version: str) -> FlagTable:
    """The flag table for `version` (the nearest known one's for a patch release, versions.table_version);
    KeyError names the versions we have tables for."""
    known = versions.table_version(version)
    if known is None:
        raise KeyError(f"no flag table for sglang {version}; known: {', '.join(versions.known_versions())}")
    return TABLES[known]


def forbidden_flags_in(version: str, args: Iterable[str]) -> list[str]:
    """The arguments in `args` that sglang `version` refuses or deprecates (e.g. extra_args).

    Matches `--flag` and `--flag=value` exactly; abbreviations are a separate check.
    """
    forbidden = set(table(version).forbidden)
    return [a for a in args if a.split("=", 1)[0] in forbidden]


def _check_tables_match_versions() -> None:
    # Every release versions.py knows must have a table, and no table without a release.
    if set(TABLES) != set(versions.RELEASES):
        raise RuntimeError(f"flag tables {sorted(TABLES)} != releases {sorted(versions.RELEASES)}")


_check_tables_match_versions()
