"""Workflow tools (SPEC §5): plan templates (reusable follow-up steps) and plans (a template carried
out for one contact).

Every lookup is scoped to the caller's organization: a template, contact or member of another one
is "not found". The writes validate in their preview exactly what they check again when they run,
inside the transaction that writes, so an approved write either applies the previewed change or
fails with the same error the preview would now give.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal
from uuid import UUID, uuid4

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.models import Member, table_of, utcnow
from vernis.tools import Tool, ToolFailure
from vernis_crm.models import Contact, Plan, PlanStatus, PlanTemplate
from vernis_crm.resources import CrmContext
from vernis_crm.tools.analytics import organization_zone

__all__ = ["TOOLS"]

CATEGORY = "Workflow"
MAX_LIMIT = 50
MAX_STEPS = 30

_template = table_of(PlanTemplate)
_plan = table_of(Plan)
_contact = table_of(Contact)
_member = table_of(Member)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Step(_Args):
    day: int = Field(ge=0, le=365, description="Days after the plan starts (0: the day it starts).")
    channel: Literal["call", "sms", "task"] = Field(description="How the step is carried out.")
    action: str = Field(min_length=1, max_length=255, description="What to do, e.g. 'Call to book the exam'.")


def _ordered(steps: list[Step]) -> list[Step]:
    # Steps run by day; steps of the same day keep the order they were given in.
    return sorted(steps, key=lambda step: step.day)


class GetPlanTemplatesArgs(_Args):
    query: str | None = Field(
        None, min_length=1, max_length=100, description="Only templates whose name contains this text."
    )
    include_inactive: bool = Field(False, description="Also list deactivated templates.")
    limit: int = Field(20, ge=1, le=MAX_LIMIT, description=f"How many, by name (at most {MAX_LIMIT}).")
    offset: int = Field(
        0, ge=0, le=10_000, description="How many to skip (next_offset of the previous page)."
    )


class CreatePlanArgs(_Args):
    template_id: UUID = Field(description="The plan template, as get_plan_templates returned it.")
    contact_id: UUID = Field(description="The contact the plan is for.")
    assignee_id: UUID | None = Field(
        None, description="The member of the organization who carries the plan out. Leave out: unassigned."
    )


class CreatePlanTemplateArgs(_Args):
    name: str = Field(min_length=1, max_length=255, description="A name unique in the organization.")
    description: str = Field("", max_length=2000, description="What the plan is for.")
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS, description="The steps, in any order.")

    @field_validator("name")
    @classmethod
    def _strip(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("the name must not be blank")
        return value


class UpdatePlanTemplateArgs(_Args):
    template_id: UUID = Field(description="The template to change, as get_plan_templates returned it.")
    name: str | None = Field(None, min_length=1, max_length=255, description="A new name, unique in the org.")
    description: str | None = Field(None, max_length=2000, description="A new description.")
    steps: list[Step] | None = Field(
        None, min_length=1, max_length=MAX_STEPS, description="The new steps, replacing all old ones."
    )
    active: bool | None = Field(None, description="False to deactivate (no new plans), true to reactivate.")

    @field_validator("name")
    @classmethod
    def _strip(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not value:
            raise ValueError("the name must not be blank")
        return value


# -- reads --------------------------------------------------------------------------------------


def _steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"day": step["day"], "channel": step["channel"], "action": step["action"]} for step in steps]


async def get_plan_templates(ctx: CrmContext, args: GetPlanTemplatesArgs) -> dict[str, Any]:
    usage = (
        sa.select(
            _plan.c.template_id,
            sa.func.count().label("total"),
            sa.func.coalesce(
                sa.func.sum(sa.case((_plan.c.status == PlanStatus.ACTIVE.value, 1), else_=0)), 0
            ).label("active"),
        )
        .where(_plan.c.organization_id == ctx.organization_id)
        .group_by(_plan.c.template_id)
        .subquery()
    )
    query = (
        sa.select(_template, usage.c.total, usage.c.active.label("active_plans"))
        .select_from(_template.outerjoin(usage, usage.c.template_id == _template.c.id))
        .where(_template.c.organization_id == ctx.organization_id)
    )
    if not args.include_inactive:
        query = query.where(_template.c.active.is_(True))
    if args.query is not None:
        query = query.where(sa.func.lower(_template.c.name).contains(args.query.lower(), autoescape=True))
    query = query.order_by(_template.c.name, _template.c.id).offset(args.offset).limit(args.limit + 1)
    async with ctx.resources.connect() as connection:
        rows = (await connection.execute(query)).all()
    page = rows[: args.limit]
    has_more = len(rows) > args.limit
    return {
        "templates": [
            {
                "id": str(row.id),
                "name": row.name,
                "description": row.description,
                "active": row.active,
                "steps": _steps(row.steps),
                "plans": {"active": row.active_plans or 0, "total": row.total or 0},
            }
            for row in page
        ],
        "has_more": has_more,
        "next_offset": args.offset + len(page) if has_more else None,
    }


# -- lookups shared by previews and writes --------------------------------------------------------


async def _template_row(connection: AsyncConnection, ctx: CrmContext, template_id: UUID) -> Any:
    row = (
        await connection.execute(
            sa.select(_template).where(
                _template.c.organization_id == ctx.organization_id, _template.c.id == template_id
            )
        )
    ).first()
    if row is None:
        raise ToolFailure(
            "not_found",
            "No such plan template in this organization.",
            hint="Use an id from get_plan_templates.",
        )
    return row


async def _contact_row(connection: AsyncConnection, ctx: CrmContext, contact_id: UUID) -> Any:
    row = (
        await connection.execute(
            sa.select(_contact.c.id, _contact.c.first_name, _contact.c.last_name).where(
                _contact.c.organization_id == ctx.organization_id, _contact.c.id == contact_id
            )
        )
    ).first()
    if row is None:
        raise ToolFailure(
            "not_found",
            "No such contact in this organization.",
            hint="Find the contact with search_contacts.",
        )
    return row


async def _assignee_row(connection: AsyncConnection, ctx: CrmContext, member_id: UUID) -> Any:
    row = (
        await connection.execute(
            sa.select(_member.c.id, _member.c.name).where(
                _member.c.organization_id == ctx.organization_id,
                _member.c.id == member_id,
                _member.c.removed_at.is_(None),
            )
        )
    ).first()
    if row is None:
        raise ToolFailure(
            "not_found",
            "No such member in this organization.",
            hint="Leave assignee_id out to create the plan unassigned, or ask the user who should own it.",
        )
    return row


async def _name_taken(
    connection: AsyncConnection, ctx: CrmContext, name: str, other_than: UUID | None = None
) -> None:
    query = sa.select(_template.c.name).where(
        _template.c.organization_id == ctx.organization_id,
        sa.func.lower(_template.c.name) == name.lower(),
    )
    if other_than is not None:
        query = query.where(_template.c.id != other_than)
    existing = await connection.scalar(query)
    if existing is not None:
        raise ToolFailure(
            "conflict",
            f"A plan template named {existing!r} already exists.",
            hint="Choose another name, or update the existing template with update_plan_template.",
        )


def _person(row: Any) -> str:
    return f"{row.first_name} {row.last_name}".strip()


# -- create_plan ----------------------------------------------------------------------------------


async def _plan_change(connection: AsyncConnection, ctx: CrmContext, args: CreatePlanArgs) -> dict[str, Any]:
    """Validates a new plan against the data; what the plan would be."""
    template = await _template_row(connection, ctx, args.template_id)
    if not template.active:
        raise ToolFailure(
            "inactive",
            f"The plan template {template.name!r} is deactivated.",
            hint="Pick an active template, or ask an admin to reactivate it.",
        )
    contact = await _contact_row(connection, ctx, args.contact_id)
    assignee = None
    if args.assignee_id is not None:
        assignee = await _assignee_row(connection, ctx, args.assignee_id)
    running = await connection.scalar(
        sa.select(_plan.c.id).where(
            _plan.c.organization_id == ctx.organization_id,
            _plan.c.template_id == template.id,
            _plan.c.contact_id == contact.id,
            _plan.c.status == PlanStatus.ACTIVE.value,
        )
    )
    if running is not None:
        raise ToolFailure(
            "conflict",
            f"{_person(contact)} already has an active {template.name!r} plan.",
            hint="Tell the user; no second plan from the same template is needed.",
        )
    today = ctx.asked_at.astimezone(organization_zone(ctx)).date()
    return {
        "template": {"id": str(template.id), "name": template.name},
        "contact": {"id": str(contact.id), "name": _person(contact)},
        "assignee": {"id": str(assignee.id), "name": assignee.name} if assignee is not None else None,
        "status": PlanStatus.ACTIVE.value,
        "starts_on": today.isoformat(),
        "steps": [
            {**step, "on": (today + timedelta(days=step["day"])).isoformat()}
            for step in _steps(template.steps)
        ],
    }


async def preview_create_plan(ctx: CrmContext, args: CreatePlanArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        plan = await _plan_change(connection, ctx, args)
    return {"action": "Start a plan", "plan": plan}


async def create_plan(ctx: CrmContext, args: CreatePlanArgs) -> dict[str, Any]:
    plan_id = uuid4()
    async with ctx.resources.begin() as connection:
        plan = await _plan_change(connection, ctx, args)
        now = utcnow()
        await connection.execute(
            sa.insert(_plan).values(
                id=plan_id,
                organization_id=ctx.organization_id,
                template_id=args.template_id,
                contact_id=args.contact_id,
                assignee_id=args.assignee_id,
                status=PlanStatus.ACTIVE.value,
                current_step=0,
                started_at=now,
                created_at=now,
            )
        )
    return {"plan_id": str(plan_id), **plan}


# -- plan templates -------------------------------------------------------------------------------


def _steps_json(steps: list[Step]) -> list[dict[str, Any]]:
    return [step.model_dump() for step in _ordered(steps)]


async def preview_create_plan_template(ctx: CrmContext, args: CreatePlanTemplateArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        await _name_taken(connection, ctx, args.name)
    return {
        "action": "Create a plan template",
        "template": {
            "name": args.name,
            "description": args.description,
            "active": True,
            "steps": _steps_json(args.steps),
        },
    }


async def create_plan_template(ctx: CrmContext, args: CreatePlanTemplateArgs) -> dict[str, Any]:
    template_id = uuid4()
    now = utcnow()
    try:
        async with ctx.resources.begin() as connection:
            await _name_taken(connection, ctx, args.name)
            await connection.execute(
                sa.insert(_template).values(
                    id=template_id,
                    organization_id=ctx.organization_id,
                    name=args.name,
                    description=args.description,
                    steps=_steps_json(args.steps),
                    active=True,
                    created_at=now,
                    updated_at=now,
                )
            )
    except IntegrityError:
        # Someone created one of that name between the check and the insert.
        raise ToolFailure(
            "conflict",
            f"A plan template named {args.name!r} already exists.",
            hint="Choose another name.",
        ) from None
    return {"template_id": str(template_id), "name": args.name, "steps": len(args.steps)}


_FIELDS = ("name", "description", "steps", "active")


async def _template_changes(
    connection: AsyncConnection, ctx: CrmContext, args: UpdatePlanTemplateArgs
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """Validates the update against the data; the template and each field that would change."""
    template = await _template_row(connection, ctx, args.template_id)
    wanted: dict[str, Any] = {
        "name": args.name,
        "description": args.description,
        "steps": _steps_json(args.steps) if args.steps is not None else None,
        "active": args.active,
    }
    current = {
        "name": template.name,
        "description": template.description,
        "steps": _steps(template.steps),
        "active": template.active,
    }
    changes = {
        field: {"from": current[field], "to": wanted[field]}
        for field in _FIELDS
        if wanted[field] is not None and wanted[field] != current[field]
    }
    if not changes:
        raise ToolFailure(
            "no_change",
            f"The plan template {template.name!r} already looks like that; nothing to change.",
            hint="Give at least one of name, description, steps or active with a new value.",
        )
    if "name" in changes:
        await _name_taken(connection, ctx, args.name or "", other_than=template.id)
    return template, changes


async def preview_update_plan_template(ctx: CrmContext, args: UpdatePlanTemplateArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        template, changes = await _template_changes(connection, ctx, args)
        active_plans = await connection.scalar(
            sa.select(sa.func.count())
            .select_from(_plan)
            .where(
                _plan.c.organization_id == ctx.organization_id,
                _plan.c.template_id == template.id,
                _plan.c.status == PlanStatus.ACTIVE.value,
            )
        )
    preview: dict[str, Any] = {
        "action": "Update a plan template",
        "template": {"id": str(template.id), "name": template.name},
        "changes": changes,
    }
    if "steps" in changes and active_plans:
        preview["note"] = (
            f"{active_plans} active plan(s) follow this template and continue with the new steps."
        )
    return preview


async def update_plan_template(ctx: CrmContext, args: UpdatePlanTemplateArgs) -> dict[str, Any]:
    try:
        async with ctx.resources.begin() as connection:
            template, changes = await _template_changes(connection, ctx, args)
            await connection.execute(
                sa.update(_template)
                .where(_template.c.organization_id == ctx.organization_id, _template.c.id == template.id)
                .values(**{field: change["to"] for field, change in changes.items()}, updated_at=utcnow())
            )
    except IntegrityError:
        raise ToolFailure(
            "conflict", f"A plan template named {args.name!r} already exists.", hint="Choose another name."
        ) from None
    return {"template_id": str(template.id), "changed": changes}


TOOLS = (
    Tool(
        "get_plan_templates",
        CATEGORY,
        "List the organization's plan templates (reusable follow-up steps) by name, with their steps "
        "and how many plans use them.",
        GetPlanTemplatesArgs,
        "plan_template:list",
        False,
        get_plan_templates,
    ),
    Tool(
        "create_plan",
        CATEGORY,
        "Start a plan: carry out a plan template's steps for one contact, starting today, optionally "
        "assigned to a member.",
        CreatePlanArgs,
        "plan:create",
        True,
        create_plan,
        preview=preview_create_plan,
    ),
    Tool(
        "create_plan_template",
        CATEGORY,
        "Create a plan template: a name, a description and its steps (day, channel, action).",
        CreatePlanTemplateArgs,
        "plan_template:create",
        True,
        create_plan_template,
        preview=preview_create_plan_template,
    ),
    Tool(
        "update_plan_template",
        CATEGORY,
        "Change a plan template's name, description or steps, or deactivate or reactivate it.",
        UpdatePlanTemplateArgs,
        "plan_template:update",
        True,
        update_plan_template,
        preview=preview_update_plan_template,
    ),
)
