"""The migrations: they build exactly the schema of the models, on SQLite and PostgreSQL, from the
programmatic API and from the `alembic` command line, once however many instances start together."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

import vernis
from tests.fixtures.db import *  # noqa: F403
from vernis.db.engine import create_engine
from vernis.db.migrate import MIGRATIONS_DIR, current_revision, head_revision, upgrade
from vernis.db.models import Conversation, Member, Message, Organization, table_of

REPO_ROOT = Path(vernis.__file__).resolve().parent.parent
# Every table the models declare: the migrations must build exactly these.
CORE_TABLES = set(SQLModel.metadata.tables)


def _schema_differences(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    differences: list[object] = compare_metadata(context, SQLModel.metadata)
    return differences


async def _tables(database_url: str) -> set[str]:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            names = await connection.run_sync(lambda sync: sa.inspect(sync).get_table_names())
    finally:
        await engine.dispose()
    return set(names) - {"alembic_version"}


def test_migrations_live_beside_the_package() -> None:
    """The migrations folder is found relative to the `vernis` package, with one head."""
    assert MIGRATIONS_DIR == REPO_ROOT / "migrations"
    assert (MIGRATIONS_DIR / "env.py").is_file()
    revisions = sorted(path.name.split("_", 1)[0] for path in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"))
    assert head_revision() == revisions[-1]


async def test_upgrade_builds_the_schema_of_the_models(empty_database_url: str) -> None:
    """After `upgrade`, Alembic finds no difference between the database and the models."""
    assert await current_revision(empty_database_url) is None
    await upgrade(empty_database_url)
    assert await current_revision(empty_database_url) == head_revision()
    engine = create_engine(empty_database_url)
    try:
        async with engine.connect() as connection:
            assert await connection.run_sync(_schema_differences) == []
    finally:
        await engine.dispose()
    assert await _tables(empty_database_url) == CORE_TABLES


async def test_concurrent_upgrades_in_one_process(empty_database_url: str) -> None:
    """Several `upgrade` calls at once in one process all succeed and leave the database at head."""
    await asyncio.gather(*(upgrade(empty_database_url) for _ in range(3)))
    assert await current_revision(empty_database_url) == head_revision()


async def test_partial_unique_index_only_covers_client_ids(empty_database_url: str) -> None:
    """The migrated unique index rejects a repeated client message id but allows many without one."""
    await upgrade(empty_database_url)
    now = datetime.now(UTC)
    organization, member, conversation = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()

    def message(position: int, client_message_id: str | None) -> dict[str, object]:
        return {
            "id": uuid.uuid4(),
            "conversation_id": conversation,
            "position": position,
            "role": "user",
            "content": "hi",
            "status": "complete",
            "client_message_id": client_message_id,
            "created_at": now,
            "updated_at": now,
        }

    engine = create_engine(empty_database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                sa.insert(table_of(Organization)).values(
                    id=organization, name="O", slug="o", timezone="UTC", created_at=now
                )
            )
            await connection.execute(
                sa.insert(table_of(Member)).values(
                    id=member,
                    organization_id=organization,
                    email="m@o.test",
                    name="M",
                    role="owner",
                    created_at=now,
                )
            )
            await connection.execute(
                sa.insert(table_of(Conversation)).values(
                    id=conversation,
                    organization_id=organization,
                    member_id=member,
                    message_count=0,
                    created_at=now,
                    updated_at=now,
                )
            )
            messages = table_of(Message)
            await connection.execute(
                sa.insert(messages), [message(0, None), message(1, None), message(2, "c1")]
            )
        with pytest.raises(sa.exc.IntegrityError):
            async with engine.begin() as connection:
                await connection.execute(sa.insert(messages).values(message(3, "c1")))
    finally:
        await engine.dispose()


def _alembic(database_url: str, *arguments: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "VERNIS_DATABASE_URL": database_url}
    return subprocess.Popen(
        [sys.executable, "-W", "error", "-m", "alembic", *arguments],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(*processes: subprocess.Popen[str]) -> None:
    for process in processes:
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr


async def test_alembic_command_line_from_the_repository_root(empty_database_url: str) -> None:
    """Two operators running `alembic upgrade head` at once from the repository root both succeed."""
    _wait(_alembic(empty_database_url, "upgrade", "head"), _alembic(empty_database_url, "upgrade", "head"))
    assert await current_revision(empty_database_url) == head_revision()


async def test_downgrade_to_base_and_back(empty_database_url: str) -> None:
    """The core migration is reversible: downgrading to base drops every table, upgrading restores them."""
    await upgrade(empty_database_url)
    engine = create_engine(empty_database_url)
    try:
        async with engine.begin() as connection:

            def downgrade(sync: Connection) -> None:
                config = Config()
                config.set_main_option("script_location", str(MIGRATIONS_DIR))
                config.attributes["connection"] = sync
                command.downgrade(config, "base")

            await connection.run_sync(downgrade)
    finally:
        await engine.dispose()
    assert await current_revision(empty_database_url) is None
    assert await _tables(empty_database_url) == set()
    await upgrade(empty_database_url)
    assert await _tables(empty_database_url) == CORE_TABLES


async def test_upgrade_creates_a_missing_sqlite_file(tmp_path: Path) -> None:
    """`upgrade` on a SQLite path that does not exist yet creates the file, already in WAL mode."""
    path = tmp_path / "fresh.db"
    await upgrade(f"sqlite+aiosqlite:///{path}")
    assert path.is_file()
    assert path.read_bytes()[18:20] == b"\x02\x02"  # file format versions 2/2 mean WAL
