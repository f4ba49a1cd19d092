"""The engine factory: per-connection SQLite pragmas, the PostgreSQL pool, URL handling, sessions."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.db import *  # noqa: F403
from vernis.store.engine import SQLITE_BUSY_TIMEOUT_MS, create_engine, session_factory
from vernis.store.models import Organization, table_of


async def test_sqlite_pragmas_on_every_connection(tmp_path: Path) -> None:
    """Each new SQLite connection runs in WAL with foreign keys on, a busy timeout and NORMAL sync."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/pragmas.db")
    try:
        async with engine.connect() as first, engine.connect() as second:
            for connection in (first, second):
                values = [
                    (await connection.exec_driver_sql(f"PRAGMA {name}")).scalar()
                    for name in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
                ]
                assert values == ["wal", 1, SQLITE_BUSY_TIMEOUT_MS, 1]
    finally:
        await engine.dispose()


async def test_a_new_database_is_switched_to_wal_while_another_connection_writes(tmp_path: Path) -> None:
    """A first connection waits out another's write to switch a new file to WAL, not failing "locked"."""
    # SQLite fails this switch at once, busy timeout or not, while another connection writes to a
    # file still in its first (rollback) journal mode: as when two instances start on a new file.
    path = tmp_path / "new.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE t (x INTEGER)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    release = threading.Timer(0.3, writer.execute, ("COMMIT",))
    release.start()
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        async with engine.connect() as connection:
            assert (await connection.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
            assert (await connection.exec_driver_sql("SELECT x FROM t")).scalar() == 1
    finally:
        release.join()
        writer.close()
        await engine.dispose()


async def test_plain_urls_get_the_async_drivers() -> None:
    """`sqlite://` and `postgresql://` URLs are completed with aiosqlite and asyncpg."""
    for url, driver in (
        ("sqlite:///x.db", "sqlite+aiosqlite"),
        ("postgresql://u@h/db", "postgresql+asyncpg"),
    ):
        engine = create_engine(url)
        assert engine.url.drivername == driver
        await engine.dispose()


@pytest.mark.parametrize(
    "url", ["mysql+aiomysql://u@h/db", "postgresql+psycopg://u@h/db", "sqlite+pysqlite:///x.db"]
)
def test_unsupported_urls_are_refused(url: str) -> None:
    """Another backend, or a synchronous driver, is refused with a ValueError before any connection."""
    with pytest.raises(ValueError, match=r"aiosqlite|asyncpg"):
        create_engine(url)


async def test_postgres_engine_is_pooled_and_lazy() -> None:
    """The PostgreSQL engine has a bounded pool and does not connect when created."""
    # Port 1 has no server: creating (and disposing) the engine must not try to reach it.
    engine = create_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    try:
        pool = engine.pool
        assert isinstance(pool, sa.pool.AsyncAdaptedQueuePool)
        assert (pool.size(), pool.checkedout()) == (10, 0)
    finally:
        await engine.dispose()


async def test_engine_connects_to_each_backend(engine: AsyncEngine, backend: str) -> None:
    """The engine of each test backend reaches its database and speaks its dialect."""
    async with engine.connect() as connection:
        assert (await connection.execute(sa.text("SELECT 1"))).scalar() == 1
    assert engine.dialect.name == {"sqlite": "sqlite", "postgres": "postgresql"}[backend]


async def test_session_objects_stay_loaded_after_commit(engine: AsyncEngine) -> None:
    """Sessions from `session_factory` keep attributes readable after commit (no lazy reload)."""
    sessions = session_factory(engine)
    async with sessions() as session:
        organization = Organization(name="Initech", external_id="initech")
        session.add(organization)
        await session.commit()
        assert organization.name == "Initech"


async def test_times_come_back_as_utc(engine: AsyncEngine) -> None:
    """An aware time in any zone is stored as that instant and read back as an aware UTC datetime."""
    berlin = datetime(2025, 3, 1, 9, 30, 15, 123456, tzinfo=timezone(timedelta(hours=1)))
    organizations = table_of(Organization)
    async with engine.begin() as connection:
        await connection.execute(
            sa.insert(organizations).values(
                id=uuid.uuid4(),
                name="Initech",
                external_id="initech",
                timezone="Europe/Berlin",
                created_at=berlin,
            )
        )
    async with engine.connect() as connection:
        stored = (await connection.execute(sa.select(organizations.c.created_at))).scalar_one()
    assert stored == berlin
    assert stored.tzinfo is UTC
    assert stored.hour == 8


async def test_naive_times_are_refused(engine: AsyncEngine) -> None:
    """A naive datetime never reaches the database: which zone it meant is unknowable."""
    async with engine.begin() as connection:
        with pytest.raises(sa.exc.StatementError, match="naive datetime"):
            await connection.execute(
                sa.insert(table_of(Organization)).values(
                    id=uuid.uuid4(), name="Initech", external_id="initech", created_at=datetime(2025, 1, 1)
                )
            )


async def test_a_failed_statement_names_no_bound_value_raised_or_logged(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """A statement that fails raises, and logs with its traceback, its SQL but never a value bound to it."""
    value = "jane.doe@example.com asked for a refund of 4111"
    with pytest.raises(sa.exc.DBAPIError) as caught:
        async with engine.connect() as connection:
            await connection.execute(
                sa.text("SELECT CAST(:value AS TEXT) || no_such_column"), {"value": value}
            )
    logging.getLogger("vernis.test").error("the statement failed", exc_info=caught.value)
    assert "no_such_column" in str(caught.value)
    assert "parameters hidden" in str(caught.value)
    assert value not in str(caught.value)
    assert "the statement failed" in caplog.text
    assert value not in caplog.text


async def test_concurrent_sqlite_writers_wait_instead_of_failing(tmp_path: Path) -> None:
    """Writers on separate SQLite connections queue on the busy timeout instead of 'database is locked'."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/busy.db")
    try:
        async with engine.begin() as connection:
            await connection.exec_driver_sql("CREATE TABLE counter (n INTEGER NOT NULL)")
            await connection.exec_driver_sql("INSERT INTO counter VALUES (0)")

        async def bump() -> None:
            async with engine.begin() as connection:
                await connection.exec_driver_sql("UPDATE counter SET n = n + 1")
                await asyncio.sleep(0.005)  # hold the write lock while the others queue

        await asyncio.gather(*(bump() for _ in range(12)))
        async with engine.connect() as connection:
            assert (await connection.exec_driver_sql("SELECT n FROM counter")).scalar() == 12
    finally:
        await engine.dispose()
