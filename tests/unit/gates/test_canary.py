"""The quality canaries of the bake and the verification timer: which prompts, which questions, what they are
judged against, and why one asked for does not run."""

from __future__ import annotations

from collections.abc import Callable

from dsv4deploy.gates.bake import BakeSettings, Phase
from dsv4deploy.gates.canary import CanaryPlan, accuracy_canary, canary_prompts, parity_canary
from dsv4deploy.gates.quality_runner import bake_canary, model_settings, parity_topology
from dsv4deploy.gates.runner import GateSettings
from tests.unit.gates.stubs import Request, StubServer


def test_the_longest_prompts_come_first_interleaved_with_tool_conversations() -> None:
    assert [p["id"] for p in canary_prompts(4)] == ["plain-3200", "tools-1", "plain-2400", "tools-2"]
    assert len(canary_prompts(9)) == 9 and len({p["id"] for p in canary_prompts(9)}) == 9


def test_a_canary_asked_for_without_what_it_judges_against_says_why_it_does_not_run() -> None:
    plan = CanaryPlan(questions=4, prompts=2)
    assert not plan.runs()
    notes = plan.notes()
    assert any("accuracy canary not run: no reference score" in n for n in notes)
    assert any("parity canary not run: no parity record" in n for n in notes)
    assert CanaryPlan().notes() == [] and not CanaryPlan().runs()


def _plan(url: str, topk: int = 1024) -> dict:
    return {"endpoint": url, "served_model_name": "m", "topology": "combined",
            "workers": [{"name": "c", "role": "combined", "host": "h", "url": url}],
            "expected_overrides": {"c": {"index_topk": topk}},
            "reference_scores": {"builtin": {"score": 0.99, "source": "profile"}}}


def test_the_bakes_parity_canary_needs_a_record_taken_with_the_same_settings() -> None:
    plan = _plan("http://127.0.0.1:9")
    record = {"outputs": {"plain-3200": {}}, "settings": model_settings(_plan("http://127.0.0.1:9", 512)),
              "topology": parity_topology(plan), "release": "r1"}
    canary = bake_canary(plan, GateSettings(), BakeSettings(canary_questions=4, canary_prompts=2), record)
    assert canary.asks_questions() and canary.expected == 0.99 and not canary.compares_prompts()
    assert canary.notes() == ["parity canary not run: release r1's parity record was taken with other settings "
                              "(combined.overrides)"]
    same = {**record, "settings": model_settings(plan)}
    assert bake_canary(plan, GateSettings(), BakeSettings(canary_prompts=2), same).compares_prompts()


def test_wrong_answers_fail_only_when_significantly_above_the_floor(stub: Callable[..., StubServer]) -> None:
    answer = {"choices": [{"message": {"role": "assistant", "content": "The answer is -1."}, "finish_reason": "stop"}]}
    asked: list[str] = []

    def reply(req: Request) -> tuple[int, dict]:
        asked.append(req.body["messages"][-1]["content"])
        return 200, answer

    server = stub({"POST /v1/chat/completions": reply})
    plan = CanaryPlan(questions=3, expected=0.99)
    judged = accuracy_canary(server.url, "m", plan, 0, None)
    assert judged.phase is Phase.FAILED and judged.value == 1.0, judged.detail
    assert "3 of 3" in judged.detail and "p=" in judged.detail and "first wrong: question 1, expected" in judged.detail
    # One wrong of three is above the 6 % floor but no evidence: inconclusive, not failed.
    mixed = stub({"POST /v1/chat/completions": lambda req: (200, answer if req.n == 0 else _right(req))})
    assert accuracy_canary(mixed.url, "m", plan, 0, None).phase is Phase.INCONCLUSIVE
    # Each interval asks the next slice of the set.
    accuracy_canary(server.url, "m", plan, 1, None)
    assert len(asked) == 6 and not set(asked[:3]) & set(asked[3:])


def _right(req: Request) -> dict:
    from dsv4deploy.gates.questions import builtin_questions

    text = req.body["messages"][-1]["content"]
    found = next(q for q in builtin_questions(300) if q.question in text)
    return {"choices": [{"message": {"role": "assistant", "content": f"The answer is {found.answer}."},
                         "finish_reason": "stop"}]}


def test_a_parity_canary_that_cannot_reach_the_server_is_an_error_not_a_pass(dead_url: str) -> None:
    record = {"outputs": {p["id"]: {"tokens": [1], "logprobs": [-0.1], "top": [[[-0.1, 1]]]}
                          for p in canary_prompts(2)}, "tolerance": 0.05, "release": "r1"}
    judged = parity_canary(dead_url, CanaryPlan(prompts=2, parity_record=record, deadline_s=2), None)
    assert judged.phase is Phase.ERROR and "parity could not be measured" in judged.detail
