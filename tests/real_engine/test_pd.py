"""PD on the real sglang 0.5.23 (CPU, mooncake_tcp), through the real sglang-router 0.3.2, then smg 1.13.

Prefill and decode are two real servers on one host; the router fronts them. Both deploys must be
promoted by readiness, config (prefill and decode agreeing, per their real /server_info) and smoke,
and the pair must go on serving the requests that come after the gates' own.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.integration.simhost import SimHost
from tests.real_engine.enginehost import descendants, process_name

pytestmark = pytest.mark.real_engine

AGREE = ("model_path", "context_length", "page_size", "kv_cache_dtype", "json_model_override_args", "dtype")


def server_info(host: SimHost, port: int) -> dict:
    return httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=30,
                     headers={"Authorization": f"Bearer {host.api_key}"}).json()


def deploy_pd(host: SimHost, router: str) -> tuple[dict, float]:
    started = time.monotonic()
    proc = host.playbook("deploy.yml", "-e", "topology=pd", "-e", f"router_implementation={router}", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return host.report(), round(time.monotonic() - started, 1)


def assert_promoted_pd(host: SimHost, report: dict) -> None:
    assert report["verdict"] == "promoted"
    assert [(g["name"], g["status"]) for g in report["gates"]] == [
        ("readiness", "passed"), ("config", "passed"), ("smoke", "passed")]
    assert set(host.pids()) == {"sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"}
    prefill, decode = server_info(host, host.base_port + 1), server_info(host, host.base_port + 2)
    assert (prefill["disaggregation_mode"], decode["disaggregation_mode"]) == ("prefill", "decode")
    assert {k: prefill[k] for k in AGREE} == {k: decode[k] for k in AGREE}
    # Rendered as mooncake_tcp; the real server reports the resolved backend, mooncake (over TCP).
    assert prefill["disaggregation_transfer_backend"] == decode["disaggregation_transfer_backend"] == "mooncake"



def assert_serves_after_promotion(host: SimHost) -> None:
    """Requests after the gates' own pass through the router and the pair stays up: every chat request
    after the first shares the chat template's opening tokens, so these hit the prefill's radix cache
    (the path that, with its early send of a cached prefix on, killed the CPU prefill; see the inventory)."""
    for text in ("Say OK", "Tell me about cats"):
        reply = httpx.post(f"{host.endpoint}/v1/chat/completions", timeout=120,
                           headers={"Authorization": f"Bearer {host.api_key}"},
                           json={"model": "tiny-llama", "messages": [{"role": "user", "content": text}],
                                 "max_tokens": 8, "temperature": 0})
        assert reply.status_code == 200, (text, reply.text)
        assert reply.json()["choices"][0]["finish_reason"] in ("length", "stop")
    assert set(host.pids()) == {"sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"}


def test_pd_through_the_real_sglang_router_is_promoted(engine_host: SimHost) -> None:
    report, wall = deploy_pd(engine_host, "sglang-router")
    assert_promoted_pd(engine_host, report)
    assert_serves_after_promotion(engine_host)
    print(f"pd (sglang-router): promoted in {wall} s (playbook wall time)")


def test_pd_through_smg_is_promoted(engine_host: SimHost) -> None:
    report, wall = deploy_pd(engine_host, "smg")
    assert_promoted_pd(engine_host, report)
    assert_serves_after_promotion(engine_host)
    router = engine_host.pids()["sglang-dsv4-router"]
    names = " ".join(process_name(p) for p in [router, *descendants(router)])
    # smg retitles its process `smg::router` (sglang-router's is `sglang::router`); either way it is smg.
    assert "smg.launch_router" in names or "smg::router" in names, names
    print(f"pd (smg): promoted in {wall} s (playbook wall time)")
