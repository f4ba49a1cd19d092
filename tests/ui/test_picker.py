"""The session picker (SPEC §11): recent conversations, more on scroll, switch, new chat, rename, delete."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from playwright.async_api import expect
from sqlmodel import col

from tests.data import database, store_of
from tests.fixtures.server import Vernis
from tests.ui.conftest import UI
from vernis.store.models import Conversation, MessageRole


async def add_conversations(vernis: Vernis, titles: list[str], email: str = "member@acme.test") -> list[str]:
    """Stored conversations with one exchange each, the last of `titles` the most recent."""
    member_id = vernis.seed.members[email]
    organization_id = vernis.seed.organizations[email.split("@")[1].removesuffix(".test")]
    ids = []
    async with store_of(vernis) as store:
        for title in titles:
            conversation = await store.create_conversation(member_id, organization_id)
            await store.add_message(conversation.id, MessageRole.USER, f"Question about {title}")
            await store.add_message(conversation.id, MessageRole.ASSISTANT, f"Answer about **{title}**.")
            await store.set_title(conversation.id, title)
            ids.append(str(conversation.id))
            # Distinct update times, so the order is the order of creation.
            await asyncio.sleep(0.002)
    return ids


async def test_switch_rename_and_delete_from_the_picker(ui: UI) -> None:
    """The picker lists recent conversations; one switches to another, renames it (live title) and deletes one."""
    await add_conversations(ui.vernis, ["Dental plans", "Overdue invoices", "Call with Jane"])
    await ui.open()
    # The latest conversation opens first.
    await expect(ui.title).to_have_text("Call with Jane")
    await expect(ui.log.locator(".msg.assistant")).to_contain_text("Answer about Call with Jane.")

    toggle = ui.panel.get_by_role("button", name="Conversations")
    await toggle.click()
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    rows = ui.picker.locator(".conv")
    await expect(rows.locator(".conv-title")).to_have_text(
        ["Call with Jane", "Overdue invoices", "Dental plans"]
    )
    await expect(rows.first).to_have_attribute("aria-current", "true")
    await expect(rows.first.locator(".conv-meta")).to_contain_text("2 messages")
    await ui.screenshot("picker.png")

    await rows.nth(2).locator(".conv-open").click()
    await expect(ui.picker).to_be_hidden()
    await expect(ui.title).to_have_text("Dental plans")
    await expect(ui.log.locator(".msg.user .bubble")).to_have_text("Question about Dental plans")
    await expect(ui.log.locator(".msg.assistant strong")).to_have_text("Dental plans")

    await toggle.click()
    current = rows.filter(has_text="Dental plans")
    await expect(current).to_have_attribute("aria-current", "true")
    await current.get_by_role("button", name="Rename “Dental plans”").click()
    title_input = ui.picker.get_by_role("textbox", name="New title")
    await expect(title_input).to_be_focused()
    await title_input.fill("Dental plan renewals")
    await title_input.press("Enter")
    await expect(rows.filter(has_text="Dental plan renewals")).to_have_count(1)
    await expect(ui.title).to_have_text("Dental plan renewals")

    doomed = rows.filter(has_text="Overdue invoices")
    await doomed.get_by_role("button", name="Delete “Overdue invoices”").click()
    await expect(doomed.get_by_role("button", name="Cancel")).to_be_focused()
    await doomed.get_by_role("button", name="Delete", exact=True).click()
    await expect(rows.locator(".conv-title")).to_have_text(["Call with Jane", "Dental plan renewals"])
    # Still showing the renamed conversation: deleting another one leaves the view alone.
    await expect(ui.title).to_have_text("Dental plan renewals")


# The picker's list arriving again (its refresh on opening, another tab's change): counted as it lands.
REFRESH = """async (element) => {
  const picker = element.picker;
  const lists = (window.__lists = window.__lists || { count: 0 });
  if (!picker.__counted) {
    const set = picker.setConversations.bind(picker);
    picker.setConversations = (...args) => { set(...args); lists.count += 1; };
    picker.__counted = true;
  }
  const before = lists.count;
  element.session.listConversations();
  const started = performance.now();
  while (lists.count === before && performance.now() - started < 5000) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return lists.count - before;
}"""


async def test_a_list_arriving_during_a_rename_or_a_delete_keeps_them(ui: UI) -> None:
    """A list that lands while a row is renamed or asked to delete keeps the form, its typing and its focus."""
    await add_conversations(ui.vernis, ["Dental plans", "Overdue invoices"])
    await ui.open()
    toggle = ui.panel.get_by_role("button", name="Conversations")
    await toggle.click()
    rows = ui.picker.locator(".conv")
    await expect(rows.locator(".conv-title")).to_have_text(["Overdue invoices", "Dental plans"])
    assistant = ui.page.locator("vernis-assistant")

    await rows.nth(1).get_by_role("button", name="Rename “Dental plans”").click()
    title_input = ui.picker.get_by_role("textbox", name="New title")
    await title_input.fill("Dental pl")
    assert await assistant.evaluate(REFRESH) == 1
    await expect(title_input).to_be_focused()
    await expect(title_input).to_have_value("Dental pl")
    await title_input.press_sequentially("an renewals")
    await title_input.press("Enter")
    await expect(rows.locator(".conv-title")).to_have_text(["Overdue invoices", "Dental plan renewals"])

    await rows.nth(0).get_by_role("button", name="Delete “Overdue invoices”").click()
    cancel = rows.nth(0).get_by_role("button", name="Cancel")
    await expect(cancel).to_be_focused()
    assert await assistant.evaluate(REFRESH) == 1
    await expect(cancel).to_be_focused()
    await cancel.press("Enter")
    await expect(rows.locator(".conv-title")).to_have_text(["Overdue invoices", "Dental plan renewals"])


async def test_picker_by_keyboard(ui: UI) -> None:
    """Arrow keys move through the picker, Enter opens, F2 renames, Escape closes it and returns focus."""
    await add_conversations(ui.vernis, ["First", "Second", "Third"])
    await ui.open()
    await expect(ui.title).to_have_text("Third")
    toggle = ui.panel.get_by_role("button", name="Conversations")
    await toggle.focus()
    await ui.page.keyboard.press("Enter")
    rows = ui.picker.locator(".conv-open")
    await expect(rows).to_have_count(3)
    # Focus lands on the conversation shown.
    await expect(rows.first).to_be_focused()
    await ui.page.keyboard.press("ArrowDown")
    await expect(rows.nth(1)).to_be_focused()
    outline = await rows.nth(1).evaluate("row => getComputedStyle(row).outlineStyle")
    assert outline == "solid"  # a visible focus ring
    await ui.screenshot("picker-keyboard.png")
    await ui.page.keyboard.press("End")
    await expect(rows.nth(2)).to_be_focused()
    await ui.page.keyboard.press("F2")
    await ui.page.keyboard.press("Control+a")
    await ui.page.keyboard.type("The first one")
    await ui.page.keyboard.press("Enter")
    await expect(rows.nth(2)).to_be_focused()
    await expect(rows.nth(2)).to_contain_text("The first one")
    await ui.page.keyboard.press("Enter")
    await expect(ui.title).to_have_text("The first one")
    await expect(ui.input).to_be_focused()
    await toggle.click()
    await expect(ui.picker).to_be_visible()
    await ui.page.keyboard.press("Escape")
    await expect(ui.picker).to_be_hidden()
    await expect(toggle).to_be_focused()
    # A second Escape closes the panel itself.
    await ui.page.keyboard.press("Escape")
    await expect(ui.panel).to_be_hidden()


async def test_more_conversations_load_on_scroll_and_new_chat(ui: UI) -> None:
    """Beyond the first 20, more conversations load as the picker scrolls; New chat starts an empty one."""
    titles = [f"Conversation {n:02d}" for n in range(25)]
    await add_conversations(ui.vernis, titles)
    await ui.open()
    await ui.panel.get_by_role("button", name="Conversations").click()
    rows = ui.picker.locator(".conv")
    await expect(rows).to_have_count(20)
    await rows.last.scroll_into_view_if_needed()
    await ui.picker.locator(".picker-scroll").evaluate("element => element.scrollTo(0, element.scrollHeight)")
    await expect(rows).to_have_count(25)
    await expect(rows.last.locator(".conv-title")).to_have_text("Conversation 00")
    await expect(ui.picker.get_by_role("button", name="Load more")).to_be_hidden()

    await ui.picker.get_by_role("button", name="New chat").click()
    await expect(ui.title).to_have_text("New conversation")
    await expect(ui.log.get_by_role("button", name="Search contacts")).to_be_visible()
    assert uuid.UUID(str(await rows.first.get_attribute("data-id")))


async def test_the_picker_groups_by_day_and_searches_titles(ui: UI) -> None:
    """Conversations are grouped Today, Yesterday, Previous 7 days and Older, by when they last changed; the search box keeps the titles that contain its text, and says when none does."""
    titles = ["Quarterly plan", "Invoice from March", "Dental plans", "Call with Jane"]
    ids = await add_conversations(ui.vernis, titles)
    # Days as the browser counts them: from the start of today, in this machine's time zone (its own).
    today = datetime.now(UTC).astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
    changed = {
        ids[0]: today - timedelta(days=40),
        ids[1]: today - timedelta(days=3),
        ids[2]: today - timedelta(hours=1),
    }
    async with database(ui.vernis) as engine, engine.begin() as connection:
        for conversation_id, when in changed.items():
            await connection.execute(
                sa.update(Conversation)
                .where(col(Conversation.id) == uuid.UUID(conversation_id))
                .values(updated_at=when)
            )
    await ui.open()
    await ui.panel.get_by_role("button", name="Conversations").click()
    groups = ui.picker.locator(".picker-group")
    await expect(groups).to_have_text(["Today", "Yesterday", "Previous 7 days", "Older"])
    await expect(ui.picker.get_by_role("list", name="Today").locator(".conv-title")).to_have_text(
        ["Call with Jane"]
    )
    await expect(ui.picker.get_by_role("list", name="Older").locator(".conv-title")).to_have_text(
        ["Quarterly plan"]
    )
    search = ui.picker.get_by_role("searchbox", name="Search conversations by title")
    await search.fill("plan")
    await expect(ui.picker.locator(".conv-title")).to_have_text(["Dental plans", "Quarterly plan"])
    await ui.screenshot("picker-groups.png")
    await search.fill("nothing like it")
    await expect(ui.picker.locator(".conv")).to_have_count(0)
    await expect(ui.picker.locator(".picker-status")).to_have_text(
        "No conversation title has “nothing like it”."
    )
    await search.fill("")
    await expect(ui.picker.locator(".conv")).to_have_count(4)
