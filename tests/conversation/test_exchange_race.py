"""PostgreSQL's one-statement exchange (`ConversationStore.add_exchange` on asyncpg) when the same
message is sent twice at once: the statement's check for the client message id sees its own
snapshot, so a copy committed while it waited on the conversation's row passes the check, and the
unique index refuses it. The store must then answer as for any resent message."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.db import *  # noqa: F403
from vernis.conversation.store import ConversationStore, DuplicateClientMessage
from vernis.store.models import Conversation, Message, table_of, utcnow
from vernis.store.transactions import Transactions
from vernis_crm.demo.seed import SeedResult

_conversation, _message = table_of(Conversation), table_of(Message)


# Overrides the `backend` fixture the star import brings in: on purpose, for pytest.
@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])  # type: ignore[no-redef]
def backend(request: pytest.FixtureRequest) -> str:
    """The race is PostgreSQL's: SQLite's write lock runs one writer at a time."""
    name: str = request.param
    return name


@pytest.fixture
def fast_store(engine: AsyncEngine, transactions: Transactions) -> ConversationStore:
    """The store on the app's transactions for PostgreSQL: asyncpg directly."""
    return ConversationStore(engine, transactions=transactions)


async def _waiting_on_a_lock(engine: AsyncEngine) -> bool:
    async with engine.connect() as connection:
        waiting = await connection.scalar(sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted"))
    return bool(waiting)


async def test_a_copy_committed_while_the_exchange_waited_is_answered_as_a_resent_message(
    engine: AsyncEngine, fast_store: ConversationStore, seeded: SeedResult
) -> None:
    """A copy of the message commits while the exchange's statement waits on the conversation's row: the statement passes its check, the unique index refuses it, and the store raises DuplicateClientMessage naming the stored copy; one user message is kept."""
    conversation = await fast_store.create_conversation(
        seeded.members["owner@acme.test"], seeded.organizations["acme"]
    )
    copy_id = uuid.uuid4()
    async with engine.connect() as other:
        transaction = await other.begin()
        # The other copy takes the conversation's next position (locking its row) and is stored.
        await other.execute(
            sa.update(_conversation)
            .where(_conversation.c.id == conversation.id)
            .values(message_count=_conversation.c.message_count + 1)
        )
        now = utcnow()
        await other.execute(
            sa.insert(_message).values(
                id=copy_id,
                conversation_id=conversation.id,
                position=0,
                role="user",
                content="hi",
                status="complete",
                client_message_id="c-1",
                created_at=now,
                updated_at=now,
            )
        )
        exchange = asyncio.create_task(
            fast_store.add_exchange(
                conversation.id, "hi", answer_id=uuid.uuid4(), model="m", client_message_id="c-1"
            )
        )
        async with asyncio.timeout(10):
            while not await _waiting_on_a_lock(engine):
                assert not exchange.done(), exchange
                await asyncio.sleep(0.02)
        await transaction.commit()
    with pytest.raises(DuplicateClientMessage) as resent:
        await asyncio.wait_for(exchange, 10)
    assert resent.value.message_id == copy_id
    assert [m.role for m in await fast_store.messages(conversation.id)] == ["user"]
