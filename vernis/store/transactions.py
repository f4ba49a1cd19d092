"""Running a short write transaction in one go: `await runner.run(body)`, `body` a plain function of
a synchronous SQLAlchemy `Connection`.

Through the async engine every statement is a round trip of its own (on SQLite, aiosqlite hands each
one to its thread and back: a transaction of three statements costs about ten hops through the event
loop, each waiting its turn behind every streamed delta). The hot writes of a conversation (a user
message with its answer's row, the answers' periodic and final rows) are therefore written as one
function run in one hop:

- `EngineTransactions`: any backend, through the app's async engine (`AsyncConnection.run_sync`);
- `SqliteTransactions`: SQLite, a synchronous engine run on the event loop's own thread when it
  can take SQLite's write lock at once, else on a thread of its own (see the class);
- `PostgresTransactions`: PostgreSQL, the engine's, plus asyncpg directly for the hot statements.

The hottest writes, every answer's (`execute`, `fetch`, `write`), and on SQLite the short reads of
every message, run and handshake (`read`), skip SQLAlchemy's execution machinery, which cost more
CPU than the database's own work: each statement is compiled once by SQLAlchemy for the dialect and
handed to the driver with its parameters put through the same bind processors, and a read's rows
come back through the columns' result processors (`vernis.store.compiled`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, Protocol, TypeVar

import asyncpg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection

from vernis.store.compiled import Compiled, Statements
from vernis.store.engine import set_sqlite_pragmas

logger = logging.getLogger("vernis.db")

__all__ = [
    "EngineTransactions",
    "GroupCommit",
    "PostgresTransactions",
    "SqliteTransactions",
    "Transactions",
    "Writer",
    "transactions_for",
]

T = TypeVar("T")


class Transactions(Protocol):
    async def run(self, body: Callable[[Connection], T]) -> T:
        """Run `body` in one transaction, committed when it returns and rolled back when it raises
        (the exception propagates)."""
        ...

    async def execute(self, statement: sa.Executable, rows: list[dict[str, Any]]) -> None:
        """Run one statement for each of `rows`: all of them or none, like `run` with a body of that
        one statement, maybe without a transaction of its own (see `PostgresTransactions`)."""
        ...

    async def fetch(self, statement: sa.Executable, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run one statement (atomic on its own) and return the rows it returns."""
        ...

    async def write(self, body: Callable[[Writer], T]) -> T:
        """`run`, for a body that only runs statements (`Writer`): on SQLite, straight through the
        driver."""
        ...

    async def read(
        self, statement: sa.Executable, parameters: Mapping[str, Any]
    ) -> Sequence[Mapping[Any, Any]]:
        """The rows of one short read (an indexed lookup of a row or a few), each a mapping of the
        columns' keys to their values. `statement` is built once, its values bind parameters named
        in `parameters`: SQLite compiles it once and runs it through the driver on the event loop's
        own thread (a reader of the write-ahead log waits for nobody), with no hop to a driver
        thread and none of SQLAlchemy's execution machinery."""
        ...

    async def aclose(self) -> None: ...


class Writer(Protocol):
    """What a body given to `Transactions.write` may do."""

    def execute(self, statement: sa.Executable, rows: list[dict[str, Any]]) -> None:
        """Run `statement` for each of `rows`."""
        ...

    def scalar(self, statement: sa.Executable, parameters: dict[str, Any]) -> Any:
        """Run `statement`; the first column of its first row, or None."""
        ...


class _ConnectionWriter:
    """A `Writer` on a SQLAlchemy connection."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def execute(self, statement: sa.Executable, rows: list[dict[str, Any]]) -> None:
        self._connection.execute(statement, rows)

    def scalar(self, statement: sa.Executable, parameters: dict[str, Any]) -> Any:
        return self._connection.execute(statement, parameters).scalar()


class EngineTransactions:
    """Through the async engine (any backend)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def run(self, body: Callable[[Connection], T]) -> T:
        async with self._engine.begin() as connection:
            return await connection.run_sync(body)

    async def execute(self, statement: sa.Executable, rows: list[dict[str, Any]]) -> None:
        await self.run(lambda connection: connection.execute(statement, rows))

    async def fetch(self, statement: sa.Executable, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
        return await self.run(
            lambda connection: [tuple(row) for row in connection.execute(statement, parameters)]
        )

    async def write(self, body: Callable[[Writer], T]) -> T:
        return await self.run(lambda connection: body(_ConnectionWriter(connection)))

    async def read(
        self, statement: sa.Executable, parameters: Mapping[str, Any]
    ) -> Sequence[Mapping[Any, Any]]:
        async with self._engine.connect() as connection:
            return (await connection.execute(statement, dict(parameters))).mappings().all()

    async def aclose(self) -> None:
        """The engine is its owner's to dispose of."""


# Connections of `PostgresTransactions`'s own pool: its callers are a new message's rows, and the
# group commits of answers' rows and of token usage (one write at a time each).
RAW_POOL_SIZE = 4


class PostgresTransactions(EngineTransactions):
    """PostgreSQL through asyncpg. `run` goes through the async engine; `execute` and `fetch`, the
    hot writes, go to asyncpg directly, on a small pool of its own, in autocommit: one round trip
    (the statement's rows are one implicit transaction: all or none), where the engine costs four
    (`BEGIN`, the statement, `COMMIT`, and a greenlet hop for each) and more CPU per statement.
    The statement is compiled once by SQLAlchemy for the engine's dialect, and its parameters go
    through the same bind processors; asyncpg's errors come back as SQLAlchemy's
    (`IntegrityError`, `OperationalError` when the database is out of reach, else `DBAPIError`)."""

    def __init__(self, engine: AsyncEngine, *, statement_timeout: float = 30.0) -> None:
        super().__init__(engine)
        url = engine.url.set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._server_settings = {"statement_timeout": str(int(statement_timeout * 1000))}
        self._pool: asyncpg.Pool | None = None
        self._opening: asyncio.Lock | None = None
        self._statements = Statements(engine.dialect)

    async def execute(self, statement: sa.Executable, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        compiled = self._statements.compile(statement, tuple(rows[0]))
        args = [compiled.arguments(row) for row in rows]
        async with self._connection(compiled) as connection:
            await connection.executemany(compiled.sql, args)

    async def fetch(self, statement: sa.Executable, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
        compiled = self._statements.compile(statement, ())
        async with self._connection(compiled) as connection:
            records = await connection.fetch(compiled.sql, *compiled.arguments(parameters))
        return [tuple(record) for record in records]

    @contextlib.asynccontextmanager
    async def _connection(self, compiled: Compiled) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection; asyncpg's errors raised in the block come out as SQLAlchemy's."""
        try:
            pool = self._pool or await self._open()
            async with pool.acquire() as connection:
                yield connection
        except asyncpg.IntegrityConstraintViolationError as exc:
            raise sa.exc.IntegrityError(compiled.sql, None, exc) from exc
        except asyncpg.PostgresError as exc:
            if isinstance(exc, asyncpg.PostgresConnectionError) or exc.sqlstate in _UNREACHABLE:
                raise sa.exc.OperationalError(compiled.sql, None, exc) from exc
            raise sa.exc.DBAPIError(compiled.sql, None, exc) from exc
        except (OSError, TimeoutError, asyncpg.InterfaceError) as exc:
            raise sa.exc.OperationalError(compiled.sql, None, exc) from exc

    async def _open(self) -> asyncpg.Pool:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=RAW_POOL_SIZE,
                    server_settings=self._server_settings,
                    reset=_keep_session,
                )
        return self._pool

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


class _DriverWriter:
    """A `Writer` on a sqlite3 connection, its statements compiled once by SQLAlchemy."""

    def __init__(self, driver: sqlite3.Connection, statements: Statements) -> None:
        self._driver = driver
        self._statements = statements

    def execute(self, statement: sa.Executable, rows: list[dict[str, Any]]) -> None:
        if rows:
            compiled = self._statements.compile(statement, tuple(rows[0]))
            self._driver.executemany(compiled.sql, [compiled.arguments(row) for row in rows])

    def scalar(self, statement: sa.Executable, parameters: dict[str, Any]) -> Any:
        compiled = self._statements.compile(statement, ())
        rows = self._driver.execute(compiled.sql, compiled.arguments(parameters)).fetchall()
        if not rows:
            return None
        value = rows[0][0]
        return value if compiled.first is None or value is None else compiled.first(value)


# Inline transactions between two checkpoints of the write-ahead log (see SqliteTransactions).
CHECKPOINT_EVERY = 500


class SqliteTransactions:
    """SQLite write transactions, run on the event loop's thread when the write lock is free.

    These are short (a few statements on one conversation's rows, well under a millisecond of SQLite
    work), and the write-ahead log makes a commit a write to the page cache, not a disk flush. Run on
    a thread of their own, they waited instead: the thread needs the GIL again after each of the
    driver's calls, and the loop's thread holds it while the core is busy, so under load a new
    message's row waited far longer than its own work to be stored, and its answer's first token
    waited with it.

    So `run` first tries on the loop's thread, with `BEGIN IMMEDIATE` and no busy wait: either the
    lock is taken at once, and the transaction runs to its end right there, or SQLite says the
    database is locked (another connection is writing: the app's async engine, another process),
    and the transaction goes to the thread, whose connection waits for the lock as usual. The loop's
    connection never checkpoints the log itself (a checkpoint flushes to disk): every
    `CHECKPOINT_EVERY` commits, a passive checkpoint runs on the thread.
    """

    def __init__(self, database_url: str, *, async_reads: AsyncEngine | None = None) -> None:
        url = make_url(database_url).set(drivername="sqlite")
        self._engine = _one_connection(url, set_sqlite_pragmas)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vernis-sqlite-writer")
        self._inline = _one_connection(url, _inline_pragmas)
        event.listen(self._inline, "begin", _begin_immediate)
        # `write`'s statements, on the loop's thread too, through the driver: a connection kept.
        self._direct = _Kept(_one_connection(url, _inline_pragmas))
        # Short reads on the loop's thread: a connection of their own, never waiting for a lock.
        self._reader = _Kept(_one_connection(url, _reader_pragmas))
        self._async_reads = async_reads
        self._statements = Statements(self._inline.dialect)
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
        self._committed()
        return result

    def _committed(self) -> None:
        """Counts an inline commit; every `CHECKPOINT_EVERY`, the log is checkpointed on the thread."""
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY and self._checkpoint is None:
            self._commits = 0
            self._checkpoint = asyncio.get_running_loop().run_in_executor(self._thread, self._checkpoint_log)
            self._checkpoint.add_done_callback(self._checkpointed)

    async def execute(self, statement: sa.Executable, rows: list[dict[str, Any]]) -> None:
        if rows:
            await self.write(lambda writer: writer.execute(statement, rows))

    async def write(self, body: Callable[[Writer], T]) -> T:
        """On the loop's thread, straight through the driver (statements compiled once, their
        parameters given to the driver as it takes them): less CPU than the same through a
        SQLAlchemy connection. A taken lock sends it to the thread, like `run`."""
        # Nothing is awaited while the transaction is open: the kept connection is free again
        # before the next `write` can start.
        driver = self._direct.driver()
        try:
            driver.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _locked_error(exc):
                raise sa.exc.OperationalError("BEGIN IMMEDIATE", None, exc) from exc
            locked = True
        else:
            locked = False
            try:
                result = body(_DriverWriter(driver, self._statements))
                driver.execute("COMMIT")
            except BaseException as exc:
                driver.execute("ROLLBACK")
                if isinstance(exc, sqlite3.IntegrityError):
                    raise sa.exc.IntegrityError(None, None, exc) from exc
                if isinstance(exc, sqlite3.OperationalError):
                    raise sa.exc.OperationalError(None, None, exc) from exc
                if isinstance(exc, sqlite3.DatabaseError):
                    raise sa.exc.DBAPIError(None, None, exc) from exc
                raise
        if locked:
            self.fallbacks += 1
            return await asyncio.get_running_loop().run_in_executor(
                self._thread, self._run, lambda connection: body(_ConnectionWriter(connection))
            )
        self._committed()
        return result

    async def fetch(self, statement: sa.Executable, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
        return await self.run(
            lambda connection: [tuple(row) for row in connection.execute(statement, parameters)]
        )

    async def read(
        self, statement: sa.Executable, parameters: Mapping[str, Any]
    ) -> Sequence[Mapping[Any, Any]]:
        """On the loop's thread, through the driver, in a read of its own: in WAL mode a reader takes
        no lock a writer holds. Should SQLite still say busy (a checkpoint resetting the log), the
        read goes through `async_reads` (the app's async engine), which waits as usual."""
        compiled = self._statements.compile(statement, ())
        try:
            rows = self._reader.driver().execute(compiled.sql, compiled.arguments(parameters)).fetchall()
            return compiled.mappings(rows)
        except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:
            locked = _locked(exc) if isinstance(exc, sa.exc.OperationalError) else _locked_error(exc)
            if not locked or self._async_reads is None:
                raise
        async with self._async_reads.connect() as connection:
            return (await connection.execute(statement, dict(parameters))).mappings().all()

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
        self._direct.close()
        self._reader.close()
        await asyncio.get_running_loop().run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown(wait=True)


def _one_connection(url: sa.URL, pragmas: Callable[[Any, Any], None]) -> sa.Engine:
    """An engine of one connection to `url`, set up by `pragmas` when it connects. Errors name the
    SQL, never the values (as vernis.store.engine's engines)."""
    engine = sa.create_engine(url, pool_size=1, max_overflow=0, hide_parameters=True)
    event.listen(engine, "connect", pragmas)
    return engine


class _Kept:
    """The one connection of `engine`, checked out at first use and kept until `close`: for
    statements run on the loop's thread with nothing awaited between them, a pool's checkout and
    checkin around each (more CPU than a short statement's own work) buy nothing."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._pooled: PoolProxiedConnection | None = None

    def driver(self) -> sqlite3.Connection:
        if self._pooled is None:
            self._pooled = self._engine.raw_connection()
        driver = self._pooled.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        return driver

    def close(self) -> None:
        if self._pooled is not None:
            self._pooled.close()
            self._pooled = None
        self._engine.dispose()


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


def _reader_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    # Reads only, on the loop's thread: never a busy wait, not even while connecting (the journal
    # mode is the writers' to set: `set_sqlite_pragmas` waits for a lock to switch it).
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout=0")
    finally:
        cursor.close()


def _begin_immediate(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _locked(exc: sa.exc.OperationalError) -> bool:
    """SQLITE_BUSY: another connection holds the write lock."""
    return _locked_error(exc.orig)


def _locked_error(error: BaseException | None) -> bool:
    return "database is locked" in str(error) or "database is busy" in str(error)


def transactions_for(engine: AsyncEngine, *, statement_timeout: float = 30.0) -> Transactions:
    """The fastest way to run write transactions on `engine`'s database."""
    if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        return SqliteTransactions(engine.url.render_as_string(hide_password=False), async_reads=engine)
    if engine.dialect.name == "postgresql":
        return PostgresTransactions(engine, statement_timeout=statement_timeout)
    return EngineTransactions(engine)


async def _keep_session(connection: asyncpg.Connection) -> None:
    """No reset query when a connection goes back to the pool (a round trip per statement): these
    statements change nothing of the session (no locks, settings or listeners)."""


# SQLSTATEs of a database out of reach: shutting down, starting up, too many connections.
_UNREACHABLE = frozenset({"57P01", "57P02", "57P03", "53300"})


class GroupCommit(Generic[T]):
    """Writes asked for at once share one write: `await group.submit(items)` returns once `items`
    are written (or raises what the write raised).

    One write at a time, in the order asked: items submitted while a write is under way are written
    together by the next one, run by whichever caller finds no writer at work. What answers ending
    together, or their usage, cost: one transaction, not one each, wherever the write waits (on
    PostgreSQL). On SQLite a write runs inline to its end before anyone else can ask, so each
    carries what one caller asked (`bench/results/2026-11-server.md`, session 20).
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
