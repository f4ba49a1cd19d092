"""Page context (SPEC §6): which entity the user is looking at, in their organization only.

The client sends the route of the host page it sits on and, when it knows it, the entity type and
id. With only the route, the type and id are read from the route itself.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.db import crm
from vernis.db.models import table_of
from vernis.services.persistence import MemberInfo
from vernis.services.prompt import CurrentPage
from vernis.ws.protocol import PageContext

__all__ = ["ENTITY_TYPES", "entity_from_route", "entity_name", "normalize", "page_resolver"]

ENTITY_TYPES = frozenset(
    {
        "contact",
        "call",
        "plan",
        "plan_template",
        "agent",
        "task",
        "phone",
        "knowledge",
        "analyzer",
        "text_agent",
    }
)

# First path segment (plural, as host products name their pages) → entity type.
_ROUTE_SEGMENTS = {
    "contacts": "contact",
    "calls": "call",
    "plans": "plan",
    "plan-templates": "plan_template",
    "plan_templates": "plan_template",
    "templates": "plan_template",
    "agents": "agent",
    "voice-agents": "agent",
    "tasks": "task",
    "phones": "phone",
    "phone-numbers": "phone",
    "knowledge": "knowledge",
    "analyzers": "analyzer",
    "text-agents": "text_agent",
    "text_agents": "text_agent",
}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def entity_from_route(route: str) -> tuple[str, str] | None:
    """`/contacts/abc-123` → ("contact", "abc-123"); None when the route names no entity."""
    path = route.split("?", 1)[0].split("#", 1)[0]
    segments = [segment for segment in path.split("/") if segment]
    for index in range(len(segments) - 1):
        entity_type = _ROUTE_SEGMENTS.get(segments[index].lower())
        if entity_type is not None and _ID.match(segments[index + 1]):
            return entity_type, segments[index + 1]
    return None


def normalize(page: PageContext) -> CurrentPage:
    """The page with its entity type and id filled in from the route where the client left them out."""
    entity_type, entity_id = page.entity_type, page.entity_id
    if entity_type is None or entity_id is None:
        found = entity_from_route(page.route)
        if found is not None:
            entity_type, entity_id = entity_type or found[0], entity_id or found[1]
    if entity_type not in ENTITY_TYPES:
        entity_type, entity_id = None, None
    return CurrentPage(route=page.route, entity_type=entity_type, entity_id=entity_id)


_contact = table_of(crm.Contact)
_call = table_of(crm.Call)
_plan = table_of(crm.Plan)
_template = table_of(crm.PlanTemplate)
_agent = table_of(crm.VoiceAgent)
_task = table_of(crm.Task)
_phone = table_of(crm.PhoneNumber)
_knowledge = table_of(crm.KnowledgeItem)
_analyzer = table_of(crm.Analyzer)
_text_agent = table_of(crm.TextAgent)


def _person(row: Any) -> str:
    return " ".join(part for part in (row.first_name, row.last_name) if part) or "an unnamed contact"


def _named(table: sa.Table, column: str = "name") -> Callable[[uuid.UUID, uuid.UUID], sa.Select[Any]]:
    def query(entity_id: uuid.UUID, organization_id: uuid.UUID) -> sa.Select[Any]:
        return sa.select(table.c[column].label("label")).where(
            table.c.id == entity_id, table.c.organization_id == organization_id
        )

    return query


def _contact_query(entity_id: uuid.UUID, organization_id: uuid.UUID) -> sa.Select[Any]:
    return sa.select(_contact.c.first_name, _contact.c.last_name, _contact.c.company).where(
        _contact.c.id == entity_id, _contact.c.organization_id == organization_id
    )


def _call_query(entity_id: uuid.UUID, organization_id: uuid.UUID) -> sa.Select[Any]:
    return (
        sa.select(
            _call.c.direction,
            _call.c.started_at,
            _call.c.contact_number,
            _contact.c.first_name,
            _contact.c.last_name,
        )
        .select_from(_call.outerjoin(_contact, _contact.c.id == _call.c.contact_id))
        .where(_call.c.id == entity_id, _call.c.organization_id == organization_id)
    )


def _plan_query(entity_id: uuid.UUID, organization_id: uuid.UUID) -> sa.Select[Any]:
    return (
        sa.select(_template.c.name, _contact.c.first_name, _contact.c.last_name)
        .select_from(
            _plan.join(_template, _template.c.id == _plan.c.template_id).join(
                _contact, _contact.c.id == _plan.c.contact_id
            )
        )
        .where(_plan.c.id == entity_id, _plan.c.organization_id == organization_id)
    )


def _phone_query(entity_id: uuid.UUID, organization_id: uuid.UUID) -> sa.Select[Any]:
    return sa.select(_phone.c.label, _phone.c.number).where(
        _phone.c.id == entity_id, _phone.c.organization_id == organization_id
    )


def _label(entity_type: str, row: Any) -> str:
    if entity_type == "contact":
        return _person(row) + (f" ({row.company})" if row.company else "")
    if entity_type == "call":
        who = _person(row) if row.first_name else (row.contact_number or "an unknown number")
        return f"{row.direction} call with {who} on {row.started_at:%Y-%m-%d %H:%M} UTC"
    if entity_type == "plan":
        return f"{row.name} for {_person(row)}"
    if entity_type == "phone":
        return f"{row.label} ({row.number})"
    return str(row.label)


_QUERIES: dict[str, Callable[[uuid.UUID, uuid.UUID], sa.Select[Any]]] = {
    "contact": _contact_query,
    "call": _call_query,
    "plan": _plan_query,
    "plan_template": _named(_template),
    "agent": _named(_agent),
    "task": _named(_task, "title"),
    "phone": _phone_query,
    "knowledge": _named(_knowledge, "title"),
    "analyzer": _named(_analyzer),
    "text_agent": _named(_text_agent),
}


async def entity_name(
    engine: AsyncEngine, entity_type: str, entity_id: str, organization_id: uuid.UUID
) -> str | None:
    """The display name of an entity in the organization; None when it is unknown or someone else's."""
    query = _QUERIES.get(entity_type)
    try:
        key = uuid.UUID(entity_id)
    except ValueError:
        return None
    if query is None:
        return None
    async with engine.connect() as connection:
        row = (await connection.execute(query(key, organization_id))).first()
    return None if row is None else _label(entity_type, row)


def page_resolver(engine: AsyncEngine) -> Callable[[PageContext, MemberInfo], Awaitable[CurrentPage | None]]:
    """The resolver the app uses: route and entity, the entity named only if it is the member's
    organization's (a foreign or unknown entity is left out, without error)."""

    async def resolve(page: PageContext, member: MemberInfo) -> CurrentPage | None:
        current = normalize(page)
        if current.entity_type is None or current.entity_id is None:
            return current
        name = await entity_name(engine, current.entity_type, current.entity_id, member.organization_id)
        if name is None:
            return CurrentPage(route=current.route)
        return CurrentPage(current.route, current.entity_type, current.entity_id, name)

    return resolve
