"""Requests keep running through a switchover: none of those in flight when it starts may fail.

The embedded simulated host behind the real smg (its own venv), real supervisord, the real playbook.
Clients send chat requests without pause while a second deploy switches releases. The router is
stopped first and drains (no new connections, or smg's /readiness "draining"; the requests it holds
finish), then decode, then prefill. Measured: requests in flight when the old router stopped taking
new ones, and how many of every request started before that moment failed (must be none). Requests
refused while no router listens, and any failure after the new release came up, are counted apart.
Then, on the same host, a release whose servers log a slower KV transfer path is promoted with a warning.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import httpx
import pytest

from tests.integration.simhost import SMALL_NEEDLE_RULE, SMALL_SOAK, SimHost

pytestmark = pytest.mark.integration

FAST = ["-e", "readiness_deadline_s=30", "-e", "smoke_deadline_s=60", "-e", "needle_deadline_s=180",
        "-e", '{"needle_lengths": [1000, 2000, 5500], "needle_depths": [0.5]}', *SMALL_SOAK,
        *SMALL_NEEDLE_RULE]
SMG = ["-e", "router_implementation=smg"]
CLIENTS = 4
# About 8K tokens: the simulated prefill (20K tokens/s, one at a time) holds each request ~0.4 s, so
# with four clients a request is in flight for a second or two.
PROMPT = " ".join(f"w{i}" for i in range(8000)) + "\nSay OK"


@dataclass
class Outcome:
    """One client request: when it started and ended, and how it went."""

    start: float
    end: float
    status: int | None  # None: no HTTP answer
    refused: bool  # the connection was refused (no router listening): never in flight
    error: str = ""


def _client(host: SimHost, stop: threading.Event, out: list[Outcome]) -> None:
    body = {"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}
    headers = {"Authorization": f"Bearer {host.api_key}"}
    with httpx.Client(timeout=120) as client:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                r = client.post(f"{host.endpoint}/v1/chat/completions", json=body, headers=headers)
                error = "" if r.status_code == 200 else r.text[:200]
                out.append(Outcome(t0, time.monotonic(), r.status_code, False, error))
            except httpx.ConnectError as exc:
                out.append(Outcome(t0, time.monotonic(), None, True, str(exc)))
                time.sleep(0.2)
            except httpx.HTTPError as exc:
                out.append(Outcome(t0, time.monotonic(), None, False, f"{type(exc).__name__}: {exc}"))


def test_requests_in_flight_survive_a_switchover(sim_host: SimHost) -> None:
    first = sim_host.playbook("deploy.yml", *SMG, *FAST)
    assert first.returncode == 0, first.stdout[-5000:]
    stop, outcomes = threading.Event(), []
    clients = [threading.Thread(target=_client, args=(sim_host, stop, outcomes)) for _ in range(CLIENTS)]
    for c in clients:
        c.start()
    try:
        time.sleep(3)  # steady load before the switchover
        # A new release (the drain deadline is part of the router's command line).
        second = sim_host.playbook("deploy.yml", *SMG, *FAST, "-e", "drain_deadline_s=45")
        time.sleep(3)  # and after it
    finally:
        stop.set()
        for c in clients:
            c.join(150)
    refused = [o for o in outcomes if o.refused]
    assert refused, f"the router never stopped taking connections: was there a switchover? {second.stdout[-3000:]}"
    closed_at = min(o.start for o in refused)  # the old router no longer listened
    before = [o for o in outcomes if o.start < closed_at]
    in_flight = [o for o in before if o.end > closed_at]
    failed = [o for o in before if o.status != 200]
    after = [o for o in outcomes if o.start >= closed_at and not o.refused]
    print(f"\ndrain figure: {len(outcomes)} requests, {len(in_flight)} in flight when the old router stopped "
          f"taking new ones, {len(failed)} of the {len(before)} started before that failed; {len(refused)} refused "
          f"while no router listened; {sum(o.status != 200 for o in after)} of {len(after)} after it failed "
          f"(longest drained request {max((o.end - closed_at for o in in_flight), default=0):.1f} s past the stop)")
    kinds = Counter(f"{o.status} {o.error[:90]}" for o in after if o.status != 200)
    print("failures after the stop (the new release starting):", kinds.most_common(4))
    assert second.returncode == 0, second.stdout[-5000:]
    assert sim_host.report()["verdict"] == "promoted"
    assert in_flight, "no request was in flight at the switchover: the test proved nothing"
    assert not failed, [(o.status, o.error) for o in failed]


def test_a_slower_kv_transfer_path_is_a_warning_in_the_report(sim_host: SimHost) -> None:
    """The servers log sglang's "Falling back to default memory pool." at start: promoted, with a warning."""
    proc = sim_host.playbook("deploy.yml", *SMG, *FAST, "-e", "sim_faults=kv_pool_fallback")
    assert proc.returncode == 0, proc.stdout[-5000:]
    report = sim_host.report()
    config = next(g for g in report["gates"] if g["name"] == "config")
    assert report["verdict"] == "promoted" and config["status"] == "passed"
    assert "warning: KV transfer slower than configured on sglang-dsv4-" in config["summary"]
    lines = config["evidence"]["warnings"]["kv_transfer_fallback"]
    assert set(lines) == {"sglang-dsv4-prefill", "sglang-dsv4-decode"}
    assert all("Falling back to default memory pool." in found[0] for found in lines.values())
