"""The helpdesk toolkit through the real `ToolRunner`, against its API on a real uvicorn, as members made from tokens."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.helpdesk.support import Desk, HelpdeskApi, Recorder, data, error, host_token, start_desk
from tests.utils import run_server
from vernis.pages import PageContextResolver, PageRequest
from vernis.tools import Entity, ToolkitError, load_toolkits
from vernis.tools.catalog import Catalog
from vernis_helpdesk import toolkit
from vernis_helpdesk.api import create_api

VIEWER = {"sub": "viewer-7", "role": "viewer"}


async def api_ticket(api: HelpdeskApi, ticket_id: str) -> dict[str, Any]:
    """The ticket as the API holds it, read with an agent's token."""
    async with httpx.AsyncClient(base_url=api.url) as client:
        response = await client.get(
            f"/tickets/{ticket_id}", headers={"Authorization": f"Bearer {host_token()}"}
        )
    assert response.status_code == 200
    ticket: dict[str, Any] = response.json()
    return ticket


def test_is_installed_under_its_entry_point_name() -> None:
    """`[[toolkits]] name = "helpdesk"` loads this very toolkit, with its four tools."""
    (loaded,) = load_toolkits(["helpdesk"])
    assert loaded is toolkit
    declared = {t.name: (t.permission, t.writes, t.category) for t in toolkit.tools}
    assert declared == {
        "find_tickets": ("ticket:view", False, "Tickets"),
        "get_ticket": ("ticket:view", False, "Tickets"),
        "set_ticket_status": ("ticket:update", True, "Tickets"),
        "add_ticket_comment": ("ticket:update", True, "Tickets"),
    }


def test_roles_persona_and_quick_actions() -> None:
    """Agents, admins and owners get every tool, viewers the reads; the persona and quick actions come along."""
    catalog = Catalog([toolkit], assistant_name="Ada")
    by_role = catalog.tools_by_role()
    writes = ["find_tickets", "get_ticket", "set_ticket_status", "add_ticket_comment"]
    assert by_role["agent"] == by_role["admin"] == by_role["owner"] == writes
    assert by_role["viewer"] == ["find_tickets", "get_ticket"]
    assert by_role["member"] == []
    assert catalog.persona.startswith("You are Ada, the assistant built into this helpdesk.")
    viewer = catalog.roles.permissions("viewer")
    assert [a.label for a in catalog.quick_actions_for(viewer, None)] == ["My open tickets"]
    assert [a.label for a in catalog.quick_actions_for(viewer, "ticket")] == [
        "My open tickets",
        "Summarize this ticket",
    ]
    assert catalog.quick_actions_for(catalog.roles.permissions("member"), "ticket") == []


def test_arguments_are_described_for_the_model() -> None:
    """Every argument the model sees has a description; ticket ids carry their pattern; writes offer `confirmed`."""
    for declared in toolkit.tools:
        parameters = declared.definition()["function"]["parameters"]
        for name, schema in parameters["properties"].items():
            assert schema.get("description"), (declared.name, name)
        if "ticket_id" in parameters["properties"]:
            assert parameters["properties"]["ticket_id"]["pattern"] == r"^T-\d{1,9}$"
        assert ("confirmed" in parameters["properties"]) is declared.writes


async def test_find_tickets_asks_the_api_as_the_member(desk: Desk, helpdesk_api: HelpdeskApi) -> None:
    """find_tickets returns the API's tickets for this user, fetched with the member's own token."""
    token = host_token()
    found = data(await desk.call(token, "find_tickets", {"status": "open", "assigned_to_me": True}))
    assert [t["id"] for t in found["tickets"]] == ["T-1001", "T-1002"]
    assert found["tickets"][0]["subject"] == "Cannot log in after the password reset"
    assert (found["total"], found["truncated"]) == (2, False)
    assert helpdesk_api.seen == [("GET", "/tickets", f"Bearer {token}")]
    some = data(await desk.call(token, "find_tickets", {"query": "csv", "limit": 1}))
    assert [t["id"] for t in some["tickets"]] == ["T-1003"]


async def test_get_ticket_reads_one_ticket_of_the_members_organization(desk: Desk) -> None:
    """get_ticket accepts ids as models write them; an unknown or foreign ticket is not_found with a hint."""
    ticket = data(await desk.call(host_token(), "get_ticket", {"ticket_id": "t-1002"}))
    assert ticket["subject"] == "Invoice 2291 shows the wrong VAT rate"
    assert ticket["comments"][0]["body"].startswith("Our invoice charges 22% VAT")
    assert data(await desk.call(host_token(), "get_ticket", {"ticket_id": 1002}))["id"] == "T-1002"
    missing = error(await desk.call(host_token(), "get_ticket", {"ticket_id": "T-9999"}))
    assert (missing["code"], missing["hint"]) == ("not_found", "Use find_tickets to find the ticket's id.")
    other = host_token(sub="g-1", org="globex")
    foreign = error(await desk.call(other, "get_ticket", {"ticket_id": "T-1001"}))
    assert foreign["code"] == "not_found"
    assert data(await desk.call(other, "get_ticket", {"ticket_id": "T-1006"}))["id"] == "T-1006"


async def test_bad_arguments_never_reach_the_api(desk: Desk, helpdesk_api: HelpdeskApi) -> None:
    """A malformed ticket id or an unknown status is invalid_arguments, and nothing is asked of the API."""
    token = host_token()
    assert error(await desk.call(token, "get_ticket", {"ticket_id": "ABC"}))["code"] == "invalid_arguments"
    bad = error(await desk.call(token, "set_ticket_status", {"ticket_id": "T-1001", "status": "closed"}))
    assert bad["code"] == "invalid_arguments"
    assert error(await desk.call(token, "find_tickets", {"limit": 500}))["code"] == "invalid_arguments"
    assert helpdesk_api.seen == []


async def test_set_ticket_status_previews_then_writes_after_approval(
    desk: Desk, helpdesk_api: HelpdeskApi, engine: AsyncEngine
) -> None:
    """The preview shows exactly the status change and changes nothing; once approved, the API has the new status."""
    token = host_token()
    preview, envelope = await desk.write(
        token, "set_ticket_status", {"ticket_id": "T-1001", "status": "solved"}
    )
    assert preview.preview == {
        "ticket": {
            "id": "T-1001",
            "subject": "Cannot log in after the password reset",
            "status": "open",
            "priority": "urgent",
        },
        "changes": {"status": {"from": "open", "to": "solved"}},
    }
    assert [call[:2] for call in helpdesk_api.seen] == [
        ("GET", "/tickets/T-1001"),
        ("POST", "/tickets/T-1001/status"),
    ]
    assert envelope == {
        "ok": True,
        "data": {
            "ticket": {
                "id": "T-1001",
                "subject": preview.preview["ticket"]["subject"],
                "status": "solved",
                "priority": "urgent",
            },
            "status": {"from": "open", "to": "solved"},
        },
    }
    ticket = await api_ticket(helpdesk_api, "T-1001")
    assert (ticket["status"], ticket["updated_by"]) == ("solved", "agent-42")
    async with engine.connect() as connection:
        audit = (await connection.execute(sa.text("SELECT tool_name, outcome FROM audit_log"))).all()
    assert [tuple(row) for row in audit] == [("set_ticket_status", "ok")]


async def test_preview_alone_changes_nothing(desk: Desk, helpdesk_api: HelpdeskApi) -> None:
    """A write called without approval only reads the ticket; the API is left as it was."""
    outcome = await desk.call(
        host_token(), "add_ticket_comment", {"ticket_id": "T-1002", "body": "Looking into it"}
    )
    assert outcome.status == "needs_confirmation"
    assert [call[0] for call in helpdesk_api.seen] == ["GET"]
    assert len((await api_ticket(helpdesk_api, "T-1002"))["comments"]) == 1


async def test_a_status_the_ticket_already_has_is_refused_at_preview(
    desk: Desk, helpdesk_api: HelpdeskApi
) -> None:
    """Setting the status a ticket already has is a no_change error, and no approval is asked for."""
    outcome = await desk.call(host_token(), "set_ticket_status", {"ticket_id": "T-1003", "status": "pending"})
    assert error(outcome)["code"] == "no_change"
    assert outcome.confirmation_id is None


async def test_add_ticket_comment_previews_the_comment_then_adds_it(
    desk: Desk, helpdesk_api: HelpdeskApi
) -> None:
    """The preview shows the comment as it will be signed; once approved the API holds it, by this member."""
    token = host_token(name="Alex Agent")
    preview, envelope = await desk.write(
        token, "add_ticket_comment", {"ticket_id": "T-1002", "body": "We corrected the VAT rate."}
    )
    assert preview.preview["changes"] == {
        "comments": {
            "add": {"author": "agent-42", "author_name": "Alex Agent", "body": "We corrected the VAT rate."}
        }
    }
    assert envelope["ok"] is True, envelope
    comment = envelope["data"]["comment"]
    assert (comment["author"], comment["author_name"], comment["body"]) == (
        "agent-42",
        "Alex Agent",
        "We corrected the VAT rate.",
    )
    comments = (await api_ticket(helpdesk_api, "T-1002"))["comments"]
    assert comments[-1]["body"] == "We corrected the VAT rate."


async def test_a_viewer_is_offered_reads_only_and_cannot_write(desk: Desk, helpdesk_api: HelpdeskApi) -> None:
    """A viewer's toolset has only the reads; a write call is forbidden by Vernis and never reaches the API."""
    token = host_token(**VIEWER)
    runner = await desk.runner(token)
    assert set(runner.toolset.tools) == {"find_tickets", "get_ticket"}
    assert data(await desk.call(token, "find_tickets"))["total"] == 5
    refused = error(await desk.call(token, "set_ticket_status", {"ticket_id": "T-1001", "status": "solved"}))
    assert refused["code"] == "forbidden"
    assert [call[:2] for call in helpdesk_api.seen] == [("GET", "/tickets")]


async def test_the_hosts_api_has_the_last_word(engine: AsyncEngine, helpdesk_api: HelpdeskApi) -> None:
    """Even when Vernis's configuration lets viewers write, the host's API refuses them: the write ends forbidden."""
    roles = {"viewer": ["assistant:use", "ticket:view", "ticket:update"]}
    desk = await start_desk(engine, helpdesk_api.url, roles=roles)
    try:
        preview, envelope = await desk.write(
            host_token(**VIEWER), "set_ticket_status", {"ticket_id": "T-1001", "status": "solved"}
        )
    finally:
        await desk.catalog.stop()
    assert preview.preview["changes"] == {"status": {"from": "open", "to": "solved"}}
    assert envelope["ok"] is False
    assert envelope["error"]["code"] == "forbidden"
    assert (await api_ticket(helpdesk_api, "T-1001"))["status"] == "open"


async def test_a_token_the_api_refuses_is_forbidden(engine: AsyncEngine) -> None:
    """An API that does not accept the member's token (another key) makes every call a forbidden failure."""
    api = Recorder(create_api("another-secret-than-the-one-vernis-verifies-with"))
    async with run_server(api) as server:
        desk = await start_desk(engine, f"http://127.0.0.1:{server.config.port}")
        try:
            refused = error(await desk.call(host_token(), "find_tickets"))
        finally:
            await desk.catalog.stop()
    assert refused["code"] == "forbidden"
    assert refused["retryable"] is False
    assert "sign-in" in refused["message"]


async def test_names_the_ticket_on_its_page(desk: Desk) -> None:
    """On /tickets/{id} the resolver names the member's ticket; a foreign, unknown or malformed one, or a member without ticket:view, gets nothing."""
    pages = PageContextResolver(desk.catalog.pages, desk.catalog.resolvers, desk.catalog.registry.resources)
    context = await desk.context(host_token())
    page = await pages.resolve(PageRequest("/tickets/T-1001"), context)
    assert (page.entity_type, page.entity_id, page.entity_name) == (
        "ticket",
        "T-1001",
        "Cannot log in after the password reset",
    )
    assert page.entity_summary == (
        "open, urgent priority, requested by Dana Whitfield <dana@northwind.example>; assigned to agent-42"
    )
    _, resolve = desk.catalog.resolvers["ticket"]
    client = desk.catalog.registry.resources["helpdesk"]
    as_member = dataclasses.replace(context, resources=client)
    assert await resolve(as_member, "T-1004") == Entity(
        "Add a second administrator to our account",
        "open, low priority, requested by Sam Okafor <sam@okafor.example>; assigned to agent-7",
    )
    assert await resolve(as_member, "T-9999") is None
    assert await resolve(as_member, "../admin") is None
    assert (
        await resolve(dataclasses.replace(as_member, permissions=frozenset({"assistant:use"})), "T-1001")
        is None
    )
    foreign = await desk.context(host_token(sub="g-1", org="globex"))
    assert await resolve(dataclasses.replace(foreign, resources=client), "T-1001") is None


@pytest.fixture
async def catalog() -> AsyncIterator[Catalog]:
    made = Catalog([toolkit])
    try:
        yield made
    finally:
        await made.stop()


async def test_startup_needs_the_api_url(
    catalog: Catalog, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without api_url and HELPDESK_API_URL the start fails with a message naming both."""
    monkeypatch.delenv("HELPDESK_API_URL", raising=False)
    with pytest.raises(ToolkitError) as raised:
        await catalog.start(engine, {})
    assert "helpdesk" in str(raised.value)
    assert "api_url" in str(raised.value)
    assert "HELPDESK_API_URL" in str(raised.value)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"api_url": "ftp://helpdesk"}, "api_url"),
        ({"api_url": "http://h", "timeout": 0}, "timeout"),
        ({"api_url": "http://h", "api_key": "x"}, "api_key: unknown key"),
    ],
)
async def test_startup_refuses_bad_options(
    catalog: Catalog, engine: AsyncEngine, options: dict[str, object], named: str
) -> None:
    """A URL that is not http(s), a timeout out of range or an unknown key stops the start naming it."""
    with pytest.raises(ToolkitError, match=named):
        await catalog.start(engine, {"helpdesk": options})


async def test_startup_reads_the_environment_and_shutdown_closes_the_client(
    catalog: Catalog, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no api_url option HELPDESK_API_URL is used; the one HTTP client is closed at shutdown."""
    monkeypatch.setenv("HELPDESK_API_URL", "http://helpdesk.internal:9100/")
    await catalog.start(engine, {})
    client = catalog.registry.resources["helpdesk"]
    assert isinstance(client, httpx.AsyncClient)
    assert client.base_url.host == "helpdesk.internal"
    assert client.base_url.port == 9100
    assert not client.is_closed
    await catalog.stop()
    assert client.is_closed
