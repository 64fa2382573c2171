"""Quality canaries for the bake and the continuous verification: a handful of accuracy questions and parity
prompts at each interval, judged the way their gates judge (:mod:`dsv4deploy.gates.evidence`).

- **Accuracy canary:** ``questions`` word problems (a different slice of the set each interval), each right or
  wrong. A handful cannot pass the accuracy gate's sequential test (it needs about 44 right answers), so an
  interval is judged as the bake judges its rates: the wrong-answer share against the accuracy gate's refused
  rate (``1 - (expected - margin)``) by the exact binomial test - failed only when it is significantly above
  (p < 0.05; e.g. 3 of 8 wrong against a floor of 94 %: p = 0.010), inconclusive when above without
  significance, successful at or below it.
- **Parity canary:** ``prompts`` prompts of the parity gate's fixed set (the longest first, where a KV transfer
  that loses entries shows, then a tool conversation), completed greedily with top-5 logprobs and compared
  with a parity record of the same release (or of one with every model-affecting setting equal) by
  :func:`dsv4deploy.gates.parity.compare`: failed when a prompt is out of tolerance.

Opt-in: both counts are 0 by default (``dsv4_bake_canary_questions``/``_prompts``,
``dsv4_verify_timer_canary_questions``/``_prompts``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dsv4deploy.gates.accuracy import AccuracyPlan, run_accuracy
from dsv4deploy.gates.bake import Analysis, Phase, rate
from dsv4deploy.gates.evidence import Outcome
from dsv4deploy.gates.parity import TOLERANCE, collect, compare, fixed_prompts
from dsv4deploy.gates.questions import BUILTIN, question_set

ACCURACY = "accuracy canary"
PARITY = "parity canary"
#: How many questions the canary draws its slices from (the built-in set's size).
POOL = 300


@dataclass(frozen=True)
class CanaryPlan:
    """What the canaries ask at each interval and what they judge against.

    ``expected`` None: no reference score, the accuracy canary does not run. ``parity_record`` None: no record
    to compare with, the parity canary does not run. :meth:`notes` says why a requested canary does not."""

    questions: int = 0
    prompts: int = 0
    question_source: str = BUILTIN
    expected: float | None = None
    margin: float = 0.05
    sampling: Mapping[str, Any] = field(default_factory=lambda: {"temperature": 0.0})
    max_tokens: int = 1024
    parity_record: Mapping[str, Any] | None = None
    tolerance: float | None = None
    deadline_s: float = 120.0
    #: Why a canary asked for cannot run, said in the evidence (set by whoever builds the plan).
    skipped: tuple[str, ...] = ()

    def runs(self) -> bool:
        """Whether any canary runs."""
        return self.asks_questions() or self.compares_prompts()

    def asks_questions(self) -> bool:
        return self.questions > 0 and self.expected is not None

    def compares_prompts(self) -> bool:
        return self.prompts > 0 and bool((self.parity_record or {}).get("outputs"))

    def notes(self) -> list[str]:
        """Why a canary that was asked for does not run."""
        out = list(self.skipped)
        if self.questions > 0 and self.expected is None and not any(ACCURACY in s for s in out):
            out.append(f"{ACCURACY} not run: no reference score for the question set (set accuracy_expected)")
        if self.prompts > 0 and not self.compares_prompts() and not any(PARITY in s for s in out):
            out.append(f"{PARITY} not run: no parity record of this release to compare with (run the parity gate)")
        return out


def canary_prompts(count: int) -> list[dict[str, Any]]:
    """``count`` prompts of the fixed set: plain prompts longest first, interleaved with tool conversations."""
    prompts = fixed_prompts()
    plain = sorted((p for p in prompts if p["kind"] == "plain"), key=lambda p: -p["length"])
    tools = [p for p in prompts if p["kind"] == "tools"]
    order = [p for pair in itertools.zip_longest(plain, tools) for p in pair if p is not None]
    return order[:count]


def accuracy_canary(endpoint: str, model: str, plan: CanaryPlan, index: int, api_key: str | None) -> Analysis:
    """Interval `index`'s accuracy canary: the next slice of questions, judged against the refused rate."""
    if plan.expected is None:
        raise ValueError("the accuracy canary needs an expected score")
    pool = question_set(plan.question_source, POOL)
    asked = [pool[(index * plan.questions + i) % len(pool)] for i in range(plan.questions)]
    acc = AccuracyPlan(questions=plan.question_source, count=len(asked), concurrency=len(asked),
                       expected=plan.expected, margin=plan.margin, sampling=dict(plan.sampling),
                       max_tokens=plan.max_tokens, stop_when_decided=False)
    result = run_accuracy(endpoint, model, acc, deadline_s=plan.deadline_s, api_key=api_key, questions=asked)
    n, right = int(result.evidence.get("n") or 0), int(result.evidence.get("right") or 0)
    if result.evidence.get("decision", {}).get("outcome") == str(Outcome.ERROR) or n == 0:
        return Analysis(ACCURACY, Phase.ERROR, result.summary)
    floor = plan.expected - plan.margin
    judged = rate(ACCURACY, n - right, n, 1 - floor, f"questions answered wrong, floor {floor:.1%}")
    wrong = result.evidence.get("wrong") or []
    if wrong:
        first = wrong[0]
        judged.detail += f"; first wrong: question {first['index']}, expected {first['expected']}, got {first['got']}"
    return judged


def parity_canary(endpoint: str, plan: CanaryPlan, api_key: str | None) -> Analysis:
    """The parity canary: the chosen prompts against the record's outputs for them."""
    record = plan.parity_record or {}
    outputs = record.get("outputs") or {}
    prompts = [p for p in canary_prompts(plan.prompts) if p["id"] in outputs and "skipped" not in outputs[p["id"]]]
    tolerance = plan.tolerance if plan.tolerance is not None else float(record.get("tolerance") or TOLERANCE["gpu"])
    now = collect(endpoint, api_key=api_key, prompts=prompts, timeout_s=plan.deadline_s)
    decision, rows, _ = compare(now, {p["id"]: outputs[p["id"]] for p in prompts}, tolerance,
                                names=("now", f"the record of release {record.get('release', '?')}"))
    phase = {Outcome.PASSED: Phase.SUCCESSFUL, Outcome.FAILED: Phase.FAILED}.get(decision.outcome, Phase.ERROR)
    worst = max((r["max_delta"] for r in rows), default=None)
    return Analysis(PARITY, phase, decision.reason, worst)


def canary_analyses(endpoint: str, model: str, plan: CanaryPlan, index: int, api_key: str | None) -> list[Analysis]:
    """The canaries of interval `index` that run (none when none was asked for, or none can run)."""
    out = []
    if plan.asks_questions():
        out.append(accuracy_canary(endpoint, model, plan, index, api_key))
    if plan.compares_prompts():
        out.append(parity_canary(endpoint, plan, api_key))
    return out
