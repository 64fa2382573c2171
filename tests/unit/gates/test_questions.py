"""The accuracy gate's question sets: the built-in generator, the JSONL loader, answer reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsv4deploy.gates.questions import (
    QuestionSetError,
    builtin_questions,
    expected_answer,
    extract_answer,
    load_jsonl,
    question_set,
)


def test_the_builtin_set_is_the_same_for_a_seed_and_has_integer_answers() -> None:
    first, again, other = builtin_questions(300, 0), builtin_questions(300, 0), builtin_questions(300, 1)
    assert first == again and first != other and len({q.question for q in first}) > 250
    assert all(int(q.answer) >= 0 and q.question.rstrip().endswith("?") for q in first)


def test_gsm8k_lines_load_with_the_answer_after_the_marks(tmp_path: Path) -> None:
    file = tmp_path / "test.jsonl"
    file.write_text('{"question": "Q1?", "answer": "2 + 2 = 4\\n#### 1,204"}\n\n{"question": "Q2?", "answer": "7"}\n')
    assert [(q.question, q.answer) for q in load_jsonl(file)] == [("Q1?", "1204"), ("Q2?", "7")]
    assert len(question_set(str(file), 1)) == 1


@pytest.mark.parametrize(("text", "named"), [('{"question": "x"}', "line 1 needs 'question' and 'answer'"),
                                             ("not json", "line 1 is not JSON"), ("", "holds no question")])
def test_a_bad_file_is_refused_naming_the_line(tmp_path: Path, text: str, named: str) -> None:
    file = tmp_path / "q.jsonl"
    file.write_text(text)
    with pytest.raises(QuestionSetError, match=named):
        load_jsonl(file)


def test_a_missing_file_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(QuestionSetError, match="accuracy_questions: cannot read"):
        load_jsonl(tmp_path / "absent.jsonl")


@pytest.mark.parametrize(("text", "answer"), [("5 + 3 = 8. The answer is 8.", "8"), ("so #### 1,234", "1234"),
                                              ("It is 12, then 40", "40"), ("The answer is 7.0", "7"),
                                              ("no number", None)])
def test_the_answer_a_model_gave_is_read_as_a_number(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


def test_expected_answers_compare_by_value() -> None:
    assert expected_answer("#### 3,000") == "3000" == extract_answer("The answer is 3000.")
