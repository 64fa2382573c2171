"""The simulated model's answers: instructions, needle questions and tool calls."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from . import arith
from .recall import SENTENCE, Fact, PromptKV, content_words, fact_visible, unit_hash

# A request for information that does not end in "?": "Tell me the ...", "Give the ...".
_ASKING = re.compile(r"^\s*(?:tell|give|name|recall|remind|state|quote|repeat|list)\b", re.IGNORECASE)
MIN_SHARED = 2  # content words a question must share with a fact (fewer only if it has fewer)
MIN_SHARE = 0.4  # ... and this share of the question's content words
NOT_FOUND = "I don't have any information about that in the provided context."
_SAY = re.compile(r"^\s*say\s+(.+?)[.!]?\s*$", re.IGNORECASE | re.DOTALL)


@dataclass
class Answer:
    """One generated turn: text, or tool calls (OpenAI shape), and why it stopped."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    seen: str = ""  # the fingerprint of the KV it was generated from (its logprobs follow it)


def _plausible_wrong(value: str, salt: str) -> str:
    # What a model that lost the needle sometimes says: same shape, other digits.
    digits = [c for c in value if c.isdigit()]
    if not digits:
        return ""
    shift = 1 + int(unit_hash(value, salt) * 8)
    it = iter(str((int("".join(digits)) + shift * 1111) % 10 ** len(digits)).zfill(len(digits)))
    return "".join(next(it) if c.isdigit() else c for c in value)


def question_of(text: str) -> str | None:
    """The question the text ends with (its last line, at most three sentences), if it asks one; or the line
    before, when the last only says how to answer (a question, then "End your answer with ...")."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines[-2:]):
        sentences = [m.group(0).strip() for m in SENTENCE.finditer(line) if m.group(0).strip()][-3:]
        question = " ".join(sentences)
        if "?" in question or any(_ASKING.match(s) for s in sentences):
            return question
    return None


def _best_fact(facts: list[Fact], question: str) -> Fact | None:
    """The fact sharing the most content words with the question (latest on ties), if enough."""
    asked = content_words(question)
    best, best_shared = None, 0
    for fact in facts:
        if fact.value in question:  # the question's own values are not an answer to it
            continue
        shared = len(asked & fact.words)
        if shared >= best_shared and shared >= min(MIN_SHARED, len(asked)) and shared >= MIN_SHARE * len(asked):
            best, best_shared = fact, shared
    return best if best_shared else None


def answer_question(kv: PromptKV, text: str, index_topk: int, salt: str = "", recall: float = 1.0) -> str | None:
    """Answer the question ``text`` ends with from the facts attention can see; None if it asks none.
    ``recall`` below 1 (the needle_recall fault) forgets a visible fact with probability ``1 - recall``,
    the same way for the same prompt."""
    question = question_of(text)
    if question is None:
        return None
    fact = _best_fact(kv.facts, question)
    if fact is None:
        return NOT_FOUND if "?" in question else None
    if fact_visible(kv, fact, index_topk, salt) and unit_hash(kv.digest, fact.position, "needle_recall") < recall:
        return fact.value
    wrong = _plausible_wrong(fact.value, kv.digest)
    if wrong and unit_hash(kv.digest, "hallucinate") < 0.3:
        return wrong
    return NOT_FOUND


_VALUE = r"\"([^\"]{1,80})\"|'([^']{1,80})'|(-?\d+(?:\.\d+)?)|(true|false)\b|([\w./:@-]+)"
_LINK = r"\s*(?:[:=]|\bis\b|\bof\b|\bto\b|\bas\b)?\s*"


def _mentioned_value(name: str, text: str) -> str | None:
    """The value written right after the parameter's name (``city "Oslo"``, ``days: 3``, ``guests=4``)."""
    spelled = re.escape(name).replace("_", "[_ ]")
    match = re.search(rf"\b{spelled}\b{_LINK}(?:{_VALUE})", text, re.IGNORECASE)
    if not match:
        return None
    return next(g for g in match.groups() if g is not None)


def _typed(raw: str, schema: dict[str, Any]) -> Any:
    kind = schema.get("type", "string")
    try:
        if kind == "integer":
            return int(float(raw))
        if kind == "number":
            number = float(raw)
            return int(number) if number.is_integer() and "." not in raw else number
    except ValueError:
        return raw
    if kind == "boolean":
        return raw.lower() == "true"
    return raw


def _tool_arguments(tool: dict[str, Any], text: str) -> dict[str, Any]:
    """Arguments as a model reads them off the request: each parameter's value where the text names it.

    A required parameter the text does not name takes the next unused quoted string (strings),
    number (numbers) or the schema's first enum value, as a model guessing from context would.
    """
    params = (tool.get("function") or {}).get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = params.get("required") or []
    quoted = [a or b for a, b in re.findall(r"\"([^\"]{1,80})\"|'([^']{1,80})'", text)]
    numbers = re.findall(r"(?<![\w.-])-?\d+(?:\.\d+)?(?![\w.-])", text)
    args: dict[str, Any] = {}
    for name, schema in props.items():
        schema = schema or {}
        raw = _mentioned_value(name, text)
        if raw is not None:
            args[name] = _typed(raw, schema)
            continue
        if name not in required:
            continue
        if schema.get("enum"):
            args[name] = schema["enum"][0]
        elif schema.get("type") in ("integer", "number"):
            args[name] = _typed(numbers.pop(0), schema) if numbers else 1
        elif schema.get("type") == "boolean":
            args[name] = True
        else:
            unused = [q for q in quoted if q not in args.values()]
            args[name] = unused[0] if unused else name
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


def _markup(calls: list[dict[str, Any]]) -> str:
    """DeepSeek's raw tool-call markup, as the model writes it before a parser turns it into tool_calls."""
    body = "".join(f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{c['function']['name']}\n```json\n"
                   f"{c['function']['arguments']}\n```<｜tool▁call▁end｜>" for c in calls)
    return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def raw_tool_markup(answer: Answer) -> Answer:
    """The answer a server without ``--tool-call-parser`` returns: the markup as plain text."""
    return Answer(text=answer.text + _markup(answer.tool_calls), finish_reason="stop")


def corrupt_tool_call(call: dict[str, Any], salt: str) -> Answer:
    """What the seeds' corruption looked like: broken arguments, or raw markup leaked as text."""
    fn = call["function"]
    if unit_hash(salt, "shape") < 0.5:
        cut = fn["arguments"][: max(1, len(fn["arguments"]) // 2)]  # invalid JSON
        broken = dict(call, function={"name": fn["name"], "arguments": cut})
        return Answer(tool_calls=[broken], finish_reason="tool_calls")
    return Answer(text=_markup([call])[:60], finish_reason="stop")  # the parser missed a cut-off call


def mistaken_tool_call(call: dict[str, Any]) -> Answer:
    """A model mistake, not corruption: the same tool with one value wrong but of its type (a number one
    more, a string reversed), the arguments still valid JSON of the tool's schema."""
    fn = call["function"]
    args = json.loads(fn["arguments"])
    key = next(iter(args))
    value = args[key]
    args[key] = value + 1 if isinstance(value, int) else str(value)[::-1] + "x"
    wrong = dict(call, function={"name": fn["name"], "arguments": json.dumps(args)})
    return Answer(tool_calls=[wrong], finish_reason="tool_calls")


def generate(
    kv: PromptKV,
    last_user_text: str,
    *,
    index_topk: int,
    tools: list[dict[str, Any]] | None = None,
    last_role: str = "user",
    call_id: str = "call_0",
    salt: str = "",
    wrong_share: float = 0.0,
    recall: float = 1.0,
) -> Answer:
    """The model's turn for a prompt whose KV is ``kv`` and whose last user line is given
    (``wrong_share``: the share of word problems it miscalculates, the ``wrong_answers`` fault; ``recall``: the
    chance it answers a question about the prompt from a fact it sees, the ``needle_recall`` fault)."""
    if last_role == "user":
        solved = arith.answer_text(last_user_text, wrong_share)
        if solved is not None:
            return Answer(text=solved)
    answer = answer_question(kv, last_user_text, index_topk, salt, recall)
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
