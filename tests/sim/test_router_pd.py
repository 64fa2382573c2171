"""The simulated workers behind the REAL sglang-router 0.3.2 in PD mode, on loopback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from simhelpers import PYTHON, Launcher, chat, free_port, haystack, http, sim_env, wait_status

pytest.importorskip("sglang_router", reason="needs sglang-router 0.3.2 (extra 'sim')")
pytestmark = pytest.mark.integration

CODE = "ZEBRA-4492-OMEGA"
TOPK_1024 = ["--json-model-override-args", '{"index_topk": 1024}']


def _worker(port: int, *extra: str) -> list[str]:
    return ["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", "dsv4", "--tp-size", "4",
            "--host", "127.0.0.1", "--port", str(port), *extra]


def start_pd(launcher: Launcher, state_dir: Path, *, topk: list[str], prefill_faults: str = "",
             decode_faults: str = "", router_args: tuple[str, ...] = ()) -> str:
    """Prefill on GPUs 0-3, decode on 4-7, and the real router in front; returns the router URL."""
    pp, pb, dp, rp = free_port(), free_port(), free_port(), free_port()
    launcher.sim(_worker(pp, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(pb), *topk),
                 sim_env(state_dir, prefill_faults), name="prefill", wait=False)
    launcher.sim(_worker(dp, "--disaggregation-mode", "decode", "--base-gpu-id", "4", *topk),
                 sim_env(state_dir, decode_faults), name="decode", wait=False)
    launcher.start([PYTHON, "-m", "sglang_router.launch_router", "--pd-disaggregation",
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
