"""Free loopback ports for the servers tests start, chosen below the kernel's ephemeral range.

A port from bind(0) lies in the ephemeral range, which every outgoing connection (ssh, HTTP clients,
other test workers) also draws from: between the test choosing it and its server binding it, a client
may take it ("Address already in use"). Below that range a port is only taken by a server that asks
for it by number, and a random pick keeps parallel test workers apart.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_rng = random.Random()  # seeded from the OS: each worker process draws its own ports


def _candidate_range(size: int) -> tuple[int, int]:
    try:
        low, high = (int(v) for v in _RANGE_FILE.read_text().split()[:2])
    except (OSError, ValueError):
        low, high = 32768, 60999
    if low - size > 12000:
        return 10000, low - size
    return high + 1, 65535 - size


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(size: int = 4) -> int:
    """A base port with `size` consecutive ports free on 127.0.0.1 right now."""
    start, stop = _candidate_range(size)
    for _ in range(500):
        base = _rng.randrange(start, stop)
        if all(_is_free(base + i) for i in range(size)):
            return base
    raise RuntimeError(f"no block of {size} free ports found in {start}-{stop}")


def free_port() -> int:
    """One TCP port free on 127.0.0.1 right now."""
    return free_port_block(1)
