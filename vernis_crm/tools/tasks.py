"""Tasks tools (SPEC §5): list the organization's tasks, create and change them, and move them
through their states.

A task is `open`, `done` or `dismissed`; `complete_task` and `dismiss_task` take an open task,
`reopen_task` a done or dismissed one (`TRANSITIONS`). Previews check the transition, so the model
learns before asking the user that a done task cannot be completed again.

Times: due dates are shown in the organization's time zone, with their offset. A due date the model
gives without a zone is read in that zone; a date alone means the end of that day (23:59 there).

Every query is scoped to the caller's organization: a task, contact or member of another
organization is "not found", exactly like an unknown one. A write's preview and its run share one
plan computed against the data; the run computes it again in its own transaction, so it applies what
the preview showed, or refuses if the data changed in between.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, tzinfo
from typing import Annotated, Any, Literal
from uuid import UUID, uuid4
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import sqlalchemy as sa
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    model_validator,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.db.models import Member, table_of, utcnow
from vernis.tools import Tool, ToolFailure
from vernis_crm.models import Contact, Task, TaskStatus
from vernis_crm.resources import CrmContext

__all__ = ["TOOLS", "TRANSITIONS"]

CATEGORY = "Tasks"
MAX_PAGE = 50
EXCERPT = 200
END_OF_DAY = time(23, 59)

_task = table_of(Task)
_member = table_of(Member)
_contact = table_of(Contact)


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


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


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


class TaskIdArgs(_Args):
    task_id: UUID = Field(description="The task's id, as get_tasks returned it.")


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of a task's status: from any of `sources` to `target`."""

    action: str  # as the preview names it
    verb: str
    past: str
    sources: frozenset[TaskStatus]
    target: TaskStatus


TRANSITIONS = {
    "complete_task": Transition(
        "Complete a task", "complete", "completed", frozenset({TaskStatus.OPEN}), TaskStatus.DONE
    ),
    "dismiss_task": Transition(
        "Dismiss a task", "dismiss", "dismissed", frozenset({TaskStatus.OPEN}), TaskStatus.DISMISSED
    ),
    "reopen_task": Transition(
        "Reopen a task",
        "reopen",
        "reopened",
        frozenset({TaskStatus.DONE, TaskStatus.DISMISSED}),
        TaskStatus.OPEN,
    ),
}


# -- shared ------------------------------------------------------------------------------------


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


# -- states ------------------------------------------------------------------------------------


def _check(transition: Transition, row: Any) -> None:
    if row.status in transition.sources:
        return
    expected = " or ".join(sorted(transition.sources))
    if row.status == transition.target:
        hint = f"It is already {row.status}; nothing to change."
    elif transition.target != TaskStatus.OPEN:
        hint = "Reopen it first with reopen_task if it still needs doing."
    else:
        hint = None
    raise ToolFailure(
        "invalid_state",
        f"Cannot {transition.verb} the task {row.title!r}: it is {row.status}, and only {expected} "
        f"tasks can be {transition.past}.",
        hint=hint,
    )


def _preview_transition(transition: Transition) -> Callable[[CrmContext, TaskIdArgs], Awaitable[Any]]:
    async def preview(ctx: CrmContext, args: TaskIdArgs) -> dict[str, Any]:
        async with ctx.resources.connect() as connection:
            row = await _load(connection, ctx, args.task_id)
        _check(transition, row)
        zone = _zone(ctx)
        return {
            "action": transition.action,
            "task": {
                "id": str(row.id),
                "title": row.title,
                "due_at": _local(row.due_at, zone),
                "assignee": _json(_assignee(row)),
                "contact": _json(_contact_of(row)),
            },
            "changes": {"status": {"from": row.status, "to": transition.target.value}},
        }

    return preview


def _run_transition(transition: Transition) -> Callable[[CrmContext, TaskIdArgs], Awaitable[Any]]:
    async def run(ctx: CrmContext, args: TaskIdArgs) -> dict[str, Any]:
        now = utcnow()
        async with ctx.resources.begin() as connection:
            row = await _load(connection, ctx, args.task_id)
            _check(transition, row)
            result = await connection.execute(
                sa.update(_task)
                .where(
                    _task.c.organization_id == ctx.organization_id,
                    _task.c.id == args.task_id,
                    _task.c.status == row.status,
                )
                .values(
                    status=transition.target.value,
                    updated_at=now,
                    completed_at=now if transition.target == TaskStatus.DONE else None,
                )
            )
            if result.rowcount != 1:
                raise ToolFailure(
                    "conflict", "The task changed in the meantime; nothing was changed.", retryable=True
                )
            row = await _load(connection, ctx, args.task_id)
        return {"task": _compact(row, _zone(ctx), now)}

    return run


def _transition_tool(name: str, description: str) -> Tool:
    transition = TRANSITIONS[name]
    return Tool(
        name,
        CATEGORY,
        description,
        TaskIdArgs,
        "task:update",
        True,
        _run_transition(transition),
        preview=_preview_transition(transition),
    )


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
    _transition_tool("complete_task", "Mark an open task as done."),
    _transition_tool("dismiss_task", "Dismiss an open task that no longer needs doing."),
    _transition_tool("reopen_task", "Reopen a done or dismissed task."),
)
