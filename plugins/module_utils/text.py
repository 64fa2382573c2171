"""Text that leaves a host: clipped bodies, log tails, and API keys redacted (standard library only)."""

from __future__ import annotations

import json
import re
from typing import Any

# What a gate keeps of a body, as the controller's gates do (dsv4deploy.gates.result.BODY_LIMIT).
BODY_LIMIT = 4000

_QUOTED = r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'"""
# A secret's value: Rust's Some("...") (smg logs its args with Debug), a quoted string (commas and all),
# or a bare word up to white space or a quote.
_VALUE = rf"""Some\(\s*(?:{_QUOTED})\s*\)|{_QUOTED}|[^\s'"]+"""
_SECRETS = (
    # api_key=..., "api_key": ..., api-key: ..., x-api-key: ... (ServerArgs' repr, JSON, headers, env).
    re.compile(rf"""(?P<head>api[_-]?key['"]?\s*[:=]\s*)(?P<value>{_VALUE})""", re.IGNORECASE),
    # The argv: --api-key VALUE, --api-key=VALUE, and Python's list repr '--api-key', 'VALUE'.
    re.compile(rf"""(?P<head>--api-key(?:['"]?,\s*|[ =]))(?P<value>{_VALUE})""", re.IGNORECASE),
    # Authorization: Bearer TOKEN (a header logged whole).
    re.compile(r"""(?P<head>\bBearer\s+)(?P<value>[^\s'"]+)""", re.IGNORECASE),
)
# Keys of a JSON body whose values are secrets (sglang's server_info: api_key, admin_api_key). Narrow on
# purpose: server_info is full of *_tokens settings the config gate compares.
SECRET_KEYS = re.compile(r"api[_-]?key|secret|password|authorization|(?:^|_)(?:hf|access|auth)_token$", re.IGNORECASE)


def _mask(match: re.Match) -> str:
    value = match.group("value")
    if value.startswith("Some("):
        quote = value[value.index("(") + 1:].lstrip()[0]
        return f"{match.group('head')}Some({quote}***{quote})"
    if value[0] in "'\"":
        return f"{match.group('head')}{value[0]}***{value[0]}"
    return f"{match.group('head')}***"


def redact(text: str) -> str:
    """`text` with API key values (and bearer tokens) replaced by ***."""
    for pattern in _SECRETS:
        text = pattern.sub(_mask, text)
    return text


def redact_json(data: Any) -> Any:
    """`data` (parsed JSON) with the values of secret-named keys replaced by '***' (None and '' kept)."""
    if isinstance(data, dict):
        return {k: ("***" if SECRET_KEYS.search(str(k)) and v not in (None, "") else redact_json(v))
                for k, v in data.items()}
    if isinstance(data, list):
        return [redact_json(v) for v in data]
    return data


def redact_body(body: str) -> str:
    """An HTTP body with its secrets masked: a JSON body key by key (it stays JSON), any other as text."""
    try:
        data = json.loads(body)
    except ValueError:
        return redact(body)
    return json.dumps(redact_json(data))


def clip(text: str, limit: int = BODY_LIMIT) -> str:
    """`text` cut to `limit` characters, saying how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more characters]"


def tail(text: str, lines: int = 12, width: int = 300) -> str:
    """The last lines of a log, each cut to `width` (sglang's server_args line is kilobytes long)."""
    return "\n".join(line if len(line) <= width else line[:width] + "..." for line in text.splitlines()[-lines:])
