"""Approve / reject buttons on a write's preview (SPEC §5, §11), live and after a reload."""

from __future__ import annotations

from typing import Any

from playwright.async_api import expect

from tests.data import add_notification, is_read
from tests.ui.conftest import UI, eventually
from vernis.scripted import Reply, ScriptedToolCall


def after_tool(body: dict[str, Any]) -> bool:
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
    await expect(confirm.locator(".from")).to_have_text("false")
    await expect(confirm.locator(".to")).to_have_text("true")
    assert not await is_read(ui.vernis, notification_id)
    await ui.screenshot("preview.png")

    await confirm.get_by_role("button", name="Approve").click()
    await expect(card).to_have_attribute("data-status", "ok")
    await expect(card.locator(".tool-status")).to_have_text("Approved · done")
    await expect(confirm.locator(".confirm-outcome")).to_have_text("Approved. The change was made.")
    await expect(confirm.get_by_role("button")).to_have_count(0)
    await eventually(lambda: is_read(ui.vernis, notification_id))
    await card.locator("summary").click()
    await expect(card.locator(".tool-json").last).to_contain_text('"read": true')


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
    """A preview's object is shown whole unless it only names a record: a title never hides an amount or a recipient."""
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
    assert '"amount":5000' in shown["mcp"]
    assert '"to":"attacker"' in shown["mcp"]
    assert "Jane Cooper" in shown["record"]
    assert "c-1" not in shown["record"]
