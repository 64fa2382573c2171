"""Every rendered server argv parses with the real sglang 0.5.23 parser, every router argv with
sglang-router 0.3.2's; and the harness refuses a flag they would refuse (so this test can fail).

Needs the contract venv (../shared/contract-env/README.md): sglang 0.5.23 and sglang-router 0.3.2
with CPU torch and triton, about 2.4 GB. `.ci/run` builds and caches it; point DSV4_CONTRACT_PYTHON
at its python to use another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4deploy.services import build_services

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "golden"))
from fixture_specs import combined_spec, pd_spec, xpyd_spec

pytestmark = pytest.mark.contract

# scripts/setup.sh builds the venv in a cache and links it here as .contract-venv.
CONTRACT_PYTHON = os.environ.get(
    "DSV4_CONTRACT_PYTHON", str(Path(__file__).resolve().parents[2] / ".contract-venv" / "bin" / "python"))
HARNESS = Path(__file__).with_name("parse_argv.py")
SERVER_LAUNCHER = ["python3", "-m", "sglang.launch_server"]
ROUTER_LAUNCHER = ["python3", "-m", "sglang_router.launch_router"]


def parse_all(items: list[dict]) -> list[dict]:
    """Run the harness once for every command line (importing sglang takes seconds)."""
    if not Path(CONTRACT_PYTHON).exists():
        pytest.skip(f"contract venv missing: {CONTRACT_PYTHON} not found; `.ci/run` builds it "
                    "(see ../shared/contract-env/README.md), or set DSV4_CONTRACT_PYTHON")
    out = subprocess.run([CONTRACT_PYTHON, str(HARNESS)], input=json.dumps(items), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _strip(argv: list[str], launcher: list[str]) -> list[str]:
    assert argv[: len(launcher)] == launcher
    return argv[len(launcher):]


def rendered_items() -> list[dict]:
    specs = [pd_spec(), combined_spec(), xpyd_spec(), combined_spec(index_topk=None),
             pd_spec(decode={**pd_spec().decode[0].model_dump(), "cuda_graph": {"enabled": False}},
                     prefill={**pd_spec().prefill[0].model_dump(), "cuda_graph": {"max_bs": 256},
                              "page_size": 64, "kv_cache_dtype": "fp8_e4m3", "context_length": 524288,
                              "transfer_backend": "nixl", "ib_device": "mlx5_0,mlx5_1"},
                     page_size=64, kv_cache_dtype="fp8_e4m3", context_length=524288,
                     router={"host": "gpu1", "port": 8000, "policy": "cache_aware",
                             "retry": {"enabled": False}, "circuit_breaker": {"enabled": False}})]
    items = []
    for spec in specs:
        for svc in build_services(spec):
            assert svc.sglang_version in (None, "0.5.23")  # the contract venv holds 0.5.23 only
            if svc.role == "router":
                items.append({"name": svc.name, "kind": "router",
                              "argv": [*_strip(svc.argv, ROUTER_LAUNCHER), "--api-key", "k"]})
            else:
                items.append({"name": svc.name, "kind": "server",
                              "argv": [*_strip(svc.argv, SERVER_LAUNCHER), "--api-key", "k"]})
    return items


def test_rendered_argv_accepted_by_real_parsers():
    items = rendered_items()
    results = parse_all(items)
    failures = [(i["name"], i["argv"], r["error"]) for i, r in zip(items, results, strict=True) if not r["ok"]]
    assert not failures, failures
    assert {i["kind"] for i in items} == {"server", "router"}


def test_harness_refuses_what_sglang_refuses():
    (svc,) = build_services(combined_spec())
    base = _strip(svc.argv, SERVER_LAUNCHER)
    router = _strip(build_services(pd_spec())[-1].argv, ROUTER_LAUNCHER)
    bad = [
        {"kind": "server", "argv": [*base, "--cuda-graph-max-bs", "64"]},  # gone in 0.5.23: ambiguous
        {"kind": "server", "argv": [*base, "--disable-cuda-graph"]},  # deprecated in 0.5.23
        {"kind": "server", "argv": [*base, "--no-such-flag"]},
        {"kind": "server", "argv": [*base, "--mem-frac", "0.5"]},  # abbreviation: accepted by sglang, not by us
        {"kind": "server", "argv": [*base, "--disaggregation-mode", "both"]},
        {"kind": "router", "argv": [*router, "--cb-failure-thresh", "3"]},
        {"kind": "router", "argv": [*router, "--policy", "fastest"]},
    ]
    results = parse_all(bad)
    assert [r["ok"] for r in results] == [False] * len(bad), results
    assert "ambiguous" in results[0]["error"] and "--cuda-graph-max-bs" in results[0]["error"]
    assert "deprecated" in results[1]["error"]
