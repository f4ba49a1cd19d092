"""What the conversation store hands out and takes in: its plain records (`ConversationInfo`,
`StoredMessage`, `MessageUpdate`), the errors a write may raise (`DuplicateClientMessage`,
`ConversationFull`), and the conversation list's cursor.

Records are frozen dataclasses with no tie to the database: they cross from the store to the
sessions, the answers and the socket layer. `vernis.conversation.store` exports them too, beside
the store that makes them.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from vernis.exceptions import InvalidMessage, VernisError

__all__ = [
    "CONTINUATION_PREFIX",
    "ConversationFull",
    "ConversationInfo",
    "DuplicateClientMessage",
    "MessageUpdate",
    "StoredMessage",
    "continues",
    "decode_cursor",
    "encode_cursor",
]


# The `client_message_id` of an answer Vernis started after a decision taken elsewhere (a review's
# outcome, `vernis.session.send.continue_answer`): it continues the answer before it, it is not a
# version of it. Made by the server, once per decision (the id is unique in its conversation).
CONTINUATION_PREFIX = "vernis:continue:"


def continues(message: object) -> bool:
    """Whether a stored message is an answer that continues the one before it (`CONTINUATION_PREFIX`)."""
    client_message_id = getattr(message, "client_message_id", None)
    return isinstance(client_message_id, str) and client_message_id.startswith(CONTINUATION_PREFIX)


class DuplicateClientMessage(VernisError):
    """`add_message` was given a `client_message_id` this conversation already holds; nothing was stored.

    The client resent a message (reconnect, retry): the connection answers it once, using
    `message_id`, the message stored the first time.
    """

    def __init__(self, conversation_id: UUID, client_message_id: str, message_id: UUID) -> None:
        super().__init__()
        self.conversation_id = conversation_id
        self.client_message_id = client_message_id
        self.message_id = message_id


class ConversationFull(VernisError):
    """`add_exchange` with a `limit` found the conversation full; nothing was stored (roll over)."""

    def __init__(self, conversation_id: UUID) -> None:
        super().__init__()
        self.conversation_id = conversation_id


@dataclass(frozen=True, slots=True)
class MessageUpdate:
    """An answer's row as it stands: its text, tool calls, status, and token counts when known."""

    message_id: UUID
    content: str
    tool_calls: list[dict[str, Any]] | None
    status: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # The reasoning streamed so far; None keeps what is stored.
    reasoning: str | None = None
    # The model that answered, when not the one stored with the row (a fallback took over); None
    # keeps what is stored.
    model: str | None = None


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    id: UUID
    organization_id: UUID
    member_id: UUID
    title: str | None
    previous_conversation_id: UUID | None
    message_count: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: UUID
    conversation_id: UUID
    position: int
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None
    status: str
    client_message_id: str | None
    created_at: datetime
    # The model's streamed reasoning, stored with the answer (SPEC §19); never sent back to it.
    reasoning: str | None = None


def encode_cursor(conversation: ConversationInfo) -> str:
    """The cursor of the page that follows `conversation` in the list (by `updated_at`, then `id`)."""
    raw = f"{conversation.updated_at.isoformat()}|{conversation.id.hex}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """The `updated_at` and `id` a cursor names; `InvalidMessage` for a malformed one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, hex_id = raw.split("|")
        updated_at = datetime.fromisoformat(stamp)
        conversation_id = UUID(hex=hex_id)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidMessage("The conversation list cursor is not valid.") from None
    if updated_at.tzinfo is None:
        raise InvalidMessage("The conversation list cursor is not valid.")
    return updated_at, conversation_id
