"""The conversation store: everything a session reads and writes about conversations and their
messages (members are `vernis.identity`'s; an organization's AI rules, `ai_rules`, are delegated to
`vernis.conversation.ai_rules`).

Contracts:

- Results are frozen dataclasses (`ConversationInfo`, `StoredMessage`: `vernis.conversation.records`,
  exported here too); no ORM object ever leaves the store.
- Every method runs in its own short transaction; none holds a connection between calls. Writes run
  whole in one hop (`vernis.store.transactions`: on SQLite, on the process's one writer thread).
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

from collections.abc import Sequence
from dataclasses import asdict
from datetime import timedelta
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.conversation import _sql
from vernis.conversation.ai_rules import AI_RULES_TTL, AiRules
from vernis.conversation.records import (
    ConversationFull,
    ConversationInfo,
    DuplicateClientMessage,
    MessageUpdate,
    StoredMessage,
    decode_cursor,
    encode_cursor,
)
from vernis.exceptions import Forbidden, InvalidMessage, NotFound
from vernis.ids import random_uuid
from vernis.store.models import (
    Conversation,
    Member,
    Message,
    MessageRole,
    MessageStatus,
    table_of,
    utcnow,
)
from vernis.store.transactions import EngineTransactions, Transactions, Writer
from vernis.webhooks.outbox import INSERT as OUTBOX_INSERT

__all__ = [
    "AI_RULES_TTL",
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

_member = table_of(Member)
_conversation = table_of(Conversation)
_message = table_of(Message)


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
        self.ai_rules = AiRules(engine, self._transactions, ttl=rules_ttl)

    # AI rules (`vernis.conversation.ai_rules`)

    async def get_ai_rules(self, organization_id: UUID) -> str:
        return await self.ai_rules.get(organization_id)

    async def set_ai_rules(self, organization_id: UUID, rules: str, updated_by: UUID) -> None:
        await self.ai_rules.set(organization_id, rules, updated_by)

    # Conversations

    async def latest_conversation(self, member_id: UUID, organization_id: UUID) -> ConversationInfo | None:
        """The member's most recently updated conversation, or None when they have none."""
        statement = (
            sa.select(*_sql.CONVERSATION_COLUMNS)
            .where(_sql.owned_by(member_id, organization_id))
            .order_by(_conversation.c.updated_at.desc(), _conversation.c.id.desc())
            .limit(1)
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(statement)).mappings().first()
        return None if row is None else _sql.conversation_info(row)

    async def get_conversation(
        self, conversation_id: UUID, member_id: UUID, organization_id: UUID
    ) -> ConversationInfo | None:
        """The conversation if it is this member's in this organization, else None."""
        rows = await self._transactions.read(  # read for every AG-UI run
            _sql.GET_CONVERSATION,
            {"conversation_id": conversation_id, "member_id": member_id, "organization_id": organization_id},
        )
        return _sql.conversation_info(rows[0]) if rows else None

    async def latest_rollover(
        self, conversation: ConversationInfo, member_id: UUID, organization_id: UUID
    ) -> ConversationInfo:
        """The conversation that `conversation` continues in after its rollovers (SPEC §4): the last
        of the chain of the member's conversations linked to it, or `conversation` itself."""
        for _ in range(1000):  # a chain is short; a cycle cannot be made, but is not followed for ever
            statement = (
                sa.select(*_sql.CONVERSATION_COLUMNS)
                .where(
                    _conversation.c.previous_conversation_id == conversation.id,
                    _sql.owned_by(member_id, organization_id),
                )
                .order_by(_conversation.c.created_at.desc())
                .limit(1)
            )
            async with self._engine.connect() as connection:
                row = (await connection.execute(statement)).mappings().first()
            if row is None:
                break
            conversation = _sql.conversation_info(row)
        return conversation

    async def list_conversations(
        self, member_id: UUID, organization_id: UUID, *, before: str | None = None, limit: int = 20
    ) -> tuple[list[ConversationInfo], str | None]:
        """One page of the member's conversations, most recently updated first (each one's `message_count`:
        what it shows, earlier versions left out), and the next page's cursor (None on the last page).
        `before`: a cursor from an earlier call (bad: `InvalidMessage`); `limit`: 1 to MAX_LIST_LIMIT."""
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_LIST_LIMIT}, not {limit}")
        statement = (
            sa.select(*_sql.LISTED_COLUMNS)
            .where(_sql.owned_by(member_id, organization_id))
            .order_by(_conversation.c.updated_at.desc(), _conversation.c.id.desc())
            .limit(limit + 1)
        )
        if before is not None:
            updated_at, conversation_id = decode_cursor(before)
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
        page = [_sql.conversation_info(row) for row in rows[:limit]]
        next_cursor = encode_cursor(page[-1]) if len(rows) > limit else None
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
            id=conversation_id or random_uuid(),
            organization_id=organization_id,
            member_id=member_id,
            title=None,
            previous_conversation_id=previous_conversation_id,
            message_count=0,
            created_at=now,
            updated_at=now,
        )

        def _tx(writer: Writer) -> ConversationInfo:
            owner = {"member_id": member_id, "organization_id": organization_id}
            if writer.scalar(_sql.MEMBER_IN_ORGANIZATION, owner) is None:
                raise Forbidden()
            if previous_conversation_id is not None:
                previous = {**owner, "conversation_id": previous_conversation_id}
                if writer.scalar(_sql.OWNED_CONVERSATION, previous) is None:
                    raise NotFound()
            if writer.scalar(_sql.CONVERSATION_EXISTS, {"conversation_id": info.id}) is not None:
                raise InvalidMessage("That conversation id is already in use.")
            # The row is the record, field for field.
            writer.execute(_sql.INSERT_CONVERSATION, [asdict(info)])
            return info

        return await self._transactions.write(_tx)

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
            .where(_conversation.c.id == conversation_id, _sql.owned_by(member_id, organization_id))
            .values(title=title)
            .returning(*_sql.CONVERSATION_COLUMNS)
        )

        def _tx(connection: Connection) -> Any:
            row = (connection.execute(statement)).mappings().first()
            return None if row is None else _sql.conversation_info(row)

        return await self._transactions.run(_tx)

    async def set_title(self, conversation_id: UUID, title: str) -> None:
        """Store a generated title (stripped, cut to `MAX_TITLE_LENGTH`; a blank one is ignored).
        For the server's own titling, which has already checked ownership; `updated_at` is untouched."""
        title = title.strip()[:MAX_TITLE_LENGTH]
        if not title:
            return

        parameters = {"conversation_id": conversation_id, "title": title}
        await self._transactions.write(lambda writer: writer.execute(_sql.SET_TITLE, [parameters]))

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
            .where(_conversation.c.id == conversation_id, _sql.owned_by(member_id, organization_id))
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
        if role not in _sql.ROLES:
            raise ValueError(f"message role must be one of {sorted(_sql.ROLES)}, not {role!r}")
        _sql.check_status(status)
        row = _sql.NewMessage(
            message_id or random_uuid(), role, content, status, tool_calls, client_message_id, model
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
        user = _sql.NewMessage(
            random_uuid(), MessageRole.USER, content, MessageStatus.COMPLETE, None, client_message_id
        )
        answer = _sql.NewMessage(
            answer_id, MessageRole.ASSISTANT, "", MessageStatus.STREAMING, None, None, model
        )
        if self._engine.dialect.name == "postgresql":
            stored = await self._exchange_at_once(conversation_id, user, answer, limit)
            if stored is not None:
                return stored
            # Gone, full, or a resent message: the transaction below says which (or stores the
            # exchange, if that changed meanwhile).
        return await self._append(conversation_id, [user, answer], limit=limit)

    async def _append(
        self, conversation_id: UUID, rows: list[_sql.NewMessage], *, limit: int | None
    ) -> StoredMessage:
        """Append `rows` at the conversation's next positions in one transaction; returns the first.
        The first statement takes the positions, so concurrent appends queue on the conversation row
        (PostgreSQL) or the write lock (SQLite) and each sees the others' messages."""
        now = utcnow()
        parameters = {"conversation_id": conversation_id, "now": now, "limit": limit}
        client_message_id = rows[0].client_message_id

        def append(writer: Writer) -> StoredMessage:
            count = writer.scalar(_sql.take_positions(len(rows), limit is not None), parameters)
            if count is None:
                exists = writer.scalar(_sql.CONVERSATION_EXISTS, {"conversation_id": conversation_id})
                raise NotFound() if exists is None else ConversationFull(conversation_id)
            if client_message_id is not None:
                existing = writer.scalar(
                    _sql.CLIENT_MESSAGE,
                    {"conversation_id": conversation_id, "client_message_id": client_message_id},
                )
                if existing is not None:
                    raise DuplicateClientMessage(conversation_id, client_message_id, existing)
            first = count - len(rows)
            writer.execute(
                _sql.INSERT_MESSAGE,
                [row.row(conversation_id, first + offset, now) for offset, row in enumerate(rows)],
            )
            return rows[0].stored(conversation_id, first, now)

        return await self._transactions.write(append)

    async def _exchange_at_once(
        self, conversation_id: UUID, user: _sql.NewMessage, answer: _sql.NewMessage, limit: int | None
    ) -> StoredMessage | None:
        """`add_exchange` on PostgreSQL in one statement (`exchange_at_once()`); None when it
        stored nothing."""
        now = utcnow()
        parameters = _sql.exchange_parameters(conversation_id, user, answer, limit, now)
        try:
            positions = await self._transactions.fetch(_sql.exchange_at_once(), parameters)
        except sa.exc.IntegrityError:
            # The same message sent twice at once, both past the check: the unique index refused
            # this one, and the transaction below finds the one stored.
            return None
        if not positions:
            return None
        return user.stored(conversation_id, min(position for (position,) in positions), now)

    async def update_messages(
        self,
        updates: Sequence[MessageUpdate],
        webhooks: list[dict[str, Any]] | None = None,
        also: Sequence[tuple[sa.Executable, list[dict[str, Any]]]] = (),
    ) -> None:
        """Write many answers' text, tool calls and status in one transaction (one statement, many
        rows): what the periodic flush of every streaming answer, and answers ending together, cost.
        `webhooks`: outbox rows (`vernis.webhooks.outbox`) written in the same transaction; `also`:
        other statements and their rows, written there too (an answer's usage)."""
        if not updates:
            return
        for update in updates:
            _sql.check_status(update.status)
        rows = _sql.answer_rows(updates, utcnow())
        if not webhooks and not also:
            await self._transactions.execute(_sql.UPDATE_ANSWER, rows)
            return

        def together(writer: Writer) -> None:
            writer.execute(_sql.UPDATE_ANSWER, rows)
            if webhooks:
                writer.execute(OUTBOX_INSERT, webhooks)
            for statement, more in also:
                if more:
                    writer.execute(statement, more)

        await self._transactions.write(together)

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
            _sql.check_status(status)
            values["status"] = str(status)
        values["updated_at"] = utcnow()

        def _tx(connection: Connection) -> Any:
            connection.execute(sa.update(_message).where(_message.c.id == message_id).values(values))

        await self._transactions.run(_tx)

    async def messages(
        self, conversation_id: UUID, *, last: int | None = None, since: int = 0
    ) -> list[StoredMessage]:
        """The conversation's messages from position `since` on, in order; with `last=N`, only the N
        most recent, still in ascending order. The caller has checked the conversation is the member's."""
        statement = sa.select(*_sql.MESSAGE_COLUMNS).where(
            _message.c.conversation_id == conversation_id, _message.c.position >= since
        )
        if last is None:
            statement = statement.order_by(_message.c.position.asc())
        elif last <= 0:
            return []
        else:
            statement = statement.order_by(_message.c.position.desc()).limit(last)
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).mappings().all()
        found = [_sql.stored_message(row) for row in rows]
        if last is not None:
            found.reverse()
        return found

    async def has_message(
        self,
        conversation_id: UUID,
        message_id: UUID | None,
        member_id: UUID,
        organization_id: UUID,
        client_id: str,
    ) -> bool:
        """In one query: whether the conversation holds the message `message_id` (a client sent a
        stored one back), or the member sent one with `client_id` as its `client_message_id`."""
        parameters = {"member_id": member_id, "organization_id": organization_id, "client_id": client_id}
        if message_id is None:
            return bool(await self._transactions.read(_sql.HAS_CLIENT_MESSAGE, parameters))
        parameters |= {"message_id": message_id, "conversation_id": conversation_id}
        return bool(await self._transactions.read(_sql.HAS_MESSAGE, parameters))

    async def find_by_client_message_id(
        self, member_id: UUID, organization_id: UUID, client_message_id: str
    ) -> StoredMessage | None:
        """The message the member sent with this `client_message_id`, in any of their conversations."""
        statement = (
            sa.select(*_sql.MESSAGE_COLUMNS)
            .join(_conversation, _conversation.c.id == _message.c.conversation_id)
            .where(
                _sql.owned_by(member_id, organization_id), _message.c.client_message_id == client_message_id
            )
            .order_by(_message.c.created_at.desc())
            .limit(1)
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(statement)).mappings().first()
        return None if row is None else _sql.stored_message(row)

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
