"""PD on the real sglang 0.5.23 (CPU, mooncake_tcp), through the real sglang-router 0.3.2, then smg 1.13.

Prefill and decode are two real servers on one host; the router fronts them. Both deploys must be
promoted by readiness, config (prefill and decode agreeing, per their real /server_info) and smoke,
and the pair must go on serving the requests that come after the gates' own. Then parity: the pair and a
combined server with the same settings agree on the fixed prompt set (bit-exact), and with the tier's test-only
fault in the KV transfer (half of each request's pages replaced by copies of the other half) they do not: parity
fails, and the isolation playbook says pd_specific and restores the PD release. (The tier's dummy weights are drawn
wider than sglang's +-1e-3 so that the model's output depends on its KV: stand_in/sitecustomize.py.)
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from dsv4deploy.gates.parity import collect, fixed_prompts
from dsv4deploy.isolate import parity_suite
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


def test_the_isolation_playbook_says_pd_specific_when_the_kv_transfer_loses_half_the_cache(
        engine_host: SimHost) -> None:
    # smg PD serves (the test above). The fault is a file the prefill looks at on each send: on for the whole
    # experiment, it acts on the PD side only (the combined server transfers no KV).
    release = engine_host.active_release()
    switch = engine_host.install_root / "kv-drop-switch"
    started = time.monotonic()
    switch.touch()
    try:
        proc = engine_host.playbook("isolate.yml", "-e", "suite=parity", timeout=1500)
    finally:
        switch.unlink()
        seen = switch.with_name("kv-drop-switch.log")
        fired = seen.read_text().count("fired=True") if seen.exists() else 0
        seen.unlink(missing_ok=True)
    wall = round(time.monotonic() - started, 1)
    assert fired, "the fault never fired"
    assert proc.returncode == 0, proc.stdout[-6000:]
    report = json.loads((engine_host.reports / "isolate" / "latest" / "report.json").read_text())
    assert report["verdict"] == "pd_specific", report["why"]
    assert "the difference is in the PD path (KV transfer)" in report["why"], report["why"]
    parity = report["parity"]
    assert parity["outcome"] == "failed", parity
    assert any(r["first_divergent"] is not None for r in parity["prompts"]), parity["prompts"]
    # The same PD release serves again, verified, and the temporary combined one is gone.
    assert (report["status"], report["restored"], report["serving_release"]) == ("ok", True, release)
    assert engine_host.active_release() == release
    assert set(engine_host.pids()) == {"sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"}
    assert {g["name"]: g["status"] for g in report["restore"]["gates"]} == {"readiness": "passed", "smoke": "passed"}
    diverged = [r for r in parity["prompts"] if r["first_divergent"] is not None]
    print(f"real engine isolation with half the KV pages replaced: {report['verdict']} in {wall} s; "
          f"{len(diverged)} of {len(parity['prompts'])} prompts diverge (" + ", ".join(
              f"{r['prompt']} at token {r['first_divergent']}" for r in diverged[:6]) + ")")


# The fixed set within the tiny model's 4096-token context (its 512-token vocabulary makes a word about
# three tokens): the plain prompts up to 800 words and the tool conversations.
PARITY_PROMPTS = [p for p in fixed_prompts() if p["kind"] == "tools" or p["length"] <= 800]


# The tolerance here: 0. The CPU engine serving one request at a time was bit-exact between PD and combined
# (max logprob delta 0 on these 6 prompts).
CPU_TOLERANCE = 0.0


def _side(outputs: dict) -> dict:
    """One side of an isolation experiment as the parity suite reads it."""
    return {"gates": [{"name": "parity", "evidence": {"record": {"outputs": outputs, "tolerance": CPU_TOLERANCE}}}]}


def test_pd_and_combined_agree_on_the_fixed_set_and_the_kv_fault_switch_reaches_every_send(
        engine_host: SimHost) -> None:
    # The smg deploy above serves: PD as it is, then with the fault switched on (no restart: a file).
    started = time.monotonic()
    pd = collect(engine_host.endpoint, api_key=engine_host.api_key, prompts=PARITY_PROMPTS)
    switch = engine_host.install_root / "kv-drop-switch"
    switch.touch()
    try:
        damaged = collect(engine_host.endpoint, api_key=engine_host.api_key, prompts=PARITY_PROMPTS)
    finally:
        switch.unlink()
    seen = switch.with_name("kv-drop-switch.log")
    pd_seconds = round(time.monotonic() - started, 1)
    proc = engine_host.playbook("deploy.yml", "-e", "topology=combined", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert engine_host.report()["verdict"] == "promoted"
    combined = collect(engine_host.endpoint, api_key=engine_host.api_key, prompts=PARITY_PROMPTS)
    assert not [o["error"] for o in [*pd.values(), *damaged.values(), *combined.values()] if "error" in o]

    clean = parity_suite.comparison({"pd": _side(pd), "combined": _side(combined)})
    assert clean is not None and clean["outcome"] == "passed", clean
    deltas = [r["max_delta"] for r in clean["prompts"]]
    print(f"real engine parity, PD against combined: {len(PARITY_PROMPTS)} prompts, greedy tokens equal, max "
          f"logprob delta {max(deltas):.2g} (tolerance {CPU_TOLERANCE}); PD twice in {pd_seconds} s")
    assert parity_suite.with_parity(("clean", "no difference"), clean)[0] == "clean"

    # The fault replaced half the pages of every prompt's KV send...
    fired = seen.read_text().splitlines() if seen.exists() else []
    assert len([line for line in fired if line.endswith("fired=True")]) == len(PARITY_PROMPTS), fired
    # ...and PD no longer computes what the combined server does: parity fails, and an isolation verdict would
    # name the PD path.
    lost = parity_suite.comparison({"pd": _side(damaged), "combined": _side(combined)})
    assert lost is not None and lost["outcome"] == "failed", lost
    assert parity_suite.with_parity(("clean", "no difference"), lost)[0] == "pd_specific"
    print("real engine parity with half the KV pages replaced: " + ", ".join(
        f"{r['prompt']} divergent at {r['first_divergent']} (max delta {r['max_delta']:.2g})" for r in lost["prompts"]))
