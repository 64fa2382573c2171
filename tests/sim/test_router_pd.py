"""The simulated workers behind the REAL routers in PD mode, on loopback: sglang-router 0.3.2 (from the
test venv) and smg 1.13.0 (from its own venv, .smg-venv, built by scripts/setup.sh)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from simhelpers import PYTHON, REPO, Launcher, chat, free_port, haystack, http, sim_env, wait_status

from dsv4deploy.gates import GateStatus, WorkerEndpoint, check_readiness

pytest.importorskip("sglang_router", reason="needs sglang-router 0.3.2 (extra 'sim')")
pytestmark = pytest.mark.integration

CODE = "ZEBRA-4492-OMEGA"
TOPK_1024 = ["--json-model-override-args", '{"index_topk": 1024}']
SGLANG_ROUTER = [PYTHON, "-m", "sglang_router.launch_router"]
SMG_PYTHON = REPO / ".smg-venv" / "bin" / "python"
SMG = [str(SMG_PYTHON), "-m", "smg.launch_router"]


def _worker(port: int, *extra: str) -> list[str]:
    return ["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", "dsv4", "--tp-size", "4",
            "--host", "127.0.0.1", "--port", str(port), *extra]


def start_pd(launcher: Launcher, state_dir: Path, *, topk: list[str], prefill_faults: str = "",
             decode_faults: str = "", router_args: tuple[str, ...] = (), router: list[str] = SGLANG_ROUTER,
             **env: str) -> str:
    """Prefill on GPUs 0-3, decode on 4-7, and the real router in front; returns the router URL."""
    pp, pb, dp, rp = free_port(), free_port(), free_port(), free_port()
    launcher.sim(_worker(pp, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(pb), *topk),
                 sim_env(state_dir, prefill_faults, **env), name="prefill", wait=False)
    launcher.sim(_worker(dp, "--disaggregation-mode", "decode", "--base-gpu-id", "4", *topk),
                 sim_env(state_dir, decode_faults, **env), name="decode", wait=False)
    launcher.start([*router, "--pd-disaggregation",
                    "--prefill", f"http://127.0.0.1:{pp}", str(pb), "--decode", f"http://127.0.0.1:{dp}",
                    "--host", "127.0.0.1", "--port", str(rp), "--worker-startup-check-interval", "1",
                    "--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1", *router_args],
                   port=rp, name="router", timeout=30)
    return f"http://127.0.0.1:{rp}"


@pytest.fixture(scope="module")
def good_pd(module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """index_topk 1024 on both; the decode warms up 2 s longer (router readiness must wait for it)."""
    url = start_pd(module_launcher, tmp_path_factory.mktemp("host"), topk=TOPK_1024, decode_faults="warmup_s=2")
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen.append(http("GET", f"{url}/readiness", timeout=2)[0])
        if seen[-1] == 200:
            break
        time.sleep(0.1)
    return {"url": url, "readiness": seen}


def test_readiness_waits_for_both_workers(good_pd: dict) -> None:
    seen = good_pd["readiness"]
    assert 503 in seen and seen[-1] == 200
    body = json.loads(http("GET", f"{good_pd['url']}/readiness")[1])
    assert body == {"status": "ready", "healthy_workers": 2, "total_workers": 2}


def test_chat_through_router(good_pd: dict) -> None:
    status, reply = chat(good_pd["url"], "Say OK", max_tokens=20)
    assert status == 200, reply
    assert reply["choices"][0]["message"]["content"] == "OK" and reply["usage"]["prompt_tokens"] == 5


def test_needle_5k5_recalled_with_1024(good_pd: dict) -> None:
    status, reply = chat(good_pd["url"], haystack(5500, 0.5))
    assert status == 200 and 5000 < reply["usage"]["prompt_tokens"] < 6000
    assert CODE in reply["choices"][0]["message"]["content"]


def test_needle_5k5_lost_with_512(module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> None:
    url = start_pd(module_launcher, tmp_path_factory.mktemp("host"), topk=[])
    wait_status(f"{url}/readiness", 200, timeout=30)
    status, reply = chat(url, haystack(5500, 0.5))
    assert status == 200 and CODE not in reply["choices"][0]["message"]["content"]


def test_pd_transfer_truncate_fails_in_pd_passes_combined(
        module_launcher: Launcher, tmp_path_factory: pytest.TempPathFactory) -> None:
    host = tmp_path_factory.mktemp("host")
    url = start_pd(module_launcher, host, topk=TOPK_1024, prefill_faults="pd_transfer_truncate",
                   decode_faults="pd_transfer_truncate")
    cp = free_port()
    module_launcher.sim(_worker(cp, "--base-gpu-id", "0", *TOPK_1024),
                        sim_env(tmp_path_factory.mktemp("host"), "pd_transfer_truncate"), name="combined")
    wait_status(f"{url}/readiness", 200, timeout=30)
    wait_status(f"http://127.0.0.1:{cp}/health", 200)
    needle = haystack(1500, 0.3)  # well inside what index_topk 1024 recalls, far outside the window
    assert CODE not in chat(url, needle)[1]["choices"][0]["message"]["content"]
    assert CODE in chat(f"http://127.0.0.1:{cp}", needle)[1]["choices"][0]["message"]["content"]
    tail = haystack(1500, 1.0)  # inside the sliding window: fine even with the damaged transfer
    assert CODE in chat(url, tail)[1]["choices"][0]["message"]["content"]


def test_first_errors_then_circuit_breaker(module_launcher: Launcher,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    url = start_pd(module_launcher, tmp_path_factory.mktemp("host"), topk=TOPK_1024,
                   prefill_faults="first_errors=40", decode_faults="first_errors=40",
                   router_args=("--retry-initial-backoff-ms", "10", "--retry-max-backoff-ms", "50"))
    wait_status(f"{url}/readiness", 200, timeout=30)
    status, body = chat(url, "Say OK")
    assert status == 500 and "choices" not in body, body  # an error body after readiness
    status, body = chat(url, "Say OK")
    for _ in range(3):
        if status == 503:
            break
        status, body = chat(url, "Say OK")
    assert status == 503 and "No available prefill workers (all circuits open or unhealthy)" in str(body)
    assert http("GET", f"{url}/readiness")[0] == 200  # readiness still says ready


def _needs_smg() -> None:
    if not SMG_PYTHON.exists():
        pytest.skip(f"needs smg 1.13.0 in its own venv ({SMG_PYTHON}); ./scripts/setup.sh builds it")


def test_smg_passes_the_readiness_gate_and_serves(module_launcher: Launcher,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    """The readiness gate (the real one) waits for smg's /readiness, then a chat goes through prefill and decode."""
    _needs_smg()
    url = start_pd(module_launcher, tmp_path_factory.mktemp("host"), topk=TOPK_1024, decode_faults="warmup_s=2",
                   router=SMG)
    workers = [WorkerEndpoint(name=p.log.stem, role=role, url=f"http://127.0.0.1:{p.port}")
               for p, role in zip(module_launcher.procs[-3:-1], ("prefill", "decode"), strict=True)]
    result = check_readiness(workers, url, "dsv4", deadline_s=60)
    assert result.status == GateStatus.PASSED, result.summary
    router = next(e for e in result.evidence["endpoints"] if e["check"] == "router /readiness")
    assert router["attempts"] > 1 and router["last_status"] == 200  # it waited for the decode's warm-up
    status, reply = chat(url, "Say OK", max_tokens=20)
    assert status == 200 and reply["choices"][0]["message"]["content"] == "OK", reply


@pytest.mark.parametrize("router", ["sglang-router", "smg"])
def test_router_drains_in_flight_requests_on_sigterm(launcher: Launcher, tmp_path: Path, router: str) -> None:
    """SIGTERM: no new connections (sglang-router) or /readiness 503 "draining" (smg), while the
    requests already in flight finish with 200 before the router exits."""
    if router == "smg":
        _needs_smg()
    # Real-time workers (time scale 1) and ~24K-token prompts: each request holds the prefill ~1 s.
    url = start_pd(launcher, tmp_path / "host", topk=TOPK_1024, router=SMG if router == "smg" else SGLANG_ROUTER,
                   router_args=("--shutdown-grace-period-secs", "60"), DSV4_SIM_TIME_SCALE="1")
    wait_status(f"{url}/readiness", 200, timeout=30)
    proc = launcher.procs[-1]
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(chat(url, haystack(24000, 0.5), max_tokens=8)[0]))
               for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # all three are in flight: the first prefill takes about a second
    os.kill(proc.pid, signal.SIGTERM)
    readiness = []
    for _ in range(5):
        readiness.append(http("GET", f"{url}/readiness", timeout=2))
        time.sleep(0.2)
    for t in threads:
        t.join(60)
    assert results == [200, 200, 200]
    assert proc.popen.wait(30) is not None
    if router == "smg":
        assert any(s == 503 and json.loads(b)["reason"] == "draining" for s, b in readiness), readiness
    else:
        assert readiness[-1][0] == 0, readiness  # the listener closed
