"""Page context (SPEC §6): which entity the user is looking at, in their organization only.

The client sends the route of the host page it sits on and, when it knows it, the entity type and
id. With only the route, the type and id are read from the route itself.
"""

from __future__ import annotations

import re

from vernis.services.persistence import MemberInfo
from vernis.services.prompt import CurrentPage
from vernis.ws.protocol import PageContext

__all__ = ["ENTITY_TYPES", "entity_from_route", "resolve_route_only"]

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


async def resolve_route_only(page: PageContext, member: MemberInfo) -> CurrentPage | None:
    """The resolver before the CRM exists: the route, no entity name (so no entity is claimed)."""
    return normalize(page)
