"""The empty conversation's quick actions and the assistant's name come from the server's
`GET /api/assistant/config` (SPEC §11, §14): filtered by the member's permissions there, and by the
entity type of the page here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Route, expect

from tests.e2e.test_demo import QUICK_ACTIONS as DEMO_QUICK_ACTIONS
from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, OpenUI, UIFactory
from vernis.model.scripted import Reply

WRITES = ["Send an SMS", "Create a new contact"]


async def server_config(vernis: Vernis, email: str) -> dict[str, Any]:
    """What `/api/assistant/config` answers the member, asked with their Bearer token."""
    async with httpx.AsyncClient(base_url=vernis.http_url) as client:
        response = await client.get(
            "/api/assistant/config", headers={"Authorization": f"Bearer {vernis.token(email)}"}
        )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def general_labels(config: dict[str, Any]) -> list[str]:
    return [action["label"] for action in config["quick_actions"] if not action["entity_types"]]


def general_list(ui: UI) -> Any:
    return ui.log.get_by_role("list", name="Quick actions", exact=True).get_by_role("button")


async def every_general(ui: UI) -> Any:
    """The general quick actions, all of them: "More" pressed when the first four hide the rest."""
    await expect(general_list(ui).first).to_be_visible()
    more = ui.log.locator(".more-actions")
    if await more.count():
        await more.click()
    return general_list(ui)


def page_list(ui: UI) -> Any:
    return ui.log.get_by_role("list", name="About this page", exact=True).get_by_role("button")


async def test_the_quick_actions_shown_are_the_ones_the_server_allows(
    vernis: Vernis, open_ui: OpenUI
) -> None:
    """A viewer's panel offers exactly the server's actions for a viewer (no "Send an SMS", no "Create a new contact"); an owner's offers them."""
    for email, has_writes in (("viewer@acme.test", False), ("owner@acme.test", True)):
        expected = general_labels(await server_config(vernis, email))
        assert [label for label in WRITES if label in expected] == (WRITES if has_writes else []), email
        ui = await open_ui(vernis, email=email)
        await ui.open()
        await expect(await every_general(ui)).to_have_text(expected)
        for label in WRITES:
            await expect(ui.log.get_by_role("button", name=label)).to_have_count(1 if has_writes else 0)
        await ui.screenshot(f"quick-actions-{email.split('@')[0]}.png")


async def test_summarize_this_contact_only_on_a_contact_page(vernis: Vernis, open_ui: OpenUI) -> None:
    """The contact list offers no page action; a contact's page offers "Summarize this contact" alone under "About this page"."""
    ui = await open_ui(vernis, path="/contacts")
    await ui.open()
    await expect(general_list(ui).first).to_be_visible()
    await expect(ui.log.get_by_role("list", name="About this page")).to_have_count(0)
    await expect(ui.log.get_by_role("button", name="Summarize this contact")).to_have_count(0)

    contact_id = vernis.seed.entities["acme:contact:Jane Cooper"]
    await ui.goto(f"/contacts/{contact_id}")
    await ui.connected()
    await expect(page_list(ui)).to_have_text(["Summarize this contact"])
    await expect(await every_general(ui)).to_have_text(
        general_labels(await server_config(vernis, "member@acme.test"))
    )
    # The page's own action comes first, where the keyboard reaches it first.
    await expect(ui.log.locator(".quick-action").first).to_have_text("Summarize this contact")
    await ui.screenshot("quick-actions-contact-page.png")


async def test_the_launcher_and_panel_show_the_configured_name(
    ui_factory: UIFactory, open_ui: OpenUI, tmp_path: Path
) -> None:
    """With `[assistant] name = "Ada"` the launcher reads "Ask Ada", the panel names Ada, and a configured quick action joins the toolkit's."""
    config = tmp_path / "vernis.toml"
    config.write_text(
        '[assistant]\nname = "Ada"\n\n'
        '[[quick_actions]]\nlabel = "Front desk briefing"\nprompt = "Brief me for the front desk."\n',
        encoding="utf-8",
    )
    async with ui_factory(config=config) as vernis:
        ui = await open_ui(vernis)
        await expect(ui.page.get_by_role("button", name="Ask Ada")).to_be_visible()
        await expect(ui.launcher).to_have_text("Ask Ada")
        await expect(ui.launcher).to_have_attribute("title", "Ask Ada (Ctrl+/)")
        await ui.screenshot("launcher-named.png")
        await ui.open()
        await expect(ui.panel.locator(".assistant-name")).to_have_text("Ada")
        await expect(ui.input).to_have_attribute("placeholder", "Message Ada…")
        await expect((await every_general(ui)).last).to_have_text("Front desk briefing")
        # Keyboard use and the ARIA names are unchanged.
        await expect(ui.page.get_by_role("dialog", name="New conversation")).to_be_visible()
        await ui.page.keyboard.press("Escape")
        await expect(ui.launcher).to_be_focused()
        await expect(ui.page.get_by_role("button", name="Ask Ada")).to_be_visible()
        await ui.page.keyboard.press("Control+/")
        await expect(ui.panel).to_have_attribute("data-open", "")
        await ui.screenshot("panel-named.png")


async def test_without_the_configuration_the_panel_works_without_quick_actions(
    vernis: Vernis, open_ui: OpenUI
) -> None:
    """When the config request fails the panel shows no quick actions and the default name, still answers, and asks again on the next connection."""
    ui = await open_ui(vernis, path=None)
    # The browser itself logs the refused request; nothing else may reach the console.
    ui.console_errors_expected = True

    async def refuse(route: Route) -> None:
        await route.fulfill(status=503, json={"error": {"code": "unavailable", "message": "down"}})

    await ui.page.route("**/api/assistant/config", refuse)
    await ui.goto("/contacts")
    await ui.open()
    await expect(ui.log.locator(".empty-title")).to_have_text("How can I help?")
    await expect(ui.log.locator(".quick-action")).to_have_count(0)
    await expect(ui.launcher).to_have_text("Ask Vernis")
    await ui.screenshot("panel-no-config.png")

    await ui.page.unroute("**/api/assistant/config", refuse)
    await ui.page.locator("vernis-assistant").evaluate("element => element.connection.drop()")
    await ui.connected()
    await expect(general_list(ui).first).to_be_visible()

    ui.vernis.scripted.add(Reply("Still working."), match="anyone there")
    await ui.send("anyone there?")
    await expect(await ui.answered()).to_contain_text("Still working.")
    assert ui.console_errors, "the refused request was expected on the console"
    assert all("503" in message for message in ui.console_errors), ui.console_errors


async def test_a_host_token_from_get_token_is_sent_as_a_bearer_token(vernis: Vernis, open_ui: OpenUI) -> None:
    """On a page without the cookie, the host's `getToken()` authenticates the config (Authorization: Bearer) and the socket."""
    ui = await open_ui(vernis, email=None, path="/login", assistant=False)
    token = vernis.token("viewer@acme.test")
    async with ui.page.expect_request("**/api/assistant/config") as requested:
        await ui.page.evaluate(
            """async (token) => {
                await import("/static/vernis/element.js");
                const element = document.createElement("vernis-assistant");
                element.getToken = async () => token;
                document.body.append(element);
            }""",
            token,
        )
    headers = await (await requested.value).all_headers()
    assert headers["authorization"] == f"Bearer {token}"
    assert "cookie" not in headers
    await ui.open()
    await expect(await every_general(ui)).to_have_text(
        general_labels(await server_config(vernis, "viewer@acme.test"))
    )


async def test_the_offline_demo_knows_every_read_quick_action(vernis: Vernis) -> None:
    """Every general quick action the server sends sends a prompt; the read ones are exactly those the scripted demo maps to a tool."""
    actions = (await server_config(vernis, "owner@acme.test"))["quick_actions"]
    prompts = [action["prompt"] for action in actions if not action["entity_types"]]
    assert len(prompts) == 9
    assert all(prompt.strip() for prompt in prompts)
    demo = [prompt for prompt, _tool in DEMO_QUICK_ACTIONS]
    assert [prompt for prompt in prompts if prompt in demo] == demo
    contact = [action for action in actions if "contact" in action["entity_types"]]
    assert contact == [
        {
            "label": "Summarize this contact",
            "prompt": "Summarize this contact for me.",
            "entity_types": ["contact"],
        }
    ]


async def test_a_malformed_configuration_is_read_as_far_as_it_goes(login_page: UI) -> None:
    """The client keeps the well-formed actions of a config, falls back to "Vernis" for a bad name, and splits general from page actions."""
    result = await login_page.page.evaluate(
        """async () => {
            const { parseConfig, quickActionsFor } = await import("/static/vernis/config.js");
            const config = parseConfig({
                name: "  ",
                scripted: "yes",
                quick_actions: [
                    { label: "Everywhere", prompt: "a", entity_types: [] },
                    { label: "On tickets", prompt: "b", entity_types: ["ticket"] },
                    { label: "", prompt: "c" },
                    { label: "No prompt" },
                    null,
                    { label: "Old server", prompt: "d" },
                ],
            });
            const labels = (actions) => actions.map((action) => action.label);
            const ticket = quickActionsFor(config.quickActions, "ticket");
            const none = quickActionsFor(config.quickActions, undefined);
            return {
                name: config.name,
                scripted: config.scripted,
                ticket: [labels(ticket.general), labels(ticket.page)],
                none: [labels(none.general), labels(none.page)],
                broken: parseConfig("not json").quickActions.length,
            };
        }"""
    )
    assert result == {
        "name": "Vernis",
        "scripted": False,
        "ticket": [["Everywhere", "Old server"], ["On tickets"]],
        "none": [["Everywhere", "Old server"], []],
        "broken": 0,
    }
