"""Smoke gate: one real chat completion (``Say OK``) through the router or combined server.

What smoke demands of any model: a 200 whose ``choices[0].message.content`` is non-empty and whose
``finish_reason`` is set (the request went through the whole pipeline and ended). That the answer
says OK is a separate expectation, ``expect_ok``: kept for a model that follows instructions (the
DeepSeek profile), off for one that cannot (a generic or randomly initialised model), so smoke is
honest for any model instead of failing a working pipeline on the content of its answer.

Right after readiness, a PD pipeline can still fail: the first requests may come back without
``choices`` (prefill bootstrap registration race), and the router's circuit breaker, once open,
answers 503 ``No available prefill workers (all circuits open or unhealthy)`` for its whole window
while ``/readiness`` still says ready. The gate therefore retries inside a deadline and keeps the
raw status and body of every failed try.

Why the retries are spaced the way they are (sglang-router 0.3.2 defaults): the router retries a
failing request up to 5 times across the workers and counts each failure; with
``--cb-failure-threshold 10`` two failing client requests open the breaker for
``--cb-timeout-duration-secs 60``. So:

* ordinary failures back off exponentially (1, 2, 4, 8, 16 s, with jitter): the warm-up transient
  clears within seconds, and a fast retry loop would be exactly the "two failed requests" that open
  the breaker;
* after a breaker 503 the gate waits one full breaker window (plus jitter) instead of polling: tries
  while it is open never reach a worker and only add 503s, and the first try after the window is the
  half-open probe, which re-opens the breaker for another window if it fails, so it should be sent
  once, as late as the warm-up allows. Pass the router's real ``cb_timeout`` as
  ``breaker_cooldown_s``; rendering the router with a sane breaker remains the better fix.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_result, wait_exponential, wait_random

from dsv4deploy.gates.chat import ChatReply, ReplyKind, chat
from dsv4deploy.gates.http import check_url, make_client
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, make_result, notify

GATE = "smoke"
PROMPT = "Say OK"
# "OK", "Ok.", "okay": a word, not letters inside another word ("look", "token").
GOOD_ANSWER = re.compile(r"\bok(ay)?\b", re.IGNORECASE)
# Statuses no retry can fix: wrong key, forbidden, wrong path or model name.
DEFINITIVE_STATUSES = frozenset({401, 403, 404})
KEEP_FIRST, KEEP_LAST = 10, 40  # failed tries kept in evidence: the start and the end of a long wait


@dataclass(frozen=True)
class _Try:
    number: int
    at_s: float
    reply: ChatReply
    verdict: str  # "pass", "retry" or "final"
    reason: str


def run_smoke(
    url: str,
    served_model_name: str,
    deadline_s: float,
    *,
    api_key: str | None = None,
    max_tokens: int = 16,
    initial_backoff_s: float = 1.0,
    max_backoff_s: float = 16.0,
    breaker_cooldown_s: float = 60.0,
    request_timeout_s: float = 60.0,
    expect_ok: bool = True,
    extra_body: dict[str, Any] | None = None,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Ask ``Say OK`` until a good answer, a definitive failure, or the deadline.

    Passes when ``choices[0].message.content`` is non-empty and ``finish_reason`` is set, and, with
    ``expect_ok`` (the default), the content contains OK. ``url`` is the router
    (PD) or the combined server. ``extra_body`` is merged into the request (e.g. chat template
    kwargs). ``progress`` gets ``(try number, 0, note)`` after each failed try; ``sleep`` is
    injectable so tests need not wait.
    """
    base = check_url(url)
    if not served_model_name:
        raise ValueError("served_model_name must be the name clients use (--served-model-name)")
    if deadline_s <= 0 or max_tokens <= 0 or request_timeout_s <= 0:
        raise ValueError("deadline_s, max_tokens and request_timeout_s must be positive")
    if initial_backoff_s < 0 or max_backoff_s < initial_backoff_s or breaker_cooldown_s < 0:
        raise ValueError("need 0 <= initial_backoff_s <= max_backoff_s and breaker_cooldown_s >= 0")

    watch = Stopwatch(deadline_s)
    reserve_s = min(5.0, deadline_s / 10)  # time kept for one last try instead of sleeping to the end
    tries: list[_Try] = []
    waits: list[float] = []
    # Exponential from initial_backoff_s, capped, plus jitter so several controllers do not retry in step.
    base_wait = wait_exponential(multiplier=initial_backoff_s, max=max_backoff_s) + wait_random(0, initial_backoff_s)

    def wait(state: RetryCallState) -> float:
        last: _Try = state.outcome.result()  # type: ignore[union-attr]
        if last.reply.kind is ReplyKind.BREAKER_OPEN:
            wanted = breaker_cooldown_s + random.uniform(0, 1)
        else:
            wanted = base_wait(state)
        chosen = round(max(0.0, min(wanted, watch.remaining() - reserve_s)), 3)
        waits.append(chosen)
        notify(progress, last.number, 0, f"try {last.number}: {last.reason}; next in {chosen:.1f} s")
        return chosen

    with make_client(api_key, request_timeout_s) as client:

        def attempt() -> _Try:
            at_s = round(watch.elapsed(), 3)
            reply = chat(
                client,
                base,
                served_model_name,
                PROMPT,
                max_tokens=max_tokens,
                timeout_s=min(request_timeout_s, max(watch.remaining(), 0.2)),
                extra_body=extra_body,
            )
            verdict, reason = _judge(reply, expect_ok)
            result = _Try(len(tries) + 1, at_s, reply, verdict, reason)
            tries.append(result)
            return result

        last: _Try = Retrying(
            retry=retry_if_result(lambda t: t.verdict == "retry"),
            stop=lambda _state: watch.remaining() <= reserve_s,
            wait=wait,
            sleep=sleep,
            retry_error_callback=lambda state: state.outcome.result(),  # type: ignore[union-attr]
        )(attempt)

    evidence = _evidence(tries, waits, served_model_name, deadline_s, breaker_cooldown_s, expect_ok)
    n = len(tries)
    if last.verdict == "pass":
        summary = f"answer {last.reply.content.strip()!r} after {n} tr{'y' if n == 1 else 'ies'}"
        if not expect_ok:
            summary += f" (finish_reason {last.reply.finish_reason}; content not checked: smoke_expect_ok is off)"
        return make_result(GATE, GateStatus.PASSED, watch, summary, evidence)
    ending = "gave up" if last.verdict == "final" else f"deadline {deadline_s:g} s reached"
    summary = f"no good answer after {n} tr{'y' if n == 1 else 'ies'} ({ending}); last: {last.reason}"
    return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)


def _judge(reply: ChatReply, expect_ok: bool = True) -> tuple[str, str]:
    """``(verdict, reason)`` for one reply: pass, retry, or a final failure no retry can fix."""
    body = " ".join(reply.body.split())[:200]
    match reply.kind:
        case ReplyKind.OK if reply.content.strip() and not reply.finish_reason:
            # A completion that never ended is not a served request (a cut stream, a broken proxy).
            return "final", f"answer {reply.content.strip()[:100]!r} has no finish_reason"
        case ReplyKind.OK if reply.content.strip() and (not expect_ok or GOOD_ANSWER.search(reply.content)):
            return "pass", "ok"
        case ReplyKind.OK if reply.content.strip():
            # A wrong but well-formed answer is not a transient: retrying until a lucky one passes
            # would hide a garbling pipeline.
            return "final", f"answer {reply.content.strip()[:100]!r} does not contain OK"
        case ReplyKind.OK if reply.reasoning.strip():
            return "final", (
                "empty content: reasoning used up max_tokens (raise max_tokens or disable thinking); "
                f"reasoning {reply.reasoning.strip()[:80]!r}"
            )
        case ReplyKind.OK:
            return "retry", f"{reply.status} with empty content: {body}"
        case ReplyKind.TRANSPORT:
            return "retry", reply.error
        case ReplyKind.HTTP_ERROR if reply.status in DEFINITIVE_STATUSES:
            return "final", f"{reply.status} {body}"
        case ReplyKind.BREAKER_OPEN:
            return "retry", f"{reply.status} router circuit breaker open: {body}"
        case _:
            return "retry", f"{reply.status} {body}"


def _evidence(
    tries: list[_Try], waits: list[float], model: str, deadline_s: float, cooldown_s: float, expect_ok: bool
) -> dict[str, Any]:
    failed = [t for t in tries if t.verdict != "pass"]
    kept = failed if len(failed) <= KEEP_FIRST + KEEP_LAST else failed[:KEEP_FIRST] + failed[-KEEP_LAST:]
    last = tries[-1]
    evidence: dict[str, Any] = {
        "model": model,
        "prompt": PROMPT,
        "expect_ok": expect_ok,
        "deadline_s": deadline_s,
        "breaker_cooldown_s": cooldown_s,
        "tries": len(tries),
        "waits_s": waits,
        "content": last.reply.content,
        "failures": [{**t.reply.failure(f"try {t.number} at {t.at_s:.1f} s"), "reason": t.reason} for t in kept],
    }
    if len(kept) < len(failed):
        evidence["failures_omitted"] = len(failed) - len(kept)
    if last.reply.reasoning:
        evidence["reasoning"] = last.reply.reasoning[:500]
    return evidence
