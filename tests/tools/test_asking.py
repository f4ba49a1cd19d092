"""The `ask_user` tool's checks (SPEC §17), without a server: what the model may ask, which answers fit."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from vernis.tools.asking import AskUserArgs, InvalidAnswer, QuestionSpec, check_answers

QUESTIONS = [
    QuestionSpec(id="name", label="Name?", type="text", required=True),
    QuestionSpec(id="size", label="Size?", type="choice", options=["S", "M", "L"]),
    QuestionSpec(id="extras", label="Extras?", type="multi_choice", options=["a", "b", "c"]),
    QuestionSpec(id="count", label="How many?", type="number"),
    QuestionSpec(id="when", label="When?", type="date"),
    QuestionSpec(id="gift", label="A gift?", type="boolean"),
]


def test_valid_answers_are_normalised_and_unanswered_optional_ones_left_out() -> None:
    """Text is trimmed, multiple choices come in the order offered, a date stays ISO, and empty optional answers are left out."""
    answers = check_answers(
        QUESTIONS, {"name": "  Ada ", "extras": ["c", "a"], "count": 2.5, "when": "2026-02-03", "size": None}
    )
    assert answers == {"name": "Ada", "extras": ["a", "c"], "count": 2.5, "when": "2026-02-03"}


@pytest.mark.parametrize(
    ("answers", "named"),
    [
        pytest.param({}, "name", id="required-missing"),
        pytest.param({"name": ""}, "name", id="required-empty"),
        pytest.param({"name": 3}, "name", id="text-not-text"),
        pytest.param({"name": "x" * 2001}, "name", id="text-too-long"),
        pytest.param({"name": "A", "size": "XL"}, "size", id="option-not-offered"),
        pytest.param({"name": "A", "extras": ["a", "z"]}, "extras", id="multi-not-offered"),
        pytest.param({"name": "A", "extras": ["a", "a"]}, "extras", id="multi-twice"),
        pytest.param({"name": "A", "extras": "a"}, "extras", id="multi-not-a-list"),
        pytest.param({"name": "A", "count": "2"}, "count", id="number-as-text"),
        pytest.param({"name": "A", "count": False}, "count", id="number-boolean"),
        pytest.param({"name": "A", "when": "2026-02-30"}, "when", id="date-impossible"),
        pytest.param({"name": "A", "when": "2026-2-3"}, "when", id="date-not-iso"),
        pytest.param({"name": "A", "gift": "yes"}, "gift", id="boolean-as-text"),
        pytest.param({"name": "A", "other": 1}, "other", id="unknown-question"),
    ],
)
def test_an_answer_that_does_not_fit_names_its_question(answers: dict[str, Any], named: str) -> None:
    """Each kind of misfit raises InvalidAnswer carrying the question's id."""
    with pytest.raises(InvalidAnswer) as raised:
        check_answers(QUESTIONS, answers)
    assert raised.value.question_id == named
    assert raised.value.code == "invalid_message"


@pytest.mark.parametrize(
    "questions",
    [
        pytest.param([], id="none"),
        pytest.param([{"id": f"q{n}", "label": "?", "type": "text"} for n in range(9)], id="nine"),
        pytest.param([{"id": "c", "label": "?", "type": "choice"}], id="choice-without-options"),
        pytest.param([{"id": "c", "label": "?", "type": "choice", "options": ["a", "a"]}], id="option-twice"),
        pytest.param([{"id": "t", "label": "?", "type": "text", "options": ["a"]}], id="text-with-options"),
        pytest.param([{"id": "t", "label": "?", "type": "colour"}], id="unknown-type"),
        pytest.param([{"id": "bad id", "label": "?", "type": "text"}], id="bad-id"),
        pytest.param(
            [{"id": "t", "label": "A?", "type": "text"}, {"id": "t", "label": "B?", "type": "date"}],
            id="same-id",
        ),
    ],
)
def test_what_the_model_may_not_ask(questions: list[dict[str, Any]]) -> None:
    """No questions, more than eight, a choice without (or with repeated) options, options on a text question, an unknown type, a bad or repeated id: refused."""
    with pytest.raises(ValidationError):
        AskUserArgs.model_validate({"questions": questions})
