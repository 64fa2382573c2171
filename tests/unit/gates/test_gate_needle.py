"""Needle gate and haystacks: a stub model whose recall follows a simple, known rule."""

from __future__ import annotations

import hashlib
import re
import threading
import time

import pytest

from dsv4deploy.gates import GateStatus, build_haystack, run_needle
from dsv4deploy.gates.recall_rule import RecallRule

from .stubs import NO_IDEA, VALUE, Request, model

CHAT = "POST /v1/chat/completions"
# One trial per cell, its first (the cell's own depth, unjittered): the grid's mechanics without the rule.
ONE = RecallRule(trials=1, min_recalled=1)


def sleeps(_seconds: float) -> None:
    pass


def test_required_cells_recall_and_the_curve_shows_the_rest(stub):
    server = stub({CHAT: model(full_recall_tokens=1500, window_tokens=300)})
    result = run_needle(
        server.url,
        "dsv4",
        context_lengths=[500, 1000, 1200, 2000, 4000],
        depths=[0, 0.5, 1],
        required_tokens=1200,
        deadline_s=30,
        rule=ONE,
    )
    assert result.status is GateStatus.PASSED, result.summary
    assert re.fullmatch(r"all [89] cells within 1200 tokens recalled \([89]/[89] trials\), and a cell of at least 1200 "
                        r"at every depth, by rule 1 of 1 trials \(.*\); curve beyond: 2000: 33%, 4000: 33%",
                        result.summary), result.summary
    curve = {p["context_tokens"]: p["fraction"] for p in result.evidence["curve"]}
    assert curve == {500: 1.0, 1000: 1.0, 1200: 1.0, 2000: 0.3333, 4000: 0.3333}
    cells = result.evidence["cells"]
    assert len(cells) == 15 and result.evidence["first_failing"] is None
    deep_long = next(c for c in cells if c["context_tokens"] == 4000 and c["depth"] == 0)
    assert deep_long["recalled"] is False and deep_long["answer"] == NO_IDEA and deep_long["required"] is False
    near_end = next(c for c in cells if c["context_tokens"] == 4000 and c["depth"] == 1)
    assert near_end["recalled"] is True and near_end["answer"] == near_end["code"]
    assert all(abs(c["prompt_tokens"] - c["context_tokens"]) <= 0.02 * c["context_tokens"] for c in cells)


def test_a_miss_within_the_required_length_fails_with_the_first_failing_cell(stub):
    server = stub({CHAT: model(full_recall_tokens=700, window_tokens=100)})
    # 950-token targets land within 2% (931-969 real tokens), so always within the 1000 required; 1200
    # reaches past it. (A 1000-token target may measure 1006, depending on which cells taught the sizing
    # first, and would then count for the curve only.)
    result = run_needle(
        server.url, "dsv4", context_lengths=[500, 950, 1200], depths=[0, 0.5, 1], required_tokens=1000,
        deadline_s=30,
        rule=ONE,
    )
    assert result.status is GateStatus.FAILED
    first = result.evidence["first_failing"]
    assert (first["context_tokens"], first["depth"], first["recalled"]) == (950, 0.0, False)
    assert result.summary.startswith("2 of 6 cells within 1000 tokens missed the needle; first: 950 tokens (")
    assert f"at depth 0, expected {first['code']}, 0/1 recalled (95% interval 0%-98%), e.g. answer {NO_IDEA!r}" in \
        result.summary
    assert [f["body"] for f in result.evidence["failures"]] == [NO_IDEA, NO_IDEA]
    # the report shows how each missed cell was asked
    assert all(f"asked: {c['phrasing']}" in f["what"] for f, c in zip(result.evidence["failures"], [
        first, next(c for c in result.evidence["cells"] if c["context_tokens"] == 950 and c["depth"] == 0.5)],
        strict=True))


def test_cells_are_resized_by_the_servers_own_count(stub):
    server = stub({CHAT: model(chars_per_token=2.0)})  # the guess is 4 chars per token: 2x too few tokens
    grid = {"context_lengths": [1000, 2000], "depths": [0.5], "required_tokens": 2000, "deadline_s": 30, "rule": ONE}
    guessed = run_needle(server.url, "dsv4", calibrate=False, **grid)
    calibrated = run_needle(server.url, "dsv4", **grid)
    first = guessed.evidence["cells"][0]["trials"][0]
    assert first["sizes"][0] == pytest.approx(2000, rel=0.1) and len(first["sizes"]) >= 2  # measured, then resized
    for result in (guessed, calibrated):
        assert result.status is GateStatus.PASSED, result.summary
        assert all(c["sized"] for c in result.evidence["cells"])
        assert [c["prompt_tokens"] for c in result.evidence["cells"]] == pytest.approx([1000, 2000], rel=0.02)
    assert calibrated.evidence["calibration"]["ok"] is True
    assert [len(c["trials"][0]["sizes"]) for c in calibrated.evidence["cells"]] == [1, 1]
    assert calibrated.evidence["chars_per_token_used"] == pytest.approx(2.0, rel=0.05)


def test_a_server_that_reports_no_size_fails_calibration_without_a_fallback(stub):
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}}]}
    server = stub({CHAT: lambda r: (200, body)})
    result = run_needle(server.url, "dsv4", context_lengths=[1000], depths=[0.5], required_tokens=1000, deadline_s=30,
                        rule=ONE)
    assert result.status is GateStatus.FAILED
    assert result.summary == "cannot measure the server's token count: the answer has no usage.prompt_tokens"
    assert server.count(CHAT) == 1
    uncalibrated = run_needle(server.url, "dsv4", context_lengths=[1000], depths=[0.5], required_tokens=1000,
                              deadline_s=30, calibrate=False, rule=ONE)
    assert uncalibrated.status is GateStatus.FAILED
    assert "no usage.prompt_tokens" in uncalibrated.evidence["cells"][0]["error"]


def test_a_grid_that_cannot_reach_the_requirement_fails_naming_it_without_asking(stub):
    server = stub({CHAT: model()})
    result = run_needle(server.url, "dsv4", context_lengths=[1000, 2000, 4000], depths=[0.5], required_tokens=5500,
                        deadline_s=30)
    assert result.status is GateStatus.FAILED
    assert result.summary.startswith("needle_lengths [1000, 2000, 4000] cannot reach the required 5500 tokens")
    assert server.count(CHAT) == 0


def test_the_required_length_must_itself_recall_at_every_depth(stub):
    # Sees everything up to 5000 tokens, then only the last 1000: a needle of 5.5K at depth 0.9 is
    # found, at 0.1 it is lost. The old rule dropped a 5500 cell that measured 5510 and passed.
    server = stub({CHAT: model(full_recall_tokens=5000, window_tokens=1000)})
    result = run_needle(server.url, "dsv4", context_lengths=[1000, 2000, 5500], depths=[0.1, 0.9],
                        required_tokens=5500, deadline_s=30, rule=ONE)
    assert result.status is GateStatus.FAILED
    assert result.evidence["unproven_depths"] == [0.1] or result.evidence["first_failing"]["depth"] == 0.1
    lenient = run_needle(server.url, "dsv4", context_lengths=[1000, 2000, 5500], depths=[0.9],
                         required_tokens=5500, deadline_s=30, rule=ONE)
    assert lenient.status is GateStatus.PASSED, lenient.summary


def test_a_long_cell_that_misses_cannot_hide_above_the_requirement(stub):
    # A cell that lands a little above the required length still has to recall it.
    server = stub({CHAT: model(full_recall_tokens=5400)})
    result = run_needle(server.url, "dsv4", context_lengths=[2000, 5600], depths=[0.5], required_tokens=5500,
                        deadline_s=30, size_tolerance=0.03, rule=ONE)
    assert result.status is GateStatus.FAILED
    assert result.summary.startswith("no cell of at least 5500 tokens (within 3%) recalled at depth 0.5")


def test_transient_errors_are_retried_per_cell_within_the_concurrency_bound(stub):
    answered = model()
    seen_codes: set[str] = set()
    lock = threading.Lock()

    def flaky(request: Request):
        code = VALUE.search(request.body["messages"][-1]["content"].rpartition("\n")[0]).group(0)
        time.sleep(0.02)  # overlap the requests so the bound is exercised
        with lock:
            first = code not in seen_codes
            seen_codes.add(code)
        return (503, "Service Unavailable: warming up") if first else answered(request)

    server = stub({CHAT: flaky})
    progress = []
    result = run_needle(
        server.url,
        "dsv4",
        context_lengths=[300, 600],
        depths=[0, 0.25, 0.75, 1],
        required_tokens=600,
        deadline_s=30,
        concurrency=3,
        calibrate=False,
        chars_per_token=3.0,
        size_tolerance=0.05,
        sleep=sleeps,
        progress=lambda done, total, note: progress.append((done, total)),
        rule=ONE,
        max_retry_share=1.0,  # every request is retried once here; the share's own limit is tested below
    )
    assert result.status is GateStatus.PASSED, result.summary
    assert [c["attempts"] for c in result.evidence["cells"]] == [2] * 8
    assert server.max_in_flight <= 3
    assert progress == [(i, 8) for i in range(1, 9)]


def test_client_errors_beyond_the_requirement_are_reported_not_failed(stub):
    ok = model()

    def too_long(request: Request):
        if len(request.body["messages"][-1]["content"]) > 6000:
            return 400, {"object": "error", "message": "Input is longer than the model's context length"}
        return ok(request)

    server = stub({CHAT: too_long})
    result = run_needle(
        server.url,
        "dsv4",
        context_lengths=[1000, 1500, 4000],
        depths=[0.5],
        required_tokens=1500,
        deadline_s=30,
        calibrate=False,
        chars_per_token=3.0,
        rule=ONE,
    )
    assert result.status is GateStatus.PASSED, result.summary
    long_cell = result.evidence["cells"][2]
    assert long_cell["attempts"] == 1 and long_cell["status"] == 400
    assert "longer than the model's context length" in long_cell["error"]
    assert result.evidence["curve"][2]["errors"] == 1


def test_deadline_leaves_cells_undecided_and_the_gate_inconclusive_never_passed(stub):
    slow = model()
    server = stub({CHAT: lambda r: (time.sleep(0.2), slow(r))[1]})
    result = run_needle(
        server.url,
        "dsv4",
        context_lengths=[200, 400, 800],
        depths=[0, 1],
        required_tokens=800,
        deadline_s=0.5,
        concurrency=1,
        calibrate=False,
        rule=ONE,
    )
    assert result.status is GateStatus.INCONCLUSIVE, result.summary
    not_run = [c for c in result.evidence["cells"] if c["error"] == "not decided: gate deadline reached"]
    assert not_run and all(c["outcome"] == "inconclusive" and not c["recalled"] for c in not_run)
    assert server.count(CHAT) < 6
    assert "required cells undecided when the deadline came" in result.summary


def test_haystack_plants_the_fact_at_its_depth_and_asks_last():
    start, middle, end = (build_haystack(4000, d, seed=7) for d in (0.0, 0.5, 1.0))
    for hay in (start, middle, end):
        assert hay.content.count(hay.fact) == 1 and hay.value in hay.fact and hay.value not in hay.question
        assert hay.content.endswith(f"\n\n{hay.question}")
        assert hay.content.index(hay.fact) == hay.needle_offset
        assert len(hay.content) == pytest.approx(16000, rel=0.01)
    assert start.needle_offset == 0
    assert 0.45 < middle.needle_offset / len(middle.content) < 0.55
    assert end.needle_offset > 0.97 * len(end.content)


def test_phrasings_vary_over_a_grid_and_repeat_for_the_same_seed():
    hays = [build_haystack(n, d, seed=3) for n in (1000, 2000, 4000, 5500, 8000) for d in (0.1, 0.3, 0.5, 0.7, 0.9)]
    facts = {h.fact.replace(h.key, "K").replace(h.value, "V") for h in hays}
    questions = {h.question.replace(h.key, "K") for h in hays}
    kinds = {"code" if re.fullmatch(r"[A-Z]+-\d{4}-[A-Z]+", h.value) else "number" if h.value.isdigit() else "name"
             for h in hays}
    assert len(facts) >= 5 and len(questions) >= 5 and kinds == {"code", "number", "name"}
    assert [build_haystack(n, 0.5, seed=3).phrasing for n in (1000, 2000)] == [hays[2].phrasing, hays[7].phrasing]


def test_codes_are_deterministic_by_seed_and_differ_per_cell():
    assert build_haystack(1000, 0.5, seed=1) == build_haystack(1000, 0.5, seed=1)
    codes = {build_haystack(n, d, seed=1).code for n in (1000, 2000) for d in (0.0, 0.5, 1.0)}
    assert len(codes) == 6
    assert build_haystack(1000, 0.5, seed=2).code != build_haystack(1000, 0.5, seed=1).code


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_lengths": []}, "context_lengths"),
        ({"depths": [1.5]}, "depths must be fractions"),
        ({"concurrency": 0}, "concurrency >= 1"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    args = {"context_lengths": [1000], "depths": [0.5], "required_tokens": 1000, "deadline_s": 10} | kwargs
    with pytest.raises(ValueError, match=message):
        run_needle("http://127.0.0.1:1", "dsv4", **args)


def forgetful(recall: float):
    """The stub model, answering a needle with probability ``recall`` (drawn from the needle's value)."""
    sees = model()

    def route(request: Request):
        status, body = sees(request)
        code = VALUE.search(request.body["messages"][-1]["content"].rpartition("\n")[0]).group(0)
        if int(hashlib.sha256(code.encode()).hexdigest()[:8], 16) / 16**8 >= recall:
            body["choices"][0]["message"]["content"] = NO_IDEA
        return status, body

    return route


def test_each_trial_is_its_own_needle_and_a_clean_cell_stops_at_its_verdict(stub):
    server = stub({CHAT: model()})
    result = run_needle(server.url, "dsv4", context_lengths=[300, 600], depths=[0.5], required_tokens=600,
                        deadline_s=30, calibrate=False, chars_per_token=3.0, size_tolerance=0.05)
    assert result.status is GateStatus.PASSED, result.summary
    assert ("by rule 4 recalled with no miss, 9 with 1, 12 with 2, 14 with 3, or 15 of 19 trials (a 90%-recall "
            "cell passes with 0.976, a 50% one with 0.073)") in result.summary
    for cell in result.evidence["cells"]:
        trials = cell["trials"]
        assert (cell["outcome"], cell["recalled_trials"], cell["asked_trials"]) == ("recalled", 4, 4)
        assert len({t["code"] for t in trials}) == 4 and len({t["phrasing"] for t in trials}) > 2
        assert trials[0]["depth"] == 0.5 and all(abs(t["depth"] - 0.5) <= 0.05 for t in trials)
        assert len({t["depth"] for t in trials}) > 2  # jittered
        assert cell["interval"] == pytest.approx([0.3976, 1.0], abs=1e-4)
    assert server.count(CHAT) == 8
    assert result.evidence["rule"]["required_cells"] == 2 and result.evidence["required_trials"] == 8
    decision = result.evidence["decision"]  # the requirement's evidence: trials, interval, the rule's risks
    assert (decision["outcome"], decision["events"], decision["trials"]) == ("passed", 8, 8)
    assert decision["interval_95"] == [0.6306, 1.0] and decision["risks"]["beta"] == 0.0727


def test_the_rule_reads_trials_in_their_order_not_in_the_order_the_answers_came_back(stub):
    # The cell's first trial misses and answers last; the four after it recall at once. Read as they came back
    # the cell would pass on four recalls; in trial order a miss came first, so it needs nine.
    first = build_haystack(300, 0.5, seed=0, chars_per_token=3.0).value
    sees = model()

    def slow_first_miss(request: Request):
        status, body = sees(request)
        if first in request.body["messages"][-1]["content"]:
            time.sleep(0.5)
            body["choices"][0]["message"]["content"] = NO_IDEA
        return status, body

    server = stub({CHAT: slow_first_miss})
    result = run_needle(server.url, "dsv4", context_lengths=[300], depths=[0.5], required_tokens=300,
                        deadline_s=30, calibrate=False, chars_per_token=3.0, size_tolerance=0.05)
    assert result.status is GateStatus.PASSED, result.summary
    cell = result.evidence["cells"][0]
    assert not cell["trials"][0]["recalled"] and cell["trials"][0]["code"] == first
    assert (cell["recalled_trials"], cell["asked_trials"]) == (9, 10)
    assert server.count(CHAT) == 10  # nothing asked past the decision


def test_a_cell_that_recalls_half_its_trials_fails_and_one_that_recalls_most_passes(stub):
    grid = {"context_lengths": [250, 300], "depths": [0.5], "required_tokens": 300, "deadline_s": 30,
            "calibrate": False, "chars_per_token": 3.0, "size_tolerance": 0.05}
    half = run_needle(stub({CHAT: forgetful(0.5)}).url, "dsv4", **grid)
    assert half.status is GateStatus.FAILED, half.summary
    cell = half.evidence["cells"][0]
    assert cell["outcome"] == "missed" and cell["asked_trials"] - cell["recalled_trials"] == 5
    assert "cells within 300 tokens missed the needle; first: 250 tokens" in half.summary
    assert "recalled (95% interval" in half.summary
    mostly = run_needle(stub({CHAT: forgetful(0.9)}).url, "dsv4", **grid)
    assert mostly.status is GateStatus.PASSED, mostly.summary
    # each cell stopped where the schedule passed it: 4 recalled with no miss, 9 with one, 12 with two, ...
    rule = RecallRule()
    assert all(c["recalled_trials"] == rule.needed(c["asked_trials"] - c["recalled_trials"])
               for c in mostly.evidence["cells"])
    assert any(c["asked_trials"] > 4 for c in mostly.evidence["cells"]), "a miss among the trials"


def test_retries_above_their_share_fail_the_needle_and_are_counted(stub):
    answered = model()
    lock, seen = threading.Lock(), set()

    def flaky(request: Request):
        # every prompt's first try meets a transient 503, as an intermittent PD path would give
        content = request.body["messages"][-1]["content"]
        with lock:
            first = content not in seen
            seen.add(content)
        return (503, "Service Unavailable") if first else answered(request)

    grid = {"context_lengths": [300], "depths": [0.5], "required_tokens": 300, "deadline_s": 30, "calibrate": False,
            "chars_per_token": 3.0, "size_tolerance": 0.05, "sleep": sleeps}
    result = run_needle(stub({CHAT: flaky}).url, "dsv4", **grid)
    assert result.status is GateStatus.FAILED, result.summary
    assert (result.evidence["attempts"], result.evidence["transport_retries"]) == (8, 4)
    assert "above needle_max_retry_share 0.05: the path fails intermittently" in result.summary
    fine = run_needle(stub({CHAT: lambda r: (503, "busy") if r.n == 0 else answered(r)}).url, "dsv4",
                      **grid, max_retry_share=0.2)
    assert fine.status is GateStatus.PASSED and fine.evidence["transport_retries"] == 1


def test_cells_past_the_requirement_draw_the_curve_after_the_judged_ones_and_are_never_judged(stub):
    server = stub({CHAT: model(full_recall_tokens=1500, window_tokens=300)})
    notes: list[str] = []
    result = run_needle(server.url, "dsv4", context_lengths=[1000, 2000, 4000], depths=[0, 1], required_tokens=1000,
                        deadline_s=30, curve_trials=2, concurrency=1,
                        progress=lambda done, total, note: notes.append(note))
    assert result.status is GateStatus.PASSED, result.summary
    cells = {(c["context_tokens"], c["depth"]): c for c in result.evidence["cells"]}
    assert all(cells[(1000, d)]["judged"] and cells[(1000, d)]["asked_trials"] == 4 for d in (0, 1))
    curve = [c for c in cells.values() if c["context_tokens"] > 1000]
    assert all(not c["judged"] and c["outcome"] == "curve" and c["asked_trials"] == 2 and not c["required"]
               for c in curve)
    assert cells[(4000, 0)]["recalled_trials"] == 0 and cells[(4000, 1)]["recalled"]  # a miss there fails nothing
    assert server.count(CHAT) == 1 + 8 + 8  # calibration, 4 trials for each judged cell, 2 for each curve cell
    assert all(n.startswith("1000 tokens") for n in notes[:8]) and not any(n.startswith("1000") for n in notes[8:])
    assert result.evidence["rule"]["required_cells"] == 2
