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

Each finished session is corrupted (markup leaked, arguments that do not parse or are off the tool's
schema: what the seeds' serving fault produced), a model mistake (a well-formed call that is not the one
asked for: another tool, another value) or clean; the two kinds are counted apart, each against its own
limits (:class:`SoakDesign`). The gate decides by Wald's sequential test (``evidence.BernoulliSPRT``), one
for each kind, fed the finished sessions in session order (not in the order they end, which would favour
the short, corrupted ones): it stops as soon as both pass or either fails, so a clean release passes after
about 65 sessions at the defaults and the seeds' PD fault (15-18 %) fails in about 20. Sessions not yet
run when it decides are not run; those under way are stopped between requests. When the budget
(``sessions``) or the deadline ends it undecided it is ``inconclusive``, saying how many more sessions
would decide. A session that cannot finish (an error that survives retries) fails the gate.

``sequential=False`` judges all ``sessions`` at once instead (the bake's tool-call probe): failed when
more than ``max_rate`` of them are corrupted (or more than ``max_mistake_rate`` mistaken). Every verdict
shows the rates with their exact 95 % intervals. A session's ``seconds`` is the time its own requests took,
not its waits for a lane.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel

from dsv4deploy.gates.chat import ChatReply, ReplyKind, post_chat, with_retries
from dsv4deploy.gates.evidence import BernoulliSPRT, Outcome, exact_interval, rate_above_p_value
from dsv4deploy.gates.http import check_url, make_client
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify
from dsv4deploy.gates.sprt_oc import joint_oc
from dsv4deploy.gates.toolcalls import (
    MISTAKE,
    SYSTEM,
    TOOLS,
    Turn,
    check_followup,
    check_tool_reply,
    classify,
    session_script,
    tool_result,
)

GATE = "soak"
SAMPLES_KEPT = 10  # corrupted replies kept verbatim in the evidence


class SoakSession(BaseModel):
    """How one conversation went."""

    session: int
    turns_done: int = 0
    tool_calls: int = 0
    requests: int = 0
    corrupted: bool = False
    mistake: bool = False  # a well-formed call that was not the one asked for (not corruption)
    error: str | None = None  # could not finish: an error that survived retries
    stopped: str | None = None  # not run to its end by design: the test had decided, or the deadline passed
    seconds: float = 0.0  # the time its requests took (waits for a free lane not counted)

    def finished(self) -> bool:
        """True when the session counts: it ended at a wrong reply or ran all its turns."""
        return self.corrupted or self.mistake or (self.error is None and self.stopped is None)


class SoakDesign(BaseModel):
    """What the soak tells apart, and at what risk: a clean release has at most ``acceptable_rate``
    corrupted sessions (``acceptable_mistake_rate`` mistaken ones), a bad one at least ``max_rate``
    (``max_mistake_rate``). ``alpha`` is the risk of refusing a clean release, both tests together: each runs
    at ``alpha / 2`` (Bonferroni), since either failing refuses it; :meth:`joint_risks` computes the exact
    joint figure, budget spent undecided included. ``beta`` is the risk of promoting a bad one."""

    acceptable_rate: float = 0.005
    max_rate: float = 0.05
    acceptable_mistake_rate: float = 0.02
    max_mistake_rate: float = 0.10
    alpha: float = 0.01
    beta: float = 0.05
    #: Transient failures retried, as a share of the requests sent, above which the gate fails.
    max_retry_share: float = 0.05

    def tests(self, budget: int) -> tuple[BernoulliSPRT, BernoulliSPRT]:
        """The two sequential tests, corruption first (ValueError naming the setting when one cannot work)."""
        try:
            return (BernoulliSPRT(self.acceptable_rate, self.max_rate, self.alpha / 2, self.beta, budget),
                    BernoulliSPRT(self.acceptable_mistake_rate, self.max_mistake_rate, self.alpha / 2, self.beta,
                                  budget))
        except ValueError as exc:
            raise ValueError(f"soak design: {exc} (soak_acceptable_rate < soak_max_corruption_rate, "
                             f"soak_acceptable_mistake_rate < soak_max_mistake_rate, soak_alpha/soak_beta)") from None


    def joint_risks(self, budget: int) -> dict[str, float]:
        """The two tests' exact joint risks at ``budget`` sessions (:func:`dsv4deploy.gates.sprt_oc.joint_oc`): a
        release at both acceptable rates refused (failed, or undecided at the budget) and one at
        ``max_rate`` corruption promoted."""
        corruption, mistakes = self.tests(budget)
        clean = joint_oc(corruption, mistakes, self.acceptable_rate, self.acceptable_mistake_rate)
        bad = joint_oc(corruption, mistakes, self.max_rate, self.acceptable_mistake_rate)
        return {"refused_when_clean": round(clean.refused(), 4), "failed_when_clean": round(clean.failed, 4),
                "inconclusive_when_clean": round(clean.inconclusive, 4), "promoted_when_bad": round(bad.passed, 4)}


def run_soak(
    url: str,
    served_model_name: str,
    *,
    sessions: int,
    turns: int,
    concurrency: int,
    max_corruption_rate: float,
    deadline_s: float,
    design: SoakDesign | None = None,
    sequential: bool = True,
    seed: int = 0,
    api_key: str | None = None,
    retries: int = 2,
    request_timeout_s: float = 120.0,
    extra_body: dict[str, Any] | None = None,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Run the sessions and judge the corruption and mistake rates; ``progress`` gets ``(sessions done, total,
    note)``. ``max_corruption_rate`` is the rate a bad release has (``design.max_rate``; the other
    figures of the design from ``design``, else its defaults); ``sessions`` the budget."""
    base = check_url(url)
    if sessions < 1 or turns < 1 or concurrency < 1 or retries < 0:
        raise ValueError(f"need sessions, turns and concurrency >= 1 (got {sessions}, {turns}, {concurrency})")
    if not 0.0 <= max_corruption_rate <= 1.0 or deadline_s <= 0:
        raise ValueError("need 0 <= max_corruption_rate <= 1 and deadline_s > 0")
    if not served_model_name:
        raise ValueError("served_model_name must be the name clients use (--served-model-name)")

    design = (design or SoakDesign()).model_copy(update={"max_rate": max_corruption_rate})
    referee = _Referee(design.tests(sessions)) if sequential else None
    watch = Stopwatch(deadline_s)
    samples: list[dict[str, Any]] = []
    lock = threading.Lock()
    done = [0]
    tries = [0, 0]  # requests sent (retries included), and of them retries of a transient failure

    def keep(state: SoakSession, reply: ChatReply, problem: str, expected: str | None) -> None:
        with lock:
            if len(samples) < SAMPLES_KEPT:
                samples.append({"what": f"session {state.session} turn {state.turns_done + 1}: {problem}",
                                "status": reply.status, "body": clip(reply.body, 2000),
                                **({"expected": expected} if expected else {})})

    def ended(state: SoakSession) -> None:
        with lock:
            if referee is not None:
                referee.ended(state)
            if state.stopped and state.requests == 0:
                return  # never started: nothing to tell
            done[0] += 1
            outcome = ("corrupted" if state.corrupted else "model mistake" if state.mistake
                       else (state.error or state.stopped or "clean"))
            notify(progress, done[0], sessions, f"session {state.session}: {outcome}")

    steps = 2 * turns  # requests per session: each turn's tool call, then the reply to the tool's result
    # The lanes are planned for the sessions a clean verdict needs (65 at the defaults), then for the rest of
    # the budget: planned for the whole budget, the lanes would run their sessions one after another and the
    # 65th to start would begin only once four rounds had ended (five session times at 16 lanes, not 4.1).
    first = min(sessions, max(t.more_to_pass() for t in (referee.corruption, referee.mistakes))) \
        if referee is not None else sessions
    talks = []
    for index in range(sessions):
        state = SoakSession(session=index)
        talks.append(_Talk(state, _conversation(state, session_script(seed, index, turns), keep),
                           steps, _planned_due(index, first, sessions, steps, concurrency)))

    with make_client(api_key, request_timeout_s) as client:

        def ask(messages: list[dict[str, Any]], max_tokens: int) -> ChatReply:
            payload = {"model": served_model_name, "messages": messages, "tools": list(TOOLS),
                       "tool_choice": "auto", "max_tokens": max_tokens, "temperature": 0, **(extra_body or {})}
            timeout = min(request_timeout_s, max(watch.remaining(), 0.2))
            reply, attempts = with_retries(lambda: post_chat(client, base, payload, timeout_s=timeout), retries,
                                           watch, sleep)
            with lock:
                tries[0] += attempts
                tries[1] += attempts - 1
            return reply

        _serve(talks, min(concurrency, sessions), ask, watch, ended, referee)

    extra = {"sessions": sessions, "turns": turns, "concurrency": concurrency, "seed": seed,
             "max_corruption_rate": max_corruption_rate, "deadline_s": deadline_s,
             "design": design.model_dump(), "sequential": sequential,
             # Transient failures retried: an intermittent PD failure a retry hides still counts here.
             "attempts": tries[0], "transport_retries": tries[1],
             "retry_share": round(tries[1] / tries[0], 4) if tries[0] else 0.0}
    results = [t.state for t in talks]
    if referee is not None:
        judged = _judge_sequential(results, referee, samples, watch, extra)
    else:
        judged = _judge_all(results, design, samples, watch, extra)
    if judged.status is not GateStatus.FAILED and tries[1] > design.max_retry_share * tries[0]:
        return _retried_result(results, samples, watch, extra, design.max_retry_share)
    return judged


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
        if classify(problem) == MISTAKE:
            state.mistake = True
            problem = f"model mistake: {problem}"
        else:
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

    def step(self, ask: Ask, watch: Stopwatch, referee: _Referee | None = None) -> bool:
        """Send the next request and check its reply: True while the session has another request to send."""
        state = self.state
        why = ("gate deadline reached" if watch.expired()
               else referee.decided_at() if referee is not None else None)
        if why:
            where = f"turn {state.turns_done + 1}: " if state.requests else ""
            state.stopped = f"{where}not run: {why}"
            return False
        if referee is not None and state.requests == 0:
            referee.started(state.session)
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
    span = _span(sessions, steps, lanes)
    first, last = index * steps, (index + 1) * steps - 1
    if first // span != last // span:
        return span
    return last + 1 - (first // span) * span


def _span(sessions: int, steps: int, lanes: int) -> int:
    """The shortest the soak's ``sessions`` can take on ``lanes`` lanes, in requests."""
    return max(steps, -(-sessions * steps // lanes))


def _planned_due(index: int, first: int, sessions: int, steps: int, lanes: int) -> int:
    """``_due`` for a soak planned in two parts: the ``first`` sessions (those a clean verdict needs) as one
    plan, the rest of the ``sessions`` as a second one after it."""
    if index < first:
        return _due(index, first, steps, lanes)
    return _span(first, steps, lanes) + _due(index - first, sessions - first, steps, lanes)


class _Referee:
    """The sequential tests, fed the finished sessions in the order they started (a session is counted once
    every session started before it has ended: the order is fixed before any outcome is known, so the short,
    corrupted sessions do not come first); says when the tests have decided."""

    def __init__(self, tests: tuple[BernoulliSPRT, BernoulliSPRT]) -> None:
        self.corruption, self.mistakes = tests
        self.lock = threading.Lock()
        self.order: list[int] = []  # sessions in the order their first request was sent
        self.ended_sessions: dict[int, SoakSession] = {}
        self.next = 0
        self.counted: list[int] = []  # the sessions the tests counted, in order
        self.decision_after: int | None = None  # sessions counted when the tests decided

    def started(self, session: int) -> None:
        """A session's first request is about to be sent."""
        with self.lock:
            self.order.append(session)

    def ended(self, state: SoakSession) -> None:
        """Take one ended session and count every session now due, until the tests decide."""
        with self.lock:
            self.ended_sessions[state.session] = state
            self._count()

    def _count(self) -> None:
        while (self.decision_after is None and self.next < len(self.order)
               and self.order[self.next] in self.ended_sessions):
            done = self.ended_sessions[self.order[self.next]]
            self.next += 1
            if not done.finished():
                continue  # an error (judged apart) or not run: no trial
            self.counted.append(done.session)
            self.corruption.observe(done.corrupted)
            self.mistakes.observe(done.mistake)
            if self.outcome() in (Outcome.PASSED, Outcome.FAILED):
                self.decision_after = len(self.counted)

    def outcome(self) -> Outcome | None:
        """Failed when either test failed, passed when both passed, else None (still undecided)."""
        states = {self.corruption.state(), self.mistakes.state()}
        if Outcome.FAILED in states:
            return Outcome.FAILED
        return Outcome.PASSED if states == {Outcome.PASSED} else None

    def decided_at(self) -> str | None:
        """Why no more requests are needed, once the tests have decided."""
        if self.decision_after is None:
            return None
        return f"the test had decided ({self.outcome()}) after {self.decision_after} sessions"


def _serve(talks: list[_Talk], lanes: int, ask: Ask, watch: Stopwatch, ended: Callable[[SoakSession], None],
           referee: _Referee | None = None) -> None:
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
                more = talks[n].step(ask, watch, referee)
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


def _common_evidence(results: list[SoakSession], samples: list[dict[str, Any]], counted: list[SoakSession],
                     extra: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The evidence every soak verdict shows, and its phrase of the counts."""
    bad = sum(s.corrupted for s in counted)
    mistakes = sum(s.mistake for s in counted)
    calls = sum(s.tool_calls for s in results)
    low, high = exact_interval(bad, len(counted))
    rate = bad / len(counted) if counted else 0.0
    evidence: dict[str, Any] = {
        **extra,
        "finished": len(counted),
        "corrupted_sessions": bad,
        "corruption_rate": round(rate, 4),
        "interval_95": [round(low, 4), round(high, 4)],
        "mistaken_sessions": mistakes,
        "mistake_rate": round(mistakes / len(counted), 4) if counted else 0.0,
        "tool_calls_checked": calls,
        "requests": sum(s.requests for s in results),
        "samples": samples,
        "session_results": [s.model_dump() for s in results],
    }
    stats = (f"{bad} of {len(counted)} sessions corrupted (rate {rate:.1%}, 95% interval "
             f"{low:.1%}-{high:.1%}), {mistakes} with a model mistake; {calls} tool calls checked")
    return evidence, stats


def _unfinished_result(results: list[SoakSession], samples: list[dict[str, Any]], watch: Stopwatch,
                       evidence: dict[str, Any], stats: str) -> GateResult | None:
    """FAILED when a session could not finish (an error that survived retries), else None."""
    unfinished = [s for s in results if s.error is not None and not s.corrupted and not s.mistake]
    if not unfinished:
        return None
    failures = list(samples) + [{"what": f"session {s.session} did not finish", "status": None, "body": s.error or ""}
                                for s in unfinished[:SAMPLES_KEPT]]
    first = unfinished[0]
    summary = (f"{len(unfinished)} of {len(results)} sessions did not finish; first: session "
               f"{first.session}: {first.error}; {stats}")
    return make_result(GATE, GateStatus.FAILED, watch, summary, {**evidence, "failures": failures})


def _retried_result(results: list[SoakSession], samples: list[dict[str, Any]], watch: Stopwatch,
                    extra: dict[str, Any], limit: float) -> GateResult:
    """FAILED: more requests needed a retry than ``limit`` of those sent (soak_max_retry_share)."""
    counted = [s for s in results if s.finished()]
    evidence, stats = _common_evidence(results, samples, counted, extra)
    summary = (f"{extra['transport_retries']} of {extra['attempts']} requests were retries of a transient failure "
               f"({extra['retry_share']:.1%}), above soak_max_retry_share {limit:g}: the path fails intermittently; "
               f"{stats}")
    return make_result(GATE, GateStatus.FAILED, watch, summary, {**evidence, "failures": list(samples)})


def _judge_sequential(results: list[SoakSession], referee: _Referee, samples: list[dict[str, Any]],
                      watch: Stopwatch, extra: dict[str, Any]) -> GateResult:
    counted = [results[n] for n in referee.counted]
    evidence, stats = _common_evidence(results, samples, counted, extra)
    failed = _unfinished_result(results, samples, watch, evidence, stats)
    if failed is not None:
        return failed
    cut = "the gate deadline passed" if watch.expired() or any(
        s.stopped and "deadline" in s.stopped for s in results) else None
    corruption = referee.corruption.decision("sessions", cut_short=cut)
    mistakes = referee.mistakes.decision("sessions", cut_short=cut)
    evidence["corruption"] = corruption.evidence()
    evidence["mistakes"] = mistakes.evidence()
    outcome = referee.outcome() or Outcome.INCONCLUSIVE
    evidence["decision"] = str(outcome)
    design = SoakDesign.model_validate(extra["design"])
    joint = design.joint_risks(extra["sessions"])
    evidence["risks_at_budget"] = joint
    risks = (f"sequential tests: a clean release (corrupted at most {design.acceptable_rate:.1%}, mistaken at most "
             f"{design.acceptable_mistake_rate:.0%}) is refused with risk {design.alpha:g}, each test at "
             f"{design.alpha / 2:g} (exact at {extra['sessions']} sessions: {joint['refused_when_clean']:.4f}, "
             f"undecided included), a bad one (at least {design.max_rate:.1%}) promoted with risk {design.beta:g}")
    if outcome is Outcome.FAILED:
        evidence["failures"] = list(samples)
        which = corruption if corruption.outcome is Outcome.FAILED else mistakes
        limit = ("soak_max_corruption_rate" if which is corruption else "soak_max_mistake_rate")
        first = samples[0]["what"] if samples else "?"
        # After sequential stopping a fixed-sample p-value is not valid and the observed rate is biased upward:
        # the statement is the sequential test's own (its bound crossed, at its risks), the rate labelled.
        summary = (f"{stats} (stopped early: the observed rate overstates the true one): "
                   f"{'corruption' if which is corruption else 'model mistakes'} above the acceptable "
                   f"rate ({limit} {design.max_rate if which is corruption else design.max_mistake_rate:g}, "
                   f"Wald's sequential test crossed its rejection bound); {risks}; first: {first}")
        return make_result(GATE, GateStatus.FAILED, watch, summary, evidence)
    if outcome is Outcome.PASSED:
        summary = (f"{stats}; passed after {len(counted)} sessions ({extra['turns']} turns each, "
                   f"{extra['concurrency']} at a time); {risks}")
        return make_result(GATE, GateStatus.PASSED, watch, summary, evidence)
    more = max(d.more_trials or 0 for d in (corruption, mistakes))
    evidence["more_sessions_to_decide"] = more
    evidence["failures"] = list(samples)
    why = cut or f"the budget of {extra['sessions']} sessions was spent"
    summary = (f"inconclusive: {stats}; undecided when {why}; at least {more} more clean sessions would decide "
               f"(soak_sessions, soak_deadline_s); {risks}")
    return make_result(GATE, GateStatus.INCONCLUSIVE, watch, summary, evidence)


def _judge_all(results: list[SoakSession], design: SoakDesign, samples: list[dict[str, Any]], watch: Stopwatch,
               extra: dict[str, Any]) -> GateResult:
    """All the sessions judged at once: failed when either rate is above its limit (the bake's probe)."""
    counted = [s for s in results if s.finished()]
    evidence, stats = _common_evidence(results, samples, counted, extra)
    failed = _unfinished_result(results, samples, watch, evidence, stats)
    if failed is not None:
        return failed
    stopped = [s for s in results if s.stopped]
    if stopped:
        evidence["failures"] = [{"what": f"session {s.session} did not finish", "status": None, "body": s.stopped}
                                for s in stopped[:SAMPLES_KEPT]]
        return make_result(GATE, GateStatus.FAILED, watch,
                           f"{len(stopped)} of {len(results)} sessions did not finish; first: session "
                           f"{stopped[0].session}: {stopped[0].stopped}; {stats}", evidence)
    n = len(counted)
    bad = evidence["corrupted_sessions"]
    mistakes = evidence["mistaken_sessions"]
    if bad > design.max_rate * n or mistakes > design.max_mistake_rate * n:
        evidence["failures"] = list(samples)
        corrupt = bad > design.max_rate * n
        limit = (f"soak_max_corruption_rate {design.max_rate:g}" if corrupt
                 else f"soak_max_mistake_rate {design.max_mistake_rate:g}")
        p = rate_above_p_value(bad if corrupt else mistakes, n,
                               design.acceptable_rate if corrupt else design.acceptable_mistake_rate)
        first = samples[0]["what"] if samples else "?"
        return make_result(GATE, GateStatus.FAILED, watch,
                           f"{stats}, above {limit} (p={p:.2g} against a clean release); first: {first}", evidence)
    summary = (f"{stats}, within soak_max_corruption_rate {design.max_rate:g} "
               f"({extra['turns']} turns each, {extra['concurrency']} at a time)")
    return make_result(GATE, GateStatus.PASSED, watch, summary, evidence)
