"""The events of wire protocol v1 (SPEC §3), server to client: one closed union (`Event`), built
by the one encoder (`vernis.ws.encoder`) from the services' internal events. Optional fields that are
unset are left out of a frame; a required field that is null stays."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from vernis.conversation.events import ErrorCode

__all__ = [
    "AssistantEnd",
    "AssistantStart",
    "AttachmentRef",
    "ClientToolCall",
    "ConfirmationRequired",
    "ConversationCompacted",
    "ConversationCreated",
    "ConversationList",
    "ConversationListItem",
    "ConversationLoaded",
    "ErrorEvent",
    "Event",
    "HistoryEnd",
    "HistoryMessage",
    "Pong",
    "QuestionRequired",
    "ReasoningDelta",
    "ReviewItem",
    "ReviewList",
    "ReviewRequested",
    "ReviewRequired",
    "ReviewResolved",
    "TextDelta",
    "TitleUpdated",
    "ToolCallCompleted",
    "ToolCallStarted",
    "decode_event",
    "encode_text_delta",
]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Optional fields (default None) are left out when unset; a required field that is null
        # (`conversation_id` of a pending conversation) stays, as the protocol says.
        data: dict[str, Any] = handler(self)
        for name in _optional_fields(type(self)):
            if name in data and data[name] is None:
                del data[name]
        return data


@functools.cache
def _optional_fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(
        name for name, info in model.model_fields.items() if not info.is_required() and info.default is None
    )


# --- server → client -------------------------------------------------------------------------


class _ConversationEvent(_Event):
    # Grows within a conversation (SPEC §3); set by whoever publishes the event.
    seq: int | None = None


class ConversationLoaded(_ConversationEvent):
    type: Literal["conversation_loaded"] = "conversation_loaded"
    conversation_id: UUID | None
    title: str | None
    rolled_over_from: UUID | None = None
    # On a load with `after_seq`: true when exactly the missed events follow, false when the whole
    # history follows instead (the replay window no longer covers the gap: redraw).
    resumed: bool | None = None


class AttachmentRef(_Event):
    attachment_id: UUID
    name: str
    media_type: str
    size: int
    kind: Literal["image", "document", "text"]


class HistoryMessage(_ConversationEvent):
    type: Literal["history_message"] = "history_message"
    message_id: UUID
    role: Literal["user", "assistant"]
    content: str
    # A user message's files (SPEC §21); left out when it has none.
    attachments: list[AttachmentRef] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    status: str | None = None
    # The reasoning the model streamed with this answer (SPEC §19); left out when none was stored.
    reasoning: str | None = None
    # An answer that continues the one before it (it came after a review's outcome), not a later
    # version of it; left out otherwise.
    continues: bool | None = None
    created_at: datetime


class HistoryEnd(_ConversationEvent):
    type: Literal["history_end"] = "history_end"
    conversation_id: UUID | None


class ConversationCreated(_ConversationEvent):
    type: Literal["conversation_created"] = "conversation_created"
    conversation_id: UUID


class ConversationListItem(_Event):
    conversation_id: UUID
    title: str | None
    updated_at: datetime
    # The messages it shows: earlier versions (an answer written again, an edited exchange) not counted.
    message_count: int


class ConversationList(_Event):
    type: Literal["conversation_list"] = "conversation_list"
    conversations: list[ConversationListItem]
    next_before: str | None = None


class AssistantStart(_ConversationEvent):
    type: Literal["assistant_start"] = "assistant_start"
    conversation_id: UUID
    message_id: UUID
    resumed: bool | None = None
    # An answer that continues the one before it (it came after a review's outcome), not a later
    # version of it; left out otherwise.
    continues: bool | None = None


class TextDelta(_ConversationEvent):
    type: Literal["text_delta"] = "text_delta"
    content: str


class ReasoningDelta(_ConversationEvent):
    """The model's reasoning as it streams (SPEC §19), apart from the answer's text."""

    type: Literal["reasoning_delta"] = "reasoning_delta"
    content: str


class ToolCallStarted(_ConversationEvent):
    type: Literal["tool_call_started"] = "tool_call_started"
    call_id: str
    tool_name: str
    arguments: Any


class ToolCallCompleted(_ConversationEvent):
    type: Literal["tool_call_completed"] = "tool_call_completed"
    call_id: str
    tool_name: str
    status: Literal[
        "ok", "error", "needs_confirmation", "rejected", "review_requested", "expired", "needs_answer"
    ]
    result: Any
    # The result's UI blocks (SPEC §16), checked by the server; left out when it has none.
    ui: list[dict[str, Any]] | None = None


class ConfirmationRequired(_ConversationEvent):
    type: Literal["confirmation_required"] = "confirmation_required"
    confirmation_id: UUID
    call_id: str
    tool_name: str
    preview: Any


class ClientToolCall(_Event):
    """To the socket whose page runs it (SPEC §18), and to no other: run the page's tool
    `tool_name` with `arguments` (already checked against its schema; a write, already approved)
    and answer with `client_tool_result` for `call_id`."""

    type: Literal["client_tool_call"] = "client_tool_call"
    call_id: str
    tool_name: str
    arguments: Any


class AssistantEnd(_ConversationEvent):
    type: Literal["assistant_end"] = "assistant_end"
    conversation_id: UUID
    message_id: UUID
    stopped: bool
    # The model that answered: the chat model, or the `[[model.fallbacks]]` entry that took over.
    model: str | None = None


class TitleUpdated(_ConversationEvent):
    type: Literal["title_updated"] = "title_updated"
    conversation_id: UUID
    title: str


class ConversationCompacted(_ConversationEvent):
    """From now on the model reads the conversation up to `through_message_id` as a summary; live,
    and in a history replay before the first message after it (SPEC §19)."""

    type: Literal["conversation_compacted"] = "conversation_compacted"
    conversation_id: UUID
    through_message_id: UUID


class ErrorEvent(_ConversationEvent):
    type: Literal["error"] = "error"
    code: ErrorCode
    message: str
    retry_after_ms: int | None = None
    # `invalid_message` for an `answer_question` (SPEC §17): the question whose answer does not fit.
    question_id: str | None = None
    # `quota_exceeded` only (SPEC §15): which quota ("member" per day, "organization" per month), its
    # size and what was used, in tokens, and when it resets (ISO 8601, UTC).
    scope: Literal["member", "organization"] | None = None
    limit: int | None = None
    used: int | None = None
    reset_at: str | None = None


class Pong(_Event):
    type: Literal["pong"] = "pong"


class ReviewRequested(_ConversationEvent):
    """The requester's conversation: the write its member approved on card `call_id` is not run; it
    waits for a reviewer until `expires_at` ("waiting for a reviewer"; history replay shows the card's
    status `review_requested`). Its end comes as the card's `tool_call_completed`."""

    type: Literal["review_requested"] = "review_requested"
    review_id: UUID
    call_id: str
    tool_name: str
    expires_at: datetime


class ReviewItem(_Event):
    """A review request as reviewers see it: the write, its preview, who asked and when."""

    review_id: UUID
    tool_name: str
    arguments: Any
    preview: Any
    requester_name: str | None = None
    created_at: datetime
    expires_at: datetime


class ReviewRequired(_Event):
    """Pushed to every socket of a member who may review it (same organization, the reviewer
    permission), on any instance: a new review request."""

    type: Literal["review_required"] = "review_required"
    review: ReviewItem


class ReviewResolved(_Event):
    """Pushed to the same sockets as `review_required`: the request was answered or expired, and
    leaves their lists."""

    type: Literal["review_resolved"] = "review_resolved"
    review_id: UUID
    status: Literal["approved", "rejected", "expired"]


class ReviewList(_Event):
    """The reply to `list_reviews`."""

    type: Literal["review_list"] = "review_list"
    reviews: list[ReviewItem]


class QuestionRequired(_ConversationEvent):
    """The assistant asks (SPEC §17): draw the form of `ask_user` call `call_id`. `questions`:
    [{`id`, `label`, `type` (`text`, `choice`, `multi_choice`, `number`, `date`, `boolean`),
    `options`? (the choice types'), `required`}]. The answer that asked ends; the user answers with
    `answer_question` until `expires_at`, and history replay shows the form again until then (the
    call's `status` `needs_answer`, its `question` record)."""

    type: Literal["question_required"] = "question_required"
    question_id: UUID
    call_id: str
    title: str | None = None
    questions: list[dict[str, Any]]
    expires_at: datetime


Event = (
    ConversationLoaded
    | HistoryMessage
    | HistoryEnd
    | ConversationCreated
    | ConversationList
    | AssistantStart
    | TextDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolCallCompleted
    | ConfirmationRequired
    | ClientToolCall
    | AssistantEnd
    | TitleUpdated
    | ConversationCompacted
    | ErrorEvent
    | Pong
    | ReviewRequested
    | ReviewRequired
    | ReviewResolved
    | ReviewList
    | QuestionRequired
)

_event_adapter: TypeAdapter[Event] = TypeAdapter(Event)


def encode_text_delta(content: str, seq: int) -> str:
    """The hot path: a `text_delta` frame built without a model round trip."""
    return orjson.dumps({"type": "text_delta", "content": content, "seq": seq}).decode()


def decode_event(frame: str | bytes) -> Event:
    """Parse a server frame back into an event (tests and the replay buffer use it)."""
    return _event_adapter.validate_json(frame)
