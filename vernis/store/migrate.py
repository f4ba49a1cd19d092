"""Apply the Alembic migrations programmatically: the only way the schema is created in production.

The migrations live in `migrations/` at the repository root, beside the `vernis` package (SPEC §1);
`alembic upgrade head` from the root runs the same scripts. `upgrade` is safe to call from several
instances at once: the migration environment holds a database lock for the whole upgrade.
Within one process, calls are serialised too: Alembic keeps the running migration in module globals.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Sequence
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection

import vernis
from vernis.store.engine import create_engine

__all__ = ["MIGRATIONS_DIR", "MigrationError", "current_revision", "head_revision", "upgrade"]

MIGRATIONS_DIR = Path(vernis.__file__).resolve().parent.parent / "migrations"

# One lock per event loop: an asyncio.Lock cannot be shared between loops.
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _process_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _locks.get(loop)
    if lock is None:
        lock = _locks[loop] = asyncio.Lock()
    return lock


def _config(connection: Connection | None = None, branches: Sequence[Path] = ()) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if branches:
        locations = [MIGRATIONS_DIR / "versions", *branches]
        config.set_main_option("path_separator", "os")
        config.set_main_option("version_locations", os.pathsep.join(str(path) for path in locations))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def _upgrade(connection: Connection, revision: str, branches: Sequence[Path]) -> None:
    config = _config(connection, branches)
    script = ScriptDirectory.from_config(config)
    applied = MigrationContext.configure(connection).get_current_heads()
    for current in applied:
        try:
            script.get_revision(current)
        except CommandError:
            raise MigrationError(
                f"the database is at revision {current!r}, which this Vernis does not know: it was made by "
                "a toolkit that is not enabled now, or by a pre-release Vernis whose schema cannot be "
                "upgraded (enable that toolkit, or start from a new database)"
            ) from None
    command.upgrade(config, revision)


class MigrationError(RuntimeError):
    """The database's schema cannot be brought to this version's; the message says why and what to do."""


async def upgrade(database_url: str, revision: str = "heads", *, branches: Sequence[Path] = ()) -> None:
    """Migrate the database at `database_url` to `revision` (default: the newest of the core and of
    every branch in `branches`, the version folders of the enabled toolkits), in one transaction.

    Creates the SQLite file if missing. Raises whatever the driver raises when the database is
    unreachable; a database already at `revision` is left untouched. A database holding a revision
    none of the scripts knows raises `MigrationError`.
    """
    engine = create_engine(database_url)
    try:
        async with _process_lock(), engine.begin() as connection:
            await connection.run_sync(lambda sync: _upgrade(sync, revision, branches))
    finally:
        # The migration environment changes per-connection pragmas on SQLite: never pool it on.
        await engine.dispose()


async def current_revision(database_url: str) -> str | None:
    """The revision the database is at, or None for a database never migrated."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(
                lambda sync: MigrationContext.configure(sync).get_current_revision()
            )
    finally:
        await engine.dispose()


def head_revision() -> str:
    """The newest revision in `migrations/` (what `upgrade` migrates to)."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found in {MIGRATIONS_DIR}")
    return head
