"""Soak gate: many multi-turn tool-calling conversations at once, every tool call checked exactly.

Some faults only show under load: in the seeds, bf16 index-K with CUDA-graph capture corrupted
15-18 % of multi-turn tool-calling sessions at high decode concurrency (arguments cut to invalid
JSON, raw tool-call markup in the text) while single requests looked fine. This gate runs
``sessions`` conversations of ``turns`` turns each: the user asks for one tool call with given
values, the reply must be exactly that call (name, arguments as a JSON object equal to the
expected, no markup in the text), the tool answers, and the model's reply to the result must carry
no markup either. A session stops at its first corrupted reply.

The load is ``concurrency`` requests in flight, never more, from the first request to nearly the
last: ``concurrency`` lanes each send one request at a time, taken from the ready requests of all
the sessions (a session's next, or a new session's first), so a lane never waits on one
conversation while another has a request to send, and the last sessions do not run alone at the
end. Each session's requests still go one after another, each with its own history. Which ready
request goes first follows a plan of equal requests cut into equal lanes (``_due``): the sessions
end one after another, as a whole session per lane did, not all together at the end.

The corruption rate is corrupted sessions / finished sessions with a 95 % Wilson interval; the
gate fails when the rate exceeds ``max_corruption_rate``, when a session cannot finish (an error
that survives retries), or when the deadline leaves sessions unrun: once it has passed no request
is sent, and a session with turns left ends "not run: gate deadline reached" (prefixed with its turn
when it had started). A session's ``seconds`` is the time its own requests took, not its waits for
a lane.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel

from dsv4deploy.gates.chat import ChatReply, ReplyKind, post_chat, with_retries
from dsv4deploy.gates.http import check_url, make_client
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify
from dsv4deploy.gates.toolcalls import (
    SYSTEM,
    TOOLS,
    Turn,
    check_followup,
    check_tool_reply,
    session_script,
    tool_result,
)

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
    seconds: float = 0.0  # the time its requests took (waits for a free lane not counted)


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

    def keep(state: SoakSession, reply: ChatReply, problem: str, expected: str | None) -> None:
        with lock:
            if len(samples) < SAMPLES_KEPT:
                samples.append({"what": f"session {state.session} turn {state.turns_done + 1}: {problem}",
                                "status": reply.status, "body": clip(reply.body, 2000),
                                **({"expected": expected} if expected else {})})

    def ended(state: SoakSession) -> None:
        with lock:
            done[0] += 1
            outcome = "corrupted" if state.corrupted else (state.error or "clean")
            notify(progress, done[0], sessions, f"session {state.session}: {outcome}")

    steps = 2 * turns  # requests per session: each turn's tool call, then the reply to the tool's result
    talks = []
    for index in range(sessions):
        state = SoakSession(session=index)
        talks.append(_Talk(state, _conversation(state, session_script(seed, index, turns), keep),
                           steps, _due(index, sessions, steps, concurrency)))

    with make_client(api_key, request_timeout_s) as client:

        def ask(messages: list[dict[str, Any]], max_tokens: int) -> ChatReply:
            payload = {"model": served_model_name, "messages": messages, "tools": list(TOOLS),
                       "tool_choice": "auto", "max_tokens": max_tokens, "temperature": 0, **(extra_body or {})}
            timeout = min(request_timeout_s, max(watch.remaining(), 0.2))
            return with_retries(lambda: post_chat(client, base, payload, timeout_s=timeout), retries, watch, sleep)[0]

        _serve(talks, min(concurrency, sessions), ask, watch, ended)

    return _judge([t.state for t in talks], samples, watch, {
        "sessions": sessions, "turns": turns, "concurrency": concurrency, "seed": seed,
        "max_corruption_rate": max_corruption_rate, "deadline_s": deadline_s,
    })


Request = tuple[list[dict[str, Any]], int]  # (the conversation so far, max_tokens)
Ask = Callable[[list[dict[str, Any]], int], ChatReply]


def _conversation(
    state: SoakSession,
    script: list[Turn],
    keep: Callable[[SoakSession, ChatReply, str, str | None], None],
) -> Generator[Request, ChatReply, None]:
    """One session's requests, in order, each sent with the session's own history: yields a request, is sent
    its reply, checks it; ends at the last turn, at the first corrupted reply or at an error."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]

    def failed(reply: ChatReply) -> bool:
        if reply.kind is ReplyKind.OK:
            return False
        body = " ".join(reply.body.split())[:300]
        state.error = f"turn {state.turns_done + 1}: {reply.error or reply.status} {body}"
        return True

    def corrupted(reply: ChatReply, problem: str, expected: str | None) -> None:
        state.corrupted = True
        keep(state, reply, problem, expected)

    for turn in script:
        messages.append({"role": "user", "content": turn.instruction})
        reply = yield messages, 256
        if failed(reply):
            return
        state.tool_calls += 1
        problem = check_tool_reply(reply, turn)
        if problem:
            return corrupted(reply, problem, turn.expected())
        call = reply.tool_calls[0]
        messages.append({"role": "assistant", "content": reply.content or None, "tool_calls": [call]})
        messages.append(tool_result(turn, str(call.get("id") or f"call_{state.session}_{state.turns_done}")))
        reply = yield messages, 128
        if failed(reply):
            return
        problem = check_followup(reply)
        if problem:
            return corrupted(reply, problem, None)
        messages.append({"role": "assistant", "content": reply.content})
        state.turns_done += 1


class _Talk:
    """A session under way: its record, its conversation, its next request and how many requests it has left."""

    def __init__(self, state: SoakSession, steps: Generator[Request, ChatReply, None], total: int,
                 due: int) -> None:
        self.state = state
        self.steps = steps
        self.request: Request = next(steps)  # every session has a first turn
        self.left = total
        self.due = due
        self.spent = 0.0

    def key(self) -> tuple[int, int]:
        """Its place in the queue: the latest step its next request can start and the session still end
        by its due step (earliest first), then the session's number."""
        return self.due - self.left, self.state.session

    def step(self, ask: Ask, watch: Stopwatch) -> bool:
        """Send the next request and check its reply: True while the session has another request to send."""
        state = self.state
        if watch.expired():
            where = f"turn {state.turns_done + 1}: " if state.requests else ""
            state.error = f"{where}not run: gate deadline reached"
            return False
        began = time.monotonic()
        reply = ask(*self.request)
        self.spent += time.monotonic() - began
        state.seconds = round(self.spent, 3)
        state.requests += 1
        self.left -= 1
        try:
            self.request = self.steps.send(reply)
        except StopIteration:
            return False
        return True


def _due(index: int, sessions: int, steps: int, lanes: int) -> int:
    """The request step by which session ``index`` ends in the shortest plan for equal requests: the sessions
    laid end to end and cut into ``lanes`` equal lanes (McNaughton's wrap-around). A session cut at a lane's
    end runs its first part at the next lane's start and its last part at the end: it ends last."""
    span = max(steps, -(-sessions * steps // lanes))  # the shortest the soak can take, in requests
    first, last = index * steps, (index + 1) * steps - 1
    if first // span != last // span:
        return span
    return last + 1 - (first // span) * span


def _serve(talks: list[_Talk], lanes: int, ask: Ask, watch: Stopwatch, ended: Callable[[SoakSession], None]) -> None:
    """Serve every session's requests on ``lanes`` lanes, one request in flight per lane, until every session
    has ended. A lane takes the ready request (a session's next, or a new session's first) that is furthest
    behind its plan (``_Talk.key``): the sessions keep the lanes busy to the end, and still end one after
    another rather than all at once."""
    ready = [(t.key(), n) for n, t in enumerate(talks)]
    heapq.heapify(ready)
    cond = threading.Condition()
    held = [0]  # sessions a lane is serving now
    broken: list[BaseException] = []

    def lane() -> None:
        while True:
            with cond:
                while not ready and held[0] and not broken:
                    cond.wait()
                if not ready or broken:
                    return
                _, n = heapq.heappop(ready)
                held[0] += 1
            more = False
            try:
                more = talks[n].step(ask, watch)
            except BaseException as exc:  # stop the other lanes too, then raise it from the gate
                with cond:
                    broken.append(exc)
                raise
            finally:
                with cond:
                    held[0] -= 1
                    if more:
                        heapq.heappush(ready, (talks[n].key(), n))
                    cond.notify_all()
            if not more:
                ended(talks[n].state)

    with ThreadPoolExecutor(max_workers=lanes) as pool:
        for future in [pool.submit(lane) for _ in range(lanes)]:
            future.result()


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

