"""Issue 10's "Done when", end to end in Chromium: a product with an MCP server and a TOML file, and
no Python, gets its tools, its quick actions, its persona and its page context in the panel on its
own page (another origin), and every write asks first.

Vernis runs in product mode (no demo, an HS256 secret), configured only by a `vernis.toml`; its
tools come from a real MCP server (`tests.tools.test_mcp_support.Desk`, the SDK's own server over
streamable HTTP). The host is a plain HTML page on another loopback port with the module script,
one `<vernis-assistant>` and a `getToken` that fetches a token its own endpoint signs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from playwright.async_api import expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.fixtures.server import JWT_SECRET
from tests.tools.test_mcp_support import Desk
from tests.ui.conftest import Embed, OpenUI, UIFactory
from tests.utils import free_port, run_server
from vernis.identity import issue_token
from vernis.model.scripted import SCRIPTED_CHAT_MODEL, Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import last_user_text, prompt_text

Body = Mapping[str, Any]
SERVICE_KEY = "desk-service-key"
NAME = "Tess"
INSTRUCTIONS = "You are the Northwind helpdesk's front-line aide. Answer in two sentences at most."
# The host's signed-in user, as its own token endpoint names them (Vernis has never seen them).
AGENT = {"sub": "agent-7", "org": "northwind", "role": "agent", "name": "Ann Agent"}

CONFIG = """
[assistant]
name = "{name}"
instructions = "{instructions}"

[roles.agent]
permissions = ["assistant:use", "mcp:desk"]

[[mcp_servers]]
name = "desk"
url = "{url}"
headers = {{ Authorization = "Bearer ${{DESK_MCP_KEY}}" }}
forward_member_token = true
allow = ["find_tickets", "get_ticket", "close_ticket"]
timeout = 5
connect_timeout = 5

[[pages]]
route = "/tickets/{{id}}"
entity_type = "ticket"
resolve = {{ tool = "desk__get_ticket", arg = "ticket_id", name_field = "subject", summary_field = "status" }}

[[quick_actions]]
label = "Open tickets"
prompt = "Which tickets are still open?"
permission = "mcp:desk"

[[quick_actions]]
label = "Summarize this ticket"
prompt = "Summarize this ticket."
entity_types = ["ticket"]
permission = "mcp:desk"
"""

# The host's page for one ticket: plain HTML, the module script from Vernis, the element, the token
# from the host's own endpoint, and a listener that shows the writes the assistant made. Nothing on
# the page names the ticket: its route does, by the configuration's `[[pages]]`.
HOST_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <link rel="icon" href="data:,">
  <title>Ticket {ticket_id} · Northwind Helpdesk</title>
  <script type="module" src="{vernis}/static/vernis/assistant.js"></script>
</head>
<body>
  <h1>Ticket {ticket_id}</h1>
  <ul id="heard" aria-label="Assistant activity"></ul>
  <vernis-assistant server="{vernis}"></vernis-assistant>
  <script>
    const assistant = document.querySelector("vernis-assistant");
    assistant.getToken = () => fetch("/vernis-token").then((response) => response.text());
    document.addEventListener("vernis:tool-completed", (event) => {{
      const item = document.createElement("li");
      item.textContent = `${{event.detail.toolName}} · ${{event.detail.status}}`;
      document.getElementById("heard").append(item);
    }});
  </script>
</body>
</html>
"""


def host_app(vernis_url: str, issued: list[str]) -> Starlette:
    """The product's own server: its ticket pages, and the endpoint signing its user's Vernis token."""

    async def ticket_page(request: Request) -> Response:
        ticket_id = request.path_params["ticket_id"]
        return HTMLResponse(HOST_PAGE.format(vernis=vernis_url, ticket_id=ticket_id))

    async def vernis_token(request: Request) -> Response:
        token = issue_token(JWT_SECRET, ttl=600, **AGENT)
        issued.append(token)
        return PlainTextResponse(token, headers={"Cache-Control": "no-store"})

    return Starlette(
        routes=[Route("/tickets/{ticket_id}", ticket_page), Route("/vernis-token", vernis_token)]
    )


async def claims(vernis_url: str, token: str) -> dict[str, Any]:
    """The claims of a token Vernis signed for the desk, verified as the desk does: against Vernis's
    JWKS, for its audience."""
    async with httpx.AsyncClient() as http:
        keys = jwt.PyJWKSet.from_dict((await http.get(f"{vernis_url}/api/assistant/jwks")).json())
    key = next(key for key in keys.keys if key.key_id == jwt.get_unverified_header(token)["kid"])
    decoded: dict[str, Any] = jwt.decode(
        token, key, algorithms=[key.algorithm_name], audience="vernis-mcp:desk"
    )
    return decoded


def chat_about(words: str) -> Callable[[Body], bool]:
    return lambda body: (
        body.get("model") == SCRIPTED_CHAT_MODEL
        and body["messages"][-1]["role"] == "user"
        and words in last_user_text(body)
    )


def after_call(call_id: str) -> Callable[[Body], bool]:
    return lambda body: (
        body.get("model") == SCRIPTED_CHAT_MODEL
        and body["messages"][-1]["role"] == "tool"
        and body["messages"][-1].get("tool_call_id") == call_id
    )


async def test_a_product_with_an_mcp_server_and_a_toml_file_gets_the_panel_on_its_own_page(
    ui_factory: UIFactory,
    open_ui: OpenUI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a host page of another origin, a Vernis configured only by vernis.toml shows its name and quick actions, runs the MCP read as the member (a token Vernis signs for the server, never the host's own) with the persona and the page's ticket (resolved by the MCP read tool) in the prompt, and runs the MCP write once, only after approval in the panel, telling the host."""
    monkeypatch.setenv("DESK_MCP_KEY", SERVICE_KEY)
    desk = Desk()
    issued: list[str] = []
    host_port = free_port()
    host_url = f"http://127.0.0.1:{host_port}"
    async with desk.serve() as mcp_url:
        config = tmp_path / "vernis.toml"
        config.write_text(CONFIG.format(name=NAME, instructions=INSTRUCTIONS, url=mcp_url), encoding="utf-8")
        async with (
            ui_factory(demo=False, config=config, allowed_origins=[host_url], scripted_flag=False) as vernis,
            run_server(host_app(vernis.http_url, issued), port=host_port),
        ):
            scripted = vernis.scripted
            find = ScriptedToolCall("desk__find_tickets", {"status": "open"}, call_id="call_find")
            scripted.add(Reply("Let me look.", tool_calls=[find]), match=chat_about("still open"))
            scripted.add("Two tickets are open: T-1 and T-2.", match=after_call("call_find"))
            close = ScriptedToolCall(
                "desk__close_ticket",
                {"ticket_id": "T-2", "note": "Fixed by the VPN update."},
                call_id="call_close",
            )
            scripted.add(Reply(tool_calls=[close]), match=chat_about("close it"))
            scripted.add("Approve the change above and I will close it.", match=after_call("call_close"))

            ui = await open_ui(vernis, host=Embed(vernis, host_url), email=None, path="/tickets/T-2")
            await ui.open()

            # The configuration's name, and its quick actions: the general one, and the ticket page's.
            await expect(ui.panel.locator(".assistant-name")).to_have_text(NAME)
            await expect(ui.launcher).to_contain_text(f"Ask {NAME}")
            page_actions = ui.log.get_by_role("list", name="About this page").get_by_role("button")
            general = ui.log.get_by_role("list", name="Quick actions").get_by_role("button")
            await expect(page_actions).to_have_text(["Summarize this ticket"])
            await expect(general).to_have_text(["Open tickets"])

            # The general quick action: the model calls the MCP read tool, which runs once, as the member.
            await general.click()
            await ui.answered()
            # By position: `ui.answered()` returns the last answer, a locator that moves on.
            read_answer = ui.answers().nth(0)
            await expect(read_answer).to_contain_text("Two tickets are open: T-1 and T-2.")
            read_card = read_answer.locator(".tool-card")
            await expect(read_card).to_have_attribute("data-status", "ok")
            await expect(read_card.locator(".tool-id")).to_have_text("desk__find_tickets")
            await expect(read_card).to_contain_text("T-1: Printer on fire")
            await expect(read_card).to_contain_text("T-2: VPN drops hourly")
            (read,) = desk.calls_of("find_tickets")
            assert read.arguments == {"status": "open", "limit": 10}
            assert read.headers["authorization"] == f"Bearer {SERVICE_KEY}"
            member_token = read.headers["x-vernis-member-token"]
            assert member_token not in issued, "the host's own token for its user stays in Vernis"
            assert (await claims(vernis.http_url, member_token))["sub"] == AGENT["sub"]

            # What the model was told: the persona, the server's tools, and the page's ticket, named
            # by the configured read tool, called as the member.
            chat = [body for body in scripted.requests if body.get("model") == SCRIPTED_CHAT_MODEL]
            first = chat[0]
            system = prompt_text(first)
            assert system.startswith(f"You are {NAME}, ")
            assert INSTRUCTIONS in system
            assert '## Current page\n- Route (the page\'s address, as data): "/tickets/T-2"\n' in system
            assert 'The user is looking at the ticket "VPN drops hourly" (id T-2).' in system
            assert "- About it: open" in system
            # Besides Vernis's own ask_user, offered to every member.
            names = sorted(tool["function"]["name"] for tool in first["tools"])
            assert [name for name in names if name != "ask_user"] == [
                "desk__close_ticket",
                "desk__find_tickets",
                "desk__get_ticket",
            ]
            resolves = desk.calls_of("get_ticket")
            assert resolves, "the page was resolved through desk__get_ticket"
            for call in resolves:
                assert call.arguments == {"ticket_id": "T-2"}
                assert (await claims(vernis.http_url, call.headers["x-vernis-member-token"]))["sub"] == AGENT[
                    "sub"
                ]

            # A write: the panel asks first, and the server is not called.
            await ui.send("Please close it, the VPN update fixed it.")
            await ui.answered(2)
            write_answer = ui.answers().nth(1)
            await expect(write_answer).to_contain_text("Approve the change above")
            write_card = write_answer.locator(".tool-card")
            await expect(write_card).to_have_attribute("data-status", "needs_confirmation")
            confirm = write_card.get_by_role("group", name="Approve or reject: Close a ticket")
            await expect(confirm).to_contain_text("desk__close_ticket")
            # The exact arguments, readably: labelled rows, no JSON.
            arguments = confirm.locator(".field.group", has_text="Arguments").locator(".field")
            await expect(arguments.locator("dt")).to_have_text(["Ticket id", "Note"])
            await expect(arguments.locator("dd")).to_have_text(["T-2", "Fixed by the VPN update."])
            heard = ui.page.locator("#heard li")
            await expect(heard).to_have_text(["desk__find_tickets · ok"])
            assert desk.calls_of("close_ticket") == []
            assert desk.tickets["T-2"]["status"] == "open"
            await ui.screenshot("mcp-product-approval.png")

            # Approved in the panel: the write runs once, as the member, and the host hears of it.
            await confirm.get_by_role("button", name="Approve").click()
            await expect(write_card).to_have_attribute("data-status", "ok")
            await expect(confirm).to_contain_text("Approved. The change was made.")
            (write,) = desk.calls_of("close_ticket")
            assert write.arguments == {"ticket_id": "T-2", "note": "Fixed by the VPN update."}
            assert (await claims(vernis.http_url, write.headers["x-vernis-member-token"]))["sub"] == AGENT[
                "sub"
            ]
            assert desk.tickets["T-2"]["status"] == "closed"
            await expect(heard).to_have_text(["desk__find_tickets · ok", "desk__close_ticket · ok"])
            assert len(desk.calls_of("find_tickets")) == 1

            await read_card.locator("summary").click()
            await expect(read_card.locator("details")).to_have_attribute("open", "")
            await ui.screenshot("mcp-product.png")
            # Closed before its servers stop: a request of the page racing their shutdown would be
            # refused and logged on its console.
            await ui.context.close()
