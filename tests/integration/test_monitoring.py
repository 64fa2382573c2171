"""The generated monitoring files against the real Prometheus (Debian's package) and node_exporter, scraping a
deployment on the embedded host: every dashboard query and every alert's measure returns data, every alert
expression evaluates, and killing a worker makes the worker-down alert's expression return that worker."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from dsv4deploy.monitoring.dashboard import dashboard_queries
from dsv4deploy.monitoring.rules import Thresholds, alerts
from tests.integration.conftest import _missing_tools
from tests.integration.simhost import VENV_BIN, SimHost, make_sim_host
from tests.ports import free_port
from tests.processes import stop_process

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("prometheus-node-exporter") is None,
                       reason="needs Debian's prometheus and prometheus-node-exporter (scripts/setup.sh tool as root)"),
]
FAST = ["-e", json.dumps({"dsv4_gates_names": ["readiness"]}), "-e", "readiness_deadline_s=60"]
VENV_PYTHON = VENV_BIN / "python"
SCRAPE = "500ms"  # a killed worker is back within about a second: several scrapes see it down


class Prometheus:
    """The HTTP API of one running Prometheus."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict]:
        resp = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        assert resp.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]

    def wait_for(self, expr: str, deadline_s: float, check=bool) -> list[dict]:
        """The result of `expr` once `check` holds of it, polled once a second; the last result at the deadline."""
        end = time.monotonic() + deadline_s
        while True:
            result = self.query(expr)
            if check(result) or time.monotonic() > end:
                return result
            time.sleep(1)


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[SimHost, Prometheus, Path]]:
    """A deployment on the embedded host with its verify timer, node_exporter reading the timer's textfile
    folder, and Prometheus running the generated files; everything stopped at the end."""
    reason = _missing_tools()
    if reason:
        pytest.skip(reason)
    # supervisord's socket path must fit AF_UNIX's 107 bytes: a short folder, not pytest's deep tmp_path.
    base = Path(tempfile.mkdtemp(prefix="dsv4mon-", dir="/tmp"))
    base.chmod(0o755)
    sim = make_sim_host(base / "host")
    procs: list[subprocess.Popen] = []
    try:
        proc = sim.playbook("deploy.yml", *FAST)
        assert proc.returncode == 0, proc.stdout[-5000:]
        textfile = base / "textfile"
        textfile.mkdir(mode=0o755)
        proc = sim.playbook("verify_timer.yml", "-e", "dsv4_verify_timer_host=local",
                            "-e", f"dsv4_verify_timer_textfile_dir={textfile}",
                            "-e", f"dsv4_verify_timer_python={VENV_PYTHON}", "-e", "dsv4_verify_timer_interval_s=30",
                            "-e", "dsv4_verify_timer_canary_tokens=500", "-e", "dsv4_verify_timer_probe_sessions=1")
        assert proc.returncode == 0, proc.stdout[-5000:]
        node_port, prom_port = free_port(), free_port()
        out = base / "monitoring"
        gen = subprocess.run([str(VENV_BIN / "dsv4deploy"), "monitoring", "-i", str(sim.inventory), "--out", str(out),
                              "--scrape-interval", SCRAPE, "--node-exporter-port", str(node_port),
                              "--verify-interval-s", "30"], capture_output=True, text=True, timeout=120)
        assert gen.returncode == 0 and gen.stderr == "", gen.stderr
        procs.append(subprocess.Popen(
            ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{node_port}", "--collector.disable-defaults",
             "--collector.textfile", f"--collector.textfile.directory={textfile}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={out / 'prometheus.yml'}", f"--storage.tsdb.path={base / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        prom = Prometheus(f"http://127.0.0.1:{prom_port}")
        wait_ready(prom.url, procs[-1])
        yield sim, prom, out
    finally:
        for p in reversed(procs):
            stop_process(p, timeout_s=15)
        sim.teardown()
        shutil.rmtree(base, ignore_errors=True)


def wait_ready(url: str, proc: subprocess.Popen, deadline_s: float = 60) -> None:
    """Until Prometheus answers /-/ready (it has read its configuration and storage)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"prometheus exited with {proc.returncode}"
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"prometheus at {url} not ready in {deadline_s} s")


def send_requests(sim: SimHost, n: int) -> None:
    """Chat requests through the router, so the latency histograms have observations."""
    for i in range(n):
        resp = httpx.post(f"{sim.endpoint}/v1/chat/completions", timeout=60,
                          headers={"Authorization": f"Bearer {sim.api_key}"},
                          json={"model": "deepseek-v4-flash", "max_tokens": 8,
                                "messages": [{"role": "user", "content": f"Count to {i + 3}."}]})
        assert resp.status_code == 200, resp.text


def test_every_panel_query_and_alert_measure_returns_data_and_every_alert_evaluates(stack) -> None:
    sim, prom, out = stack
    # Every target up, the verify timer's first result read through node_exporter.
    up = prom.wait_for('up{deployment="install"}', 60, lambda r: len(r) == 4 and all(s["value"][1] == "1" for s in r))
    assert sorted((s["metric"]["job"], s["metric"]["host"]) for s in up) == [
        ("dsv4deploy-node", "local"), ("dsv4deploy-router", "local"), ("dsv4deploy-workers", "local"),
        ("dsv4deploy-workers", "local")], up
    assert all(s["value"][1] == "1" for s in up), up
    gates = prom.wait_for('dsv4deploy_gate_passed{deployment="install"}', 60, lambda r: len(r) == 2)
    assert {s["metric"]["gate"]: s["value"][1] for s in gates} == {"canary_needle": "1", "tool_calls": "1"}
    send_requests(sim, 4)
    dashboard = json.loads((out / "grafana" / "dsv4deploy.json").read_text())
    queries = dashboard_queries(dashboard)
    rules = yaml.safe_load((out / "rules" / "dsv4deploy.rules.yml").read_text())["groups"][0]["rules"]
    ours = alerts("install", has_router=True, t=Thresholds(verify_interval_s=30))
    assert [a.expr for a in ours] == [r["expr"] for r in rules]
    # A rate needs two scrapes after the requests; then every query has a series with a number.
    empty: list[str] = []
    for expr in [*queries, *(a.measure for a in ours)]:
        result = prom.wait_for(expr, 20, lambda r: any(s["value"][1] not in ("NaN", "+Inf") for s in r))
        if not any(s["value"][1] not in ("NaN", "+Inf") for s in result):
            empty.append(f"{expr}: {result}")
    assert not empty, "queries without data:\n" + "\n".join(empty)
    # A healthy deployment: every alert's expression evaluates, and none holds.
    held = {a.name: prom.query(a.expr) for a in ours}
    assert held == {name: [] for name in held}, held
    print(f"\nprometheus: {len(queries)} panel queries, {len(ours)} alert measures and {len(ours)} alert "
          f"expressions checked")


def test_a_killed_worker_is_reported_down_by_the_alerts_expression(stack) -> None:
    sim, prom, _ = stack
    expr = next(a.expr for a in alerts("install", has_router=True) if a.name == "DSV4WorkerDown")
    decode_up = 'up{worker="sglang-dsv4-decode"} == 1'
    assert prom.wait_for(decode_up, 60, bool) != [], "the decode was never scraped"
    assert prom.query(expr) == []
    program = next(name for name in sim.pids() if name.endswith("-decode"))
    killed_at = time.time()
    os.kill(sim.pids()[program], signal.SIGKILL)
    try:
        # supervisord restarts it (autorestart=unexpected): the scrapes in between fail. A range query over
        # the seconds since the kill sees each failed scrape, however soon the worker is back.
        deadline = time.monotonic() + 30
        while True:
            resp = httpx.get(f"{prom.url}/api/v1/query_range", timeout=10, params={
                "query": expr, "start": killed_at, "end": time.time(), "step": "0.5"}).json()
            down = resp["data"]["result"]
            if down or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert [s["metric"]["worker"] for s in down] == ["sglang-dsv4-decode"], resp
        assert down[0]["metric"]["role"] == "decode" and down[0]["metric"]["host"] == "local"
        # The rule itself saw it: pending (or firing) in Prometheus' ALERTS series.
        pending = httpx.get(f"{prom.url}/api/v1/query_range", timeout=10, params={
            "query": 'ALERTS{alertname="DSV4WorkerDown"}', "start": killed_at, "end": time.time() + 2,
            "step": "0.5"}).json()["data"]["result"]
        assert [s["metric"]["worker"] for s in pending] == ["sglang-dsv4-decode"], pending
    finally:
        # Restored: back up (supervisord's restart), else started again.
        if prom.wait_for(decode_up, 60, bool) == []:
            sim.supervisorctl("start", program)
    assert prom.wait_for(expr, 60, lambda r: r == []) == []
