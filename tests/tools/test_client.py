"""The host page's tools without a socket (vernis.tools.client): schema checks, the tool a
declaration becomes, and where the broker sends a call and how it ends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.members import member
from vernis.identity import MemberInfo
from vernis.tools import Tool, ToolContext, ToolFailure
from vernis.tools.client import (
    ClientToolBroker,
    ClientToolSpec,
    as_tool,
    check_parameters,
    with_client_tools,
)
from vernis.tools.runner import ToolRegistry

SCHEMA = {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"]}


@dataclass(frozen=True)
class Shown:
    id: uuid.UUID


@dataclass(eq=False)
class Page:
    """A socket's page as the broker sees it; `asked` holds the calls sent to it."""

    member: MemberInfo
    conversation: Shown | None = None
    client_tools: dict[str, Tool] = field(default_factory=dict)
    asked: list[tuple[str, str, Any]] = field(default_factory=list)
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    def ask(self, call_id: str, tool_name: str, arguments: Any) -> None:
        self.asked.append((call_id, tool_name, arguments))
        self.answered.set()


def declare(page: Page, broker: ClientToolBroker, *specs: ClientToolSpec) -> dict[str, Tool]:
    page.client_tools = {spec.name: as_tool(spec, page, broker) for spec in specs}
    broker.attach(page)
    return page.client_tools


def context(who: MemberInfo, conversation_id: uuid.UUID) -> ToolContext[None]:
    return ToolContext(
        member=who, permissions=frozenset({"assistant:use"}), conversation_id=conversation_id, resources=None
    )


READ = ClientToolSpec("selected_rows", "The rows the user selected.", SCHEMA)
WRITE = ClientToolSpec("fill_form", "Open the form prefilled.", SCHEMA, writes=True)


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "string", "description": "x" * 8200}}},
            "at most 8,192",
        ),
        ({"type": "array"}, "of type object"),
        ({"type": "object", "properties": {"a": {"type": "strin"}}}, "'strin'"),
        ({"type": "object", "properties": {"a": {"type": ["string", "file"]}}}, "'file'"),
        ({"type": "object", "required": "limit"}, "invalid JSON schema"),
    ],
    ids=["too-big", "not-object", "unknown-type", "unknown-type-in-list", "invalid"],
)
def test_bad_parameters_are_refused_naming_the_tool(schema: Mapping[str, Any], fragment: str) -> None:
    """A schema over 8 KiB, not of type object, with a type outside JSON's, or invalid for jsonschema is refused, naming the tool."""
    with pytest.raises(ValueError, match="'t'") as refused:
        check_parameters("t", schema)
    assert fragment in str(refused.value)


def test_enums_arrays_and_nested_objects_are_accepted() -> None:
    """Strings, numbers, booleans, enums (whose values are not types), arrays and nested objects pass."""
    check_parameters(
        "t",
        {
            "type": "object",
            "properties": {
                "kind": {"enum": ["type", "object"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "where": {
                    "type": "object",
                    "properties": {"near": {"type": "number"}, "open": {"type": "boolean"}},
                },
            },
        },
    )


def test_a_write_previews_its_arguments_and_is_offered_beside_the_server_tools() -> None:
    """A page write becomes a tool needing assistant:use with a preview; the socket's toolset adds the page's tools to the shared server set."""
    broker = ClientToolBroker()
    page = Page(member())
    tools = declare(page, broker, READ, WRITE)
    assert tools["fill_form"].writes
    assert tools["fill_form"].preview is not None
    assert not tools["selected_rows"].writes
    assert {tool.permission for tool in tools.values()} == {"assistant:use"}
    server = ToolRegistry().for_member(frozenset({"assistant:use"}))
    assert with_client_tools(server, {}) is server
    merged = with_client_tools(server, tools)
    assert set(merged.tools) == {"selected_rows", "fill_form"}
    assert {"selected_rows", "fill_form"} <= merged.known
    assert "confirmed" in merged.definitions()[1]["function"]["parameters"]["properties"]


async def test_a_call_goes_to_its_page_and_returns_the_data() -> None:
    """A call is sent to the page that declared the tool and returns what it answers; answering again is refused."""
    broker = ClientToolBroker()
    who = member()
    page = Page(who)
    tools = declare(page, broker, READ)
    run = asyncio.ensure_future(
        broker.call(page, context(who, uuid.uuid4()), tools["selected_rows"], {"limit": 1})
    )
    await page.answered.wait()
    ((call_id, name, arguments),) = page.asked
    assert (name, arguments) == ("selected_rows", {"limit": 1})
    assert broker.resolve(member().id, call_id, True, ["x"], None) is None
    assert broker.resolve(who.id, call_id, True, ["row"], None) == "taken"
    assert await run == ["row"]
    assert broker.resolve(who.id, call_id, True, ["again"], None) is None


async def test_a_page_error_and_oversized_data_are_tool_failures() -> None:
    """ok=false is `client_error` with the page's message; data over 64 KiB is `result_too_large`."""
    broker = ClientToolBroker()
    who = member()
    page = Page(who)
    tools = declare(page, broker, READ)
    ctx = context(who, uuid.uuid4())
    for ok, data, error, code in [
        (False, None, "No table here.", "client_error"),
        (True, "x" * 65600, None, "result_too_large"),
    ]:
        page.answered.clear()
        run = asyncio.ensure_future(broker.call(page, ctx, tools["selected_rows"], {"limit": 1}))
        await page.answered.wait()
        broker.resolve(who.id, page.asked[-1][0], ok, data, error)
        with pytest.raises(ToolFailure) as failed:
            await run
        assert failed.value.code == code
    assert failed.value.code == "result_too_large"


async def test_routing_falls_back_to_the_members_other_page_showing_the_conversation() -> None:
    """With its page gone, a call goes to another page of the member showing the conversation with a tool of that name and kind; else client_unavailable."""
    broker = ClientToolBroker()
    who = member()
    conversation = uuid.uuid4()
    origin = Page(who, Shown(conversation))
    tools = declare(origin, broker, READ, WRITE)
    elsewhere = Page(who, Shown(uuid.uuid4()))
    declare(elsewhere, broker, READ)
    other_kind = Page(who, Shown(conversation))
    declare(other_kind, broker, ClientToolSpec("fill_form", "Read only.", SCHEMA))
    stranger = Page(member(), Shown(conversation))
    declare(stranger, broker, READ)
    standby = Page(who, Shown(conversation))
    declare(standby, broker, READ)
    broker.detach(origin)
    ctx = context(who, conversation)

    run = asyncio.ensure_future(broker.call(origin, ctx, tools["selected_rows"], {"limit": 2}))
    await standby.answered.wait()
    assert (elsewhere.asked, stranger.asked, origin.asked) == ([], [], [])
    broker.resolve(who.id, standby.asked[0][0], True, {"from": "standby"}, None)
    assert await run == {"from": "standby"}

    with pytest.raises(ToolFailure) as failed:
        await broker.call(origin, ctx, tools["fill_form"], {"limit": 1})
    assert failed.value.code == "client_unavailable"
    assert not other_kind.asked


async def test_a_page_that_leaves_or_never_answers_ends_the_call() -> None:
    """A page detached while a call waits ends it as client_unavailable; one that stays silent, as timeout."""
    broker = ClientToolBroker(timeout=0.05)
    who = member()
    page = Page(who)
    tools = declare(page, broker, READ)
    ctx = context(who, uuid.uuid4())
    run = asyncio.ensure_future(broker.call(page, ctx, tools["selected_rows"], {"limit": 1}))
    await page.answered.wait()
    broker.detach(page)
    with pytest.raises(ToolFailure) as gone:
        await run
    assert gone.value.code == "client_unavailable"

    broker.attach(page)
    with pytest.raises(ToolFailure) as silent:
        await broker.call(page, ctx, tools["selected_rows"], {"limit": 1})
    assert silent.value.code == "timeout"
    assert broker.resolve(who.id, page.asked[-1][0], True, {}, None) is None
