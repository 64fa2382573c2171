"""Tool-call conversations for the soak gate: the tools, seeded scripts, and exact checks of a reply.

Each turn asks, in plain words, for one call of one tool with given argument values; a correct
reply is exactly that call in ``choices[0].message.tool_calls`` (OpenAI shape: ``function.name``
and ``function.arguments`` as a JSON string) with no tool-call markup left in the text. The
markup markers are those of the DeepSeek family's chat templates and the common generic ones: any
of them in ``content`` means a parser let raw model output through.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from dsv4deploy.gates.chat import ChatReply

MARKUP_MARKERS = (
    "<｜tool",  # DeepSeek V3/V4: <｜tool▁calls▁begin｜>, <｜tool▁call▁begin｜>, <｜tool▁sep｜>
    "tool▁call",
    "<｜DSML｜",  # DeepSeek V3.2 / V4 DSML function calls
    "<tool_call>",
    "</tool_call>",
    "<|tool_call",
    "<function_calls>",
    "<invoke ",
)

TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather forecast for a city.",
        "parameters": {"type": "object", "required": ["city", "days"], "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "integer", "description": "Days ahead, 1 to 7"}}}}},
    {"type": "function", "function": {
        "name": "lookup_order", "description": "Status of a customer order.",
        "parameters": {"type": "object", "required": ["order_id"], "properties": {
            "order_id": {"type": "string", "description": "Order number"}}}}},
    {"type": "function", "function": {
        "name": "book_table", "description": "Reserve a restaurant table.",
        "parameters": {"type": "object", "required": ["restaurant", "guests", "time"], "properties": {
            "restaurant": {"type": "string"}, "guests": {"type": "integer"},
            "time": {"type": "string", "description": "24-hour time, HH:MM"}}}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "required": ["amount", "source", "target"], "properties": {
            "amount": {"type": "integer"}, "source": {"type": "string"}, "target": {"type": "string"}}}}},
)

SYSTEM = "You are an assistant with tools. When asked to use a tool, call it with exactly the values given."
CITIES = ("Lisbon", "Oslo", "Nairobi", "Osaka", "Quito", "Tallinn", "Perth", "Montreal", "Cusco", "Tbilisi")
RESTAURANTS = ("Blue Heron", "Casa Mila", "The Copper Pot", "Golden Lantern", "Olive Grove", "Saffron House")
CURRENCIES = ("EUR", "USD", "JPY", "GBP", "CHF", "SEK", "BRL", "INR")
PHRASINGS = (
    "Call {tool} with {args}.",
    "Please use the {tool} tool: {args}.",
    "Next, run {tool} for {args}.",
    "I need {tool} with {args}, thanks.",
    "Use {tool}; the arguments are {args}.",
)


@dataclass(frozen=True)
class Turn:
    """One user request and the one tool call that answers it exactly."""

    instruction: str
    name: str
    arguments: dict[str, Any]

    def expected(self) -> str:
        """The expected call as one line of JSON, for evidence."""
        return json.dumps({"name": self.name, "arguments": self.arguments}, sort_keys=True)


def _values(name: str, rng: random.Random) -> dict[str, Any]:
    if name == "get_weather":
        return {"city": rng.choice(CITIES), "days": rng.randint(1, 7)}
    if name == "lookup_order":
        return {"order_id": f"ORD-{rng.randrange(10000, 100000)}"}
    if name == "book_table":
        return {"restaurant": rng.choice(RESTAURANTS), "guests": rng.randint(2, 9),
                "time": f"{rng.randint(17, 22)}:{rng.choice(('00', '15', '30', '45'))}"}
    source, target = rng.sample(CURRENCIES, 2)
    return {"amount": rng.randrange(10, 5000), "source": source, "target": target}


def _args_text(arguments: dict[str, Any]) -> str:
    parts = [f'{k} "{v}"' if isinstance(v, str) else f"{k} {v}" for k, v in arguments.items()]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def session_script(seed: int, session: int, turns: int) -> list[Turn]:
    """The turns of one session, fixed by the seed and the session number."""
    rng = random.Random(f"dsv4deploy-soak:{seed}:{session}")
    script = []
    for _ in range(turns):
        name = rng.choice(TOOLS)["function"]["name"]
        arguments = _values(name, rng)
        text = rng.choice(PHRASINGS).format(tool=name, args=_args_text(arguments))
        script.append(Turn(text, name, arguments))
    return script


def leaked_markup(text: str) -> str | None:
    """The first tool-call markup marker found in ``text``, if any."""
    return next((m for m in MARKUP_MARKERS if m in text), None)


def _parsed_arguments(call: Any) -> tuple[str | None, Any]:
    """(problem, arguments) of one tool call as the OpenAI contract defines it."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return "tool call without a function object", None
    raw = fn.get("arguments")
    if not isinstance(raw, str):
        return f"function.arguments is {type(raw).__name__}, not a JSON string", None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return f"function.arguments is not valid JSON ({exc.msg} at {exc.pos})", None
    if not isinstance(value, dict):
        return "function.arguments is JSON but not an object", None
    return None, value


#: A check's finding: the reply is corrupted (the serving path broke it) or a model mistake (well formed,
#: but not what was asked). The soak counts them apart, each against its own limit.
CORRUPTED = "corrupted"
MISTAKE = "mistake"


def classify(problem: str) -> str:
    """Whether a problem :func:`check_tool_reply` found is corruption or a model mistake.

    A model mistake is a well-formed call that is not the one asked for: another tool, or arguments of
    the tool's schema (the same keys, each of its declared type) with another value. Everything else (markup
    in the text, a wrong count of calls, arguments that do not parse, keys or types off the schema) is
    corruption: what the seeds' serving fault produced."""
    return MISTAKE if problem.startswith(("wrong tool: ", "wrong value: ")) else CORRUPTED


def _well_formed(name: str, arguments: dict[str, Any]) -> bool:
    """True when ``arguments`` carry exactly the tool's declared keys, each of its declared JSON type."""
    schema = next((t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name), None)
    if schema is None or set(arguments) != set(schema["properties"]):
        return False
    kinds = {"string": str, "integer": int}
    return all(isinstance(arguments[k], kinds[p["type"]]) and not isinstance(arguments[k], bool)
               for k, p in schema["properties"].items())


def check_tool_reply(reply: ChatReply, turn: Turn) -> str | None:
    """Why ``reply`` is not exactly ``turn``'s tool call, or None when it is (:func:`classify` tells a
    model mistake from corruption)."""
    marker = leaked_markup(f"{reply.content}\n{reply.reasoning}")
    if marker:
        return f"tool-call markup {marker!r} leaked into the text"
    if len(reply.tool_calls) != 1:
        return f"expected 1 tool call, got {len(reply.tool_calls)}"
    call = reply.tool_calls[0]
    problem, arguments = _parsed_arguments(call)
    if problem:
        return problem
    name = call["function"].get("name")
    if name != turn.name:
        if isinstance(name, str) and _well_formed(name, arguments):
            return f"wrong tool: called {name!r}, expected {turn.name!r}"
        return f"called {name!r} with arguments off its schema, expected {turn.name!r}"
    if arguments != turn.arguments:
        shown = json.dumps(arguments, sort_keys=True)
        if _well_formed(name, arguments):
            return f"wrong value: arguments {shown} differ from the expected"
        return f"arguments {shown} are off the tool's schema (keys or types)"
    return None


def check_followup(reply: ChatReply) -> str | None:
    """Why the answer after a tool result is corrupted (markup in the text, broken calls), or None."""
    marker = leaked_markup(f"{reply.content}\n{reply.reasoning}")
    if marker:
        return f"tool-call markup {marker!r} leaked into the text after the tool result"
    for call in reply.tool_calls:
        problem, _ = _parsed_arguments(call)
        if problem:
            return f"after the tool result: {problem}"
    return None


def tool_result(turn: Turn, call_id: str) -> dict[str, Any]:
    """A plausible ``tool`` message answering the call of ``turn``."""
    content = {"ok": True, "tool": turn.name, "echo": turn.arguments}
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(content)}
