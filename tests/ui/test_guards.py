"""The guards in the panel (vernis.guards), in headless Chromium: a blocked message, a warned card."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.e2e.test_guards import PLANTED, add_contact_with_note, last_tool_result
from tests.ui.conftest import UI
from vernis.model.scripted import Reply, ScriptedToolCall


async def test_blocked_message_says_why_and_gives_the_text_back(ui: UI) -> None:
    """A message with a key is marked refused with the guard's sentence, and its text is back in the input to edit."""
    text = "Keep this for me: AKIAIOSFODNN7EXAMPLE"
    await ui.open()
    await ui.send(text)
    refused = ui.log.locator(".msg.user[data-refused]")
    await expect(refused).to_have_count(1)
    await expect(refused.locator(".msg-note")).to_contain_text("password, API key or other credential")
    await expect(ui.input).to_have_value(text)
    await expect(ui.answers()).to_have_count(0)
    assert ui.vernis.scripted.requests == []


async def test_write_after_a_planted_instruction_shows_a_warning_on_its_card(ui: UI) -> None:
    """The card of a write proposed after reading a record that tries to instruct the model shows the warning first."""
    contact_id = await add_contact_with_note(ui.vernis, PLANTED)
    chat = ui.vernis.settings.llm_model

    def after(marker: str) -> Any:
        return lambda body: body["model"] == chat and marker in last_tool_result(body)

    ui.vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("get_contact_details", {"contact_id": contact_id})]),
        match="mallory",
    )
    ui.vernis.scripted.add(
        Reply(
            tool_calls=[
                ScriptedToolCall("add_contact_note", {"contact_id": contact_id, "body": "Called back."})
            ]
        ),
        match=after('"untrusted"'),
    )
    ui.vernis.scripted.add("Shall I add that note?", match=after("confirmation_id"))
    await ui.open()
    await ui.send("Look at Mallory's file and log my call")
    await ui.answered()
    confirm = ui.log.locator(".tool-card[data-status='needs_confirmation'] .confirm")
    warnings = confirm.get_by_role("list", name="Warnings")
    await expect(warnings).to_contain_text("tries to give it instructions")
    await expect(warnings).to_contain_text("get contact details")
    await expect(confirm.get_by_role("button", name="Approve")).to_be_visible()
    await ui.screenshot("guard-warning.png")
    # After a reload the card comes back from the stored approval, warning included.
    await ui.page.reload()
    await ui.connected()
    await expect(ui.log.locator(".confirm").get_by_role("list", name="Warnings")).to_contain_text(
        "tries to give it instructions"
    )
