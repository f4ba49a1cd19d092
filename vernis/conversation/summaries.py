"""Summary checkpoints (SPEC §19): what a compacted conversation's model reads instead of its older
messages.

A checkpoint covers a conversation's messages up to `through_message_id`; the newest one is the one
in use (each new summary covers the one before). The messages a request carries are those after it:
positions from `covered` on. A conversation that rolled over starts with its predecessor's newest
checkpoint (`carry_over`), covering none of its own messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.ids import random_uuid
from vernis.store.models import Message, Summary, table_of, utcnow
from vernis.store.transactions import EngineTransactions, Transactions, Writer

__all__ = ["SummaryInfo", "SummaryStore"]

_summary = table_of(Summary)
_message = table_of(Message)

_COLUMNS = (_summary.c.text, _summary.c.through_message_id, _summary.c.covered, _summary.c.created_at)
# Built once (a compaction and a roll-over run them): constructing a statement costs more than
# SQLite running it.
_LATEST = (
    sa.select(*_COLUMNS)
    .where(_summary.c.conversation_id == sa.bindparam("conversation_id"))
    .order_by(_summary.c.created_at.desc(), _summary.c.covered.desc())
    .limit(1)
)
_POSITION = sa.select(_message.c.position).where(
    _message.c.id == sa.bindparam("through_message_id"),
    _message.c.conversation_id == sa.bindparam("conversation_id"),
)
_INSERT = sa.insert(_summary)


@dataclass(frozen=True, slots=True)
class SummaryInfo:
    text: str
    through_message_id: UUID
    # The positions of this conversation's messages it covers: those below `covered`.
    covered: int
    created_at: datetime


def _info(row: Mapping[Any, Any]) -> SummaryInfo:
    return SummaryInfo(row["text"], row["through_message_id"], row["covered"], row["created_at"])


class SummaryStore:
    """Reads through `engine`; writes as the conversation's other writes go (`transactions`: on
    SQLite, the one writer that does not fight the answers' rows for the lock)."""

    def __init__(self, engine: AsyncEngine, transactions: Transactions | None = None) -> None:
        self._engine = engine
        self._transactions = transactions or EngineTransactions(engine)

    async def latest(self, conversation_id: UUID) -> SummaryInfo | None:
        """The checkpoint in use: the conversation's newest."""
        rows = await self._transactions.read(_LATEST, {"conversation_id": conversation_id})
        return _info(rows[0]) if rows else None

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
        through = {"through_message_id": through_message_id, "conversation_id": conversation_id}
        row: dict[str, Any] = {
            **through,
            "id": random_uuid(),
            "text": text,
            "model": model,
            "created_at": now,
        }

        def store(writer: Writer) -> int:
            position = writer.scalar(_POSITION, through)
            covered = row["covered"] = 0 if position is None else position + 1
            writer.execute(_INSERT, [row])
            return covered

        covered = await self._transactions.write(store)
        return SummaryInfo(text, through_message_id, covered, now)

    async def carry_over(self, previous_id: UUID, conversation_id: UUID) -> SummaryInfo | None:
        """A rolled-over conversation starts with its predecessor's checkpoint, if it has one."""
        summary = await self.latest(previous_id)
        if summary is None:
            return None
        return await self.add(conversation_id, summary.text, summary.through_message_id)
