"""sglang's own memory figures for server lines (run by the real-engine venv's python: the full sglang).

Reads JSON from stdin: {"model": DIR, "cases": [{"argv": [...], "env": {...}, "gpu_mib": N,
"weights_gib": W}, ...]} (argv without the launcher and without --model-path). For each case it fakes a
GPU of gpu_mib MiB, resolves the line as sglang does at start-up (`ServerArgs.resolve_once`, the model's
own hooks with DIR/config.json), publishes it as a scheduler would, and sizes the KV pool with sglang's
own configurator for what the static pool leaves after W GiB of weights. Writes JSON to stdout:
[{"mem_fraction_static", "max_total_num_tokens", "bytes_per_full_token", "error"}, ...].

The weights are the plan's (sglang measures them on a real GPU after loading); everything else is
sglang's: the fraction it picks, the pool's layout and its fixed costs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from types import SimpleNamespace

GIB = 2**30


def _fake_gpu(mib: float) -> None:
    import sglang.srt.arg_groups.memory_hook as memory_hook

    memory_hook.get_device_memory_capacity = lambda device=None: mib


def _one(model: str, case: dict) -> dict:
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    _fake_gpu(case["gpu_mib"])
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = ServerArgs.from_cli_args(parser.parse_args(["--model-path", model, "--device", "cuda", *case["argv"]]))
    args.resolve_once()
    resolved = resolved_view(args)
    publish(args, role="scheduler")
    config = ModelConfig.from_server_args(args)
    # The attributes of sglang's KVCacheConfigurator that its pool configurators read, for one PP stage.
    kvc = SimpleNamespace(
        kv_cache_dtype_str=resolved.kv_cache_dtype, model_config=config,
        layer_info=SimpleNamespace(start_layer=0, end_layer=config.num_hidden_layers), pp_size=1,
        pp_group=None, sliding_window_size=config.hf_config.sliding_window, page_size=resolved.page_size,
        attn_dp_size=resolved.attn_dp_size or 1, is_hybrid_swa=True,
        spec_algorithm=SpeculativeAlgorithm.from_string(resolved.speculative_algorithm), spec_aux_config=None)
    pool = create_memory_pool_configurator(kvc)
    fraction = resolved.mem_fraction_static
    # sglang's budget: the free memory before loading x fraction, less what the weights took.
    available = fraction * case["gpu_mib"] / 1024 * GIB - case["weights_gib"] * GIB
    sizes = pool.calculate_pool_sizes(int(available), resolved.page_size)
    return {"mem_fraction_static": fraction, "max_total_num_tokens": sizes.max_total_num_tokens,
            "bytes_per_full_token": pool.bytes_per_full_token, "error": ""}


def main() -> None:
    """Answer every case of the request on stdin."""
    request = json.load(sys.stdin)
    out = []
    for case in request["cases"]:
        saved = dict(os.environ)
        os.environ.update(case.get("env", {}))
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                out.append(_one(request["model"], case))
        except Exception as exc:  # sglang's own refusal is this case's answer
            out.append({"error": f"{type(exc).__name__}: {exc}"})
        finally:
            os.environ.clear()
            os.environ.update(saved)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
