"""Summary checkpoints (SPEC §19): what a compacted conversation's model reads instead of its older
messages.

A checkpoint covers a conversation's messages up to `through_message_id`; the newest one is the one
in use (each new summary covers the one before). The messages a request carries are those after it:
positions from `covered` on. A conversation that rolled over starts with its predecessor's newest
checkpoint (`carry_over`), covering none of its own messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID, uuid4

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.store.models import Message, Summary, table_of, utcnow
from vernis.store.transactions import EngineTransactions, Transactions

__all__ = ["SummaryInfo", "SummaryStore"]

_summary = table_of(Summary)
_message = table_of(Message)

_COLUMNS = (_summary.c.text, _summary.c.through_message_id, _summary.c.covered, _summary.c.created_at)


@dataclass(frozen=True, slots=True)
class SummaryInfo:
    text: str
    through_message_id: UUID
    # The positions of this conversation's messages it covers: those below `covered`.
    covered: int
    created_at: datetime


def _info(row: sa.RowMapping) -> SummaryInfo:
    return SummaryInfo(row["text"], row["through_message_id"], row["covered"], row["created_at"])


class SummaryStore:
    """Reads through `engine`; writes as the conversation's other writes go (`transactions`: on
    SQLite, the one writer that does not fight the answers' rows for the lock)."""

    def __init__(self, engine: AsyncEngine, transactions: Transactions | None = None) -> None:
        self._engine = engine
        self._transactions = transactions or EngineTransactions(engine)

    async def latest(self, conversation_id: UUID) -> SummaryInfo | None:
        """The checkpoint in use: the conversation's newest."""
        statement = (
            sa.select(*_COLUMNS)
            .where(_summary.c.conversation_id == conversation_id)
            .order_by(_summary.c.created_at.desc(), _summary.c.covered.desc())
            .limit(1)
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(statement)).mappings().first()
        return None if row is None else _info(row)

    async def all(self, conversation_id: UUID) -> list[SummaryInfo]:
        """Every checkpoint of the conversation, oldest first (the history marks each)."""
        statement = (
            sa.select(*_COLUMNS)
            .where(_summary.c.conversation_id == conversation_id)
            .order_by(_summary.c.created_at.asc(), _summary.c.covered.asc())
        )
        async with self._engine.connect() as connection:
            return [_info(row) for row in (await connection.execute(statement)).mappings()]

    async def add(
        self, conversation_id: UUID, text: str, through_message_id: UUID, *, model: str | None = None
    ) -> SummaryInfo:
        """Store a checkpoint covering the conversation up to `through_message_id` (one of its
        messages, or of the conversation it continues)."""
        now = utcnow()

        def store(connection: Connection) -> int:
            position = connection.execute(
                sa.select(_message.c.position).where(
                    _message.c.id == through_message_id, _message.c.conversation_id == conversation_id
                )
            ).scalar()
            covered = 0 if position is None else position + 1
            connection.execute(
                sa.insert(_summary).values(
                    id=uuid4(),
                    conversation_id=conversation_id,
                    through_message_id=through_message_id,
                    covered=covered,
                    text=text,
                    model=model,
                    created_at=now,
                )
            )
            return covered

        covered = await self._transactions.run(store)
        return SummaryInfo(text, through_message_id, covered, now)

    async def carry_over(self, previous_id: UUID, conversation_id: UUID) -> SummaryInfo | None:
        """A rolled-over conversation starts with its predecessor's checkpoint, if it has one."""
        summary = await self.latest(previous_id)
        if summary is None:
            return None
        return await self.add(conversation_id, summary.text, summary.through_message_id)
