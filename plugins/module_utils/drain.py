"""When a server has finished its requests, judged from its own state (standard library only).

A worker taken out of a router gets no new requests, but the ones it is serving go on. The server says
how many it has in its Prometheus text (``--enable-metrics``, on its own port): ``sglang:num_running_reqs``
and ``sglang:num_queue_reqs`` (summed over their label sets: one per scheduler). Zero for both means
nothing of it is in flight; stopping it then (its own SIGTERM waits for running requests too) loses
nothing.
"""

from __future__ import annotations

import time

from ansible_collections.dsv4.deploy.plugins.module_utils.net import get

IN_FLIGHT = ("sglang:num_running_reqs", "sglang:num_queue_reqs")


def in_flight(metrics_text: str) -> int | None:
    """Running plus queued requests in a server's /metrics text; None when it has neither gauge."""
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in IN_FLIGHT:
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            seen = True
    return int(total) if seen else None


def wait_idle(url: str, key: str | None, deadline_s: float, poll_s: float = 0.2) -> dict:
    """Poll `url`/metrics until the server has nothing in flight: {url, idle, in_flight, seconds, why}.

    `idle` is None when the server's state cannot be judged (no metrics, no answer): the caller then
    relies on the server's own SIGTERM drain alone, and says so."""
    started = time.monotonic()
    last: int | None = None
    while True:
        answer = get(f"{url.rstrip('/')}/metrics", key, timeout=5, limit=2_000_000)
        last = in_flight(answer["body"]) if answer["status"] == 200 else None
        seconds = round(time.monotonic() - started, 3)
        if last is None:
            why = answer["error"] or f"/metrics answered {answer['status']} without sglang:num_running_reqs"
            return {"url": url, "idle": None, "in_flight": None, "seconds": seconds, "why": why}
        if last == 0:
            return {"url": url, "idle": True, "in_flight": 0, "seconds": seconds, "why": ""}
        if seconds > deadline_s:
            return {"url": url, "idle": False, "in_flight": last, "seconds": seconds,
                    "why": f"still {last} request(s) in flight after {deadline_s:g} s"}
        time.sleep(poll_s)
