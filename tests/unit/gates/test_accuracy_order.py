"""The accuracy gate counts answers in question order, so how long a wrong answer takes cannot move its risks."""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Callable

import pytest

from dsv4deploy.gates.accuracy import AccuracyPlan, InQuestionOrder, run_accuracy, sequential_test, true_risks
from dsv4deploy.gates.evidence import BernoulliSPRT, Outcome
from dsv4deploy.gates.questions import Question
from dsv4deploy.gates.result import GateStatus
from dsv4deploy.gates.sprt_oc import sprt_oc
from tests.unit.gates.stubs import Request, StubServer

GSM8K = AccuracyPlan(expected=0.9613, margin=0.05, count=200, concurrency=16)
FLOOR_WRONG = 1 - (0.9613 - 0.05)


def test_answers_wait_for_every_earlier_question() -> None:
    fed = InQuestionOrder(sequential_test(GSM8K))
    fed.add(2, False)
    fed.add(1, True)
    assert fed.counted == [] and fed.waiting() == 2
    fed.add(0, None)  # no answer: no trial, but it no longer holds the others back
    assert fed.counted == [True, False] and fed.next == 3 and fed.waiting() == 0


def _completion_order(rights: list[bool], lanes: int, rng: random.Random) -> list[int]:
    """The questions in the order their answers complete: ``lanes`` at a time, a wrong answer taking twice as
    long as a right one (each time jittered), the next question sent when one completes."""
    busy: list[float] = []  # when each lane's question completes
    done: list[tuple[float, int]] = []
    for index, right in enumerate(rights):
        start = heapq.heappop(busy) if len(busy) >= lanes else 0.0
        end = start + (1.0 if right else 2.0) * rng.uniform(0.8, 1.2)
        heapq.heappush(busy, end)
        done.append((end, index))
    return [index for _, index in sorted(done)]


def _passes(test: BernoulliSPRT, rights: list[bool], arrivals: list[int], in_question_order: bool) -> bool:
    """Feed one run's answers as they arrive, stopped at the decision (pending answers cancelled)."""
    fed = InQuestionOrder(test)
    for index in arrivals:
        if in_question_order:
            fed.add(index, rights[index])
        else:  # what the gate did before: each answer counted as it completed
            test.observe(not rights[index])
        if test.state() is not None:
            break
    return test.state() is Outcome.PASSED


def _pass_rate(in_question_order: bool, runs: int = 1500) -> float:
    rng = random.Random(49)
    passed = 0
    for _ in range(runs):
        rights = [rng.random() >= FLOOR_WRONG for _ in range(GSM8K.count)]
        arrivals = _completion_order(rights, GSM8K.concurrency, rng)
        passed += _passes(sequential_test(GSM8K), rights, arrivals, in_question_order)
    return passed / runs


def test_slow_wrong_answers_do_not_raise_the_chance_of_passing_at_the_floor() -> None:
    exact = sprt_oc(sequential_test(GSM8K), FLOOR_WRONG).passed
    assert exact <= GSM8K.beta  # the stated risk of passing a release at the floor holds for the test
    ordered = _pass_rate(in_question_order=True)
    # 1500 runs: a standard error of about 0.0075 around the exact figure
    assert ordered == pytest.approx(exact, abs=0.025)
    assert _pass_rate(in_question_order=False) > GSM8K.beta + 0.03  # counted as they complete: about 0.18


def test_the_gate_fails_on_slow_wrong_answers_it_used_to_cancel(stub: Callable[..., StubServer]) -> None:
    questions = [Question(f"question {n}: what is {n} + 1?", str(n + 1)) for n in range(80)]

    def answer(request: Request) -> tuple[int, dict]:
        n = int(request.body["messages"][-1]["content"].split(":")[0].split()[1])
        if n < 4:  # the first four questions answered wrong, slowly
            time.sleep(0.6)
            text = "The answer is 0."
        else:
            text = f"The answer is {n + 1}."
        return 200, {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}

    server = stub({"POST /v1/chat/completions": answer})
    result = run_accuracy(server.url, "m", AccuracyPlan(expected=0.9613, margin=0.05, count=80, concurrency=16),
                          deadline_s=30, questions=questions)
    assert result.status is GateStatus.FAILED, result.summary
    assert result.evidence["n"] == 4 and result.evidence["right"] == 0
    assert [w["index"] for w in result.evidence["wrong"]] == [1, 2, 3, 4]
    assert result.evidence["order"] == "question" and "refused" in result.summary


def test_the_risks_at_the_budget_are_stated_exactly() -> None:
    builtin = true_risks(AccuracyPlan(expected=0.99, margin=0.05, count=200))
    assert builtin["refused_at_expected"] <= 0.05 and builtin["passed_at_floor"] <= 0.10
    # GSM8K at 96.13 % with 200 questions: Wald's alpha covers failures (3.3 %); undecided at the budget
    # (10.5 %) refuses as well. docs/parity.md states it, and 400 questions hold the 5 %.
    gsm8k = true_risks(AccuracyPlan(expected=0.9613, margin=0.05, count=200))
    assert gsm8k["failed_at_expected"] == pytest.approx(0.0334, abs=1e-4)
    assert gsm8k["refused_at_expected"] == pytest.approx(0.1384, abs=1e-4)
    assert true_risks(AccuracyPlan(expected=0.9613, margin=0.05, count=400))["refused_at_expected"] <= 0.05
