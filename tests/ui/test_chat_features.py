"""What people expect of a chat panel (SPEC §11): copy a message, see when it was sent on hover, and
quick actions laid out evenly."""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from playwright.async_api import expect

from tests.data import database
from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, OpenUI, eventually
from tests.ui.test_accessibility import audit
from tests.ui.test_approvals import SNAPSHOT
from tests.ui.test_states import chat_about
from vernis.model.scripted import Reply

ANSWER = "Here is **the plan**:\n\n1. Call Jane\n2. Send the quote"


async def test_copy_a_message_and_an_answer(ui: UI) -> None:
    """The copy buttons put the user's text and the answer's markdown on the clipboard and say "Copied"."""
    await ui.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=ui.url)
    ui.vernis.scripted.add(Reply(ANSWER), match="plan")
    await ui.open()
    await ui.send("what is the plan?")
    answer = await ui.answered()
    copy = answer.get_by_role("button", name="Copy answer")
    await copy.click()
    await expect(answer.get_by_role("button", name="Copied")).to_be_visible()
    assert await ui.page.evaluate("navigator.clipboard.readText()") == ANSWER
    user = ui.log.locator(".msg.user")
    await user.hover()
    await user.get_by_role("button", name="Copy message").click()
    assert await ui.page.evaluate("navigator.clipboard.readText()") == "what is the plan?"
    await ui.screenshot("copy.png")


async def test_hovering_a_message_shows_when_it_was_sent(ui: UI) -> None:
    """A message's time shows on hover (hidden otherwise), with the full date as its title; after a reload it is the stored time."""
    ui.vernis.scripted.add(Reply("Noted."), match="note")
    await ui.open()
    await ui.send("note this")
    await ui.answered()
    await ui.page.reload()
    await ui.connected()
    time = ui.log.locator(".msg.user .msg-time")
    await expect(time).to_be_hidden()
    await ui.log.locator(".msg.user .bubble").hover()
    await expect(time).to_be_visible()
    stamp = await time.get_attribute("datetime")
    assert stamp is not None
    sent = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert abs((datetime.now(sent.tzinfo) - sent).total_seconds()) < 600
    assert ":" in await time.inner_text()
    assert await time.get_attribute("title")
    answer_time = ui.answers().last.locator(".msg-time")
    await ui.answers().last.hover()
    await expect(answer_time).to_be_visible()
    await ui.screenshot("timestamps.png")


async def test_quick_actions_are_laid_out_evenly(vernis: Vernis, open_ui: OpenUI) -> None:
    """Every quick action button has the same width and height, in the side panel and in full screen."""
    ui = await open_ui(vernis, email="owner@acme.test", viewport=(1440, 900))
    await ui.open()
    buttons = ui.log.locator(".quick-actions:not(.page-actions) .quick-action")
    await expect(buttons.first).to_be_visible()
    await ui.log.locator(".more-actions").click()
    for state in ("side", "full"):
        if state == "full":
            await ui.panel.get_by_role("button", name="Expand to full screen").click()
            await expect(ui.panel).to_have_css("width", "1440px")
        boxes = [await button.bounding_box() for button in await buttons.all()]
        widths = {round(box["width"]) for box in boxes if box}
        heights = {round(box["height"]) for box in boxes if box}
        assert len(boxes) >= 6
        assert max(widths) - min(widths) <= 1, (state, widths)
        assert max(heights) - min(heights) <= 1, (state, heights)
        await ui.screenshot(f"quick-actions-{state}.png")


async def test_regenerate_keeps_the_earlier_answer_as_a_version(ui: UI) -> None:
    """ "Write this answer again" streams a new version; the earlier one is a click away (1 / 2), the same after a reload; only the last answer offers it; the picker does not count it."""
    ui.vernis.scripted.add(Reply("The first take."), match=chat_about("take"), times=1)
    ui.vernis.scripted.add(Reply("The second take."), match=chat_about("take"), times=1)
    ui.vernis.scripted.add(Reply("Sure."), match=chat_about("thanks"))
    await ui.open()
    await ui.send("give me a take")
    await ui.answered()
    # By position: `ui.answered()` returns the last answer, a locator that moves on.
    first, second = ui.answers().nth(0), ui.answers().nth(1)
    await first.get_by_role("button", name="Write this answer again").click()
    await ui.answered(2)
    await expect(second).to_contain_text("The second take.")
    await expect(first).to_be_hidden()
    versions = second.get_by_role("group", name="Versions of this answer")
    await expect(versions.locator(".versions-count")).to_have_text("2 / 2")
    await ui.screenshot("regenerated.png")
    await versions.get_by_role("button", name="Earlier version").click()
    await expect(first).to_be_visible()
    await expect(second).to_be_hidden()
    await expect(first.locator(".versions-count")).to_have_text("1 / 2")
    await expect(first.get_by_role("button", name="Later version")).to_be_focused()
    await first.get_by_role("button", name="Later version").click()
    await expect(second).to_be_visible()
    live = await ui.log.evaluate(SNAPSHOT)

    await ui.page.reload()
    await ui.connected()
    await expect(ui.answers()).to_have_count(2)
    assert await ui.log.evaluate(SNAPSHOT) == live

    await ui.send("thanks")
    await ui.answered(3)
    # Only the last answer offers it now.
    await expect(ui.log.get_by_role("button", name="Write this answer again")).to_have_count(1)
    await expect(ui.answers().last.get_by_role("button", name="Write this answer again")).to_be_visible()
    await expect(ui.log.locator(".regenerate")).to_have_count(3)
    # The picker counts what the conversation shows: the earlier version is not a message of its own.
    await ui.panel.get_by_role("button", name="Conversations").click()
    await expect(ui.picker.locator(".conv").first.locator(".conv-meta")).to_contain_text("4 messages")


async def test_edit_and_resend_keeps_the_original_as_an_earlier_version(ui: UI) -> None:
    """Editing the last message (Enter sends) answers the new text; the original exchange is a click away (1 / 2), the same after a reload."""
    ui.vernis.scripted.add(Reply("About Tuesday."), match=chat_about("tuesday"))
    ui.vernis.scripted.add(Reply("About Wednesday."), match=chat_about("wednesday"))
    await ui.open()
    await ui.send("book me on tuesday")
    await ui.answered()
    user = ui.log.locator(".msg.user").first
    await user.hover()
    await user.get_by_role("button", name="Edit message").click()
    editor = user.get_by_role("textbox", name="Edit your message")
    await expect(editor).to_be_focused()
    await expect(editor).to_have_value("book me on tuesday")
    await ui.screenshot("edit-message.png")
    # Escape cancels (and leaves the panel open).
    await editor.press("Escape")
    await expect(editor).to_have_count(0)
    await expect(ui.panel).to_have_attribute("data-open", "")
    await user.hover()
    await user.get_by_role("button", name="Edit message").click()
    await editor.fill("book me on wednesday")
    await editor.press("Enter")
    await ui.answered(2)
    edited = ui.log.locator(".msg.user").nth(1)
    await expect(edited.locator(".bubble")).to_have_text("book me on wednesday")
    await expect(ui.answers().nth(1)).to_contain_text("About Wednesday.")
    await expect(user).to_be_hidden()
    await expect(ui.answers().nth(0)).to_be_hidden()
    versions = edited.get_by_role("group", name="Versions of this message")
    await expect(versions.locator(".versions-count")).to_have_text("2 / 2")
    await ui.screenshot("edited.png")
    await versions.get_by_role("button", name="Earlier version").click()
    await expect(user).to_be_visible()
    await expect(ui.answers().nth(0)).to_be_visible()
    await expect(edited).to_be_hidden()
    await expect(ui.answers().nth(1)).to_be_hidden()
    await user.get_by_role("button", name="Later version").click()
    await expect(edited).to_be_visible()
    live = await ui.log.evaluate(SNAPSHOT)

    await ui.page.reload()
    await ui.connected()
    await expect(ui.answers()).to_have_count(2)
    assert await ui.log.evaluate(SNAPSHOT) == live
    chat = [body for body in ui.vernis.scripted.requests if body.get("tools")]
    assert "tuesday" not in str(chat[-1]["messages"][1:])


async def stored_feedback(vernis: Vernis, message_id: str) -> tuple[str | None, str | None]:
    async with database(vernis) as engine, engine.connect() as connection:
        row = (
            await connection.execute(
                sa.text("SELECT feedback_rating, feedback_comment FROM assistant_message WHERE id = :id"),
                {
                    "id": uuid.UUID(message_id).hex
                    if vernis.settings.database_url.startswith("sqlite")
                    else message_id
                },
            )
        ).one()
    return row[0], row[1]


async def test_a_thumbs_down_asks_what_was_wrong(ui: UI) -> None:
    """After a thumbs-down a short optional box asks what was wrong; Enter sends the note with the rating and says thanks; a thumbs-up closes the box."""
    ui.vernis.scripted.add(Reply(ANSWER), match="plan")
    await ui.open()
    await ui.send("what is the plan?")
    answer = await ui.answered()
    message_id = await answer.get_attribute("data-message-id")
    assert message_id
    await answer.get_by_role("button", name="Helpful", exact=True).click()
    await expect(ui.log.locator(".feedback-comment")).to_have_count(0)
    await answer.get_by_role("button", name="Not helpful").click()
    box = ui.log.get_by_role("textbox", name="What was wrong? (optional)")
    await expect(box).to_be_focused()
    await eventually(lambda: rated(ui.vernis, message_id, ("down", None)))
    await box.fill("It forgot the quote's amount.")
    await box.press("Enter")
    await expect(ui.log.locator(".feedback-thanks")).to_have_text("Thanks: your note was sent.")
    await eventually(lambda: rated(ui.vernis, message_id, ("down", "It forgot the quote's amount.")))
    await answer.get_by_role("button", name="Helpful", exact=True).click()
    await expect(ui.log.locator(".feedback-comment")).to_have_count(0)


async def rated(vernis: Vernis, message_id: str, expected: tuple[str | None, str | None]) -> bool:
    return await stored_feedback(vernis, message_id) == expected


CODE = "def total(calls):\n    # every call of the week, summed into one number that is long enough to scroll sideways\n    return sum(calls)"


async def test_a_code_block_names_its_language_copies_and_is_highlighted(ui: UI) -> None:
    """A fenced code block shows its language and a Copy button that puts exactly its code on the clipboard; its keywords are highlighted; it is a region the keyboard can focus, and axe finds nothing serious in it."""
    await ui.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=ui.url)
    ui.vernis.scripted.add(Reply(f"Like this:\n\n```python\n{CODE}\n```\n\nThat's all."), match="code")
    await ui.open()
    await ui.send("show me the code")
    answer = await ui.answered()
    block = answer.locator(".markdown .code-block")
    await expect(block.locator(".code-language")).to_have_text("python")
    await expect(block.locator(".hljs-keyword").first).to_have_text("def")
    await expect(block.locator(".hljs-comment")).to_contain_text("every call")
    pre = block.locator("pre")
    await expect(pre).to_have_attribute("tabindex", "0")
    await expect(pre).to_have_accessible_name("Code, python")
    await block.get_by_role("button", name="Copy the python code").click()
    await expect(block.get_by_role("button", name="Copied")).to_be_visible()
    assert await ui.page.evaluate("navigator.clipboard.readText()") == CODE
    assert await audit(ui, ui.vernis.http_url) == []
    await ui.screenshot("code-block.png")
