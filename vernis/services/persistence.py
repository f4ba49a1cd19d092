"""The conversation store: everything a session reads and writes about AI rules, conversations and
their messages (members are `vernis.identity`'s).

Contracts:

- Results are frozen dataclasses (`MemberInfo`, `ConversationInfo`, `StoredMessage`); no ORM object
  ever leaves this module.
- Every method runs in its own short transaction; none holds a connection between calls. Writes run
  whole in one hop (`vernis.db.transactions`: on SQLite, on the process's one writer thread).
- A method taking `member_id` and `organization_id` scopes every query by both: another member's
  conversation (or one of this member's in another organization) is indistinguishable from a missing
  one (None / False).
- `add_message` is atomic and safe under concurrent adds to one conversation, on SQLite and
  PostgreSQL alike: the first statement of its transaction is the `UPDATE` that takes the next
  position, so the writers queue on the conversation row (PostgreSQL) or the database write lock
  (SQLite) and each sees the previous one's message.
- Times are aware UTC datetimes on both backends. Conversations are listed by `updated_at` then `id`,
  both descending, so equal timestamps still order the same way every time.
"""

from __future__ import annotations

import base64
import binascii
import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from cachetools import TTLCache
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.db.engine import dialect_insert
from vernis.db.models import (
    Conversation,
    Member,
    Message,
    MessageRole,
    MessageStatus,
    OrgAIRules,
    Organization,
    UTCDateTime,
    table_of,
    utcnow,
)
from vernis.db.transactions import EngineTransactions, Transactions, Writer
from vernis.exceptions import Forbidden, InvalidMessage, NotFound, VernisError

__all__ = [
    "AI_RULES_TTL",
    "FEEDBACK_RATINGS",
    "MAX_LIST_LIMIT",
    "MAX_TITLE_LENGTH",
    "ConversationFull",
    "ConversationInfo",
    "ConversationStore",
    "DuplicateClientMessage",
    "MessageUpdate",
    "StoredMessage",
]

MAX_TITLE_LENGTH = 255
MAX_LIST_LIMIT = 100
FEEDBACK_RATINGS = frozenset({"up", "down"})

_organization = table_of(Organization)
_member = table_of(Member)
_rules = table_of(OrgAIRules)
_conversation = table_of(Conversation)
_message = table_of(Message)

# One statement for every answer update (built once: no statement construction per flush). Token
# counts left NULL in the parameters keep what is stored.
# Only a row still `streaming` is written: an answer whose lease was taken over (its instance was
# cut off, another one stored it as failed) can no longer change it. This is the lease's fence.
_UPDATE_ANSWER = (
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
        updated_at=sa.bindparam("updated_at", type_=UTCDateTime()),
    )
)
AI_RULES_TTL = 5.0


@functools.cache
def _take_positions(count: int, below_limit: bool) -> sa.Update:
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
class _NewMessage:
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


_INSERT_MESSAGE = sa.insert(_message)
_CONVERSATION_EXISTS = sa.select(_conversation.c.id).where(
    _conversation.c.id == sa.bindparam("conversation_id")
)
_CLIENT_MESSAGE = sa.select(_message.c.id).where(
    _message.c.conversation_id == sa.bindparam("conversation_id"),
    _message.c.client_message_id == sa.bindparam("client_message_id"),
)

# With no bound, a conversation takes messages up to what its counter holds.
_NO_LIMIT = 2**31 - 1


@functools.cache
def _exchange_at_once() -> sa.Insert:
    """PostgreSQL: a user message and its answer's row in one statement, which takes their positions
    (while the conversation holds fewer than `limit` messages and no message with the user's
    `client_message_id`) and inserts both rows, returning their positions; no row when any of that
    does not hold. Alone, it is a transaction: one round trip instead of four."""
    taken = (
        _take_positions(2, True)
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


_ROLES = frozenset(role.value for role in MessageRole)
_STATUSES = frozenset(status.value for status in MessageStatus)


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


# Selected under the names of the dataclass fields, so that a row maps onto its dataclass by name.
_CONVERSATION_COLUMNS = tuple(_conversation.c[field.name] for field in fields(ConversationInfo))
_MESSAGE_COLUMNS = tuple(
    _message.c["tool_calls_json" if field.name == "tool_calls" else field.name].label(field.name)
    for field in fields(StoredMessage)
)


def _conversation_info(row: sa.RowMapping) -> ConversationInfo:
    return ConversationInfo(**row)


def _stored_message(row: sa.RowMapping) -> StoredMessage:
    return StoredMessage(**row)


def _owned_by(member_id: UUID, organization_id: UUID) -> sa.ColumnElement[bool]:
    return sa.and_(
        _conversation.c.member_id == member_id,
        _conversation.c.organization_id == organization_id,
    )


def _encode_cursor(conversation: ConversationInfo) -> str:
    raw = f"{conversation.updated_at.isoformat()}|{conversation.id.hex}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
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


def _check_status(status: str) -> None:
    if status not in _STATUSES:
        raise ValueError(f"message status must be one of {sorted(_STATUSES)}, not {status!r}")


class ConversationStore:
    """Reads and writes conversations and messages; one per process, shared by every connection."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        transactions: Transactions | None = None,
        rules_ttl: float = AI_RULES_TTL,
    ) -> None:
        self._engine = engine
        # The hot writes (a message with its answer's row, the answers' rows) run here in one hop.
        self._transactions = transactions or EngineTransactions(engine)
        # Read per message: kept a few seconds (a change made here is seen at once; one made by
        # another instance within `rules_ttl`).
        self._rules: TTLCache[UUID, str] = TTLCache(maxsize=10_000, ttl=rules_ttl)

    # AI rules

    async def get_ai_rules(self, organization_id: UUID) -> str:
        """The organization's AI rules, or "" when it has none."""
        cached = self._rules.get(organization_id)
        if cached is not None:
            return cached
        async with self._engine.connect() as connection:
            rules = await connection.scalar(
                sa.select(_rules.c.rules).where(_rules.c.organization_id == organization_id)
            )
        self._rules[organization_id] = rules or ""
        return rules or ""

    async def set_ai_rules(self, organization_id: UUID, rules: str, updated_by: UUID) -> None:
        """Replace the organization's AI rules. Raises `Forbidden` when `updated_by` is not a current
        member of that organization (who may edit them is the caller's permission check)."""
        now = utcnow()

        def _tx(connection: Connection) -> Any:
            editor = connection.scalar(
                sa.select(_member.c.id).where(
                    _member.c.id == updated_by,
                    _member.c.organization_id == organization_id,
                    _member.c.removed_at.is_(None),
                )
            )
            if editor is None:
                raise Forbidden()
            values = {"rules": rules, "updated_by": updated_by, "updated_at": now}
            connection.execute(
                dialect_insert(connection.dialect, _rules)
                .values(organization_id=organization_id, **values)
                .on_conflict_do_update(index_elements=[_rules.c.organization_id], set_=values)
            )

        await self._transactions.run(_tx)
        self._rules[organization_id] = rules

    # Conversations

    async def latest_conversation(self, member_id: UUID, organization_id: UUID) -> ConversationInfo | None:
        """The member's most recently updated conversation, or None when they have none."""
        statement = (
            sa.select(*_CONVERSATION_COLUMNS)
            .where(_owned_by(member_id, organization_id))
            .order_by(_conversation.c.updated_at.desc(), _conversation.c.id.desc())
            .limit(1)
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(statement)).mappings().first()
        return None if row is None else _conversation_info(row)

    async def get_conversation(
        self, conversation_id: UUID, member_id: UUID, organization_id: UUID
    ) -> ConversationInfo | None:
        """The conversation if it is this member's in this organization, else None."""
        statement = sa.select(*_CONVERSATION_COLUMNS).where(
            _conversation.c.id == conversation_id, _owned_by(member_id, organization_id)
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(statement)).mappings().first()
        return None if row is None else _conversation_info(row)

    async def list_conversations(
        self, member_id: UUID, organization_id: UUID, *, before: str | None = None, limit: int = 20
    ) -> tuple[list[ConversationInfo], str | None]:
        """One page of the member's conversations, most recently updated first, and the cursor of the
        next page (None on the last page). `before` is a cursor from an earlier call; a malformed one
        raises `InvalidMessage`. `limit` is 1 to `MAX_LIST_LIMIT`."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIST_LIMIT}, not {limit}")
        statement = (
            sa.select(*_CONVERSATION_COLUMNS)
            .where(_owned_by(member_id, organization_id))
            .order_by(_conversation.c.updated_at.desc(), _conversation.c.id.desc())
            .limit(limit + 1)
        )
        if before is not None:
            updated_at, conversation_id = _decode_cursor(before)
            statement = statement.where(
                sa.or_(
                    _conversation.c.updated_at < updated_at,
                    sa.and_(
                        _conversation.c.updated_at == updated_at,
                        _conversation.c.id < conversation_id,
                    ),
                )
            )
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).mappings().all()
        page = [_conversation_info(row) for row in rows[:limit]]
        next_cursor = _encode_cursor(page[-1]) if len(rows) > limit else None
        return page, next_cursor

    async def create_conversation(
        self,
        member_id: UUID,
        organization_id: UUID,
        *,
        previous_conversation_id: UUID | None = None,
        conversation_id: UUID | None = None,
    ) -> ConversationInfo:
        """Store a new, empty conversation for the member (with the given id, if any).

        Raises `Forbidden` when the member is not in that organization, `NotFound` when
        `previous_conversation_id` is not one of their conversations, and `InvalidMessage` when
        `conversation_id` is already taken.
        """
        now = utcnow()
        info = ConversationInfo(
            id=conversation_id or uuid.uuid4(),
            organization_id=organization_id,
            member_id=member_id,
            title=None,
            previous_conversation_id=previous_conversation_id,
            message_count=0,
            created_at=now,
            updated_at=now,
        )

        def _tx(connection: Connection) -> Any:
            in_organization = connection.scalar(
                sa.select(_member.c.id).where(
                    _member.c.id == member_id, _member.c.organization_id == organization_id
                )
            )
            if in_organization is None:
                raise Forbidden()
            if previous_conversation_id is not None:
                previous = connection.scalar(
                    sa.select(_conversation.c.id).where(
                        _conversation.c.id == previous_conversation_id,
                        _owned_by(member_id, organization_id),
                    )
                )
                if previous is None:
                    raise NotFound()
            taken = connection.scalar(sa.select(_conversation.c.id).where(_conversation.c.id == info.id))
            if taken is not None:
                raise InvalidMessage("That conversation id is already in use.")
            connection.execute(
                sa.insert(_conversation).values(
                    id=info.id,
                    organization_id=organization_id,
                    member_id=member_id,
                    title=None,
                    previous_conversation_id=previous_conversation_id,
                    message_count=0,
                    created_at=now,
                    updated_at=now,
                )
            )
            return info

        return await self._transactions.run(_tx)

    async def rename_conversation(
        self, conversation_id: UUID, member_id: UUID, organization_id: UUID, title: str
    ) -> ConversationInfo | None:
        """Set a title chosen by the member: stripped, cut to `MAX_TITLE_LENGTH`. Returns the renamed
        conversation, or None when it is not theirs. A blank title raises `InvalidMessage`. Renaming
        does not move the conversation in the list (`updated_at` is untouched)."""
        title = title.strip()[:MAX_TITLE_LENGTH]
        if not title:
            raise InvalidMessage("A conversation title cannot be empty.")
        statement = (
            sa.update(_conversation)
            .where(_conversation.c.id == conversation_id, _owned_by(member_id, organization_id))
            .values(title=title)
            .returning(*_CONVERSATION_COLUMNS)
        )

        def _tx(connection: Connection) -> Any:
            row = (connection.execute(statement)).mappings().first()
            return None if row is None else _conversation_info(row)

        return await self._transactions.run(_tx)

    async def set_title(self, conversation_id: UUID, title: str) -> None:
        """Store a generated title (stripped, cut to `MAX_TITLE_LENGTH`; a blank one is ignored).
        For the server's own titling, which has already checked ownership; `updated_at` is untouched."""
        title = title.strip()[:MAX_TITLE_LENGTH]
        if not title:
            return

        def _tx(connection: Connection) -> Any:
            connection.execute(
                sa.update(_conversation).where(_conversation.c.id == conversation_id).values(title=title)
            )

        await self._transactions.run(_tx)

    async def delete_conversation(
        self, conversation_id: UUID, member_id: UUID, organization_id: UUID
    ) -> bool:
        """Delete the member's conversation and its messages; False when it is not theirs.

        A conversation that rolled over from it stays, with its link (`previous_conversation_id`)
        cleared. Done explicitly rather than left to the foreign keys' ON DELETE actions, so the
        outcome does not depend on how a connection was configured.
        """
        owned = (
            sa.select(_conversation.c.id)
            .where(_conversation.c.id == conversation_id, _owned_by(member_id, organization_id))
            # PostgreSQL: a concurrent add_message waits, then finds the conversation gone.
            .with_for_update()
        )

        def _tx(connection: Connection) -> Any:
            if connection.scalar(owned) is None:
                return False
            connection.execute(sa.delete(_message).where(_message.c.conversation_id == conversation_id))
            connection.execute(
                sa.update(_conversation)
                .where(_conversation.c.previous_conversation_id == conversation_id)
                .values(previous_conversation_id=None)
            )
            result = connection.execute(sa.delete(_conversation).where(_conversation.c.id == conversation_id))
            return result.rowcount == 1

        return await self._transactions.run(_tx)

    # Messages

    async def add_message(
        self,
        conversation_id: UUID,
        role: str,
        content: str,
        *,
        message_id: UUID | None = None,
        status: str = MessageStatus.COMPLETE.value,
        tool_calls: list[dict[str, Any]] | None = None,
        client_message_id: str | None = None,
        model: str | None = None,
    ) -> StoredMessage:
        """Append a message: it takes the next position, and the conversation's `message_count` and
        `updated_at` move with it, all in one transaction.

        Raises `DuplicateClientMessage` (storing nothing) when `client_message_id` is already in
        this conversation, `NotFound` when the conversation does not exist, and `ValueError` for an
        unknown role or status.
        """
        if role not in _ROLES:
            raise ValueError(f"message role must be one of {sorted(_ROLES)}, not {role!r}")
        _check_status(status)
        row = _NewMessage(
            message_id or uuid.uuid4(), role, content, status, tool_calls, client_message_id, model
        )
        return await self._append(conversation_id, [row], limit=None)

    async def add_exchange(
        self,
        conversation_id: UUID,
        content: str,
        *,
        answer_id: UUID,
        model: str | None,
        client_message_id: str | None = None,
        limit: int | None = None,
    ) -> StoredMessage:
        """Store a user message and, right after it, its answer's row (empty, `streaming`), in one
        transaction: the start of an exchange costs one round trip. Returns the user's message.

        With `limit`, a conversation already holding that many messages is not extended: raises
        `ConversationFull` (nothing stored). Raises `DuplicateClientMessage` and `NotFound` as
        `add_message` does.
        """
        user = _NewMessage(
            uuid.uuid4(), MessageRole.USER, content, MessageStatus.COMPLETE, None, client_message_id
        )
        answer = _NewMessage(answer_id, MessageRole.ASSISTANT, "", MessageStatus.STREAMING, None, None, model)
        if self._engine.dialect.name == "postgresql":
            stored = await self._exchange_at_once(conversation_id, user, answer, limit)
            if stored is not None:
                return stored
            # Gone, full, or a resent message: the transaction below says which (or stores the
            # exchange, if that changed meanwhile).
        return await self._append(conversation_id, [user, answer], limit=limit)

    async def _append(
        self, conversation_id: UUID, rows: list[_NewMessage], *, limit: int | None
    ) -> StoredMessage:
        """Append `rows` at the conversation's next positions in one transaction; returns the first.
        The first statement takes the positions, so concurrent appends queue on the conversation row
        (PostgreSQL) or the write lock (SQLite) and each sees the others' messages."""
        now = utcnow()
        parameters = {"conversation_id": conversation_id, "now": now, "limit": limit}
        client_message_id = rows[0].client_message_id

        def append(writer: Writer) -> StoredMessage:
            count = writer.scalar(_take_positions(len(rows), limit is not None), parameters)
            if count is None:
                exists = writer.scalar(_CONVERSATION_EXISTS, {"conversation_id": conversation_id})
                raise NotFound() if exists is None else ConversationFull(conversation_id)
            if client_message_id is not None:
                existing = writer.scalar(
                    _CLIENT_MESSAGE,
                    {"conversation_id": conversation_id, "client_message_id": client_message_id},
                )
                if existing is not None:
                    raise DuplicateClientMessage(conversation_id, client_message_id, existing)
            first = count - len(rows)
            writer.execute(
                _INSERT_MESSAGE,
                [
                    {
                        "id": row.id,
                        "conversation_id": conversation_id,
                        "position": first + offset,
                        # Plain strings even when given enum members.
                        "role": str(row.role),
                        "content": row.content,
                        "tool_calls_json": row.tool_calls,
                        "status": str(row.status),
                        "client_message_id": row.client_message_id,
                        "model": row.model,
                        "created_at": now,
                        "updated_at": now,
                    }
                    for offset, row in enumerate(rows)
                ],
            )
            return rows[0].stored(conversation_id, first, now)

        return await self._transactions.write(append)

    async def _exchange_at_once(
        self, conversation_id: UUID, user: _NewMessage, answer: _NewMessage, limit: int | None
    ) -> StoredMessage | None:
        """`add_exchange` on PostgreSQL in one statement (`_exchange_at_once()`); None when it
        stored nothing."""
        now = utcnow()
        parameters: dict[str, Any] = {
            "conversation_id": conversation_id,
            "now": now,
            "limit": _NO_LIMIT if limit is None else limit,
            "client_message_id": user.client_message_id,
        }
        for prefix, row in (("user", user), ("answer", answer)):
            parameters[f"{prefix}_id"] = row.id
            parameters[f"{prefix}_role"] = str(row.role)
            parameters[f"{prefix}_content"] = row.content
            parameters[f"{prefix}_status"] = str(row.status)
            parameters[f"{prefix}_client_message_id"] = row.client_message_id
            parameters[f"{prefix}_model"] = row.model
        try:
            positions = await self._transactions.fetch(_exchange_at_once(), parameters)
        except sa.exc.IntegrityError:
            # The same message sent twice at once, both past the check: the unique index refused
            # this one, and the transaction below finds the one stored.
            return None
        if not positions:
            return None
        return user.stored(conversation_id, min(position for (position,) in positions), now)

    async def update_messages(self, updates: Sequence[MessageUpdate]) -> None:
        """Write many answers' text, tool calls and status in one transaction (one statement, many
        rows): what the periodic flush of every streaming answer, and answers ending together, cost."""
        if not updates:
            return
        for update in updates:
            _check_status(update.status)
        now = utcnow()
        rows = [
            {
                "answer_id": u.message_id,
                "content": u.content,
                "tool_calls_json": u.tool_calls,
                "status": str(u.status),
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "updated_at": now,
            }
            for u in updates
        ]
        await self._transactions.execute(_UPDATE_ANSWER, rows)

    async def update_message(
        self,
        message_id: UUID,
        *,
        content: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        status: str | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        model: str | None = None,
    ) -> None:
        """Change the given fields of a message (None means "leave as is") and bump its `updated_at`;
        one `UPDATE`, cheap enough for the periodic flush of a streaming answer. An unknown id is a
        no-op, as is a call that gives no field."""
        given = {
            "content": content,
            "tool_calls_json": tool_calls,
            "status": status,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "model": model,
        }
        values: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
        if not values:
            return
        if status is not None:
            _check_status(status)
            values["status"] = str(status)
        values["updated_at"] = utcnow()

        def _tx(connection: Connection) -> Any:
            connection.execute(sa.update(_message).where(_message.c.id == message_id).values(values))

        await self._transactions.run(_tx)

    async def messages(self, conversation_id: UUID, *, last: int | None = None) -> list[StoredMessage]:
        """The conversation's messages in order (position ascending); with `last=N`, only the N most
        recent, still in ascending order. The caller has checked the conversation is the member's."""
        statement = sa.select(*_MESSAGE_COLUMNS).where(_message.c.conversation_id == conversation_id)
        if last is None:
            statement = statement.order_by(_message.c.position.asc())
        elif last <= 0:
            return []
        else:
            statement = statement.order_by(_message.c.position.desc()).limit(last)
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).mappings().all()
        found = [_stored_message(row) for row in rows]
        if last is not None:
            found.reverse()
        return found

    async def find_by_client_message_id(
        self, member_id: UUID, organization_id: UUID, client_message_id: str
    ) -> StoredMessage | None:
        """The message the member sent with this `client_message_id`, in any of their conversations."""
        statement = (
            sa.select(*_MESSAGE_COLUMNS)
            .join(_conversation, _conversation.c.id == _message.c.conversation_id)
            .where(_owned_by(member_id, organization_id), _message.c.client_message_id == client_message_id)
            .order_by(_message.c.created_at.desc())
            .limit(1)
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(statement)).mappings().first()
        return None if row is None else _stored_message(row)

    async def set_feedback(
        self, message_id: UUID, member_id: UUID, organization_id: UUID, rating: str, comment: str | None
    ) -> bool:
        """Record the member's rating (`up`/`down`, else `InvalidMessage`) and optional comment on an
        assistant message of one of their conversations; False for any other message. Rating again
        replaces the earlier feedback."""
        if rating not in FEEDBACK_RATINGS:
            raise InvalidMessage("Feedback must be 'up' or 'down'.")
        comment = (comment or "").strip() or None
        statement = (
            sa.update(_message)
            .where(
                _message.c.id == message_id,
                _message.c.role == MessageRole.ASSISTANT.value,
                _message.c.conversation_id.in_(
                    sa.select(_conversation.c.id).where(_owned_by(member_id, organization_id))
                ),
            )
            .values(feedback_rating=rating, feedback_comment=comment)
        )

        def _tx(connection: Connection) -> Any:
            result = connection.execute(statement)
            return result.rowcount == 1

        return await self._transactions.run(_tx)

    async def supersede(self, conversation_id: UUID, from_position: int) -> None:
        """Mark the conversation's messages from `from_position` on as superseded: the earlier
        version of an exchange the user edited (`edit_message`)."""
        statement = (
            sa.update(_message)
            .where(_message.c.conversation_id == conversation_id, _message.c.position >= from_position)
            .values(status=MessageStatus.SUPERSEDED.value)
        )

        def _tx(connection: Connection) -> None:
            connection.execute(statement)

        await self._transactions.run(_tx)

    async def streaming_answers(self) -> list[tuple[UUID, UUID]]:
        """(message id, conversation id) of every answer stored as still streaming."""
        statement = sa.select(_message.c.id, _message.c.conversation_id).where(
            _message.c.status == MessageStatus.STREAMING.value
        )
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).all()
        return [(row[0], row[1]) for row in rows]

    async def fail_answers(self, message_ids: Sequence[UUID]) -> int:
        """Mark these answers `failed` if they are still `streaming`, keeping their text; how many."""
        if not message_ids:
            return 0
        statement = (
            sa.update(_message)
            .where(_message.c.id.in_(list(message_ids)))
            .where(_message.c.status == MessageStatus.STREAMING.value)
            .values(status=MessageStatus.FAILED.value, updated_at=utcnow())
        )

        def _tx(connection: Connection) -> Any:
            return connection.execute(statement).rowcount

        result: int = await self._transactions.run(_tx)
        return result

    async def recover_interrupted(self, *, stale_after: timedelta | None = None) -> int:
        """Mark every message still `streaming` as `failed`, keeping its content; returns how many.

        Run at startup: a process that died mid-answer leaves such rows. With several instances on
        one database, pass `stale_after` (well above the flush interval of a streaming answer) so
        that only rows no live instance has touched recently are failed.
        """
        now = utcnow()
        statement = (
            sa.update(_message)
            .where(_message.c.status == MessageStatus.STREAMING.value)
            .values(status=MessageStatus.FAILED.value, updated_at=now)
        )
        if stale_after is not None:
            statement = statement.where(_message.c.updated_at < now - stale_after)

        def _tx(connection: Connection) -> Any:
            result = connection.execute(statement)
            return result.rowcount

        return await self._transactions.run(_tx)
