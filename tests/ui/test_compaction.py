"""What compaction shows the user (SPEC §19): a line where the assistant's memory became a summary,
live and after a reload; every message stays in the log."""

from __future__ import annotations

from playwright.async_api import expect

from tests.ui.conftest import OpenUI, UIFactory

LINE = "The assistant summarised the messages above"


async def test_a_compaction_shows_a_line_live_and_after_a_reload(
    ui_factory: UIFactory, open_ui: OpenUI
) -> None:
    """Past the window's size the log gets one line saying the messages above were summarised, in the same place after a reload, and all eight messages stay shown."""
    async with ui_factory(window_messages=4, context_keep_recent=2) as vernis:
        ui = await open_ui(vernis)
        await ui.open()
        for number in range(3):
            await ui.send(f"question {number}")
            await ui.answered(number + 1)
        line = ui.log.locator(".notice-line.compacted")
        await expect(line).to_have_count(1)
        await expect(line).to_contain_text(LINE)
        await ui.page.reload()
        await ui.connected()
        await expect(ui.log.locator(".msg")).to_have_count(6)
        await expect(line).to_have_count(1)
        # After the exchange it summarised (the answer quoting question 0), before question 1.
        before = await line.evaluate("(el) => el.previousElementSibling.textContent")
        after = await line.evaluate("(el) => el.nextElementSibling.textContent")
        assert "question 0" in before
        assert "question 1" in after
