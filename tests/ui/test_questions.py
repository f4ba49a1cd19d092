"""Questions in a form (SPEC §17) in the panel: answered with the keyboard alone, and after a reload."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from playwright.async_api import expect

from tests.ui.conftest import UI, Embed, OpenUI
from tests.ui.test_accessibility import audit
from tests.ui.test_theme import open_themed
from vernis.model.scripted import Reply, ScriptedToolCall

FORM: dict[str, Any] = {
    "title": "Plan the follow-up",
    "questions": [
        {"id": "topic", "label": "What is it about?", "type": "text", "required": True},
        {"id": "channel", "label": "How?", "type": "choice", "options": ["Call", "SMS"], "required": True},
        {
            "id": "prepare",
            "label": "Ready beforehand",
            "type": "multi_choice",
            "options": ["Notes", "Invoice"],
        },
        {"id": "minutes", "label": "Minutes", "type": "number"},
        {"id": "remind", "label": "Remind me?", "type": "boolean"},
        {"id": "day", "label": "Which day?", "type": "date"},
    ],
}


def answered(body: Mapping[str, Any]) -> bool:
    """The request of the answer that follows the user's form."""
    return "you asked with ask_user" in str(body["messages"][0]["content"])


async def test_a_question_is_answered_with_the_keyboard_alone(ui: UI) -> None:
    """The form takes focus, Enter with a required field empty shows its error and keeps focus there, Tab/arrows/Space fill every kind of field, Enter sends; the answers show as the user's reply, the assistant goes on, and a reload shows the same."""
    ui.vernis.scripted.add(
        Reply("A few questions first.", tool_calls=[ScriptedToolCall("ask_user", FORM)]),
        match="plan a follow-up",
    )
    ui.vernis.scripted.add("Booked: an SMS about the renewal.", match=answered)
    keyboard = ui.page.keyboard
    await keyboard.press("Control+/")
    await ui.connected()
    await expect(ui.input).to_be_focused()
    await keyboard.type("plan a follow-up")
    await keyboard.press("Enter")
    await ui.answered()

    card = ui.log.locator(".tool-card")
    await expect(card).to_have_attribute("data-status", "needs_answer")
    await expect(card.locator(".tool-status")).to_have_text("Waiting for your answers")
    form = card.get_by_role("form", name="Plan the follow-up")
    topic = form.get_by_label("What is it about?")
    await expect(topic).to_be_focused()
    await expect(form.locator(".required-mark")).not_to_have_count(0)
    await ui.screenshot("question-form.png")

    # Enter with the required text empty: its error, next to it, and focus stays on it.
    await keyboard.press("Enter")
    error = form.locator("[data-question-id=topic] .question-field-error")
    await expect(error).to_have_text("An answer is required.")
    await expect(topic).to_have_attribute("aria-invalid", "true")
    await expect(topic).to_be_focused()
    await keyboard.type("Renewal")
    await keyboard.press("Tab")  # the choice: its first option
    await expect(form.get_by_role("radio", name="Call")).to_be_focused()
    await keyboard.press("ArrowDown")  # moves to SMS and chooses it
    await expect(form.get_by_role("radio", name="SMS")).to_be_checked()
    await keyboard.press("Tab")  # the first checkbox
    await expect(form.get_by_role("checkbox", name="Notes")).to_be_focused()
    await keyboard.press("Tab")
    await keyboard.press("Space")  # Invoice
    await keyboard.press("Tab")
    await expect(form.get_by_label("Minutes")).to_be_focused()
    await keyboard.type("15")
    await keyboard.press("Tab")  # yes / no
    await expect(form.get_by_role("radio", name="Yes")).to_be_focused()
    await keyboard.press("ArrowDown")  # No
    await keyboard.press("Tab")
    await expect(form.get_by_label("Which day?")).to_be_focused()
    await keyboard.type("12012026")
    await keyboard.press("Enter")

    await ui.answered(2)
    await expect(card).to_have_attribute("data-status", "ok")
    await expect(card.locator(".tool-status")).to_have_text("Answered")
    await expect(card.locator("input")).to_have_count(0)
    reply = ui.log.locator(".msg.user.question-reply")
    expected = "What is it about? Renewal\nHow? SMS\nReady beforehand: Invoice\nMinutes: 15\nRemind me? No\nWhich day? 2026-12-01"
    await expect(reply.locator(".bubble")).to_have_text(expected)
    await expect(ui.answers().last).to_contain_text("Booked: an SMS about the renewal.")
    request = next(body for body in ui.vernis.scripted.requests if answered(body))
    result = [m["content"] for m in request["messages"] if m["role"] == "tool"][-1]
    assert '"prepare":["Invoice"]' in result
    assert '"day":"2026-12-01"' in result
    await ui.screenshot("question-answered.png")

    # A reload draws the same: the answers in the card, the reply, the answer that went on.
    await ui.page.reload()
    await ui.connected()
    await expect(ui.answers()).to_have_count(2)
    await expect(ui.log.locator(".tool-card")).to_have_attribute("data-status", "ok")
    await expect(ui.log.locator(".msg.user.question-reply .bubble")).to_have_text(expected)
    await expect(ui.log.locator(".tool-card input")).to_have_count(0)


async def test_an_open_form_comes_back_after_a_reload_and_cancel_closes_it(ui: UI) -> None:
    """After a reload the unanswered form is back from the history; an answer the server refuses shows its error next to the field; Cancel closes the form, says so as the user's reply, and the assistant goes on."""
    ui.vernis.scripted.add(Reply(tool_calls=[ScriptedToolCall("ask_user", FORM)]), match="plan a follow-up")
    ui.vernis.scripted.add(
        "All right, never mind.",
        match=lambda body: "form of your ask_user call" in str(body["messages"][0]["content"]),
    )
    await ui.open()
    await ui.send("plan a follow-up")
    await ui.answered()
    await expect(ui.log.locator(".question")).to_have_count(1)
    await ui.page.reload()
    await ui.connected()
    form = ui.log.get_by_role("form", name="Plan the follow-up")
    topic = form.get_by_label("What is it about?")
    await expect(topic).to_be_visible()
    # The server refuses a text answer (a guard: a secret key): its message shows next to that field.
    await topic.fill("Save AKIAIOSFODNN7EXAMPLE")
    await form.get_by_role("radio", name="Call").check()
    await form.get_by_role("button", name="Send answers").click()
    error = form.locator("[data-question-id=topic] .question-field-error")
    await expect(error).to_contain_text("was not sent")
    await expect(topic).to_be_focused()
    await expect(topic).to_be_enabled()
    await expect(ui.log.locator(".notice-line")).to_have_count(0)
    await form.get_by_role("button", name="Cancel").click()
    await ui.answered(2)
    await expect(ui.log.locator(".tool-card")).to_have_attribute("data-status", "rejected")
    await expect(ui.log.locator(".question-outcome")).to_have_text("You closed this form without answering.")
    await expect(ui.log.locator(".msg.user.question-reply")).to_contain_text("without answering")
    await expect(ui.answers().last).to_contain_text("All right, never mind.")


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_axe_finds_no_serious_violation_in_a_form(theme: str, embed: Embed, open_ui: OpenUI) -> None:
    """axe-core reports no serious or critical violation in the light and the dark theme: the open form, the form with an error next to a field, and the answered card with the user's reply."""
    ui = await open_themed(open_ui, embed, theme)
    scripted = embed.vernis.scripted
    scripted.add(Reply(tool_calls=[ScriptedToolCall("ask_user", FORM)]), match="plan a follow-up")
    scripted.add("Booked.", match=answered)
    await ui.open()
    await ui.send("plan a follow-up")
    await ui.answered()
    form = ui.log.get_by_role("form", name="Plan the follow-up")
    server = embed.vernis.http_url
    found = {"open": await audit(ui, server)}
    await form.get_by_role("button", name="Send answers").click()
    await expect(form.locator(".question-field-error").first).to_be_visible()
    found["invalid"] = await audit(ui, server)
    await form.get_by_label("What is it about?").fill("Renewal")
    await form.get_by_role("radio", name="SMS").check()
    await form.get_by_role("button", name="Send answers").click()
    await ui.answered(2)
    await expect(ui.log.locator(".msg.user.question-reply")).to_be_visible()
    found["answered"] = await audit(ui, server)
    await ui.screenshot(f"question-{theme}.png")
    assert found == {"open": [], "invalid": [], "answered": []}, found
