"""Settings of the simulated host, read from ``DSV4_SIM_*`` environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .faults import Faults, parse_faults

DEFAULT_VERSION = "0.5.23"
DEFAULT_STATE_DIR = "/tmp/dsv4deploy-sim"


@dataclass(frozen=True)
class SimEnv:
    """Everything the simulator reads from its environment, resolved once at start."""

    sglang_version: str = DEFAULT_VERSION
    state_dir: Path = Path(DEFAULT_STATE_DIR)
    gpu_count: int = 8
    gpu_memory_gib: float = 96.0
    startup_s: float = 0.8
    time_scale: float = 1.0
    faults: Faults = field(default_factory=Faults)
    bf16_index_k: bool = False
    waiting_timeout_s: float = 300.0
    bootstrap_timeout_s: float = 300.0
    cuda_visible_devices: str | None = None


def _float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    return float(raw) if raw else default


def _state_dir(env: dict[str, str]) -> Path:
    # DSV4_SIM_NODE gives a node of several simulated on one machine GPUs of its own: its ledger is a folder
    # of the state dir (the deployment's server_env names one state dir for all its hosts).
    base = Path(env.get("DSV4_SIM_STATE_DIR", "").strip() or DEFAULT_STATE_DIR)
    node = env.get("DSV4_SIM_NODE", "").strip()
    return base / f"node-{node}" if node else base


def read_env(environ: dict[str, str] | None = None) -> SimEnv:
    """Build :class:`SimEnv` from ``environ`` (default ``os.environ``); FaultError on bad faults."""
    env = dict(os.environ if environ is None else environ)
    return SimEnv(
        sglang_version=env.get("DSV4_SIM_SGLANG_VERSION", "").strip() or DEFAULT_VERSION,
        state_dir=_state_dir(env),
        gpu_count=int(_float(env, "DSV4_SIM_GPU_COUNT", 8)),
        gpu_memory_gib=_float(env, "DSV4_SIM_GPU_MEMORY_GIB", 96.0),
        startup_s=_float(env, "DSV4_SIM_STARTUP_S", 0.8),
        time_scale=_float(env, "DSV4_SIM_TIME_SCALE", 1.0),
        faults=parse_faults(env.get("DSV4_SIM_FAULTS")),
        bf16_index_k=env.get("SGLANG_DSV4_BF16_INDEX_K", "").strip() in ("1", "true", "True"),
        # sglang's own PD timeouts (seconds), honoured by the simulated KV transfer
        waiting_timeout_s=_float(env, "SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300.0),
        bootstrap_timeout_s=_float(env, "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300.0),
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
    )
