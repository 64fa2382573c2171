"""One OpenAI-style chat completion, sent and classified without ever raising for the server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx
from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_exponential, wait_random

from dsv4deploy.gates.http import describe_error
from dsv4deploy.gates.result import Stopwatch, clip

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
    tool_calls: tuple[dict[str, Any], ...] = ()  # choices[0].message.tool_calls, as sent
    finish_reason: str | None = None
    message: dict[str, Any] | None = None  # choices[0].message verbatim (OK replies only)

    def failure(self, what: str) -> dict[str, Any]:
        """This reply as an evidence ``failures`` entry (raw status and body)."""
        entry: dict[str, Any] = {"what": what, "kind": str(self.kind), "status": self.status, "body": self.body}
        if self.error:
            entry["error"] = self.error
        return entry


def is_breaker_open(status: int | None, body: str) -> bool:
    """True for the router's 503 that means its circuit breaker is open."""
    return status == 503 and any(marker in body for marker in BREAKER_MARKERS)


def is_transient(reply: ChatReply) -> bool:
    """True for outcomes a retry can fix: no status, no choices, open breaker, 429 or 5xx."""
    if reply.kind in (ReplyKind.TRANSPORT, ReplyKind.NO_CHOICES, ReplyKind.BREAKER_OPEN):
        return True
    return reply.kind is ReplyKind.HTTP_ERROR and (reply.status or 0) in {429} | set(range(500, 600))


def with_retries(
    send: Callable[[], ChatReply], retries: int, watch: Stopwatch, sleep: Callable[[float], None]
) -> tuple[ChatReply, int]:
    """Call ``send`` until a non-transient reply, ``retries`` retries, or the deadline: (last reply, attempts)."""
    attempts = [0]
    backoff = wait_exponential(multiplier=0.5, max=4.0) + wait_random(0, 0.5)

    def attempt() -> ChatReply:
        attempts[0] += 1
        return send()

    reply: ChatReply = Retrying(
        retry=retry_if_result(is_transient),
        stop=stop_after_attempt(retries + 1) | (lambda _s: watch.expired()),
        # Short, jittered back-off, never sleeping past the gate's deadline.
        wait=lambda state: min(backoff(state), watch.remaining()),
        sleep=sleep,
        retry_error_callback=lambda state: state.outcome.result(),  # type: ignore[union-attr]
    )(attempt)
    return reply, attempts[0]


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
    return post_chat(client, base_url, payload, timeout_s=timeout_s)


def post_chat(client: httpx.Client, base_url: str, payload: dict[str, Any], *, timeout_s: float) -> ChatReply:
    """POST a full chat completion body (messages, tools, ...) and classify the answer."""
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
    calls = message.get("tool_calls")
    finish = data["choices"][0].get("finish_reason") if isinstance(data["choices"][0], dict) else None
    return ChatReply(
        kind=ReplyKind.OK,
        status=status,
        body=body,
        seconds=seconds,
        content=_text(message.get("content")),
        reasoning=_text(message.get("reasoning_content")),
        prompt_tokens=tokens if isinstance(tokens, int) else None,
        tool_calls=tuple(calls) if isinstance(calls, list) else (),
        finish_reason=finish if isinstance(finish, str) else None,
        message=message,
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
