"""When a server has finished its requests, judged from its own state (standard library only).

A worker taken out of a router gets no new requests, but the ones it is serving go on. The server says
how many it has in its Prometheus text (``--enable-metrics``, on its own port): ``sglang:num_running_reqs``
and ``sglang:num_queue_reqs`` (summed over their label sets: one per scheduler). Zero for both means
nothing of it is in flight; stopping it then (its own SIGTERM waits for running requests too) loses
nothing.

A router drains by itself on SIGTERM: sglang-router 0.3.2 closes its listener at once and answers the
requests it holds, each connection closing once its answer is written; only then does its process end,
and that end takes another 0.2-1 s of its own (the tokio runtime, its metrics listener). That it has
finished with its clients is seen in its sockets (/proc): none listening, none it accepted still open.
"""

from __future__ import annotations

import contextlib
import os
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


# TCP states (include/net/tcp_states.h) in which a connection a server accepted is still open on its side:
# ESTABLISHED, SYN_RECV, CLOSE_WAIT (the client is done, the server still answering). LISTEN is 0A.
OPEN_STATES = frozenset({"01", "03", "08"})
LISTEN = "0A"


def sockets(pids: list[int]) -> list[tuple[int, str]] | None:
    """(local port, TCP state) of every TCP socket the processes `pids` hold; None when they cannot be read
    (not ours to look at, or gone)."""
    inodes: set[str] = set()
    try:
        for pid in pids:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(link[len("socket:["):-1])
        found = []
        for table in ("tcp", "tcp6"):
            with open(f"/proc/{pids[0]}/net/{table}", encoding="ascii") as fh:
                for line in fh.read().splitlines()[1:]:
                    cols = line.split()
                    if len(cols) > 9 and cols[9] in inodes:
                        found.append((int(cols[1].rsplit(":", 1)[1], 16), cols[3]))
    except (OSError, IndexError, ValueError):
        return None
    return found


def drained(pids: list[int], ports: frozenset[int]) -> bool:
    """A server that listened on `ports` has finished with its clients: it listens on none of them and holds
    no connection it accepted there still open (each request's answer written and its connection closed). A
    process that is gone has too."""
    now = sockets(pids)
    if now is None:
        return not alive(pids[0])
    return not any(port in ports and (state == LISTEN or state in OPEN_STATES) for port, state in now)


def alive(pid: int) -> bool:
    """The process runs (not gone, not a zombie its parent has yet to reap)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def listening(pids: list[int]) -> frozenset[int]:
    """The ports the processes `pids` listen on (empty when that cannot be read)."""
    return frozenset(port for port, state in sockets(pids) or [] if state == LISTEN)


def wait_drained(pids: list[int], ports: frozenset[int], until: float, poll_s: float = 0.02) -> bool:
    """Wait until drained() (True), or the monotonic time `until` (False)."""
    while not drained(pids, ports):
        if time.monotonic() > until:
            return False
        time.sleep(poll_s)
    return True
