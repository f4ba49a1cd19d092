"""The conversation store's SQL: the statements it builds once, for its hot paths, and the pieces
its queries share.

Built once (per shape, for `take_positions`): constructing a statement costs more than SQLite
running it. Nothing here runs a statement; `vernis.conversation.store` does.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from vernis.conversation.records import CONTINUATION_PREFIX, ConversationInfo, MessageUpdate, StoredMessage
from vernis.store.models import (
    Conversation,
    Member,
    Message,
    MessageRole,
    MessageStatus,
    UTCDateTime,
    table_of,
)

__all__ = [
    "CLIENT_MESSAGE",
    "CONVERSATION_COLUMNS",
    "CONVERSATION_EXISTS",
    "GET_CONVERSATION",
    "HAS_CLIENT_MESSAGE",
    "HAS_MESSAGE",
    "INSERT_CONVERSATION",
    "INSERT_MESSAGE",
    "LISTED_COLUMNS",
    "MEMBER_IN_ORGANIZATION",
    "MESSAGE_COLUMNS",
    "NO_LIMIT",
    "OWNED_CONVERSATION",
    "ROLES",
    "SET_TITLE",
    "STATUSES",
    "UPDATE_ANSWER",
    "NewMessage",
    "answer_rows",
    "check_status",
    "conversation_info",
    "exchange_at_once",
    "exchange_parameters",
    "owned_by",
    "stored_message",
    "take_positions",
]

_conversation = table_of(Conversation)
_message = table_of(Message)
_member = table_of(Member)

# One statement for every answer update (built once: no statement construction per flush). Token
# counts left NULL in the parameters keep what is stored.
# Only a row still `streaming` is written: an answer whose lease was taken over (its instance was
# cut off, another one stored it as failed) can no longer change it. This is the lease's fence.
UPDATE_ANSWER = (
    sa.update(_message)
    .where(_message.c.id == sa.bindparam("answer_id"))
    .where(_message.c.status == MessageStatus.STREAMING.value)
    .values(
        content=sa.bindparam("content"),
        tool_calls_json=sa.bindparam("tool_calls_json", type_=_message.c.tool_calls_json.type),
        status=sa.bindparam("status"),
        prompt_tokens=sa.func.coalesce(
            sa.bindparam("prompt_tokens", type_=sa.Integer()), _message.c.prompt_tokens
        ),
        completion_tokens=sa.func.coalesce(
            sa.bindparam("completion_tokens", type_=sa.Integer()), _message.c.completion_tokens
        ),
        reasoning=sa.func.coalesce(sa.bindparam("reasoning", type_=sa.Text()), _message.c.reasoning),
        model=sa.func.coalesce(sa.bindparam("model", type_=_message.c.model.type), _message.c.model),
        updated_at=sa.bindparam("updated_at", type_=UTCDateTime()),
    )
)


def answer_rows(updates: Sequence[MessageUpdate], now: datetime) -> list[dict[str, Any]]:
    """The parameters of `UPDATE_ANSWER`, one set per answer."""
    return [
        {
            "answer_id": u.message_id,
            "content": u.content,
            "tool_calls_json": u.tool_calls,
            "status": str(u.status),
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "reasoning": u.reasoning,
            "model": u.model,
            "updated_at": now,
        }
        for u in updates
    ]


@functools.cache
def take_positions(count: int, below_limit: bool) -> sa.Update:
    """Take the next `count` positions of a conversation (only while it holds fewer than the bound
    parameter `limit`, with `below_limit`): its `message_count` and `updated_at` move, never
    backwards (a concurrent add that read the clock later may have committed first). Built once per
    shape: constructing a statement costs more than SQLite running it."""
    now = sa.bindparam("now", type_=UTCDateTime())
    statement = (
        sa.update(_conversation)
        .where(_conversation.c.id == sa.bindparam("conversation_id"))
        .values(
            message_count=_conversation.c.message_count + count,
            updated_at=sa.case((_conversation.c.updated_at > now, _conversation.c.updated_at), else_=now),
        )
        .returning(_conversation.c.message_count)
    )
    if below_limit:
        statement = statement.where(_conversation.c.message_count < sa.bindparam("limit"))
    return statement


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message about to be appended, before it has a position."""

    id: UUID
    role: str
    content: str
    status: str
    tool_calls: list[dict[str, Any]] | None = None
    client_message_id: str | None = None
    model: str | None = None

    def stored(self, conversation_id: UUID, position: int, now: datetime) -> StoredMessage:
        """The message as stored at `position`."""
        return StoredMessage(
            id=self.id,
            conversation_id=conversation_id,
            position=position,
            role=str(self.role),
            content=self.content,
            tool_calls=self.tool_calls,
            status=str(self.status),
            client_message_id=self.client_message_id,
            created_at=now,
        )

    def row(self, conversation_id: UUID, position: int, now: datetime) -> dict[str, Any]:
        """The message's row at `position`, for `INSERT_MESSAGE`."""
        return {
            "id": self.id,
            "conversation_id": conversation_id,
            "position": position,
            # Plain strings even when given enum members.
            "role": str(self.role),
            "content": self.content,
            "tool_calls_json": self.tool_calls,
            "status": str(self.status),
            "client_message_id": self.client_message_id,
            "model": self.model,
            "created_at": now,
            "updated_at": now,
        }


INSERT_MESSAGE = sa.insert(_message)
CONVERSATION_EXISTS = sa.select(_conversation.c.id).where(
    _conversation.c.id == sa.bindparam("conversation_id")
)
CLIENT_MESSAGE = sa.select(_message.c.id).where(
    _message.c.conversation_id == sa.bindparam("conversation_id"),
    _message.c.client_message_id == sa.bindparam("client_message_id"),
)

# With no bound, a conversation takes messages up to what its counter holds.
NO_LIMIT = 2**31 - 1


@functools.cache
def exchange_at_once() -> sa.Insert:
    """PostgreSQL: a user message and its answer's row in one statement, which takes their positions
    (while the conversation holds fewer than `limit` messages and no message with the user's
    `client_message_id`) and inserts both rows, returning their positions; no row when any of that
    does not hold. Alone, it is a transaction: one round trip instead of four."""
    taken = (
        take_positions(2, True)
        .where(
            ~sa.exists().where(
                _message.c.conversation_id == sa.bindparam("conversation_id"),
                _message.c.client_message_id == sa.bindparam("client_message_id"),
            )
        )
        .cte("taken")
    )
    now = sa.bindparam("now", type_=UTCDateTime())

    def row(prefix: str, offset: int) -> sa.Select[Any]:
        return sa.select(
            sa.bindparam(f"{prefix}_id", type_=_message.c.id.type),
            sa.bindparam("conversation_id", type_=_message.c.conversation_id.type),
            taken.c.message_count - (2 - offset),
            sa.bindparam(f"{prefix}_role", type_=_message.c.role.type),
            sa.bindparam(f"{prefix}_content", type_=_message.c.content.type),
            sa.bindparam(f"{prefix}_status", type_=_message.c.status.type),
            sa.bindparam(f"{prefix}_client_message_id", type_=_message.c.client_message_id.type),
            sa.bindparam(f"{prefix}_model", type_=_message.c.model.type),
            now,
            now,
        )

    columns = [
        "id",
        "conversation_id",
        "position",
        "role",
        "content",
        "status",
        "client_message_id",
        "model",
        "created_at",
        "updated_at",
    ]
    return (
        sa.insert(_message)
        .from_select(columns, sa.union_all(row("user", 0), row("answer", 1)))
        .returning(_message.c.position)
    )


def exchange_parameters(
    conversation_id: UUID, user: NewMessage, answer: NewMessage, limit: int | None, now: datetime
) -> dict[str, Any]:
    """The parameters of `exchange_at_once()` for this user message and its answer's row."""
    parameters: dict[str, Any] = {
        "conversation_id": conversation_id,
        "now": now,
        "limit": NO_LIMIT if limit is None else limit,
        "client_message_id": user.client_message_id,
    }
    for prefix, row in (("user", user), ("answer", answer)):
        parameters[f"{prefix}_id"] = row.id
        parameters[f"{prefix}_role"] = str(row.role)
        parameters[f"{prefix}_content"] = row.content
        parameters[f"{prefix}_status"] = str(row.status)
        parameters[f"{prefix}_client_message_id"] = row.client_message_id
        parameters[f"{prefix}_model"] = row.model
    return parameters


ROLES = frozenset(role.value for role in MessageRole)
STATUSES = frozenset(status.value for status in MessageStatus)


# Selected under the names of the dataclass fields, so that a row maps onto its dataclass by name.
CONVERSATION_COLUMNS = tuple(_conversation.c[field.name] for field in fields(ConversationInfo))


def _shown_count() -> sa.Label[int]:
    """The messages a conversation shows as its own (the session picker's count): every stored one
    but the earlier versions, that is, an edited exchange (`superseded`) and an answer written again
    (one directly followed by another answer that is not its continuation)."""
    message, after = _message.alias("shown"), _message.alias("after")
    rewritten = (
        sa.select(sa.literal(1))
        .where(
            after.c.conversation_id == message.c.conversation_id,
            after.c.position == message.c.position + 1,
            after.c.role == MessageRole.ASSISTANT.value,
            sa.or_(
                after.c.client_message_id.is_(None),
                sa.not_(after.c.client_message_id.startswith(CONTINUATION_PREFIX, autoescape=True)),
            ),
        )
        .exists()
    )
    count = (
        sa.select(sa.func.count())
        .where(
            message.c.conversation_id == _conversation.c.id,
            message.c.status != MessageStatus.SUPERSEDED.value,
            sa.not_(sa.and_(message.c.role == MessageRole.ASSISTANT.value, rewritten)),
        )
        .scalar_subquery()
    )
    return count.label("message_count")


# A conversation as the session picker lists it: `message_count` is what it shows (`_shown_count`).
LISTED_COLUMNS = tuple(
    _shown_count() if column.name == "message_count" else column for column in CONVERSATION_COLUMNS
)
MESSAGE_COLUMNS = tuple(
    _message.c["tool_calls_json" if field.name == "tool_calls" else field.name].label(field.name)
    for field in fields(StoredMessage)
)


def conversation_info(row: Mapping[Any, Any]) -> ConversationInfo:
    return ConversationInfo(**row)


def stored_message(row: sa.RowMapping) -> StoredMessage:
    return StoredMessage(**row)


def owned_by(member_id: UUID, organization_id: UUID) -> sa.ColumnElement[bool]:
    """The conversation is this member's, in this organization."""
    return sa.and_(
        _conversation.c.member_id == member_id,
        _conversation.c.organization_id == organization_id,
    )


# The hot reads (every AG-UI run), built once with their values as bind parameters:
# `Transactions.read` compiles each once. `owned_by`'s condition, by parameter.
_OWNED = sa.and_(
    _conversation.c.member_id == sa.bindparam("member_id"),
    _conversation.c.organization_id == sa.bindparam("organization_id"),
)
GET_CONVERSATION = sa.select(*CONVERSATION_COLUMNS).where(
    _conversation.c.id == sa.bindparam("conversation_id"), _OWNED
)
# A new conversation's checks and row (a rolled-over conversation's too), and a generated title.
MEMBER_IN_ORGANIZATION = sa.select(_member.c.id).where(
    _member.c.id == sa.bindparam("member_id"), _member.c.organization_id == sa.bindparam("organization_id")
)
OWNED_CONVERSATION = sa.select(_conversation.c.id).where(
    _conversation.c.id == sa.bindparam("conversation_id"), _OWNED
)
INSERT_CONVERSATION = sa.insert(_conversation)
SET_TITLE = (
    sa.update(_conversation)
    .where(_conversation.c.id == sa.bindparam("conversation_id"))
    .values(title=sa.bindparam("title"))
)
# A message of the member's: sent with `client_id` as its client message id (HAS_CLIENT_MESSAGE),
# or that one or the stored message `message_id` of the conversation `conversation_id` (HAS_MESSAGE).
_SENT = _message.c.client_message_id == sa.bindparam("client_id")
_MEMBERS_MESSAGE = sa.select(_message.c.id).join(
    _conversation, _conversation.c.id == _message.c.conversation_id
)
HAS_CLIENT_MESSAGE = _MEMBERS_MESSAGE.where(_OWNED, _SENT).limit(1)
HAS_MESSAGE = _MEMBERS_MESSAGE.where(
    _OWNED,
    sa.or_(
        _SENT,
        sa.and_(
            _message.c.id == sa.bindparam("message_id"),
            _message.c.conversation_id == sa.bindparam("conversation_id"),
        ),
    ),
).limit(1)


def check_status(status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"message status must be one of {sorted(STATUSES)}, not {status!r}")
