"""Reviews in the panel (SPEC §23), two browsers: the member's card waits for a reviewer, the admin's
Reviews view lists the request and answers it, and the member's conversation goes on."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from playwright.async_api import WebSocket, expect

from tests.e2e.test_reviews import a_contact, continuing, sent, sms
from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, OpenUI, UIFactory, eventually


def after_tool(body: Mapping[str, Any]) -> bool:
    return bool(body["messages"]) and body["messages"][-1]["role"] == "tool"


async def ask_and_approve(member: UI, body: str) -> None:
    """The member asks for an SMS and approves its card: it says it waits for a reviewer."""
    vernis = member.vernis
    tag = uuid.uuid4().hex[:6]
    vernis.scripted.add(sms(await a_contact(vernis), body), match=f"text {tag}")
    vernis.scripted.add("Shall I send it? Approve the change above.", match=after_tool)
    await member.open()
    await member.send(f"please text {tag}")
    await member.answered()
    card = member.log.locator(".tool-card")
    await card.locator(".confirm").get_by_role("button", name="Approve").click()
    await expect(card).to_have_attribute("data-status", "review_requested")
    await expect(card.locator(".tool-status")).to_have_text("Waiting for a reviewer")
    await expect(card.locator(".confirm-outcome")).to_contain_text("Waiting for a reviewer")


async def test_a_reviewer_approves_in_the_reviews_view_and_the_requesters_conversation_goes_on(
    vernis: Vernis, open_ui: OpenUI
) -> None:
    """The member's approved SMS waits ("waiting for a reviewer", also after a reload); the admin's Reviews view shows it live with a count, the admin approves it with a note; the member's card ends done and a new answer follows, not taken for a version of the earlier one; the admin's list empties."""
    member = await open_ui(vernis)
    admin = await open_ui(vernis, email="admin@acme.test")
    await admin.open()
    toggle = admin.panel.locator(".reviews-toggle")
    await expect(toggle).to_be_visible()
    await expect(member.panel.locator(".reviews-toggle")).to_be_hidden()

    body = f"See you at 3pm {uuid.uuid4().hex[:6]}"
    await ask_and_approve(member, body)
    await member.page.reload()
    await member.connected()
    await expect(member.log.locator(".tool-card")).to_have_attribute("data-status", "review_requested")
    assert await sent(vernis, body) == 0

    await expect(toggle.locator(".reviews-count")).to_have_text("1")
    await toggle.click()
    review = admin.panel.locator(".reviews .review")
    await expect(review).to_have_count(1)
    await expect(review).to_contain_text(body)
    await expect(review.locator(".review-asked")).to_contain_text("Asked by Priya Raman")
    await admin.screenshot("review.png")
    vernis.scripted.add("Your SMS was approved and is on its way.", match=continuing)
    await review.locator(".review-note").fill("Fine by me.")
    await review.get_by_role("button", name="Approve").click()

    await expect(admin.panel.locator(".reviews .review")).to_have_count(0)
    await expect(admin.panel.locator(".reviews-status")).to_have_text("Nothing waits for your review.")
    card = member.log.locator(".tool-card")
    await expect(card).to_have_attribute("data-status", "ok")
    last = await member.answered(2)
    await expect(last).to_contain_text("Your SMS was approved and is on its way.")
    await expect(member.log.locator(".versions")).to_have_count(0)
    await eventually(lambda: _sent_once(vernis, body))
    await member.page.reload()
    await member.connected()
    await expect(member.answers()).to_have_count(2)
    await expect(member.log.locator(".versions")).to_have_count(0)
    await expect(member.log.locator(".tool-card")).to_have_attribute("data-status", "ok")


async def test_a_rejection_with_a_note_ends_the_requesters_card(vernis: Vernis, open_ui: OpenUI) -> None:
    """Rejected in the Reviews view with a note: the member's card ends rejected and shows the note; nothing is sent."""
    member = await open_ui(vernis)
    admin = await open_ui(vernis, email="admin@acme.test")
    body = f"Free upgrade {uuid.uuid4().hex[:6]}"
    await ask_and_approve(member, body)
    await admin.open()
    await admin.panel.locator(".reviews-toggle").click()
    review = admin.panel.locator(".reviews .review")
    vernis.scripted.add("The reviewer declined it.", match=continuing)
    await review.locator(".review-note").fill("We do not give upgrades by SMS.")
    await review.get_by_role("button", name="Reject").click()
    card = member.log.locator(".tool-card")
    await expect(card).to_have_attribute("data-status", "rejected")
    await expect(card.locator(".confirm-outcome")).to_have_text("Rejected. Nothing was changed.")
    await card.locator("summary").click()
    await expect(card.locator(".tool-value").last).to_contain_text("We do not give upgrades by SMS.")
    await member.answered(2)
    assert await sent(vernis, body) == 0


async def test_an_expired_request_ends_the_card_and_tells_the_host(
    ui_factory: UIFactory, open_ui: OpenUI
) -> None:
    """With a short VERNIS_REVIEW_TTL and no reviewer acting, the member's card ends "Expired" and the host page hears vernis:tool-completed with status expired and why; while it waited, the host heard nothing."""
    async with ui_factory(review_ttl=2.0) as vernis:
        member = await open_ui(vernis)
        await member.page.evaluate(
            """() => {
                window.heard = [];
                document.addEventListener("vernis:tool-completed", (event) => window.heard.push(event.detail));
            }"""
        )
        body = f"Expiring {uuid.uuid4().hex[:6]}"
        await ask_and_approve(member, body)
        assert await member.page.evaluate("window.heard") == [], "waiting for a reviewer is not an end"
        card = member.log.locator(".tool-card")
        await expect(card).to_have_attribute("data-status", "expired")
        await expect(card.locator(".tool-status")).to_have_text("Expired")
        await expect(card.locator(".confirm-outcome")).to_have_text("Expired. Nothing was changed.")
        (heard,) = await member.page.evaluate("window.heard")
        assert (heard["toolName"], heard["status"]) == ("send_sms", "expired")
        assert "No reviewer answered" in heard["summary"]
        assert await sent(vernis, body) == 0
        await member.page.close()


async def _sent_once(vernis: Vernis, body: str) -> bool:
    return await sent(vernis, body) == 1


async def reviewer_with_a_request(vernis: Vernis, open_ui: OpenUI) -> tuple[UI, list[WebSocket]]:
    """The admin's panel, open, with one request waiting (the member's approved SMS), and the admin
    page's sockets as they open."""
    member = await open_ui(vernis)
    admin = await open_ui(vernis, email="admin@acme.test")
    sockets: list[WebSocket] = []
    admin.page.on("websocket", lambda socket: sockets.append(socket))
    await ask_and_approve(member, f"Free upgrade {uuid.uuid4().hex[:6]}")
    await admin.open()
    return admin, sockets


async def test_a_note_being_typed_survives_a_fresh_list(vernis: Vernis, open_ui: OpenUI) -> None:
    """A review list that arrives while the reviewer types a note (the view reopened) keeps the note and the request's element."""
    admin, sockets = await reviewer_with_a_request(vernis, open_ui)
    toggle = admin.panel.locator(".reviews-toggle")
    await toggle.click()
    review = admin.panel.locator(".reviews .review")
    await review.locator(".review-note").fill("Half a tho")
    await review.evaluate("element => { element.dataset.marked = 'yes'; }")
    await toggle.click()
    async with sockets[-1].expect_event("framereceived", lambda frame: '"review_list"' in frame):
        await toggle.click()
    await expect(review).to_have_attribute("data-marked", "yes")
    await expect(review.locator(".review-note")).to_have_value("Half a tho")


async def test_a_fresh_list_keeps_the_focus_in_the_note_being_typed(vernis: Vernis, open_ui: OpenUI) -> None:
    """A review list that arrives mid-note leaves the caret in the note: the rest of the typing lands there."""
    admin, sockets = await reviewer_with_a_request(vernis, open_ui)
    await admin.panel.locator(".reviews-toggle").click()
    note = admin.panel.locator(".reviews .review .review-note")
    await note.click()
    await admin.page.keyboard.type("Half a tho")
    async with sockets[-1].expect_event("framereceived", lambda frame: '"review_list"' in frame):
        await admin.page.locator("vernis-assistant").evaluate("element => element.session.listReviews()")
    await admin.page.keyboard.type("usand")
    await expect(note).to_have_value("Half a thousand")
