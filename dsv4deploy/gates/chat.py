"""One OpenAI-style chat completion, sent and classified without ever raising for the server."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx

from dsv4deploy.gates.http import describe_error
from dsv4deploy.gates.result import clip

CHAT_PATH = "/v1/chat/completions"

# The router answers this while its circuit breaker is open (SGLANG_CONTRACT.md, "Trap").
BREAKER_MARKERS = ("all circuits open", "No available prefill workers", "No available decode workers")


class ReplyKind(StrEnum):
    """How a chat completion attempt ended."""

    OK = "ok"  # 200 with choices[0].message
    NO_CHOICES = "no_choices"  # 200 (or other 2xx) whose body has no choices: the first-request transient
    BREAKER_OPEN = "breaker_open"  # 503 from the router's open circuit breaker
    HTTP_ERROR = "http_error"  # any other non-2xx status
    TRANSPORT = "transport"  # refused, reset, timed out: no status at all


@dataclass(frozen=True)
class ChatReply:
    """The raw outcome of one chat completion attempt."""

    kind: ReplyKind
    status: int | None
    body: str
    seconds: float
    content: str = ""
    reasoning: str = ""
    prompt_tokens: int | None = None
    error: str = ""

    def failure(self, what: str) -> dict[str, Any]:
        """This reply as an evidence ``failures`` entry (raw status and body)."""
        entry: dict[str, Any] = {"what": what, "kind": str(self.kind), "status": self.status, "body": self.body}
        if self.error:
            entry["error"] = self.error
        return entry


def is_breaker_open(status: int | None, body: str) -> bool:
    """True for the router's 503 that means its circuit breaker is open."""
    return status == 503 and any(marker in body for marker in BREAKER_MARKERS)


def chat(
    client: httpx.Client,
    base_url: str,
    model: str,
    content: str,
    *,
    max_tokens: int,
    timeout_s: float,
    extra_body: dict[str, Any] | None = None,
) -> ChatReply:
    """Send ``content`` as one user message and classify the answer; transport errors are returned."""
    payload: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **(extra_body or {}),
    }
    started = time.monotonic()
    try:
        resp = client.post(f"{base_url}{CHAT_PATH}", json=payload, timeout=max(timeout_s, 0.001))
    except httpx.HTTPError as exc:
        return ChatReply(
            kind=ReplyKind.TRANSPORT,
            status=None,
            body="",
            seconds=time.monotonic() - started,
            error=describe_error(exc),
        )
    return classify(resp.status_code, resp.text, time.monotonic() - started)


def classify(status: int, text: str, seconds: float = 0.0) -> ChatReply:
    """Turn a status and raw body into a :class:`ChatReply`."""
    body = clip(text)
    if is_breaker_open(status, text):
        return ChatReply(kind=ReplyKind.BREAKER_OPEN, status=status, body=body, seconds=seconds)
    if not 200 <= status < 300:
        return ChatReply(kind=ReplyKind.HTTP_ERROR, status=status, body=body, seconds=seconds)
    try:
        data = json.loads(text)
        message = data["choices"][0]["message"]
        if not isinstance(message, dict):
            raise TypeError("message is not an object")
    except (ValueError, KeyError, IndexError, TypeError):
        return ChatReply(
            kind=ReplyKind.NO_CHOICES,
            status=status,
            body=body,
            seconds=seconds,
            error="answer has no choices[0].message",
        )
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    tokens = usage.get("prompt_tokens")
    return ChatReply(
        kind=ReplyKind.OK,
        status=status,
        body=body,
        seconds=seconds,
        content=_text(message.get("content")),
        reasoning=_text(message.get("reasoning_content")),
        prompt_tokens=tokens if isinstance(tokens, int) else None,
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
