"""The real-engine tier runs inside a network namespace of its own.

sglang's gloo store and mooncake listen on every interface, on ports they pick: on the machine's own
interfaces they would be reachable from outside and could collide with anything else running. So
the tier's pytest process (and with it supervisord, the servers, the routers, ansible-playbook and
the gates it runs) enters a fresh network namespace with only loopback, unless it already runs in
one (``unshare -n``, as .ci/run starts it).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

CLONE_NEWNET = 0x40000000


def interfaces() -> list[str]:
    """The network interfaces of this process's namespace (from /proc/self/net/dev)."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return [line.split(":", 1)[0].strip() for line in lines if ":" in line]


def isolated() -> bool:
    """True when this process's network namespace has loopback only."""
    return interfaces() == ["lo"]


def enter_private_namespace() -> str | None:
    """Move this process into a new network namespace with loopback up; None when done, else why not.

    Affects the calling thread and every process it starts from now on (pytest's main thread).
    """
    if isolated():
        return _loopback_up()
    if os.geteuid() != 0:
        return ("the real-engine tier runs its servers in a private network namespace: run it as root, or "
                "under `unshare -rn` (e.g. unshare -rn sh -c 'ip link set lo up && pytest -m real_engine ...')")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        return f"unshare(CLONE_NEWNET) failed: {os.strerror(ctypes.get_errno())}"
    return _loopback_up()


def _loopback_up() -> str | None:
    proc = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True, check=False)
    return None if proc.returncode == 0 else f"cannot bring loopback up: {proc.stderr.strip()}"
