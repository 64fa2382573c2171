"""A CPU stand-in for the GPU kernel package ``sgl_kernel`` (test-only, never shipped).

The PyPI kernel wheel (``sglang-kernel``) is built for CUDA and fails to import without
``libcuda.so.1``; the CPU build exists only as source in sglang's repository. In CPU mode
(``SGLANG_USE_CPU_ENGINE=1``) sglang 0.5.23 imports a few ``*_cpu`` names from ``sgl_kernel`` at
module load. This package, first on ``PYTHONPATH`` of the real-engine tier's servers, defines them:
the one a plain Llama request path can reach is written in pure torch, every other one raises when
called, so a path that needs a real kernel fails loudly instead of computing something else.
"""

from __future__ import annotations

from typing import Any

import torch

__version__ = "0.0.0+cpu-stand-in"


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """Write each request's new KV slots into its row of ``req_to_token``.

    As sglang's triton kernel ``assign_req_to_token_pool``: request ``i`` gets
    ``out_cache_loc``'s next ``end_offset[i] - start_offset[i]`` entries at columns
    ``start_offset[i]:end_offset[i]`` of row ``req_pool_indices[i]``.
    """
    taken = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        if not 0 <= start <= end <= pool_len:
            raise ValueError(f"slot range {start}:{end} outside a row of {pool_len}")
        count = end - start
        req_to_token[row, start:end] = out_cache_loc[taken:taken + count].to(req_to_token.dtype)
        taken += count


def _missing(name: str) -> Any:
    def kernel(*_args: Any, **_kwargs: Any) -> Any:
        raise NotImplementedError(f"sgl_kernel.{name}: the CPU stand-in of the real-engine tier has no "
                                  "implementation of this kernel (a path the tier's Llama model should not take)")

    kernel.__name__ = name
    return kernel


def __getattr__(name: str) -> Any:
    # sglang imports its CPU kernels by name at module load (``from sgl_kernel import x_cpu``); those
    # that the Llama path never calls resolve to a kernel that raises. Any other name stays missing.
    if name.endswith("_cpu"):
        return _missing(name)
    raise AttributeError(f"module 'sgl_kernel' (the real-engine tier's CPU stand-in) has no attribute {name!r}")
