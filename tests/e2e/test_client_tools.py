"""The host page's own tools (SPEC §18), through the running server: `client_tools`,
`client_tool_call`, `client_tool_result`, and every bad input of issue 25 item 3."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.fixtures.server import Client, Vernis, VernisFactory, text_of, types_of
from vernis.model.scripted import Reply, ScriptedToolCall

SELECTION = {
    "name": "selected_rows",
    "description": "The rows the user selected in the page's table.",
    "parameters": {
        "type": "object",
        "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 50}},
        "required": ["limit"],
        "additionalProperties": False,
    },
}
FORM = {
    "name": "fill_contact_form",
    "description": "Open the new-contact form prefilled.",
    "parameters": {
        "type": "object",
        "properties": {
            "first_name": {"type": "string"},
            "kind": {"enum": ["lead", "customer"]},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["first_name"],
    },
    "write": True,
}


def calls(*tool_calls: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=[ScriptedToolCall(name, arguments) for name, arguments in tool_calls])


def offered(vernis: Vernis) -> set[str]:
    """The tool names of the model's last chat request (title requests carry none)."""
    request = next(body for body in reversed(vernis.scripted.requests) if body.get("tools"))
    return {tool["function"]["name"] for tool in request["tools"]}


async def declare(client: Client, *tools: dict[str, Any]) -> None:
    """Send `client_tools` and wait until the socket has taken it (commands run in order)."""
    await client.send("client_tools", tools=list(tools))
    await client.send("ping")
    await client.until("pong")


async def test_declared_tools_are_offered_then_replaced(vernis: Vernis) -> None:
    """The page's tools are offered to the model beside the member's server tools, and a second `client_tools` replaces the first set."""
    async with vernis.opened() as client:
        await declare(client, SELECTION, FORM)
        await client.answer("hello")
        names = offered(vernis)
        assert {"selected_rows", "fill_contact_form", "search_contacts"} <= names
        await declare(client, {**SELECTION, "name": "visible_columns"})
        await client.answer("hello again")
        names = offered(vernis)
        assert "visible_columns" in names
        assert not {"selected_rows", "fill_contact_form"} & names
        assert "search_contacts" in names


async def test_a_read_runs_in_the_page_and_its_result_reaches_the_model(vernis: Vernis) -> None:
    """A page read runs at once: the page gets `client_tool_call` with the model's arguments, its data is the tool's result, and a second answer to the same call is not_found."""
    vernis.scripted.add(calls(("selected_rows", {"limit": 2})), match="which rows")
    async with vernis.opened() as client:
        await declare(client, SELECTION)
        await client.send("user_message", content="which rows did I select?")
        before = await client.until("client_tool_call")
        call = before[-1]
        assert call["tool_name"] == "selected_rows"
        assert call["arguments"] == {"limit": 2}
        assert "seq" not in call
        assert "tool_call_started" in types_of(before)
        rows = [{"id": "c1", "name": "Ada"}, {"id": "c2", "name": "Grace"}]
        await client.send("client_tool_result", call_id=call["call_id"], ok=True, data={"rows": rows})
        after = await client.until("assistant_end")
        (completed,) = [e for e in after if e["type"] == "tool_call_completed"]
        assert completed["status"] == "ok"
        assert completed["result"] == {"ok": True, "data": {"rows": rows}}
        await client.send("client_tool_result", call_id=call["call_id"], ok=True, data={"rows": []})
        error = (await client.until("error"))[-1]
        assert error["code"] == "not_found"
    tool_messages = [m for m in vernis.scripted.requests[-1]["messages"] if m["role"] == "tool"]
    if not tool_messages:  # the title request came last
        chat = [body for body in vernis.scripted.requests if body.get("tools")]
        tool_messages = [m for m in chat[-1]["messages"] if m["role"] == "tool"]
    assert '"Grace"' in tool_messages[-1]["content"]


async def test_a_page_error_is_a_tool_error_the_model_reads(vernis: Vernis) -> None:
    """A page that answers ok=false ends the call as an error carrying its message, and the answer goes on."""
    vernis.scripted.add(calls(("selected_rows", {"limit": 1})), match="rows please")
    async with vernis.opened() as client:
        await declare(client, SELECTION)
        await client.send("user_message", content="rows please")
        call = (await client.until("client_tool_call"))[-1]
        await client.send(
            "client_tool_result", call_id=call["call_id"], ok=False, error="No table on this page."
        )
        events = await client.until("assistant_end")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["status"] == "error"
    assert completed["result"]["error"]["code"] == "client_error"
    assert completed["result"]["error"]["message"] == "No table on this page."
    assert text_of(events)


async def test_a_page_write_asks_first_then_runs_in_the_page(vernis: Vernis) -> None:
    """A page tool with write: true shows a card with its arguments and reaches the page only once the user approved it."""
    arguments = {"first_name": "Ada", "kind": "lead", "tags": ["vip"]}
    vernis.scripted.add(calls(("fill_contact_form", arguments)), match="new contact")
    async with vernis.opened() as client:
        await declare(client, FORM)
        events = await client.answer("start a new contact for Ada")
        assert "client_tool_call" not in types_of(events)
        (card,) = [e for e in events if e["type"] == "confirmation_required"]
        assert card["preview"]["arguments"] == arguments
        await client.until("title_updated")
        await client.send("confirm_tool", confirmation_id=card["confirmation_id"], approved=True)
        call = (await client.until("client_tool_call"))[-1]
        assert (call["tool_name"], call["arguments"]) == ("fill_contact_form", arguments)
        await client.send("client_tool_result", call_id=call["call_id"], ok=True, data={"opened": True})
        done = (await client.until("tool_call_completed"))[-1]
    assert done["call_id"] == card["call_id"]
    assert (done["status"], done["result"]) == ("ok", {"ok": True, "data": {"opened": True}})


def _tools(count: int) -> list[dict[str, Any]]:
    return [{**SELECTION, "name": f"tool_{index}"} for index in range(count)]


# 9 KiB of JSON: one property whose description is long.
BIG_SCHEMA = {
    "type": "object",
    "properties": {"note": {"type": "string", "description": "x" * (9 * 1024 - 70)}},
}


@pytest.mark.parametrize(
    ("tools", "fragment"),
    [
        (_tools(33), "at most 32"),
        ([{**SELECTION, "name": "Select-Rows"}], "tools.0.name"),
        ([{**SELECTION, "name": "x" * 49}], "tools.0.name"),
        ([{**SELECTION, "parameters": BIG_SCHEMA}], "'selected_rows' are 9,2"),
        ([{**SELECTION, "name": "search_contacts"}], "'search_contacts' is the name of a server tool"),
        (
            [{**SELECTION, "parameters": {"type": "object", "properties": {"a": {"type": 5}}}}],
            "selected_rows",
        ),
        ([{**SELECTION, "parameters": {"type": "string"}}], "of type object"),
        ([SELECTION, SELECTION], "declared twice"),
    ],
    ids=[
        "33-tools",
        "bad-name",
        "long-name",
        "9-KiB-schema",
        "server-name",
        "bad-schema",
        "not-object",
        "twice",
    ],
)
async def test_bad_declarations_are_refused_and_keep_the_previous_set(
    vernis: Vernis, tools: list[dict[str, Any]], fragment: str
) -> None:
    """A bad `client_tools` is `error invalid_message` naming what is wrong, and the tools declared before stay offered."""
    assert len(orjson.dumps(BIG_SCHEMA)) // 1024 == 9
    async with vernis.opened() as client:
        await declare(client, FORM)
        await client.send("client_tools", tools=tools)
        error = (await client.until("error"))[-1]
        assert error["code"] == "invalid_message"
        assert fragment in error["message"], error["message"]
        await client.answer("hello")
    assert "fill_contact_form" in offered(vernis)


async def test_arguments_breaking_the_schema_never_reach_the_page(vernis: Vernis) -> None:
    """The model's arguments are checked against the page's schema: a violation is a tool error the model reads, and no client_tool_call is sent."""
    vernis.scripted.add(calls(("selected_rows", {"limit": "all", "extra": 1})), match="all rows")
    async with vernis.opened() as client:
        await declare(client, SELECTION)
        events = await client.answer("all rows")
    assert "client_tool_call" not in types_of(events)
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["status"] == "error"
    assert completed["result"]["error"]["code"] == "invalid_arguments"
    assert "limit" in completed["result"]["error"]["message"]


async def test_a_result_from_another_members_socket_is_not_found(vernis: Vernis) -> None:
    """Another member's socket cannot answer a call: not_found, and the call still waits for its own page."""
    vernis.scripted.add(calls(("selected_rows", {"limit": 3})), match="my rows")
    async with vernis.opened() as client, vernis.opened("owner@acme.test") as other:
        await declare(client, SELECTION)
        await client.send("user_message", content="my rows")
        call = (await client.until("client_tool_call"))[-1]
        await other.send("client_tool_result", call_id=call["call_id"], ok=True, data={"rows": ["stolen"]})
        assert (await other.until("error"))[-1]["code"] == "not_found"
        await client.send("client_tool_result", call_id=call["call_id"], ok=True, data={"rows": ["mine"]})
        events = await client.until("assistant_end")
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["result"] == {"ok": True, "data": {"rows": ["mine"]}}


async def test_a_page_that_never_answers_times_out_and_the_answer_goes_on(
    vernis_factory: VernisFactory,
) -> None:
    """No answer within VERNIS_CLIENT_TOOL_TIMEOUT ends the call as `timeout`, the answer goes on to its end, and a late result is not_found."""
    async with vernis_factory(client_tool_timeout=0.5) as vernis, vernis.opened() as client:
        vernis.scripted.add(calls(("selected_rows", {"limit": 1})), match="slow page")
        vernis.scripted.add("Your page did not answer.", match="slow page")
        await declare(client, SELECTION)
        await client.send("user_message", content="slow page")
        call = (await client.until("client_tool_call"))[-1]
        events = await client.until("assistant_end")
        (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
        assert completed["status"] == "error"
        assert completed["result"]["error"]["code"] == "timeout"
        assert text_of(events) == "Your page did not answer."
        assert events[-1]["stopped"] is False
        await client.send("client_tool_result", call_id=call["call_id"], ok=True, data={})
        assert (await client.until("error"))[-1]["code"] == "not_found"


async def test_data_over_64_kib_is_refused_and_the_call_ends_as_an_error(
    vernis_factory: VernisFactory,
) -> None:
    """A result with 65 KiB of data is `error invalid_message` to the page and `result_too_large` to the model (a frame limit that lets it through)."""
    async with vernis_factory(max_frame_bytes=131072) as vernis, vernis.opened() as client:
        vernis.scripted.add(calls(("selected_rows", {"limit": 50})), match="big rows")
        await declare(client, SELECTION)
        await client.send("user_message", content="big rows")
        call = (await client.until("client_tool_call"))[-1]
        await client.send("client_tool_result", call_id=call["call_id"], ok=True, data="x" * (65 * 1024))
        events = await client.until("assistant_end")
    (error,) = [e for e in events if e["type"] == "error"]
    assert error["code"] == "invalid_message"
    assert "64 KiB" in error["message"]
    (completed,) = [e for e in events if e["type"] == "tool_call_completed"]
    assert completed["result"]["error"]["code"] == "result_too_large"


async def test_calls_go_to_another_socket_of_the_member_once_the_page_has_gone(vernis: Vernis) -> None:
    """A page that closes before answering ends its call as client_unavailable; the answer's next page call goes to the member's other socket showing the conversation that declared it; a tool no open page declared is client_unavailable."""
    vernis.scripted.add(calls(("selected_rows", {"limit": 1})), match="rows then form")
    vernis.scripted.add(calls(("visible_columns", {"limit": 2})), match="rows then form")
    vernis.scripted.add(calls(("hidden_panel", {"limit": 3})), match="rows then form")
    async with vernis.opened() as first:
        await declare(
            first, SELECTION, {**SELECTION, "name": "visible_columns"}, {**SELECTION, "name": "hidden_panel"}
        )
        await first.send("user_message", content="rows then form")
        before = await first.until("client_tool_call")
        conversation_id = next(e for e in before if e["type"] == "conversation_created")["conversation_id"]
        async with vernis.opened(query=f"?conversation_id={conversation_id}") as second:
            await declare(second, SELECTION, {**SELECTION, "name": "visible_columns"})
            await first.ws.close()
            events = await second.until("client_tool_call")
            call = events[-1]
            assert (call["tool_name"], call["arguments"]) == ("visible_columns", {"limit": 2})
            await second.send("client_tool_result", call_id=call["call_id"], ok=True, data=["name"])
            events += await second.until("assistant_end")
    completed = [e for e in events if e["type"] == "tool_call_completed"]
    assert [(e["tool_name"], e["status"]) for e in completed] == [
        ("selected_rows", "error"),
        ("visible_columns", "ok"),
        ("hidden_panel", "error"),
    ]
    assert completed[0]["result"]["error"]["code"] == "client_unavailable"
    assert completed[2]["result"]["error"]["code"] == "client_unavailable"
    assert types_of(events).count("client_tool_call") == 1
