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
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.db.engine import set_sqlite_pragmas

__all__ = ["EngineTransactions", "GroupCommit", "SqliteTransactions", "Transactions", "transactions_for"]

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


class GroupCommit(Generic[T]):
    """Writes asked for at once share one write: `await group.submit(items)` returns once `items`
    are written (or raises what the write raised).

    One write at a time, in the order asked: items submitted while a write is under way are written
    together by the next one, run by whichever caller finds no writer at work. What answers ending
    together, or their usage, cost: one transaction, not one each.
    """

    def __init__(self, write: Callable[[list[T]], Awaitable[None]]) -> None:
        self._write = write
        self._queued: list[tuple[list[T], asyncio.Future[None]]] = []
        self._writing = False

    async def submit(self, items: list[T]) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.append((items, done))
        if not self._writing:
            await self._drain()
        await done

    async def _drain(self) -> None:
        self._writing = True
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                try:
                    await self._write([item for items, _ in batch for item in items])
                except BaseException as exc:
                    # Each waiter gets the failure; a cancellation of this writer goes on up.
                    failure = exc if isinstance(exc, Exception) else RuntimeError("the write was cancelled")
                    for _, waiting in batch:
                        if not waiting.done():
                            waiting.set_exception(failure)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for _, waiting in batch:
                    if not waiting.done():
                        waiting.set_result(None)
        finally:
            self._writing = False
            if self._queued:
                # The writer was cancelled with items still queued behind it: write them anyway.
                asyncio.get_running_loop().create_task(self._drain())
