"""Where a gate can reach a server: from the controller, or only from the server's own host.

A worker bound to a loopback address (or to any address other than the one Ansible reaches its
host at) is reachable on its host but, in general, not from the controller. Its checks (readiness
``/health``, config ``/server_info``) then run on the host itself. The client-facing endpoint (the
router, or the combined server) is always checked from the controller, as a client sees it; an
endpoint bound to a loopback address of a remote host can never be reached that way, which is said
at once instead of being waited out.
"""

from __future__ import annotations

import errno
import socket
from urllib.parse import urlsplit

from dsv4deploy.net import is_loopback

__all__ = ["CONNECT_TIMEOUT_S", "checked_on_host", "controller_reach", "endpoint_problem", "is_loopback", "url_address"]

# Seconds a controller-side TCP connect may take before its address counts as unreachable.
CONNECT_TIMEOUT_S = 3.0
# Errors that mean "nothing can get there from here" (a refused connection means the host answered).
_UNREACHABLE_ERRNOS = {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL, errno.EHOSTDOWN}


def url_address(url: str) -> tuple[str, int]:
    """``(address, port)`` of an http(s) URL (IPv6 without brackets)."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"not a URL with a host: {url!r}")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def checked_on_host(url: str, host_address: str, host_is_local: bool) -> bool:
    """True when a worker at ``url`` must be checked on its own host rather than from the controller.

    The controller reaches a remote host at its inventory address (``ansible_host``); a worker
    bound to any other address (loopback, a private interface) is only certain to be reachable
    on the host. A host reached through the local connection is the controller itself.
    """
    if host_is_local:
        return False
    return url_address(url)[0] != host_address


def endpoint_problem(field: str, url: str, host: str, host_is_local: bool) -> str | None:
    """Why the client-facing ``url`` on ``host`` can never be reached from the controller, or None.

    ``field`` is the setting that chose the address (``router.listen``, or the host's ``listen``).
    """
    address = url_address(url)[0]
    if host_is_local or not is_loopback(address):
        return None
    return (f"{field} (host {host}): the endpoint {url} would listen on {address}, a loopback address of {host}; "
            f"the controller, where the gates run as any client off {host} would, cannot reach it; fix: set "
            f"{field} to 0.0.0.0 or {host}'s own address (with an api_key)")


def controller_reach(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when the controller can reach ``url``'s address, else why not (one line).

    A refused connection counts as reachable: the host answered, and the server may just not be
    listening yet. No route, an unknown name or a connect that times out (a firewall dropping it)
    do not.
    """
    address, port = url_address(url)
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return None
    except socket.gaierror as exc:
        return f"the name {address} does not resolve on the controller ({exc.strerror or exc})"
    except TimeoutError:
        return f"no answer from {address}:{port} within {timeout_s:g} s (dropped by a firewall, or no such host)"
    except OSError as exc:
        if exc.errno in _UNREACHABLE_ERRNOS:
            return f"{address}:{port}: {exc.strerror or exc}"
        return None  # anything else (reset, ...) is for the gate's own retries to judge
