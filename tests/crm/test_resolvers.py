"""The CRM's page context (SPEC §6): its routes, and the names of its ten entity types in the member's
organization only, resolved through the core's `PageContextResolver` as Vernis wires it."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import vernis_crm
from tests.fixtures.db import *  # noqa: F403
from vernis.identity.members import MemberInfo
from vernis.identity.service import IdentityService
from vernis.identity.tokens import TokenVerifier
from vernis.pages import CurrentPage, PageContextResolver, PageRequest
from vernis.tools import ToolContext
from vernis.tools.catalog import Catalog
from vernis_crm.demo.seed import SeedResult
from vernis_crm.resolvers import ENTITY_TYPES, PAGES

TEN_TYPES = {
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


def _pages(resources: dict[str, object] | None = None) -> PageContextResolver:
    """Page context from the CRM toolkit alone, as `vernis serve --demo` builds it."""
    catalog = Catalog([vernis_crm.toolkit])
    return PageContextResolver(catalog.pages, catalog.resolvers, resources or {})


async def _context(engine: AsyncEngine, seeded: SeedResult, email: str) -> ToolContext[None]:
    """What an answer of the demo member `email` resolves its page with (the resolver gets the CRM's
    resources from the `PageContextResolver`, not from here)."""
    catalog = Catalog([vernis_crm.toolkit])
    identities = IdentityService(
        TokenVerifier(secret="tests-only-secret-of-at-least-32-bytes"), engine, catalog.roles
    )
    member: MemberInfo | None = await identities.member(seeded.members[email])
    assert member is not None
    return ToolContext(
        member=member,
        permissions=catalog.roles.permissions(member.role),
        conversation_id=uuid.uuid4(),
        resources=None,
    )


def test_the_crm_resolves_its_ten_entity_types_and_routes_each() -> None:
    """The toolkit resolves exactly the ten entity types of SPEC §6, and a route names each of them."""
    assert set(vernis_crm.toolkit.resolvers) == set(ENTITY_TYPES) == TEN_TYPES
    assert {page.entity_type for page in vernis_crm.toolkit.pages} == TEN_TYPES
    assert list(vernis_crm.toolkit.pages) == list(PAGES)


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ("/contacts/abc-123", ("contact", "abc-123")),
        ("/calls/9f1c?tab=notes", ("call", "9f1c")),
        ("/plans/p1", ("plan", "p1")),
        ("/plan-templates/t1", ("plan_template", "t1")),
        ("/plan_templates/t1", ("plan_template", "t1")),
        ("/templates/t1", ("plan_template", "t1")),
        ("/agents/a1", ("agent", "a1")),
        ("/voice-agents/a1", ("agent", "a1")),
        ("/tasks/t2#comments", ("task", "t2")),
        ("/phones/n1", ("phone", "n1")),
        ("/phone-numbers/n1/", ("phone", "n1")),
        ("/knowledge/k1", ("knowledge", "k1")),
        ("/analyzers/z1", ("analyzer", "z1")),
        ("/text-agents/x1", ("text_agent", "x1")),
        ("/text_agents/x1", ("text_agent", "x1")),
        ("/Contacts/ABC", ("contact", "ABC")),
        ("/contacts", None),
        ("/contacts/", None),
        ("/settings/profile", None),
    ],
)
def test_the_crm_routes_map_to_its_entity_types(route: str, expected: tuple[str, str] | None) -> None:
    """A CRM detail route names its entity type and id (query and fragment ignored); list and other
    pages name none."""
    assert _pages().entity_from_route(route) == expected


ACME_ENTITIES = [
    ("contact", "contacts", "acme:contact:Jane Cooper", "Jane Cooper"),
    ("call", "calls", "acme:call:Jane Cooper", "call with Jane Cooper on"),
    ("plan", "plans", "acme:plan:Jane Cooper", "for Jane Cooper"),
    ("plan_template", "plan-templates", "acme:plan_template:Recall reminder", "Recall reminder"),
    ("agent", "agents", "acme:voice_agent:Front Desk Ava", "Front Desk Ava"),
    (
        "task",
        "tasks",
        "acme:task:Call Jane Cooper about her crown fitting",
        "Call Jane Cooper about her crown fitting",
    ),
    ("phone", "phone-numbers", "acme:phone_number:Main line", "Main line (+"),
    ("knowledge", "knowledge", "acme:knowledge_item:Office hours", "Office hours"),
    ("analyzer", "analyzers", "acme:analyzer:Call quality", "Call quality"),
    ("text_agent", "text-agents", "acme:text_agent:SMS Concierge", "SMS Concierge"),
]


@pytest.mark.parametrize(("entity_type", "segment", "key", "fragment"), ACME_ENTITIES)
async def test_every_entity_type_is_named_from_its_route(
    engine: AsyncEngine, seeded: SeedResult, entity_type: str, segment: str, key: str, fragment: str
) -> None:
    """Each of the ten entity types, on its route alone, resolves to its display name for a member of
    its organization."""
    pages = _pages({"crm": engine})
    entity_id = str(seeded.entities[key])
    context = await _context(engine, seeded, "member@acme.test")
    page = await pages.resolve(PageRequest(route=f"/{segment}/{entity_id}"), context)
    assert (page.entity_type, page.entity_id) == (entity_type, entity_id)
    assert page.entity_name is not None
    assert fragment in page.entity_name


async def test_an_entity_named_by_the_client_is_resolved_whatever_the_route(
    engine: AsyncEngine, seeded: SeedResult
) -> None:
    """The entity type and id the client sends win over the route: Jane Cooper on an unrelated page."""
    jane = str(seeded.entities["acme:contact:Jane Cooper"])
    context = await _context(engine, seeded, "member@acme.test")
    page = await _pages({"crm": engine}).resolve(
        PageRequest(route="/x", entity_type="contact", entity_id=jane), context
    )
    assert (page.route, page.entity_type, page.entity_id) == ("/x", "contact", jane)
    assert page.entity_name is not None
    assert page.entity_name.startswith("Jane Cooper")


async def test_unknown_and_malformed_ids_are_left_out(engine: AsyncEngine, seeded: SeedResult) -> None:
    """An unknown id and a non-UUID id, from the route or sent by the client, give no entity and no
    error: the page is the route alone."""
    pages = _pages({"crm": engine})
    context = await _context(engine, seeded, "member@acme.test")
    for entity_id in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        route = f"/contacts/{entity_id}"
        assert await pages.resolve(PageRequest(route=route), context) == CurrentPage(route=route)
        asked = PageRequest(route="/x", entity_type="contact", entity_id=entity_id)
        assert await pages.resolve(asked, context) == CurrentPage(route="/x")


GLOBEX_ENTITIES = [
    ("contact", "globex:contact:Jane Cooper"),
    ("call", "globex:call:Jane Cooper"),
    ("plan", "globex:plan:Jane Cooper"),
    ("plan_template", "globex:plan_template:Quote follow-up"),
    ("agent", "globex:voice_agent:Globex Reception"),
    ("task", "globex:task:Send Jane Cooper the renewal quote"),
    ("phone", "globex:phone_number:Zentrale"),
    ("knowledge", "globex:knowledge_item:Returns"),
    ("analyzer", "globex:analyzer:Lead qualification"),
    ("text_agent", "globex:text_agent:Globex Orders"),
]


@pytest.mark.parametrize(("entity_type", "key"), GLOBEX_ENTITIES)
async def test_another_organizations_entity_is_left_out(
    engine: AsyncEngine, seeded: SeedResult, entity_type: str, key: str
) -> None:
    """A Globex entity of each type on an Acme owner's page gives no name (as if unknown); the Globex
    owner gets its name."""
    pages = _pages({"crm": engine})
    asked = PageRequest(route="/x", entity_type=entity_type, entity_id=str(seeded.entities[key]))
    acme = await _context(engine, seeded, "owner@acme.test")
    assert await pages.resolve(asked, acme) == CurrentPage(route="/x")
    globex = await _context(engine, seeded, "owner@globex.test")
    assert (await pages.resolve(asked, globex)).entity_name


async def test_a_member_without_the_permission_gets_no_name(engine: AsyncEngine, seeded: SeedResult) -> None:
    """A member who may not view contacts (or calls) gets nothing about the contact (or call) on the
    page, though it is in their organization."""
    pages = _pages({"crm": engine})
    context = await _context(engine, seeded, "viewer@acme.test")
    jane = f"/contacts/{seeded.entities['acme:contact:Jane Cooper']}"
    call = f"/calls/{seeded.entities['acme:call:Jane Cooper']}"
    assert (await pages.resolve(PageRequest(route=jane), context)).entity_name is not None
    assert (await pages.resolve(PageRequest(route=call), context)).entity_name is not None
    without = dataclasses.replace(context, permissions=context.permissions - {"contact:view", "call:view"})
    assert await pages.resolve(PageRequest(route=jane), without) == CurrentPage(route=jane)
    assert await pages.resolve(PageRequest(route=call), without) == CurrentPage(route=call)
