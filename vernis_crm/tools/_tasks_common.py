"""What the Tasks tools share: the tables, the argument base, the organization's time zone, lookups
scoped to the caller's organization, and a task row as the tools show it.

A task, contact or member of another organization is "not found", exactly like an unknown one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, tzinfo
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.models import Member, table_of
from vernis.tools import ToolFailure
from vernis_crm.models import Contact, Task, TaskStatus
from vernis_crm.resources import CrmContext

CATEGORY = "Tasks"
EXCERPT = 200
END_OF_DAY = time(23, 59)  # a due date given without a time

_task = table_of(Task)
_member = table_of(Member)
_contact = table_of(Contact)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


def _zone(ctx: CrmContext) -> tzinfo:
    try:
        return ZoneInfo(ctx.member.organization_timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def _instant(moment: date | datetime, zone: tzinfo, day_time: time) -> datetime:
    """`moment` as an aware UTC time: a date at `day_time`, a zoneless time in `zone`."""
    if not isinstance(moment, datetime):
        moment = datetime.combine(moment, day_time)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.astimezone(UTC)


def _local(moment: datetime | None, zone: tzinfo) -> str | None:
    return None if moment is None else moment.astimezone(zone).isoformat(timespec="minutes")


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1].rstrip() + "…"


def _contact_name(first: str | None, last: str | None) -> str:
    return f"{first or ''} {last or ''}".strip()


@dataclass(frozen=True, slots=True)
class _Ref:
    id: UUID
    name: str

    def json(self) -> dict[str, Any]:
        return {"id": str(self.id), "name": self.name}


def _json(ref: _Ref | None) -> dict[str, Any] | None:
    return None if ref is None else ref.json()


async def _member_ref(connection: AsyncConnection, ctx: CrmContext, who: str) -> _Ref | None:
    """The member `who` names in the caller's organization; None for "unassigned"."""
    text = who.strip()
    if text.lower() == "me":
        return _Ref(ctx.member.id, ctx.member.name)
    if text.lower() in ("unassigned", "nobody", "none"):
        return None
    ours = sa.and_(_member.c.organization_id == ctx.organization_id, _member.c.removed_at.is_(None))
    query = sa.select(_member.c.id, _member.c.name).where(ours).order_by(_member.c.name, _member.c.id)
    try:
        exact = _member.c.id == UUID(text)
    except ValueError:
        exact = sa.or_(
            sa.func.lower(_member.c.email) == text.lower(), sa.func.lower(_member.c.name) == text.lower()
        )
    rows = (await connection.execute(query.where(exact))).all()
    if not rows and "@" not in text:
        partial = sa.func.lower(_member.c.name).contains(text.lower(), autoescape=True)
        rows = (await connection.execute(query.where(partial).limit(6))).all()
    if len(rows) == 1:
        return _Ref(rows[0].id, rows[0].name)
    if rows:
        raise ToolFailure(
            "ambiguous",
            f"Several members match {text!r}: {', '.join(row.name for row in rows[:5])}.",
            hint="Give the member's full name or e-mail.",
        )
    names = (await connection.execute(query.with_only_columns(_member.c.name).limit(20))).scalars().all()
    raise ToolFailure(
        "not_found",
        f"No member {text!r} in this organization.",
        hint=f"Members: {', '.join(names)}." if names else None,
    )


async def _contact_ref(connection: AsyncConnection, ctx: CrmContext, contact_id: UUID) -> _Ref:
    row = (
        await connection.execute(
            sa.select(_contact.c.id, _contact.c.first_name, _contact.c.last_name).where(
                _contact.c.organization_id == ctx.organization_id, _contact.c.id == contact_id
            )
        )
    ).first()
    if row is None:
        raise ToolFailure(
            "not_found", "No contact with that id in this organization.", hint="Find it with search_contacts."
        )
    return _Ref(row.id, _contact_name(row.first_name, row.last_name))


def _tasks_query(ctx: CrmContext) -> sa.Select[Any]:
    """Tasks of the caller's organization with their assignee's and contact's names."""
    ours = ctx.organization_id
    return (
        sa.select(
            _task,
            _member.c.name.label("assignee_name"),
            _contact.c.first_name.label("contact_first_name"),
            _contact.c.last_name.label("contact_last_name"),
        )
        .select_from(
            _task.outerjoin(
                _member, sa.and_(_member.c.id == _task.c.assignee_id, _member.c.organization_id == ours)
            ).outerjoin(
                _contact, sa.and_(_contact.c.id == _task.c.contact_id, _contact.c.organization_id == ours)
            )
        )
        .where(_task.c.organization_id == ours)
    )


def _assignee(row: Any) -> _Ref | None:
    return None if row.assignee_id is None else _Ref(row.assignee_id, row.assignee_name or "")


def _contact_of(row: Any) -> _Ref | None:
    if row.contact_id is None:
        return None
    return _Ref(row.contact_id, _contact_name(row.contact_first_name, row.contact_last_name))


def _compact(row: Any, zone: tzinfo, now: datetime) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": str(row.id),
        "title": row.title,
        "status": row.status,
        "due_at": _local(row.due_at, zone),
    }
    if row.status == TaskStatus.OPEN:
        item["overdue"] = row.due_at is not None and row.due_at < now
    if row.completed_at is not None:
        item["completed_at"] = _local(row.completed_at, zone)
    item["assignee"] = _json(_assignee(row))
    item["contact"] = _json(_contact_of(row))
    if row.description:
        item["description"] = _excerpt(row.description)
    if row.plan_id is not None:
        item["plan_id"] = str(row.plan_id)
    return item


async def _load(connection: AsyncConnection, ctx: CrmContext, task_id: UUID) -> Any:
    row = (await connection.execute(_tasks_query(ctx).where(_task.c.id == task_id))).first()
    if row is None:
        raise ToolFailure(
            "not_found", "No task with that id in this organization.", hint="Use an id from get_tasks."
        )
    return row
