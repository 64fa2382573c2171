"""Parity records compared: first divergent token, largest logprob delta, near ties, the table."""

from __future__ import annotations

from dsv4deploy.gates.evidence import Outcome
from dsv4deploy.gates.parity import LENGTHS, compare, compare_prompt, fixed_prompts, markdown_table


def _rec(tokens: list[int], lps: list[float], alt: float = -3.0) -> dict:
    top = [[[lp, t], [alt, t + 100]] for t, lp in zip(tokens, lps, strict=True)]
    return {"tokens": tokens, "logprobs": lps, "top": top}


def test_the_fixed_set_runs_past_2k_tokens_and_has_tool_conversations() -> None:
    prompts = fixed_prompts()
    assert max(p["length"] for p in prompts) * 1.3 > 2048 and {p["kind"] for p in prompts} == {"plain", "tools"}
    assert len({p["id"] for p in prompts}) == len(prompts) == len(LENGTHS) + 3


def test_equal_outputs_pass_and_a_divergence_is_located() -> None:
    a = _rec([1, 2, 3], [-0.1, -0.2, -0.3])
    assert compare_prompt(a, a, 0.05) == {"tokens_equal": 3, "tokens": 3, "first_divergent": None,
                                          "near_tie": False, "max_delta": 0.0, "within_tolerance": True}
    row = compare_prompt(a, _rec([1, 2, 9], [-0.1, -0.29, -0.3]), 0.05)
    assert row["first_divergent"] == 2 and row["max_delta"] == 0.09 and not row["within_tolerance"]


def test_a_near_tie_that_flips_is_reported_not_failed() -> None:
    a = {"tokens": [5], "logprobs": [-0.70], "top": [[[-0.70, 5], [-0.72, 6]]]}
    b = {"tokens": [6], "logprobs": [-0.69], "top": [[[-0.69, 6], [-0.71, 5]]]}
    row = compare_prompt(a, b, 0.05)
    assert row["first_divergent"] == 0 and row["near_tie"] and row["within_tolerance"]


def test_the_decision_counts_prompts_out_of_tolerance_and_tables_them_by_length() -> None:
    good = {"p1": {**_rec([1], [-0.1]), "length": 24, "kind": "plain"},
            "p2": {**_rec([1, 2], [-0.1, -0.2]), "length": 3200, "kind": "plain"}}
    bad = {**good, "p2": {**_rec([1, 7], [-0.1, -0.2]), "length": 3200, "kind": "plain"}}
    passed, _, _ = compare(good, good, 0.05)
    failed, _rows, table = compare(bad, good, 0.05)
    assert passed.outcome is Outcome.PASSED and failed.outcome is Outcome.FAILED
    assert failed.events == 1 and failed.trials == 2 and "p2 (first divergent token 1" in failed.reason
    assert [t["length"] for t in table] == ["24 words", "3200 words"] and table[1]["out_of_tolerance"] == 1
    assert "| 3200 words | 1 | 1/2 |" in markdown_table(table)


def test_a_side_that_could_not_answer_is_an_error_not_a_verdict() -> None:
    ok = {"p": {**_rec([1], [-0.1]), "length": 24, "kind": "plain"}}
    decision, _, _ = compare({"p": {"error": "HTTP 500"}}, ok, 0.05)
    assert decision.outcome is Outcome.ERROR and "PD side HTTP 500" in decision.reason


def test_a_prompt_too_long_on_both_sides_is_left_out_and_on_one_side_is_an_error() -> None:
    ok = {"p": {**_rec([1], [-0.1]), "length": 24, "kind": "plain"}}
    long = {"skipped": "longer than the served context (The input (9346 tokens) is longer than ...)", "length": 3200,
            "kind": "plain"}
    decision, rows, _ = compare({**ok, "q": long}, {**ok, "q": long}, 0.05)
    assert decision.outcome is Outcome.PASSED and [r["prompt"] for r in rows] == ["p"]
    assert "0 of 1 prompts out of tolerance" in decision.reason and "1 longer than the served context left out (q)" \
        in decision.reason
    one_side, _, _ = compare({**ok, "q": long}, {**ok, "q": {**_rec([1], [-0.1]), "length": 3200, "kind": "plain"}},
                             0.05)
    assert one_side.outcome is Outcome.ERROR and "q: PD side only: longer than the served context" in one_side.reason
