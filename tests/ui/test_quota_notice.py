"""A used-up token quota in the panel (SPEC §15): the refused message is marked not sent with the
server's sentence, which names the reset time, and the user gets their text back."""

from __future__ import annotations

import re

from playwright.async_api import expect

from tests.ui.conftest import OpenUI, UIFactory
from vernis.model.scripted import Reply


async def test_a_used_up_quota_reads_as_a_notice_with_the_reset_time(
    ui_factory: UIFactory, open_ui: OpenUI
) -> None:
    """Past the member's daily quota the next message is marked not sent with a plain sentence naming when the allowance renews, and its text is back in the composer."""
    async with ui_factory(member_daily_tokens=50) as vernis:
        vernis.scripted.add(Reply("First.", usage=(40, 20)), match="one")
        ui = await open_ui(vernis)
        await ui.open()
        await ui.send("one")
        await ui.answered()
        await ui.send("two")
        note = ui.log.locator(".msg.user[data-refused] .msg-note")
        await expect(note).to_contain_text("You have used today's assistant allowance (60 of 50 tokens).")
        await expect(note).to_contain_text(re.compile(r"It renews at 00:00 UTC\."))
        await expect(ui.input).to_have_value("two")
        await ui.screenshot("state-quota-exceeded.png")
