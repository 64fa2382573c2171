"""HTTP plumbing shared by the gates: clients with the Bearer key, URL checks, error text."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

DEFAULT_TIMEOUT_S = 10.0


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
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # No environment proxies: the gates talk to hosts the controller reaches directly.
    return httpx.Client(headers=headers, timeout=timeout_s, trust_env=False)


def describe_error(exc: BaseException) -> str:
    """One line for a transport error (refused, timed out, reset), with its type."""
    text = str(exc) or exc.__class__.__doc__ or ""
    return f"{exc.__class__.__name__}: {text.strip().splitlines()[0] if text.strip() else ''}".rstrip(": ")
