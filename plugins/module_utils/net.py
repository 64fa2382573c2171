"""What a host asks of its own servers: is an address this host's, and what a URL answers (standard library only)."""

from __future__ import annotations

import errno
import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

from ansible_collections.dsv4.deploy.plugins.module_utils.text import BODY_LIMIT, clip

# No environment proxies: the addresses asked are this host's own.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def not_here(url: str) -> str:
    """Why `url`'s address is not one of this host's own, or ''."""
    address = urlsplit(url).hostname or ""
    try:
        infos = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"{address} does not resolve on this host ({exc.strerror})"
    family, sockaddr = infos[0][0], infos[0][4]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((sockaddr[0], 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"{address} is not an address of this host, so no server here can listen on it"
    return ""


def local_url(url: str) -> str:
    """`url` as this host asks it: as given when its address is this host's own, else at 127.0.0.1 (a
    server listening on every address, reached from elsewhere at an address this host may not have)."""
    if not not_here(url):
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"127.0.0.1:{parts.port}"))


def get(url: str, key: str | None, timeout: float, limit: int = BODY_LIMIT) -> dict:
    """One GET: {status, body, error}; status None when no HTTP answer came."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return {"status": resp.status, "body": clip(resp.read().decode(errors="replace"), limit), "error": ""}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "body": clip(exc.read().decode(errors="replace"), limit), "error": ""}
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"status": None, "body": "", "error": f"{reason.__class__.__name__}: {reason}"}


def healthy(url: str, timeout: float = 2) -> bool:
    """Whether the server at `url` answers GET /health with 200."""
    return get(f"{url}/health", None, timeout, limit=0)["status"] == 200
