"""The simulated model's answers: instructions, needle questions and tool calls."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .recall import PromptKV, fact_visible, normalize_key, unit_hash

_QUESTION = re.compile(r"What is the ([^?\n]{1,200})\?", re.IGNORECASE)
_SAY = re.compile(r"^\s*say\s+(.+?)[.!]?\s*$", re.IGNORECASE | re.DOTALL)


@dataclass
class Answer:
    """One generated turn: text, or tool calls (OpenAI shape), and why it stopped."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"


def _plausible_wrong(value: str, salt: str) -> str:
    # What a model that lost the needle sometimes says: same shape, other digits.
    digits = [c for c in value if c.isdigit()]
    if not digits:
        return ""
    shift = 1 + int(unit_hash(value, salt) * 8)
    it = iter(str((int("".join(digits)) + shift * 1111) % 10 ** len(digits)).zfill(len(digits)))
    return "".join(next(it) if c.isdigit() else c for c in value)


def answer_question(kv: PromptKV, question: str, index_topk: int, salt: str = "") -> str | None:
    """Answer ``What is the <key>?`` from the facts the attention can see; None if no question."""
    matches = list(_QUESTION.finditer(question))
    if not matches:
        return None
    match = matches[-1]  # the last question asked
    key = normalize_key(match.group(1))
    for fact in reversed(kv.facts):
        if fact.key != key:
            continue
        if fact_visible(kv, fact, index_topk, salt):
            return fact.value
        wrong = _plausible_wrong(fact.value, kv.digest)
        if wrong and unit_hash(kv.digest, "hallucinate") < 0.3:
            return wrong
        break
    return f"I don't have any information about the {key} in the provided context."


def _tool_arguments(tool: dict[str, Any], text: str) -> dict[str, Any]:
    params = (tool.get("function") or {}).get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    quoted = re.findall(r"\"([^\"]{1,80})\"|'([^']{1,80})'", text)
    words = re.findall(r"[A-Za-z0-9_./-]{3,}", text)
    args: dict[str, Any] = {}
    for i, (name, schema) in enumerate(props.items()):
        if name not in (params.get("required") or list(props)):
            continue
        kind = (schema or {}).get("type", "string")
        if kind in ("integer", "number"):
            args[name] = 1 + i
        elif kind == "boolean":
            args[name] = True
        elif (schema or {}).get("enum"):
            args[name] = schema["enum"][0]
        elif quoted:
            args[name] = next(q for q in quoted[min(i, len(quoted) - 1)] if q)
        else:
            args[name] = words[-1 - i] if len(words) > i else name
    return args


def tool_call(tools: list[dict[str, Any]], text: str, call_id: str) -> dict[str, Any]:
    """A well-formed OpenAI tool call to the tool the text names (else the first tool)."""
    chosen = tools[0]
    for tool in tools:
        name = (tool.get("function") or {}).get("name", "")
        if name and name.lower() in text.lower():
            chosen = tool
            break
    name = (chosen.get("function") or {}).get("name", "tool")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(_tool_arguments(chosen, text))},
    }


def corrupt_tool_call(call: dict[str, Any], salt: str) -> Answer:
    """What the seeds' corruption looked like: broken arguments, or raw markup leaked as text."""
    fn = call["function"]
    if unit_hash(salt, "shape") < 0.5:
        cut = fn["arguments"][: max(1, len(fn["arguments"]) // 2)]  # invalid JSON
        broken = dict(call, function={"name": fn["name"], "arguments": cut})
        return Answer(tool_calls=[broken], finish_reason="tool_calls")
    leaked = f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{fn['name']}<｜tool▁sep｜>{fn['arguments'][:7]}"
    return Answer(text=leaked, finish_reason="stop")


def generate(
    kv: PromptKV,
    last_user_text: str,
    *,
    index_topk: int,
    tools: list[dict[str, Any]] | None = None,
    last_role: str = "user",
    call_id: str = "call_0",
    salt: str = "",
) -> Answer:
    """The model's turn for a prompt whose KV is ``kv`` and whose last user line is given."""
    answer = answer_question(kv, last_user_text, index_topk, salt)
    if answer is not None:
        return Answer(text=answer)
    if tools and last_role == "user":
        return Answer(tool_calls=[tool_call(tools, last_user_text, call_id)],
                      finish_reason="tool_calls")
    if last_role == "tool":
        return Answer(text="Done. The tool returned: " + last_user_text.strip()[:200])
    say = _SAY.match(last_user_text)
    if say:
        return Answer(text=say.group(1).strip())
    return Answer(text=f"I read {kv.token_count} tokens. How can I help?")


def garble(text: str, salt: str) -> str:
    """Output of a decode whose settings disagree with its prefill: fluent-looking garbage."""
    words = ["the", "of", "cache", "page", "token", "layer", "and", "to", "index", "block"]
    n = max(6, len(text.split()) * 2)
    return " ".join(words[int(unit_hash(salt, i) * len(words))] for i in range(n))
