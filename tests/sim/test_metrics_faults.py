"""The simulated server's /metrics (read with prometheus_client, as the perf gate reads it), its
token-by-token stream, and the slow_decode, degrade_after and metrics_error faults."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from simhelpers import Launcher, chat, free_port, http, sim_env, wait_status

from dsv4deploy.gates import prom
from dsv4deploy.sim.faults import FaultError, parse_faults

pytestmark = pytest.mark.integration


def _args(port: int, *extra: str) -> list[str]:
    return ["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", "dsv4",
            "--tp-size", "4", "--host", "127.0.0.1", "--port", str(port), *extra]


def _start(launcher: Launcher, state_dir: Path, faults: str = "", *extra: str) -> str:
    port = free_port()
    launcher.sim(_args(port, "--enable-metrics", *extra), sim_env(state_dir, faults, DSV4_SIM_TIME_SCALE="1"))
    url = f"http://127.0.0.1:{port}"
    wait_status(f"{url}/health", 200)
    return url


def _scrape(url: str) -> prom.Scrape:
    status, text = http("GET", f"{url}/metrics")
    assert status == 200, text
    return prom.parse(text)


def _stream(url: str, words: int) -> list[tuple[float, dict]]:
    """A streamed chat completion; each event with when it arrived."""
    body = {"model": "dsv4", "messages": [{"role": "user", "content": "Say " + " ".join(["tick"] * words)}],
            "stream": True, "max_tokens": words, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=30) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append((time.monotonic(), json.loads(line[6:])))
    return events


def test_metrics_count_what_the_server_really_did(launcher: Launcher, state_dir: Path) -> None:
    url = _start(launcher, state_dir)
    before = _scrape(url)
    for _ in range(3):
        assert chat(url, "Say one two three four five", max_tokens=5)[0] == 200
    assert chat(url, "x", max_tokens=-1)[0] == 400  # refused: an aborted request
    change = prom.delta(before, _scrape(url))
    assert change.values["sglang:num_requests_total"] == 3
    assert change.values["sglang:num_aborted_requests_total"] == 1
    assert change.values["sglang:generation_tokens_total"] == 15
    itl = change.histograms["sglang:inter_token_latency_seconds"]
    assert itl.count == 12  # 4 gaps between 5 tokens, per request
    assert 0.008 < itl.quantile(0.5) < 0.05  # one decode step of a batch of one is 10 ms
    assert change.histograms["sglang:time_to_first_token_seconds"].count == 3
    assert change.histograms["sglang:e2e_request_latency_seconds"].count == 3
    assert "sglang:num_running_reqs" in change.values and "sglang:gen_throughput" in change.values


def test_metrics_need_enable_metrics(launcher: Launcher, state_dir: Path) -> None:
    port = free_port()
    launcher.sim(_args(port), sim_env(state_dir))
    wait_status(f"http://127.0.0.1:{port}/health", 200)
    assert http("GET", f"http://127.0.0.1:{port}/metrics")[0] == 404


def test_a_stream_sends_each_token_as_it_is_decoded(launcher: Launcher, state_dir: Path) -> None:
    url = _start(launcher, state_dir)
    events = _stream(url, 20)
    texts = [(t, e["choices"][0]["delta"].get("content")) for t, e in events if e["choices"]]
    content = [(t, c) for t, c in texts if c]
    assert "".join(c for _, c in content) == " ".join(["tick"] * 20)
    assert len(content) == 20
    # 20 decode steps of 10 ms apart, not one burst at the end.
    assert content[-1][0] - content[0][0] > 0.1
    assert events[-1][1]["usage"]["completion_tokens"] == 20


def test_slow_decode_makes_every_step_slower(launcher: Launcher, state_dir: Path) -> None:
    fast, slow = _start(launcher, state_dir / "a"), _start(launcher, state_dir / "b", "slow_decode=3")
    medians = {}
    for name, url in (("fast", fast), ("slow", slow)):
        before = _scrape(url)
        for _ in range(3):
            assert chat(url, "Say " + " ".join(["tick"] * 10), max_tokens=10)[0] == 200
        medians[name] = prom.delta(before, _scrape(url)).histograms["sglang:inter_token_latency_seconds"].quantile(0.5)
    assert medians["slow"] > 2 * medians["fast"], medians


def test_degrade_after_answers_wrong_from_the_next_request_on(launcher: Launcher, state_dir: Path) -> None:
    url = _start(launcher, state_dir, "degrade_after=2")
    answers = [chat(url, "Say OK")[1]["choices"][0]["message"]["content"] for _ in range(4)]
    assert answers[:2] == ["OK", "OK"]
    assert all(a != "OK" and len(a.split()) >= 6 for a in answers[2:]), answers


def test_new_faults_refuse_bad_values() -> None:
    assert parse_faults("slow_decode=3,degrade_after=200").slow_decode == 3.0
    with pytest.raises(FaultError, match="slow_decode"):
        parse_faults("slow_decode=0.5")
    with pytest.raises(FaultError, match="degrade_after"):
        parse_faults("degrade_after=x")


def test_metrics_error_fails_the_metrics_while_the_server_serves(launcher: Launcher, state_dir: Path) -> None:
    url = _start(launcher, state_dir, "metrics_error")
    status, text = http("GET", f"{url}/metrics")
    assert status == 500, text
    assert chat(url, "Say OK")[1]["choices"][0]["message"]["content"] == "OK"
    with pytest.raises(FaultError, match="metrics_error"):
        parse_faults("metrics_error=maybe")
