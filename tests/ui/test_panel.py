"""The assistant panel (SPEC §11): open, quick actions, streamed answers, tool cards, stop, expand."""

from __future__ import annotations

from collections.abc import Mapping

from playwright.async_api import expect

from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, OpenUI
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis.model.scripted.scenarios import last_user_text

QUICK_ACTIONS = [
    "Search contacts",
    "Recent calls",
    "Send an SMS",
    "Dashboard stats",
    "Follow up with a contact",
    "Review today's activity",
    "Create a new contact",
    "Check engagement stats",
    "View my plans",
]
ANSWER = " ".join(f"word{n}" for n in range(40))


def after_tool(body: Mapping[str, object]) -> bool:
    messages = body.get("messages")
    return isinstance(messages, list) and messages[-1].get("role") == "tool"


async def test_quick_action_streams_text_and_a_tool_card(ui: UI) -> None:
    """An empty conversation shows four quick actions (the rest behind More), the keyboard hint and Send off; a quick action sends its prompt, a tool card and the streamed answer appear, then the live title, and the hint goes."""
    ui.vernis.scripted.add(
        Reply("Let me check.", tool_calls=[ScriptedToolCall("get_unread_count", {})]), match="recent calls"
    )
    ui.vernis.scripted.add(Reply(ANSWER, chunk_delay=0.04), match=after_tool)
    await ui.open()
    await expect(ui.panel).to_have_attribute("data-open", "")
    await expect(ui.title).to_have_text("New conversation")
    # Four at first, the rest behind "More"; the keyboard hint, and Send off while there is nothing to send.
    general = ui.log.locator(".quick-actions:not(.page-actions) .quick-action")
    await expect(general).to_have_text(QUICK_ACTIONS[:4])
    await expect(ui.panel.locator(".scripted-note")).to_be_visible()
    await expect(ui.panel.locator(".hint")).to_be_visible()
    await expect(ui.panel.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    await ui.screenshot("panel-empty.png")
    await ui.log.get_by_role("button", name=f"More ({len(QUICK_ACTIONS) - 4})").click()
    await expect(general).to_have_text(QUICK_ACTIONS)
    await expect(general.nth(4)).to_be_focused()

    await ui.log.get_by_role("button", name="Recent calls").click()
    user = ui.log.locator(".msg.user").last
    await expect(user).to_contain_text("Show me my most recent calls")
    card = ui.log.locator(".tool-card")
    await expect(card).to_have_count(1)
    await expect(card.locator(".tool-name")).to_have_text("Get unread count")
    answer = ui.answers().last
    # Streaming: part of the text is there, the rest is not yet, and Stop replaces Send.
    await expect(answer).to_contain_text("word3")
    assert "word39" not in await answer.inner_text()
    await expect(ui.panel.get_by_role("button", name="Stop the answer")).to_be_visible()
    await expect(ui.panel.get_by_role("button", name="Send")).to_be_hidden()
    await ui.screenshot("panel-streaming.png")

    await ui.answered()
    text = await answer.locator(".markdown").all_inner_texts()
    assert text == ["Let me check.", ANSWER]
    await expect(card).to_have_attribute("data-status", "ok")
    await expect(card.locator(".tool-status")).to_have_text("Done")
    await card.locator("summary").click()
    await expect(card.locator(".tool-id")).to_have_text("get_unread_count")
    result = card.locator(".tool-value").last
    await expect(result).to_be_visible()
    assert "{" not in await result.inner_text()
    await expect(ui.panel.get_by_role("button", name="Send")).to_be_visible()
    # Once a message went, the keyboard hint has done its job.
    await expect(ui.panel.locator(".hint")).to_be_hidden()
    # The title arrives after the first exchange, live.
    await expect(ui.title).to_have_text("Show me my most recent calls")
    await ui.screenshot("panel.png")
    chat_requests = [r for r in ui.vernis.scripted.requests if r.get("tools")]
    assert last_user_text(chat_requests[0]).startswith("Show me my most recent calls")


async def test_keyboard_opens_sends_and_closes(ui: UI) -> None:
    """Ctrl+/ opens the panel with the input focused, Enter sends, Shift+Enter adds a line, Escape closes and gives focus back."""
    ui.vernis.scripted.add(Reply("Hello from the keyboard."), match="lines")
    await ui.page.keyboard.press("Control+/")
    await ui.connected()
    await expect(ui.input).to_be_focused()
    await ui.page.keyboard.type("two")
    await ui.page.keyboard.press("Shift+Enter")
    await ui.page.keyboard.type("lines")
    await expect(ui.input).to_have_value("two\nlines")
    await ui.page.keyboard.press("Enter")
    await expect(ui.log.locator(".msg.user .bubble")).to_have_text("two\nlines")
    await expect(ui.input).to_have_value("")
    answer = await ui.answered()
    await expect(answer).to_contain_text("Hello from the keyboard.")
    await ui.page.keyboard.press("Escape")
    await expect(ui.panel).not_to_have_attribute("data-open", "")
    await expect(ui.panel).to_be_hidden()
    await expect(ui.launcher).to_be_focused()
    await expect(ui.launcher).to_have_attribute("aria-expanded", "false")


async def test_every_control_has_a_name(ui: UI) -> None:
    """Every button and field of the panel has an accessible name; the panel is a labelled dialog with a log."""
    await ui.open()
    for name in ("Conversations", "New chat", "Expand to full screen", "Close assistant", "Send"):
        await expect(ui.panel.get_by_role("button", name=name, exact=True)).to_be_visible()
    await expect(ui.page.get_by_role("dialog", name="New conversation")).to_be_visible()
    await expect(ui.panel.get_by_role("log", name="Conversation")).to_be_visible()
    await expect(ui.panel.get_by_role("textbox", name="Message")).to_be_visible()
    unnamed = await ui.page.locator("vernis-assistant").evaluate(
        """element => [...element.shadowRoot.querySelectorAll("button, textarea, input")]
            .filter(control => control.offsetParent !== null)
            .filter(control => !(control.getAttribute("aria-label") || control.textContent.trim()
                                 || (control.id && element.shadowRoot.querySelector(`label[for="${control.id}"]`))))
            .map(control => control.outerHTML)"""
    )
    assert unnamed == []


async def test_stop_while_streaming(ui: UI) -> None:
    """Stop ends the answer in flight: what was written stays, marked stopped, and Send comes back."""
    ui.vernis.scripted.add(Reply(ANSWER, chunk_delay=0.1), match="slowly")
    await ui.open()
    await ui.send("answer slowly")
    answer = ui.answers().last
    await expect(answer).to_contain_text("word2")
    await ui.panel.get_by_role("button", name="Stop the answer").click()
    await ui.answered()
    await expect(answer.locator(".answer-state")).to_have_text("Stopped")
    assert "word39" not in await answer.inner_text()
    await expect(ui.panel.get_by_role("button", name="Send")).to_be_visible()


async def test_expand_to_full_screen_and_back(ui: UI) -> None:
    """The 400 px panel expands to the full width with a width transition, and collapses back."""
    ui.vernis.scripted.add(
        Reply("A **bold** answer with a list:\n\n- one\n- two\n\n`code` too."), match="format"
    )
    await ui.open()
    await ui.send("format something")
    await ui.answered()
    await expect(ui.panel).to_have_css("width", "400px")
    transition = await ui.panel.evaluate("panel => getComputedStyle(panel).transitionProperty")
    assert "width" in transition
    expand = ui.panel.get_by_role("button", name="Expand to full screen")
    await expand.click()
    await expect(ui.panel).to_have_attribute("data-expanded", "")
    await expect(ui.panel).to_have_css("width", "1280px")
    collapse = ui.panel.get_by_role("button", name="Collapse to side panel")
    await expect(collapse).to_have_attribute("aria-pressed", "true")
    await ui.screenshot("fullscreen.png")
    await collapse.click()
    await expect(ui.panel).to_have_css("width", "400px")


async def test_narrow_screen(vernis: Vernis, open_ui: OpenUI) -> None:
    """On a phone-sized screen the panel takes the whole width and nothing overflows sideways."""
    ui = await open_ui(vernis, viewport=(375, 720))
    await ui.open()
    await expect(ui.panel).to_have_css("width", "375px")
    await ui.log.locator(".more-actions").click()
    await expect(ui.log.get_by_role("button", name="View my plans")).to_be_visible()
    overflow = await ui.page.locator("vernis-assistant").evaluate(
        "element => { const log = element.shadowRoot.querySelector('.log'); return log.scrollWidth - log.clientWidth; }"
    )
    assert overflow == 0
    await ui.screenshot("panel-narrow.png")


async def test_panel_state_survives_navigation(ui: UI) -> None:
    """Moving to another page of the host keeps the panel open on the same conversation."""
    ui.vernis.scripted.add(Reply("Noted."), match="remember")
    await ui.open()
    await ui.send("remember this page")
    await ui.answered()
    await ui.goto("/calls")
    await expect(ui.panel).to_have_attribute("data-open", "")
    await ui.connected()
    await expect(ui.log.locator(".msg.user .bubble")).to_have_text("remember this page")
    await expect(ui.answers().last).to_contain_text("Noted.")


async def test_the_demo_note_can_be_dismissed_for_the_session(ui: UI) -> None:
    """The scripted-answers note has a Dismiss button; dismissed, it stays gone on the next page of the same tab."""
    await ui.open()
    note = ui.panel.locator(".scripted-note")
    await expect(note).to_be_visible()
    await note.get_by_role("button", name="Dismiss this note").click()
    await expect(note).to_be_hidden()
    await expect(ui.input).to_be_focused()
    await ui.page.reload()
    # The panel reopens by itself on the tab's next page.
    await ui.connected()
    await expect(ui.panel).to_have_attribute("data-open", "")
    await expect(ui.title).to_have_text("New conversation")
    await expect(note).to_be_hidden()
