"""The host page's own tools (SPEC §18) in Chromium, on the embed demo's host page: its `navigate`
(through the host's router, limited to the configured routes) and its `fill_contact_form` write
(approved on its card, then run by the page)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from playwright.async_api import expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.ui.conftest import UI, Embed, OpenUI, UIFactory
from tests.utils import free_port, run_server
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis_crm.demo.scripted import demo_scenarios

DOC = Path(__file__).resolve().parents[2] / "docs" / "host-tools.md"


def after_tool(body: Mapping[str, Any]) -> bool:
    return bool(body["messages"]) and body["messages"][-1]["role"] == "tool"


async def open_host(open_ui: OpenUI, embed: Embed) -> tuple[UI, list[dict[str, Any]]]:
    """A tab on the host's page with the panel open and connected; the commands its sockets send."""
    ui = await open_ui(embed.vernis, host=embed, email=None, path=None)
    sent: list[dict[str, Any]] = []
    ui.page.on(
        "websocket", lambda socket: socket.on("framesent", lambda payload: sent.append(json.loads(payload)))
    )
    await ui.goto("/")
    await ui.open()
    return ui, sent


async def test_the_host_navigation_tool_opens_a_configured_route_only(embed: Embed, open_ui: OpenUI) -> None:
    """The model's `navigate` to /contacts/{id} runs the host's router (the page shows that contact); a `javascript:` path is refused by the server against the declared routes and never reaches the page."""
    ui, sent = await open_host(open_ui, embed)
    first = ui.page.locator("#contact-list button.contact").first
    contact_id = await first.get_attribute("data-id")
    name = await first.get_attribute("data-name")
    embed.vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("navigate", {"path": f"/contacts/{contact_id}"})]),
        match="open the first contact",
    )
    embed.vernis.scripted.add(Reply("It is open."), match=after_tool)
    await ui.send("open the first contact")
    await ui.answered()
    await expect(ui.page.locator("#contact")).to_be_visible()
    await expect(ui.page.locator("#contact-title")).to_have_text(name or "")
    card = ui.log.locator(".tool-card").last
    await expect(card).to_have_attribute("data-status", "ok")
    declared = [frame for frame in sent if frame["type"] == "client_tools"][-1]["tools"]
    navigate = next(tool for tool in declared if tool["name"] == "navigate")
    assert "/contacts/{id}" in navigate["description"]
    results = [frame for frame in sent if frame["type"] == "client_tool_result"]
    assert results == [
        {
            "type": "client_tool_result",
            "call_id": results[0]["call_id"],
            "ok": True,
            "data": {"navigated": f"/contacts/{contact_id}"},
        }
    ]

    await ui.page.locator("#back").click()
    embed.vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("navigate", {"path": "javascript:alert(1)"})]),
        match="go elsewhere",
    )
    embed.vernis.scripted.add(Reply("That page is not allowed."), match=after_tool)
    await ui.send("go elsewhere")
    await ui.answered(2)
    card = ui.log.locator(".tool-card").last
    await expect(card).to_have_attribute("data-status", "error")
    await expect(ui.page.locator("#contact")).to_be_hidden()
    assert len([frame for frame in sent if frame["type"] == "client_tool_result"]) == 1
    assert ui.errors == []


async def test_a_host_write_tool_runs_only_once_approved(embed: Embed, open_ui: OpenUI) -> None:
    """`fill_contact_form` (write: true) shows its arguments on an approval card and the form stays closed; approving it opens the host's form prefilled and the card ends ok."""
    ui, sent = await open_host(open_ui, embed)
    fields = {"first_name": "Ada", "last_name": "Lovelace", "company": "Analytical Engines"}
    embed.vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("fill_contact_form", fields)]), match="new contact for Ada"
    )
    embed.vernis.scripted.add(Reply("Approve it and the form opens."), match=after_tool)
    await ui.send("start a new contact for Ada")
    await ui.answered()
    card = ui.log.locator(".tool-card").last
    await expect(card).to_have_attribute("data-status", "needs_confirmation")
    await expect(card).to_contain_text("Analytical Engines")
    form = ui.page.locator("#new-contact")
    await expect(form).to_be_hidden()
    assert not [frame for frame in sent if frame["type"] == "client_tool_result"]

    await card.get_by_role("button", name="Approve").click()
    await expect(card).to_have_attribute("data-status", "ok")
    await expect(form).to_be_visible()
    await expect(ui.page.locator("#nc-first-name")).to_have_value("Ada")
    await expect(ui.page.locator("#nc-last-name")).to_have_value("Lovelace")
    await expect(ui.page.locator("#nc-company")).to_have_value("Analytical Engines")
    await expect(ui.page.locator("#nc-email")).to_have_value("")
    (result,) = [frame for frame in sent if frame["type"] == "client_tool_result"]
    assert result["data"] == {"opened": True, "prefilled": ["first_name", "last_name", "company"]}
    assert ui.errors == []


async def test_the_offline_demo_model_tries_both_host_tools(embed: Embed, open_ui: OpenUI) -> None:
    """With the offline demo's scenarios, "Open Jane Cooper's page" searches then navigates the host page to her, and "New contact form for Ada Lovelace" opens the host's form once approved."""
    model = embed.vernis.scripted
    scenarios = model.scenarios
    model.scenarios = demo_scenarios()
    try:
        ui, _ = await open_host(open_ui, embed)
        await ui.send("Open Jane Cooper's page")
        await ui.answered()
        await expect(ui.page.locator("#contact")).to_be_visible()
        await expect(ui.page.locator("#contact-title")).to_have_text("Jane Cooper")

        await ui.send("New contact form for Ada Lovelace")
        await ui.answered(2)
        card = ui.log.locator(".tool-card").last
        await expect(card).to_have_attribute("data-status", "needs_confirmation")
        await card.get_by_role("button", name="Approve").click()
        await expect(ui.page.locator("#new-contact")).to_be_visible()
        await expect(ui.page.locator("#nc-first-name")).to_have_value("Ada")
        await expect(ui.page.locator("#nc-last-name")).to_have_value("Lovelace")
        assert ui.errors == []
    finally:
        model.scenarios = scenarios


def documented(language: str) -> str:
    """The first code block in `language` of docs/host-tools.md."""
    found = re.search(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
    assert found is not None, language
    return found.group(1)


async def test_the_documented_host_page_works_as_written(
    ui_factory: UIFactory, open_ui: OpenUI, tmp_path: Path
) -> None:
    """The host page and configuration of docs/host-tools.md, served as written (only the server's origin and the token endpoint are this test's): its read tool, its write tool once approved, its navigation, its renderer, prefill and send all work."""
    config = tmp_path / "vernis.toml"
    config.write_text(documented("toml"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with ui_factory(allowed_origins=[url], config=config) as vernis:
        page = documented("html").replace("https://vernis.example.com", vernis.http_url)
        token = vernis.token()

        async def home(request: Request) -> Response:
            return HTMLResponse(page)

        async def vernis_token(request: Request) -> Response:
            return PlainTextResponse(token)

        async def icon(request: Request) -> Response:
            return Response(status_code=204)  # what the browser asks a page without one

        host = Starlette(
            routes=[Route("/", home), Route("/my/vernis-token", vernis_token), Route("/favicon.ico", icon)]
        )
        async with run_server(host, port=port):
            ui = await open_ui(vernis, host=Embed(vernis, url), email=None, path="/")
            await ui.open()
            await ui.page.get_by_label("T-9 · Login loop").check()
            vernis.scripted.add(Reply(tool_calls=[ScriptedToolCall("selected_tickets", {})]), match="ticked")
            vernis.scripted.add(Reply("You ticked T-9."), match=after_tool)
            await ui.send("which tickets have I ticked?")
            await ui.answered()
            await expect(ui.log.locator(".tool-card").last).to_have_attribute("data-status", "ok")
            chat = [body for body in vernis.scripted.requests if body.get("tools")]
            tool_messages = [m for m in chat[-1]["messages"] if m["role"] == "tool"]
            assert json.loads(tool_messages[-1]["content"])["data"] == {"tickets": ["T-9"]}

            arguments = {"subject": "Printer on fire again", "priority": "high"}
            vernis.scripted.add(
                Reply(tool_calls=[ScriptedToolCall("open_ticket_form", arguments)]), match="new ticket"
            )
            vernis.scripted.add(Reply("Approve it to open the form."), match=after_tool)
            await ui.send("a new ticket about the printer")
            await ui.answered(2)
            card = ui.log.locator(".tool-card").last
            await expect(card).to_have_attribute("data-status", "needs_confirmation")
            await expect(ui.page.locator("#new-ticket")).to_be_hidden()
            await card.get_by_role("button", name="Approve").click()
            await expect(card).to_have_attribute("data-status", "ok")
            await expect(ui.page.locator("#new-ticket")).to_be_visible()
            await expect(ui.page.get_by_label("Subject")).to_have_value("Printer on fire again")
            await expect(ui.page.get_by_label("Priority")).to_have_value("high")
            await ui.answered(3)  # the answer that read the approved call's outcome

            vernis.scripted.add(
                Reply(tool_calls=[ScriptedToolCall("navigate", {"path": "/reports/weekly"})]), match="weekly"
            )
            vernis.scripted.add(Reply("Here is the weekly report."), match=after_tool)
            await ui.send("show me the weekly report")
            await ui.answered(4)
            await expect(ui.log.locator(".tool-card").last).to_have_attribute("data-status", "ok")
            assert ui.page.url == f"{url}/reports/weekly"

            assert await ui.page.evaluate("document.querySelector('vernis-assistant').renderers.size") == 1
            await ui.page.locator("#tickets").dblclick()
            await expect(ui.input).to_have_value("Summarize the tickets I ticked")

            # The host starts a message itself: it is sent and answered like a typed one.
            vernis.scripted.add(Reply("Hello, host."), match="from the host")
            sent = await ui.page.evaluate(
                "document.querySelector('vernis-assistant').send('Hello from the host')"
            )
            assert sent is True
            await expect(await ui.answered(5)).to_contain_text("Hello, host.")
            await expect(ui.log.locator(".msg.user").last).to_contain_text("Hello from the host")
