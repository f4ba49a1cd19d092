"""Notifications tools (SPEC §5): the member's own notifications, read and marked as read.

Every query is scoped to the caller's organization and to the caller: a member only ever sees and
changes their own notifications.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field

from vernis.store.models import table_of, utcnow
from vernis.tools import Tool, ToolFailure
from vernis_crm.models import Notification
from vernis_crm.resources import CrmContext

__all__ = ["TOOLS"]

CATEGORY = "Notifications"
_notification = table_of(Notification)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GetNotificationsArgs(_Args):
    unread_only: bool = Field(False, description="Only notifications not read yet.")
    limit: int = Field(20, ge=1, le=50, description="How many, newest first (at most 50).")
    before: datetime | None = Field(None, description="Only notifications created before this time (paging).")


class NoArgs(_Args):
    pass


class NotificationIdArgs(_Args):
    notification_id: UUID = Field(description="The id of the notification, as get_notifications returned it.")


def _mine(ctx: CrmContext) -> sa.ColumnElement[bool]:
    return sa.and_(
        _notification.c.organization_id == ctx.organization_id,
        _notification.c.member_id == ctx.member.id,
    )


def _compact(row: Any) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "kind": row.kind,
        "title": row.title,
        "body": row.body,
        "link": row.link,
        "read": row.read_at is not None,
        "created_at": row.created_at.isoformat(timespec="seconds"),
    }


async def _unread(ctx: CrmContext) -> int:
    async with ctx.resources.connect() as connection:
        count = await connection.scalar(
            sa.select(sa.func.count())
            .select_from(_notification)
            .where(_mine(ctx), _notification.c.read_at.is_(None))
        )
    return int(count or 0)


async def get_notifications(ctx: CrmContext, args: GetNotificationsArgs) -> dict[str, Any]:
    query = sa.select(_notification).where(_mine(ctx))
    if args.unread_only:
        query = query.where(_notification.c.read_at.is_(None))
    if args.before is not None:
        query = query.where(_notification.c.created_at < args.before)
    query = query.order_by(_notification.c.created_at.desc(), _notification.c.id.desc()).limit(args.limit + 1)
    async with ctx.resources.connect() as connection:
        rows = (await connection.execute(query)).all()
    page = rows[: args.limit]
    result: dict[str, Any] = {
        "notifications": [_compact(row) for row in page],
        "unread_count": await _unread(ctx),
    }
    if len(rows) > args.limit:
        result["next_before"] = page[-1].created_at.isoformat()
    return result


async def get_unread_count(ctx: CrmContext, args: NoArgs) -> dict[str, Any]:
    return {"unread_count": await _unread(ctx)}


async def _find(ctx: CrmContext, notification_id: UUID) -> Any:
    async with ctx.resources.connect() as connection:
        row = (
            await connection.execute(
                sa.select(_notification).where(_mine(ctx), _notification.c.id == notification_id)
            )
        ).first()
    if row is None:
        raise ToolFailure(
            "not_found", "No such notification for this user.", hint="Use an id from get_notifications."
        )
    return row


async def preview_mark_read(ctx: CrmContext, args: NotificationIdArgs) -> dict[str, Any]:
    row = await _find(ctx, args.notification_id)
    if row.read_at is not None:
        raise ToolFailure(
            "already_read", f"The notification {row.title!r} is already read; nothing to change."
        )
    return {
        "action": "Mark a notification as read",
        "notification": {"id": str(row.id), "title": row.title, "created_at": row.created_at.isoformat()},
        "changes": {"read": {"from": False, "to": True}},
    }


async def mark_notification_read(ctx: CrmContext, args: NotificationIdArgs) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
        result = await connection.execute(
            sa.update(_notification)
            .where(_mine(ctx), _notification.c.id == args.notification_id, _notification.c.read_at.is_(None))
            .values(read_at=utcnow())
        )
    if result.rowcount != 1:
        raise ToolFailure("already_read", "That notification was already read or no longer exists.")
    return {"notification_id": str(args.notification_id), "read": True, "unread_count": await _unread(ctx)}


async def preview_mark_all_read(ctx: CrmContext, args: NoArgs) -> dict[str, Any]:
    unread = await _unread(ctx)
    if unread == 0:
        raise ToolFailure("nothing_unread", "Every notification is already read; nothing to change.")
    return {
        "action": "Mark all notifications as read",
        "changes": {"unread_count": {"from": unread, "to": 0}},
    }


async def mark_all_notifications_read(ctx: CrmContext, args: NoArgs) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
        result = await connection.execute(
            sa.update(_notification)
            .where(_mine(ctx), _notification.c.read_at.is_(None))
            .values(read_at=utcnow())
        )
    return {"marked_read": result.rowcount, "unread_count": 0}


TOOLS = (
    Tool(
        "get_notifications",
        CATEGORY,
        "List the user's notifications, newest first, with the unread count.",
        GetNotificationsArgs,
        "notification:list",
        False,
        get_notifications,
    ),
    Tool(
        "get_unread_count",
        CATEGORY,
        "Count the user's unread notifications.",
        NoArgs,
        "notification:list",
        False,
        get_unread_count,
    ),
    Tool(
        "mark_notification_read",
        CATEGORY,
        "Mark one of the user's notifications as read.",
        NotificationIdArgs,
        "notification:update",
        True,
        mark_notification_read,
        preview=preview_mark_read,
    ),
    Tool(
        "mark_all_notifications_read",
        CATEGORY,
        "Mark all of the user's notifications as read.",
        NoArgs,
        "notification:update",
        True,
        mark_all_notifications_read,
        preview=preview_mark_all_read,
    ),
)
