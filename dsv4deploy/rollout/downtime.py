"""What clients see during a rollout: a continuous client that keeps asking the endpoint and counts.

`DowntimeClient` sends one small chat completion after another (from `concurrency` threads) until it
is stopped, and reports how many it sent, how many failed (no answer, a non-200 status, or an answer
without a choice) and the longest gap between two successful answers - the outage a user would have
seen, also when no request failed outright (a request that hung). Used by the tests and `python -m
bench` around a rollout; the figures go into the rollout's report (`Downtime.as_dict`).

Run as `python -m dsv4deploy.rollout.downtime` (the `dsv4_downtime` action starts it on the controller during a
playbook's rollout), it sends until SIGTERM, until the process it watches (the ansible-playbook run) is
gone, or until `--max-s`, then writes its figures as JSON to `--out`. The API key comes from the
environment (`DSV4_DOWNTIME_API_KEY`), never the command line, which any local user can read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from dsv4deploy.gates.http import auth_headers


@dataclass
class Downtime:
    """The figures of one run of the client."""

    sent: int = 0
    failed: int = 0
    # The longest time between two successful answers (from the start to the first, and from the last
    # to the stop, count too: an endpoint that never answered shows its whole outage).
    longest_gap_s: float = 0.0
    seconds: float = 0.0
    # The first few failures as "status: body" (status 0: no answer), for the report.
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able, for the report and bench."""
        return {**asdict(self), "longest_gap_s": round(self.longest_gap_s, 3), "seconds": round(self.seconds, 3)}

    def line(self) -> str:
        """One line for people: `sent 120, failed 0, longest gap 0.21 s over 12.0 s`."""
        return (f"sent {self.sent}, failed {self.failed}, longest gap between answers {self.longest_gap_s:.2f} s "
                f"over {self.seconds:.1f} s")


class DowntimeClient:
    """Keeps asking `endpoint` (an OpenAI-style server or router) until `stop`; a context manager."""

    KEEP_FAILURES = 5

    def __init__(self, endpoint: str, model: str, api_key: str | None = None, concurrency: int = 1,
                 timeout_s: float = 30.0, pause_s: float = 0.02, max_tokens: int = 4) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.body = {"model": model, "messages": [{"role": "user", "content": "Say OK"}], "max_tokens": max_tokens}
        self.headers = auth_headers(api_key)
        self.concurrency, self.timeout_s, self.pause_s = max(1, concurrency), timeout_s, pause_s
        self.figures = Downtime()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = self._last_ok = 0.0

    def start(self) -> DowntimeClient:
        """Begin sending (returns self)."""
        self._started = self._last_ok = time.monotonic()
        self._threads = [threading.Thread(target=self._loop, daemon=True, name=f"downtime-{i}")
                         for i in range(self.concurrency)]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> Downtime:
        """Stop sending, let the requests in flight finish, and return the figures."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 5)
        now = time.monotonic()
        with self._lock:
            self.figures.longest_gap_s = max(self.figures.longest_gap_s, now - self._last_ok)
            self.figures.seconds = now - self._started
            return self.figures

    def __enter__(self) -> DowntimeClient:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        with httpx.Client(timeout=self.timeout_s, trust_env=False) as client:
            while not self._stop.is_set():
                self._record(*self._ask(client))
                self._stop.wait(self.pause_s)

    def _ask(self, client: httpx.Client) -> tuple[bool, str]:
        """One request: (success, what went wrong)."""
        try:
            resp = client.post(f"{self.endpoint}/v1/chat/completions", json=self.body, headers=self.headers)
        except httpx.HTTPError as exc:
            return False, f"0: {exc.__class__.__name__}: {exc}"
        if resp.status_code != 200:
            return False, f"{resp.status_code}: {resp.text[:300]}"
        try:
            ok = bool(resp.json().get("choices"))
        except ValueError:
            ok = False
        return ok, "" if ok else f"200 without a choice: {resp.text[:300]}"

    def _record(self, ok: bool, why: str) -> None:
        now = time.monotonic()
        with self._lock:
            self.figures.sent += 1
            if ok:
                self.figures.longest_gap_s = max(self.figures.longest_gap_s, now - self._last_ok)
                self._last_ok = now
            else:
                self.figures.failed += 1
                if len(self.figures.failures) < self.KEEP_FAILURES:
                    self.figures.failures.append(why)


API_KEY_ENV = "DSV4_DOWNTIME_API_KEY"


def _alive(pid: int) -> bool:
    """Whether process `pid` still exists: /proc where there is one, else signal 0 (which sends nothing)."""
    if os.path.isdir("/proc/self"):
        return os.path.exists(f"/proc/{pid}")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    return True


def run_until_stopped(client: DowntimeClient, watch_pid: int = 0, max_s: float = 7200.0,
                      poll_s: float = 0.5) -> Downtime:
    """Run `client` until SIGTERM/SIGINT, until `watch_pid` (when set) is gone, or for `max_s`."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    deadline = time.monotonic() + max_s
    client.start()
    # A killed controller must not leave a client asking production for hours.
    while not stop.wait(poll_s):
        if time.monotonic() > deadline or (watch_pid and not _alive(watch_pid)):
            break
    return client.stop()


def write_figures(path: Path, figures: Downtime) -> None:
    """The figures as JSON, replaced at once (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(figures.as_dict()) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Ask an endpoint until stopped and write the figures (see the module's docstring)."""
    ap = argparse.ArgumentParser(prog="python -m dsv4deploy.rollout.downtime", description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True, help="the production router's URL, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", required=True, help="the served model name")
    ap.add_argument("--out", required=True, type=Path, help="where the figures are written (JSON)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=30.0, help="per request")
    ap.add_argument("--watch-pid", type=int, default=0, help="stop when this process is gone")
    ap.add_argument("--max-s", type=float, default=7200.0, help="stop after this long in any case")
    args = ap.parse_args(argv)
    client = DowntimeClient(args.endpoint, args.model, api_key=os.environ.get(API_KEY_ENV) or None,
                            concurrency=args.concurrency, timeout_s=args.timeout_s)
    write_figures(args.out, run_until_stopped(client, args.watch_pid, args.max_s))
    return 0


def spawn(endpoint: str, model: str, api_key: str = "", concurrency: int = 1, watch_pid: int = 0,
          max_s: float = 7200.0) -> dict[str, Any]:
    """Start the client as a process of its own (its own session: it outlives the caller's process,
    not the watched one); returns what `collect` needs: {pid, out, dir, endpoint}."""
    work = Path(tempfile.mkdtemp(prefix="dsv4-downtime-"))
    out = work / "figures.json"
    env = {**os.environ, API_KEY_ENV: api_key}
    with open(work / "client.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dsv4deploy.rollout.downtime", "--endpoint", endpoint, "--model", model,
             "--out", str(out), "--concurrency", str(concurrency), "--watch-pid", str(watch_pid),
             "--max-s", str(max_s)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)
    return {"pid": proc.pid, "out": str(out), "dir": str(work), "endpoint": endpoint}


def _ours(pid: int, out: str) -> bool:
    """Whether `pid` is still the client writing to `out` (a reused PID is left alone)."""
    try:
        return out.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def collect(client: dict[str, Any], wait_s: float = 40.0) -> dict[str, Any]:
    """Stop a client `spawn` started and return its figures (`Downtime.as_dict`); {} when it left none.

    The client's own stop waits for its requests in flight (up to their timeout), hence `wait_s`."""
    pid, out = int(client.get("pid") or 0), Path(str(client.get("out") or ""))
    if pid and _ours(pid, str(out)):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while not out.is_file() and time.monotonic() < deadline and pid and _ours(pid, str(out)):
        time.sleep(0.1)
    if pid:
        with contextlib.suppress(ChildProcessError):  # our child in tests; elsewhere init reaps it
            os.waitpid(pid, os.WNOHANG)
    try:
        figures = json.loads(out.read_text())
        figures["endpoint"] = client.get("endpoint") or ""
    except (OSError, ValueError):
        figures = {}
    if client.get("dir") and Path(str(client["dir"])).name.startswith("dsv4-downtime-"):
        shutil.rmtree(str(client["dir"]), ignore_errors=True)
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
