"""An MCP server's tools, end to end (SPEC §14 item 4): Vernis in product mode, configured by a
vernis.toml with `[[mcp_servers]]`, against a real MCP server (the SDK's own, streamable HTTP on
loopback, `tests.tools.test_mcp_support.Desk`, and a third party's, `Vendor`), driven by a real
`websockets` client."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import sqlalchemy as sa
from websockets.exceptions import InvalidStatus

from tests.data import database
from tests.fixtures.server import Client, Vernis, VernisFactory, text_of
from tests.tools.test_mcp_support import PLANTED, Desk, Vendor
from tests.utils import free_port, vernis_command
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import context_text, last_user_text

Body = Mapping[str, Any]
REPO = Path(__file__).resolve().parents[2]
SERVICE_KEY = "desk-service-key"
# What a member of the demo organization holds in these tests: the server's permission is granted
# to the `member` role by the configuration.
MEMBER = "member@acme.test"


def config_text(url: str, **server: Any) -> str:
    # A generous connect timeout: on a machine running the suite on four workers the first
    # connection took over a second, and the server's tools were left out of the test.
    options = {"timeout": 1, "connect_timeout": 10, "forward_member_token": True} | server
    extra = "\n".join(f"{key} = {json.dumps(value)}" for key, value in options.items())
    return f"""
[assistant]
name = "Ada"

[roles.member]
permissions = ["assistant:use", "mcp:desk"]

[[mcp_servers]]
name = "desk"
url = "{url}"
headers = {{ Authorization = "Bearer ${{DESK_MCP_KEY}}" }}
{extra}

[[pages]]
route = "/tickets/{{id}}"
entity_type = "ticket"
resolve = {{ tool = "desk__get_ticket", arg = "ticket_id", name_field = "subject", summary_field = "status" }}
"""


def is_chat(body: Body) -> bool:
    return body.get("model") == SCRIPTED_CHAT_MODEL


def chat_about(words: str) -> Callable[[Body], bool]:
    return lambda body: (
        is_chat(body) and body["messages"][-1]["role"] == "user" and words in last_user_text(body)
    )


def after_tool(body: Body) -> bool:
    return is_chat(body) and body["messages"][-1]["role"] == "tool"


def offered(body: Body) -> dict[str, dict[str, Any]]:
    """The tools offered to the model, less Vernis's own `ask_user` (offered to every member)."""
    tools = (tool["function"] for tool in body.get("tools") or ())
    return {tool["name"]: tool for tool in tools if tool["name"] != "ask_user"}


def last_chat(vernis: Vernis) -> dict[str, Any]:
    return next(body for body in reversed(vernis.scripted.requests) if is_chat(body))


@dataclass
class Product:
    vernis: Vernis
    desk: Desk

    @asynccontextmanager
    async def opened(self, token: str | None = None) -> AsyncIterator[Client]:
        async with self.vernis.connect(None, token=token or self.vernis.token(MEMBER)) as client:
            await client.until("history_end")
            yield client


@asynccontextmanager
async def product_vernis(factory: VernisFactory, tmp_path: Path, text: str) -> AsyncIterator[Vernis]:
    path = tmp_path / "vernis.toml"
    path.write_text(text, encoding="utf-8")
    async with factory(demo=False, config=path) as vernis:
        yield vernis


@pytest.fixture(autouse=True)
def desk_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service key the configuration names as ${DESK_MCP_KEY}."""
    monkeypatch.setenv("DESK_MCP_KEY", SERVICE_KEY)


@pytest.fixture
async def product(vernis_factory: VernisFactory, tmp_path: Path) -> AsyncIterator[Product]:
    desk = Desk()
    async with desk.serve() as url, product_vernis(vernis_factory, tmp_path, config_text(url)) as vernis:
        yield Product(vernis, desk)


async def audit(vernis: Vernis) -> list[tuple[str, str]]:
    async with database(vernis) as engine, engine.connect() as connection:
        rows = await connection.execute(
            sa.text("SELECT tool_name, outcome FROM audit_log ORDER BY created_at")
        )
        return [(row.tool_name, row.outcome) for row in rows]


async def test_the_servers_tools_are_offered_with_their_schemas_and_a_read_runs_once(
    product: Product,
) -> None:
    """The model is offered desk__<tool> with the server's schema; a read it calls runs once on the server, with the configured header and the member's token, and the answer goes on."""
    vernis, desk = product.vernis, product.desk
    finds = [ScriptedToolCall("desk__find_tickets", {"status": "open"}, call_id=f"call_{n}") for n in (1, 2)]
    vernis.scripted.add(Reply("Looking.", tool_calls=finds), match=chat_about("open tickets"))
    vernis.scripted.add("Two open tickets.", match=after_tool)
    token = vernis.token(MEMBER)
    async with product.opened(token) as client:
        events = await client.answer("Which open tickets do we have?")
    tools = offered(next(body for body in vernis.scripted.requests if is_chat(body)))
    assert sorted(tools) == [
        "desk__big",
        "desk__broken",
        "desk__close_ticket",
        "desk__find_tickets",
        "desk__get_ticket",
        "desk__grow",
        "desk__picture",
        "desk__slow",
    ]
    schema = {k: v for k, v in (await desk.server.list_tools())[0].input_schema.items() if k != "title"}
    assert tools["desk__find_tickets"]["parameters"] == schema
    assert "confirmed" in tools["desk__close_ticket"]["parameters"]["properties"]
    completed = [e for e in events if e["type"] == "tool_call_completed"]
    assert [e["status"] for e in completed] == ["ok", "ok"]
    assert completed[0]["result"] == {
        "ok": True,
        "data": {"text": "T-1: Printer on fire\nT-2: VPN drops hourly"},
    }
    assert text_of(events).endswith("Two open tickets.")
    (call,) = desk.calls
    assert call.arguments == {"status": "open", "limit": 10}
    assert call.headers["authorization"] == f"Bearer {SERVICE_KEY}"
    assert call.headers["x-vernis-member-token"] not in ("", token)
    assert await audit(vernis) == []


async def read_once(product: Product) -> tuple[str, str]:
    """The member has desk__find_tickets run once; returns the member's token, and the token the
    server received with the call."""
    vernis = product.vernis
    find = ScriptedToolCall("desk__find_tickets", {"status": "open"}, call_id="call_find")
    vernis.scripted.add(Reply("Looking.", tool_calls=[find]), match=chat_about("open tickets"))
    vernis.scripted.add("Two open tickets.", match=after_tool)
    token = vernis.token(MEMBER)
    async with product.opened(token) as client:
        await client.answer("Which open tickets do we have?")
    (call,) = product.desk.calls
    return token, call.headers["x-vernis-member-token"]


async def test_the_server_receives_a_short_lived_token_vernis_signs_for_it(product: Product) -> None:
    """The MCP server receives not the member's token but one that verifies against Vernis's JWKS (fetched over HTTP), for the server's audience, naming the member, expiring within 5 minutes."""
    vernis = product.vernis
    begun = time.time()
    token, received = await read_once(product)
    ended = time.time()
    assert received != token
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{vernis.http_url}/api/assistant/jwks")
    assert response.status_code == 200
    keys = jwt.PyJWKSet.from_dict(response.json())
    key = next(key for key in keys.keys if key.key_id == jwt.get_unverified_header(received)["kid"])
    claims = jwt.decode(received, key, algorithms=[key.algorithm_name], audience="vernis-mcp:desk")
    assert (claims["sub"], claims["org"], claims["aud"]) == (MEMBER, "acme", "vernis-mcp:desk")
    assert sorted(claims["permissions"]) == ["assistant:use", "mcp:desk"]
    # Signed for 300 s at some moment of the call (a loaded machine took over a second for it).
    assert int(begun) + 300 <= claims["exp"] <= ended + 300 + 1
    assert all("d" not in jwk for jwk in response.json()["keys"]), "no private part is published"


async def test_vernis_refuses_the_token_it_signed_for_a_server(product: Product) -> None:
    """The token the MCP server received opens no Vernis socket (HTTP 403), and sent as `authenticate` on a live socket closes it with 4401."""
    vernis = product.vernis
    _, received = await read_once(product)
    with pytest.raises(InvalidStatus) as refused:
        async with vernis.connect(None, token=received):
            pass
    assert refused.value.response.status_code == 403
    async with product.opened() as client:
        await client.send("authenticate", token=received)
        assert (await client.close_frame()).code == 4401


async def preview_close(product: Product, client: Client) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The model asks to close T-1; returns the confirmation_required event and the answer's events."""
    close = ScriptedToolCall(
        "desk__close_ticket", {"ticket_id": "T-1", "note": "Fixed."}, call_id="call_close"
    )
    product.vernis.scripted.add(Reply(tool_calls=[close]), match=chat_about("close T-1"))
    product.vernis.scripted.add("Shall I close it?", match=after_tool)
    events = await client.answer("Please close T-1")
    (confirmation,) = [e for e in events if e["type"] == "confirmation_required"]
    return confirmation, events


async def test_a_write_runs_once_after_two_tabs_approve_at_once(product: Product) -> None:
    """A write previews its title and exact arguments and calls nothing; two tabs approving at once run it on the server exactly once."""
    vernis, desk = product.vernis, product.desk
    async with product.opened() as first, product.opened() as second:
        confirmation, events = await preview_close(product, first)
        assert confirmation["preview"] == {
            "action": "Close a ticket",
            "tool": "desk__close_ticket",
            "arguments": {"ticket_id": "T-1", "note": "Fixed."},
        }
        assert desk.calls == []
        await second.send("load_conversation", conversation_id=events[0]["conversation_id"])
        await second.until("history_end")
        approve = {"confirmation_id": confirmation["confirmation_id"], "approved": True}
        await asyncio.gather(first.send("confirm_tool", **approve), second.send("confirm_tool", **approve))
        # Each tab hears the card end (however long the write takes), then anything after it.
        first_events = await first.until("tool_call_completed") + await first.drain()
        second_events = await second.until("tool_call_completed") + await second.drain()
    for received in (first_events, second_events):
        (done,) = [e for e in received if e["type"] == "tool_call_completed"]
        assert done["status"] == "ok"
        assert done["result"]["data"] == {"text": "T-1 is closed."}
    assert len([e for e in first_events + second_events if e["type"] == "error"]) == 1
    assert [(call.tool, call.arguments) for call in desk.calls] == [
        ("close_ticket", {"ticket_id": "T-1", "note": "Fixed."})
    ]
    assert desk.tickets["T-1"]["status"] == "closed"
    assert await audit(vernis) == [("desk__close_ticket", "ok")]


async def test_a_rejected_write_runs_nothing(product: Product) -> None:
    """Rejecting the preview of an MCP write calls nothing on the server and records the rejection."""
    async with product.opened() as client:
        confirmation, _ = await preview_close(product, client)
        await client.send("confirm_tool", confirmation_id=confirmation["confirmation_id"], approved=False)
        done = (await client.until("tool_call_completed"))[-1]
    assert done["status"] == "rejected"
    assert product.desk.calls == []
    assert product.desk.tickets["T-1"]["status"] == "open"
    assert await audit(product.vernis) == [("desk__close_ticket", "rejected")]


async def test_a_member_without_the_servers_permission_is_not_offered_its_tools(product: Product) -> None:
    """A token whose permissions lack mcp:desk is offered none of the server's tools, and a call the model makes anyway runs nothing."""
    vernis = product.vernis
    find = ScriptedToolCall("desk__find_tickets", {}, call_id="call_find")
    vernis.scripted.add(Reply(tool_calls=[find]), match=chat_about("sneak"))
    vernis.scripted.add("I cannot.", match=after_tool)
    async with product.opened(vernis.token(MEMBER, permissions=["assistant:use"])) as client:
        events = await client.answer("sneak a look at the tickets")
    first = next(body for body in vernis.scripted.requests if is_chat(body))
    assert offered(first) == {}
    # Vernis's own ask_user is still offered, so the model's call is answered: refused, run nowhere.
    refused = [e for e in events if e["type"] == "tool_call_completed"]
    assert [e["result"]["error"]["code"] for e in refused] == ["forbidden"]
    assert product.desk.calls == []


async def test_a_call_that_hangs_or_fails_is_a_tool_error_and_the_answer_goes_on(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """A call past its timeout and a call the server fails each end as an error the model reads, and the answer is written."""
    desk = Desk()
    # 5 s rather than the other tests' 1: the failing call must fail before it (a loaded machine once
    # took over a second to answer it), the hanging one waits a minute.
    async with (
        desk.serve() as url,
        product_vernis(vernis_factory, tmp_path, config_text(url, timeout=5)) as vernis,
    ):
        calls = [
            ScriptedToolCall("desk__slow", {}, call_id="call_slow"),
            ScriptedToolCall("desk__broken", {}, call_id="call_broken"),
        ]
        vernis.scripted.add(Reply(tool_calls=calls), match=chat_about("try both"))
        vernis.scripted.add("Neither worked, sorry.", match=after_tool)
        async with Product(vernis, desk).opened() as client:
            events = await client.answer("try both tools")
    completed = {e["call_id"]: e for e in events if e["type"] == "tool_call_completed"}
    assert completed["call_slow"]["status"] == "error"
    assert completed["call_slow"]["result"]["error"]["code"] == "timeout"
    assert completed["call_broken"]["result"]["error"]["code"] == "tool_error"
    assert text_of(events).endswith("Neither worked, sorry.")
    assert events[-1]["type"] == "assistant_end"
    tool_results = [m["content"] for m in last_chat(vernis)["messages"] if m["role"] == "tool"]
    assert any('"code":"timeout"' in content for content in tool_results)


async def test_stop_cancels_a_call_in_flight(product: Product) -> None:
    """The user's stop during an MCP call cancels it on the server, and the answer ends as stopped."""
    vernis, desk = product.vernis, product.desk
    vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("desk__slow", {"seconds": 30})]), match=chat_about("slowly")
    )
    async with product.opened() as client:
        await client.send("user_message", content="do it slowly")
        await client.until("tool_call_started")
        await asyncio.wait_for(desk.started.wait(), 5)
        await client.send("stop")
        events = await client.until("assistant_end")
    assert events[-1]["stopped"] is True
    async with asyncio.timeout(5):
        while desk.cancelled != ["slow"]:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_the_page_is_named_through_the_configured_read_tool(product: Product) -> None:
    """A message from /tickets/T-2 names the ticket in the turn's context, read by desk__get_ticket as the member."""
    vernis, desk = product.vernis, product.desk
    vernis.scripted.add("It keeps dropping.", match=chat_about("this ticket"))
    async with product.opened() as client:
        await client.answer("what is this ticket about?", page_context={"route": "/tickets/T-2"})
    context = context_text(last_chat(vernis))
    assert 'The user is looking at the ticket "VPN drops hourly" (id T-2).' in context
    assert "About it: open" in context
    (call,) = desk.calls
    assert (call.tool, call.arguments) == ("get_ticket", {"ticket_id": "T-2"})
    assert call.headers["x-vernis-member-token"]


async def test_a_server_down_at_start_joins_once_it_answers(
    vernis_factory: VernisFactory, tmp_path: Path
) -> None:
    """Vernis starts while the MCP server is down and offers none of its tools; once the server answers, new sockets are offered them."""
    port = free_port()
    desk = Desk()
    url = f"http://127.0.0.1:{port}/mcp"
    async with product_vernis(vernis_factory, tmp_path, config_text(url)) as vernis:
        vernis.scripted.add("Here.", match=chat_about("ping"), times=None)
        product = Product(vernis, desk)
        async with product.opened() as client:
            await client.answer("ping")
        assert offered(last_chat(vernis)) == {}
        async with desk.serve(port):
            async with asyncio.timeout(8):
                while True:
                    async with product.opened() as client:
                        await client.answer("ping")
                    if "desk__find_tickets" in offered(last_chat(vernis)):
                        break
                    await asyncio.sleep(0.2)


async def test_check_config_lists_mcp_tools_per_role_and_servers_down(tmp_path: Path) -> None:
    """`vernis check-config` connects to each MCP server: a reachable one's tools are listed for the roles holding its permission, a down one is named."""
    desk = Desk()
    down = f"http://127.0.0.1:{free_port()}/mcp"
    async with desk.serve() as url:
        text = config_text(url) + (
            f'\n[[mcp_servers]]\nname = "billing"\nurl = "{down}"\nconnect_timeout = 1\n'
        )
        config = tmp_path / "vernis.toml"
        config.write_text(text, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("VERNIS_")}
        env |= {
            "PYTHONPATH": str(REPO),
            "VERNIS_CONFIG": str(config),
            "VERNIS_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'v.db'}",
            "VERNIS_JWT_SECRET": "check-config-secret-that-is-long-enough",
        }
        # In this process, on a thread (the command runs its own event loop; the Desk serves on this one).
        result = await asyncio.to_thread(vernis_command, "check-config", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    member = next(line for line in lines if line.startswith("  member: "))
    assert "desk__find_tickets" in member
    assert "desk__close_ticket" in member
    viewer = next(line for line in lines if line.startswith("  viewer: "))
    assert "desk__" not in viewer
    assert "  desk: up, 8 tools (permission mcp:desk)" in lines
    billing = next(line for line in lines if line.startswith("  billing: "))
    assert billing.startswith("  billing: DOWN")
    assert lines[-1] == "configuration is valid"


def vendor_config(url: str) -> str:
    """The vendor's server twice: as `vendor`, external with the default trust, and as `vouched`,
    external with trust_annotations = true."""
    return f"""
[roles.member]
permissions = ["assistant:use", "mcp:vendor", "mcp:vouched"]

[[mcp_servers]]
name = "vendor"
url = "{url}"
external = true
timeout = 5

[[mcp_servers]]
name = "vouched"
url = "{url}"
external = true
trust_annotations = true
timeout = 5
"""


@pytest.fixture
async def vendor(vernis_factory: VernisFactory, tmp_path: Path) -> AsyncIterator[tuple[Vernis, Vendor]]:
    server = Vendor()
    async with server.serve() as url, product_vernis(vernis_factory, tmp_path, vendor_config(url)) as vernis:
        yield vernis, server


async def test_a_tool_whose_metadata_plants_instructions_is_not_offered_to_the_model(
    vendor: tuple[Vernis, Vendor], caplog: pytest.LogCaptureFixture
) -> None:
    """Tools whose description, title or parameter description plant instructions are missing from the model's request while the server's honest tools are there; the log names the server and tool, not the text."""
    vernis, _ = vendor
    vernis.scripted.add("Hello.", match=chat_about("hello"))
    with caplog.at_level(logging.WARNING, logger="vernis.tools.mcp"):
        async with vernis.opened(MEMBER) as client:
            await client.answer("hello")
    tools = offered(last_chat(vernis))
    assert sorted(tools) == ["vendor__lookup", "vendor__refund", "vouched__lookup", "vouched__refund"]
    assert PLANTED not in json.dumps(last_chat(vernis))
    # The servers' tools are listed when Vernis starts (the fixture's setup) or on first use.
    records = caplog.get_records("setup") + caplog.get_records("call")
    left_out = [r.getMessage() for r in records if "is left out" in r.getMessage()]
    for server in ("vendor", "vouched"):
        for tool in ("history", "track", "find_customer"):
            assert any(m.startswith(f"MCP server {server}: the tool '{tool}'") for m in left_out), (
                server,
                tool,
            )
    assert not any("phone number" in record.getMessage() for record in caplog.records)


async def test_an_external_servers_read_only_annotation_is_believed_only_when_trusted(
    vendor: tuple[Vernis, Vendor],
) -> None:
    """On an external server a tool annotated readOnlyHint is previewed and waits for approval, calling nothing; with trust_annotations = true set explicitly the same tool runs as a read."""
    vernis, server = vendor
    wary = ScriptedToolCall("vendor__lookup", {"order_id": "A-1"}, call_id="call_wary")
    vernis.scripted.add(Reply(tool_calls=[wary]), match=chat_about("order A-1"))
    vouched = ScriptedToolCall("vouched__lookup", {"order_id": "A-2"}, call_id="call_vouched")
    vernis.scripted.add(Reply(tool_calls=[vouched]), match=chat_about("order A-2"))
    vernis.scripted.add("Done.", match=after_tool, times=None)
    async with vernis.opened(MEMBER) as client:
        first = await client.answer("where is order A-1?")
        (confirmation,) = [e for e in first if e["type"] == "confirmation_required"]
        assert confirmation["preview"] == {
            "action": "Look up an order",
            "tool": "vendor__lookup",
            "arguments": {"order_id": "A-1"},
        }
        assert server.calls == []
        second = await client.answer("where is order A-2?")
    assert "confirmation_required" not in [e["type"] for e in second]
    # (The first preview, left pending, ended as superseded by this second message.)
    (done,) = [e for e in second if e["type"] == "tool_call_completed" and e["call_id"] == "call_vouched"]
    assert (done["status"], done["result"]["data"]) == ("ok", {"text": "A-2: shipped"})
    assert [(call.tool, call.arguments) for call in server.calls] == [("lookup", {"order_id": "A-2"})]
    assert "confirmed" in offered(last_chat(vernis))["vendor__lookup"]["parameters"]["properties"]
    assert "confirmed" not in offered(last_chat(vernis))["vouched__lookup"]["parameters"]["properties"]
