"""Soak gate: tool-calling sessions against a stub model that calls tools its own way, sometimes badly."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time

import pytest

from dsv4deploy.gates import GateStatus, run_soak
from dsv4deploy.gates.chat import classify
from dsv4deploy.gates.toolcalls import CORRUPTED, MISTAKE, check_followup, check_tool_reply, session_script
from dsv4deploy.gates.toolcalls import classify as kind_of

from .stubs import Request

CHAT = "POST /v1/chat/completions"
PAIR = re.compile(r"\b([a-z_]+)\s+(?:\"([^\"]*)\"|(\d+))")


def sleeps(_seconds: float) -> None:
    pass


def reply(message: dict, finish: str = "stop") -> tuple[int, dict]:
    body = {"id": "x", "object": "chat.completion", "usage": {"prompt_tokens": 50},
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}]}
    return 200, body


def good_call(request: Request) -> dict:
    """What a well-behaved model does: the tool named in the last user turn, with its name/value pairs."""
    text = next(m["content"] for m in reversed(request.body["messages"]) if m["role"] == "user")
    names = {t["function"]["name"] for t in request.body["tools"]}
    tool = next(n for n in names if n in text)
    props = next(t for t in request.body["tools"] if t["function"]["name"] == tool)["function"]["parameters"]
    args = {k: (s if s else int(n)) for k, s, n in PAIR.findall(text) if k in props["properties"]}
    return {"content": None, "tool_calls": [{"id": f"call_{request.n}", "type": "function",
                                             "function": {"name": tool, "arguments": json.dumps(args)}}]}


def model(corrupt=lambda call, request: None):
    """A stub model: after a tool result it answers in words; otherwise it calls the tool, maybe corrupted."""

    def route(request: Request):
        if request.body["messages"][-1]["role"] == "tool":
            return reply({"content": "Here is what the tool said."})
        call = good_call(request)
        bad = corrupt(call, request)
        return reply(bad if bad is not None else call, "tool_calls")

    return route


def soak(server, **kw):
    """All the sessions judged at once (the bake's probe); the sequential tests below say sequential=True."""
    args = {"sessions": 12, "turns": 3, "concurrency": 4, "max_corruption_rate": 0.02, "deadline_s": 30,
            "sleep": sleeps, "sequential": False} | kw
    return run_soak(server.url, "dsv4", **args)


def test_clean_sessions_pass_with_every_call_checked_and_progress(stub):
    server = stub({CHAT: model()})
    progress = []
    result = soak(server, progress=lambda done, total, note: progress.append((done, total)))
    assert result.status is GateStatus.PASSED, result.summary
    ev = result.evidence
    assert (ev["corrupted_sessions"], ev["tool_calls_checked"], ev["requests"]) == (0, 36, 72)
    assert result.summary.startswith("0 of 12 sessions corrupted (rate 0.0%, 95% interval 0.0%-26.5%)")
    assert sorted(progress) == [(i, 12) for i in range(1, 13)]
    assert server.max_in_flight <= 4 and server.count(CHAT) == 72


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda c: c | {"tool_calls": [{**c["tool_calls"][0], "function": {
            "name": c["tool_calls"][0]["function"]["name"],
            "arguments": json.loads(c["tool_calls"][0]["function"]["arguments"])}}]},
         "function.arguments is dict, not a JSON string"),
        (lambda c: c | {"tool_calls": [{**c["tool_calls"][0], "function": {
            "name": c["tool_calls"][0]["function"]["name"],
            "arguments": c["tool_calls"][0]["function"]["arguments"] + "}}"}}]},
         "function.arguments is not valid JSON"),
        (lambda c: c | {"content": "<tool_call>{\"name\": \"x\"}</tool_call>"}, "tool-call markup '<tool_call>'"),
        (lambda c: {"content": "Sure, calling it now.", "tool_calls": None}, "expected 1 tool call, got 0"),
        (lambda c: c | {"tool_calls": c["tool_calls"] * 2}, "expected 1 tool call, got 2"),
        (lambda c: c | {"tool_calls": [{**c["tool_calls"][0], "function": {
            "name": "get_wether", "arguments": c["tool_calls"][0]["function"]["arguments"]}}]}, "called 'get_wether'"),
    ],
)
def test_each_kind_of_corruption_is_caught_and_kept_verbatim(stub, damage, problem):
    server = stub({CHAT: model(lambda call, request: damage(call))})
    result = soak(server, sessions=3, turns=2)
    assert result.status is GateStatus.FAILED
    assert result.evidence["corrupted_sessions"] == 3
    sample = result.evidence["failures"][0]
    assert problem in sample["what"] and sample["status"] == 200
    assert json.loads(sample["body"])["choices"][0]["message"]  # the raw body, as the server sent it
    assert result.evidence["requests"] == 3  # a session stops at its first corrupted reply


def _call(name: str, arguments: dict) -> object:
    body = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}}]}
    return classify(200, json.dumps(body))


def test_values_typed_differently_are_corruption_not_a_mistake():
    turn = next(t for t in session_script(3, 0, 20) if any(isinstance(v, int) for v in t.arguments.values()))
    stringly = {k: str(v) for k, v in turn.arguments.items()}
    problem = check_tool_reply(_call(turn.name, stringly), turn)
    assert "off the tool's schema" in problem and kind_of(problem) == CORRUPTED


def test_a_well_formed_call_with_another_value_or_tool_is_a_model_mistake():
    turn = next(t for t in session_script(3, 0, 20) if t.name == "get_weather")
    other = {**turn.arguments, "days": turn.arguments["days"] % 7 + 1}
    problem = check_tool_reply(_call(turn.name, other), turn)
    assert problem.startswith("wrong value: ") and kind_of(problem) == MISTAKE
    wrong_tool = check_tool_reply(_call("lookup_order", {"order_id": "ORD-12345"}), turn)
    assert wrong_tool.startswith("wrong tool: called 'lookup_order'") and kind_of(wrong_tool) == MISTAKE
    garbled = check_tool_reply(_call("get_wether", turn.arguments), turn)
    assert kind_of(garbled) == CORRUPTED


def test_markup_after_the_tool_result_is_corruption():
    dsml = {"choices": [{"message": {"content": "Done.<｜DSML｜function_calls><｜DSML｜invoke name=\"x\">"}}]}
    assert "leaked into the text after the tool result" in check_followup(classify(200, json.dumps(dsml)))
    clean = {"choices": [{"message": {"content": "The order ships on Monday."}}]}
    assert check_followup(classify(200, json.dumps(clean))) is None


def test_rate_above_the_limit_fails_and_below_passes(stub):
    lock, count = threading.Lock(), [0]

    def every_fourth_session(call, request):
        if len(request.body["messages"]) != 2:  # only the first call of a session
            return None
        with lock:
            count[0] += 1
            hit = count[0] % 4 == 0
        return {"content": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"} if hit else None

    server = stub({CHAT: model(every_fourth_session)})
    failed = soak(server, sessions=20)
    assert failed.status is GateStatus.FAILED
    assert failed.evidence["corrupted_sessions"] == 5 and failed.evidence["corruption_rate"] == 0.25
    assert "above soak_max_corruption_rate 0.02" in failed.summary
    count[0] = 0
    assert soak(server, sessions=20, max_corruption_rate=0.3).status is GateStatus.PASSED


def test_sessions_that_cannot_finish_fail_the_gate(stub):
    server = stub({CHAT: lambda r: (500, {"object": "error", "message": "scheduler crashed"})})
    result = soak(server, sessions=2, retries=1)
    assert result.status is GateStatus.FAILED
    assert result.summary.startswith("2 of 2 sessions did not finish; first: session 0: turn 1: 500")
    assert "scheduler crashed" in result.evidence["failures"][0]["body"]


def test_sessions_are_the_same_for_the_same_seed():
    assert session_script(1, 4, 3) == session_script(1, 4, 3)
    assert session_script(1, 4, 3) != session_script(2, 4, 3)


class EveryLaneBusy:
    """A stub model that answers a round of requests only once every lane is busy: ``lanes`` requests in
    flight, or all the sessions that have not ended yet. Counts the rounds; keeps each session's requests."""

    def __init__(self, sessions: int, turns: int, lanes: int, seed: int = 0, wait_s: float = 20) -> None:
        self.wait_s = wait_s  # how long a round waits for idle lanes before it is answered short
        self.first = {session_script(seed, i, turns)[0].instruction: i for i in range(sessions)}
        self.last_length = 4 * turns  # messages in a session's last request
        self.lanes, self.open = lanes, sessions
        self.cond = threading.Condition()
        self.waiting = self.ending = self.rounds = self.short_rounds = 0
        self.seen: dict[int, list[list[dict]]] = {i: [] for i in range(sessions)}
        self.started: dict[int, int] = {}  # session -> the round of its first request
        self.in_flight = self.max_in_flight = 0
        self.answer = model()

    def __call__(self, request: Request):
        messages = request.body["messages"]
        session = self.first[messages[1]["content"]]
        with self.cond:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.seen[session].append(messages)
            self.started.setdefault(session, self.rounds + 1)
            self.waiting += 1
            self.ending += len(messages) == self.last_length
            this_round = self.rounds
            if self.waiting >= min(self.lanes, self.open):
                self._release()
            elif not self.cond.wait_for(lambda: self.rounds != this_round, timeout=self.wait_s):
                self.short_rounds += 1  # a lane stayed idle while a session had work left
                self._release()
            self.in_flight -= 1
        return self.answer(request)

    def _release(self) -> None:
        self.rounds += 1
        self.open -= self.ending
        self.waiting = self.ending = 0
        self.cond.notify_all()


@pytest.mark.parametrize(("sessions", "turns", "lanes", "rounds"), [(5, 2, 4, 6), (9, 2, 4, 10), (3, 3, 8, 6)])
def test_requests_keep_every_lane_busy_to_the_end_in_each_sessions_order(stub, sessions, turns, lanes, rounds):
    # A whole session per lane ran 5 sessions of 4 requests on 4 lanes in 8 rounds (4, then 1 session alone
    # for 4 more); request by request it takes 5 (6 with the lanes' races).
    model = EveryLaneBusy(sessions, turns, lanes)
    server = stub({CHAT: model})
    ended = []
    result = soak(server, sessions=sessions, turns=turns, concurrency=lanes,
                  progress=lambda done, total, note: ended.append(model.rounds))
    assert result.status is GateStatus.PASSED, result.summary
    assert model.max_in_flight == min(lanes, sessions) and server.max_in_flight <= lanes
    assert model.short_rounds == 0  # never a lane idle while a session had a request to send
    assert model.rounds <= rounds
    if sessions >= 2 * lanes:  # sessions end along the way, not all at the end
        assert min(ended) < max(model.started.values())
    for i, requests in model.seen.items():
        script = session_script(0, i, turns)
        assert len(requests) == 2 * turns
        for before, after in itertools.pairwise(requests):
            assert after[:len(before)] == before  # each request carries the session's own history
        users = [m["content"] for m in requests[-1] if m["role"] == "user"]
        assert users == [t.instruction for t in script]  # its turns in the script's order
    records = result.evidence["session_results"]
    assert [r["session"] for r in records] == list(range(sessions))
    assert all(r["turns_done"] == turns and r["requests"] == 2 * turns for r in records)


def test_the_deadline_stops_sessions_between_requests_and_counts_the_unrun(stub):
    # One lane; the first request meets a 503 and the back-off before its retry outlasts the deadline.
    def busy_once(request: Request):
        return (503, {"object": "error", "message": "busy"}) if request.n == 0 else model()(request)

    server = stub({CHAT: busy_once})
    result = soak(server, sessions=5, turns=2, concurrency=1, deadline_s=1.0, sleep=lambda _s: time.sleep(1.2))
    assert result.status is GateStatus.FAILED
    # Session 0's retry was answered, its next request never sent; the others never started.
    assert result.summary.startswith("5 of 5 sessions did not finish; first: session 0: turn 1: not run: gate "
                                     "deadline reached; 0 of 0 sessions corrupted")
    records = result.evidence["session_results"]
    assert [(r["requests"], r["tool_calls"]) for r in records] == [(1, 1)] + [(0, 0)] * 4
    assert [r["stopped"] for r in records[1:]] == ["not run: gate deadline reached"] * 4
    assert server.count(CHAT) == 2


# The sequential decision (the soak gate's own): Wald's test at the soak's design.

def sequential(server, **kw):
    args = {"sessions": 300, "turns": 1, "concurrency": 4, "max_corruption_rate": 0.05, "deadline_s": 60,
            "sleep": sleeps} | kw
    return run_soak(server.url, "dsv4", **args)


def test_a_clean_release_passes_as_soon_as_the_test_decides_and_runs_no_more(stub):
    server = stub({CHAT: model()})
    result = sequential(server)
    assert result.status is GateStatus.PASSED, result.summary
    ev = result.evidence
    # 65 clean sessions reach the pass bound at 0.5 % vs 5 %, alpha .01 split over the two tests, beta .05; the
    # lanes had a few under way
    assert ev["finished"] == 65 and ev["corruption"]["outcome"] == "passed"
    assert ev["corruption"]["risks"] == {"acceptable_rate": 0.005, "refused_rate": 0.05, "alpha": 0.005,
                                         "beta": 0.05, "budget": 300}
    # The joint risk, exact at this budget: 300 sessions leave 1.1 % refused (undecided counted), above the 1 %
    assert ev["risks_at_budget"]["refused_when_clean"] == pytest.approx(0.0111, abs=1e-4)
    assert server.count(CHAT) <= 2 * (65 + 4)
    assert "passed after 65 sessions" in result.summary and "refused with risk 0.01" in result.summary
    stopped = [r for r in ev["session_results"] if r["stopped"]]
    assert stopped and all("the test had decided (passed) after 65 sessions" in r["stopped"] for r in stopped)


def test_a_clean_verdict_takes_the_rounds_its_sessions_need_not_whole_sessions_per_lane(stub):
    # 65 clean sessions of 8 requests on 16 lanes need 33 rounds of requests. Lanes planned for the whole
    # budget (300) ran their sessions one after another: the 65th to start began in round 33, ended in 40.
    lanes, turns = 16, 4
    model = EveryLaneBusy(300, turns, lanes, wait_s=0.5)  # after the decision the last round is short
    server = stub({CHAT: model})
    clean_at: list[int] = []
    result = sequential(server, turns=turns, concurrency=lanes,
                        progress=lambda done, total, note: clean_at.append(model.rounds) if note.endswith("clean")
                        else None)
    assert result.status is GateStatus.PASSED, result.summary
    assert result.evidence["finished"] == 65
    assert max(clean_at) <= 35, (max(clean_at), model.rounds)
    assert model.max_in_flight == lanes


def test_the_seeds_corruption_rate_fails_within_a_few_sessions(stub):
    lock, count = threading.Lock(), [0]

    def every_third(call, request):
        with lock:
            count[0] += 1
            hit = count[0] % 3 == 0
        return {"content": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"} if hit else None

    server = stub({CHAT: model(every_third)})
    result = sequential(server)
    assert result.status is GateStatus.FAILED, result.summary
    assert result.evidence["finished"] <= 10 and result.evidence["corrupted_sessions"] >= 2
    assert "corruption above the acceptable rate (soak_max_corruption_rate 0.05" in result.summary
    assert "p_value" not in result.evidence["corruption"]
    assert "reached the rejection bound" in result.evidence["corruption"]["statement"]
    # no fixed-sample p-value after sequential stopping: the test's own statement, and the rate labelled
    assert "p=" not in result.summary and "crossed its rejection bound" in result.summary
    assert "stopped early: the observed rate overstates the true one" in result.summary


def test_model_mistakes_are_counted_apart_with_their_own_limit(stub):
    def wrong_days(call, request):
        if request.body["messages"][-1]["content"].find("get_weather") < 0:
            return None
        fn = call["tool_calls"][0]["function"]
        args = json.loads(fn["arguments"])
        args["days"] = args["days"] % 7 + 1
        return call | {"tool_calls": [{**call["tool_calls"][0], "function": {**fn, "arguments": json.dumps(args)}}]}

    server = stub({CHAT: model(wrong_days)})
    result = sequential(server)
    ev = result.evidence
    assert result.status is GateStatus.FAILED, result.summary
    assert ev["corrupted_sessions"] == 0 and ev["mistaken_sessions"] > 0
    assert "model mistakes above the acceptable rate (soak_max_mistake_rate 0.1" in result.summary
    assert ev["samples"][0]["what"].endswith(ev["samples"][0]["what"].split(": ", 1)[1])
    assert "model mistake: wrong value" in ev["samples"][0]["what"]


def test_a_budget_spent_undecided_is_inconclusive_and_says_how_many_more_would_decide(stub):
    server = stub({CHAT: model()})
    result = sequential(server, sessions=30)
    assert result.status is GateStatus.INCONCLUSIVE, result.summary
    assert result.evidence["more_sessions_to_decide"] == 35  # 65 clean sessions decide; 30 were run
    assert "undecided when the budget of 30 sessions was spent; at least 35 more clean sessions" in result.summary


def test_a_deadline_before_the_decision_is_inconclusive(stub):
    answer = model()

    def slow(request: Request):
        time.sleep(0.05)  # 0.1 s a session on one lane: about 10 sessions by the deadline, 65 needed
        return answer(request)

    server = stub({CHAT: slow})
    result = sequential(server, concurrency=1, deadline_s=1.0)
    assert result.status is GateStatus.INCONCLUSIVE, result.summary
    assert "undecided when the gate deadline passed" in result.summary
    assert result.evidence["more_sessions_to_decide"] == 65 - result.evidence["finished"] > 0


def test_a_design_that_cannot_work_names_its_settings(stub):
    server = stub({CHAT: model()})
    with pytest.raises(ValueError, match="soak_acceptable_rate < soak_max_corruption_rate"):
        sequential(server, max_corruption_rate=0.001)


def test_retries_above_their_share_fail_the_soak_and_a_few_are_counted(stub):
    answer = model()
    lock, seen = threading.Lock(), set()

    def flaky(request: Request):
        # every request's first try meets a transient 503: its retry answers, as an intermittent PD path would
        key = json.dumps(request.body["messages"], sort_keys=True)
        with lock:
            first = key not in seen
            seen.add(key)
        return (503, {"object": "error", "message": "busy"}) if first else answer(request)

    result = soak(stub({CHAT: flaky}))
    assert result.status is GateStatus.FAILED, result.summary
    assert "above soak_max_retry_share 0.05: the path fails intermittently" in result.summary
    assert result.evidence["transport_retries"] > 0.05 * result.evidence["attempts"]

    def once(request: Request):
        return (503, {"object": "error", "message": "busy"}) if request.n == 0 else answer(request)

    fine = soak(stub({CHAT: once}))
    assert fine.status is GateStatus.PASSED, fine.summary
    assert (fine.evidence["transport_retries"], fine.evidence["attempts"]) == (1, 73)
