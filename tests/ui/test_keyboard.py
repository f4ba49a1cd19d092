"""Keyboard only (SPEC §11 "keyboard only works throughout"): full screen is a modal dialog, and
focus never falls to the page's <body> after an action."""

from __future__ import annotations

from playwright.async_api import expect

from tests.ui.conftest import UI
from vernis.model.scripted import Reply

# Where focus is: "panel" (inside the assistant's shadow root, with the element's class), else the
# host page's element.
FOCUS = """() => {
    const active = document.activeElement;
    if (active && active.tagName === "VERNIS-ASSISTANT") {
        const inner = active.shadowRoot.activeElement;
        return "panel:" + (inner ? (inner.getAttribute("aria-label") || inner.className || inner.tagName) : "");
    }
    return "page:" + (active ? active.tagName : "");
}"""


async def focus(ui: UI) -> str:
    result: str = await ui.page.evaluate(FOCUS)
    return result


async def test_full_screen_keeps_focus_inside_and_escape_collapses_it(ui: UI) -> None:
    """In full screen Tab and Shift+Tab cycle inside the panel, focus sent to the page comes back, Escape collapses and restores focus."""
    ui.vernis.scripted.add(Reply("See [the docs](https://example.com/docs) for more."), match="hello")
    await ui.page.keyboard.press("Control+/")
    await ui.connected()
    await expect(ui.input).to_be_focused()
    await ui.page.keyboard.type("hello")
    await ui.page.keyboard.press("Enter")
    await ui.answered()
    expand = ui.panel.get_by_role("button", name="Expand to full screen")
    await expand.focus()
    await ui.page.keyboard.press("Enter")
    await expect(ui.panel).to_have_attribute("data-expanded", "")
    await expect(ui.panel).to_have_attribute("aria-modal", "true")
    await expect(ui.page.get_by_role("dialog", name="hello")).to_be_visible()

    seen: set[str] = set()
    for key in ["Tab"] * 25 + ["Shift+Tab"] * 25:
        await ui.page.keyboard.press(key)
        where = await focus(ui)
        assert where.startswith("panel:"), f"{key} left the dialog: {where}"
        seen.add(where)
    # The walk went round: the header's buttons, the answer's link and feedback, the composer.
    assert {"panel:Conversations", "panel:Close assistant", "panel:Helpful", "panel:input"} <= seen, seen

    # A host script (or a click behind) cannot take focus out of the dialog.
    await ui.page.evaluate("document.querySelector('main a, a').focus()")
    assert (await focus(ui)).startswith("panel:")
    await ui.screenshot("keyboard-fullscreen.png")

    # Escape collapses full screen (the panel stays open) and focus returns to the expand button.
    await ui.page.keyboard.press("Escape")
    await expect(ui.panel).not_to_have_attribute("data-expanded", "")
    await expect(ui.panel).to_have_attribute("data-open", "")
    await expect(ui.panel).to_have_attribute("aria-modal", "false")
    await expect(expand).to_be_focused()
    # Out of full screen the page is reachable again, and Escape now closes the panel.
    await ui.page.keyboard.press("Escape")
    await expect(ui.panel).not_to_have_attribute("data-open", "")
    await expect(ui.launcher).to_be_focused()


async def test_escape_collapses_full_screen_when_focus_is_on_the_page(ui: UI) -> None:
    """Escape collapses full screen even when the event reaches the page, not the panel."""
    await ui.open()
    await ui.panel.get_by_role("button", name="Expand to full screen").click()
    await expect(ui.panel).to_have_attribute("data-expanded", "")
    await ui.page.evaluate(
        "document.body.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', bubbles: true}))"
    )
    await expect(ui.panel).not_to_have_attribute("data-expanded", "")
    await expect(ui.panel).to_have_attribute("data-open", "")


async def test_focus_goes_to_the_composer_after_a_quick_action(ui: UI) -> None:
    """A quick action chosen with the keyboard sends its prompt and leaves focus in the composer, not on <body>."""
    ui.vernis.scripted.add(Reply("Here are your calls."), match="recent calls")
    await ui.open()
    action = ui.log.get_by_role("button", name="Recent calls")
    await action.focus()
    await ui.page.keyboard.press("Enter")
    await ui.answered()
    await expect(ui.input).to_be_focused()
    assert await focus(ui) == "panel:input"
