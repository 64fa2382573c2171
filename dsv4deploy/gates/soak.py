"""Soak gate: many multi-turn tool-calling conversations at once, every tool call checked exactly.

Some faults only show under load: in the seeds, bf16 index-K with CUDA-graph capture corrupted
15-18 % of multi-turn tool-calling sessions at high decode concurrency (arguments cut to invalid
JSON, raw tool-call markup in the text) while single requests looked fine. This gate runs
``sessions`` conversations, ``concurrency`` at a time, each of ``turns`` turns: the user asks for
one tool call with given values, the reply must be exactly that call (name, arguments as a JSON
object equal to the expected, no markup in the text), the tool answers, and the model's reply to
the result must carry no markup either. A session stops at its first corrupted reply.

The corruption rate is corrupted sessions / finished sessions with a 95 % Wilson interval; the
gate fails when the rate exceeds ``max_corruption_rate``, when a session cannot finish (an error
that survives retries), or when the deadline leaves sessions unrun.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel

from dsv4deploy.gates.chat import ChatReply, ReplyKind, post_chat, with_retries
from dsv4deploy.gates.http import check_url, make_client
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify
from dsv4deploy.gates.toolcalls import SYSTEM, TOOLS, check_followup, check_tool_reply, session_script, tool_result

GATE = "soak"
SAMPLES_KEPT = 10  # corrupted replies kept verbatim in the evidence
Z95 = 1.959964


class SoakSession(BaseModel):
    """How one conversation went."""

    session: int
    turns_done: int = 0
    tool_calls: int = 0
    requests: int = 0
    corrupted: bool = False
    error: str | None = None
    seconds: float = 0.0


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a rate ``k/n`` (``(0, 1)`` when ``n`` is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def run_soak(
    url: str,
    served_model_name: str,
    *,
    sessions: int,
    turns: int,
    concurrency: int,
    max_corruption_rate: float,
    deadline_s: float,
    seed: int = 0,
    api_key: str | None = None,
    retries: int = 2,
    request_timeout_s: float = 120.0,
    extra_body: dict[str, Any] | None = None,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Run the sessions and judge the corruption rate; ``progress`` gets ``(sessions done, total, note)``."""
    base = check_url(url)
    if sessions < 1 or turns < 1 or concurrency < 1 or retries < 0:
        raise ValueError(f"need sessions, turns and concurrency >= 1 (got {sessions}, {turns}, {concurrency})")
    if not 0.0 <= max_corruption_rate <= 1.0 or deadline_s <= 0:
        raise ValueError("need 0 <= max_corruption_rate <= 1 and deadline_s > 0")
    if not served_model_name:
        raise ValueError("served_model_name must be the name clients use (--served-model-name)")

    watch = Stopwatch(deadline_s)
    samples: list[dict[str, Any]] = []
    lock = threading.Lock()
    done = [0]

    with make_client(api_key, request_timeout_s) as client:

        def ask(messages: list[dict[str, Any]], max_tokens: int) -> ChatReply:
            payload = {"model": served_model_name, "messages": messages, "tools": list(TOOLS),
                       "tool_choice": "auto", "max_tokens": max_tokens, "temperature": 0, **(extra_body or {})}
            timeout = min(request_timeout_s, max(watch.remaining(), 0.2))
            return with_retries(lambda: post_chat(client, base, payload, timeout_s=timeout), retries, watch, sleep)[0]

        def run_one(index: int) -> SoakSession:
            result = _session(ask, index, seed, turns, watch, samples, lock)
            with lock:
                done[0] += 1
                outcome = "corrupted" if result.corrupted else (result.error or "clean")
                notify(progress, done[0], sessions, f"session {index}: {outcome}")
            return result

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(pool.map(run_one, range(sessions)))

    return _judge(results, samples, watch, {
        "sessions": sessions, "turns": turns, "concurrency": concurrency, "seed": seed,
        "max_corruption_rate": max_corruption_rate, "deadline_s": deadline_s,
    })


def _session(
    ask: Callable[[list[dict[str, Any]], int], ChatReply],
    index: int,
    seed: int,
    turns: int,
    watch: Stopwatch,
    samples: list[dict[str, Any]],
    lock: threading.Lock,
) -> SoakSession:
    state = SoakSession(session=index)
    if watch.expired():
        state.error = "not run: gate deadline reached"
        return state
    started = time.monotonic()
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]

    def send(max_tokens: int) -> ChatReply | None:
        reply = ask(messages, max_tokens)
        state.requests += 1
        if reply.kind is not ReplyKind.OK:
            body = " ".join(reply.body.split())[:300]
            state.error = f"turn {state.turns_done + 1}: {reply.error or reply.status} {body}"
            return None
        return reply

    def corrupted(reply: ChatReply, problem: str, expected: str | None) -> SoakSession:
        state.corrupted = True
        with lock:
            if len(samples) < SAMPLES_KEPT:
                samples.append({"what": f"session {index} turn {state.turns_done + 1}: {problem}",
                                "status": reply.status, "body": clip(reply.body, 2000),
                                **({"expected": expected} if expected else {})})
        return state

    for turn in session_script(seed, index, turns):
        messages.append({"role": "user", "content": turn.instruction})
        reply = send(256)
        if reply is None:
            break
        state.tool_calls += 1
        problem = check_tool_reply(reply, turn)
        if problem:
            return _timed(corrupted(reply, problem, turn.expected()), started)
        call = reply.tool_calls[0]
        messages.append({"role": "assistant", "content": reply.content or None, "tool_calls": [call]})
        messages.append(tool_result(turn, str(call.get("id") or f"call_{index}_{state.turns_done}")))
        reply = send(128)
        if reply is None:
            break
        problem = check_followup(reply)
        if problem:
            return _timed(corrupted(reply, problem, None), started)
        messages.append({"role": "assistant", "content": reply.content})
        state.turns_done += 1
    return _timed(state, started)


def _timed(state: SoakSession, started: float) -> SoakSession:
    state.seconds = round(time.monotonic() - started, 3)
    return state


def _judge(results: list[SoakSession], samples: list[dict[str, Any]], watch: Stopwatch,
           extra: dict[str, Any]) -> GateResult:
    finished = [s for s in results if s.corrupted or s.error is None]
    unfinished = [s for s in results if s.error is not None and not s.corrupted]
    bad = sum(s.corrupted for s in finished)
    calls = sum(s.tool_calls for s in results)
    rate = bad / len(finished) if finished else 0.0
    low, high = wilson_interval(bad, len(finished))
    limit = extra["max_corruption_rate"]
    evidence: dict[str, Any] = {
        **extra,
        "finished": len(finished),
        "corrupted_sessions": bad,
        "corruption_rate": round(rate, 4),
        "interval_95": [round(low, 4), round(high, 4)],
        "tool_calls_checked": calls,
        "requests": sum(s.requests for s in results),
        "samples": samples,
        "session_results": [s.model_dump() for s in results],
    }
    stats = (f"{bad} of {len(finished)} sessions corrupted (rate {rate:.1%}, 95% interval "
             f"{low:.1%}-{high:.1%}; {calls} tool calls checked)")
    failures = list(samples)
    failures += [{"what": f"session {s.session} did not finish", "status": None, "body": s.error or ""}
                 for s in unfinished[:SAMPLES_KEPT]]
    if failures:
        evidence["failures"] = failures
    if unfinished:
        first = unfinished[0]
        summary = (f"{len(unfinished)} of {len(results)} sessions did not finish; first: session "
                   f"{first.session}: {first.error}; {stats}")
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)
    if rate > limit:
        first = samples[0]["what"] if samples else "?"
        summary = f"{stats}, above soak_max_corruption_rate {limit:g}; first: {first}"
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)
    summary = (f"{stats}, within soak_max_corruption_rate {limit:g} "
               f"({extra['turns']} turns each, {extra['concurrency']} at a time)")
    return make_result(GATE, GateStatus.PASSED, watch, summary, evidence)

