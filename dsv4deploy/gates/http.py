"""HTTP plumbing shared by the gates: clients with the Bearer key, URL checks, error text."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import httpx

DEFAULT_TIMEOUT_S = 10.0
# A bearer token inside an error's text (httpx quotes an illegal header value whole).
_BEARER = re.compile(r"(Bearer\s+)\S+", re.IGNORECASE)


def check_url(url: str, what: str = "url") -> str:
    """Return ``url`` without a trailing slash; raise ValueError unless it is an http(s) URL."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"{what} must be a non-empty http(s) URL, got {url!r}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{what} must be an http(s) URL such as http://127.0.0.1:30000, got {url!r}")
    return url.rstrip("/")


def make_client(api_key: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> httpx.Client:
    """An httpx client that sends ``Authorization: Bearer <api_key>`` when a key is given.

    With ``--api-key`` sglang leaves only /health, /ready and /metrics open, so every other call
    needs the key; sending it to the open paths too is harmless.
    """
    headers = auth_headers(api_key)
    # No environment proxies: the gates talk to hosts the controller reaches directly.
    return httpx.Client(headers=headers, timeout=timeout_s, trust_env=False)


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The Authorization header for `api_key` ({} without one). ValueError, never quoting the key, when it holds
    a character a header cannot carry: httpx would put the whole value into its error."""
    if not api_key:
        return {}
    if any(not 0x21 <= ord(c) <= 0x7E for c in api_key):
        raise ValueError("the API key holds a space, a line break or a control or non-ASCII character, which an "
                         "HTTP header cannot carry; fix: put the key alone on one line of its file (or vault "
                         "variable)")
    return {"Authorization": f"Bearer {api_key}"}


def describe_error(exc: BaseException) -> str:
    """One line for a transport error (refused, timed out, reset), with its type."""
    text = _BEARER.sub(r"\1***", str(exc) or exc.__class__.__doc__ or "")
    return f"{exc.__class__.__name__}: {text.strip().splitlines()[0] if text.strip() else ''}".rstrip(": ")
