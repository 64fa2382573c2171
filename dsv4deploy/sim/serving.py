"""Generation requests: OpenAI chat/completions and native /generate, combined or PD."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .logprobs import kv_fingerprint, logprob_fields, output_ids
from .model import Answer, corrupt_tool_call, garble, generate, mistaken_tool_call, raw_tool_markup
from .pd import KVTransferError, fetch_kv
from .recall import PromptKV, compute_kv, truncate_distant_entries, unit_hash
from .tokenizer import count_tokens, message_text, render_chat, tokenize

if TYPE_CHECKING:
    from .server import SimServer

FULL_CORRUPTION_BATCH = 16  # concurrency at which tool_call_corruption reaches its full rate
# The seeds measured ~2 % corrupted sessions without PD against ~18 % with it: a combined server
# corrupts at this share of the fault's rate.
NON_PD_SHARE = 2 / 18


class ServingError(Exception):
    """An error answered to the client: HTTP status and sglang's message."""

    def __init__(self, status: int, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        # The error body's "type": sglang's own errors say BadRequestError; a request its pydantic
        # model refuses gets the HTTP reason phrase ("Bad Request").
        self.error_type = error_type


@dataclass
class Prompt:
    """What a request asks: the prompt text, its token count, the last turn, tools, limits."""

    text: str
    tokens: int
    last_text: str
    last_role: str
    tools: list[dict[str, Any]] | None
    max_tokens: int | None


# The roles sglang 0.5.23's chat request accepts (its pydantic model refuses any other with a 400).
CHAT_ROLES = frozenset({"system", "user", "assistant", "tool", "function", "developer", "latest_reminder", "root"})


def parse_prompt(path: str, body: dict[str, Any]) -> Prompt:
    """Read the prompt of an OpenAI chat/completion or native generate body.

    Refuses with sglang's 400s what the real server refuses: a missing or malformed ``messages`` or
    role (its request model's validation errors), a negative token budget (the sampling params).
    """
    prompt = _parse_prompt(path, body)
    if prompt.max_tokens is not None and int(prompt.max_tokens) < 0:
        raise ServingError(400, f"max_new_tokens must be at least 0, got {prompt.max_tokens}.")
    return prompt


def _validation_error(loc: tuple[Any, ...], kind: str, msg: str, given: Any) -> ServingError:
    # As sglang words a request that fails its pydantic model (the body's location, then the error).
    detail = {"type": kind, "loc": ("body", *loc), "msg": msg, "input": given}
    return ServingError(400, f"1 validation error:\n  {detail}", error_type="Bad Request")


def _parse_prompt(path: str, body: dict[str, Any]) -> Prompt:
    if path == "/v1/chat/completions":
        messages = body.get("messages")
        if messages is None:
            raise _validation_error(("messages",), "missing", "Field required", body)
        if not isinstance(messages, list):
            raise _validation_error(("messages",), "list_type", "Input should be a valid list", messages)
        if not messages:
            raise ServingError(400, "messages must be a non-empty list")
        for i, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if str(role).lower() not in CHAT_ROLES:
                raise _validation_error(("messages", i, "role"), "value_error",
                                        f"Value error, 'role' must be one of {', '.join(sorted(CHAT_ROLES))} "
                                        "(case-insensitive).", role)
        text, tokens = render_chat(messages)
        last = messages[-1]
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), last)
        role = str(last.get("role", "user"))
        last_text = message_text(last.get("content") if role == "tool" else last_user.get("content"))
        tools = body.get("tools") if body.get("tool_choice") != "none" else None
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        return Prompt(text, tokens, last_text, role, tools or None, max_tokens)
    if path == "/v1/completions":
        prompt = body.get("prompt", "")
        text = prompt[0] if isinstance(prompt, list) and prompt else prompt
        if isinstance(text, list):  # token ids
            return Prompt("", len(text), "", "user", None, body.get("max_tokens"))
        text = str(text)
        return Prompt(text, count_tokens(text), text, "user", None, body.get("max_tokens", 16))
    # /generate
    params = body.get("sampling_params") or {}
    if body.get("input_ids") is not None:
        ids = body["input_ids"]
        return Prompt("", len(ids), "", "user", None, params.get("max_new_tokens", 128))
    text = body.get("text", "")
    text = text[0] if isinstance(text, list) and text else str(text)
    return Prompt(text, count_tokens(text), text, "user", None, params.get("max_new_tokens", 128))


def _limit(answer: Answer, max_tokens: int | None) -> tuple[Answer, int]:
    """Cut the answer to ``max_tokens`` output tokens; returns it and its token count."""
    if answer.tool_calls:
        n = sum(count_tokens(c["function"]["arguments"]) + 3 for c in answer.tool_calls)
        return answer, n
    toks = tokenize(answer.text)
    if max_tokens is not None and len(toks) > int(max_tokens):
        cut, pos = int(max_tokens), 0
        for tok in toks[:cut]:
            pos = answer.text.index(tok, pos) + len(tok)
        return Answer(text=answer.text[:pos], finish_reason="length"), cut
    return answer, max(1, len(toks))


def _room(body: dict[str, Any]) -> int | None:
    room = body.get("bootstrap_room")
    if isinstance(room, list):  # batches carry one room per prompt
        room = room[0] if room else None
    return room


def run_generation(sim: SimServer, path: str, body: dict[str, Any],
                   stream: TokenStream | None = None) -> tuple[Prompt, Answer, int]:
    """Do the work of one generation; returns prompt, answer and completion token count.

    Its measured times go to the server's metrics; a ``stream`` is sent each token as it is decoded.
    """
    began = time.monotonic()
    try:
        prompt, answer, out_tokens, first, times = _generate(sim, path, body, stream)
    except ServingError:
        sim.metrics.aborted()
        raise
    ttft = (first - began) if first is not None else None
    gaps = [b - a for a, b in itertools.pairwise(times)]
    sim.metrics.request_done(prompt.tokens, out_tokens, ttft, gaps, time.monotonic() - began)
    return prompt, answer, out_tokens


def _generate(sim: SimServer, path: str, body: dict[str, Any], stream: TokenStream | None
              ) -> tuple[Prompt, Answer, int, float | None, list[float]]:
    """The generation itself; also returns when the first token came and when each decoded token did."""
    s = sim.settings
    room = _room(body)
    if s.pd and room is None and s.args.get("disaggregation_transfer_backend") != "fake":
        rid = body.get("rid") or uuid.uuid4().hex
        raise ServingError(400, "Invalid request: Disaggregated request received without "
                                f"bootstrap room id. req.rid='{rid}'")
    if sim.take_first_error():
        if s.mode == "decode":
            raise ServingError(500, str(KVTransferError(int(room or 0),
                                                        "Prefill server not fully registered yet")))
        raise ServingError(500, "Internal server error: scheduler not ready to serve requests")
    prompt = parse_prompt(path, body)
    if prompt.tokens > s.context_length:
        raise ServingError(400, f"The input ({prompt.tokens} tokens) is longer than the model's "
                                f"context length ({s.context_length} tokens).")
    salt = f"{s.index_topk}|{s.mode}|{room}"
    number = sim.take_serve_number()
    sim.use_tokens(prompt.tokens)
    try:
        return _serve(sim, prompt, salt, body, room, number, stream)
    finally:
        sim.use_tokens(-prompt.tokens)


def _serve(sim: SimServer, prompt: Prompt, salt: str, body: dict[str, Any], room: Any, number: int,
           stream: TokenStream | None) -> tuple[Prompt, Answer, int, float | None, list[float]]:
    s = sim.settings
    first: float | None = None
    times: list[float] = []
    with sim.engine.request():
        if s.mode == "decode":
            kv = _receive_kv(sim, body, int(room or 0))
        else:
            sim.engine.prefill(prompt.tokens)
            kv = compute_kv(prompt.text, prompt.tokens)
            kv.settings = s.model_affecting()
            if s.mode == "prefill":
                if sim.env.faults.pd_transfer_truncate:
                    kv = truncate_distant_entries(kv)
                sim.rooms.publish(int(room or 0), kv)
        answer = generate(kv, prompt.last_text, index_topk=s.index_topk, tools=prompt.tools,
                          last_role=prompt.last_role, call_id=f"call_{uuid.uuid4().hex[:24]}",
                          salt=salt, wrong_share=sim.env.faults.wrong_answers, recall=_recall(sim, prompt.tokens))
        mistakes = sim.env.faults.tool_call_mistakes
        if answer.tool_calls and mistakes and unit_hash(salt, uuid.uuid4().hex, "mistake") < mistakes:
            answer = mistaken_tool_call(answer.tool_calls[0])
        if s.mode == "decode":
            answer = _decode_side_effects(sim, kv, answer, room)
        elif not s.pd:  # one combined server (sglang's disaggregation_mode "null")
            answer = _corrupt_tool_calls(sim, answer, f"{room}|{uuid.uuid4().hex}", NON_PD_SHARE)
        if sim.degraded(number):
            # degrade_after: fluent but wrong from then on (the upstream "gibberish after ~100 requests").
            answer = Answer(text=garble(answer.text or "ok", f"degraded|{number}"))
        if answer.tool_calls and not s.args.get("tool_call_parser"):
            answer = raw_tool_markup(answer)  # no parser: the model's raw markup is the text
        if s.mode == "prefill":
            answer, out_tokens = _limit(answer, 1)  # prefill emits the first token only
            first = time.monotonic()
        else:
            answer, out_tokens = _limit(answer, prompt.max_tokens)
            if stream is not None:
                stream.begin(prompt, answer, out_tokens)
            sim.use_tokens(out_tokens)
            try:
                times = sim.engine.decode(out_tokens, stream.token if stream is not None else None)
            finally:
                sim.use_tokens(-out_tokens)
            first = times[0] if times else time.monotonic()
    answer.seen = kv_fingerprint(kv)
    return prompt, answer, out_tokens, first, times


def _recall(sim: SimServer, tokens: int) -> float:
    """The needle_recall fault's probability for a prompt of ``tokens`` tokens (1: off)."""
    faults = sim.env.faults
    return faults.needle_recall if tokens >= faults.needle_recall_from else 1.0


def _receive_kv(sim: SimServer, body: dict[str, Any], room: int) -> PromptKV:
    host = str(body.get("bootstrap_host") or "127.0.0.1")
    port = int(body.get("bootstrap_port") or 8998)
    timeout = min(sim.env.waiting_timeout_s, sim.env.bootstrap_timeout_s)
    began = time.monotonic()
    try:
        kv = fetch_kv(host, port, room, timeout)
    except KVTransferError as exc:
        sim.metrics.transfer_failed()
        sim.log.line(f"Decode transfer failed for request rank=0 req.rid=... "
                     f"bootstrap_room={room} with exception {exc}", "TP0")
        raise ServingError(500, str(exc)) from None
    sim.metrics.transfer_latency((time.monotonic() - began) * 1000)
    if sim.env.faults.pd_transfer_truncate:
        kv = truncate_distant_entries(kv)
    return kv


def _decode_side_effects(sim: SimServer, kv: PromptKV, answer: Answer, room: Any) -> Answer:
    """What can go wrong on a decode: settings unlike the prefill's, tool-call corruption."""
    theirs = kv.settings
    mine = sim.settings.model_affecting()
    if theirs and any(theirs.get(k) != v for k, v in mine.items()):
        return Answer(text=garble(answer.text or "x", str(room)))
    return _corrupt_tool_calls(sim, answer, str(room), 1.0)


def _corrupt_tool_calls(sim: SimServer, answer: Answer, salt: str, share: float) -> Answer:
    """The seeds' bf16 index-K corruption: needs the env switch, CUDA graphs and a busy batch."""
    rate = sim.env.faults.tool_call_corruption * share
    if answer.tool_calls and rate > 0 and sim.settings.cuda_graph and sim.env.bf16_index_k:
        effective = rate * min(1.0, sim.engine.running / FULL_CORRUPTION_BATCH)
        if unit_hash(salt, "corrupt") < effective:
            return corrupt_tool_call(answer.tool_calls[0], salt)
    return answer


def _usage(prompt: Prompt, out_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt.tokens, "total_tokens": prompt.tokens + out_tokens,
            "completion_tokens": out_tokens, "prompt_tokens_details": None}


def response_body(sim: SimServer, path: str, prompt: Prompt, answer: Answer,
                  out_tokens: int, started: float, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON sglang returns for this endpoint (``/generate`` with ``return_logprob`` adds the logprobs)."""
    rid = uuid.uuid4().hex
    created = int(time.time())
    matched = 1 if answer.finish_reason == "stop" else None
    if path == "/v1/chat/completions":
        message = {"role": "assistant", "content": answer.text or None, "reasoning_content": None,
                   "tool_calls": answer.tool_calls or None}
        return {"id": rid, "object": "chat.completion", "created": created,
                "model": sim.settings.served_name,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": answer.finish_reason, "matched_stop": matched}],
                "usage": _usage(prompt, out_tokens), "metadata": {"weight_version": "default"}}
    if path == "/v1/completions":
        return {"id": rid, "object": "text_completion", "created": created,
                "model": sim.settings.served_name,
                "choices": [{"index": 0, "text": answer.text, "logprobs": None,
                             "finish_reason": answer.finish_reason, "matched_stop": matched}],
                "usage": _usage(prompt, out_tokens), "metadata": {"weight_version": "default"}}
    finish: dict[str, Any] = ({"type": "length", "length": out_tokens}
                              if answer.finish_reason == "length" else {"type": "stop", "matched": 1})
    text = answer.text or json.dumps([c["function"] for c in answer.tool_calls])
    meta: dict[str, Any] = {"id": rid, "finish_reason": finish, "prompt_tokens": prompt.tokens,
                            "weight_version": "default", "completion_tokens": out_tokens,
                            "cached_tokens": 0, "e2e_latency": round(time.time() - started, 4)}
    body = body or {}
    if body.get("return_logprob"):
        meta.update(logprob_fields(text, out_tokens, answer.seen, int(body.get("top_logprobs_num") or 0),
                                   bool(body.get("return_text_in_logprobs"))))
    return {"text": text, "output_ids": output_ids(text, out_tokens), "meta_info": meta}


def stream_chunks(sim: SimServer, path: str, prompt: Prompt, answer: Answer, out_tokens: int,
                  body: dict[str, Any], started: float) -> list[dict[str, Any]]:
    """The SSE events (without ``[DONE]``) of a streamed answer, all at once."""
    full = response_body(sim, path, prompt, answer, out_tokens, started)
    if path == "/generate":
        return [full]
    usage = full["usage"]
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {k: full[k] for k in ("id", "created", "model")}
    if path == "/v1/chat/completions":
        msg = full["choices"][0]["message"]
        delta: dict[str, Any] = {"role": "assistant", "content": msg["content"]}
        if msg["tool_calls"]:
            delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(msg["tool_calls"])]
        obj = "chat.completion.chunk"
        first = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        last = {"index": 0, "delta": {}, "logprobs": None,
                "finish_reason": full["choices"][0]["finish_reason"]}
    else:
        obj = "text_completion"
        first = {"index": 0, "text": answer.text, "logprobs": None, "finish_reason": None}
        last = {"index": 0, "text": "", "logprobs": None,
                "finish_reason": full["choices"][0]["finish_reason"]}
    events = [dict(base, object=obj, choices=[first], usage=None),
              dict(base, object=obj, choices=[last], usage=None)]
    if include_usage:
        events.append(dict(base, object=obj, choices=[], usage=usage))
    return events


STREAMED_PATHS = ("/v1/chat/completions", "/v1/completions")


class TokenStream:
    """An SSE answer sent token by token as the engine decodes them (text answers of the OpenAI
    endpoints); tool calls and ``/generate`` are sent whole at the end, as before.

    ``start`` sends the response head, ``write`` a chunk of the body.
    """

    def __init__(self, sim: SimServer, path: str, body: dict[str, Any], started: float,
                 start: Callable[[], None], write: Callable[[bytes], None]) -> None:
        self.sim, self.path, self.body, self.started = sim, path, body, started
        self._start, self._write = start, write
        self.begun = False
        self._pieces: list[str] = []
        self._base: dict[str, Any] = {}

    def _event(self, obj: dict[str, Any]) -> None:
        self._write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def begin(self, prompt: Prompt, answer: Answer, out_tokens: int) -> None:
        """Send the head (and, on chat, the role) before the first token is decoded."""
        if self.path not in STREAMED_PATHS or answer.tool_calls:
            return
        self._pieces = _pieces(answer.text, out_tokens)
        self._base = {"id": uuid.uuid4().hex, "created": int(time.time()), "model": self.sim.settings.served_name,
                      "object": "chat.completion.chunk" if self.path == "/v1/chat/completions" else "text_completion"}
        self._start()
        self.begun = True
        if self.path == "/v1/chat/completions":
            self._event(dict(self._base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                   "logprobs": None, "finish_reason": None}], usage=None))

    def token(self, i: int) -> None:
        """Token ``i`` is decoded: send its text."""
        if not self.begun or i >= len(self._pieces):
            return
        piece = self._pieces[i]
        choice = ({"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": None}
                  if self.path == "/v1/chat/completions" else
                  {"index": 0, "text": piece, "logprobs": None, "finish_reason": None})
        self._event(dict(self._base, choices=[choice], usage=None))

    def finish(self, prompt: Prompt, answer: Answer, out_tokens: int) -> None:
        """The end of the answer: its finish reason, usage when asked, ``[DONE]``."""
        if not self.begun:
            self._start()
            for event in stream_chunks(self.sim, self.path, prompt, answer, out_tokens, self.body, self.started):
                self._event(event)
        else:
            delta_key = ("delta", {}) if self.path == "/v1/chat/completions" else ("text", "")
            self._event(dict(self._base, choices=[{"index": 0, delta_key[0]: delta_key[1], "logprobs": None,
                                                   "finish_reason": answer.finish_reason}], usage=None))
            if (self.body.get("stream_options") or {}).get("include_usage"):
                self._event(dict(self._base, choices=[], usage=_usage(prompt, out_tokens)))
        self._write(b"data: [DONE]\n\n")


def _pieces(text: str, count: int) -> list[str]:
    """`text` in `count` consecutive pieces, one per output token (the space before a token with it)."""
    pieces, pos = [], 0
    for tok in tokenize(text)[:count]:
        end = text.index(tok, pos) + len(tok)
        pieces.append(text[pos:end])
        pos = end
    if pieces:
        pieces[-1] += text[pos:]
    return pieces + [""] * (count - len(pieces))
