"""Running a short write transaction in one go: `await runner.run(body)`, `body` a plain function of
a synchronous SQLAlchemy `Connection`.

Through the async engine every statement is a round trip of its own (on SQLite, aiosqlite hands each
one to its thread and back: a transaction of three statements costs about ten hops through the event
loop, each waiting its turn behind every streamed delta). The hot writes of a conversation (a user
message with its answer's row, the answers' periodic and final rows) are therefore written as one
function run in one hop:

- `EngineTransactions`: any backend, through the app's async engine (`AsyncConnection.run_sync`);
- `SqliteTransactions`: SQLite, a synchronous engine run on the event loop's own thread when it
  can take SQLite's write lock at once, else on a thread of its own (see the class).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.db.engine import set_sqlite_pragmas

logger = logging.getLogger("vernis.db")

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


# Inline transactions between two checkpoints of the write-ahead log (see SqliteTransactions).
CHECKPOINT_EVERY = 500


class SqliteTransactions:
    """SQLite write transactions, run on the event loop's thread when the write lock is free.

    These are short (a few statements on one conversation's rows, well under a millisecond of SQLite
    work), and the write-ahead log makes a commit a write to the page cache, not a disk flush. Run on
    a thread of their own, they waited instead: the thread needs the GIL again after each of the
    driver's calls, and the loop's thread holds it while the core is busy. Under 200 paced streams a
    new message's row took 20-30 ms (median) and 140-190 ms (90th percentile) to store, and every new
    answer waited that long for its first token; on the loop's thread it takes about 0.4 ms.

    So `run` first tries on the loop's thread, with `BEGIN IMMEDIATE` and no busy wait: either the
    lock is taken at once, and the transaction runs to its end right there, or SQLite says the
    database is locked (another connection is writing: the app's async engine, another process),
    and the transaction goes to the thread, whose connection waits for the lock as usual. The loop's
    connection never checkpoints the log itself (a checkpoint flushes to disk): every
    `CHECKPOINT_EVERY` commits, a passive checkpoint runs on the thread.
    """

    def __init__(self, database_url: str) -> None:
        url = make_url(database_url).set(drivername="sqlite")
        self._engine = sa.create_engine(url, pool_size=1, max_overflow=0)
        event.listen(self._engine, "connect", set_sqlite_pragmas)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vernis-sqlite-writer")
        self._inline = sa.create_engine(url, pool_size=1, max_overflow=0)
        event.listen(self._inline, "connect", _inline_pragmas)
        event.listen(self._inline, "begin", _begin_immediate)
        self._commits = 0
        self._checkpoint: asyncio.Future[None] | None = None
        self.fallbacks = 0  # transactions that found the lock taken and ran on the thread

    async def run(self, body: Callable[[Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        connection = None
        try:
            connection = self._inline.connect()
            transaction = connection.begin()  # BEGIN IMMEDIATE: the write lock now, or an error
        except BaseException as exc:
            if connection is not None:
                connection.close()
            if not (isinstance(exc, sa.exc.OperationalError) and _locked(exc)):
                raise
            self.fallbacks += 1
            return await loop.run_in_executor(self._thread, self._run, body)
        with connection, transaction:
            result = body(connection)
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY and self._checkpoint is None:
            self._commits = 0
            self._checkpoint = loop.run_in_executor(self._thread, self._checkpoint_log)
            self._checkpoint.add_done_callback(self._checkpointed)
        return result

    def _run(self, body: Callable[[Connection], T]) -> T:
        with self._engine.begin() as connection:
            return body(connection)

    def _checkpoint_log(self) -> None:
        with self._engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpoint = None
        if not done.cancelled() and done.exception() is not None:
            logger.warning("checkpoint of the SQLite log failed: %r", done.exception())

    async def aclose(self) -> None:
        if self._checkpoint is not None:
            await asyncio.gather(self._checkpoint, return_exceptions=True)
        self._inline.dispose()  # its connection belongs to this thread
        await asyncio.get_running_loop().run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown(wait=True)


def _inline_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    set_sqlite_pragmas(dbapi_connection, connection_record)
    # Transactions begun by `_begin_immediate`, not by the driver; no wait for a taken lock; no
    # checkpoint on this connection's commits.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.execute("PRAGMA wal_autocheckpoint=0")
    finally:
        cursor.close()


def _begin_immediate(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _locked(exc: sa.exc.OperationalError) -> bool:
    """SQLITE_BUSY: another connection holds the write lock."""
    return "database is locked" in str(exc.orig) or "database is busy" in str(exc.orig)


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
