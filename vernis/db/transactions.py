"""Running a short write transaction in one go: `await runner.run(body)`, `body` a plain function of
a synchronous SQLAlchemy `Connection`.

Through the async engine every statement is a round trip of its own (on SQLite, aiosqlite hands each
one to its thread and back: a transaction of three statements costs about ten hops through the event
loop, each waiting its turn behind every streamed delta). The hot writes of a conversation (a user
message with its answer's row, the answers' periodic and final rows) are therefore written as one
function run in one hop:

- `EngineTransactions`: any backend, through the app's async engine (`AsyncConnection.run_sync`);
- `SqliteTransactions`: SQLite, a synchronous engine on one thread of its own. Its one thread is
  also the process's one SQLite writer for these transactions: they queue in order instead of
  meeting in SQLite's busy handler, which sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.db.engine import set_sqlite_pragmas

__all__ = ["EngineTransactions", "SqliteTransactions", "Transactions", "transactions_for"]

T = TypeVar("T")


class Transactions(Protocol):
    async def run(self, body: Callable[[Connection], T]) -> T:
        """Run `body` in one transaction, committed when it returns and rolled back when it raises
        (the exception propagates)."""
        ...

    async def aclose(self) -> None: ...


class EngineTransactions:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def run(self, body: Callable[[Connection], T]) -> T:
        async with self._engine.begin() as connection:
            return await connection.run_sync(body)

    async def aclose(self) -> None:
        """The engine is its owner's to dispose of."""


class SqliteTransactions:
    def __init__(self, database_url: str) -> None:
        url = make_url(database_url).set(drivername="sqlite")
        self._engine = sa.create_engine(url, pool_size=1, max_overflow=0)
        event.listen(self._engine, "connect", set_sqlite_pragmas)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vernis-sqlite-writer")

    async def run(self, body: Callable[[Connection], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._run, body)

    def _run(self, body: Callable[[Connection], T]) -> T:
        with self._engine.begin() as connection:
            return body(connection)

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown(wait=True)


def transactions_for(engine: AsyncEngine) -> Transactions:
    """The fastest way to run write transactions on `engine`'s database."""
    if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        return SqliteTransactions(engine.url.render_as_string(hide_password=False))
    return EngineTransactions(engine)
