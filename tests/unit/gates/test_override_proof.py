"""What the answers show of an override: applied, not applied, or not shown, against the last good release."""

from __future__ import annotations

import json

from dsv4deploy.gates.override_proof import APPLIED, NOT_APPLIED, NOT_SHOWN, judge
from dsv4deploy.gates.parity import fixed_prompts

PROMPTS = [p["id"] for p in fixed_prompts()]


def answers(shift: float = 0.0, token: int = 7) -> dict:
    return {pid: {"tokens": [token, 2], "logprobs": [-0.5 + shift, -0.1], "top": [[[-0.5 + shift, token]], [[-0.1, 2]]],
                  "length": 24, "kind": "plain"} for pid in PROMPTS}


def settings(**overrides: object) -> dict:
    return {"served_model_name": "m", "topology": "combined",
            "combined.overrides": json.dumps(overrides, sort_keys=True)}


def record(**overrides: object) -> dict:
    return {"outputs": answers(), "settings": settings(**overrides), "topology": "local:combined"}


class Asker:
    """This release's answers, as the server would give them; counts the prompts asked."""

    def __init__(self, outputs: dict) -> None:
        self.outputs, self.asked = outputs, 0

    def __call__(self, prompts: list[dict]) -> dict:
        self.asked += len(prompts)
        return {p["id"]: self.outputs[p["id"]] for p in prompts}


def test_identical_answers_after_a_rope_base_change_show_it_not_applied():
    ask = Asker(answers())
    found = judge(settings(rope_theta=30000.0), "local:combined", record(rope_theta=20000.0), 0.01, ask)
    assert found["rope_theta"]["shown"] == NOT_APPLIED, found
    assert "bit-identically" in found["rope_theta"]["why"] and "20000.0 -> 30000.0" in found["rope_theta"]["why"]
    assert ask.asked == len(PROMPTS)


def test_changed_answers_show_the_changed_keys_applied_and_a_dropped_key_too():
    found = judge(settings(rope_parameters={"rope_theta": 20000.0}), "local:combined", record(rope_theta=20000.0),
                  0.01, Asker(answers(token=9)))
    assert found["rope_parameters"]["shown"] == APPLIED
    assert found["rope_theta"]["shown"] == APPLIED  # dropped: the answers moved with the change as a whole


def test_identical_answers_prove_nothing_for_a_key_that_need_not_act_on_short_prompts():
    found = judge(settings(max_position_embeddings=9000), "local:combined", record(max_position_embeddings=8192),
                  0.01, Asker(answers()))
    assert found["max_position_embeddings"]["shown"] == NOT_SHOWN


def test_differences_within_the_tolerance_show_nothing_either_way():
    found = judge(settings(rope_theta=30000.0), "local:combined", record(rope_theta=20000.0), 0.01,
                  Asker(answers(shift=0.001)))
    assert found["rope_theta"]["shown"] == NOT_SHOWN and "noise" in found["rope_theta"]["why"]


def test_nothing_is_asked_without_a_change_or_a_comparable_release():
    ask = Asker(answers())
    assert judge(settings(rope_theta=20000.0), "local:combined", record(rope_theta=20000.0), 0.01, ask) == {
        "rope_theta": {"shown": NOT_SHOWN, "why": "unchanged since the last good release: nothing to compare"}}
    other = judge(settings(rope_theta=30000.0), "local:pd", record(rope_theta=20000.0), 0.01, ask)
    assert other["rope_theta"]["shown"] == NOT_SHOWN and "topology" in other["rope_theta"]["why"]
    assert judge(settings(rope_theta=1.0), "local:combined", None, 0.01, ask)["rope_theta"]["shown"] == NOT_SHOWN
    assert ask.asked == 0
