"""The migrations: the core's build exactly the core's models, and a toolkit's branch (the CRM's) adds
exactly its own tables, on SQLite and PostgreSQL, from the programmatic API and from the `alembic`
command line, once however many instances start together; a revision nobody knows stops the upgrade."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

import vernis
import vernis.store.models
import vernis_crm
import vernis_crm.models
from tests.fixtures.db import *  # noqa: F403
from vernis.store.engine import create_engine
from vernis.store.migrate import MIGRATIONS_DIR, MigrationError, current_revision, head_revision, upgrade
from vernis.store.models import Conversation, Member, Message, Organization, table_of

REPO_ROOT = Path(vernis.__file__).resolve().parent.parent
assert vernis_crm.toolkit.migrations is not None
CRM = [vernis_crm.toolkit.migrations]


def _tables_of(module: ModuleType) -> set[str]:
    """The tables the models of `module` declare."""
    return {
        value.__table__.name
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, SQLModel)
        and value.__module__ == module.__name__
        and hasattr(value, "__table__")
    }


# What each must build: the core's migrations the core's tables, the CRM's branch the CRM's.
CORE_TABLES = _tables_of(vernis.store.models)
CRM_TABLES = _tables_of(vernis_crm.models)


def _metadata(tables: set[str]) -> sa.MetaData:
    """The models' metadata restricted to `tables`."""
    metadata = sa.MetaData()
    for name in tables:
        SQLModel.metadata.tables[name].to_metadata(metadata)
    return metadata


async def _schema_differences(database_url: str, tables: set[str]) -> list[object]:
    """What Alembic finds different between the database and the models of `tables`."""

    def compare(connection: Connection) -> list[object]:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences: list[object] = compare_metadata(context, _metadata(tables))
        return differences

    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(compare)
    finally:
        await engine.dispose()


async def _tables(database_url: str) -> set[str]:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            names = await connection.run_sync(lambda sync: sa.inspect(sync).get_table_names())
    finally:
        await engine.dispose()
    return set(names) - {"alembic_version"}


async def _heads(database_url: str) -> set[str]:
    """Every revision the database's `alembic_version` holds (one per branch head)."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            heads = await connection.run_sync(
                lambda sync: MigrationContext.configure(sync).get_current_heads()
            )
    finally:
        await engine.dispose()
    return set(heads)


async def _execute(database_url: str, *statements: str) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as connection:
            for statement in statements:
                await connection.exec_driver_sql(statement)
    finally:
        await engine.dispose()


def test_migrations_live_beside_the_package() -> None:
    """The migrations folder is found relative to the `vernis` package, with one head."""
    assert MIGRATIONS_DIR == REPO_ROOT / "migrations"
    assert (MIGRATIONS_DIR / "env.py").is_file()
    revisions = sorted(path.name.split("_", 1)[0] for path in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"))
    assert head_revision() == revisions[-1]


def test_the_core_and_the_crm_declare_tables_of_their_own() -> None:
    """The core's and the CRM's models declare disjoint sets of tables: the core's hold no CRM data."""
    assert {"organization", "member", "assistant_conversation", "audit_log"} <= CORE_TABLES
    assert {"contact", "call", "sms_message", "task", "notification"} <= CRM_TABLES
    assert not CORE_TABLES & CRM_TABLES


async def test_upgrade_builds_the_schema_of_the_core_models_only(empty_database_url: str) -> None:
    """After a core-only `upgrade`, Alembic finds no difference between the database and the core's
    models, and no CRM table exists."""
    assert await current_revision(empty_database_url) is None
    await upgrade(empty_database_url)
    assert await current_revision(empty_database_url) == head_revision()
    assert await _schema_differences(empty_database_url, CORE_TABLES) == []
    assert await _tables(empty_database_url) == CORE_TABLES


async def test_upgrade_with_the_crm_branch_builds_its_tables(empty_database_url: str) -> None:
    """With the CRM's branch, every CRM table exists as its models declare it, beside the core's, and
    the database is at the branch's head (which depends on the core's)."""
    await upgrade(empty_database_url, branches=CRM)
    assert await _heads(empty_database_url) == {"crm_0001", head_revision()}
    assert await _tables(empty_database_url) == CORE_TABLES | CRM_TABLES
    assert await _schema_differences(empty_database_url, CORE_TABLES | CRM_TABLES) == []


async def test_a_toolkit_enabled_later_adds_its_tables(empty_database_url: str) -> None:
    """A core-only database gets the CRM's tables when the CRM is enabled later, its rows kept."""
    await upgrade(empty_database_url)
    organizations = table_of(Organization)
    engine = create_engine(empty_database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(
                sa.insert(organizations).values(
                    id=uuid.uuid4(), name="O", external_id="o", timezone="UTC", created_at=datetime.now(UTC)
                )
            )
        await upgrade(empty_database_url, branches=CRM)
        async with engine.connect() as connection:
            names = (await connection.execute(sa.select(organizations.c.name))).scalars().all()
    finally:
        await engine.dispose()
    assert await _tables(empty_database_url) == CORE_TABLES | CRM_TABLES
    assert names == ["O"]


@pytest.mark.parametrize("branches", [[], CRM], ids=["core", "crm"])
async def test_upgrading_twice_is_a_no_op(empty_database_url: str, branches: Sequence[Path]) -> None:
    """A second `upgrade` to the same heads changes nothing: same revision, same tables and schema."""
    await upgrade(empty_database_url, branches=branches)
    heads, tables = await _heads(empty_database_url), await _tables(empty_database_url)
    await upgrade(empty_database_url, branches=branches)
    assert (await _heads(empty_database_url), await _tables(empty_database_url)) == (heads, tables)
    assert await _schema_differences(empty_database_url, tables) == []


async def test_an_unknown_revision_stops_the_upgrade(empty_database_url: str) -> None:
    """A database stamped with a revision none of the scripts knows raises `MigrationError` naming it
    and what to do, and nothing is created."""
    await _execute(
        empty_database_url,
        "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
        "INSERT INTO alembic_version (version_num) VALUES ('9999_from_the_future')",
    )
    for branches in ([], CRM):
        with pytest.raises(MigrationError, match="'9999_from_the_future'") as raised:
            await upgrade(empty_database_url, branches=branches)
        assert "toolkit" in str(raised.value)
        assert "new database" in str(raised.value)
    assert await _tables(empty_database_url) == set()


async def test_a_database_of_a_toolkit_no_longer_enabled_stops_the_upgrade(empty_database_url: str) -> None:
    """A database migrated with the CRM's branch, upgraded without it, raises `MigrationError` naming the
    branch's revision, and keeps its tables."""
    await upgrade(empty_database_url, branches=CRM)
    with pytest.raises(MigrationError, match=r"'crm_0001'.*toolkit that is not enabled"):
        await upgrade(empty_database_url)
    assert await _tables(empty_database_url) == CORE_TABLES | CRM_TABLES


@pytest.mark.parametrize("branches", [[], CRM], ids=["core", "crm"])
async def test_concurrent_upgrades_in_one_process(empty_database_url: str, branches: Sequence[Path]) -> None:
    """Several `upgrade` calls at once in one process all succeed and leave the database at head."""
    await asyncio.gather(*(upgrade(empty_database_url, branches=branches) for _ in range(3)))
    assert await _heads(empty_database_url) == (
        {"crm_0001", head_revision()} if branches else {head_revision()}
    )


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
                    id=organization, name="O", external_id="o", timezone="UTC", created_at=now
                )
            )
            await connection.execute(
                sa.insert(table_of(Member)).values(
                    id=member,
                    organization_id=organization,
                    external_id="m",
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
    assert await _tables(empty_database_url) == CORE_TABLES


def _downgrade_to_base(branches: Sequence[Path]) -> Callable[[Connection], None]:
    def downgrade(sync: Connection) -> None:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        if branches:
            config.set_main_option("path_separator", "os")
            locations = [MIGRATIONS_DIR / "versions", *branches]
            config.set_main_option("version_locations", os.pathsep.join(str(path) for path in locations))
        config.attributes["connection"] = sync
        command.downgrade(config, "base")

    return downgrade


@pytest.mark.parametrize("branches", [[], CRM], ids=["core", "crm"])
async def test_downgrade_to_base_and_back(empty_database_url: str, branches: Sequence[Path]) -> None:
    """The migrations are reversible: downgrading to base drops every table (the CRM's too), upgrading
    restores them."""
    await upgrade(empty_database_url, branches=branches)
    expected = await _tables(empty_database_url)
    assert expected == (CORE_TABLES | CRM_TABLES if branches else CORE_TABLES)
    engine = create_engine(empty_database_url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_downgrade_to_base(branches))
    finally:
        await engine.dispose()
    assert await current_revision(empty_database_url) is None
    assert await _tables(empty_database_url) == set()
    await upgrade(empty_database_url, branches=branches)
    assert await _tables(empty_database_url) == expected


async def test_upgrade_creates_a_missing_sqlite_file(tmp_path: Path) -> None:
    """`upgrade` on a SQLite path that does not exist yet creates the file, already in WAL mode."""
    path = tmp_path / "fresh.db"
    await upgrade(f"sqlite+aiosqlite:///{path}")
    assert path.is_file()
    assert path.read_bytes()[18:20] == b"\x02\x02"  # file format versions 2/2 mean WAL
