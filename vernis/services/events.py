"""What the services tell a socket: typed internal events, one class per thing that happened.

They are not wire frames. The socket layer's one encoder (`vernis.ws.encoder`) turns each into the
frame protocol v1 defines; the hub has that encoder injected, so an event published to many sockets
is encoded once. Services never see JSON.

An event of a conversation gets its `seq` from the hub when it is published; events sent to one
socket alone (a conversation list, a history replay, an error) get theirs from the sender.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

from vernis.services.persistence import ConversationInfo, StoredMessage

__all__ = [
    "AnswerEnded",
    "AnswerStarted",
    "ConfirmationRequired",
    "ConversationCreated",
    "ConversationList",
    "ConversationLoaded",
    "ErrorCode",
    "ErrorOccurred",
    "Event",
    "HistoryEnd",
    "HistoryMessage",
    "Pong",
    "QuotaDetail",
    "TextDelta",
    "TitleUpdated",
    "ToolCallCompleted",
    "ToolCallStarted",
    "ToolStatus",
]

ToolStatus = Literal["ok", "error", "needs_confirmation", "rejected"]
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


@dataclass(frozen=True, slots=True)
class TextDelta:
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
class AnswerEnded:
    conversation_id: UUID
    message_id: UUID
    stopped: bool


@dataclass(frozen=True, slots=True)
class TitleUpdated:
    conversation_id: UUID
    title: str


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


@dataclass(frozen=True, slots=True)
class Pong:
    pass


Event = (
    ConversationLoaded
    | HistoryMessage
    | HistoryEnd
    | ConversationCreated
    | ConversationList
    | AnswerStarted
    | TextDelta
    | ToolCallStarted
    | ToolCallCompleted
    | ConfirmationRequired
    | AnswerEnded
    | TitleUpdated
    | ErrorOccurred
    | Pong
)
