"""Helpers for simulated-host tests: free ports, processes stopped by PID, HTTP, haystacks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.ports import free_port  # also re-exported to the simulator tests

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def wait_for_port(port: int, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until something accepts on 127.0.0.1:port (fail early if ``proc`` exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process {proc.pid} exited with {proc.returncode} before port {port} opened")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise AssertionError(f"port {port} did not open within {timeout}s")


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
         timeout: float = 30.0) -> tuple[int, str]:
    """One HTTP call with the standard library; returns (status, body text)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
        return 0, str(exc)


def wait_status(url: str, want: int, timeout: float = 15.0) -> float:
    """Poll GET url until it answers ``want``; returns the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if http("GET", url, timeout=2)[0] == want:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"{url} did not answer {want} within {timeout}s")


class Proc:
    """A started process with its log file."""

    def __init__(self, popen: subprocess.Popen, log: Path, port: int | None) -> None:
        self.popen, self.log, self.port = popen, log, port

    @property
    def pid(self) -> int:
        """Process id."""
        return self.popen.pid

    def text(self) -> str:
        """Everything it logged so far."""
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        return self.popen.returncode


class Launcher:
    """Starts processes and stops every one of them (by PID) when closed."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[Proc] = []

    def start(self, argv: list[str], env: dict[str, str] | None = None, port: int | None = None,
              name: str = "proc", wait: bool = True, timeout: float = 15.0) -> Proc:
        """Run ``argv`` (logs to a file); wait for ``port`` to accept unless ``wait`` is False."""
        log = self.log_dir / f"{name}-{len(self.procs)}.log"
        fh = open(log, "wb")  # noqa: SIM115 - the child owns it; closed with the process
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=full_env, cwd=REPO)
        fh.close()
        proc = Proc(popen, log, port)
        self.procs.append(proc)
        if wait and port is not None:
            try:
                wait_for_port(port, timeout, popen)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n--- {name} log ---\n{proc.text()[-3000:]}") from None
        return proc

    def sim(self, args: list[str], env: dict[str, str], name: str = "sim", wait: bool = True) -> Proc:
        """Start ``python -m dsv4deploy.sim.server`` with args (its --port is read from args)."""
        port = int(args[args.index("--port") + 1]) if "--port" in args else None
        return self.start([PYTHON, "-m", "dsv4deploy.sim.server", *args], env, port, name, wait)

    def close(self) -> None:
        """Stop everything still running, newest first."""
        for proc in reversed(self.procs):
            proc.stop()


def pd_pair(launcher: Launcher, state_dir: Path, first_gpu: int, model: str = "dsv4",
            timeout: float = 30.0) -> tuple[list[dict[str, Any]], list[Proc]]:
    """A tp-2 prefill (GPUs first_gpu, +1) and decode (the next two) with metrics on, both healthy; their
    worker specs for a router's worker API ({url, worker_type, bootstrap_port}) and their processes."""
    pp, pb, dp = free_port(), free_port(), free_port()
    common = ["--model-path", "/models/DeepSeek-V4-Flash", "--served-model-name", model, "--tp-size", "2",
              "--host", "127.0.0.1", "--enable-metrics"]
    procs = [launcher.sim([*common, "--port", str(pp), "--disaggregation-mode", "prefill",
                           "--disaggregation-bootstrap-port", str(pb), "--base-gpu-id", str(first_gpu)],
                          sim_env(state_dir), name="prefill", wait=False),
             launcher.sim([*common, "--port", str(dp), "--disaggregation-mode", "decode",
                           "--base-gpu-id", str(first_gpu + 2)], sim_env(state_dir), name="decode", wait=False)]
    for port in (pp, dp):
        wait_status(f"http://127.0.0.1:{port}/health", 200, timeout=timeout)
    return ([{"url": f"http://127.0.0.1:{pp}", "worker_type": "prefill", "bootstrap_port": pb},
             {"url": f"http://127.0.0.1:{dp}", "worker_type": "decode"}], procs)


def sim_env(state_dir: Path, faults: str = "", **extra: str) -> dict[str, str]:
    """Environment of a fast simulated host with its own GPU ledger."""
    env = {
        "DSV4_SIM_STATE_DIR": str(state_dir),
        "DSV4_SIM_STARTUP_S": "0.3",
        "DSV4_SIM_TIME_SCALE": "0.05",
        "DSV4_SIM_FAULTS": faults,
    }
    env.update(extra)
    return env


def haystack(tokens_target: int, depth: float, code: str = "ZEBRA-4492-OMEGA",
             topic: str = "the blue harbor") -> str:
    """Filler prose with ``The secret code for <topic> is <code>.`` at ``depth`` (0..1)."""
    filler = "Sailors often talk about weather, tides and the price of rope in small towns"
    sentences = [f"{filler} number {i}." for i in range(max(1, tokens_target // 17))]
    at = int(len(sentences) * depth)
    sentences.insert(at, f"The secret code for {topic} is {code}.")
    return " ".join(sentences) + f"\nWhat is the secret code for {topic}? Answer with the code only."


def chat(url: str, content: str, **extra: Any) -> tuple[int, dict[str, Any] | str]:
    """POST a one-message chat completion; body parsed as JSON when possible."""
    status, text = http("POST", f"{url}/v1/chat/completions",
                        {"model": "dsv4", "messages": [{"role": "user", "content": content}], **extra})
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text
