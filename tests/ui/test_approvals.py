"""Approve / reject buttons on a write's preview (SPEC §5, §11), live and after a reload."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from playwright.async_api import expect

from tests.data import add_notification, is_read
from tests.ui.conftest import UI, eventually
from vernis.model.scripted import Reply, ScriptedToolCall


def after_tool(body: Mapping[str, Any]) -> bool:
    return bool(body["messages"]) and body["messages"][-1]["role"] == "tool"


async def ask_for_preview(ui: UI, notification_id: str) -> None:
    """Ask for a change: the model previews `mark_notification_read`, then asks for approval."""
    ui.vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("mark_notification_read", {"notification_id": notification_id})]),
        match="mark it read",
    )
    ui.vernis.scripted.add(Reply("Shall I mark it as read? Approve the change above."), match=after_tool)
    await ui.open()
    await ui.send("mark it read please")
    await ui.answered()


async def test_approving_a_preview_runs_the_write(ui: UI) -> None:
    """A write's preview shows what would change with Approve / Reject; approving runs it and the card shows the result."""
    notification_id = await add_notification(ui.vernis, title="Missed call from Jane")
    await ask_for_preview(ui, notification_id)
    card = ui.log.locator(".tool-card")
    await expect(card).to_have_attribute("data-status", "needs_confirmation")
    await expect(card.locator(".tool-status")).to_have_text("Needs your approval")
    confirm = card.get_by_role("group", name="Approve or reject: Mark a notification as read")
    await expect(confirm).to_contain_text("Missed call from Jane")
    await expect(confirm.locator(".confirm-details")).to_contain_text("Read")
    await expect(confirm.locator(".from")).to_have_text("No")
    await expect(confirm.locator(".to")).to_have_text("Yes")
    assert not await is_read(ui.vernis, notification_id)
    await ui.screenshot("preview.png")

    await confirm.get_by_role("button", name="Approve").click()
    await expect(card).to_have_attribute("data-status", "ok")
    await expect(card.locator(".tool-status")).to_have_text("Approved · done")
    await expect(confirm.locator(".confirm-outcome")).to_have_text("Approved. The change was made.")
    await expect(confirm.get_by_role("button")).to_have_count(0)
    await eventually(lambda: is_read(ui.vernis, notification_id))
    await card.locator("summary").click()
    result = card.locator(".tool-value").last
    await expect(result).to_contain_text("Read")
    assert "{" not in await result.inner_text()


async def test_preview_buttons_come_back_after_a_reload(ui: UI) -> None:
    """After a page reload the pending preview is back from the history with working buttons; rejecting changes nothing."""
    notification_id = await add_notification(ui.vernis)
    await ask_for_preview(ui, notification_id)
    await ui.page.reload()
    await ui.connected()
    card = ui.log.locator(".tool-card")
    await expect(card).to_have_attribute("data-status", "needs_confirmation")
    confirm = card.locator(".confirm")
    await confirm.get_by_role("button", name="Reject").click()
    await expect(card).to_have_attribute("data-status", "rejected")
    await expect(confirm.locator(".confirm-outcome")).to_have_text("Rejected. Nothing was changed.")
    await ui.page.reload()
    await ui.connected()
    await expect(ui.log.locator(".tool-card")).to_have_attribute("data-status", "rejected")
    await expect(ui.log.locator(".tool-card .confirm button")).to_have_count(0)
    assert not await is_read(ui.vernis, notification_id)


async def test_an_answer_from_another_tab_updates_the_card(ui: UI) -> None:
    """A preview rejected in another tab ends the card here too, live: the buttons go, the outcome shows."""
    notification_id = await add_notification(ui.vernis)
    await ask_for_preview(ui, notification_id)
    async with ui.vernis.connect() as other:
        events = await other.until("history_end")
        (call,) = next(e for e in events if e["type"] == "history_message" and e["role"] == "assistant")[
            "tool_calls"
        ]
        confirmation_id = call["result"]["data"]["confirmation_id"]
        await other.send("confirm_tool", confirmation_id=confirmation_id, approved=False)
        await other.until("tool_call_completed")
    card = ui.log.locator(".tool-card")
    await expect(card).to_have_attribute("data-status", "rejected")
    await expect(card.locator(".confirm-outcome")).to_have_text("Rejected. Nothing was changed.")
    await expect(card.locator(".confirm button")).to_have_count(0)
    assert not await is_read(ui.vernis, notification_id)


async def test_an_approval_shows_every_argument(login_page: UI) -> None:
    """A preview's object is shown whole, readably, unless it only names a record: a title never hides an amount or a recipient."""
    shown = await login_page.page.evaluate(
        """async () => {
            const { renderPreview } = await import("/static/vernis/messages.js");
            const text = (preview) => renderPreview(preview).textContent;
            return {
                mcp: text({ action: "Pay", tool: "pay__send", arguments: { title: "Refund", amount: 5000, to: "attacker" } }),
                record: text({ action: "Update", contact: { id: "c-1", name: "Jane Cooper" } }),
            };
        }"""
    )
    assert "Amount5000" in shown["mcp"]
    assert "Toattacker" in shown["mcp"]
    assert not set('{}"') & set(shown["mcp"])
    assert "Jane Cooper" in shown["record"]
    assert "c-1" not in shown["record"]


# What a user sees of the log, element by element: tag, classes, state attributes and own text (no
# ids, which differ between a live card and its history: the same answer must look the same).
SNAPSHOT = """(log) => {
    const rows = [];
    const walk = (element, depth) => {
        // A time's text is the local clock (live) or the stored time (history): the element, not the minute.
        const own = element.tagName === "TIME" ? "" : Array.from(element.childNodes)
            .filter((node) => node.nodeType === Node.TEXT_NODE)
            .map((node) => node.textContent.trim())
            .join(" ")
            .trim();
        const state = ["data-status", "data-resolved", "aria-label", "role", "disabled", "hidden"]
            .map((name) => (element.hasAttribute(name) ? `${name}=${element.getAttribute(name)}` : ""))
            .filter(Boolean)
            .join(",");
        rows.push(`${"  ".repeat(depth)}${element.tagName.toLowerCase()}.${element.className} [${state}] ${own}`);
        for (const child of element.children) {
            walk(child, depth + 1);
        }
    };
    for (const child of log.children) {
        walk(child, 0);
    }
    return rows;
}"""

NEW_CONTACT = {
    "first_name": "Alex",
    "last_name": "Rivera",
    "company": "Northwind Dental",
    "emails": [{"email": "alex.rivera@northwind.test", "label": "work"}],
    "phones": [],
    "tags": [],
    "note": None,
}


async def ask_to_create_contact(ui: UI) -> None:
    """The model says a word, previews `create_contact` with nested fields, then asks."""
    ui.vernis.scripted.add(
        Reply("I will add Alex for you.", tool_calls=[ScriptedToolCall("create_contact", NEW_CONTACT)]),
        match="add alex",
    )
    ui.vernis.scripted.add(Reply("Shall I create this contact? Approve it above."), match=after_tool)
    await ui.open()
    await ui.send("add alex rivera please")
    await ui.answered()


async def test_a_nested_preview_reads_like_a_form(ui: UI) -> None:
    """A create preview with nested fields and lists reads as labelled rows: no JSON, empty values left out."""
    await ask_to_create_contact(ui)
    confirm = ui.log.get_by_role("group", name="Approve or reject: Create a contact")
    details = confirm.locator(".confirm-details")
    await expect(details).to_contain_text("First name")
    shown = await details.inner_text()
    assert not set('{}[]"') & set(shown), shown
    assert "null" not in shown, shown
    rows = await details.locator("dt").all_inner_texts()
    # Nested: the contact is a group; its e-mails a list of grouped rows; empty phones, tags, note gone.
    assert rows[:4] == ["Contact", "First name", "Last name", "Company"], rows
    assert not {"Phones", "Tags", "Note"} & set(rows), rows
    email = details.locator(".field.group", has_text="Emails").locator("li").first
    await expect(email.locator("dt")).to_have_text(["Email", "Label", "Primary"])
    await expect(email.locator("dd")).to_have_text(["alex.rivera@northwind.test", "work", "Yes"])
    # A word is never cut in the middle: each value fits its cell on one line (the address too).
    lines = await email.locator("dd").evaluate_all(
        """(cells) => cells.map((cell) => {
            const range = document.createRange();
            range.selectNodeContents(cell);
            return new Set(Array.from(range.getClientRects(), (rect) => Math.round(rect.top))).size;
        })"""
    )
    assert lines == [1, 1, 1], lines
    await ui.screenshot("approval-create-contact.png")


async def test_an_update_preview_shows_before_and_after(login_page: UI) -> None:
    """An update's changes read "before → after" per field; an empty side says "(none)"."""
    shown = await login_page.page.evaluate(
        """async () => {
            const { renderPreview } = await import("/static/vernis/messages.js");
            const element = renderPreview({
                action: "Update a contact",
                contact: { id: "c-1", name: "Jane Cooper" },
                changes: { company: { from: null, to: "Acme" }, last_name: { from: "Coper", to: "Cooper" } },
            });
            document.body.append(element);
            return {
                text: element.textContent,
                changes: Array.from(element.querySelectorAll(".changes .field"), (row) => [
                    row.querySelector("dt").textContent,
                    row.querySelector(".from").textContent,
                    row.querySelector(".to").textContent,
                ]),
            };
        }"""
    )
    assert shown["changes"] == [["Company", "(none)", "Acme"], ["Last name", "Coper", "Cooper"]]
    assert "Jane Cooper" in shown["text"]
    assert "c-1" not in shown["text"]


async def test_times_read_as_the_organizations_wall_clock(login_page: UI) -> None:
    """A tool's ISO time (in the organization's zone, with its offset) reads "Nov 24, 2026, 10:15", not an ISO string."""
    shown = await login_page.page.evaluate(
        """async () => {
            const { renderValue } = await import("/static/vernis/messages.js");
            return renderValue({ created_at: "2026-11-24T10:15:42-05:00", day: "2026-11-24" }).textContent;
        }"""
    )
    assert "Nov 24, 2026, 10:15" in shown
    assert "T10" not in shown
    assert "2026-11-24" in shown  # a plain date stays as it is


async def test_history_renders_exactly_what_the_live_answer_rendered(ui: UI) -> None:
    """Live and after reloads an answer is the same element by element: text, card in place, approval outcome kept; after Approve a new answer says what happened."""
    ui.vernis.scripted.add(
        "Alex Rivera is now one of your contacts.",
        match=lambda body: (
            "The user approved the create_contact change" in str(body["messages"][0]["content"])
        ),
    )
    await ask_to_create_contact(ui)
    live_pending = await ui.log.evaluate(SNAPSHOT)
    await ui.page.reload()
    await ui.connected()
    await expect(ui.log.locator(".tool-card")).to_have_attribute("data-status", "needs_confirmation")
    assert await ui.log.evaluate(SNAPSHOT) == live_pending

    card = ui.log.locator(".tool-card")
    await card.get_by_role("button", name="Approve").click()
    await expect(card.locator(".tool-status")).to_have_text("Approved · done")
    await expect(card.locator(".confirm-outcome")).to_have_text("Approved. The change was made.")
    # The conversation goes on: the answer that read the outcome says what happened.
    following = await ui.answered(2)
    await expect(following.locator(".answer-body")).to_have_text("Alex Rivera is now one of your contacts.")
    live_done = await ui.log.evaluate(SNAPSHOT)
    # The text before the call, the card, the text after it: in that order.
    answer = ui.answers().first
    order = await answer.locator(".answer-body > *").evaluate_all(
        "(parts) => parts.map((part) => part.className)"
    )
    assert order == ["markdown", "tool-card", "markdown"], order
    await ui.screenshot("approval-approved-live.png")

    await ui.page.reload()
    await ui.connected()
    await expect(ui.log.locator(".tool-card .tool-status")).to_have_text("Approved · done")
    assert await ui.log.evaluate(SNAPSHOT) == live_done
    await ui.screenshot("approval-approved-history.png")


async def test_an_answer_joined_mid_stream_keeps_its_order(ui: UI) -> None:
    """Reloaded while an answer streams after a tool call, the panel redraws text, card, text in that order, as the finished history does."""
    words = " ".join(f"w{n:02d}" for n in range(50))
    ui.vernis.scripted.add(
        Reply("Before the call.", tool_calls=[ScriptedToolCall("get_unread_count", {})]), match="count slowly"
    )
    ui.vernis.scripted.add(Reply(words, chunk_delay=0.06), match=after_tool)
    await ui.open()
    await ui.send("count slowly please")
    answer = ui.answers().last
    await expect(answer).to_contain_text("w03")
    await ui.page.reload()
    await ui.connected()
    await expect(ui.log.locator(".msg.assistant[data-streaming]")).to_have_count(1)
    order = (
        await ui.answers()
        .last.locator(".answer-body > *")
        .evaluate_all("(parts) => parts.map((p) => p.className)")
    )
    assert order == ["markdown", "tool-card", "markdown"], order
    await ui.answered()
    live = await ui.log.evaluate(SNAPSHOT)
    await ui.page.reload()
    await ui.connected()
    await expect(ui.answers().last).to_contain_text("w49")
    assert await ui.log.evaluate(SNAPSHOT) == live


async def test_a_preview_left_pending_is_superseded_by_the_next_message(ui: UI) -> None:
    """Asking something else while a preview waits ends it: its card says the conversation moved on and offers no buttons, live and after a reload; nothing is written."""
    notification_id = await add_notification(ui.vernis)
    await ask_for_preview(ui, notification_id)
    card = ui.log.locator(".tool-card")
    await expect(card).to_have_attribute("data-status", "needs_confirmation")
    ui.vernis.scripted.add(Reply("Nothing else is due today."), match="anything else")
    await ui.send("anything else due today?")
    await ui.answered(2)
    moved_on = "Not approved: the conversation moved on. Ask again to do it."
    await expect(card.locator(".confirm-outcome")).to_have_text(moved_on)
    await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    await ui.screenshot("approval-superseded.png")
    await ui.page.reload()
    await ui.connected()
    await expect(card).to_have_attribute("data-status", "expired")
    await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    assert not await is_read(ui.vernis, notification_id)
