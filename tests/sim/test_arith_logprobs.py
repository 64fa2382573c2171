"""The simulated model's word problems (wrong_answers fault) and its /generate logprobs."""

from __future__ import annotations

from dsv4deploy.gates.questions import builtin_questions, extract_answer
from dsv4deploy.sim import arith
from dsv4deploy.sim.faults import parse_faults
from dsv4deploy.sim.logprobs import logprob_fields


def test_it_solves_every_builtin_problem_and_a_fault_spoils_a_share() -> None:
    questions = builtin_questions(300)
    assert all(extract_answer(arith.answer_text(q.question) or "") == q.answer for q in questions)
    wrong = sum(extract_answer(arith.answer_text(q.question, 0.3) or "") != q.answer for q in questions)
    assert 60 < wrong < 120
    assert arith.solve("Say OK") is None and arith.solve("How many tokens did you read?") is None
    assert parse_faults("wrong_answers=0.25").wrong_answers == 0.25


def test_logprobs_follow_what_the_model_sees() -> None:
    same = logprob_fields("The code is KX-55-TQ.", 6, "fp1", 5, False)
    assert same == logprob_fields("The code is KX-55-TQ.", 6, "fp1", 5, False)
    other = logprob_fields("The code is KX-55-TQ.", 6, "fp2", 5, False)
    assert [t[1] for t in same["output_token_logprobs"]] == [t[1] for t in other["output_token_logprobs"]]
    assert same["output_token_logprobs"] != other["output_token_logprobs"]
    top = same["output_top_logprobs"][0]
    assert len(top) == 5 and top[0][:2] == same["output_token_logprobs"][0][:2] and top[0][0] > top[1][0]
