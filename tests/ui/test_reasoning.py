"""The model's reasoning in the panel (SPEC §19): folded under "Thinking…" above the answer, opened
by a click or from the keyboard, and the same after a reload (from the history)."""

from __future__ import annotations

from playwright.async_api import expect

from tests.ui.conftest import UI
from vernis.model.scripted import Quirk, Reply

THOUGHTS = ["The user ", "asks about ", "Jane; ", "her last call ", "was Tuesday."]


async def test_reasoning_is_folded_and_opens_by_click_or_keyboard(ui: UI) -> None:
    """An answer with reasoning shows a closed "Thinking…" disclosure before its text; a click opens it, Enter on the focused summary closes and opens it; after a reload it is there again, folded."""
    ui.vernis.scripted.add(
        Reply("She called on Tuesday.", reasoning=THOUGHTS, quirks=Quirk.REASONING), match="Jane"
    )
    await ui.open()
    await ui.send("When did Jane call?")
    answer = await ui.answered()
    reasoning = answer.locator("details.reasoning")
    summary = reasoning.locator("summary")
    await expect(summary).to_have_text("Thinking…")
    await expect(reasoning).not_to_have_attribute("open", "")
    text = reasoning.locator(".reasoning-text")
    await expect(text).to_be_hidden()
    await expect(answer.locator(".markdown")).to_have_text("She called on Tuesday.")
    # Folded above the answer's text, never inside it.
    assert await answer.locator(".answer-body > :first-child").evaluate("e => e.matches('details.reasoning')")

    await summary.click()
    await expect(text).to_be_visible()
    await expect(text).to_have_text("The user asks about Jane; her last call was Tuesday.")
    await summary.focus()
    await ui.page.keyboard.press("Enter")
    await expect(text).to_be_hidden()
    await ui.page.keyboard.press("Enter")
    await expect(text).to_be_visible()
    await ui.screenshot("reasoning-open.png")

    await ui.page.reload()
    await ui.connected()
    answer = await ui.answered()
    reasoning = answer.locator("details.reasoning")
    await expect(reasoning.locator("summary")).to_have_text("Thinking…")
    await expect(reasoning.locator(".reasoning-text")).to_be_hidden()
    await reasoning.locator("summary").click()
    await expect(reasoning.locator(".reasoning-text")).to_have_text(
        "The user asks about Jane; her last call was Tuesday."
    )
