"""Page context for the CRM (SPEC §6): its routes, and the names of the ten entity types it shows.

Every lookup is scoped to the member's organization: another organization's entity, like an unknown
one, resolves to nothing. A member who may not see a kind of entity gets nothing about it either.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from vernis.store.models import table_of
from vernis.tools import Entity, EntityResolver, PagePattern
from vernis_crm import models as crm
from vernis_crm.resources import CrmContext

__all__ = ["ENTITY_TYPES", "PAGES", "RESOLVERS"]

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

# The host's routes (plural segments, as host products name their pages) -> entity type.
PAGES = tuple(
    PagePattern(f"/{segment}/{{id}}", entity_type)
    for segment, entity_type in (
        ("contacts", "contact"),
        ("calls", "call"),
        ("plans", "plan"),
        ("plan-templates", "plan_template"),
        ("plan_templates", "plan_template"),
        ("templates", "plan_template"),
        ("agents", "agent"),
        ("voice-agents", "agent"),
        ("tasks", "task"),
        ("phones", "phone"),
        ("phone-numbers", "phone"),
        ("knowledge", "knowledge"),
        ("analyzers", "analyzer"),
        ("text-agents", "text_agent"),
        ("text_agents", "text_agent"),
    )
)

Query = Callable[[uuid.UUID, uuid.UUID], sa.Select[Any]]


def _person(row: Any) -> str:
    return " ".join(part for part in (row.first_name, row.last_name) if part) or "an unnamed contact"


def _named(table: sa.Table, column: str = "name") -> Query:
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


# Entity type -> (its query, the permission needed to see it).
_QUERIES: dict[str, tuple[Query, str]] = {
    "contact": (_contact_query, "contact:view"),
    "call": (_call_query, "call:view"),
    "plan": (_plan_query, "plan_template:list"),
    "plan_template": (_named(_template), "plan_template:list"),
    "agent": (_named(_agent), "agent:list"),
    "task": (_named(_task, "title"), "task:list"),
    "phone": (_phone_query, "phone:list"),
    "knowledge": (_named(_knowledge, "title"), "agent:list"),
    "analyzer": (_named(_analyzer), "analyzer:list"),
    "text_agent": (_named(_text_agent), "agent:list"),
}
ENTITY_TYPES = frozenset(_QUERIES)


def _resolver(entity_type: str) -> EntityResolver:
    query, permission = _QUERIES[entity_type]

    async def resolve(ctx: CrmContext, entity_id: str) -> Entity | None:
        if permission not in ctx.permissions:
            return None
        try:
            key = uuid.UUID(entity_id)
        except ValueError:
            return None
        async with ctx.resources.connect() as connection:
            row = (await connection.execute(query(key, ctx.organization_id))).first()
        return None if row is None else Entity(_label(entity_type, row))

    return resolve


RESOLVERS: dict[str, EntityResolver] = {entity_type: _resolver(entity_type) for entity_type in _QUERIES}
