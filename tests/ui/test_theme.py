"""Theming the embedded panel (SPEC §11): `theme="light|dark|auto"`, the `--vernis-*` custom
properties a host sets on the element, and WCAG AA contrast of what both themes show, measured on
the colors the browser computes."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Route, expect

from tests.data import add_notification
from tests.ui.conftest import UI, Embed, OpenUI
from vernis.model.scripted import Reply, ScriptedToolCall

AA_TEXT = 4.5
# The effective colors of an element of the panel: its text, and the background behind it
# (its own and its ancestors', across the shadow boundary, composited down to the first opaque one).
COLORS = """(element, pseudo) => {
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 1;
    const context = canvas.getContext("2d", { willReadFrequently: true });
    const rgba = (css) => {
        context.clearRect(0, 0, 1, 1);
        context.fillStyle = css;
        context.fillRect(0, 0, 1, 1);
        const [r, g, b, a] = context.getImageData(0, 0, 1, 1).data;
        return [r, g, b, a / 255];
    };
    const layers = [];
    for (let node = element; node; node = node.parentElement || (node.getRootNode().host ?? null)) {
        const color = rgba(getComputedStyle(node).backgroundColor);
        if (color[3] > 0) {
            layers.push(color);
            if (color[3] === 1) break;
        }
    }
    let background = [255, 255, 255];
    for (const [r, g, b, a] of layers.reverse()) {
        background = [r * a + background[0] * (1 - a), g * a + background[1] * (1 - a), b * a + background[2] * (1 - a)];
    }
    return { text: rgba(getComputedStyle(element, pseudo).color).slice(0, 3), background };
}"""
# What each theme shows, element by element: the panel's text on its surfaces.
PAIRS = {
    "launcher": ".launcher-label",
    "title": ".title",
    "assistant name (muted)": ".assistant-name",
    "connection state (muted)": ".conn-text",
    "scripted-answers note": ".scripted-note",
    "empty title": ".empty-title",
    "empty text (muted)": ".empty-text",
    "quick action": ".quick-action:not(.page)",
    "page quick action (accent)": ".quick-action.page",
    "hint (muted)": ".hint",
    "placeholder (muted)": ".input::placeholder",
}
CONVERSATION_PAIRS = {
    "user message (on accent)": ".msg.user .bubble",
    "answer text": ".msg.assistant .markdown p",
    "link (accent)": ".markdown a",
    "inline code": ".markdown code",
    "tool name": ".tool-card[data-status='ok'] .tool-name",
    "tool done (success)": ".tool-card[data-status='ok'] .tool-status",
    "tool awaiting approval (warning)": ".tool-card[data-status='needs_confirmation'] .tool-status",
    "approval question": ".confirm-title",
    "approve button (on accent)": ".confirm .button.primary",
    "reject button": ".confirm .button:not(.primary)",
    "answer footer (muted)": ".answer-footer",
    "table header (UI block)": ".ui-table th",
    "table cell (UI block)": ".ui-table td",
    "table status (UI block, muted)": ".ui-table-status",
    "figure label (UI block, muted)": ".ui-metric-label",
    "figure value (UI block)": ".ui-metric-value",
    "link button (UI block)": ".ui-links a.button",
}


def luminance(rgb: list[float]) -> float:
    def channel(value: float) -> float:
        value /= 255
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: list[float], b: list[float]) -> float:
    """The WCAG 2 contrast ratio of two sRGB colors."""
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_contrast_formula_matches_known_ratios() -> None:
    """The WCAG ratio computed here gives 21 for black on white, 1 for equal colors and 4.54 for #767676 on white."""
    assert contrast([0, 0, 0], [255, 255, 255]) == pytest.approx(21)
    assert contrast([10, 20, 30], [10, 20, 30]) == pytest.approx(1)
    assert contrast([118, 118, 118], [255, 255, 255]) == pytest.approx(4.54, abs=0.01)


async def measure(ui: UI, pairs: dict[str, str]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    for name, selector in pairs.items():
        selector, _, pseudo = selector.partition("::")
        element = ui.page.locator(f"vernis-assistant {selector}").first
        colors: dict[str, Any] = await element.evaluate(COLORS, f"::{pseudo}" if pseudo else None)
        ratios[name] = round(contrast(colors["text"], colors["background"]), 2)
    return ratios


async def panel_background(ui: UI) -> list[float]:
    colors: dict[str, Any] = await ui.panel.evaluate(COLORS, None)
    return list(colors["background"])


def is_dark(rgb: list[float]) -> bool:
    return luminance(rgb) < 0.05


async def open_themed(open_ui: OpenUI, embed: Embed, theme: str, path: str = "/") -> UI:
    separator = "&" if "?" in path else "?"
    return await open_ui(embed.vernis, host=embed, email=None, path=f"{path}{separator}theme={theme}")


async def fill_conversation(ui: UI, embed: Embed) -> None:
    """An answer with markdown and finished reads (with UI blocks), then a write awaiting approval."""
    notification_id = await add_notification(embed.vernis, title="Call back Jane")
    scripted = embed.vernis.scripted
    reads = [
        ScriptedToolCall("get_unread_count", {}),
        ScriptedToolCall("get_dashboard_stats", {}),
        ScriptedToolCall("search_contacts", {"limit": 3}),
    ]
    scripted.add(Reply("Let me look.", tool_calls=reads), match="unread")
    scripted.add(
        Reply("You have **one** unread item. See [the notifications](https://example.com/n) or `inbox`."),
        match=lambda body: body["messages"][-1]["role"] == "tool",
    )
    scripted.add(
        Reply(tool_calls=[ScriptedToolCall("mark_notification_read", {"notification_id": notification_id})]),
        match="mark it read",
    )
    scripted.add("Approve the change above.", match=lambda body: body["messages"][-1]["role"] == "tool")
    await ui.send("how many unread?")
    await ui.answered()
    await ui.send("mark it read please")
    await ui.answered(2)
    await expect(ui.log.locator(".confirm .button.primary")).to_be_visible()


async def test_the_dark_theme_is_rendered(embed: Embed, open_ui: OpenUI) -> None:
    """`theme="dark"` on a light system draws the panel dark (dark surfaces, light text) with its conversation, tool cards and approval; screenshot in test-artifacts/."""
    ui = await open_themed(open_ui, embed, "dark", "/?q=Jane+Cooper")
    await ui.page.get_by_role("button", name="Jane Cooper").first.click()
    await ui.open()
    await expect(ui.log.locator(".quick-action.page")).to_be_visible()
    assert is_dark(await panel_background(ui))
    await ui.screenshot("embed-dark-empty.png")
    await fill_conversation(ui, embed)
    assert is_dark(await panel_background(ui))
    text: dict[str, Any] = await ui.log.locator(".msg.assistant .markdown p").first.evaluate(COLORS, None)
    assert luminance(text["text"]) > 0.6
    await ui.screenshot("embed-dark.png")


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_text_meets_wcag_aa_contrast_in_both_themes(theme: str, embed: Embed, open_ui: OpenUI) -> None:
    """Every kind of text the panel shows (muted, accent, on the accent, status badges, buttons, placeholder) is at least 4.5:1 against what is behind it, in both themes."""
    ui = await open_themed(open_ui, embed, theme, "/?q=Jane+Cooper")
    await ui.page.get_by_role("button", name="Jane Cooper").first.click()
    ratios = await measure(ui, {"launcher": PAIRS["launcher"]})
    await ui.open()
    await expect(ui.log.locator(".quick-action.page")).to_be_visible()
    ratios |= await measure(ui, {name: selector for name, selector in PAIRS.items() if name != "launcher"})
    await fill_conversation(ui, embed)
    ratios |= await measure(ui, CONVERSATION_PAIRS)
    failing = {name: ratio for name, ratio in ratios.items() if ratio < AA_TEXT}
    assert not failing, f"{theme}: below {AA_TEXT}:1: {failing} (all: {ratios})"
    assert len(ratios) == len(PAIRS) + len(CONVERSATION_PAIRS)


async def test_auto_follows_the_systems_color_scheme(embed: Embed, open_ui: OpenUI) -> None:
    """`theme="auto"` is dark while the system prefers dark and turns light when it changes, live; `light` stays light on a dark system."""
    ui = await open_themed(open_ui, embed, "auto")
    await ui.page.emulate_media(color_scheme="dark")
    await ui.open()
    assert is_dark(await panel_background(ui))
    await ui.screenshot("embed-auto-dark.png")
    await ui.page.emulate_media(color_scheme="light")
    assert not is_dark(await panel_background(ui))
    await ui.page.locator("vernis-assistant").evaluate(
        """element => element.setAttribute("theme", "light")"""
    )
    await ui.page.emulate_media(color_scheme="dark")
    assert not is_dark(await panel_background(ui))


async def test_a_host_stylesheet_rule_themes_the_panel(embed: Embed, open_ui: OpenUI) -> None:
    """A rule in the host's own stylesheet, `vernis-assistant { --vernis-accent: ...; --vernis-panel-width: ... }`, reaches into the panel, in the dark theme too."""
    ui = await open_themed(open_ui, embed, "dark")
    brand = "vernis-assistant { --vernis-accent: #7c3aed; --vernis-on-accent: #ffffff; --vernis-panel-width: 480px; --vernis-radius: 3px; }"

    async def stylesheet(route: Route) -> None:
        await route.fulfill(status=200, content_type="text/css", body=brand)

    # A stylesheet from the host's origin, as its CSP allows (an inline <style> would be refused).
    await ui.page.route(f"{embed.url}/host/brand.css", stylesheet)
    await ui.page.add_style_tag(url=f"{embed.url}/host/brand.css")
    await ui.open()
    await ui.input.fill("Hello")  # Send is off while there is nothing to send
    send = ui.panel.get_by_role("button", name="Send", exact=True)
    await expect(send).to_have_css("background-color", "rgb(124, 58, 237)")
    await expect(send).to_have_css("color", "rgb(255, 255, 255)")
    await expect(ui.panel).to_have_css("width", "480px")
    await expect(ui.log.locator(".quick-action").first).to_have_css("border-radius", "3px")
    assert is_dark(await panel_background(ui))
    await ui.screenshot("embed-branded-dark.png")
