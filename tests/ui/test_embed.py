"""The panel embedded by a host product on another origin (SPEC §11): one module script tag and one
element on the host's page (`vernis_crm.web.embed`, with its own CSP), tokens from the host's own
endpoint through `getToken` (refreshed on the live socket, renewed after a 4401), the host's
`pageContext`, the DOM events the host listens to, and the CORS that lets exactly the allowed
origins in."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest
from playwright.async_api import WebSocket, expect

from tests.data import add_notification, is_read
from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, Embed, EmbedFactory, OpenUI, eventually
from tests.utils import run_server
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis_crm.web.embed import embed_host_app

# The host's tokens in the refresh test: the panel asks for the next one a fifth of this before it
# expires (at 4.8 s); the server would close the socket with 4401 at 6 s without it.
SHORT_TTL = 6


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def after_tool(body: Mapping[str, Any]) -> bool:
    return bool(body["messages"]) and body["messages"][-1]["role"] == "tool"


class Frames:
    """Every socket the page opens, and the commands it sends on them."""

    def __init__(self, ui: UI) -> None:
        self.sockets: list[WebSocket] = []
        self.sent: list[dict[str, Any]] = []
        ui.page.on("websocket", self._opened)

    def _opened(self, socket: WebSocket) -> None:
        self.sockets.append(socket)
        socket.on("framesent", lambda payload: self.sent.append(json.loads(payload)))

    def of_type(self, type: str) -> list[dict[str, Any]]:
        return [frame for frame in self.sent if frame.get("type") == type]


async def open_host(open_ui: OpenUI, embed: Embed, path: str = "/") -> UI:
    """A tab on the host's page, the panel defined and styled (no Vernis cookie anywhere)."""
    return await open_ui(embed.vernis, host=embed, email=None, path=path)


async def test_a_host_page_on_another_origin_embeds_the_panel(embed: Embed, open_ui: OpenUI) -> None:
    """A page on an allowed origin loads the module script cross-origin under its own CSP; the config goes with getToken's Bearer token (CORS), the socket with the token as a subprotocol, and it answers."""
    ui = await open_ui(embed.vernis, host=embed, email=None, path=None)
    frames = Frames(ui)
    async with ui.page.expect_response("**/api/assistant/config") as config:
        await ui.goto("/")
    response = await config.value
    request = response.request
    assert (await request.all_headers())["authorization"].startswith("Bearer ey")
    assert (await request.all_headers())["origin"] == embed.url
    assert "cookie" not in await request.all_headers()
    assert response.status == 200
    assert (await response.all_headers())["access-control-allow-origin"] == embed.url
    # The host's page is the host's: its own policy, which lets the Vernis origin in.
    page = await ui.page.request.get(embed.url + "/")
    assert embed.vernis.http_url in page.headers["content-security-policy"]
    assert "script-src 'self' http://127.0.0.1" in page.headers["content-security-policy"]

    embed.vernis.scripted.add(Reply("Hello from across origins."), match="hello")
    await ui.open()
    await expect(ui.log.get_by_role("button", name="Search contacts")).to_be_visible()
    await ui.send("hello there")
    await expect(await ui.answered()).to_contain_text("Hello from across origins.")
    # The token went as a subprotocol: never in the socket's URL (no cookie exists on this origin).
    assert len(frames.sockets) == 1
    assert "token" not in frames.sockets[0].url
    assert frames.sockets[0].url.startswith(embed.vernis.ws_url)
    await ui.screenshot("embed-light.png")


async def test_a_token_is_refreshed_on_the_live_socket_before_it_expires(
    embed_factory: EmbedFactory, open_ui: OpenUI
) -> None:
    """With 6 s host tokens, the panel asks getToken again before `exp`, sends `authenticate` on the same socket, and the conversation goes on past the first token's expiry."""
    async with embed_factory(token_ttl=SHORT_TTL) as embed:
        ui = await open_ui(embed.vernis, host=embed, email=None, path=None)
        frames = Frames(ui)
        started = time.time()
        await ui.goto("/")
        embed.vernis.scripted.add(Reply("First answer."), match="first")
        embed.vernis.scripted.add(Reply("Second answer, same socket."), match="second")
        await ui.open()
        await ui.send("first question")
        await expect(await ui.answered()).to_contain_text("First answer.")

        await eventually(lambda: _true(frames.of_type("authenticate")), timeout=SHORT_TTL + 2)
        refreshed = frames.of_type("authenticate")[0]["token"]
        assert claims(refreshed)["exp"] > started + SHORT_TTL
        # Past the first token's expiry (and no 4401): the socket lives on with the new token.
        wait = started + SHORT_TTL + 1.5 - time.time()
        await ui.page.wait_for_timeout(max(wait, 0) * 1000)
        await ui.connected()
        await ui.send("second question")
        await expect(await ui.answered(2)).to_contain_text("Second answer, same socket.")
        assert len(frames.sockets) == 1, "the socket was never replaced"
        assert not frames.sockets[0].is_closed()
        await expect(ui.log.locator(".msg.user")).to_have_count(2)


async def _true(value: object) -> bool:
    return bool(value)


async def test_after_a_4401_the_panel_reconnects_with_a_new_token(embed: Embed, open_ui: OpenUI) -> None:
    """When the server ends the session (4401: here a bad token sent to `authenticate`), the panel asks getToken again, reconnects and resumes the same conversation."""
    ui = await open_host(open_ui, embed)
    frames = Frames(ui)
    embed.vernis.scripted.add(Reply("Before the cut."), match="before")
    embed.vernis.scripted.add(Reply("After the cut."), match="after")
    await ui.open()
    await ui.send("before")
    await ui.answered()
    conversation = frames.of_type("user_message")[0]

    async with ui.page.expect_request(embed.url + "/vernis-token"):
        await ui.page.locator("vernis-assistant").evaluate(
            """element => element.connection.send({ type: "authenticate", token: "not-a-token" })"""
        )
    await eventually(lambda: _true(len(frames.sockets) == 2))
    await ui.connected()
    await expect(ui.connection).not_to_have_attribute("data-state", "signed-out")
    await expect(ui.answers()).to_have_count(1)
    assert "conversation_id=" in frames.sockets[1].url
    await ui.send("after")
    await expect(await ui.answered(2)).to_contain_text("After the cut.")
    assert conversation["client_message_id"] != frames.of_type("user_message")[-1]["client_message_id"]


async def test_the_host_page_hears_tool_completed_once_an_approved_write_ran(
    embed: Embed, open_ui: OpenUI
) -> None:
    """`vernis:tool-completed` (bubbling, composed) reaches the host page with the tool's name, status and a one-line summary (not raw JSON) only once the approved write has run; the host refreshes its data."""
    notification_id = await add_notification(embed.vernis, title="Call back Jane")
    embed.vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("mark_notification_read", {"notification_id": notification_id})]),
        match="mark it read",
    )
    embed.vernis.scripted.add(Reply("Approve the change above."), match=after_tool)
    ui = await open_host(open_ui, embed)
    await ui.page.evaluate(
        """() => {
            window.heard = [];
            document.addEventListener("vernis:tool-completed", (event) => window.heard.push({
                detail: event.detail,
                bubbles: event.bubbles,
                composed: event.composed,
                fromElement: event.target === document.querySelector("vernis-assistant"),
            }));
        }"""
    )
    await ui.open()
    await ui.send("mark it read please")
    await ui.answered()
    card = ui.log.locator(".tool-card")
    await expect(card).to_have_attribute("data-status", "needs_confirmation")
    assert await ui.page.evaluate("window.heard") == [], "waiting for approval is not an end"

    async with ui.page.expect_request(embed.url + "/contacts.json"):
        await card.get_by_role("button", name="Approve").click()
    await expect(card).to_have_attribute("data-status", "ok")
    await eventually(lambda: is_read(embed.vernis, notification_id))
    (heard,) = await ui.page.evaluate("window.heard")
    assert (heard["bubbles"], heard["composed"], heard["fromElement"]) == (True, True, True)
    detail = heard["detail"]
    assert (detail["toolName"], detail["status"]) == ("mark_notification_read", "ok")
    # The tool gives no sentence of its own: its name and how it ended, never the raw result.
    assert detail["summary"] == "Mark notification read: done."
    assert detail["conversationId"]
    # The host's own page shows it (its listener), and reloaded its list.
    activity = ui.page.locator("#activity li.tool")
    await expect(activity).to_have_text([f"mark_notification_read · ok · {detail['summary']}"])
    await expect(ui.page.locator("#contact-list")).to_have_attribute("data-refreshed", "1")


async def test_open_and_close_are_dispatched_to_the_host(embed: Embed, open_ui: OpenUI) -> None:
    """`vernis:open` / `vernis:close` reach the host for the launcher, the close button, Escape, Ctrl+/ and the element's own open()/close(), once per change."""
    ui = await open_host(open_ui, embed)
    await ui.page.evaluate(
        """() => {
            window.heard = [];
            for (const name of ["vernis:open", "vernis:close"]) {
                window.addEventListener(name, (event) => window.heard.push([event.type, event.bubbles, event.composed]));
            }
        }"""
    )
    state = ui.page.locator("#assistant-state")
    await ui.open()
    await expect(state).to_have_text("open")
    await ui.panel.get_by_role("button", name="Close assistant").click()
    await expect(state).to_have_text("closed")
    await ui.page.keyboard.press("Control+/")
    await expect(ui.panel).to_have_attribute("data-open", "")
    await ui.page.keyboard.press("Escape")
    await expect(state).to_have_text("closed")
    element = ui.page.locator("vernis-assistant")
    await element.evaluate("element => { element.open(); element.open(); }")
    await expect(state).to_have_text("open")
    await element.evaluate("element => { element.close(); element.close(); }")
    await expect(state).to_have_text("closed")
    heard = await ui.page.evaluate("window.heard")
    assert [event for event, *_ in heard] == ["vernis:open", "vernis:close"] * 3
    assert all(bubbles and composed for _, bubbles, composed in heard)


async def test_the_page_context_property_sets_quick_actions_and_messages(
    embed: Embed, open_ui: OpenUI
) -> None:
    """The host sets `element.pageContext` when it shows a contact (no reload): the empty conversation offers "Summarize this contact", and the message carries that context."""
    contact_id = embed.vernis.seed.entities["acme:contact:Jane Cooper"]
    ui = await open_host(open_ui, embed, "/?q=Jane+Cooper")
    frames = Frames(ui)
    await ui.open()
    page_actions = ui.log.get_by_role("list", name="About this page")
    await expect(ui.log.get_by_role("button", name="Search contacts")).to_be_visible()
    await expect(page_actions).to_have_count(0)

    await ui.page.get_by_role("button", name="Jane Cooper").first.click()
    await expect(ui.page.get_by_role("heading", name="Jane Cooper")).to_be_visible()
    await expect(page_actions.get_by_role("button")).to_have_text(["Summarize this contact"])
    element = ui.page.locator("vernis-assistant")
    assert await element.evaluate("element => element.pageContext") == {
        "route": f"/contacts/{contact_id}",
        "entity_type": "contact",
        "entity_id": str(contact_id),
    }
    await ui.page.get_by_role("button", name="← All contacts").click()
    await expect(page_actions).to_have_count(0)
    await ui.page.get_by_role("button", name="Jane Cooper").first.click()

    embed.vernis.scripted.add(Reply("Jane is a customer."), match="summarize")
    await page_actions.get_by_role("button", name="Summarize this contact").click()
    await ui.answered()
    (message,) = frames.of_type("user_message")
    assert message["page_context"] == {
        "route": f"/contacts/{contact_id}",
        "entity_type": "contact",
        "entity_id": str(contact_id),
    }


async def test_page_context_before_the_element_is_defined_and_from_attributes(
    vernis: Vernis, login_page: UI
) -> None:
    """A `pageContext` set before the element's module ran still counts; unset, the `entity-type` / `entity-id` attributes apply, live, and else the page's route."""
    contact_id = str(vernis.seed.entities["acme:contact:Jane Cooper"])
    ui = login_page
    token = vernis.token()
    before = await ui.page.evaluate(
        """async ([token, id]) => {
            const element = document.createElement("vernis-assistant");
            element.pageContext = { route: "/crm/contact", entity_type: "contact", entity_id: id, extra: 1 };
            element.getToken = async () => token;
            document.body.append(element);
            await import("/static/vernis/element.js");
            return element.pageContext;
        }""",
        [token, contact_id],
    )
    assert before == {"route": "/crm/contact", "entity_type": "contact", "entity_id": contact_id}
    await ui.open()
    page_action = ui.log.get_by_role("button", name="Summarize this contact")
    await expect(page_action).to_be_visible()

    element = ui.page.locator("vernis-assistant")
    await element.evaluate("element => { element.pageContext = null; }")
    await expect(page_action).to_have_count(0)
    assert await element.evaluate("element => element.pageContext") == {"route": "/login"}
    await element.evaluate(
        """(element, id) => { element.setAttribute("entity-type", "contact"); element.setAttribute("entity-id", id); }""",
        contact_id,
    )
    await expect(page_action).to_be_visible()
    await element.evaluate("""element => element.removeAttribute("entity-type")""")
    await expect(page_action).to_have_count(0)


@pytest.fixture
async def vernis_client(embed: Embed) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=embed.vernis.http_url) as client:
        yield client


async def test_config_answers_cors_only_for_allowed_origins(
    embed: Embed, vernis_client: httpx.AsyncClient
) -> None:
    """The config's preflight and GET carry CORS headers (Authorization allowed, no credentials) for an allowed origin only; the assistant's files are loadable from anywhere."""
    other = "http://127.0.0.1:9"
    preflight = {"Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"}
    allowed = await vernis_client.options("/api/assistant/config", headers={"Origin": embed.url, **preflight})
    assert allowed.status_code == 204
    assert allowed.headers["access-control-allow-origin"] == embed.url
    assert allowed.headers["access-control-allow-methods"] == "GET"
    assert allowed.headers["access-control-allow-headers"].lower() == "authorization"
    assert "access-control-allow-credentials" not in allowed.headers
    refused = await vernis_client.options("/api/assistant/config", headers={"Origin": other, **preflight})
    assert not [name for name in refused.headers if name.startswith("access-control-")]

    bearer = {"Authorization": f"Bearer {embed.vernis.token()}"}
    response = await vernis_client.get("/api/assistant/config", headers={"Origin": embed.url, **bearer})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == embed.url
    assert response.headers["vary"] == "Origin"
    assert "access-control-allow-credentials" not in response.headers
    unauthenticated = await vernis_client.get("/api/assistant/config", headers={"Origin": embed.url})
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["access-control-allow-origin"] == embed.url
    foreign = await vernis_client.get("/api/assistant/config", headers={"Origin": other, **bearer})
    assert "access-control-allow-origin" not in foreign.headers

    for path in ("/static/vernis/assistant.js", "/static/vernis/element.js", "/static/vendor/marked.js"):
        asset = await vernis_client.get(path, headers={"Origin": other})
        assert asset.status_code == 200, path
        assert asset.headers["access-control-allow-origin"] == "*", path
        assert asset.headers["cross-origin-resource-policy"] == "cross-origin", path


async def test_a_browser_reads_the_config_from_an_allowed_origin_only(embed: Embed, open_ui: OpenUI) -> None:
    """In the browser, the host's allowed origin reads the config cross-origin with its token; a page on an origin not allowed cannot, and its panel gets no socket."""
    fetch = """async ([server, token]) => {
        try {
            const response = await fetch(`${server}/api/assistant/config`, { headers: { Authorization: `Bearer ${token}` } });
            return (await response.json()).name;
        } catch (error) {
            return `refused: ${error.name}`;
        }
    }"""
    token = embed.vernis.token()
    ui = await open_host(open_ui, embed)
    assert await ui.page.evaluate(fetch, [embed.vernis.http_url, token]) == "Vernis"

    # The same host app on another port: an origin the Vernis does not list.
    other_app = embed_host_app(embed.vernis.http_url, embed.vernis.settings)
    async with run_server(other_app) as other_server:
        other = Embed(embed.vernis, f"http://127.0.0.1:{other_server.config.port}")
        stranger = await open_ui(embed.vernis, host=other, email=None, path=None)
        # The browser reports the refused preflight and socket on the console.
        stranger.console_errors_expected = True
        await stranger.goto("/")
        assert await stranger.page.evaluate(fetch, [embed.vernis.http_url, token]) == "refused: TypeError"
        await stranger.launcher.click()
        await expect(stranger.connection).to_have_attribute("data-state", "reconnecting")
        await expect(stranger.log.locator(".quick-action")).to_have_count(0)
        assert any("CORS" in message for message in stranger.console_errors), stranger.console_errors
