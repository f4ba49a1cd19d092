"""Full-screen geometry (SPEC §11): the message column is centred in the space beside the
conversation list, and the composer lines up with it, at a desktop and a laptop size."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import expect

from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, OpenUI
from vernis.model.scripted import Reply

GEOMETRY = """(root) => {
    const box = (selector) => {
        const element = root.querySelector(selector);
        if (!element || element.getClientRects().length === 0) return null;
        const rect = element.getBoundingClientRect();
        return { left: rect.left, right: rect.right, top: rect.top, bottom: rect.bottom };
    };
    const log = root.querySelector(".log");
    const style = getComputedStyle(log);
    const rect = log.getBoundingClientRect();
    return {
        panel: box(".panel"),
        picker: box(".picker"),
        log: { left: rect.left, right: rect.right, top: rect.top, bottom: rect.bottom },
        column: {
            left: rect.left + parseFloat(style.paddingLeft),
            right: rect.right - parseFloat(style.paddingRight),
        },
        composer: box(".composer-row"),
        composerBox: box(".composer"),
        user: box(".msg.user .bubble"),
        answer: box(".msg.assistant"),
    };
}"""


async def geometry(ui: UI) -> dict[str, Any]:
    shadow = ui.page.locator("vernis-assistant")
    result: dict[str, Any] = await shadow.evaluate(f"(element) => ({GEOMETRY})(element.shadowRoot)")
    return result


def near(a: float, b: float) -> bool:
    return abs(a - b) <= 1.5


@pytest.mark.parametrize("viewport", [(1440, 900), (1024, 768)])
async def test_full_screen_column_is_centred_beside_the_list(
    vernis: Vernis, open_ui: OpenUI, viewport: tuple[int, int]
) -> None:
    """With the list open or closed, the messages are centred in the space beside it and the composer has their width."""
    ui = await open_ui(vernis, viewport=viewport)
    ui.vernis.scripted.add(Reply("A centred answer. " * 30), match="centre")
    await ui.open()
    await ui.send("centre me")
    await ui.answered()
    await ui.panel.get_by_role("button", name="Expand to full screen").click()
    await expect(ui.panel).to_have_attribute("data-expanded", "")
    width = viewport[0]

    for with_list in (False, True):
        if with_list:
            await ui.panel.get_by_role("button", name="Conversations").click()
            await expect(ui.picker).to_be_visible()
            await expect(ui.picker.locator(".conv")).to_have_count(1)
        await ui.page.wait_for_function(
            "() => document.querySelector('vernis-assistant').shadowRoot.querySelector('.panel')"
            ".getBoundingClientRect().width === window.innerWidth"
        )
        g = await geometry(ui)
        beside = g["picker"]["right"] if with_list else 0
        assert (g["picker"] is not None) == with_list
        # The message area starts where the list ends, and runs to the right edge.
        assert near(g["log"]["left"], beside), g
        assert near(g["log"]["right"], width), g
        # The column: at most 780 px, centred in that space (not in the whole page).
        space = width - beside
        column = g["column"]["right"] - g["column"]["left"]
        assert near(column, min(780, space - 48)), g
        assert near((g["column"]["left"] + g["column"]["right"]) / 2, beside + space / 2), g
        # The composer lines up with the column, and the messages stay inside it.
        assert near(g["composer"]["left"], g["column"]["left"]), g
        assert near(g["composer"]["right"], g["column"]["right"]), g
        assert g["user"]["right"] <= g["column"]["right"] + 1, g
        assert g["answer"]["left"] >= g["column"]["left"] - 1, g
        if with_list:
            # The list runs the whole height beside the messages and the composer.
            assert near(g["picker"]["bottom"], g["composerBox"]["bottom"]), g
        name = f"fullscreen-{'list' if with_list else 'nolist'}-{width}.png"
        await ui.screenshot(name)


WIDE_TABLE = "| Name | E-mail | Company | Phone | City | Stage |\n|---|---|---|---|---|---|\n" + "\n".join(
    f"| Carol Adams {n} | carol.adams.{n}@northwind-traders.example | Northwind Traders | +44 20 7946 0{n:03d} | Manchester | Qualified |"
    for n in range(3)
)

WORDS_UNBROKEN = """(table) => {
    // Each cell's text wraps at spaces if at all: never more lines than words (mid-word breaks,
    // "Caro l Ada ms", make many more).
    for (const cell of table.querySelectorAll("th, td")) {
        const range = document.createRange();
        range.selectNodeContents(cell);
        const lines = new Set([...range.getClientRects()].map((rect) => Math.round(rect.top)));
        const words = cell.textContent.trim().split(/\\s+/).length;
        if (lines.size > words) return `${cell.textContent}: ${lines.size} lines`;
    }
    return null;
}"""


@pytest.mark.parametrize("viewport", [(1280, 900), (390, 844)], ids=["side-panel", "phone"])
async def test_a_wide_table_scrolls_sideways_with_readable_cells(
    open_ui: OpenUI, vernis: Vernis, viewport: tuple[int, int]
) -> None:
    """A six-column table in the 400 px panel and on a phone keeps its words whole and scrolls sideways, in a region the keyboard can focus and scroll."""
    vernis.scripted.add(Reply(f"Here they are:\n\n{WIDE_TABLE}\n\nAnything else?"), match="contacts")
    ui = await open_ui(vernis, viewport=viewport)
    await ui.open()
    await ui.send("list the contacts")
    answer = await ui.answered()
    region = answer.locator(".markdown .table-scroll")
    await expect(region).to_have_attribute("role", "region")
    await expect(region).to_have_attribute("tabindex", "0")
    assert await region.locator("table").evaluate(WORDS_UNBROKEN) is None
    assert await region.evaluate("(element) => element.scrollWidth > element.clientWidth + 40")
    await region.focus()
    await ui.page.keyboard.press("ArrowRight")
    await ui.page.wait_for_function("(element) => element.scrollLeft > 0", arg=await region.element_handle())
