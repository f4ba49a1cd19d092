"""Tasks tools that move a task through its states: `complete_task` and `dismiss_task` take an open
task, `reopen_task` a done or dismissed one (`TRANSITIONS`).

Previews check the transition, so the model learns before asking the user that a done task cannot be
completed again. The run checks it again in its own transaction and changes the task only if its
status is still the one it read, or refuses: a task that changed in between is a conflict.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from pydantic import Field

from vernis.store.models import utcnow
from vernis.tools import Tool, ToolFailure
from vernis_crm.models import TaskStatus
from vernis_crm.resources import CrmContext
from vernis_crm.tools._tasks_common import (
    CATEGORY,
    _Args,
    _assignee,
    _compact,
    _contact_of,
    _json,
    _load,
    _local,
    _task,
    _zone,
)

__all__ = ["TOOLS", "TRANSITIONS"]


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
    _transition_tool("complete_task", "Mark an open task as done."),
    _transition_tool("dismiss_task", "Dismiss an open task that no longer needs doing."),
    _transition_tool("reopen_task", "Reopen a done or dismissed task."),
)
