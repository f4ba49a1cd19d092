"""`Transactions.execute`: one statement over many rows, all of them or none, on both backends (on
PostgreSQL in autocommit, without a transaction of its own)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.db import *  # noqa: F403
from vernis.store.transactions import Transactions


@pytest.fixture
async def table(engine: AsyncEngine) -> AsyncIterator[sa.Table]:
    item = sa.Table(
        f"item_{uuid.uuid4().hex[:8]}",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("value", sa.Integer, sa.CheckConstraint("value >= 0"), nullable=False),
    )
    async with engine.begin() as connection:
        await connection.run_sync(item.create)
    try:
        yield item
    finally:
        async with engine.begin() as connection:
            await connection.run_sync(item.drop)


async def _values(engine: AsyncEngine, table: sa.Table) -> list[tuple[int, int]]:
    async with engine.connect() as connection:
        rows = await connection.execute(sa.select(table.c.id, table.c.value).order_by(table.c.id))
        return [(row[0], row[1]) for row in rows]


async def test_a_statement_over_many_rows_stores_all_of_them(
    engine: AsyncEngine, table: sa.Table, transactions: Transactions
) -> None:
    """An insert of three rows, then an update of two of them: every row is written and stays written."""
    await transactions.execute(sa.insert(table), [{"id": n, "value": n} for n in (1, 2, 3)])
    update = sa.update(table).where(table.c.id == sa.bindparam("key")).values(value=sa.bindparam("new"))
    await transactions.execute(update, [{"key": 1, "new": 10}, {"key": 3, "new": 30}])
    assert await _values(engine, table) == [(1, 10), (2, 2), (3, 30)]


async def test_a_row_that_fails_leaves_none_of_the_statements_rows(
    engine: AsyncEngine, table: sa.Table, transactions: Transactions
) -> None:
    """When the last of three rows breaks a constraint, the error reaches the caller and the first two are not stored either; the runner works on after it."""
    with pytest.raises(sa.exc.IntegrityError):
        await transactions.execute(
            sa.insert(table), [{"id": 1, "value": 1}, {"id": 2, "value": 2}, {"id": 3, "value": -1}]
        )
    assert await _values(engine, table) == []
    await transactions.execute(sa.insert(table), [{"id": 4, "value": 4}])
    assert await _values(engine, table) == [(4, 4)]


async def test_an_update_whose_last_row_fails_changes_no_row(
    engine: AsyncEngine, table: sa.Table, transactions: Transactions
) -> None:
    """An update of three rows whose last one breaks a constraint changes none of them (the rows of one statement go together, as in a transaction)."""
    await transactions.execute(sa.insert(table), [{"id": n, "value": n} for n in (1, 2, 3)])
    update = sa.update(table).where(table.c.id == sa.bindparam("key")).values(value=sa.bindparam("new"))
    with pytest.raises(sa.exc.IntegrityError):
        await transactions.execute(
            update, [{"key": 1, "new": 10}, {"key": 2, "new": 20}, {"key": 3, "new": -1}]
        )
    assert await _values(engine, table) == [(1, 1), (2, 2), (3, 3)]
