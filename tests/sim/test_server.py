"""The simulated server as a process: endpoints, lifecycle, faults, GPU memory (no router)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from simhelpers import PYTHON, REPO, Launcher, chat, free_port, haystack, http, sim_env, wait_status

pytestmark = pytest.mark.integration

OVERRIDE_RE = re.compile(r"json_model_override_args(?:=|': )'([^']*)'")
READY_LINE = "The server is fired up and ready to roll!"
TOPK_1024 = ["--json-model-override-args", '{"index_topk": 1024}']


def _args(port: int, *extra: str) -> list[str]:
    return ["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", "dsv4",
            "--tp-size", "4", "--host", "127.0.0.1", "--port", str(port), *extra]


def _run(args: list[str], env: dict[str, str], timeout: float = 15) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "dsv4deploy.sim.server", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=timeout, cwd=REPO)


def _smi(state_dir: Path, *args: str) -> str:
    out = subprocess.run([PYTHON, "-m", "dsv4deploy.sim.smi", *args], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO), "DSV4_SIM_STATE_DIR": str(state_dir)},
                         check=True, cwd=REPO)
    return out.stdout


def _used(state_dir: Path) -> list[int]:
    out = _smi(state_dir, "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits")
    return [int(line.split(", ")[1]) for line in out.splitlines()]


def test_endpoints_auth_and_shutdown(launcher: Launcher, state_dir: Path) -> None:
    port = free_port()
    proc = launcher.sim(_args(port, "--api-key", "sekret", "--tool-call-parser", "deepseekv4", *TOPK_1024),
                        sim_env(state_dir))
    url, auth = f"http://127.0.0.1:{port}", {"authorization": "Bearer sekret"}
    wait_status(f"{url}/health", 200)
    assert http("GET", f"{url}/ready")[0] == 200
    assert http("GET", f"{url}/server_info")[0] == 401  # key required outside /health, /ready, /metrics
    status, body = http("GET", f"{url}/server_info", headers=auth)
    info = json.loads(body)
    assert status == 200 and info["json_model_override_args"] == '{"index_topk": 1024}'
    assert info["version"] == "0.5.23" and info["tp_size"] == 4 and "internal_states" in info
    model = json.loads(http("GET", f"{url}/model_info", headers=auth)[1])
    assert model["served_model_name"] == "dsv4" and model["disaggregation_mode"] == "null"
    cards = json.loads(http("GET", f"{url}/v1/models", headers=auth)[1])["data"]
    assert [c["id"] for c in cards] == ["dsv4"] and cards[0]["max_model_len"] == 65536
    assert http("POST", f"{url}/flush_cache", headers=auth)[1].startswith("Cache flushed.")
    status, body = http("POST", f"{url}/v1/chat/completions", headers=auth,
                        body={"messages": [{"role": "user", "content": "Say OK"}]})
    reply = json.loads(body)
    assert status == 200 and reply["choices"][0]["message"]["content"] == "OK"
    assert reply["usage"]["prompt_tokens"] == 5
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    status, body = http("POST", f"{url}/v1/chat/completions", headers=auth, body={
        "messages": [{"role": "user", "content": 'Call get_weather for "Paris"'}], "tools": tools})
    call = json.loads(body)["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    # Bad requests are refused as the real 0.5.23 refuses them (tests/real_engine/test_side_by_side.py).
    for bad, kind, wanted in (({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1},
                               "BadRequestError", "max_new_tokens must be at least 0, got -1."),
                              ({"messages": [{"role": "nobody", "content": "hi"}]}, "Bad Request",
                               "'role' must be one of"),
                              ({"max_tokens": 4}, "Bad Request", "Field required")):
        status, body = http("POST", f"{url}/v1/chat/completions", headers=auth, body=bad)
        error = json.loads(body)
        assert (status, error["type"], error["code"]) == (400, kind, 400) and wanted in error["message"]
    info = json.loads(http("GET", f"{url}/server_info", headers=auth)[1])
    assert "config" not in info and info["status"] == "ready" and info["internal_states"][0]["tp_size"] == 4
    assert "embedding" in model
    # a gRPC probe (HTTP/2 preface) or garbage on the port must not hurt the server
    for junk in (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"\x00\xff garbage\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(junk)
            sock.recv(1024)
    assert http("GET", f"{url}/health")[0] == 200
    text = proc.text()
    assert OVERRIDE_RE.search(text).group(1) == '{"index_topk": 1024}' and READY_LINE in text
    # SIGTERM: /health 503 while shutting down, exit 0 within a second
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    assert http("GET", f"{url}/health", timeout=1)[0] in (503, 0)
    assert proc.popen.wait(2) == 0 and time.monotonic() - t0 < 1.0


def test_warmup_then_ready_and_never_ready(launcher: Launcher, state_dir: Path) -> None:
    p1, p2 = free_port(), free_port()
    # A warm-up long enough that a loaded machine still probes inside it.
    launcher.sim(_args(p1, "--base-gpu-id", "0"), sim_env(state_dir, "warmup_s=3.0"))
    assert http("GET", f"http://127.0.0.1:{p1}/health")[0] == 503
    launcher.sim(_args(p2, "--base-gpu-id", "4"), sim_env(state_dir, "never_ready"))
    wait_status(f"http://127.0.0.1:{p1}/health", 200)  # 503 above, then ready once warmed up
    time.sleep(0.5)
    assert http("GET", f"http://127.0.0.1:{p2}/health")[0] == 503
    assert http("GET", f"http://127.0.0.1:{p2}/ready")[0] == 503


def test_start_failures(state_dir: Path) -> None:
    env = sim_env(state_dir)
    res = _run(["--model-path", "m", "--cuda-graph-max-bs", "8"], env)
    assert res.returncode == 2 and "ambiguous option: --cuda-graph-max-bs" in res.stderr
    res = _run(["--model-path", "m", "--port", str(free_port()), "--cuda-graph-max-bs", "8"],
               {**env, "DSV4_SIM_SGLANG_VERSION": "0.5.12", "DSV4_SIM_FAULTS": "crash_on_start"})
    assert res.returncode == 1 and "server_args=ServerArgs(" in res.stderr and "Traceback" in res.stderr
    res = _run(["--model-path", "m"], {**env, "DSV4_SIM_FAULTS": "explode"})
    assert res.returncode == 2 and "unknown fault 'explode'" in res.stderr
    res = _run(["--model-path", "m", "--tp-size", "4", "--json-model-override-args", '{"index_topk": 768}'], env)
    assert res.returncode == 1 and "AssertionError: unexpected index_topk=768" in res.stderr
    res = _run(["--model-path", "m", "--tp-size", "4", "--mem-fraction-static", "0.85", *TOPK_1024], env)
    assert res.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in res.stderr
    assert _used(state_dir) == [4] * 8  # nothing left held


def test_crash_after_s_kills_a_ready_server(state_dir: Path) -> None:
    port = free_port()
    started = time.monotonic()
    res = _run(_args(port), sim_env(state_dir, "crash_after_s=1.5"))
    assert res.returncode == 1 and time.monotonic() - started >= 1.5
    # It had become ready before it died, and says why it died.
    assert READY_LINE in res.stderr and "RuntimeError: CUDA error: an illegal memory access" in res.stderr
    assert _used(state_dir) == [4] * 8  # its memory is released


def test_gpu_memory_held_and_released(launcher: Launcher, state_dir: Path) -> None:
    p1, p2 = free_port(), free_port()
    fast = launcher.sim(_args(p1, "--mem-fraction-static", "0.8"), sim_env(state_dir))
    slow = launcher.sim(_args(p2, "--mem-fraction-static", "0.8", "--base-gpu-id", "4"),
                        sim_env(state_dir, "slow_release=1.5"))
    held = int(0.8 * 96 * 1024)
    assert _used(state_dir) == [4 + held] * 8
    apps = _smi(state_dir, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert f"{fast.pid}, {held}" in apps and apps.count("\n") == 8
    # GPUs held by another live server: a third one cannot start on them
    res = _run(_args(free_port(), "--mem-fraction-static", "0.5"), sim_env(state_dir))
    assert res.returncode == 1 and "CUDA out of memory" in res.stderr
    assert fast.stop() == 0 and slow.stop() == 0
    assert _used(state_dir) == [4] * 4 + [4 + held] * 4  # slow_release still holds
    time.sleep(1.6)
    assert _used(state_dir) == [4] * 8
    assert "GPU 7: " in _smi(state_dir, "-L")


def test_first_errors_and_ignore_override(launcher: Launcher, state_dir: Path) -> None:
    p1, p2 = free_port(), free_port()
    launcher.sim(_args(p1, "--base-gpu-id", "0", *TOPK_1024), sim_env(state_dir, "first_errors=2"))
    ign = launcher.sim(_args(p2, "--base-gpu-id", "4", *TOPK_1024), sim_env(state_dir, "ignore_override"))
    u1, u2 = (f"http://127.0.0.1:{p}" for p in (p1, p2))
    for u in (u1, u2):
        wait_status(f"{u}/health", 200)
    bodies = [chat(u1, "Say OK") for _ in range(3)]
    assert [s for s, _ in bodies] == [500, 500, 200]
    assert all("choices" not in b for _, b in bodies[:2]) and bodies[2][1]["choices"]
    # ignore_override: the log shows 1024, the recall behaves like 512 (5.5K-token needle lost)
    assert OVERRIDE_RE.search(ign.text()).group(1) == '{"index_topk": 1024}'
    needle = haystack(5500, 0.5)
    status, ok = chat(u1, needle)
    assert status == 200
    assert 5000 < ok["usage"]["prompt_tokens"] < 6000
    assert "ZEBRA-4492-OMEGA" in ok["choices"][0]["message"]["content"]
    _, lost = chat(u2, needle)
    assert "ZEBRA-4492-OMEGA" not in lost["choices"][0]["message"]["content"]


def _pd_pair(launcher: Launcher, state_dir: Path, faults: str, extra_env: dict[str, str]) -> tuple[str, str, int]:
    pp, pb, dp = free_port(), free_port(), free_port()
    env = sim_env(state_dir, faults, DSV4_SIM_TIME_SCALE="1", **extra_env)
    parser = ("--tool-call-parser", "deepseekv4")
    launcher.sim(_args(pp, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(pb),
                       *parser), env)
    launcher.sim(_args(dp, "--disaggregation-mode", "decode", "--base-gpu-id", "4", *parser), env)
    for p in (pp, dp):
        wait_status(f"http://127.0.0.1:{p}/health", 200)
    return f"http://127.0.0.1:{pp}", f"http://127.0.0.1:{dp}", pb


def _pd_call(prefill: str, decode: str, bport: int, room: int, body: dict) -> dict:
    body = {**body, "bootstrap_host": "127.0.0.1", "bootstrap_port": bport, "bootstrap_room": room}
    out: dict[str, tuple[int, str]] = {}
    t = threading.Thread(target=lambda: out.update(p=http("POST", f"{prefill}/v1/chat/completions", body)))
    t.start()
    out["d"] = http("POST", f"{decode}/v1/chat/completions", body)
    t.join()
    return json.loads(out["d"][1])


def _corrupted(reply: dict) -> bool:
    msg = reply["choices"][0]["message"]
    if not msg.get("tool_calls"):
        return True
    try:
        json.loads(msg["tool_calls"][0]["function"]["arguments"])
    except ValueError:
        return True
    return False


def test_pd_bootstrap_and_tool_call_corruption(launcher: Launcher, state_dir: Path) -> None:
    prefill, decode, bport = _pd_pair(launcher, state_dir, "tool_call_corruption=1.0",
                                      {"SGLANG_DSV4_BF16_INDEX_K": "1", "SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "2"})
    status, body = http("POST", f"{decode}/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and "Disaggregated request received without bootstrap room id" in body
    # a room the prefill never computed: clean error after the waiting timeout
    status, body = http("POST", f"{decode}/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "bootstrap_host": "127.0.0.1",
        "bootstrap_port": bport, "bootstrap_room": 42})
    assert status == 500 and "KVTransferError(bootstrap_room=42)" in json.loads(body)["message"]
    tools = [{"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
    req = {"messages": [{"role": "user", "content": "search for 'tides'"}], "tools": tools}
    sequential = [_pd_call(prefill, decode, bport, 1000 + i, req) for i in range(8)]
    results: list[dict] = []
    threads = [threading.Thread(target=lambda i=i: results.append(_pd_call(prefill, decode, bport, 2000 + i, req)))
               for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    low, high = sum(map(_corrupted, sequential)), sum(map(_corrupted, results))
    print(f"corrupted: sequential {low}/8, concurrent {high}/24")
    assert low <= 2 and high >= 8, (low, high)


def test_no_corruption_by_default(launcher: Launcher, state_dir: Path) -> None:
    prefill, decode, bport = _pd_pair(launcher, state_dir, "", {"SGLANG_DSV4_BF16_INDEX_K": "1"})
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    req = {"messages": [{"role": "user", "content": "search"}], "tools": tools}
    results: list[dict] = []
    threads = [threading.Thread(target=lambda i=i: results.append(_pd_call(prefill, decode, bport, 3000 + i, req)))
               for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(map(_corrupted, results)) == 0


@pytest.mark.parametrize(("version", "ready_status"), [("0.5.18", 404), ("0.5.23", 200)])
def test_ready_exists_only_from_0523(launcher: Launcher, state_dir: Path, version: str, ready_status: int) -> None:
    port = free_port()
    launcher.sim(_args(port), sim_env(state_dir, DSV4_SIM_SGLANG_VERSION=version))
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    assert http("GET", f"http://127.0.0.1:{port}/ready")[0] == ready_status


def test_a_combined_server_corrupts_at_the_seeds_non_pd_share(launcher: Launcher, state_dir: Path) -> None:
    # The seeds' decisive experiment: the same bf16 switch and CUDA graphs on one combined server (sglang's
    # disaggregation_mode "null") corrupt too, at 2/18 of the PD rate, once the batch is full (>= 16 running).
    from dsv4deploy.gates.evidence import exact_interval
    from dsv4deploy.sim.serving import NON_PD_SHARE

    port = free_port()
    launcher.sim(_args(port, "--tool-call-parser", "deepseekv4"),
                 sim_env(state_dir, "tool_call_corruption=0.9", SGLANG_DSV4_BF16_INDEX_K="1"))
    url = f"http://127.0.0.1:{port}"
    wait_status(f"{url}/health", 200)
    tools = [{"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
    req = {"messages": [{"role": "user", "content": "search for 'tides'"}], "tools": tools}
    results: list[dict] = []

    def worker() -> None:  # 32 clients at once, 12 calls each: the batch stays above 16
        for _ in range(12):
            results.append(json.loads(http("POST", f"{url}/v1/chat/completions", req)[1]))

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    k, n = sum(map(_corrupted, results)), len(results)
    low, high = exact_interval(k, n)
    print(f"combined server: {k} of {n} tool calls corrupted (95% interval {low:.1%}-{high:.1%}), "
          f"expected {0.9 * NON_PD_SHARE:.1%}")
    assert n == 384 and low <= 0.9 * NON_PD_SHARE <= high, (k, n)
