"""Tokens spent, per member, UTC day and model (SPEC §15): the `assistant_usage` table.

An answer adds its tokens once, at its end (an upsert that adds, so answers ending together on
several instances never lose each other's counts): in the transaction of its final row
(`UsageStore.rows`, which the answers' service writes with it), or in one of its own (`UsageStore.add`;
answers ending together in this process share one). The tokens are the provider's own
usage figures; a provider that sends none gets an estimate (`estimate_tokens`): about four
characters per token, the whole request's text for input and the answer's text and tool arguments
for output. Rows stay when a member's conversations are deleted: they hold counts, never text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.store.engine import dialect_insert
from vernis.store.models import Member, Usage, table_of
from vernis.store.transactions import EngineTransactions, GroupCommit, Transactions

__all__ = ["CHARS_PER_TOKEN", "DayUsage", "Spent", "UsageStore", "estimate_tokens"]

# The usual rule of thumb for English text with the common tokenizers; other scripts use more tokens
# per character, so an estimate errs low for them.
CHARS_PER_TOKEN = 4

_usage = table_of(Usage)
_member = table_of(Member)


def estimate_tokens(texts: Iterable[str]) -> int:
    """Tokens of `texts` when the provider reports none: their length over `CHARS_PER_TOKEN`."""
    return math.ceil(sum(len(text) for text in texts) / CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class DayUsage:
    """One member's tokens on one UTC day (all models together)."""

    sub: str
    name: str
    day: date
    input_tokens: int
    output_tokens: int
    answers: int
    # Of `input_tokens`, read from the provider's prompt cache.
    cached_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Spent:
    """One answer's tokens, as the usage table adds them."""

    organization_id: UUID
    member_id: UUID
    day: date
    model: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int


_UPSERTS: dict[str, sa.Insert] = {}


def _upsert(dialect: Dialect) -> sa.Insert:
    """The usage upsert for `dialect`, built once: building it (its `excluded` alias copies the
    table's columns) and computing its cache key cost more than running it, once per answer."""
    statement = _UPSERTS.get(dialect.name)
    if statement is None:
        insert = dialect_insert(dialect, _usage)
        statement = _UPSERTS[dialect.name] = insert.on_conflict_do_update(
            index_elements=[_usage.c.member_id, _usage.c.day, _usage.c.model],
            set_={
                "input_tokens": _usage.c.input_tokens + insert.excluded.input_tokens,
                "output_tokens": _usage.c.output_tokens + insert.excluded.output_tokens,
                "cached_tokens": _usage.c.cached_tokens + insert.excluded.cached_tokens,
                "answers": _usage.c.answers + insert.excluded.answers,
            },
        )
    return statement


class UsageStore:
    def __init__(self, engine: AsyncEngine, transactions: Transactions | None = None) -> None:
        self._engine = engine
        self._transactions = transactions if transactions is not None else EngineTransactions(engine)
        # Answers ending together add their tokens in one transaction (a group commit).
        self._spent = GroupCommit[Spent](self._write)

    async def add(
        self,
        *,
        organization_id: UUID,
        member_id: UUID,
        day: date,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
    ) -> None:
        """Add one answer's tokens to its member's day (`cached_tokens`: of the input tokens, those
        the provider read from its prompt cache)."""
        spent = Spent(
            organization_id, member_id, day, model[:255], input_tokens, output_tokens, cached_tokens
        )
        await self._spent.submit([spent])

    async def _write(self, spent: list[Spent]) -> None:
        await self._transactions.execute(*self.rows(spent))

    @property
    def upsert(self) -> sa.Insert:
        """The statement that adds a row of tokens to what is stored."""
        return _upsert(self._engine.dialect)

    def rows(self, spent: Iterable[Spent]) -> tuple[sa.Insert, list[dict[str, Any]]]:
        """The upsert that adds `spent` to what is stored, and its rows: one per (member, day,
        model), to be executed in any transaction (`Transactions.execute`, `Writer.execute`)."""
        rows: dict[tuple[UUID, date, str], dict[str, Any]] = {}
        for item in spent:
            row = rows.get((item.member_id, item.day, item.model))
            if row is None:
                rows[(item.member_id, item.day, item.model)] = {
                    "member_id": item.member_id,
                    "day": item.day,
                    "model": item.model,
                    "organization_id": item.organization_id,
                    "input_tokens": item.input_tokens,
                    "output_tokens": item.output_tokens,
                    "cached_tokens": item.cached_tokens,
                    "answers": 1,
                }
            else:
                row["input_tokens"] += item.input_tokens
                row["output_tokens"] += item.output_tokens
                row["cached_tokens"] += item.cached_tokens
                row["answers"] += 1
        return self.upsert, list(rows.values())

    async def member_tokens(self, member_id: UUID, since: date) -> int:
        """A member's tokens (input and output) from `since` (a UTC day) on."""
        return await self._total(sa.and_(_usage.c.member_id == member_id, _usage.c.day >= since))

    async def organization_tokens(self, organization_id: UUID, since: date) -> int:
        """An organization's tokens (every member's) from `since` on."""
        return await self._total(sa.and_(_usage.c.organization_id == organization_id, _usage.c.day >= since))

    async def organization_days(self, organization_id: UUID, since: date) -> list[DayUsage]:
        """Each member's tokens per day from `since` on, in one organization; days oldest first."""
        statement = (
            sa.select(
                _member.c.external_id,
                _member.c.name,
                _usage.c.day,
                sa.func.sum(_usage.c.input_tokens),
                sa.func.sum(_usage.c.output_tokens),
                sa.func.sum(_usage.c.answers),
                sa.func.sum(_usage.c.cached_tokens),
            )
            .join(_member, _member.c.id == _usage.c.member_id)
            .where(_usage.c.organization_id == organization_id, _usage.c.day >= since)
            .group_by(_member.c.external_id, _member.c.name, _usage.c.day)
            .order_by(_usage.c.day, _member.c.external_id)
        )
        async with self._engine.connect() as connection:
            rows = (await connection.execute(statement)).all()
        return [
            DayUsage(row[0], row[1], row[2], int(row[3]), int(row[4]), int(row[5]), int(row[6] or 0))
            for row in rows
        ]

    async def _total(self, where: sa.ColumnElement[bool]) -> int:
        statement = sa.select(
            sa.func.coalesce(sa.func.sum(_usage.c.input_tokens + _usage.c.output_tokens), 0)
        ).where(where)
        async with self._engine.connect() as connection:
            return int((await connection.execute(statement)).scalar_one())
