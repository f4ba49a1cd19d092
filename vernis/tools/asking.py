"""The built-in `ask_user` tool (SPEC §17): what the model may ask, and which answers fit.

Plain code, no storage and no socket. `AskUserArgs` checks what the model asks (at most
`MAX_QUESTIONS` questions, ids unique, the choice types with their options); `check_answers` checks
what the user answered against it (types, offered options, required answers) and returns the
answers as the model will read them, or raises `InvalidAnswer` naming the first question that does
not fit. `ASK_USER` is the tool itself, offered to every member (`assistant:use`) unless the
configuration says `[assistant] ask_user = false`; the tool runner stores its questions instead of
running it (`vernis.tools.questions`).
"""

from __future__ import annotations

import math
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from vernis.exceptions import InvalidMessage
from vernis.identity.members import ASSISTANT_USE
from vernis.tools.base import Tool, ToolContext, ToolFailure

__all__ = [
    "ASK_USER",
    "MAX_ANSWER_CHARS",
    "MAX_OPTIONS",
    "MAX_QUESTIONS",
    "AskUserArgs",
    "InvalidAnswer",
    "QuestionSpec",
    "check_answers",
]

MAX_QUESTIONS = 8
MAX_OPTIONS = 20
MAX_ANSWER_CHARS = 2000
CHOICE_TYPES = frozenset({"choice", "multi_choice"})

QuestionType = Literal["text", "choice", "multi_choice", "number", "date", "boolean"]


class QuestionSpec(BaseModel):
    """One question of the form: `id` names its answer, `label` is what the user reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] = Field(
        description="A short key for the answer, such as 'due_date' (letters, digits, _ . -)."
    )
    label: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300)] = Field(
        description="The question as the user reads it."
    )
    type: QuestionType = Field(
        description="text, choice (one option), multi_choice (any options), number, date or boolean (yes/no)."
    )
    options: (
        list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]] | None
    ) = Field(default=None, max_length=MAX_OPTIONS, description="The options of a choice or multi_choice.")
    required: bool = Field(default=False, description="Whether the user must answer it.")

    @model_validator(mode="after")
    def _options_fit_the_type(self) -> QuestionSpec:
        if self.type in CHOICE_TYPES:
            if not self.options:
                raise ValueError(f"question {self.id!r} of type {self.type} needs options")
            if len(set(self.options)) != len(self.options):
                raise ValueError(f"question {self.id!r} offers the same option twice")
        elif self.options:
            raise ValueError(f"question {self.id!r} of type {self.type} takes no options")
        return self


class AskUserArgs(BaseModel):
    """The arguments of `ask_user`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] | None = Field(
        default=None, description="A short heading for the form."
    )
    questions: list[QuestionSpec] = Field(min_length=1, max_length=MAX_QUESTIONS)

    @model_validator(mode="after")
    def _ids_are_unique(self) -> AskUserArgs:
        ids = [question.id for question in self.questions]
        if len(set(ids)) != len(ids):
            raise ValueError("two questions have the same id")
        return self


class InvalidAnswer(InvalidMessage):
    """An answer that does not fit its question: `invalid_message`, naming the question
    (`question_id`); the question stays open."""

    def __init__(self, question_id: str, problem: str) -> None:
        super().__init__(f"Question {question_id!r}: {problem}")
        self.question_id = question_id


def _empty(value: Any) -> bool:
    return value is None or value == [] or (isinstance(value, str) and not value.strip())


def _one(question: QuestionSpec, value: Any) -> Any:
    """`value` as the answer to `question`, or raises `InvalidAnswer`."""
    kind = question.type
    if kind == "text":
        if not isinstance(value, str):
            raise InvalidAnswer(question.id, "the answer must be text.")
        if len(value) > MAX_ANSWER_CHARS:
            raise InvalidAnswer(question.id, f"the answer can be at most {MAX_ANSWER_CHARS:,} characters.")
        return value.strip()
    if kind == "choice":
        if not isinstance(value, str) or value not in (question.options or ()):
            raise InvalidAnswer(question.id, "choose one of the options offered.")
        return value
    if kind == "multi_choice":
        offered = question.options or ()
        if not isinstance(value, list) or not all(
            isinstance(item, str) and item in offered for item in value
        ):
            raise InvalidAnswer(question.id, "choose among the options offered.")
        if len(set(value)) != len(value):
            raise InvalidAnswer(question.id, "an option is chosen twice.")
        # In the order offered, whatever order the form sent them in.
        return [option for option in offered if option in value]
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InvalidAnswer(question.id, "the answer must be a number.")
        return value
    if kind == "date":
        try:
            if not isinstance(value, str) or len(value) != 10:
                raise ValueError
            return date.fromisoformat(value).isoformat()
        except ValueError:
            raise InvalidAnswer(question.id, "the answer must be a date (YYYY-MM-DD).") from None
    if not isinstance(value, bool):
        raise InvalidAnswer(question.id, "the answer must be yes or no (true or false).")
    return value


def check_answers(questions: list[QuestionSpec], answers: dict[str, Any]) -> dict[str, Any]:
    """The answers to `questions` as the model reads them (id -> value; an unanswered optional
    question is left out), or raises `InvalidAnswer` for the first one that does not fit: an
    unknown id, a wrong type, an option not offered, a required answer missing."""
    known = {question.id for question in questions}
    for key in answers:
        if key not in known:
            raise InvalidAnswer(key[:64], "there is no such question.")
    checked: dict[str, Any] = {}
    for question in questions:
        value = answers.get(question.id)
        if _empty(value):
            if question.required:
                raise InvalidAnswer(question.id, "an answer is required.")
            continue
        checked[question.id] = _one(question, value)
    return checked


async def _asked(ctx: ToolContext[Any], args: AskUserArgs) -> Any:
    # The tool runner stores the questions and ends the answer (`ToolRunner`); never run as such.
    raise ToolFailure("unavailable", "Questions cannot be asked here.", hint="Ask in your answer instead.")


ASK_USER = Tool(
    name="ask_user",
    category="Conversation",
    description=(
        "Ask the user one or more questions in a form when you need facts or choices only they can "
        "give, instead of guessing. Your answer ends there; the user's answers come back as this "
        "tool's result and you go on."
    ),
    args=AskUserArgs,
    permission=ASSISTANT_USE,
    writes=False,
    run=_asked,
    toolkit="vernis",
)
