"""What clients see during a rollout: a continuous client that keeps asking the endpoint and counts.

`DowntimeClient` sends one small chat completion after another (from `concurrency` threads) until it
is stopped, and reports how many it sent, how many failed (no answer, a non-200 status, or an answer
without a choice) and the longest gap between two successful answers - the outage a user would have
seen, also when no request failed outright (a request that hung). Used by the tests and `python -m
bench` around a rollout; the figures go into the rollout's report (`Downtime.as_dict`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx


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
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
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
