"""The simulated tokenizer: one token per word (``\\w+``) and one per other non-space character.

Crude but stable, so ``usage.prompt_tokens`` is reproducible. A chat prompt is rendered with a
minimal template: each message adds two marker tokens (role start and end) before its content,
and the assistant turn to be generated adds one more.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Split text into tokens (see module docstring)."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """Number of tokens in ``text``."""
    return sum(1 for _ in _TOKEN.finditer(text))


def message_text(content: Any) -> str:
    """The text of an OpenAI message ``content`` (string or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def render_chat(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """Render chat messages to one prompt text and its token count (markers included)."""
    parts: list[str] = []
    count = 1  # the assistant turn being opened
    for msg in messages:
        text = message_text(msg.get("content"))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            text += f"\n{fn.get('name', '')}({fn.get('arguments', '')})"
        parts.append(text)
        count += 2 + count_tokens(text)
    return "\n".join(parts), count
