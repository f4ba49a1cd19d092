"""SQLite write transactions (vernis.store.transactions): on the loop's thread when the write lock is free,
on the writer thread when another connection holds it, committed or rolled back whole either way."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from vernis.conversation._sql import UPDATE_ANSWER
from vernis.conversation.summaries import _LATEST
from vernis.store.compiled import Statements
from vernis.store.engine import create_engine
from vernis.store.models import UTCDateTime
from vernis.store.transactions import CHECKPOINT_EVERY, EngineTransactions, SqliteTransactions


def _insert(value: int) -> Callable[[Connection], int]:
    def body(connection: Connection) -> int:
        connection.execute(sa.text("INSERT INTO item (value) VALUES (:value)"), {"value": value})
        return threading.get_ident()

    return body


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "tx.db"
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE item (value INTEGER NOT NULL CHECK (value >= 0))")
        connection.commit()
    finally:
        connection.close()  # the last connection: its log is checkpointed into the file and removed
    return path


def _holding_the_lock(path: Path) -> sqlite3.Connection:
    """Another connection, holding the write lock with a row of 0 not yet committed."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO item (value) VALUES (0)")
    return holder


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _values(path: Path) -> list[int]:
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute("SELECT value FROM item ORDER BY rowid")]
    finally:
        connection.close()


async def test_a_free_lock_runs_the_transaction_on_the_loops_thread(database: Path) -> None:
    """With nobody else writing, the body runs on the event loop's own thread (no thread hop) and is committed."""
    transactions = SqliteTransactions(f"sqlite:///{database}")
    try:
        ran_on = await transactions.run(_insert(1))
    finally:
        await transactions.aclose()
    assert ran_on == threading.get_ident()
    assert transactions.fallbacks == 0
    assert _values(database) == [1]


async def test_a_taken_lock_sends_the_transaction_to_the_writer_thread_which_waits_for_it(
    database: Path,
) -> None:
    """While another connection holds the write lock, the loop is not blocked: the transaction waits on the writer thread and commits after the lock is released."""
    holder = _holding_the_lock(database)
    transactions = SqliteTransactions(f"sqlite:///{database}")
    try:
        pending = asyncio.ensure_future(transactions.run(_insert(2)))
        ticks = 0
        while not pending.done() and ticks < 20:
            await asyncio.sleep(0.01)  # the loop keeps running meanwhile
            ticks += 1
        assert not pending.done()
        holder.execute("COMMIT")
        ran_on = await asyncio.wait_for(pending, 5)
        ran_next_on = await transactions.run(_insert(3))
    finally:
        holder.close()
        await transactions.aclose()
    assert ran_on != threading.get_ident()
    assert ran_next_on == threading.get_ident()  # the refused BEGIN left the loop's connection usable
    assert transactions.fallbacks == 1
    assert _values(database) == [0, 2, 3]


async def test_a_failing_body_rolls_back_and_the_next_transaction_runs_inline(database: Path) -> None:
    """A body that raises leaves nothing written and the error propagates; the loop's connection is usable right after."""
    transactions = SqliteTransactions(f"sqlite:///{database}")

    def half_then_fail(connection: Connection) -> None:
        connection.execute(sa.text("INSERT INTO item (value) VALUES (5)"))
        connection.execute(sa.text("INSERT INTO item (value) VALUES (-1)"))  # violates the CHECK

    try:
        with pytest.raises(sa.exc.IntegrityError):
            await transactions.run(half_then_fail)
        await transactions.run(_insert(6))
    finally:
        await transactions.aclose()
    assert _values(database) == [6]
    assert transactions.fallbacks == 0


async def test_a_failed_statement_names_no_bound_value_on_the_loop_or_the_thread(database: Path) -> None:
    """A failing statement's error names its SQL but never its bound value, inline and on the writer thread."""
    value = "jane.doe@example.com asked for a refund"

    def failing(connection: Connection) -> None:
        connection.execute(
            sa.text("INSERT INTO item (value) VALUES (:value || no_such_column)"), {"value": value}
        )

    transactions = SqliteTransactions(f"sqlite:///{database}")
    try:
        with pytest.raises(sa.exc.OperationalError) as inline:
            await transactions.run(failing)
        holder = _holding_the_lock(database)
        try:
            pending = asyncio.ensure_future(transactions.run(failing))
            await asyncio.sleep(0.05)
            holder.execute("ROLLBACK")
            with pytest.raises(sa.exc.OperationalError) as threaded:
                await asyncio.wait_for(pending, 5)
        finally:
            holder.close()
    finally:
        await transactions.aclose()
    assert transactions.fallbacks == 1
    for caught in (inline, threaded):
        assert "no_such_column" in str(caught.value)
        assert value not in str(caught.value)


async def test_the_log_is_checkpointed_off_the_loop(database: Path) -> None:
    """The loop's connection never checkpoints (the database file keeps its size while the log grows); after CHECKPOINT_EVERY commits a checkpoint on the writer thread moves the log into the file."""
    initial = _size(database)
    transactions = SqliteTransactions(f"sqlite:///{database}")
    try:
        for n in range(CHECKPOINT_EVERY - 1):
            await transactions.run(_insert(n))
        assert _size(database) == initial
        assert _size(Path(f"{database}-wal")) > 0
        await transactions.run(_insert(CHECKPOINT_EVERY))
        for _ in range(200):
            if _size(database) > initial:
                break
            await asyncio.sleep(0.01)
        assert _size(database) > initial
    finally:
        await transactions.aclose()
    assert len(_values(database)) == CHECKPOINT_EVERY


_ITEMS = sa.table("item", sa.column("value"))


async def test_a_statement_executed_while_the_lock_is_taken_waits_on_the_writer_thread(
    database: Path,
) -> None:
    """execute() straight through the driver: with the lock taken elsewhere it waits on the writer thread (the loop runs on) and commits after; with the lock free it runs inline; a row breaking a constraint leaves none of the statement's rows and the next one runs."""
    holder = _holding_the_lock(database)
    transactions = SqliteTransactions(f"sqlite:///{database}")
    insert = sa.insert(_ITEMS)
    try:
        pending = asyncio.ensure_future(transactions.execute(insert, [{"value": 1}, {"value": 2}]))
        for _ in range(20):
            await asyncio.sleep(0.01)  # the loop keeps running meanwhile
        assert not pending.done()
        holder.execute("COMMIT")
        await asyncio.wait_for(pending, 5)
        await transactions.execute(insert, [{"value": 3}])
        with pytest.raises(sa.exc.IntegrityError):
            await transactions.execute(insert, [{"value": 4}, {"value": -1}])  # violates the CHECK
        await transactions.execute(insert, [{"value": 5}])
    finally:
        holder.close()
        await transactions.aclose()
    assert transactions.fallbacks == 1
    assert _values(database) == [0, 1, 2, 3, 5]


async def test_writes_while_the_lock_is_taken_wait_together_without_blocking_the_loop(database: Path) -> None:
    """Two execute()s and a run() started while another connection holds the lock all wait on the writer thread (the loop's one connection is not held across the wait, so the second does not block the loop on the pool) and all commit once it is released."""
    holder = _holding_the_lock(database)
    transactions = SqliteTransactions(f"sqlite:///{database}")
    insert = sa.insert(_ITEMS)
    try:
        first = asyncio.ensure_future(transactions.execute(insert, [{"value": 1}]))
        await asyncio.sleep(0.05)  # the first is waiting on the thread
        # Before the fix, the second waited for the pool on the loop's thread until its timeout.
        second = asyncio.ensure_future(transactions.execute(insert, [{"value": 2}]))
        third = asyncio.ensure_future(transactions.run(_insert(3)))
        await asyncio.sleep(0.05)
        assert not (first.done())
        assert not (second.done())
        assert not (third.done())
        holder.execute("COMMIT")
        await asyncio.wait_for(asyncio.gather(first, second, third), 10)
    finally:
        holder.close()
        await transactions.aclose()
    assert transactions.fallbacks == 3
    assert sorted(_values(database)) == [0, 1, 2, 3]


async def test_a_read_runs_on_the_loop_while_another_connection_writes(database: Path) -> None:
    """read() answers at once while another connection holds the write lock (no wait, no thread), seeing what was committed and not what is being written; after the commit it sees that too."""
    committed = sqlite3.connect(database)
    committed.execute("INSERT INTO item (value) VALUES (7)")
    committed.commit()
    committed.close()
    holder = _holding_the_lock(database)  # its row of 0, not committed
    transactions = SqliteTransactions(f"sqlite:///{database}")
    select = sa.select(_ITEMS.c.value).order_by(_ITEMS.c.value)
    try:
        reading = asyncio.ensure_future(transactions.read(select, {}))
        await asyncio.sleep(0)
        assert reading.done()  # it never waited: on the loop's thread, done within one step
        assert [row["value"] for row in reading.result()] == [7]
        holder.execute("COMMIT")
        assert [row["value"] for row in await transactions.read(select, {})] == [0, 7]
    finally:
        holder.close()
        await transactions.aclose()
    assert transactions.fallbacks == 0


_TYPED = sa.Table(
    "typed",
    sa.MetaData(),
    sa.Column("id", sa.Uuid, primary_key=True),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("data", sa.JSON, nullable=True),
    sa.Column("flag", sa.Boolean, nullable=False),
    sa.Column("note", sa.String, nullable=True),
)


async def test_a_read_through_the_driver_gives_what_sqlalchemy_gives(tmp_path: Path) -> None:
    """read() of a statement built once returns the same rows as SQLAlchemy's engine, each value of its column's type (ids, aware times, JSON, booleans, NULL), for each set of parameters."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'typed.db'}"
    engine = create_engine(url)
    async with engine.begin() as connection:
        await connection.run_sync(_TYPED.metadata.create_all)
    first, second = uuid.uuid4(), uuid.uuid4()
    at = datetime(2026, 11, 28, 5, 30, 1, 250_000, tzinfo=UTC)
    async with engine.begin() as connection:
        await connection.execute(
            sa.insert(_TYPED),
            [
                {"id": first, "at": at, "data": {"a": [1, "b"]}, "flag": True, "note": None},
                {"id": second, "at": at, "data": None, "flag": False, "note": "x"},
            ],
        )
    statement = sa.select(_TYPED).where(_TYPED.c.id == sa.bindparam("id"), _TYPED.c.flag.is_not(None))
    transactions = SqliteTransactions(url)
    try:
        for wanted in (first, second, uuid.uuid4()):
            ours = await transactions.read(statement, {"id": wanted})
            theirs = await EngineTransactions(engine).read(statement, {"id": wanted})
            assert [dict(row) for row in ours] == [dict(row) for row in theirs]
            assert len(ours) == (1 if wanted in (first, second) else 0)
        row = (await transactions.read(statement, {"id": first}))[0]
        assert row["id"] == first
        assert row["at"] == at
        assert row["at"].tzinfo is not None
        assert row["data"] == {"a": [1, "b"]}
        assert row["flag"] is True
        assert row["note"] is None
    finally:
        await transactions.aclose()
        await engine.dispose()


_DIALECTS: list[sa.Dialect] = [sqlite.dialect(), postgresql.asyncpg.dialect()]  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("dialect", _DIALECTS, ids=["sqlite", "postgresql"])
def test_prebuilt_statements_take_their_arguments_as_sqlalchemy_would(dialect: sa.Dialect) -> None:
    """A prebuilt statement's positional arguments, taken from the row directly (literals from the statement), are those SQLAlchemy's construct_params gives, through the same bind processors; a missing value raises SQLAlchemy's own error."""
    statements = Statements(dialect)
    now = datetime.now(UTC)
    answer: dict[str, Any] = {
        "answer_id": uuid.uuid4(),
        "content": "hi",
        "tool_calls_json": None,
        "status": "complete",
        "reasoning": None,
        "prompt_tokens": 3,
        "completion_tokens": None,
        "model": "m",
        "updated_at": now,
    }
    cases: list[tuple[sa.Executable, dict[str, Any]]] = [
        (UPDATE_ANSWER, answer),
        (_LATEST, {"conversation_id": uuid.uuid4()}),
    ]
    for statement, row in cases:
        compiled = statements.compile(statement, ())
        assert compiled.sources is not None  # the direct path, literals included
        constructed = compiled.compiled.construct_params(row)
        assert constructed is not None
        expected = [
            value if process is None else process(value)
            for process, value in zip(
                compiled.processors, [constructed[n] for n in compiled.names], strict=True
            )
        ]
        assert compiled.arguments(row) == expected
        with pytest.raises(sa.exc.InvalidRequestError, match=r"conversation_id|answer_id"):
            compiled.arguments({key: value for key, value in row.items() if not key.endswith("_id")})
