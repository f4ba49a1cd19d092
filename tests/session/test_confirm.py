"""`confirm_tool` in process (vernis.session.confirm): the approve / reject button on a previewed
write, with the CRM's `mark_notification_read`; the app's services, a recording outbox, the
scripted model."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from tests.session.conftest import App, Connect, Tab
from vernis.exceptions import NotFound
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.session.confirm import ANSWERED, EXPIRED, confirm_tool
from vernis.session.send import send_user_message
from vernis.store.models import Approval, AuditEntry, Member, table_of, utcnow
from vernis_crm.models import Notification


async def add_notification(app: App, email: str = "member@acme.test") -> uuid.UUID:
    """An unread notification of the demo member `email`."""
    members, notification_id = table_of(Member), uuid.uuid4()
    async with app.services.engine.begin() as connection:
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
                title="Missed call",
                body="",
            )
        )
    return notification_id


async def is_read(app: App, notification_id: uuid.UUID) -> bool:
    table = table_of(Notification)
    async with app.services.engine.connect() as connection:
        read_at = await connection.scalar(sa.select(table.c.read_at).where(table.c.id == notification_id))
    return read_at is not None


async def audit(app: App) -> list[tuple[str, str]]:
    table = table_of(AuditEntry)
    async with app.services.engine.connect() as connection:
        rows = await connection.execute(
            sa.select(table.c.tool_name, table.c.outcome).order_by(table.c.created_at)
        )
        return [(row.tool_name, row.outcome) for row in rows]


async def approval_status(app: App, confirmation_id: uuid.UUID) -> str:
    table = table_of(Approval)
    async with app.services.engine.connect() as connection:
        status = await connection.scalar(sa.select(table.c.status).where(table.c.id == confirmation_id))
    return str(status)


async def previewed(app: App, tab: Tab, notification_id: uuid.UUID) -> dict[str, Any]:
    """The model asks to mark the notification read; the answer ends with its preview. Returns the
    `confirmation_required` event (read through the first exchange's title)."""
    app.script(
        Reply(
            tool_calls=[ScriptedToolCall("mark_notification_read", {"notification_id": str(notification_id)})]
        ),
        "mark it read",
    )
    await send_user_message(tab.session, "mark it read please", None, None)
    events = await tab.until("assistant_end")
    await tab.until("title_updated")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["status"] == "needs_confirmation"
    (required,) = [e for e in events if e["type"] == "confirmation_required"]
    return required


async def stored_call(app: App, tab: Tab) -> dict[str, Any]:
    assert tab.session.conversation is not None
    # The preview's answer: the second message (the answer that reads the outcome may follow it).
    answer = (await app.services.store.messages(tab.session.conversation.id))[1]
    assert answer.tool_calls is not None
    (call,) = answer.tool_calls
    return call


async def test_approving_a_preview_runs_the_write_once_and_ends_its_card_everywhere(
    app: App, connect: Connect
) -> None:
    """Approved, the write runs (the notification is read, audited ok), the card ends `ok` on every session showing the conversation, and the stored call holds the result."""
    notification_id = await add_notification(app)
    tab = await connect()
    required = await previewed(app, tab, notification_id)
    assert not await is_read(app, notification_id)
    other = await connect()
    other.session.show(tab.session.conversation)

    await confirm_tool(tab.session, uuid.UUID(required["confirmation_id"]), approved=True)

    for each in (tab, other):
        (done,) = await each.until("tool_call_completed")
        assert (done["call_id"], done["status"]) == (required["call_id"], "ok")
        assert done["result"]["data"]["read"] is True
    assert await is_read(app, notification_id)
    assert await audit(app) == [("mark_notification_read", "ok")]
    assert await approval_status(app, uuid.UUID(required["confirmation_id"])) == "executed"
    call = await stored_call(app, tab)
    assert call["status"] == "ok"
    assert call["result"]["data"]["read"] is True


async def test_rejecting_a_preview_changes_nothing_and_tells_the_model(app: App, connect: Connect) -> None:
    """Rejected, nothing is written, the rejection is audited, the card ends `rejected`, and the stored call (the model's next window) says the user rejected it."""
    notification_id = await add_notification(app)
    tab = await connect()
    required = await previewed(app, tab, notification_id)

    await confirm_tool(tab.session, uuid.UUID(required["confirmation_id"]), approved=False)

    (done,) = await tab.until("tool_call_completed")
    assert (done["call_id"], done["status"]) == (required["call_id"], "rejected")
    assert not await is_read(app, notification_id)
    assert await audit(app) == [("mark_notification_read", "rejected")]
    call = await stored_call(app, tab)
    assert call["status"] == "rejected"
    assert call["result"]["error"]["code"] == "rejected"


async def test_a_confirmation_answers_once(app: App, connect: Connect) -> None:
    """A second answer to the same confirmation (the other button, another tab) is NotFound as already answered; the write ran once."""
    notification_id = await add_notification(app)
    tab = await connect()
    required = await previewed(app, tab, notification_id)
    confirmation_id = uuid.UUID(required["confirmation_id"])
    await confirm_tool(tab.session, confirmation_id, approved=True)
    await tab.until("tool_call_completed")

    for approved in (True, False):
        with pytest.raises(NotFound) as refused:
            await confirm_tool(tab.session, confirmation_id, approved=approved)
        assert refused.value.public_message == ANSWERED

    assert await audit(app) == [("mark_notification_read", "ok")]


async def test_an_expired_preview_cannot_be_approved(app: App, connect: Connect) -> None:
    """Past its expiry the approval is NotFound as expired, marked expired, and nothing is written."""
    notification_id = await add_notification(app)
    tab = await connect()
    required = await previewed(app, tab, notification_id)
    confirmation_id = uuid.UUID(required["confirmation_id"])
    table = table_of(Approval)
    async with app.services.engine.begin() as connection:
        await connection.execute(
            sa.update(table)
            .where(table.c.id == confirmation_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )

    with pytest.raises(NotFound) as refused:
        await confirm_tool(tab.session, confirmation_id, approved=True)

    assert refused.value.public_message == EXPIRED
    assert await approval_status(app, confirmation_id) == "expired"
    assert not await is_read(app, notification_id)
    assert await audit(app) == []


async def test_another_members_confirmation_is_not_found(app: App, connect: Connect) -> None:
    """Another member (of the same organization or another) cannot answer a member's confirmation, nor can anyone answer an unknown one; the preview stays pending."""
    notification_id = await add_notification(app)
    tab = await connect()
    required = await previewed(app, tab, notification_id)
    confirmation_id = uuid.UUID(required["confirmation_id"])

    for email in ("owner@acme.test", "owner@globex.test"):
        stranger = await connect(email)
        with pytest.raises(NotFound):
            await confirm_tool(stranger.session, confirmation_id, approved=True)
    with pytest.raises(NotFound):
        await confirm_tool(tab.session, uuid.uuid4(), approved=True)

    assert await approval_status(app, confirmation_id) == "pending"
    assert not await is_read(app, notification_id)
