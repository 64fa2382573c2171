"""Accuracy gate: a task score with its uncertainty, judged against the model's reference score.

N questions with exact answers (the built-in word problems, or the operator's JSONL such as GSM8K's test
split; :mod:`dsv4deploy.gates.questions`) are asked through the client-facing endpoint at a stated
concurrency, with the recipe's sampling settings. Each answer is right or wrong; the verdict is the
evidence rules' sequential test (:class:`dsv4deploy.gates.evidence.BernoulliSPRT`) on the wrong-answer
rate: acceptable is ``1 - expected`` (the model's reference score, e.g. Flash's GSM8K 96.13 from the
cookbook), refused is ``1 - (expected - margin)``. The answers are counted in question order
(:class:`InQuestionOrder`), so how long an answer takes cannot move the verdict. It stops as soon as the
evidence decides; a budget spent first is ``inconclusive``, with how many more questions would decide. The
result shows the score with its standard error and exact interval, n, the first wrong answers with what was
expected, and the test's exact risks at its budget (:func:`true_risks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

from dsv4deploy.gates.chat import ChatReply, ReplyKind, chat
from dsv4deploy.gates.evidence import BernoulliSPRT, Decision, Outcome, exact_interval
from dsv4deploy.gates.http import check_url, make_client
from dsv4deploy.gates.questions import BUILTIN, INSTRUCTION, Question, extract_answer, question_set
from dsv4deploy.gates.result import GateResult, GateStatus, Progress, Stopwatch, clip, make_result, notify
from dsv4deploy.gates.sprt_oc import sprt_oc

GATE = "accuracy"
#: Wrong answers shown in the report.
SHOWN_WRONG = 5
#: More than this share of questions unanswered (HTTP errors) and the score cannot be read.
MAX_ERROR_SHARE = 0.1
#: The highest expected score the test can take (a wrong-answer rate of 0 leaves no test to run).
EXPECTED_CAP = 0.995

STATUS = {Outcome.PASSED: GateStatus.PASSED, Outcome.FAILED: GateStatus.FAILED,
          Outcome.INCONCLUSIVE: GateStatus.INCONCLUSIVE, Outcome.ERROR: GateStatus.FAILED}


@dataclass(frozen=True)
class AccuracyPlan:
    """What to ask and how to judge: the question source, the budget, the reference and the risks."""

    questions: str = BUILTIN
    count: int = 200
    concurrency: int = 16
    expected: float = 0.99
    expected_source: str = ""
    margin: float = 0.05
    alpha: float = 0.05
    beta: float = 0.1
    seed: int = 0
    sampling: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 0.0})
    max_tokens: int = 1024
    # False: ask every question (no reference score to stop at; the score is recorded, not judged).
    stop_when_decided: bool = True


def reference_score(references: Mapping[str, Any] | None, task: str) -> tuple[float, str] | None:
    """The model profile's expected score for ``task`` (a fraction) and its source, if the profile has one."""
    entry = (references or {}).get(task)
    if not isinstance(entry, Mapping) or "score" not in entry:
        return None
    return float(entry["score"]), str(entry.get("source", ""))


def sequential_test(plan: AccuracyPlan) -> BernoulliSPRT:
    """The evidence rules' test of the wrong-answer rate: ``1 - expected`` acceptable, ``1 - floor`` refused."""
    expected = min(plan.expected, EXPECTED_CAP)
    floor = expected - plan.margin
    if floor <= 0:
        raise ValueError(f"accuracy_margin {plan.margin:g} leaves no floor below the expected {expected:g}")
    return BernoulliSPRT(1.0 - expected, 1.0 - floor, plan.alpha, plan.beta, plan.count)


def judge(right_wrong: list[bool], plan: AccuracyPlan, *, cut_short: str | None = None) -> Decision:
    """The evidence rules' verdict on answers in question order (True: right)."""
    test = sequential_test(plan)
    for right in right_wrong:
        test.observe(not right)
    return test.decision("questions answered wrong", cut_short=cut_short)


class InQuestionOrder:
    """Feeds the sequential test in question order, whatever order the answers arrive in.

    An answer is counted once every question before it has been answered (or got no answer: no trial), so
    the test only ever sees a prefix of the questions, fixed before any answer was known. Fed in the order
    answers complete, slow wrong answers would come last and a stop at the decision would leave them
    uncounted: with wrong answers taking twice as long, a release at the floor would pass about 18 % of the
    time, not the test's 8.8 %.
    """

    def __init__(self, test: BernoulliSPRT, *, stop: bool = True) -> None:
        self.test = test
        self.stop = stop  # False: count every answer (the score recorded, not judged)
        self.arrived: dict[int, bool | None] = {}
        self.next = 0  # the first question not yet counted
        self.counted: list[bool] = []  # right/wrong of the counted prefix, in question order

    def add(self, index: int, right: bool | None) -> None:
        """Take question ``index``'s answer (None: no answer) and count every answer now due, until the test
        decides; later answers wait (and are not counted once it has)."""
        self.arrived[index] = right
        while (self.test.state() is None or not self.stop) and self.next in self.arrived:
            got = self.arrived.pop(self.next)
            self.next += 1
            if got is not None:
                self.counted.append(got)
                self.test.observe(not got)

    def waiting(self) -> int:
        """Answers that arrived but are not counted (beyond the prefix, or after the decision)."""
        return len(self.arrived)


def true_risks(plan: AccuracyPlan) -> dict[str, float]:
    """The test's risks at its budget, exact (:func:`dsv4deploy.gates.sprt_oc.sprt_oc`): Wald's bounds state
    ``alpha`` for failing a release at the expected score, but a budget spent undecided refuses it too
    (``inconclusive``), so both are given; and the chance a release at the floor passes (``beta``)."""
    test = sequential_test(plan)
    at_expected, at_floor = sprt_oc(test, test.p0), sprt_oc(test, test.p1)
    return {"failed_at_expected": round(at_expected.failed, 4),
            "inconclusive_at_expected": round(at_expected.inconclusive, 4),
            "refused_at_expected": round(at_expected.refused(), 4),
            "passed_at_floor": round(at_floor.passed, 4),
            "mean_questions_at_expected": round(at_expected.mean_trials, 1)}


def score_figures(right: int, n: int) -> dict[str, Any]:
    """The score, its standard error and its exact 95 % interval (the interval of the right answers)."""
    if n == 0:
        return {"score": None, "n": 0}
    p = right / n
    low, high = exact_interval(right, n)
    return {"score": round(p, 4), "standard_error": round(math.sqrt(p * (1 - p) / n), 4),
            "interval_95": [round(low, 4), round(high, 4)], "n": n, "right": right}


def run_accuracy(endpoint: str, model: str, plan: AccuracyPlan, *, deadline_s: float = 600.0,
                 api_key: str | None = None, progress: Progress | None = None,
                 questions: list[Question] | None = None) -> GateResult:
    """Ask the question set through ``endpoint`` and judge the score against ``plan.expected - plan.margin``."""
    endpoint = check_url(endpoint, "endpoint")
    if plan.count < 1 or plan.concurrency < 1:
        raise ValueError("accuracy_count and accuracy_concurrency must be at least 1")
    asked = (questions if questions is not None else question_set(plan.questions, plan.count, plan.seed))[:plan.count]
    watch = Stopwatch(deadline_s)
    plan = replace(plan, count=len(asked))
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    test = sequential_test(plan)
    fed = InQuestionOrder(test, stop=plan.stop_when_decided)
    answered = 0
    with make_client(api_key, 60.0) as client, ThreadPoolExecutor(plan.concurrency) as pool:
        pending: dict[Future[ChatReply], int] = {}
        queue = iter(enumerate(asked))
        sent = 0

        def submit() -> None:
            nonlocal sent
            item = next(queue, None)
            if item is not None:
                sent += 1
                index, q = item
                pending[pool.submit(chat, client, endpoint, model, f"{q.question}\n{INSTRUCTION}",
                                    max_tokens=plan.max_tokens, timeout_s=max(watch.remaining(), 1.0),
                                    extra_body=dict(plan.sampling))] = index

        for _ in range(plan.concurrency):
            submit()
        def going() -> bool:
            return test.state() is None or not plan.stop_when_decided

        while pending and going() and not watch.expired():
            done, _ = wait(pending, timeout=watch.remaining(), return_when=FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                reply = future.result()
                q = asked[index]
                if reply.kind is not ReplyKind.OK:
                    failures.append(reply.failure(f"question {index + 1}"))
                    fed.add(index, None)
                else:
                    text = reply.content or reply.reasoning
                    got = extract_answer(text)
                    right = got == q.answer
                    answered += 1
                    fed.add(index, right)
                    rows.append({"index": index + 1, "right": right, "expected": q.answer, "got": got,
                                 "question": q.question, "answer": clip(text, 400)})
                if going():
                    submit()
            notify(progress, answered, plan.count,
                   f"{sum(fed.counted)} of {len(fed.counted)} right (counted in question order)")
        for future in pending:
            future.cancel()
    cut = "the deadline passed" if watch.expired() and test.state() is None else None
    attempted = answered + len(failures)
    counted = fed.counted
    figures = score_figures(sum(counted), len(counted))
    evidence: dict[str, Any] = {
        **figures, "questions": plan.questions, "concurrency": plan.concurrency, "requests": sent,
        # Answers past the counted prefix (a later question answered first) decide nothing and are not scored.
        "order": "question", "answered_not_counted": fed.waiting(),
        "expected": plan.expected, "expected_source": plan.expected_source, "margin": plan.margin,
        "floor": round(plan.expected - plan.margin, 4), "sampling": dict(plan.sampling),
        "wrong": [r for r in sorted(rows, key=lambda r: r["index"])
                  if not r["right"] and r["index"] <= fed.next][:SHOWN_WRONG],
    }
    if failures:
        evidence["failures"] = failures[:10]
    if attempted and len(failures) > MAX_ERROR_SHARE * attempted:
        decision = Decision(Outcome.ERROR, f"{len(failures)} of {attempted} questions got no answer "
                                           f"({failures[0].get('status')}): the score cannot be read")
    else:
        decision = test.decision("questions answered wrong", cut_short=cut)
    evidence["decision"] = decision.evidence()
    risks = true_risks(plan) if plan.stop_when_decided else None
    if risks:
        evidence["risks_at_budget"] = risks
    return make_result(GATE, STATUS[decision.outcome], watch, summary(decision, figures, plan, risks), evidence)


def summary(decision: Decision, figures: Mapping[str, Any], plan: AccuracyPlan,
            risks: Mapping[str, float] | None = None) -> str:
    """One line: the verdict, the score with its interval and n, against what; with ``risks``
    (:func:`true_risks`), the test's real risks at its budget."""
    if not figures.get("n"):
        return f"{decision.outcome}: {decision.reason}"
    low, high = figures["interval_95"]
    # The exact interval, not score ± standard error: the normal approximation says "± 0.0%" at 44 of 44.
    line = (f"{decision.outcome}: score {figures['score']:.1%} "
            f"(95% interval {low:.1%}-{high:.1%}, n={figures['n']}) against the expected {plan.expected:.1%} "
            f"minus a margin of {plan.margin:.1%} ({plan.questions}); {decision.reason}")
    if decision.outcome in (Outcome.PASSED, Outcome.FAILED) and figures["n"] < plan.count:
        line += "; the score is as observed when the sequential test stopped (biased toward its verdict)"
    if risks:
        # Wald's alpha counts failures only; a budget spent undecided refuses the release as well.
        line += (f"; at a budget of {plan.count} questions a release at the expected score is refused "
                 f"{risks['refused_at_expected']:.1%} of the time (failed {risks['failed_at_expected']:.1%}, "
                 f"inconclusive {risks['inconclusive_at_expected']:.1%}), one at the floor passed "
                 f"{risks['passed_at_floor']:.1%}")
    return line
