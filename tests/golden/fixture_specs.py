"""Fixed deployment specs for the service, render, golden and contract tests.

Not the local inventory: its paths vary per machine, and golden files must not.
"""

from __future__ import annotations

import copy
from typing import Any

from dsv4deploy.spec import Deployment, load_spec

MODEL = {"path": "/models/DeepSeek-V4-Flash-NVFP4", "served_name": "deepseek-v4-flash", "profile": "deepseek-v4-flash"}
ENV = {"SGLANG_SM120_MMA_FLASHMLA": "1", "SGLANG_SM120_TRITON_INDEXER": "1"}

PD_COMMON: dict[str, Any] = {
    "topology": "pd",
    "model": MODEL,
    "index_topk": 1024,
    "chat_template": "/models/DeepSeek-V4-Flash-NVFP4/chat_template.jinja",
    "server_env": {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "600", "SGLANG_DSV4_BF16_INDEX_K": "0"},
    "prefill": {"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30001, "bootstrap_port": 8998,
                "mem_fraction_static": 0.8, "env": ENV},
    "decode": {"host": "gpu1", "gpus": [4, 5, 6, 7], "tp_size": 4, "port": 30002, "mem_fraction_static": 0.8,
               "cuda_graph": {"max_bs": 64}, "env": {**ENV, "SGLANG_DSV4_BF16_INDEX_K": "1"}},
    "router": {"host": "gpu1", "port": 8000, "listen": "0.0.0.0", "prometheus_port": 29000},
    "api_key": {"file": "/etc/dsv4deploy/api_key"},
}
COMBINED_COMMON: dict[str, Any] = {
    "topology": "combined",
    "model": MODEL,
    "index_topk": 1024,
    "chat_template": "/models/DeepSeek-V4-Flash-NVFP4/chat_template.jinja",
    "server_env": {"SGLANG_DSV4_BF16_INDEX_K": "0"},
    "combined": {"host": "gpu1", "gpus": [0, 1, 2, 3], "tp_size": 4, "port": 30000, "mem_fraction_static": 0.8,
                 "cuda_graph": {"enabled": False}, "env": ENV},
    # The host listens on 0.0.0.0: validation requires a key for that.
    "api_key": {"file": "/etc/dsv4deploy/api_key"},
}


def host_vars(manager: str = "systemd", version: str = "0.5.23", **extra: Any) -> dict[str, Any]:
    """Variables of one 8-GPU host."""
    return {"ansible_host": "10.0.0.11", "service_manager": manager, "sglang_version": version,
            "install_root": "/opt/dsv4deploy", "service_user": "sglang", "listen": "0.0.0.0", **extra}


def pd_spec(manager: str = "systemd", version: str = "0.5.23", host: dict[str, Any] | None = None,
            **common: Any) -> Deployment:
    """1P1D plus router on one host (`gpu1`, its variables updated with `host`)."""
    data = {**copy.deepcopy(PD_COMMON), **common}
    return load_spec(data, {"gpu1": host_vars(manager, version, **(host or {}))})


def combined_spec(manager: str = "systemd", version: str = "0.5.23", **common: Any) -> Deployment:
    """The combined server on `gpu1`."""
    data = {**copy.deepcopy(COMBINED_COMMON), **common}
    return load_spec(data, {"gpu1": host_vars(manager, version)})


def xpyd_spec(version: str = "0.5.23") -> Deployment:
    """2P2D over three hosts: two prefills on gpu1 and gpu2, two decodes on gpu3, router on gpu1."""
    worker = {"tp_size": 4, "mem_fraction_static": 0.8}
    data = {
        **copy.deepcopy(PD_COMMON),
        "prefill": [
            {**worker, "host": "gpu1", "gpus": [0, 1, 2, 3], "port": 30001, "bootstrap_port": 8998},
            {**worker, "host": "gpu2", "gpus": [0, 1, 2, 3], "port": 30001, "bootstrap_port": 8999,
             "transfer_backend": "mooncake", "ib_device": "mlx5_0"},
        ],
        "decode": [
            {**worker, "host": "gpu3", "gpus": [0, 1, 2, 3], "port": 30002},
            {**worker, "host": "gpu3", "gpus": [4, 5, 6, 7], "port": 30003},
        ],
        "router": {"host": "gpu1", "port": 8000, "listen": "0.0.0.0", "policy": "round_robin",
                   "prefill_policy": "cache_aware", "decode_policy": "power_of_two",
                   "retry": {"enabled": False}, "circuit_breaker": {"enabled": False}},
        "api_key": {"vault_var": "vault_dsv4_api_key"},
    }
    hosts = {name: host_vars("systemd", version, ansible_host=f"10.0.0.{11 + i}")
             for i, name in enumerate(("gpu1", "gpu2", "gpu3"))}
    return load_spec(data, hosts)


def multi_node_pd_spec(version: str = "0.5.23") -> Deployment:
    """1P1D whose decode spans two nodes (gpu1 rank 0, gpu2 rank 1; TP8 = 4 GPUs x 2 nodes)."""
    data = copy.deepcopy(PD_COMMON)
    data["decode"] = {**data["decode"], "nodes": ["gpu1", "gpu2"], "tp_size": 8, "dist_init_port": 5000}
    hosts = {name: host_vars("systemd", version, ansible_host=f"10.0.0.{11 + i}")
             for i, name in enumerate(("gpu1", "gpu2"))}
    return load_spec(data, hosts)
