"""The demo host app in the browser: login, the CRM pages, and the page context the panel sends."""

from __future__ import annotations

from playwright.async_api import expect

from tests.fixtures.server import Vernis
from tests.ui.conftest import OpenUI
from vernis.scripted import Reply
from vernis.scripted.scenarios import system_text


async def test_login_sets_the_cookie_and_opens_the_crm(vernis: Vernis, open_ui: OpenUI) -> None:
    """Signing in as a demo member sets an HttpOnly, SameSite=Lax `vernis_token` cookie and lands on the contacts with the assistant."""
    ui = await open_ui(vernis, email=None, path=None)
    await ui.page.goto(ui.url + "/")
    await expect(ui.page).to_have_url(ui.url + "/login")
    await ui.page.get_by_role("button", name="Priya Raman").click()
    await expect(ui.page).to_have_url(ui.url + "/contacts")
    await expect(ui.page.get_by_role("heading", name="Contacts")).to_be_visible()
    (cookie,) = [c for c in await ui.context.cookies() if c["name"] == "vernis_token"]
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Lax"
    assert cookie["path"] == "/"
    # The page's scripts cannot read it.
    assert "vernis_token" not in await ui.page.evaluate("() => document.cookie")
    await ui.open()
    await expect(ui.title).to_have_text("New conversation")
    await ui.page.get_by_role("navigation", name="Main").get_by_role("link", name="Calls").click()
    await expect(ui.page.get_by_role("heading", name="Calls")).to_be_visible()


async def test_summarize_this_contact_on_a_contact_page(vernis: Vernis, open_ui: OpenUI) -> None:
    """On a contact's page the panel offers "Summarize this contact" and the model's request carries that page's route and contact."""
    contact_id = str(vernis.seed.entities["acme:contact:Jane Cooper"])
    ui = await open_ui(vernis)
    await ui.page.get_by_role("searchbox", name="Search contacts").fill("Jane Cooper")
    await ui.page.get_by_role("button", name="Search").click()
    await ui.page.get_by_role("link", name="Jane Cooper", exact=True).click()
    await expect(ui.page).to_have_url(f"{ui.url}/contacts/{contact_id}")
    await expect(ui.page.locator("body")).to_have_attribute("data-entity-type", "contact")
    await expect(ui.page.locator("body")).to_have_attribute("data-entity-id", contact_id)
    await expect(ui.page.get_by_role("heading", name="Jane Cooper")).to_be_visible()

    vernis.scripted.add(
        Reply("Jane Cooper is a patient at Hudson Yards Capital."), match="Summarize this contact"
    )
    await ui.open()
    await ui.log.get_by_role("button", name="Summarize this contact").click()
    await expect(await ui.answered()).to_contain_text("Jane Cooper is a patient")
    request = next(r for r in vernis.scripted.requests if r.get("tools"))
    assert request["messages"][-1] == {"role": "user", "content": "Summarize this contact for me."}
    system = system_text(request)
    assert f"Route: /contacts/{contact_id}" in system
    assert "Jane Cooper" in system
    await ui.screenshot("contact-page.png")
