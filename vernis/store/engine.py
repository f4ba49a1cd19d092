"""The database engine: one `AsyncEngine` per process, created in the app's lifespan.

`create_engine` accepts the two backends of SPEC §8:

- `sqlite+aiosqlite:///path.db`: every new connection is set to WAL (readers never block the one
  writer), `synchronous=NORMAL` (durable at checkpoints, safe with WAL), `foreign_keys=ON` (SQLite
  ignores foreign keys otherwise, so cascades would silently not happen) and a `busy_timeout`, so a
  writer waits for the lock instead of failing at once with "database is locked".
- `postgresql+asyncpg://...`: a fixed pool; connections dropped by a restart or a proxy are
  replaced once their first use fails.

Nothing connects until the engine is first used; the caller owns it and must `await engine.dispose()`.

Every engine hides the bound parameters from its errors (`hide_parameters`): a failed statement's
message names the SQL, never the values (a message's text, an e-mail address), so logging the error
logs no data.

`dialect_insert` gives the `INSERT ... ON CONFLICT` construct of whichever backend a connection
speaks, for idempotent seeding and upserts that stay correct under concurrent writers.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import Table, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

__all__ = [
    "SQLITE_BUSY_TIMEOUT_MS",
    "create_engine",
    "dialect_insert",
    "session_factory",
    "set_sqlite_pragmas",
]

SQLITE_BUSY_TIMEOUT_MS = 5000

_SQLITE_PRAGMAS = (
    # First, so that the pragmas after it wait for a lock held elsewhere instead of failing at once.
    f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
)


def create_engine(database_url: str, *, pool_size: int = 10, statement_timeout: float = 30.0) -> AsyncEngine:
    """Create the engine for `database_url` (SQLite via aiosqlite, or PostgreSQL via asyncpg).

    PostgreSQL gets a fixed pool of `pool_size` connections and a server-side
    `statement_timeout` (seconds): a statement stuck behind a lock fails instead of holding a
    connection forever. Raises `ValueError` for any other backend or driver, naming the URL forms
    that work.
    """
    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(_with_driver(url, "aiosqlite"))
    if backend == "postgresql":
        return _postgres_engine(_with_driver(url, "asyncpg"), pool_size, statement_timeout)
    raise ValueError(
        f"unsupported database {backend!r}: use sqlite+aiosqlite:///FILE or postgresql+asyncpg://..."
    )


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions whose objects stay readable after commit (no lazy reload from an async context)."""
    return async_sessionmaker(engine, expire_on_commit=False)


def dialect_insert(dialect: Dialect, table: Table) -> sqlite.Insert | postgresql.Insert:
    """`INSERT INTO table` with `on_conflict_do_nothing` / `on_conflict_do_update` for `dialect`."""
    if dialect.name == "sqlite":
        return sqlite.insert(table)
    if dialect.name == "postgresql":
        return postgresql.insert(table)
    raise ValueError(f"unsupported database {dialect.name!r}")


def _with_driver(url: URL, driver: str) -> URL:
    current = url.get_driver_name()
    if url.drivername == url.get_backend_name():  # plain `sqlite://` or `postgresql://`
        return url.set(drivername=f"{url.get_backend_name()}+{driver}")
    if current != driver:
        raise ValueError(f"the {url.get_backend_name()} driver must be {driver}, not {current}")
    return url


def _sqlite_engine(url: URL) -> AsyncEngine:
    engine = _create_async_engine(url, hide_parameters=True)
    event.listen(engine.sync_engine, "connect", set_sqlite_pragmas)
    return engine


def set_sqlite_pragmas(dbapi_connection: Any, _connection_record: Any) -> None:
    """Set `_SQLITE_PRAGMAS` on a new SQLite connection (a `connect` event listener).

    A pragma that finds the database locked is tried again, every 10 ms, until the busy timeout has
    passed since the first. The switch to WAL needs this: WAL lasts in the file, so only a new
    database is switched, and while another connection writes to it (two instances or two `alembic
    upgrade` on a first start) SQLite fails the switch at once, without waiting for the busy timeout.
    The wait blocks the connecting thread; it only happens on a new file's first connections.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    cursor = dbapi_connection.cursor()
    try:
        for pragma in _SQLITE_PRAGMAS:
            while True:
                try:
                    cursor.execute(pragma)
                    break
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or time.monotonic() >= deadline:
                        raise
                time.sleep(0.01)
    finally:
        cursor.close()


def _postgres_engine(url: URL, pool_size: int, statement_timeout: float) -> AsyncEngine:
    return _create_async_engine(
        url,
        hide_parameters=True,
        pool_size=pool_size,
        # No overflow: under a burst, a connection opened for it and closed when returned cost more
        # CPU (connect, TLS attempt, close) than waiting for a pooled one; the pool's size is the bound.
        max_overflow=0,
        connect_args={"server_settings": {"statement_timeout": str(int(statement_timeout * 1000))}},
        pool_timeout=30,
        # No ping before each use (a round trip for every statement): a connection that died with
        # a restart or a cut fails its first use, and that failure invalidates the whole pool, so
        # the next use connects anew (the caller reports that one failure as `unavailable`).
        # Recycled before typical idle cut-offs of proxies and managed databases.
        pool_recycle=1800,
    )
