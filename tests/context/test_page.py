"""Page context (SPEC §6): routes to entities, entity names in the member's organization only."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.context.page import entity_from_route, entity_name, page_resolver
from vernis.db.seed import SeedResult
from vernis.services.persistence import ConversationStore
from vernis.ws.protocol import PageContext


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ("/contacts/abc-123", ("contact", "abc-123")),
        ("/app/calls/9f1c?tab=notes", ("call", "9f1c")),
        ("/plans/p1", ("plan", "p1")),
        ("/plan-templates/t1", ("plan_template", "t1")),
        ("/agents/a1", ("agent", "a1")),
        ("/tasks/t2#comments", ("task", "t2")),
        ("/phone-numbers/n1", ("phone", "n1")),
        ("/knowledge/k1", ("knowledge", "k1")),
        ("/analyzers/z1", ("analyzer", "z1")),
        ("/text-agents/x1", ("text_agent", "x1")),
        ("/contacts", None),
        ("/settings/profile", None),
    ],
)
def test_routes_map_to_entity_types(route: str, expected: tuple[str, str] | None) -> None:
    """A detail route names its entity type and id; list and other pages name none."""
    assert entity_from_route(route) == expected


ACME_ENTITIES = [
    ("contact", "acme:contact:Jane Cooper", "Jane Cooper"),
    ("call", "acme:call:Jane Cooper", "call with Jane Cooper on"),
    ("plan", "acme:plan:Jane Cooper", "for Jane Cooper"),
    ("plan_template", "acme:plan_template:Recall reminder", "Recall reminder"),
    ("agent", "acme:voice_agent:Front Desk Ava", "Front Desk Ava"),
    (
        "task",
        "acme:task:Call Jane Cooper about her crown fitting",
        "Call Jane Cooper about her crown fitting",
    ),
    ("phone", "acme:phone_number:Main line", "Main line (+"),
    ("knowledge", "acme:knowledge_item:Office hours", "Office hours"),
    ("analyzer", "acme:analyzer:Call quality", "Call quality"),
    ("text_agent", "acme:text_agent:SMS Concierge", "SMS Concierge"),
]


@pytest.mark.parametrize(("entity_type", "key", "fragment"), ACME_ENTITIES)
async def test_every_entity_type_is_named(
    engine: AsyncEngine, seeded: SeedResult, entity_type: str, key: str, fragment: str
) -> None:
    """Each of the ten entity types resolves to its display name for a member of its organization."""
    name = await entity_name(engine, entity_type, str(seeded.entities[key]), seeded.organizations["acme"])
    assert name is not None
    assert fragment in name


async def test_foreign_unknown_and_malformed_entities_are_left_out(
    engine: AsyncEngine, seeded: SeedResult
) -> None:
    """A Globex entity on an Acme member's page, an unknown id and a non-UUID id give no name, and no error."""
    acme = seeded.organizations["acme"]
    store = ConversationStore(engine)
    member = await store.get_member_by_email("member@acme.test")
    assert member is not None
    resolve = page_resolver(engine)
    globex_contact = str(seeded.entities["globex:contact:Jane Cooper"])
    for entity_id in (globex_contact, "00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        assert await entity_name(engine, "contact", entity_id, acme) is None
        page = await resolve(PageContext(route=f"/contacts/{entity_id}"), member)
        assert page is not None
        assert (page.route, page.entity_type, page.entity_name) == (f"/contacts/{entity_id}", None, None)
    own = await resolve(
        PageContext(
            route="/x", entity_type="contact", entity_id=str(seeded.entities["acme:contact:Jane Cooper"])
        ),
        member,
    )
    assert own is not None
    assert own.entity_name is not None
    assert own.entity_name.startswith("Jane Cooper")
