"""Infrastructure tools for the organization's phone numbers: list them, and assign the voice
agent, text agent and analyzers that handle each line (SPEC §5). Every lookup is scoped to the
caller's organization: another organization's number or agent is "not found"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from pydantic import Field, model_validator
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.store.engine import dialect_insert
from vernis.tools import Tool, ToolFailure
from vernis_crm.resources import CrmContext
from vernis_crm.tools._infrastructure_common import (
    CATEGORY,
    _analyzer,
    _analyzers_of,
    _Args,
    _not_found,
    _number,
    _one,
    _Page,
    _paged,
    _phone,
    _phone_analyzer,
    _phone_number,
    _ref,
    _text,
    _voice,
)

__all__ = ["TOOLS"]


class GetPhoneNumbersArgs(_Page):
    pass


class AssignPhoneAgentArgs(_Args):
    phone_number_id: UUID = Field(description="The phone number's id, as get_phone_numbers returned it.")
    agent_id: UUID | None = Field(
        description="The voice agent that is to answer the number (from get_agents); null for none."
    )


class AssignPhoneTextAgentArgs(_Args):
    phone_number_id: UUID = Field(description="The phone number's id, as get_phone_numbers returned it.")
    text_agent_id: UUID | None = Field(
        description="The text agent that is to answer its SMS (from get_agents, kind text); null for none."
    )


class AssignPhoneAnalyzersArgs(_Args):
    phone_number_id: UUID = Field(description="The phone number's id, as get_phone_numbers returned it.")
    add: list[UUID] = Field(
        default_factory=list, max_length=20, description="Analyzer ids (from get_analyzers) to add."
    )
    remove: list[UUID] = Field(default_factory=list, max_length=20, description="Analyzer ids to take off.")

    @model_validator(mode="after")
    def _sensible(self) -> AssignPhoneAnalyzersArgs:
        if not self.add and not self.remove:
            raise ValueError("give analyzers to add or to remove")
        if set(self.add) & set(self.remove):
            raise ValueError("an analyzer cannot be both added and removed")
        return self


# -- shared ------------------------------------------------------------------------------------


async def get_phone_numbers(ctx: CrmContext, args: GetPhoneNumbersArgs) -> dict[str, Any]:
    voice = _voice.alias("voice")
    text = _text.alias("text")
    query = (
        sa.select(
            _phone.c.id,
            _phone.c.number,
            _phone.c.label,
            voice.c.id.label("voice_id"),
            voice.c.name.label("voice_name"),
            voice.c.active.label("voice_active"),
            text.c.id.label("text_id"),
            text.c.name.label("text_name"),
            text.c.active.label("text_active"),
        )
        .select_from(
            _phone.outerjoin(
                voice,
                sa.and_(
                    voice.c.id == _phone.c.voice_agent_id, voice.c.organization_id == ctx.organization_id
                ),
            ).outerjoin(
                text,
                sa.and_(text.c.id == _phone.c.text_agent_id, text.c.organization_id == ctx.organization_id),
            )
        )
        .where(_phone.c.organization_id == ctx.organization_id)
        .order_by(_phone.c.label, _phone.c.number, _phone.c.id)
        .limit(args.limit + 1)
        .offset(args.offset)
    )
    async with ctx.resources.connect() as connection:
        rows = (await connection.execute(query)).all()
        page = rows[: args.limit]
        analyzers = await _analyzers_of(connection, ctx, [row.id for row in page])

    def agent(id_: UUID | None, name: str | None, active: bool | None) -> dict[str, Any] | None:
        return None if id_ is None else {"id": str(id_), "name": name, "active": active}

    items = [
        _number(row)
        | {
            "voice_agent": agent(row.voice_id, row.voice_name, row.voice_active),
            "text_agent": agent(row.text_id, row.text_name, row.text_active),
            "analyzers": analyzers[row.id],
        }
        for row in page
    ]
    return _paged(rows, args, "phone_numbers", items)


# -- agents ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Slot:
    """One agent slot of a phone number: which column, which agents fit it, how they are named."""

    column: str
    table: sa.Table
    what: str
    key: str


_VOICE_SLOT = _Slot("voice_agent_id", _voice, "voice agent", "voice_agent")
_TEXT_SLOT = _Slot("text_agent_id", _text, "text agent", "text_agent")


async def _plan_slot(
    connection: AsyncConnection, ctx: CrmContext, slot: _Slot, phone_number_id: UUID, agent_id: UUID | None
) -> tuple[Any, dict[str, Any]]:
    number = await _phone_number(connection, ctx, phone_number_id)
    wanted = await _one(connection, ctx, slot.table, agent_id)
    if agent_id is not None and wanted is None:
        raise _not_found(slot.what, f"Use the id of a {slot.what} from get_agents.")
    if wanted is not None and not wanted.active:
        raise ToolFailure(
            "inactive_agent",
            f"The {slot.what} {wanted.name!r} is inactive and would leave the number unanswered.",
            hint="Activate it first, or choose an active agent.",
        )
    current_id = getattr(number, slot.column)
    if current_id == agent_id:
        raise ToolFailure(
            "no_change",
            f"{number.label} already has {'no ' + slot.what if wanted is None else repr(wanted.name)}; "
            "nothing to change.",
        )
    current = await _one(connection, ctx, slot.table, current_id)
    return number, {slot.key: {"from": _ref(current), "to": _ref(wanted)}}


async def _preview_slot(
    ctx: CrmContext, slot: _Slot, phone_number_id: UUID, agent_id: UUID | None
) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        number, changes = await _plan_slot(connection, ctx, slot, phone_number_id, agent_id)
    return {
        "action": f"Change the {slot.what} of a phone number",
        "phone_number": _number(number),
        "changes": changes,
    }


async def _assign_slot(
    ctx: CrmContext, slot: _Slot, phone_number_id: UUID, agent_id: UUID | None
) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
        number, changes = await _plan_slot(connection, ctx, slot, phone_number_id, agent_id)
        await connection.execute(
            sa.update(_phone)
            .where(_phone.c.organization_id == ctx.organization_id, _phone.c.id == number.id)
            .values({slot.column: agent_id})
        )
    return {"phone_number": _number(number), "changes": changes}


async def preview_assign_phone_agent(ctx: CrmContext, args: AssignPhoneAgentArgs) -> dict[str, Any]:
    return await _preview_slot(ctx, _VOICE_SLOT, args.phone_number_id, args.agent_id)


async def assign_phone_agent(ctx: CrmContext, args: AssignPhoneAgentArgs) -> dict[str, Any]:
    return await _assign_slot(ctx, _VOICE_SLOT, args.phone_number_id, args.agent_id)


async def preview_assign_phone_text_agent(ctx: CrmContext, args: AssignPhoneTextAgentArgs) -> dict[str, Any]:
    return await _preview_slot(ctx, _TEXT_SLOT, args.phone_number_id, args.text_agent_id)


async def assign_phone_text_agent(ctx: CrmContext, args: AssignPhoneTextAgentArgs) -> dict[str, Any]:
    return await _assign_slot(ctx, _TEXT_SLOT, args.phone_number_id, args.text_agent_id)


@dataclass(slots=True)
class _AnalyzerChange:
    number: Any
    before: list[dict[str, Any]]
    after: list[dict[str, Any]]
    added: list[dict[str, Any]]
    removed: list[dict[str, Any]]

    def changes(self) -> dict[str, Any]:
        return {
            "analyzers": {"from": self.before, "to": self.after},
            "added": self.added,
            "removed": self.removed,
        }


async def _plan_analyzers(
    connection: AsyncConnection, ctx: CrmContext, args: AssignPhoneAnalyzersArgs
) -> _AnalyzerChange:
    number = await _phone_number(connection, ctx, args.phone_number_id)
    wanted = set(args.add) | set(args.remove)
    known = {
        row.id: {"id": str(row.id), "name": row.name}
        for row in await connection.execute(
            sa.select(_analyzer.c.id, _analyzer.c.name).where(
                _analyzer.c.organization_id == ctx.organization_id, _analyzer.c.id.in_(wanted)
            )
        )
    }
    unknown = [str(id_) for id_ in [*args.add, *args.remove] if id_ not in known]
    if unknown:
        raise ToolFailure(
            "not_found",
            f"No analyzer with the id {', '.join(unknown)} in this organization.",
            hint="Use ids from get_analyzers.",
        )
    current = (await _analyzers_of(connection, ctx, [number.id]))[number.id]
    current_ids = {UUID(item["id"]) for item in current}
    added = [known[id_] for id_ in dict.fromkeys(args.add) if id_ not in current_ids]
    removed = [known[id_] for id_ in dict.fromkeys(args.remove) if id_ in current_ids]
    if not added and not removed:
        raise ToolFailure(
            "no_change",
            f"{number.label} already has exactly these analyzers; nothing to change.",
            hint="Its analyzers are: " + (", ".join(item["name"] for item in current) or "none") + ".",
        )
    gone = {item["id"] for item in removed}
    after = sorted(
        [item for item in current if item["id"] not in gone] + added,
        key=lambda item: (item["name"], item["id"]),
    )
    return _AnalyzerChange(number, current, after, added, removed)


async def preview_assign_phone_analyzers(ctx: CrmContext, args: AssignPhoneAnalyzersArgs) -> dict[str, Any]:
    async with ctx.resources.connect() as connection:
        plan = await _plan_analyzers(connection, ctx, args)
    return {
        "action": "Change the analyzers of a phone number",
        "phone_number": _number(plan.number),
        "changes": plan.changes(),
    }


async def assign_phone_analyzers(ctx: CrmContext, args: AssignPhoneAnalyzersArgs) -> dict[str, Any]:
    async with ctx.resources.begin() as connection:
        plan = await _plan_analyzers(connection, ctx, args)
        if plan.added:
            await connection.execute(
                dialect_insert(connection.dialect, _phone_analyzer).on_conflict_do_nothing(),
                [
                    {
                        "phone_number_id": plan.number.id,
                        "analyzer_id": UUID(item["id"]),
                        "organization_id": ctx.organization_id,
                    }
                    for item in plan.added
                ],
            )
        if plan.removed:
            await connection.execute(
                sa.delete(_phone_analyzer).where(
                    _phone_analyzer.c.organization_id == ctx.organization_id,
                    _phone_analyzer.c.phone_number_id == plan.number.id,
                    _phone_analyzer.c.analyzer_id.in_([UUID(item["id"]) for item in plan.removed]),
                )
            )
    return {"phone_number": _number(plan.number), "changes": plan.changes()}


TOOLS = (
    Tool(
        "get_phone_numbers",
        CATEGORY,
        "List the organization's phone numbers with the voice agent, text agent and analyzers of each.",
        GetPhoneNumbersArgs,
        "phone:list",
        False,
        get_phone_numbers,
    ),
    Tool(
        "assign_phone_agent",
        CATEGORY,
        "Choose the voice agent that answers a phone number's calls, or none.",
        AssignPhoneAgentArgs,
        "phone:update",
        True,
        assign_phone_agent,
        preview=preview_assign_phone_agent,
    ),
    Tool(
        "assign_phone_analyzers",
        CATEGORY,
        "Add analyzers to a phone number or take them off.",
        AssignPhoneAnalyzersArgs,
        "phone:update",
        True,
        assign_phone_analyzers,
        preview=preview_assign_phone_analyzers,
    ),
    Tool(
        "assign_phone_text_agent",
        CATEGORY,
        "Choose the text agent that answers a phone number's SMS, or none.",
        AssignPhoneTextAgentArgs,
        "phone:update",
        True,
        assign_phone_text_agent,
        preview=preview_assign_phone_text_agent,
    ),
)
