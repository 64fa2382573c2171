"""Question sets with exact answers for the accuracy gate: a built-in generated set, or the operator's JSONL.

The built-in set is a few hundred arithmetic word problems with integer answers, generated here from a
seed (the same seed gives the same set on every controller), one to three steps each: a smoke-level check
that a release still computes, not a benchmark. The operator's JSONL has one ``{"question", "answer"}``
object per line; GSM8K's test split works as is (its answer ends with ``#### <number>``).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

BUILTIN = "builtin"
BUILTIN_SIZE = 300
_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Keiko", "Liam",
          "Mina", "Noah", "Olga", "Pablo")
_ITEMS = ("apples", "marbles", "stamps", "books", "pencils", "cards", "shells", "coins", "stickers", "buttons")
_ADD = ("{P} buys {n} more {item}.", "{P} finds {n} more {item}.", "A friend gives {o} {n} more {item}.")
_TAKE = ("{P} gives away {n} {item}.", "{P} sells {n} {item}.", "{P} loses {n} {item}.")
#: Told to every model, so that its answer ends with a number to read.
INSTRUCTION = "Solve the problem. End your answer with 'The answer is N.' where N is a number."
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Question:
    """One question and its exact answer."""

    question: str
    answer: str


def builtin_questions(count: int = BUILTIN_SIZE, seed: int = 0) -> list[Question]:
    """``count`` generated word problems (deterministic for a ``seed``), with integer answers."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        name = rng.choice(_NAMES)
        she = rng.random() < 0.5
        fill = {"P": "She" if she else "He", "o": "her" if she else "him", "item": rng.choice(_ITEMS)}
        total = rng.randint(6, 60)
        lines = [f"{name} has {total} {fill['item']}."]
        for _step in range(rng.randint(1, 3)):
            kind = rng.random()
            if kind < 0.4:
                n = rng.randint(2, 40)
                lines.append(rng.choice(_ADD).format(n=n, **fill))
                total += n
            elif kind < 0.75 and total > 2:
                n = rng.randint(1, total - 1)
                lines.append(rng.choice(_TAKE).format(n=n, **fill))
                total -= n
            else:
                n = rng.randint(2, 4)
                lines.append(f"Later {fill['P'].lower()} ends up with {n} times as many {fill['item']} as before.")
                total *= n
        divisors = [k for k in (2, 3, 4, 5) if total % k == 0]
        if divisors and rng.random() < 0.3:
            k = rng.choice(divisors)
            lines.append(f"{fill['P']} shares them equally among {k} friends.")
            lines.append(f"How many {fill['item']} does each friend get?")
            total //= k
        else:
            lines.append(f"How many {fill['item']} does {name} have now?")
        out.append(Question(" ".join(lines), str(total)))
    return out


class QuestionSetError(ValueError):
    """A question file that cannot be used; the message names the file, the line and the fix."""


def load_jsonl(path: str | Path) -> list[Question]:
    """Questions of a JSONL file: ``{"question": ..., "answer": ...}`` per line (GSM8K's format works)."""
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise QuestionSetError(f"accuracy_questions: cannot read {file}: {exc.strerror}; fix: give the path of a "
                               "JSONL file on the controller") from None
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise QuestionSetError(f"accuracy_questions: {file} line {number} is not JSON ({exc})") from None
        if not isinstance(row, dict) or "question" not in row or "answer" not in row:
            raise QuestionSetError(f"accuracy_questions: {file} line {number} needs 'question' and 'answer' "
                                   f"(got {sorted(row) if isinstance(row, dict) else type(row).__name__})")
        out.append(Question(str(row["question"]), expected_answer(str(row["answer"]))))
    if not out:
        raise QuestionSetError(f"accuracy_questions: {file} holds no question")
    return out


def question_set(source: str, count: int, seed: int = 0) -> list[Question]:
    """The first ``count`` questions of ``source``: ``builtin`` or a JSONL path."""
    if source == BUILTIN:
        return builtin_questions(count, seed)
    return load_jsonl(source)[:count]


def expected_answer(answer: str) -> str:
    """The exact answer of a reference answer: what follows GSM8K's ``####``, else the text, normalised."""
    if "####" in answer:
        answer = answer.rsplit("####", 1)[1]
    return _normal(answer.strip())


def extract_answer(text: str) -> str | None:
    """The answer a model gave: after ``####`` or "answer is" when present, else its last number."""
    for marker in ("####", "answer is"):
        if marker in text.lower():
            tail = text[text.lower().rindex(marker) + len(marker):]
            found = _NUMBER.search(tail)
            if found:
                return _normal(found.group(0))
    numbers = _NUMBER.findall(text)
    return _normal(numbers[-1]) if numbers else None


def _normal(value: str) -> str:
    """``1,234.00`` -> ``1234``: numbers compared by value, other text as is."""
    clean = value.replace(",", "").rstrip(".").strip()
    try:
        number = float(clean)
    except ValueError:
        return clean
    return str(int(number)) if number.is_integer() else str(number)
