"""Test data written and read straight in a running server's database (real rows, no server API)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fixtures.server import Vernis
from vernis.conversation.store import ConversationStore
from vernis.store.engine import create_engine
from vernis.store.models import Member, table_of
from vernis_crm.models import Notification

__all__ = ["DemoMember", "add_notification", "database", "demo_member", "is_read", "store_of"]


@dataclass(frozen=True)
class DemoMember:
    """A seeded demo member's internal ids, as the server's database holds them."""

    id: uuid.UUID
    organization_id: uuid.UUID


def demo_member(vernis: Vernis, email: str = "member@acme.test") -> DemoMember:
    slug = email.split("@")[1].removesuffix(".test")
    return DemoMember(vernis.seed.members[email], vernis.seed.organizations[slug])


@asynccontextmanager
async def database(vernis: Vernis) -> AsyncIterator[AsyncEngine]:
    """An engine on the server's own database, disposed after use."""
    engine = create_engine(vernis.settings.database_url)
    try:
        yield engine
    finally:
        await engine.dispose()


@asynccontextmanager
async def store_of(vernis: Vernis) -> AsyncIterator[ConversationStore]:
    """The conversation store on the server's own database."""
    async with database(vernis) as engine:
        yield ConversationStore(engine)


async def add_notification(
    vernis: Vernis, email: str = "member@acme.test", title: str = "Missed call"
) -> str:
    """An unread notification for the member; returns its id."""
    notification_id = uuid.uuid4()
    members = table_of(Member)
    async with database(vernis) as engine, engine.begin() as connection:
        member = (
            await connection.execute(
                sa.select(members.c.id, members.c.organization_id).where(members.c.email == email)
            )
        ).one()
        await connection.execute(
            sa.insert(table_of(Notification)).values(
                id=notification_id,
                organization_id=member.organization_id,
                member_id=member.id,
                kind="missed_call",
                title=title,
                body="",
            )
        )
    return str(notification_id)


async def is_read(vernis: Vernis, notification_id: str) -> bool:
    """Whether the notification has been marked read."""
    table = table_of(Notification)
    async with database(vernis) as engine, engine.connect() as connection:
        read_at = await connection.scalar(
            sa.select(table.c.read_at).where(table.c.id == uuid.UUID(notification_id))
        )
    return read_at is not None
