"""GPU memory model of a DeepSeek-V4-Flash server: what it holds and when it runs out.

Per GPU of a server (M = GPU memory, f = --mem-fraction-static):
- weights: 142 GB (284B params, NVFP4) / tp_size, loaded first;
- static pool: f x M in total (weights + KV pool), the amount the process holds while it runs;
- outside the pool, (1 - f) x M must hold the runtime reserve: 4 GiB activations, 4 GiB for
  CUDA graphs when they are on, and the sparse top-k buffers, 5 GiB per 512 of index_topk.
Start fails with CUDA out-of-memory when weights > f x M, when other live servers on the same
GPUs leave less than f x M free, or when what remains after the pool is below the reserve.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
WEIGHTS_BYTES_TOTAL = 142 * 10**9
ACTIVATION_GIB = 4.0
CUDA_GRAPH_GIB = 4.0
TOPK_BUFFER_GIB_PER_512 = 5.0
MIN_KV_POOL_GIB = 1.0
AUTO_FRACTION_CAP = 0.88


@dataclass(frozen=True)
class MemoryPlan:
    """The byte amounts one server needs on each of its GPUs."""

    weights_gib: float
    pool_gib: float
    reserve_gib: float

    @property
    def kv_pool_gib(self) -> float:
        """Pool left for KV after the weights."""
        return self.pool_gib - self.weights_gib


def reserve_gib(index_topk: int, cuda_graph: bool) -> float:
    """Memory outside the static pool a server needs (activations, graphs, top-k buffers)."""
    return (ACTIVATION_GIB + (CUDA_GRAPH_GIB if cuda_graph else 0.0)
            + TOPK_BUFFER_GIB_PER_512 * max(1, index_topk) / 512)


def auto_fraction(gpu_memory_gib: float, index_topk: int, cuda_graph: bool) -> float:
    """What the simulated server picks when --mem-fraction-static is not given."""
    frac = 1.0 - reserve_gib(index_topk, cuda_graph) / gpu_memory_gib
    return round(min(AUTO_FRACTION_CAP, int(frac * 100) / 100), 2)


def plan(tp_size: int, fraction: float, gpu_memory_gib: float, index_topk: int,
         cuda_graph: bool) -> MemoryPlan:
    """The per-GPU amounts for these settings."""
    return MemoryPlan(
        weights_gib=WEIGHTS_BYTES_TOTAL / max(1, tp_size) / GIB,
        pool_gib=fraction * gpu_memory_gib,
        reserve_gib=reserve_gib(index_topk, cuda_graph),
    )


def oom_stage(p: MemoryPlan, gpu_memory_gib: float, held_by_others_gib: float) -> tuple[str, float] | None:
    """None if it fits, else (stage, GiB it tried to allocate) where the start runs out."""
    free = gpu_memory_gib - held_by_others_gib
    if p.weights_gib > min(p.pool_gib, free):
        return ("load_weights", p.weights_gib)
    if p.pool_gib > free or p.kv_pool_gib < MIN_KV_POOL_GIB:
        return ("kv_pool", max(p.kv_pool_gib, MIN_KV_POOL_GIB))
    if free - p.pool_gib < p.reserve_gib:
        return ("cuda_graph", p.reserve_gib)
    return None
