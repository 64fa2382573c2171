"""Needle gate and haystacks: a stub model whose recall follows a simple, known rule."""

from __future__ import annotations

import re
import threading
import time

import pytest

from dsv4deploy.gates import GateStatus, build_haystack, run_needle

from .stubs import FACT, NO_IDEA, Request, model

CHAT = "POST /v1/chat/completions"


def sleeps(_seconds: float) -> None:
    pass


def test_required_cells_recall_and_the_curve_shows_the_rest(stub):
    server = stub({CHAT: model(full_recall_tokens=1500, window_tokens=300)})
    result = run_needle(
        server.url,
        "dsv4",
        context_lengths=[500, 1000, 2000, 4000],
        depths=[0, 0.5, 1],
        required_tokens=1200,
        deadline_s=30,
    )
    assert result.status is GateStatus.PASSED, result.summary
    assert result.summary == "all 6 cells within 1200 tokens recalled; curve beyond: 2000: 33%, 4000: 33%"
    curve = {p["context_tokens"]: p["fraction"] for p in result.evidence["curve"]}
    assert curve == {500: 1.0, 1000: 1.0, 2000: 0.3333, 4000: 0.3333}
    cells = result.evidence["cells"]
    assert len(cells) == 12 and result.evidence["first_failing"] is None
    deep_long = next(c for c in cells if c["context_tokens"] == 4000 and c["depth"] == 0)
    assert deep_long["recalled"] is False and deep_long["answer"] == NO_IDEA and deep_long["required"] is False
    near_end = next(c for c in cells if c["context_tokens"] == 4000 and c["depth"] == 1)
    assert near_end["recalled"] is True and near_end["answer"] == near_end["code"]
    assert all(abs(c["prompt_tokens"] - c["context_tokens"]) < 0.1 * c["context_tokens"] for c in cells)


def test_a_miss_within_the_required_length_fails_with_the_first_failing_cell(stub):
    server = stub({CHAT: model(full_recall_tokens=700, window_tokens=100)})
    result = run_needle(
        server.url, "dsv4", context_lengths=[500, 1000], depths=[0, 0.5, 1], required_tokens=1200, deadline_s=30
    )
    assert result.status is GateStatus.FAILED
    first = result.evidence["first_failing"]
    assert (first["context_tokens"], first["depth"], first["recalled"]) == (1000, 0.0, False)
    assert result.summary.startswith("2 of 6 cells within 1200 tokens missed the needle; first: 1000 tokens (")
    assert f"at depth 0, expected {first['code']}, answer {NO_IDEA!r}" in result.summary
    assert [f["body"] for f in result.evidence["failures"]] == [NO_IDEA, NO_IDEA]


def test_calibration_reads_the_real_size_from_usage(stub):
    server = stub({CHAT: model(chars_per_token=2.0)})  # the guess is 4 chars per token: 2x too few tokens
    grid = {"context_lengths": [1000, 2000], "depths": [0.5], "required_tokens": 5000, "deadline_s": 30}
    guessed = run_needle(server.url, "dsv4", calibrate=False, **grid)
    calibrated = run_needle(server.url, "dsv4", **grid)
    assert [c["prompt_tokens"] for c in guessed.evidence["cells"]] == pytest.approx([2000, 4000], rel=0.1)
    assert [c["prompt_tokens"] for c in calibrated.evidence["cells"]] == pytest.approx([1000, 2000], rel=0.1)
    assert calibrated.evidence["calibration"]["ok"] is True
    assert calibrated.evidence["chars_per_token_used"] == pytest.approx(2.0, rel=0.05)


def test_transient_errors_are_retried_per_cell_within_the_concurrency_bound(stub):
    answered = model()
    seen_codes: set[str] = set()
    lock = threading.Lock()

    def flaky(request: Request):
        code = FACT.search(request.body["messages"][-1]["content"]).group(2)
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
        required_tokens=1000,
        deadline_s=30,
        concurrency=3,
        calibrate=False,
        sleep=sleeps,
        progress=lambda done, total, note: progress.append((done, total)),
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
        context_lengths=[1000, 4000],
        depths=[0.5],
        required_tokens=1500,
        deadline_s=30,
        calibrate=False,
        chars_per_token=3.0,
    )
    assert result.status is GateStatus.PASSED, result.summary
    long_cell = result.evidence["cells"][1]
    assert long_cell["attempts"] == 1 and long_cell["status"] == 400
    assert "longer than the model's context length" in long_cell["error"]
    assert result.evidence["curve"][1]["errors"] == 1


def test_deadline_leaves_cells_not_run_and_fails(stub):
    slow = model()
    server = stub({CHAT: lambda r: (time.sleep(0.2), slow(r))[1]})
    result = run_needle(
        server.url,
        "dsv4",
        context_lengths=[200, 400, 800],
        depths=[0, 1],
        required_tokens=1000,
        deadline_s=0.5,
        concurrency=1,
        calibrate=False,
    )
    assert result.status is GateStatus.FAILED
    not_run = [c for c in result.evidence["cells"] if c["error"] == "not run: gate deadline reached"]
    assert not_run and server.count(CHAT) < 6


def test_no_cell_within_the_requirement_is_a_failure(stub):
    server = stub({CHAT: model()})
    result = run_needle(server.url, "dsv4", context_lengths=[2000], depths=[0.5], required_tokens=1000, deadline_s=30)
    assert result.status is GateStatus.FAILED
    assert result.summary == "no cell measured within 1000 tokens, so the requirement is unproven"


def test_haystack_plants_the_fact_at_its_depth_and_asks_last():
    start, middle, end = (build_haystack(4000, d, seed=7) for d in (0.0, 0.5, 1.0))
    for hay in (start, middle, end):
        assert hay.content.count(hay.fact) == 1 and hay.content.count("secret code") == 2
        assert hay.content.endswith(f"\n\nWhat is the secret code for {hay.topic}? Answer with the code only.")
        assert re.fullmatch(r"[A-Z]+-\d{4}-[A-Z]+", hay.code)
        assert hay.content.index(hay.fact) == hay.needle_offset
        assert len(hay.content) == pytest.approx(16000, rel=0.02)
    assert start.needle_offset == 0
    assert 0.45 < middle.needle_offset / len(middle.content) < 0.55
    assert end.needle_offset > 0.97 * len(end.content)


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
