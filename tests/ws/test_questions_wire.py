"""The wire of questions (SPEC §17): `answer_question` as parsed, `question_required` and the error
naming a question as encoded. Plain code: no socket."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from vernis.conversation import events
from vernis.exceptions import InvalidMessage
from vernis.ws import protocol
from vernis.ws.encoder import encode

QUESTION = uuid.uuid4()


def frame(**fields: Any) -> str:
    return orjson.dumps({"type": "answer_question", "question_id": str(QUESTION), **fields}).decode()


def test_answers_and_a_cancel_parse() -> None:
    """answer_question carries either answers (any JSON values by question id) or cancelled: true."""
    answered = protocol.parse_command(
        frame(answers={"topic": "Renewal", "prepare": ["a"], "n": 2, "ok": True})
    )
    assert isinstance(answered, protocol.AnswerQuestion)
    assert answered.question_id == QUESTION
    assert answered.answers == {"topic": "Renewal", "prepare": ["a"], "n": 2, "ok": True}
    assert answered.cancelled is False
    cancelled = protocol.parse_command(frame(cancelled=True))
    assert isinstance(cancelled, protocol.AnswerQuestion)
    assert (cancelled.answers, cancelled.cancelled) == (None, True)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"question_id": "not-a-uuid", "answers": {}}, id="bad-id"),
        pytest.param({"answers": {f"q{n}": "x" for n in range(17)}}, id="too-many-answers"),
        pytest.param({"answers": {"q" * 65: "x"}}, id="key-too-long"),
        pytest.param({"answers": ["x"]}, id="answers-not-an-object"),
        pytest.param({"answers": {}, "extra": 1}, id="unknown-field"),
    ],
)
def test_malformed_answers_are_invalid_messages(fields: dict[str, Any]) -> None:
    """A frame that is not a well-formed answer_question is refused as invalid_message before any use-case runs."""
    with pytest.raises(InvalidMessage):
        protocol.parse_command(frame(**fields))


def test_question_required_and_an_error_naming_a_question_encode() -> None:
    """question_required carries the form and its expiry (with seq); an error naming a question carries question_id, other errors leave it out."""
    expires = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    questions = [{"id": "topic", "label": "About?", "type": "text", "required": True}]
    asked = orjson.loads(
        encode(events.QuestionRequired(QUESTION, "call_1", "Plan", questions, expires), seq=7)
    )
    assert asked == {
        "type": "question_required",
        "question_id": str(QUESTION),
        "call_id": "call_1",
        "title": "Plan",
        "questions": questions,
        "expires_at": "2026-01-02T03:04:05Z",
        "seq": 7,
    }
    untitled = orjson.loads(encode(events.QuestionRequired(QUESTION, "call_1", None, questions, expires)))
    assert "title" not in untitled
    named = orjson.loads(
        encode(events.ErrorOccurred("invalid_message", "Question 'topic': …", question_id="topic"))
    )
    assert named["question_id"] == "topic"
    plain = orjson.loads(encode(events.ErrorOccurred("not_found", "No such question.")))
    assert "question_id" not in plain
