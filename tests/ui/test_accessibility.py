"""Accessibility (SPEC §11, WCAG 2.2 AA): axe-core (npm, vendored by scripts/bootstrap) run inside the
page finds no serious or critical violation in the panel, in the light and the dark theme, empty, with
a conversation (markdown, tool cards, an approval) and in full screen; forced colours keep the user's
and the assistant's messages apart; text directions follow the text (`dir="auto"`)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import expect

from tests.ui.conftest import UI, VENDOR, Embed, EmbedFactory, OpenUI
from tests.ui.test_states import sign_out_while_offline
from tests.ui.test_theme import COLORS, contrast, fill_conversation, open_themed
from vernis.model.scripted import Reply

AXE = """async (element) => {
    const result = await axe.run(element, { resultTypes: ["violations"] });
    return result.violations.map((violation) => ({
        id: violation.id,
        impact: violation.impact,
        help: violation.help,
        nodes: violation.nodes.slice(0, 5).map((node) => ({ target: node.target, summary: node.failureSummary })),
    }));
}"""


async def audit(ui: UI, server: str) -> list[dict[str, Any]]:
    """The serious and critical violations axe-core finds in the assistant element (its shadow root too)."""
    assert (VENDOR / "axe.min.js").exists(), "static/vendor/axe.min.js is missing: run scripts/bootstrap"
    if not await ui.page.evaluate("typeof window.axe !== 'undefined'"):
        await ui.page.add_script_tag(url=f"{server}/static/vendor/axe.min.js")
    before = len(ui.console_errors)
    violations: list[dict[str, Any]] = await ui.page.locator("vernis-assistant").evaluate(AXE)
    # axe-core measures with inline styles of its own, which the host page's CSP refuses (and says
    # so on the console): those messages are the audit's, not the panel's.
    ui.console_errors[before:] = [
        message
        for message in ui.console_errors[before:]
        if not message.startswith("Applying inline style violates")
    ]
    return [v for v in violations if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_axe_finds_no_serious_violation(theme: str, embed: Embed, open_ui: OpenUI) -> None:
    """axe-core reports no serious or critical violation in the panel: empty, with a conversation and an approval, and in full screen."""
    ui = await open_themed(open_ui, embed, theme, "/?q=Jane+Cooper")
    await ui.page.get_by_role("button", name="Jane Cooper").first.click()
    server = embed.vernis.http_url
    found: dict[str, list[dict[str, Any]]] = {}
    found["launcher"] = await audit(ui, server)
    await ui.open()
    await expect(ui.log.locator(".quick-action.page")).to_be_visible()
    found["empty"] = await audit(ui, server)
    await fill_conversation(ui, embed)
    # The tool card of the first answer, opened: its arguments and result.
    await ui.log.locator(".tool-card summary").first.click()
    found["conversation"] = await audit(ui, server)
    await ui.panel.get_by_role("button", name="Expand to full screen").click()
    await ui.panel.get_by_role("button", name="Conversations").click()
    await expect(ui.picker.locator(".conv")).to_have_count(1)
    found["full screen"] = await audit(ui, server)
    await ui.screenshot(f"axe-{theme}.png")
    failing = {state: violations for state, violations in found.items() if violations}
    assert not failing, f"{theme}: {failing}"


# The opacity an element is drawn with: its own times its ancestors' (across the shadow boundary).
OPACITY = """(element) => {
    let opacity = 1;
    for (let node = element; node; node = node.parentElement || (node.getRootNode().host ?? null)) {
        opacity *= parseFloat(getComputedStyle(node).opacity);
    }
    return opacity;
}"""


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_icons_meet_the_non_text_contrast(theme: str, embed: Embed, open_ui: OpenUI) -> None:
    """The feedback, header and send icons are drawn at full opacity and at least 3:1 against their background (WCAG 1.4.11)."""
    ui = await open_themed(open_ui, embed, theme)
    embed.vernis.scripted.add(Reply("An answer to rate."), match="rate")
    await ui.open()
    await ui.send("rate this")
    await ui.answered()
    # Send as it is when there is something to send (while the input is empty it is visibly off).
    await ui.input.fill("Thanks")
    ratios: dict[str, float] = {}
    for name, selector in {
        "helpful": ".feedback .icon-button[aria-label='Helpful']",
        "not helpful": ".feedback .icon-button[aria-label='Not helpful']",
        "expand": ".icon-button.expand",
        "close": ".icon-button.close",
        "send": ".icon-button.send",
    }.items():
        element = ui.panel.locator(selector)
        assert await element.evaluate(OPACITY) == 1, name
        colors: dict[str, Any] = await element.evaluate(COLORS, None)
        ratios[name] = round(contrast(colors["text"], colors["background"]), 2)
    failing = {name: ratio for name, ratio in ratios.items() if ratio < 3}
    assert not failing, f"{theme}: {ratios}"


async def test_forced_colours_keep_the_speakers_apart(ui: UI) -> None:
    """In forced-colours mode the user's messages keep a visible border and the assistant's a side rule: still told apart."""
    ui.vernis.scripted.add(Reply("An answer."), match="hello")
    await ui.page.emulate_media(forced_colors="active")
    await ui.open()
    await ui.send("hello")
    await ui.answered()
    user = ui.log.locator(".msg.user .bubble")
    answer = ui.answers().last
    assert float(await user.evaluate("(e) => parseFloat(getComputedStyle(e).borderTopWidth)")) >= 1
    assert await answer.evaluate("(e) => parseFloat(getComputedStyle(e).borderLeftWidth)") >= 2
    assert await answer.evaluate("(e) => parseFloat(getComputedStyle(e).borderTopWidth)") == 0
    await ui.screenshot("forced-colours.png")


async def test_right_to_left_text_reads_right_to_left(ui: UI) -> None:
    """Messages, an answer's blocks and the composer have dir="auto": Arabic text is laid out right to left in a left-to-right page."""
    ui.vernis.scripted.add(Reply("مرحبا، كيف يمكنني مساعدتك اليوم؟"), match="مرحبا")
    await ui.open()
    await expect(ui.input).to_have_attribute("dir", "auto")
    await ui.send("مرحبا بك")
    answer = await ui.answered()
    directions = {
        "user": await ui.log.locator(".msg.user .bubble").evaluate("(e) => e.matches(':dir(rtl)')"),
        "answer": await answer.locator(".markdown p").evaluate("(e) => e.matches(':dir(rtl)')"),
        "composer": await ui.input.evaluate("(e) => { e.value = 'שלום'; return e.matches(':dir(rtl)'); }"),
        "page": await ui.page.evaluate("document.body.matches(':dir(rtl)')"),
    }
    assert directions == {"user": True, "answer": True, "composer": True, "page": False}
    await ui.screenshot("right-to-left.png")


async def test_each_block_of_a_mixed_answer_takes_its_own_direction(ui: UI) -> None:
    """In an answer mixing Arabic and English, each paragraph, list item and table cell is laid out in its own text's direction, not the answer's first one."""
    text = (
        "Here is the summary in English.\n\n"
        "هذا ملخص باللغة العربية.\n\n"
        "- First point in English\n- النقطة الثانية بالعربية\n\n"
        "| Name | الاسم |\n|---|---|\n| Carol | كارول |"
    )
    ui.vernis.scripted.add(Reply(text), match="mixed")
    await ui.open()
    await ui.send("a mixed answer please")
    answer = await ui.answered()
    rtl = "(e) => e.matches(':dir(rtl)')"
    blocks = answer.locator(".markdown")
    assert [await p.evaluate(rtl) for p in await blocks.locator("p").all()] == [False, True]
    assert [await li.evaluate(rtl) for li in await blocks.locator("li").all()] == [False, True]
    assert [await cell.evaluate(rtl) for cell in await blocks.locator("th, td").all()] == [
        False,
        True,
        False,
        True,
    ]
    # The Arabic item's bullet is on its right, inside the answer's column.
    column = await blocks.bounding_box()
    item = await blocks.locator("li").last.bounding_box()
    assert column is not None
    assert item is not None
    assert item["x"] + item["width"] < column["x"] + column["width"] - 8
    await ui.screenshot("mixed-directions.png")


async def test_a_neutralised_link_does_not_look_like_a_link(ui: UI) -> None:
    """A link the sanitizer neutralised (javascript:) is plain text: the paragraph's colour, no underline, no pointer."""
    ui.vernis.scripted.add(
        Reply("A [bad link](javascript:alert(1)) and a [good one](https://example.com/)."), match="links"
    )
    await ui.open()
    await ui.send("links please")
    answer = await ui.answered()
    bad = answer.locator("a", has_text="bad link")
    good = answer.locator("a", has_text="good one")
    await expect(bad).not_to_have_attribute("href", "javascript:alert(1)")
    style = "(e) => { const s = getComputedStyle(e); return [s.color, s.textDecorationLine, s.cursor]; }"
    paragraph = await answer.locator(".markdown p").evaluate("(e) => getComputedStyle(e).color")
    assert await bad.evaluate(style) == [paragraph, "none", "auto"]
    good_style = await good.evaluate(style)
    assert good_style[0] != paragraph
    assert good_style[1] == "underline"


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_axe_finds_no_serious_violation_on_a_phone(
    theme: str, embed_factory: EmbedFactory, open_ui: OpenUI
) -> None:
    """At 390 x 844 the panel (whole width) with a conversation and a pending approval has no serious or critical axe violation."""
    async with embed_factory() as embed:
        ui = await open_ui(embed.vernis, host=embed, email=None, path=f"/?theme={theme}", viewport=(390, 844))
        await ui.open()
        await expect(ui.panel).to_have_css("width", "390px")
        await fill_conversation(ui, embed)
        violations = await audit(ui, embed.vernis.http_url)
        await ui.screenshot(f"phone-approval-{theme}.png")
        assert not violations, f"{theme}: {violations}"
        overflow = await ui.log.evaluate("(log) => log.scrollWidth - log.clientWidth")
        assert overflow == 0


LONG_ANSWER = "\n\n".join(
    [
        "Here are the open invoices, with the script that lists them.",
        "| Customer | E-mail | Amount | Due |\n|---|---|---|---|\n"
        + "\n".join(
            f"| Customer {n} | billing.department.{n}@example-customer.test | {n * 125}.00 EUR | 2026-12-{n:02d} |"
            for n in range(1, 13)
        ),
        "```python\n"
        + "\n".join(
            f"print('invoice {n}', {n * 125})  # a line long enough to scroll sideways" for n in range(1, 25)
        )
        + "\n```",
        "مرحبا: the same list in Arabic follows.",
    ]
)


async def test_axe_finds_no_serious_violation_with_tables_code_right_to_left_and_signed_out(ui: UI) -> None:
    """axe-core reports no serious or critical violation on a long answer with a table and code, on a right-to-left page, and signed out."""
    ui.console_errors_expected = True  # the socket refused once signed out
    ui.vernis.scripted.add(Reply(LONG_ANSWER), match="invoices")
    server = ui.vernis.http_url
    found: dict[str, list[dict[str, Any]]] = {}
    await ui.open()
    await ui.send("list the open invoices")
    answer = await ui.answered()
    await expect(answer.locator("table")).to_be_visible()
    await expect(answer.locator("pre code")).to_be_visible()
    found["table and code"] = await audit(ui, server)
    await ui.page.evaluate("document.documentElement.dir = 'rtl'")
    found["right to left"] = await audit(ui, server)
    await sign_out_while_offline(ui)
    found["signed out"] = await audit(ui, server)
    await ui.screenshot("axe-table-rtl-signed-out.png")
    failing = {state: violations for state, violations in found.items() if violations}
    assert not failing, failing
