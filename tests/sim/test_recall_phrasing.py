"""The simulated model recalls facts the way a model does, in wordings the needle gate never uses.

Facts are plain sentences carrying a distinctive value (a code, a number, a name); questions share
content words with them. Whether a fact is seen still follows the documented recall curves
(dsv4deploy/sim/README.md): the sliding window, else the indexer's selection by context length.
"""

from __future__ import annotations

import pytest

from dsv4deploy.sim.model import NOT_FOUND, generate
from dsv4deploy.sim.recall import compute_kv
from dsv4deploy.sim.tokenizer import count_tokens

# Filler of this file's own making, with no distinctive values in it.
FILLER = ("Gulls circled the pier while fishermen mended their nets and argued about the weather. "
          "Across the square a baker stacked loaves on a cart and whistled an old tune. ")

# (fact, question): wordings, values and question shapes that dsv4deploy.gates.haystack never writes.
HELD_OUT = [
    ("The lease for the boathouse was signed by Maren Solberg in March.",
     "Who signed the lease for the boathouse?", "Maren Solberg"),
    ("Our vault combination, as agreed on Tuesday, is 90417.",
     "Could you remind me what our vault combination was?", "90417"),
    ("Shipment tracking label KX-5521-TQ is attached to the blue pallet.",
     "Which tracking label is on the blue pallet?", "KX-5521-TQ"),
    ("Last winter the ferry company raised the harbour toll to 2350 crowns.",
     "How many crowns is the harbour toll after the ferry company raised it?", "2350"),
    ("Remember that the greenhouse alarm code is QT-88-LM, not the old one.",
     "Give me the greenhouse alarm code, please.", "QT-88-LM"),
]


def ask(prompt: str, topk: int = 1024) -> str:
    """The simulated model's answer to one user message (chat markers included in the count)."""
    kv = compute_kv(prompt, count_tokens(prompt) + 3)
    return generate(kv, prompt, index_topk=topk).text


def padded(fact: str, question: str, tokens: int, depth: float) -> str:
    """``fact`` at ``depth`` of about ``tokens`` tokens of filler, ``question`` on the last line."""
    per = count_tokens(FILLER)
    blocks = [FILLER] * max(1, tokens // per)
    at = round(depth * len(blocks))
    return "".join(blocks[:at]) + fact + " " + "".join(blocks[at:]) + "\n" + question


@pytest.mark.parametrize(("fact", "question", "value"), HELD_OUT)
def test_a_fact_in_its_own_words_is_recalled_when_visible(fact: str, question: str, value: str) -> None:
    assert ask(padded(fact, question, 1000, 0.3)) == value  # 1K tokens, index_topk 1024: always selected
    assert ask(padded(fact, question, 1000, 0.3), topk=512) == value  # 512 is reliable up to 2K too


@pytest.mark.parametrize(("fact", "question", "value"), HELD_OUT)
def test_recall_follows_the_documented_curves(fact: str, question: str, value: str) -> None:
    far = padded(fact, question, 11000, 0.2)  # beyond 9728: lost even with 1024
    assert value not in ask(far)
    assert value not in ask(padded(fact, question, 5000, 0.2), topk=512)  # beyond 4096 with 512
    assert ask(padded(fact, question, 5000, 0.2)) == value  # within 6144 with 1024
    assert ask(padded(fact, question, 11000, 1.0)) == value  # the last 128 tokens: the sliding window


def test_a_question_about_something_else_is_not_answered_with_the_fact() -> None:
    fact, _, value = HELD_OUT[0]
    answer = ask(padded(fact, "Who repaired the chimney of the bakery?", 800, 0.5))
    assert value not in answer and answer == NOT_FOUND


def test_the_best_matching_fact_wins_among_several() -> None:
    prompt = (FILLER + HELD_OUT[1][0] + " " + FILLER + "The gym locker combination is 55102. " + FILLER
              + "\nWhat is the gym locker combination?")
    assert ask(prompt) == "55102"


def test_instructions_that_ask_nothing_fall_through_to_the_other_behaviours() -> None:
    assert ask("Say OK") == "OK"
    assert HELD_OUT[2][2] not in ask(f"{HELD_OUT[2][0]}\nThanks for the update on the pallets.")


@pytest.mark.parametrize(("fact", "question", "value"), HELD_OUT[:2])
def test_a_question_followed_by_how_to_answer_is_answered(fact: str, question: str, value: str) -> None:
    # The accuracy gate's form: the question, then a line that only says how to answer.
    how = "Solve the problem. End your answer with 'The answer is N.' where N is a number."
    assert ask(padded(fact, question, 800, 0.5) + "\n" + how) == value
    # Only the line before: a fact stated two lines up is not a question.
    assert value not in ask(f"{question}\nThanks for the update on the pallets.\n{how}")
