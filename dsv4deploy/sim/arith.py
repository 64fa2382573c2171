"""Arithmetic word problems, read and solved as a model would (the accuracy gate's built-in set).

The simulated model follows a story of quantities sentence by sentence: the first number is what
someone starts with; "N more" adds, "gives away / sells / loses / eats / spends N" subtracts, "N times
as many" multiplies, "equally among N" divides. It answers with its working and "The answer is X.",
as an instruction-following model does when asked to. A text it cannot follow is not a word problem
to it (``None``), and the other answers of the model apply.
"""

from __future__ import annotations

import re

from .recall import unit_hash

_NUMBER = re.compile(r"\b(\d+)\b")
_SENTENCE = re.compile(r"[^.?!]+[.?!]?")
_TAKE = re.compile(r"\b(gives away|sells|loses|eats|spends|uses)\b", re.IGNORECASE)


def solve(text: str) -> tuple[int, str] | None:
    """``(answer, working)`` of the word problem ``text`` asks ("How many ...?"), None if it is none."""
    if not re.search(r"\bhow (many|much)\b", text, re.IGNORECASE):
        return None
    total: int | None = None
    steps: list[str] = []
    for sentence in (s.strip() for s in _SENTENCE.findall(text)):
        numbers = [int(n) for n in _NUMBER.findall(sentence)]
        if not numbers:
            continue
        n = numbers[0]
        if total is None:
            total = n
            steps.append(f"Start with {n}.")
        elif "times as many" in sentence:
            steps.append(f"{total} x {n} = {total * n}.")
            total *= n
        elif "equally among" in sentence and n:
            steps.append(f"{total} / {n} = {total // n}.")
            total //= n
        elif _TAKE.search(sentence):
            steps.append(f"{total} - {n} = {total - n}.")
            total -= n
        elif re.search(r"\bmore\b", sentence):
            steps.append(f"{total} + {n} = {total + n}.")
            total += n
        else:
            return None  # a sentence it cannot follow: not a problem it can solve
    if total is None or len(steps) < 2:
        return None
    return total, " ".join(steps)


def answer_text(text: str, wrong_share: float = 0.0) -> str | None:
    """The model's answer to the word problem in ``text``; with ``wrong_share`` (the ``wrong_answers`` fault)
    that share of problems, chosen by the problem's text, comes out miscalculated by 1 to 9."""
    solved = solve(text)
    if solved is None:
        return None
    value, working = solved
    if wrong_share > 0 and unit_hash(text, "wrong") < wrong_share:
        value += 1 + int(unit_hash(text, "off-by") * 9)
    return f"{working} The answer is {value}."
