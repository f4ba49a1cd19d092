"""UI blocks in the panel (SPEC §16), in Chromium: the CRM's contact search as a paged table, a
contact's details as an entity card, the dashboard's figures and links; drawn the same after a reload."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from playwright.async_api import expect

from tests.ui.conftest import UI, Embed, OpenUI
from vernis.model.scripted import Reply, ScriptedToolCall


def after_tool(body: Mapping[str, Any]) -> bool:
    return bool(body["messages"]) and body["messages"][-1]["role"] == "tool"


async def ask_for_blocks(ui: UI) -> str:
    """One answer reads the dashboard, 50 contacts and Jane Cooper's details; returns Jane's id."""
    jane = str(ui.vernis.seed.entities["acme:contact:Jane Cooper"])
    calls = [
        ScriptedToolCall("get_dashboard_stats", {}, call_id="call_stats"),
        ScriptedToolCall("search_contacts", {"limit": 50}, call_id="call_search"),
        ScriptedToolCall("get_contact_details", {"contact_id": jane}, call_id="call_jane"),
    ]
    ui.vernis.scripted.add(Reply("Looking.", tool_calls=calls), match="overview please")
    ui.vernis.scripted.add("Here is the overview.", match=after_tool)
    await ui.open()
    await ui.send("an overview please")
    await ui.answered()
    return jane


async def test_each_block_kind_is_drawn_accessibly_and_again_after_a_reload(ui: UI) -> None:
    """A table with column headers paged by 20 rows, an entity card with its fields and link, a figures strip and link buttons; after a reload the blocks' markup is identical."""
    jane = await ask_for_blocks(ui)
    table = ui.log.locator('.ui-block[data-kind="table"]')
    await expect(table.get_by_role("columnheader")).to_have_text(["Name", "Company", "E-mail", "Phone"])
    await expect(table.locator("tbody tr")).to_have_count(20)
    status = table.locator(".ui-table-status")
    await expect(status).to_contain_text("1\N{EN DASH}20 of ")
    await expect(table.get_by_role("button", name="Previous")).to_be_disabled()
    # Each cell takes the direction of its own text (a right-to-left name reads right to left).
    for cell in ("th", "td"):
        await expect(table.locator(cell).first).to_have_attribute("dir", "auto")

    card = ui.log.locator('.ui-block[data-kind="entity"]').get_by_role("region", name="Jane Cooper")
    await expect(card.get_by_role("link", name="Jane Cooper")).to_have_attribute("href", f"/contacts/{jane}")
    await expect(card.locator("dt").first).to_have_text("Company")

    figures = ui.log.locator('.ui-block[data-kind="metrics"]').get_by_role("list", name="Figures")
    await expect(figures.locator(".ui-metric-label")).to_have_text(
        ["Calls", "Missed calls", "Messages", "New contacts", "Open tasks", "Overdue tasks"]
    )
    nav = ui.log.locator('.ui-block[data-kind="links"]').get_by_role("navigation", name="Links")
    await expect(nav.get_by_role("link")).to_have_text(["Contacts", "Calls"])
    await expect(nav.get_by_role("link", name="Calls")).to_have_attribute("href", "/calls")
    await ui.screenshot("ui-blocks.png")

    live = await ui.log.locator(".ui-blocks").evaluate_all("blocks => blocks.map(b => b.outerHTML)")
    assert len(live) == 3
    await table.get_by_role("button", name="Next").click()
    await expect(status).to_contain_text("21\N{EN DASH}40 of ")
    await expect(table.get_by_role("button", name="Previous")).to_be_enabled()

    await ui.page.reload()
    await ui.connected()
    await ui.answered()
    replayed = await ui.log.locator(".ui-blocks").evaluate_all("blocks => blocks.map(b => b.outerHTML)")
    assert replayed == live


async def ask_for_a_call(ui: UI) -> None:
    call_id = str(ui.vernis.seed.entities["acme:call:Jane Cooper"])
    ui.vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("get_call_details", {"call_id": call_id})]), match="that call"
    )
    ui.vernis.scripted.add("That was the call.", match=after_tool)
    await ui.open()
    await ui.send("tell me about that call")
    await ui.answered()


async def test_a_toolkit_kind_is_drawn_by_the_host_pages_renderer(embed: Embed, open_ui: OpenUI) -> None:
    """On the embed demo page the CRM's crm.call_summary block is drawn by the renderer the host registered, inside the panel, again after a reload."""
    ui = await open_ui(embed.vernis, host=embed, email=None, path="/")
    await ask_for_a_call(ui)
    card = ui.log.locator('.ui-block[data-kind="crm.call_summary"] .northwind-call')
    await expect(card.get_by_role("heading")).to_contain_text("call · ")
    await expect(card.get_by_role("link", name="Jane Cooper")).to_have_attribute(
        "href", re.compile(r"^/contacts/")
    )
    await ui.page.reload()
    await ui.connected()
    await ui.answered()
    await expect(card).to_have_count(1)


async def test_without_a_renderer_a_toolkit_kind_shows_its_fields(ui: UI) -> None:
    """On a page that registered no renderer, the crm.call_summary block shows as labelled values."""
    await ask_for_a_call(ui)
    block = ui.log.locator('.ui-block[data-kind="crm.call_summary"]')
    await expect(block).to_contain_text("Jane Cooper")
    await expect(block.locator(".northwind-call")).to_have_count(0)
