"""Address facts every layer needs (the gates' reach, the rollout's router listeners): standard library only."""

from __future__ import annotations

import ipaddress


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if address.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
