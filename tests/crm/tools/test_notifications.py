"""Notifications tools against the seeded demo data: results, gates, scope, confirmed writes."""

from __future__ import annotations

import sqlalchemy as sa

from tests.crm.tools.conftest import Tools
from vernis.store.models import AuditEntry, table_of
from vernis_crm.models import Notification

NOTIFICATION = table_of(Notification)


async def unread(tools: Tools, email: str) -> int:
    member = await tools.member(email)
    async with tools.engine.connect() as connection:
        count = await connection.scalar(
            sa.select(sa.func.count())
            .select_from(NOTIFICATION)
            .where(NOTIFICATION.c.member_id == member.id, NOTIFICATION.c.read_at.is_(None))
        )
    return int(count or 0)


async def test_lists_only_the_callers_notifications_newest_first(tools: Tools) -> None:
    """get_notifications pages the caller's own notifications, newest first, with the unread count."""
    first = await tools.call("member@acme.test", "get_notifications", {"limit": 5})
    assert first.status == "ok"
    data = first.envelope["data"]
    assert len(data["notifications"]) == 5
    times = [n["created_at"] for n in data["notifications"]]
    assert times == sorted(times, reverse=True)
    assert data["unread_count"] == await unread(tools, "member@acme.test")
    following = await tools.call(
        "member@acme.test", "get_notifications", {"limit": 5, "before": data["next_before"]}
    )
    assert {n["id"] for n in following.envelope["data"]["notifications"]}.isdisjoint(
        {n["id"] for n in data["notifications"]}
    )
    viewer = await tools.call("viewer@acme.test", "get_notifications", {"limit": 50})
    assert {n["id"] for n in viewer.envelope["data"]["notifications"]}.isdisjoint(
        {n["id"] for n in data["notifications"]}
    )


async def test_unread_only_and_count_agree(tools: Tools) -> None:
    """unread_only lists exactly the unread ones; get_unread_count counts them."""
    listed = await tools.call("member@acme.test", "get_notifications", {"unread_only": True, "limit": 50})
    count = await tools.call("member@acme.test", "get_unread_count")
    notifications = listed.envelope["data"]["notifications"]
    assert all(not n["read"] for n in notifications)
    assert (
        count.envelope["data"]["unread_count"]
        == len(notifications)
        == await unread(tools, "member@acme.test")
    )


async def test_mark_read_previews_then_writes_once_with_audit(tools: Tools) -> None:
    """mark_notification_read previews (nothing changes), then the approved write marks exactly that one and is audited."""
    listed = await tools.call("member@acme.test", "get_notifications", {"unread_only": True, "limit": 1})
    target = listed.envelope["data"]["notifications"][0]
    before = await unread(tools, "member@acme.test")
    preview, envelope = await tools.write(
        "member@acme.test", "mark_notification_read", {"notification_id": target["id"]}
    )
    assert preview.envelope["data"]["preview"]["changes"] == {"read": {"from": False, "to": True}}
    assert envelope["ok"] is True
    assert envelope["data"]["unread_count"] == before - 1
    assert await unread(tools, "member@acme.test") == before - 1
    async with tools.engine.connect() as connection:
        audited = (await connection.execute(sa.select(table_of(AuditEntry)))).all()
    assert [(row.tool_name, row.outcome) for row in audited] == [("mark_notification_read", "ok")]
    again = await tools.call("member@acme.test", "mark_notification_read", {"notification_id": target["id"]})
    assert again.envelope["error"]["code"] == "already_read"


async def test_mark_all_read(tools: Tools) -> None:
    """mark_all_notifications_read previews the count, then leaves the caller with none unread (others untouched)."""
    others = await unread(tools, "owner@acme.test")
    preview, envelope = await tools.write("member@acme.test", "mark_all_notifications_read", {})
    assert preview.envelope["data"]["preview"]["changes"]["unread_count"]["to"] == 0
    assert envelope["data"]["unread_count"] == 0
    assert await unread(tools, "member@acme.test") == 0
    assert await unread(tools, "owner@acme.test") == others


async def test_scope_and_gates(tools: Tools) -> None:
    """Another member's or Globex's notification is not found; a viewer is offered no write and is refused one."""
    globex = await tools.call("owner@globex.test", "get_notifications", {"limit": 1})
    foreign_id = globex.envelope["data"]["notifications"][0]["id"]
    stolen = await tools.call("member@acme.test", "mark_notification_read", {"notification_id": foreign_id})
    assert stolen.envelope["error"]["code"] == "not_found"
    offered = await tools.offered("viewer@acme.test")
    assert {"get_notifications", "get_unread_count"} <= offered
    assert not {"mark_notification_read", "mark_all_notifications_read"} & offered
    refused = await tools.call("viewer@acme.test", "mark_all_notifications_read", {})
    assert refused.envelope["error"]["code"] == "forbidden"
