"""The demo host app in the browser: login, the CRM pages, and the page context the panel sends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from playwright.async_api import expect

from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, OpenUI
from vernis.model.scripted import Reply
from vernis.model.scripted.scenarios import last_user_text, prompt_text
from vernis_crm.demo.scripted import demo_scenarios


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
    assert last_user_text(request) == "Summarize this contact for me."
    system = prompt_text(request)
    assert "Route (the page's address, as data): " + f'"/contacts/{contact_id}"' in system
    assert "Jane Cooper" in system
    await ui.screenshot("contact-page.png")


@contextmanager
def demo_answers(vernis: Vernis) -> Iterator[None]:
    """The offline demo's own scripted answers (`vernis serve --demo --scripted-model`), for this test only."""
    model = vernis.scripted
    saved = model.scenarios
    model.scenarios = demo_scenarios()
    try:
        yield
    finally:
        model.scenarios = saved


async def open_contact(ui: UI, name: str) -> str:
    contact_id = str(ui.vernis.seed.entities[f"acme:contact:{name}"])
    await ui.goto(f"/contacts/{contact_id}")
    return contact_id


async def test_the_demo_summarizes_the_contact_of_the_page(vernis: Vernis, open_ui: OpenUI) -> None:
    """In the offline demo "Summarize this contact" reads that contact with its tool and shows dates, not ISO strings."""
    ui = await open_ui(vernis, viewport=(1440, 900))
    await open_contact(ui, "Jane Cooper")
    with demo_answers(vernis):
        await ui.open()
        await ui.log.get_by_role("button", name="Summarize this contact").click()
        answer = await ui.answered()
        await expect(answer.locator(".tool-card .tool-name")).to_have_text("Get contact details")
        await expect(answer.locator("strong").first).to_have_text("Jane Cooper")
        text = await answer.inner_text()
        assert "You wrote" not in text
        assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text)
        await ui.screenshot("demo-summarize-contact.png")


async def test_the_demos_tables_have_a_header_and_today_is_today(vernis: Vernis, open_ui: OpenUI) -> None:
    """ "Review today's activity" asks for today alone, and its table has a real header row (no empty one)."""
    ui = await open_ui(vernis, email="owner@acme.test", viewport=(1440, 900))
    with demo_answers(vernis):
        await ui.open()
        await ui.log.locator(".more-actions").click()
        await ui.log.get_by_role("button", name="Review today's activity").click()
        answer = await ui.answered()
        headers = await answer.locator(".markdown th").all_inner_texts()
        assert headers == ["What", "Value"]
        card = answer.locator(".tool-card")
        await card.locator("summary").click()
        arguments = card.locator(".tool-section", has_text="Arguments").locator("dd")
        await expect(arguments.first).to_be_visible()
        days = await arguments.all_inner_texts()
        assert len(days) == 2
        assert days[0] == days[1]
        await ui.screenshot("demo-today.png")


async def test_the_open_panel_pushes_the_page_instead_of_covering_its_header(
    vernis: Vernis, open_ui: OpenUI
) -> None:
    """With layout="push" the open panel narrows the page: the app bar's Sign out stays beside it; closed, the page is whole again."""
    ui = await open_ui(vernis, viewport=(1440, 900))
    sign_out = ui.page.get_by_role("button", name="Sign out")
    before = await sign_out.bounding_box()
    assert before is not None
    await ui.open()
    panel = await ui.panel.bounding_box()
    assert panel is not None
    await expect(ui.page.locator("html")).to_have_attribute("data-vernis-pushed", "")
    await ui.page.wait_for_function(
        "() => Math.abs(document.body.getBoundingClientRect().right - (window.innerWidth - 400)) < 1"
    )
    after = await sign_out.bounding_box()
    assert after is not None
    assert after["x"] + after["width"] <= panel["x"]
    await expect(sign_out).to_be_visible()
    await ui.screenshot("demo-push.png")
    # Full screen covers everything (a dialog); closed, the page takes the whole width again.
    await ui.panel.get_by_role("button", name="Close assistant").click()
    await ui.page.wait_for_function(
        "() => Math.abs(document.body.getBoundingClientRect().right - window.innerWidth) < 1"
    )
    await expect(ui.page.locator("html")).not_to_have_attribute("data-vernis-pushed", "")


async def test_the_pushed_page_follows_the_panel_back_from_full_screen(
    vernis: Vernis, open_ui: OpenUI
) -> None:
    """With layout="push", expanded to full screen then collapsed (button, then Escape), the page is narrowed by the side panel's width again, not by the full screen's."""
    ui = await open_ui(vernis, viewport=(1440, 900))
    await ui.open()
    side = "() => Math.abs(document.body.getBoundingClientRect().right - (window.innerWidth - 400)) < 1"
    await ui.page.wait_for_function(side)
    expand = ui.panel.get_by_role("button", name="Expand to full screen")
    await expand.click()
    await ui.panel.get_by_role("button", name="Collapse to side panel").click()
    await ui.page.wait_for_function(side)
    await expand.click()
    await ui.page.keyboard.press("Escape")
    await ui.page.wait_for_function(side)


async def test_a_long_email_stays_inside_its_card(vernis: Vernis, open_ui: OpenUI) -> None:
    """A contact's very long e-mail address wraps inside its card rather than running out of it."""
    ui = await open_ui(vernis, viewport=(1440, 900))
    await open_contact(ui, "Jane Cooper")
    overflow = await ui.page.evaluate(
        """() => {
            const long = "a.very.long.address.with.many.parts." + "x".repeat(60) + "@example-dental-practice.test";
            const cards = [...document.querySelectorAll(".card")];
            const card = cards.find((c) => c.textContent.includes("@")) || cards[0];
            const item = [...card.querySelectorAll("li, dd, td, p")].find((e) => e.textContent.includes("@")) || card;
            item.firstChild.textContent = long;
            return [...document.querySelectorAll(".card")].map((c) => c.scrollWidth - c.clientWidth);
        }"""
    )
    assert max(overflow) <= 0, overflow
    await ui.screenshot("demo-long-email.png")
