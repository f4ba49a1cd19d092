"""Alembic environment: every migration runs through Vernis's own async engine (`create_engine`).

Two ways in:

- `vernis.store.migrate` (the server and `vernis db upgrade`) hands over an open connection in
  `config.attributes["connection"]`, from `AsyncConnection.run_sync`, inside a transaction it
  commits itself; no second event loop is started.
- `alembic upgrade head` from the repository root: the URL is `sqlalchemy.url` from alembic.ini when
  set, else `VERNIS_DATABASE_URL` (or `.env`), exactly as the server reads it.

Either way the whole upgrade is one transaction that holds the database's migration lock: a
PostgreSQL advisory lock, or SQLite's write lock (`BEGIN IMMEDIATE`). Several instances starting
at once therefore migrate one after the other; the later ones find the schema at head.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

import vernis.store.models  # noqa: F401  (registers the core tables on SQLModel.metadata)
from vernis.store.engine import create_engine

# Any constant shared by every Vernis instance; it names the lock, "vernis" in ASCII.
_POSTGRES_LOCK_KEY = 0x7665726E6973

config = context.config
target_metadata = SQLModel.metadata


def _database_url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from vernis.settings import Settings

    return Settings().database_url


def _run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # Batch operations copy a table and drop the original; with foreign keys on, that drop
        # would cascade into the rows referencing it. The pragma only applies outside a transaction.
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    elif connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_POSTGRES_LOCK_KEY})")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=sqlite,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
    if sqlite:
        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
        if broken:
            raise RuntimeError(f"migration left rows with dangling foreign keys: {broken[:5]}")


async def _run_with_own_engine() -> None:
    engine = create_engine(_database_url())
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    url = _database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_with_own_engine())


if config.config_file_name is not None and config.attributes.get("connection") is None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
