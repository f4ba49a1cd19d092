"""Tasks tools (SPEC §5): list the organization's tasks, create them and change them. Moving a task
through its states (`open`, `done`, `dismissed`) is `task_status.py`.

Times: due dates are shown in the organization's time zone, with their offset. A due date the model
gives without a zone is read in that zone; a date alone means the end of that day (23:59 there).

Every query is scoped to the caller's organization: a task, contact or member of another
organization is "not found", exactly like an unknown one. A write's preview and its run share one
plan computed against the data; the run computes it again in its own transaction, so it applies what
the preview showed, or refuses if the data changed in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, tzinfo
from typing import Annotated, Any, Literal
from uuid import UUID, uuid4

import sqlalchemy as sa
from pydantic import Field, PlainSerializer, PlainValidator, WithJsonSchema, model_validator
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.models import utcnow
from vernis.tools import Tool, ToolFailure
from vernis_crm.models import TaskStatus
from vernis_crm.resources import CrmContext
from vernis_crm.tools._tasks_common import (
    CATEGORY,
    END_OF_DAY,
    _Args,
    _assignee,
    _compact,
    _contact_of,
    _contact_ref,
    _instant,
    _json,
    _load,
    _local,
    _member_ref,
    _Ref,
    _task,
    _tasks_query,
    _zone,
)

__all__ = ["TOOLS"]

MAX_PAGE = 50


def _moment(value: Any) -> date | datetime:
    # A plain `date | datetime` union reads "2024-05-03T00:00" as a date in Python mode and
    # "2024-05-03" as a datetime in the other order; the stored approval is re-validated from JSON,
    # so the two readings must never differ. Ten characters is a date, anything else a datetime.
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
        except ValueError:
            pass
    raise ValueError("expected a date (YYYY-MM-DD) or a date and time (YYYY-MM-DDTHH:MM, optionally a zone)")


Moment = Annotated[
    date | datetime,
    PlainValidator(_moment),
    PlainSerializer(lambda value: value.isoformat(), return_type=str),
    WithJsonSchema({"type": "string"}),
]
_ZONELESS = "Without a zone it is read in the organization's time zone."


class GetTasksArgs(_Args):
    status: Literal["open", "done", "dismissed", "any"] = Field(
        "open", description="Which tasks: open (the default), done, dismissed, or any."
    )
    assignee: str | None = Field(
        None,
        max_length=320,
        description="Whose tasks: 'me' (the user), 'unassigned', or a member's name, e-mail or id. "
        "Leave out for everyone's.",
    )
    contact_id: UUID | None = Field(None, description="Only tasks about this contact.")
    due_after: Moment | None = Field(
        None,
        description="Only tasks due at or after this date or time (a date alone: the start of that day). "
        + _ZONELESS,
    )
    due_before: Moment | None = Field(
        None,
        description="Only tasks due before this date or time (a date alone: the start of that day, so "
        "due_after=2024-05-03 with due_before=2024-05-04 is the tasks due on May 3). " + _ZONELESS,
    )
    overdue: bool = Field(False, description="Only open tasks whose due time has passed.")
    limit: int = Field(20, ge=1, le=MAX_PAGE, description=f"How many to return (at most {MAX_PAGE}).")
    offset: int = Field(0, ge=0, le=10_000, description="How many to skip: next_offset of the previous page.")

    @model_validator(mode="after")
    def _consistent(self) -> GetTasksArgs:
        if self.overdue and self.status != "open":
            raise ValueError("overdue tasks are open ones: leave status out with overdue")
        return self


_DUE = "When it is due: a date (the end of that day) or a date and time. " + _ZONELESS


class CreateTaskArgs(_Args):
    title: str = Field(min_length=1, max_length=255, description="What is to be done, in a few words.")
    description: str = Field("", max_length=5_000, description="Details, if any.")
    due: Moment | None = Field(None, description=_DUE)
    assignee: str = Field(
        "me",
        min_length=1,
        max_length=320,
        description="Who does it: 'me' (the user, the default), 'unassigned', or a member's name, "
        "e-mail or id.",
    )
    contact_id: UUID | None = Field(None, description="The contact it is about, if any.")


class UpdateTaskArgs(_Args):
    task_id: UUID = Field(description="The task's id, as get_tasks returned it.")
    title: str | None = Field(None, min_length=1, max_length=255, description="A new title.")
    description: str | None = Field(None, max_length=5_000, description="A new description (replaces it).")
    due: Moment | None = Field(None, description="A new due date. " + _DUE)
    clear_due: bool = Field(False, description="true to take the due date away.")
    assignee: str | None = Field(
        None,
        min_length=1,
        max_length=320,
        description="A new assignee: 'me', 'unassigned', or a member's name, e-mail or id.",
    )
    contact_id: UUID | None = Field(None, description="A new contact it is about.")
    clear_contact: bool = Field(False, description="true to detach it from its contact.")

    @model_validator(mode="after")
    def _consistent(self) -> UpdateTaskArgs:
        if self.due is not None and self.clear_due:
            raise ValueError("give due or clear_due, not both")
        if self.contact_id is not None and self.clear_contact:
            raise ValueError("give contact_id or clear_contact, not both")
        fields = (self.title, self.description, self.due, self.assignee, self.contact_id)
        if all(value is None for value in fields) and not (self.clear_due or self.clear_contact):
            raise ValueError("give at least one thing to change")
        return self


# -- reading -----------------------------------------------------------------------------------


async def get_tasks(ctx: CrmContext, args: GetTasksArgs) -> dict[str, Any]:
    zone, now = _zone(ctx), utcnow()
    conditions: list[sa.ColumnElement[bool]] = []
    if args.status != "any":
        conditions.append(_task.c.status == args.status)
    if args.overdue:
        conditions.append(_task.c.due_at < now)
    if args.due_after is not None:
        conditions.append(_task.c.due_at >= _instant(args.due_after, zone, time.min))
    if args.due_before is not None:
        conditions.append(_task.c.due_at < _instant(args.due_before, zone, time.min))
    async with ctx.resources.connect() as connection:
        if args.assignee is not None:
            assignee = await _member_ref(connection, ctx, args.assignee)
            conditions.append(
                _task.c.assignee_id.is_(None) if assignee is None else _task.c.assignee_id == assignee.id
            )
        if args.contact_id is not None:
            await _contact_ref(connection, ctx, args.contact_id)
            conditions.append(_task.c.contact_id == args.contact_id)
        # Open work by what is due first; finished work by what was due last.
        due = _task.c.due_at.desc() if args.status in ("done", "dismissed") else _task.c.due_at.asc()
        query = (
            _tasks_query(ctx)
            .where(*conditions)
            .order_by(due.nulls_last(), _task.c.created_at, _task.c.id)
            .limit(args.limit + 1)
            .offset(args.offset)
        )
        rows = (await connection.execute(query)).all()
        total = await connection.scalar(
            sa.select(sa.func.count())
            .select_from(_task)
            .where(_task.c.organization_id == ctx.organization_id, *conditions)
        )
    result: dict[str, Any] = {
        "tasks": [_compact(row, zone, now) for row in rows[: args.limit]],
        "total": int(total or 0),
        "has_more": len(rows) > args.limit,
    }
    if result["has_more"]:
        result["next_offset"] = args.offset + args.limit
    return result


# -- creating and changing ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _NewTask:
    title: str
    description: str
    due_at: datetime | None
    assignee: _Ref | None
    contact: _Ref | None

    def json(self, zone: tzinfo) -> dict[str, Any]:
        return {
            "title": self.title,
            "description": self.description,
            "due_at": _local(self.due_at, zone),
            "assignee": _json(self.assignee),
            "contact": _json(self.contact),
        }


async def _plan_create(connection: AsyncConnection, ctx: CrmContext, args: CreateTaskArgs) -> _NewTask:
    return _NewTask(
        title=args.title,
        description=args.description,
        due_at=None if args.due is None else _instant(args.due, _zone(ctx), END_OF_DAY),
        assignee=await _member_ref(connection, ctx, args.assignee),
        contact=None if args.contact_id is None else await _contact_ref(connection, ctx, args.contact_id),
    )


async def preview_create_task(ctx: CrmContext, args: CreateTaskArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        plan = await _plan_create(connection, ctx, args)
    preview: dict[str, Any] = {"action": "Create a task", "task": plan.json(_zone(ctx)) | {"status": "open"}}
    if plan.due_at is not None and plan.due_at < utcnow():
        preview["warning"] = "The due time is in the past: the task will be overdue at once."
    return preview


async def create_task(ctx: CrmContext, args: CreateTaskArgs) -> dict[str, Any]:
    id_, now = uuid4(), utcnow()
    async with ctx.resources.begin() as connection:
        plan = await _plan_create(connection, ctx, args)
        await connection.execute(
            sa.insert(_task).values(
                id=id_,
                organization_id=ctx.organization_id,
                title=plan.title,
                description=plan.description,
                status=TaskStatus.OPEN.value,
                due_at=plan.due_at,
                assignee_id=None if plan.assignee is None else plan.assignee.id,
                contact_id=None if plan.contact is None else plan.contact.id,
                created_at=now,
                updated_at=now,
            )
        )
        row = await _load(connection, ctx, id_)
    return {"task": _compact(row, _zone(ctx), now)}


@dataclass(slots=True)
class _TaskChange:
    row: Any
    changes: dict[str, dict[str, Any]]
    values: dict[str, Any]


async def _plan_update(connection: AsyncConnection, ctx: CrmContext, args: UpdateTaskArgs) -> _TaskChange:
    zone = _zone(ctx)
    row = await _load(connection, ctx, args.task_id)
    plan = _TaskChange(row, {}, {})

    def change(name: str, column: str, before: Any, after: Any, shown: tuple[Any, Any]) -> None:
        if before != after:
            plan.changes[name] = {"from": shown[0], "to": shown[1]}
            plan.values[column] = after

    if args.title is not None:
        change("title", "title", row.title, args.title, (row.title, args.title))
    if args.description is not None:
        shown = (row.description, args.description)
        change("description", "description", row.description, args.description, shown)
    if args.due is not None or args.clear_due:
        due = None if args.due is None else _instant(args.due, zone, END_OF_DAY)
        change("due_at", "due_at", row.due_at, due, (_local(row.due_at, zone), _local(due, zone)))
    if args.assignee is not None:
        before, after = _assignee(row), await _member_ref(connection, ctx, args.assignee)
        change("assignee", "assignee_id", row.assignee_id, after and after.id, (_json(before), _json(after)))
    if args.contact_id is not None or args.clear_contact:
        before = _contact_of(row)
        after = None if args.contact_id is None else await _contact_ref(connection, ctx, args.contact_id)
        change("contact", "contact_id", row.contact_id, after and after.id, (_json(before), _json(after)))
    if not plan.changes:
        raise ToolFailure("no_change", f"The task {row.title!r} already has these values; nothing to change.")
    return plan


async def preview_update_task(ctx: CrmContext, args: UpdateTaskArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        plan = await _plan_update(connection, ctx, args)
    return {
        "action": "Change a task",
        "task": {"id": str(plan.row.id), "title": plan.row.title, "status": plan.row.status},
        "changes": plan.changes,
    }


async def update_task(ctx: CrmContext, args: UpdateTaskArgs) -> dict[str, Any]:
    now = utcnow()
    async with ctx.resources.begin() as connection:
        plan = await _plan_update(connection, ctx, args)
        await connection.execute(
            sa.update(_task)
            .where(_task.c.organization_id == ctx.organization_id, _task.c.id == args.task_id)
            .values(updated_at=now, **plan.values)
        )
        row = await _load(connection, ctx, args.task_id)
    return {"task": _compact(row, _zone(ctx), now), "changes": plan.changes}


TOOLS = (
    Tool(
        "get_tasks",
        CATEGORY,
        "List tasks (open ones by default), soonest due first; filter by assignee, contact and due date.",
        GetTasksArgs,
        "task:list",
        False,
        get_tasks,
    ),
    Tool(
        "create_task",
        CATEGORY,
        "Create a task, assigned to the user unless another member is named, optionally about a contact.",
        CreateTaskArgs,
        "task:create",
        True,
        create_task,
        preview=preview_create_task,
    ),
    Tool(
        "update_task",
        CATEGORY,
        "Change a task's title, description, due date, assignee or contact.",
        UpdateTaskArgs,
        "task:update",
        True,
        update_task,
        preview=preview_update_task,
    ),
)
