"""Page context (SPEC §6), the core's part: routes to entities by the configuration's then the
toolkits' patterns, each entity named by the resolver of the toolkit that owns its type, with that
toolkit's resources and as the member; whatever goes wrong only leaves the entity out."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from vernis.identity.members import MemberInfo
from vernis.pages import RESOLVE_TIMEOUT, CurrentPage, PageContextResolver, PageRequest
from vernis.tools import Entity, PagePattern, ToolContext, Toolkit
from vernis.tools.catalog import Catalog

MEMBER = MemberInfo(
    id=uuid.uuid4(),
    organization_id=uuid.uuid4(),
    external_id="u-7",
    organization_external_id="org-1",
    organization_name="Initech",
    organization_timezone="UTC",
    email=None,
    name="Peter Gibbons",
    role="agent",
    removed=False,
)

TICKETS = {"T-1": Entity("Printer on fire", "open, urgent"), "T-2": Entity("Stapler missing")}


class Helpdesk:
    """The resources of the test's helpdesk toolkit: which entities its resolvers were asked for, and how."""

    def __init__(self) -> None:
        self.asked: list[tuple[ToolContext[Any], str]] = []
        self.resolving = asyncio.Event()


def _toolkits(
    *, ticket_delay: float = 0.0, pages: Sequence[PagePattern] = ()
) -> tuple[Catalog, dict[str, Any]]:
    """A helpdesk toolkit resolving tickets (and an `incident` type with no route of its own), a
    `broken` one whose resolver always raises, and their resources; `pages` as the configuration's."""
    helpdesk: Toolkit[Helpdesk] = Toolkit(
        "helpdesk",
        pages=[PagePattern("/tickets/{id}", "ticket"), PagePattern("/queues/{queue}/tickets/{id}", "ticket")],
    )

    @helpdesk.resolver("ticket")
    async def ticket(ctx: ToolContext[Helpdesk], entity_id: str) -> Entity | None:
        ctx.resources.asked.append((ctx, entity_id))
        ctx.resources.resolving.set()
        if ticket_delay:
            await asyncio.sleep(ticket_delay)
        return TICKETS.get(entity_id)

    @helpdesk.resolver("incident")
    async def incident(ctx: ToolContext[Helpdesk], entity_id: str) -> Entity | None:
        ctx.resources.asked.append((ctx, entity_id))
        return Entity(f"Incident {entity_id}")

    broken: Toolkit[str] = Toolkit("broken", pages=[PagePattern("/outages/{id}", "outage")])

    @broken.resolver("outage")
    async def outage(ctx: ToolContext[str], entity_id: str) -> Entity | None:
        raise RuntimeError(f"the {ctx.resources} is down")

    catalog = Catalog([helpdesk, broken], pages=pages)
    return catalog, {"helpdesk": Helpdesk(), "broken": "status API"}


def _resolver(
    *, timeout: float = RESOLVE_TIMEOUT, **options: Any
) -> tuple[PageContextResolver, dict[str, Any]]:
    catalog, resources = _toolkits(**options)
    return PageContextResolver(catalog.pages, catalog.resolvers, resources, timeout=timeout), resources


def _context(permissions: frozenset[str] = frozenset({"ticket:view"})) -> ToolContext[None]:
    return ToolContext(member=MEMBER, permissions=permissions, conversation_id=uuid.uuid4(), resources=None)


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ("/tickets/T-1", ("ticket", "T-1")),
        ("/tickets/T-1/", ("ticket", "T-1")),
        ("/tickets/T-1?tab=history#reply", ("ticket", "T-1")),
        ("/TICKETS/T-1", ("ticket", "T-1")),
        ("/queues/billing/tickets/T-2", ("ticket", "T-2")),
        ("/tickets", None),
        ("/tickets/T-1/edit", None),
        ("/queues/tickets/T-2", None),
        ("/app/tickets/T-1", None),
        ("/tickets/..", None),
        ("/", None),
    ],
)
def test_a_route_names_the_entity_of_the_pattern_it_matches(
    route: str, expected: tuple[str, str] | None
) -> None:
    """A route matching a pattern whole (query, fragment and a trailing slash ignored, any case) names
    its entity type and the id in `{id}`; any other route names none."""
    pages, _ = _resolver()
    assert pages.entity_from_route(route) == expected


def test_the_configurations_routes_come_before_the_toolkits() -> None:
    """A route both the configuration and a toolkit declare is the configuration's; the others stay
    the toolkits'."""
    pages, _ = _resolver(pages=[PagePattern("/tickets/{id}", "incident")])
    assert pages.entity_from_route("/tickets/T-1") == ("incident", "T-1")
    assert pages.entity_from_route("/queues/billing/tickets/T-1") == ("ticket", "T-1")


async def test_the_entity_is_named_by_its_toolkit_with_its_resources_as_the_member() -> None:
    """The resolver of the toolkit owning the type names the entity; it receives that toolkit's own
    resources and the member's context (member, permissions, conversation, token)."""
    pages, resources = _resolver()
    context = _context()
    page = await pages.resolve(PageRequest(route="/tickets/T-1"), context)
    assert page == CurrentPage(
        route="/tickets/T-1",
        entity_type="ticket",
        entity_id="T-1",
        entity_name="Printer on fire",
        entity_summary="open, urgent",
    )
    [(seen, entity_id)] = resources["helpdesk"].asked
    assert entity_id == "T-1"
    assert seen.resources is resources["helpdesk"]
    assert (seen.member, seen.permissions, seen.conversation_id, seen.message_id) == (
        MEMBER,
        context.permissions,
        context.conversation_id,
        context.message_id,
    )
    assert context.resources is None


async def test_the_client_entity_wins_and_an_entity_without_summary_has_none() -> None:
    """The entity type and id the client sends are used whatever the route; an entity named without a
    summary has none."""
    pages, _ = _resolver()
    page = await pages.resolve(
        PageRequest(route="/tickets/T-1", entity_type="ticket", entity_id="T-2"), _context()
    )
    assert (page.entity_type, page.entity_id, page.entity_name, page.entity_summary) == (
        "ticket",
        "T-2",
        "Stapler missing",
        None,
    )
    only_type = await pages.resolve(PageRequest(route="/tickets/T-1", entity_type="incident"), _context())
    assert (only_type.entity_type, only_type.entity_id, only_type.entity_name) == (
        "incident",
        "T-1",
        "Incident T-1",
    )


async def test_an_entity_type_nobody_resolves_is_dropped() -> None:
    """A type no toolkit resolves, whether the client sends it or a configured route names it, leaves
    only the route, and no resolver is asked."""
    pages, resources = _resolver(pages=[PagePattern("/invoices/{id}", "invoice")])
    sent = await pages.resolve(
        PageRequest(route="/billing", entity_type="invoice", entity_id="I-1"), _context()
    )
    assert sent == CurrentPage(route="/billing")
    routed = await pages.resolve(PageRequest(route="/invoices/I-1"), _context())
    assert routed == CurrentPage(route="/invoices/I-1")
    assert resources["helpdesk"].asked == []


async def test_an_unknown_or_malformed_id_is_left_out() -> None:
    """An id the resolver does not know leaves only the route; an id that is no id at all is dropped
    before any resolver sees it."""
    pages, resources = _resolver()
    unknown = await pages.resolve(PageRequest(route="/tickets/T-404"), _context())
    assert unknown == CurrentPage(route="/tickets/T-404")
    for entity_id in ("../../etc/passwd", "", "a b", "x" * 200):
        asked = PageRequest(route="/home", entity_type="ticket", entity_id=entity_id)
        assert await pages.resolve(asked, _context()) == CurrentPage(route="/home")
    assert [entity_id for _, entity_id in resources["helpdesk"].asked] == ["T-404"]


async def test_a_resolver_that_fails_only_leaves_the_entity_out(caplog: pytest.LogCaptureFixture) -> None:
    """A resolver raising gives the page without its entity, logged as a warning or worse, and no error."""
    pages, _ = _resolver()
    page = await pages.resolve(PageRequest(route="/outages/O-1"), _context())
    assert page == CurrentPage(route="/outages/O-1")
    assert any(
        record.levelno >= logging.WARNING and "outage" in record.getMessage() for record in caplog.records
    )


async def test_a_resolver_slower_than_the_timeout_only_leaves_the_entity_out() -> None:
    """A resolver taking longer than the timeout is given up on at the timeout; the page goes on
    without its entity."""
    pages, _ = _resolver(ticket_delay=30, timeout=0.05)
    started = time.monotonic()
    page = await pages.resolve(PageRequest(route="/tickets/T-1"), _context())
    assert time.monotonic() - started < 5
    assert page == CurrentPage(route="/tickets/T-1")


def test_the_default_timeout_is_two_seconds() -> None:
    """Resolvers get 2 s unless told otherwise (SPEC §6)."""
    assert RESOLVE_TIMEOUT == 2.0


async def test_cancelling_the_answer_cancels_the_resolver() -> None:
    """Cancellation (stop, shutdown) is never swallowed: it reaches the caller of `resolve`."""
    pages, resources = _resolver(ticket_delay=30)
    task = asyncio.create_task(pages.resolve(PageRequest(route="/tickets/T-1"), _context()))
    await resources["helpdesk"].resolving.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
