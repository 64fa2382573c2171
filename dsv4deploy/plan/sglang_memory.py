"""sglang's own memory rules, for the plan: its default `mem_fraction_static` and its DeepSeek-V4 KV pool.

The rules are sglang 0.5.23's, restated (tests/contract/test_memory_against_sglang.py holds the plan to
the real functions of that wheel for every starter):

- The default fraction (srt/arg_groups/memory_hook.py, `handle_gpu_memory_settings`): sglang reserves
  MiB for activations (1.5 per token of the chunked prefill, or of a decode's running batch times its
  draft tokens, at least 2048 tokens), a constant 512, 1024 per 8 ranks of parallelism, its CUDA graphs
  (2 per decode batch, plus DP-attention padding of 3 per batch per DP rank and 1.5 more above batch
  300), at least 10 GiB on cards over 60 GiB, then 2 GiB more for DeepEP's all-to-all buffers. The
  fraction is what is left, rounded to three decimals.
- The KV pool of DeepSeek-V4 (srt/model_executor/pool_configurator.py, `DSV4PoolConfigurator`): every
  layer keeps a sliding window (priced per sliding-window slot, 10 % of the full tokens), layers
  compressed 4:1 keep a quarter of each token plus the indexer's key, layers compressed 128:1 keep
  1/128, MTP's draft layer inflates every byte by (layers + 1) / layers, and the 128:1 layers' compress
  state is a fixed cost per request slot. What is left of the static pool after the weights, less the
  fixed cost, divided by the bytes of one full token, is the pool's token count per attention-DP rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Mode = Literal["null", "prefill", "decode"]
MIB = 2**20

# The cards sglang sizes by, in MiB of capacity: (below this, chunked prefill, decode graph max batch
# under tp 4, at tp 4 or more).
_GPU_CLASSES = ((20 * 1024, 2048, 8, 8), (35 * 1024, 4096, 48, 160), (60 * 1024, 4096, 32, 160),
                (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512))
_LARGEST_CLASS = (16384, 512, 512)
# The KV row of DeepSeek-V4's default ("v4") layout: 448 FP8 + 64 BF16 values and 8 scale bytes, pages
# padded to 576-byte rows (sglang's kernels/ops/attention/dsv4/kv_layout.py).
_V4_ROW_BYTES = 584
_V4_ROW_ALIGN = 576
_FP32 = 4


@dataclass(frozen=True)
class ServerShape:
    """What sglang's memory rules read of one server line."""

    gpu_mib: float
    tp_size: int
    mode: Mode = "null"
    attn_dp_size: int = 1
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph: bool = True
    cuda_graph_max_bs: int | None = None
    draft_tokens: int | None = None  # speculative_num_draft_tokens (MTP), None without MTP
    deepep: bool = False


@dataclass(frozen=True)
class Dsv4Layout:
    """DeepSeek-V4's KV layout, from the checkpoint's config.json."""

    layers: int
    c4_layers: int
    c128_layers: int
    head_dim: int = 512
    index_head_dim: int = 128
    page_size: int = 256
    swa_full_tokens_ratio: float = 0.1
    default_max_running_requests: int = 256


def _gpu_class(gpu_mib: float) -> tuple[int, int, int]:
    for limit, chunk, small_tp, large_tp in _GPU_CLASSES:
        if gpu_mib < limit:
            return chunk, small_tp, large_tp
    return _LARGEST_CLASS


def chunked_prefill_size(shape: ServerShape) -> int:
    """The chunked prefill size sglang uses for this server (its own, or the card's default)."""
    return shape.chunked_prefill_size or _gpu_class(shape.gpu_mib)[0]


def decode_graph_max_bs(shape: ServerShape) -> int:
    """The largest decode batch sglang captures a CUDA graph for."""
    if shape.cuda_graph_max_bs:
        return shape.cuda_graph_max_bs
    _, small_tp, large_tp = _gpu_class(shape.gpu_mib)
    max_bs = small_tp if shape.tp_size < 4 else large_tp
    # A running-request limit below the card's default caps the default (not a set max_bs).
    if shape.max_running_requests is not None:
        max_bs = min(max_bs, shape.max_running_requests)
    return max_bs


def reserve_parts_mib(shape: ServerShape) -> dict[str, float]:
    """What sglang keeps outside the static pool when it picks the fraction itself, in MiB, by part."""
    max_bs = decode_graph_max_bs(shape)
    if shape.mode == "decode":
        running = shape.max_running_requests or max_bs or 1
        tokens = max(running * (shape.draft_tokens or 1), 2048)
    else:
        tokens = max(chunked_prefill_size(shape), 2048)
    decode_graphs = shape.cuda_graph and shape.mode != "prefill"
    graphs = max_bs * 2.0 if decode_graphs else 0.0
    dp_padding = 0.0
    if shape.attn_dp_size > 1 and shape.mode != "prefill":
        dp_padding = max_bs * shape.attn_dp_size * (4.5 if max_bs > 300 else 3.0)
    parts = {"constant": 512.0, "activations": tokens * 1.5, "parallel": shape.tp_size / 8 * 1024,
             "cuda_graphs": graphs, "dp_padding": dp_padding}
    total = sum(parts.values())
    # Cards over 60 GiB keep at least 10 GiB: the difference is named as the floor.
    parts["floor"] = max(10 * 1024 - total, 0.0) if shape.gpu_mib > 60 * 1024 else 0.0
    parts["deepep"] = 2048.0 if decode_graphs and shape.deepep else 0.0
    return parts


def default_fraction(shape: ServerShape) -> float:
    """sglang's own mem_fraction_static for this server (three decimals, as it rounds)."""
    reserve = sum(reserve_parts_mib(shape).values())
    return round((shape.gpu_mib - reserve) / shape.gpu_mib, 3)


# -- DeepSeek-V4's KV pool --------------------------------------------------------------------------

def _row_bytes(page_tokens: int) -> float:
    """Bytes per token of a page holding `page_tokens` rows, with the page padded to whole rows."""
    raw = page_tokens * _V4_ROW_BYTES
    return math.ceil(raw / _V4_ROW_ALIGN) * _V4_ROW_ALIGN / page_tokens


def _rings(shape: ServerShape) -> tuple[int, int]:
    """Compress-state rows per request for the 4:1 and 128:1 layers (wider with MTP's draft tokens)."""
    return (16, 256) if shape.draft_tokens else (8, 128)


def running_per_rank(layout: Dsv4Layout, shape: ServerShape) -> int:
    """Requests one attention-DP rank admits (the server's limit, or DeepSeek-V4's default 256)."""
    total = shape.max_running_requests or layout.default_max_running_requests
    return max(1, total // max(shape.attn_dp_size, 1))


def bytes_per_token(layout: Dsv4Layout, shape: ServerShape) -> float:
    """Bytes one full token costs on one rank over all layers (sliding window share, compressed KV,
    indexer; MTP's draft layer included)."""
    ring4, _ = _rings(shape)
    page = layout.page_size
    state4 = ring4 / page * 2 * 2 * (layout.head_dim + layout.index_head_dim) * _FP32 * layout.c4_layers
    swa_slot = _row_bytes(page) * layout.layers + state4
    indexer = layout.index_head_dim + layout.index_head_dim // 128 * 4
    compressed = (layout.c4_layers * (_row_bytes(page // 4) + indexer) / 4
                  + layout.c128_layers * _row_bytes(page // 128) / 128)
    full = layout.swa_full_tokens_ratio * swa_slot + compressed
    if shape.draft_tokens:
        full *= (layout.layers + 1) / layout.layers
    return full


def fixed_bytes(layout: Dsv4Layout, shape: ServerShape) -> int:
    """The 128:1 layers' compress state: a fixed cost per request slot, taken before any token."""
    _, ring128 = _rings(shape)
    per_rank = running_per_rank(layout, shape)
    slots = per_rank + 1
    if shape.mode == "decode" and shape.max_running_requests is not None and per_rank <= 32:
        slots += 2 * per_rank  # a small decode keeps room for requests still arriving from prefill
    rows = math.ceil((slots * ring128 + ring128 + 1) / 128) * 128
    return rows * 2 * layout.head_dim * _FP32 * layout.c128_layers


def pool_tokens(layout: Dsv4Layout, shape: ServerShape, available_bytes: float) -> int:
    """Full tokens the KV pool of one rank holds with `available_bytes` (static pool less weights)."""
    room = max(available_bytes - fixed_bytes(layout, shape), 0)
    tokens = int(room / bytes_per_token(layout, shape))
    return tokens // layout.page_size * layout.page_size
