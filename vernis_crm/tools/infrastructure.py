"""Infrastructure tools (SPEC §5): the organization's voice and text agents and the analyzers its
calls are assessed against; creating and changing voice agents and analyzers. Which agents and
analyzers serve each phone number is `phone_numbers.py`.

Every query is scoped to the caller's organization: another organization's id is "not found", exactly
like an unknown one, and can never be hung on one of this organization's numbers. A write's preview
and its run share one plan, computed against the data: the run computes it again in its own
transaction, so it applies what the preview showed, or refuses if the data changed in between.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID, uuid4

import sqlalchemy as sa
from pydantic import Field, model_validator
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.models import utcnow
from vernis.tools import Tool, ToolFailure
from vernis_crm.resources import CrmContext
from vernis_crm.tools._infrastructure_common import (
    CATEGORY,
    _analyzer,
    _Args,
    _excerpt,
    _not_found,
    _one,
    _Page,
    _paged,
    _phone,
    _phone_analyzer,
    _taken,
    _text,
    _voice,
    _writing,
)

__all__ = ["TOOLS"]


class GetAgentsArgs(_Page):
    kind: Literal["voice", "text", "all"] = Field(
        "all", description="Voice agents answer and place calls; text agents answer SMS."
    )
    active: bool | None = Field(None, description="Only active (true) or inactive (false) agents.")
    agent_id: UUID | None = Field(None, description="Only this agent, with its full instructions.")


_LANGUAGE_TAG = r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$"


class CreateAgentArgs(_Args):
    name: str = Field(
        min_length=1, max_length=255, description="A name unique among the organization's voice agents."
    )
    voice: str = Field(min_length=1, max_length=64, description="The voice it speaks with, e.g. 'ava'.")
    language: str = Field(
        "en-US",
        pattern=_LANGUAGE_TAG,
        max_length=16,
        description="The language it speaks, as a BCP 47 tag such as 'en-US' or 'de-DE'.",
    )
    instructions: str = Field(
        "", max_length=20_000, description="Its prompt: what it does on a call, and how."
    )
    active: bool = Field(True, description="Whether it may take calls right away.")


class UpdateAgentArgs(_Args):
    agent_id: UUID = Field(description="The voice agent's id, as get_agents returned it.")
    name: str | None = Field(None, min_length=1, max_length=255, description="A new name.")
    voice: str | None = Field(None, min_length=1, max_length=64, description="A new voice, e.g. 'ava'.")
    language: str | None = Field(
        None,
        pattern=_LANGUAGE_TAG,
        max_length=16,
        description="A new language, as a BCP 47 tag such as 'en-US'.",
    )
    instructions: str | None = Field(
        None, max_length=20_000, description="New instructions; they replace the old ones whole."
    )
    active: bool | None = Field(None, description="false takes it off calls; true puts it back.")

    @model_validator(mode="after")
    def _something(self) -> UpdateAgentArgs:
        if all(getattr(self, name) is None for name in _AGENT_FIELDS):
            raise ValueError("give at least one of name, voice, language, instructions, active")
        return self


_AGENT_FIELDS = ("name", "voice", "language", "instructions", "active")


class GetAnalyzersArgs(_Page):
    pass


class CreateAnalyzerArgs(_Args):
    name: str = Field(
        min_length=1, max_length=255, description="A name unique among the organization's analyzers."
    )
    description: str = Field("", max_length=2_000, description="What it finds out about a call.")
    criteria: str = Field(
        min_length=1,
        max_length=10_000,
        description="What each call is assessed against, and how to score it.",
    )


def _agent(row: Any, numbers: list[str], full: bool = False) -> dict[str, Any]:
    item: dict[str, Any] = {"id": str(row.id), "kind": row.kind, "name": row.name}
    if row.kind == "voice":
        item |= {"voice": row.voice, "language": row.language}
    item |= {
        "active": row.active,
        "instructions": row.instructions if full else _excerpt(row.instructions),
        "phone_numbers": numbers,
    }
    return item


def _agents_query(ctx: CrmContext, args: GetAgentsArgs) -> sa.Select[Any]:
    def part(table: sa.Table, kind: str) -> sa.Select[Any]:
        voice = table.c.voice if kind == "voice" else sa.cast(sa.null(), sa.String(64))
        language = table.c.language if kind == "voice" else sa.cast(sa.null(), sa.String(16))
        query = sa.select(
            table.c.id,
            sa.literal_column(f"'{kind}'", sa.String(8)).label("kind"),
            table.c.name,
            voice.label("voice"),
            language.label("language"),
            table.c.instructions,
            table.c.active,
        ).where(table.c.organization_id == ctx.organization_id)
        if args.active is not None:
            query = query.where(table.c.active == args.active)
        if args.agent_id is not None:
            query = query.where(table.c.id == args.agent_id)
        return query

    parts = [
        part(table, kind)
        for table, kind in ((_voice, "voice"), (_text, "text"))
        if args.kind in (kind, "all")
    ]
    agents = sa.union_all(*parts).subquery() if len(parts) > 1 else parts[0].subquery()
    # Voice agents first ('voice' sorts after 'text'), then by name.
    return (
        sa.select(agents)
        .order_by(agents.c.kind.desc(), agents.c.name, agents.c.id)
        .limit(args.limit + 1)
        .offset(args.offset)
    )


async def get_agents(ctx: CrmContext, args: GetAgentsArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        rows = (await connection.execute(_agents_query(ctx, args))).all()
        page = rows[: args.limit]
        ids = [row.id for row in page]
        lines = (
            await connection.execute(
                sa.select(_phone.c.label, _phone.c.voice_agent_id, _phone.c.text_agent_id)
                .where(
                    _phone.c.organization_id == ctx.organization_id,
                    sa.or_(_phone.c.voice_agent_id.in_(ids), _phone.c.text_agent_id.in_(ids)),
                )
                .order_by(_phone.c.label)
            )
        ).all()
    if args.agent_id is not None and not page:
        raise _not_found("agent", "Use an id from get_agents, or leave agent_id out to list them all.")
    numbers: dict[tuple[str, UUID], list[str]] = {}
    for line in lines:
        for kind, agent_id in (("voice", line.voice_agent_id), ("text", line.text_agent_id)):
            if agent_id is not None:
                numbers.setdefault((kind, agent_id), []).append(line.label)
    items = [_agent(row, numbers.get((row.kind, row.id), []), full=args.agent_id is not None) for row in page]
    return _paged(rows, args, "agents", items)


async def _check_agent_name(
    connection: AsyncConnection, ctx: CrmContext, name: str, but: UUID | None
) -> None:
    if await _taken(connection, ctx, _voice, name, but):
        raise ToolFailure(
            "conflict",
            f"A voice agent named {name!r} already exists in this organization.",
            hint="Choose another name, or change that agent with update_agent.",
        )


async def preview_create_agent(ctx: CrmContext, args: CreateAgentArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        await _check_agent_name(connection, ctx, args.name, None)
    return {"action": "Create a voice agent", "agent": args.model_dump()}


async def create_agent(ctx: CrmContext, args: CreateAgentArgs) -> dict[str, Any]:
    now = utcnow()
    id_ = uuid4()
    async with _writing(ctx, "voice agent") as connection:
        await _check_agent_name(connection, ctx, args.name, None)
        await connection.execute(
            sa.insert(_voice).values(
                id=id_,
                organization_id=ctx.organization_id,
                created_at=now,
                updated_at=now,
                **args.model_dump(),
            )
        )
    return {"agent": {"id": str(id_), "kind": "voice"} | args.model_dump()}


@dataclass(slots=True)
class _AgentChange:
    agent: Any
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)


async def _plan_agent_update(
    connection: AsyncConnection, ctx: CrmContext, args: UpdateAgentArgs
) -> _AgentChange:
    agent = await _one(connection, ctx, _voice, args.agent_id)
    if agent is None:
        if await _one(connection, ctx, _text, args.agent_id) is not None:
            raise ToolFailure(
                "not_found",
                "That is a text agent; update_agent changes voice agents only.",
                hint="Use the id of an agent of kind voice.",
            )
        raise _not_found("voice agent", "Use an id from get_agents.")
    plan = _AgentChange(agent)
    for name in _AGENT_FIELDS:
        wanted = getattr(args, name)
        if wanted is not None and wanted != getattr(agent, name):
            plan.changes[name] = {"from": getattr(agent, name), "to": wanted}
    if not plan.changes:
        raise ToolFailure(
            "no_change", f"The agent {agent.name!r} already has these values; nothing to change."
        )
    if args.name is not None and "name" in plan.changes:
        await _check_agent_name(connection, ctx, args.name, agent.id)
    return plan


async def preview_update_agent(ctx: CrmContext, args: UpdateAgentArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        plan = await _plan_agent_update(connection, ctx, args)
    return {
        "action": "Change a voice agent",
        "agent": {"id": str(plan.agent.id), "name": plan.agent.name},
        "changes": plan.changes,
    }


async def update_agent(ctx: CrmContext, args: UpdateAgentArgs) -> dict[str, Any]:
    async with _writing(ctx, "voice agent") as connection:
        plan = await _plan_agent_update(connection, ctx, args)
        values = {name: change["to"] for name, change in plan.changes.items()}
        await connection.execute(
            sa.update(_voice)
            .where(_voice.c.organization_id == ctx.organization_id, _voice.c.id == plan.agent.id)
            .values(updated_at=utcnow(), **values)
        )
    return {
        "agent": {"id": str(plan.agent.id), "name": values.get("name", plan.agent.name)},
        "changes": plan.changes,
    }


# -- analyzers ---------------------------------------------------------------------------------


async def get_analyzers(ctx: CrmContext, args: GetAnalyzersArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        rows = (
            await connection.execute(
                sa.select(_analyzer)
                .where(_analyzer.c.organization_id == ctx.organization_id)
                .order_by(_analyzer.c.name, _analyzer.c.id)
                .limit(args.limit + 1)
                .offset(args.offset)
            )
        ).all()
        page = rows[: args.limit]
        lines = (
            await connection.execute(
                sa.select(_phone_analyzer.c.analyzer_id, _phone.c.label)
                .join(_phone, _phone.c.id == _phone_analyzer.c.phone_number_id)
                .where(
                    _phone_analyzer.c.organization_id == ctx.organization_id,
                    _phone_analyzer.c.analyzer_id.in_([row.id for row in page]),
                )
                .order_by(_phone.c.label)
            )
        ).all()
    numbers: dict[UUID, list[str]] = {}
    for line in lines:
        numbers.setdefault(line.analyzer_id, []).append(line.label)
    items = [
        {
            "id": str(row.id),
            "name": row.name,
            "description": _excerpt(row.description),
            "criteria": _excerpt(row.criteria),
            "phone_numbers": numbers.get(row.id, []),
        }
        for row in page
    ]
    return _paged(rows, args, "analyzers", items)


async def _check_analyzer_name(connection: AsyncConnection, ctx: CrmContext, name: str) -> None:
    if await _taken(connection, ctx, _analyzer, name):
        raise ToolFailure(
            "conflict",
            f"An analyzer named {name!r} already exists in this organization.",
            hint="Choose another name, or use the existing analyzer.",
        )


async def preview_create_analyzer(ctx: CrmContext, args: CreateAnalyzerArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        await _check_analyzer_name(connection, ctx, args.name)
    return {"action": "Create an analyzer", "analyzer": args.model_dump()}


async def create_analyzer(ctx: CrmContext, args: CreateAnalyzerArgs) -> dict[str, Any]:
    now = utcnow()
    id_ = uuid4()
    async with _writing(ctx, "analyzer") as connection:
        await _check_analyzer_name(connection, ctx, args.name)
        await connection.execute(
            sa.insert(_analyzer).values(
                id=id_,
                organization_id=ctx.organization_id,
                created_at=now,
                updated_at=now,
                **args.model_dump(),
            )
        )
    return {"analyzer": {"id": str(id_)} | args.model_dump()}


# -- assignments -------------------------------------------------------------------------------


TOOLS = (
    Tool(
        "get_agents",
        CATEGORY,
        "List the organization's AI agents (voice ones for calls, text ones for SMS) and their numbers.",
        GetAgentsArgs,
        "agent:list",
        False,
        get_agents,
    ),
    Tool(
        "create_agent",
        CATEGORY,
        "Create a voice agent that can answer and place calls.",
        CreateAgentArgs,
        "agent:create",
        True,
        create_agent,
        preview=preview_create_agent,
    ),
    Tool(
        "update_agent",
        CATEGORY,
        "Change a voice agent's name, voice, language, instructions or whether it is active.",
        UpdateAgentArgs,
        "agent:update",
        True,
        update_agent,
        preview=preview_update_agent,
    ),
    Tool(
        "get_analyzers",
        CATEGORY,
        "List the analyzers calls are assessed against, and the phone numbers each one runs on.",
        GetAnalyzersArgs,
        "analyzer:list",
        False,
        get_analyzers,
    ),
    Tool(
        "create_analyzer",
        CATEGORY,
        "Create an analyzer: criteria the calls on a phone number are assessed against.",
        CreateAnalyzerArgs,
        "analyzer:create",
        True,
        create_analyzer,
        preview=preview_create_analyzer,
    ),
)
