"""Test data written and read straight in a running server's database (real rows, no server API)."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from tests.fixtures.server import Vernis
from vernis.db.engine import create_engine
from vernis.db.models import Member, Notification, table_of

__all__ = ["add_notification", "is_read"]


async def add_notification(
    vernis: Vernis, email: str = "member@acme.test", title: str = "Missed call"
) -> str:
    """An unread notification for the member; returns its id."""
    notification_id = uuid.uuid4()
    engine = create_engine(vernis.settings.database_url)
    try:
        async with engine.begin() as connection:
            members = table_of(Member)
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
    finally:
        await engine.dispose()
    return str(notification_id)


async def is_read(vernis: Vernis, notification_id: str) -> bool:
    """Whether the notification has been marked read."""
    engine = create_engine(vernis.settings.database_url)
    try:
        async with engine.connect() as connection:
            table = table_of(Notification)
            read_at = await connection.scalar(
                sa.select(table.c.read_at).where(table.c.id == uuid.UUID(notification_id))
            )
    finally:
        await engine.dispose()
    return read_at is not None
