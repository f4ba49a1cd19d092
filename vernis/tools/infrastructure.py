"""Infrastructure tools (SPEC §5): the organization's phone numbers, its voice and text agents and the
analyzers its calls are assessed against; creating and changing voice agents and analyzers, and
choosing which agents and analyzers serve each phone number.

Every query is scoped to the caller's organization: another organization's id is "not found", exactly
like an unknown one, and can never be hung on one of this organization's numbers. A write's preview
and its run share one plan, computed against the data: the run computes it again in its own
transaction, so it applies what the preview showed, or refuses if the data changed in between.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID, uuid4

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy.ext.asyncio import AsyncConnection

from vernis.db.crm import Analyzer, PhoneNumber, PhoneNumberAnalyzer, TextAgent, VoiceAgent
from vernis.db.engine import dialect_insert
from vernis.db.models import table_of, utcnow
from vernis.services.registry import Tool, ToolContext, ToolFailure

__all__ = ["TOOLS"]

CATEGORY = "Infrastructure"
MAX_PAGE = 50
EXCERPT = 300

_phone = table_of(PhoneNumber)
_voice = table_of(VoiceAgent)
_text = table_of(TextAgent)
_analyzer = table_of(Analyzer)
_phone_analyzer = table_of(PhoneNumberAnalyzer)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class _Page(_Args):
    limit: int = Field(20, ge=1, le=MAX_PAGE, description=f"How many to return (at most {MAX_PAGE}).")
    offset: int = Field(0, ge=0, le=10_000, description="How many to skip: next_offset of the previous page.")


class GetPhoneNumbersArgs(_Page):
    pass


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


def _excerpt(text: str, limit: int = EXCERPT) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _paged(rows: Sequence[Any], page: _Page, key: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {key: items, "has_more": len(rows) > page.limit}
    if result["has_more"]:
        result["next_offset"] = page.offset + page.limit
    return result


def _ref(row: Any) -> dict[str, Any] | None:
    return None if row is None else {"id": str(row.id), "name": row.name}


def _not_found(what: str, hint: str) -> ToolFailure:
    return ToolFailure("not_found", f"No {what} with that id in this organization.", hint=hint)


async def _phone_number(connection: AsyncConnection, ctx: ToolContext, phone_number_id: UUID) -> Any:
    row = (
        await connection.execute(
            sa.select(_phone).where(
                _phone.c.organization_id == ctx.organization_id, _phone.c.id == phone_number_id
            )
        )
    ).first()
    if row is None:
        raise _not_found("phone number", "Use an id from get_phone_numbers.")
    return row


async def _one(connection: AsyncConnection, ctx: ToolContext, table: sa.Table, id_: UUID | None) -> Any:
    """The row `id_` of `table` in the caller's organization, or None (also for `id_` None)."""
    if id_ is None:
        return None
    return (
        await connection.execute(
            sa.select(table).where(table.c.organization_id == ctx.organization_id, table.c.id == id_)
        )
    ).first()


def _number(row: Any) -> dict[str, Any]:
    return {"id": str(row.id), "label": row.label, "number": row.number}


async def _taken(
    connection: AsyncConnection, ctx: ToolContext, table: sa.Table, name: str, but: UUID | None = None
) -> bool:
    # Case-insensitive: "Front desk" beside "Front Desk" would only confuse people.
    same = sa.and_(
        table.c.organization_id == ctx.organization_id, sa.func.lower(table.c.name) == name.lower()
    )
    if but is not None:
        same = sa.and_(same, table.c.id != but)
    return bool(await connection.scalar(sa.select(sa.exists().where(same))))


@contextlib.asynccontextmanager
async def _writing(ctx: ToolContext, what: str) -> AsyncIterator[AsyncConnection]:
    """A transaction in which a unique-name clash (a concurrent write got there first) is a conflict."""
    try:
        async with ctx.engine.begin() as connection:
            yield connection
    except sa.exc.IntegrityError as exc:
        raise ToolFailure(
            "conflict",
            f"Another {what} with that name was just created; nothing was changed.",
            retryable=True,
        ) from exc


# -- phone numbers -----------------------------------------------------------------------------


async def _analyzers_of(
    connection: AsyncConnection, ctx: ToolContext, phone_ids: Sequence[UUID]
) -> dict[UUID, list[dict[str, Any]]]:
    rows = await connection.execute(
        sa.select(_phone_analyzer.c.phone_number_id, _analyzer.c.id, _analyzer.c.name)
        .join(_analyzer, _analyzer.c.id == _phone_analyzer.c.analyzer_id)
        .where(
            _phone_analyzer.c.organization_id == ctx.organization_id,
            _phone_analyzer.c.phone_number_id.in_(phone_ids),
        )
        .order_by(_analyzer.c.name, _analyzer.c.id)
    )
    found: dict[UUID, list[dict[str, Any]]] = {id_: [] for id_ in phone_ids}
    for row in rows:
        found[row.phone_number_id].append({"id": str(row.id), "name": row.name})
    return found


async def get_phone_numbers(ctx: ToolContext, args: GetPhoneNumbersArgs) -> dict[str, Any]:
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
    async with ctx.engine.connect() as connection:
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


def _agents_query(ctx: ToolContext, args: GetAgentsArgs) -> sa.Select[Any]:
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


async def get_agents(ctx: ToolContext, args: GetAgentsArgs) -> dict[str, Any]:
    async with ctx.engine.connect() as connection:
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
    connection: AsyncConnection, ctx: ToolContext, name: str, but: UUID | None
) -> None:
    if await _taken(connection, ctx, _voice, name, but):
        raise ToolFailure(
            "conflict",
            f"A voice agent named {name!r} already exists in this organization.",
            hint="Choose another name, or change that agent with update_agent.",
        )


async def preview_create_agent(ctx: ToolContext, args: CreateAgentArgs) -> dict[str, Any]:
    async with ctx.engine.connect() as connection:
        await _check_agent_name(connection, ctx, args.name, None)
    return {"action": "Create a voice agent", "agent": args.model_dump()}


async def create_agent(ctx: ToolContext, args: CreateAgentArgs) -> dict[str, Any]:
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
    connection: AsyncConnection, ctx: ToolContext, args: UpdateAgentArgs
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


async def preview_update_agent(ctx: ToolContext, args: UpdateAgentArgs) -> dict[str, Any]:
    async with ctx.engine.connect() as connection:
        plan = await _plan_agent_update(connection, ctx, args)
    return {
        "action": "Change a voice agent",
        "agent": {"id": str(plan.agent.id), "name": plan.agent.name},
        "changes": plan.changes,
    }


async def update_agent(ctx: ToolContext, args: UpdateAgentArgs) -> dict[str, Any]:
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


async def get_analyzers(ctx: ToolContext, args: GetAnalyzersArgs) -> dict[str, Any]:
    async with ctx.engine.connect() as connection:
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


async def _check_analyzer_name(connection: AsyncConnection, ctx: ToolContext, name: str) -> None:
    if await _taken(connection, ctx, _analyzer, name):
        raise ToolFailure(
            "conflict",
            f"An analyzer named {name!r} already exists in this organization.",
            hint="Choose another name, or use the existing analyzer.",
        )


async def preview_create_analyzer(ctx: ToolContext, args: CreateAnalyzerArgs) -> dict[str, Any]:
    async with ctx.engine.connect() as connection:
        await _check_analyzer_name(connection, ctx, args.name)
    return {"action": "Create an analyzer", "analyzer": args.model_dump()}


async def create_analyzer(ctx: ToolContext, args: CreateAnalyzerArgs) -> dict[str, Any]:
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
    connection: AsyncConnection, ctx: ToolContext, slot: _Slot, phone_number_id: UUID, agent_id: UUID | None
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
    ctx: ToolContext, slot: _Slot, phone_number_id: UUID, agent_id: UUID | None
) -> dict[str, Any]:
    async with ctx.engine.connect() as connection:
        number, changes = await _plan_slot(connection, ctx, slot, phone_number_id, agent_id)
    return {
        "action": f"Change the {slot.what} of a phone number",
        "phone_number": _number(number),
        "changes": changes,
    }


async def _assign_slot(
    ctx: ToolContext, slot: _Slot, phone_number_id: UUID, agent_id: UUID | None
) -> dict[str, Any]:
    async with ctx.engine.begin() as connection:
        number, changes = await _plan_slot(connection, ctx, slot, phone_number_id, agent_id)
        await connection.execute(
            sa.update(_phone)
            .where(_phone.c.organization_id == ctx.organization_id, _phone.c.id == number.id)
            .values({slot.column: agent_id})
        )
    return {"phone_number": _number(number), "changes": changes}


async def preview_assign_phone_agent(ctx: ToolContext, args: AssignPhoneAgentArgs) -> dict[str, Any]:
    return await _preview_slot(ctx, _VOICE_SLOT, args.phone_number_id, args.agent_id)


async def assign_phone_agent(ctx: ToolContext, args: AssignPhoneAgentArgs) -> dict[str, Any]:
    return await _assign_slot(ctx, _VOICE_SLOT, args.phone_number_id, args.agent_id)


async def preview_assign_phone_text_agent(ctx: ToolContext, args: AssignPhoneTextAgentArgs) -> dict[str, Any]:
    return await _preview_slot(ctx, _TEXT_SLOT, args.phone_number_id, args.text_agent_id)


async def assign_phone_text_agent(ctx: ToolContext, args: AssignPhoneTextAgentArgs) -> dict[str, Any]:
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
    connection: AsyncConnection, ctx: ToolContext, args: AssignPhoneAnalyzersArgs
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


async def preview_assign_phone_analyzers(ctx: ToolContext, args: AssignPhoneAnalyzersArgs) -> dict[str, Any]:
    async with ctx.engine.connect() as connection:
        plan = await _plan_analyzers(connection, ctx, args)
    return {
        "action": "Change the analyzers of a phone number",
        "phone_number": _number(plan.number),
        "changes": plan.changes(),
    }


async def assign_phone_analyzers(ctx: ToolContext, args: AssignPhoneAnalyzersArgs) -> dict[str, Any]:
    async with ctx.engine.begin() as connection:
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
