"""What the services tell a socket: typed internal events, one class per thing that happened.

They are not wire frames. The socket layer's one encoder (`vernis.ws.encoder`) turns each into the
frame protocol v1 defines; the hub has that encoder injected, so an event published to many sockets
is encoded once. Services never see JSON.

An event of a conversation gets its `seq` from the hub when it is published; events sent to one
socket alone (a conversation list, a history replay, an error) get theirs from the sender.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from vernis.attachments import AttachmentInfo
from vernis.conversation.records import ConversationInfo, StoredMessage
from vernis.tools.reviews import ReviewInfo

__all__ = [
    "AnswerEnded",
    "AnswerStarted",
    "ClientToolCall",
    "ConfirmationRequired",
    "ConversationCompacted",
    "ConversationCreated",
    "ConversationList",
    "ConversationLoaded",
    "ErrorCode",
    "ErrorOccurred",
    "Event",
    "HistoryEnd",
    "HistoryMessage",
    "Pong",
    "QuestionRequired",
    "QuotaDetail",
    "ReasoningDelta",
    "ReviewList",
    "ReviewRequested",
    "ReviewRequired",
    "ReviewResolved",
    "TextDelta",
    "TitleUpdated",
    "ToolCallCompleted",
    "ToolCallStarted",
    "ToolStatus",
]

# `review_requested`: approved by its member, waiting for a reviewer (SPEC §23); `expired`: nobody
# answered it in time.
# `needs_answer`: an `ask_user` question waiting for the user's form (SPEC §17).
ToolStatus = Literal[
    "ok", "error", "needs_confirmation", "rejected", "review_requested", "expired", "needs_answer"
]
ErrorCode = Literal[
    "invalid_message",
    "message_too_long",
    "rate_limited",
    "response_in_progress",
    "not_found",
    "forbidden",
    "message_blocked",
    "quota_exceeded",
    "llm_not_configured",
    "llm_unavailable",
    "unavailable",
    "internal",
]


@dataclass(frozen=True, slots=True)
class ConversationLoaded:
    conversation_id: UUID | None
    title: str | None
    rolled_over_from: UUID | None = None
    # On a load with `after_seq`: True when exactly the missed events follow, False when the whole
    # history follows instead (the client redraws). None on a plain load.
    resumed: bool | None = None


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    message: StoredMessage
    # The files a user message carries (SPEC §21), in its order.
    attachments: tuple[AttachmentInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class HistoryEnd:
    conversation_id: UUID | None


@dataclass(frozen=True, slots=True)
class ConversationCreated:
    conversation_id: UUID


@dataclass(frozen=True, slots=True)
class ConversationList:
    conversations: list[ConversationInfo]
    next_before: str | None = None


@dataclass(frozen=True, slots=True)
class AnswerStarted:
    conversation_id: UUID
    message_id: UUID
    resumed: bool | None = None
    # True for an answer that continues the one before it (after a review's outcome), not a
    # later version of it; None otherwise.
    continues: bool | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    content: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Reasoning text the model streams (SPEC §19): shown folded, not part of the answer's text."""

    content: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    call_id: str
    tool_name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class ToolCallCompleted:
    call_id: str
    tool_name: str
    status: ToolStatus
    result: Any


@dataclass(frozen=True, slots=True)
class ConfirmationRequired:
    confirmation_id: UUID
    call_id: str
    tool_name: str
    preview: Any


@dataclass(frozen=True, slots=True)
class ClientToolCall:
    """To the one socket whose page runs it (SPEC §18): run this page tool, answer `call_id`."""

    call_id: str
    tool_name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class AnswerEnded:
    conversation_id: UUID
    message_id: UUID
    stopped: bool
    # The model that answered (the chat model or a fallback, SPEC §19); None: unknown.
    model: str | None = None


@dataclass(frozen=True, slots=True)
class TitleUpdated:
    conversation_id: UUID
    title: str


@dataclass(frozen=True, slots=True)
class ConversationCompacted:
    """The model reads the conversation up to `through_message_id` as a summary from now on (SPEC
    §19); the messages stay stored and shown."""

    conversation_id: UUID
    through_message_id: UUID


@dataclass(frozen=True, slots=True)
class QuotaDetail:
    """What a `quota_exceeded` error adds: which quota, its size, what was used, when it resets."""

    scope: Literal["member", "organization"]
    limit: int
    used: int
    reset_at: str


@dataclass(frozen=True, slots=True)
class ErrorOccurred:
    code: str  # one of `ErrorCode`: the socket layer refuses any other
    message: str
    retry_after_ms: int | None = None
    quota: QuotaDetail | None = None
    # An answer to a question that does not fit (SPEC §17): the question's id, its form shows it.
    question_id: str | None = None


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class ReviewRequested:
    """In the requester's conversation: the approved write on the card `call_id` waits for a reviewer."""

    review_id: UUID
    call_id: str
    tool_name: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ReviewRequired:
    """To the reviewers (their review channel): a new request waits for one of them."""

    review: ReviewInfo


@dataclass(frozen=True, slots=True)
class ReviewResolved:
    """To the reviewers: a request was answered (or expired) and leaves their lists."""

    review_id: UUID
    status: Literal["approved", "rejected", "expired"]


@dataclass(frozen=True, slots=True)
class ReviewList:
    reviews: list[ReviewInfo]


@dataclass(frozen=True, slots=True)
class QuestionRequired:
    """The assistant asks (SPEC §17): the form of `ask_user` call `call_id`, waiting for the user's
    `answer_question` until `expires_at`."""

    question_id: UUID
    call_id: str
    title: str | None
    questions: list[dict[str, Any]]
    expires_at: datetime


Event = (
    ConversationLoaded
    | HistoryMessage
    | HistoryEnd
    | ConversationCreated
    | ConversationList
    | AnswerStarted
    | TextDelta
    | ReasoningDelta
    | ToolCallStarted
    | ToolCallCompleted
    | ConfirmationRequired
    | ClientToolCall
    | AnswerEnded
    | TitleUpdated
    | ConversationCompacted
    | ErrorOccurred
    | Pong
    | ReviewRequested
    | ReviewRequired
    | ReviewResolved
    | ReviewList
    | QuestionRequired
)
