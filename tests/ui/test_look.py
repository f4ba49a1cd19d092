"""The panel's look (issue 31): the `float` layout, reading comfort in full screen, the assistant's
name and avatar at the head of each turn, the greeting of an empty conversation and the "Thinking…"
line, in Chromium; the screenshots in docs/embedding.md come from here (test-artifacts/look-*.png)."""

from __future__ import annotations

import base64
from typing import Any

from playwright.async_api import Route, expect

from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, OpenUI
from tests.ui.test_accessibility import audit
from vernis.model.scripted import Fault, Quirk, Reply, ScriptedToolCall

DESKTOP = (1440, 900)
PHONE = (390, 844)
# A one-pixel PNG: the configured avatar's image, served by the test (no file on the server).
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

# The open panel's box and style, and what the host page's body got, once it has come to rest.
FLOAT = """(element) => {
    const panel = element.shadowRoot.querySelector(".panel");
    const launcher = element.shadowRoot.querySelector(".launcher");
    const style = getComputedStyle(panel);
    const rect = panel.getBoundingClientRect();
    const button = launcher.getBoundingClientRect();
    return {
        left: rect.left, right: rect.right, top: rect.top, bottom: rect.bottom,
        viewport: [window.innerWidth, window.innerHeight],
        radius: parseFloat(style.borderTopLeftRadius),
        shadow: style.boxShadow,
        launcher: { visible: launcher.checkVisibility(), top: button.top, right: button.right },
        bodyMargin: getComputedStyle(document.body).marginRight,
        pushed: document.documentElement.hasAttribute("data-vernis-pushed"),
    };
}"""
AT_REST = """() => {
    const panel = document.querySelector("vernis-assistant").shadowRoot.querySelector(".panel");
    return panel.getAnimations().length === 0 && getComputedStyle(panel).transform === "none";
}"""


async def configure(ui: UI, **fields: Any) -> None:
    """The server's `/api/assistant/config` with `fields` added (those the server may not send yet)."""

    response = await ui.context.request.get(f"{ui.url}/api/assistant/config")
    assert response.ok, response.status
    body = {**await response.json(), **fields}

    async def amend(route: Route) -> None:
        await route.fulfill(status=200, json=body, headers={"Cache-Control": "no-store"})

    await ui.page.route("**/api/assistant/config", amend)


async def open_page(
    vernis: Vernis,
    open_ui: OpenUI,
    *,
    layout: str = "float",
    theme: str = "light",
    viewport: tuple[int, int] = DESKTOP,
    email: str = "member@acme.test",
    **config: Any,
) -> UI:
    """The contact list with the assistant in `layout` and `theme`, named Ada, the panel closed."""
    ui = await open_ui(vernis, viewport=viewport, path=None, email=email)
    await configure(ui, name="Ada", **config)
    await ui.goto("/contacts")
    await ui.page.locator("vernis-assistant").evaluate(
        "(element, [layout, theme]) => { element.setAttribute('layout', layout); element.setAttribute('theme', theme); }",
        [layout, theme],
    )
    return ui


async def converse(ui: UI) -> None:
    """One exchange: an answer that looks something up (a tool card) and then writes markdown."""
    scripted = ui.vernis.scripted
    scripted.add(Reply("Let me look.", tool_calls=[ScriptedToolCall("get_unread_count", {})]), match="unread")
    scripted.add(
        Reply(
            "You have **one** unread notification.\n\nIt is from *Jane Cooper*, about Tuesday's call:\n\n"
            "- she asked for the new price list\n- she wants a call back before Friday"
        ),
        match=lambda body: body["messages"][-1]["role"] == "tool",
    )
    await ui.send("Anything unread?")
    await ui.answered()


async def test_float_layout_is_an_inset_rounded_card_above_the_launcher(
    vernis: Vernis, open_ui: OpenUI
) -> None:
    """layout="float" opens a rounded card with a shadow, inset from the corner above its launcher (which closes it), and leaves the host page's body unpushed; axe finds no serious violation in it."""
    ui = await open_page(vernis, open_ui)
    await ui.open()
    await ui.page.wait_for_function(AT_REST)
    box = await ui.page.locator("vernis-assistant").evaluate(FLOAT)
    width, height = box["viewport"]
    assert 16 <= width - box["right"] <= 40, box
    assert box["top"] >= 16, box
    assert box["radius"] >= 12, box
    assert box["shadow"] != "none", box
    assert box["right"] - box["left"] <= 440, box
    # Above the launcher, which stays in view as the card's close button.
    assert box["launcher"]["visible"], box
    assert box["bottom"] < box["launcher"]["top"], box
    assert height - box["bottom"] > 60, box
    assert box["bodyMargin"] == "0px", box
    assert not box["pushed"], box
    await expect(ui.log.locator(".empty")).to_be_visible()
    empty = await audit(ui, vernis.http_url)
    await converse(ui)
    conversation = await audit(ui, vernis.http_url)
    assert not empty, empty
    assert not conversation, conversation
    await ui.screenshot("look-float-light.png")

    await expect(ui.launcher).to_have_attribute("aria-expanded", "true")
    await ui.launcher.click()
    await expect(ui.panel).not_to_have_attribute("data-open", "")
    await expect(ui.launcher.locator(".launcher-label")).to_be_visible()


async def test_float_layout_in_the_dark_theme(vernis: Vernis, open_ui: OpenUI) -> None:
    """The float card in the dark theme keeps its corner, radius and shadow, and passes axe with a conversation."""
    ui = await open_page(vernis, open_ui, theme="dark")
    await ui.open()
    await converse(ui)
    await ui.page.wait_for_function(AT_REST)
    box = await ui.page.locator("vernis-assistant").evaluate(FLOAT)
    assert box["radius"] >= 12, box
    assert box["shadow"] != "none", box
    assert not await audit(ui, vernis.http_url)
    await ui.screenshot("look-float-dark.png")


async def test_the_first_answer_of_a_turn_opens_with_the_name_and_a_monogram(
    vernis: Vernis, open_ui: OpenUI
) -> None:
    """Each turn's answer opens once with "Ada" and an "A" avatar on the accent colour; its tool card and the text after it, and an answer that continues it, get none."""
    ui = await open_page(vernis, open_ui, layout="overlay")
    await ui.open()
    await converse(ui)
    answer = ui.answers().first
    heads = answer.locator(".answer-head")
    await expect(heads).to_have_count(1)
    await expect(heads.locator(".answer-name")).to_have_text("Ada")
    await expect(heads.locator(".avatar")).to_have_text("A")
    await expect(heads.locator(".avatar")).to_have_attribute("aria-hidden", "true")
    # At the top: before the tool card and the text that came after it.
    assert await answer.evaluate("(e) => e.firstElementChild.matches('.answer-head')")
    await expect(answer.locator(".tool-card")).to_have_count(1)
    await expect(answer.locator(".markdown")).to_have_count(2)
    colors = await heads.locator(".avatar").evaluate(
        """(avatar) => {
            const root = avatar.getRootNode().querySelector(".root");
            const probe = document.createElement("span");
            probe.style.color = getComputedStyle(root).getPropertyValue("--accent");
            root.append(probe);
            const accent = getComputedStyle(probe).color;
            probe.remove();
            return { background: getComputedStyle(avatar).backgroundColor, accent, radius: getComputedStyle(avatar).borderRadius };
        }"""
    )
    assert colors["background"] == colors["accent"], colors
    assert colors["radius"] == "50%", colors

    # An answer that continues this one (after a review's outcome) goes on under its head.
    await ui.page.locator("vernis-assistant").evaluate(
        """(element) => {
            const answer = element.messages.startAnswer("continued", { continues: true });
            element.messages.appendText(answer, "The reviewer approved it.");
            element.messages.finish(answer);
        }"""
    )
    continued = ui.log.locator('.msg.assistant[data-message-id="continued"]')
    await expect(continued.locator(".markdown")).to_have_text("The reviewer approved it.")
    await expect(continued.locator(".answer-head")).to_have_count(0)

    # The next turn opens with its own.
    ui.vernis.scripted.add(Reply("Done."), match="thanks")
    await ui.send("thanks")
    await ui.answered(3)
    await expect(ui.log.locator(".answer-head")).to_have_count(2)
    await expect(ui.answers().last.locator(".answer-head .answer-name")).to_have_text("Ada")


async def test_the_empty_conversation_greets_by_name(vernis: Vernis, open_ui: OpenUI) -> None:
    """Without a configured greeting the empty conversation says "Hi, I'm Ada. How can I help?" under an "A" avatar."""
    ui = await open_page(vernis, open_ui)
    await ui.open()
    empty = ui.log.locator(".empty")
    await expect(empty.locator(".empty-greeting")).to_have_text(
        "Hi, I'm Ada. How can I help?", use_inner_text=True
    )
    await expect(empty.locator(".avatar")).to_have_text("A")
    await ui.page.wait_for_function(AT_REST)
    await ui.screenshot("look-empty.png")


async def test_the_configured_greeting_and_avatar_are_shown(vernis: Vernis, open_ui: OpenUI) -> None:
    """A `greeting` and an `avatar_url` in the config replace the default greeting and the monogram, in the empty state and on answers; an avatar on another origin is not loaded."""
    ui = await open_page(vernis, open_ui, greeting="Welcome to the front desk.", avatar_url="/static/ada.png")

    async def pixel(route: Route) -> None:
        await route.fulfill(status=200, content_type="image/png", body=PIXEL)

    await ui.page.route("**/static/ada.png", pixel)
    await ui.open()
    empty = ui.log.locator(".empty")
    await expect(empty.locator(".empty-greeting")).to_have_text("Welcome to the front desk.")
    image = empty.locator(".avatar img")
    await expect(image).to_have_attribute("src", f"{vernis.http_url}/static/ada.png")
    await expect(image).to_have_js_property("naturalWidth", 1)
    ui.vernis.scripted.add(Reply("Hello."), match="hello")
    await ui.send("hello")
    answer = await ui.answered()
    await expect(answer.locator(".answer-head .avatar img")).to_have_count(1)

    other = await open_page(
        vernis, open_ui, email="owner@acme.test", avatar_url="https://images.example.com/ada.png"
    )
    await other.open()
    await expect(other.log.locator(".empty .avatar")).to_have_text("A")
    await expect(other.log.locator(".empty .avatar img")).to_have_count(0)


async def test_thinking_shows_from_send_until_the_first_text(vernis: Vernis, open_ui: OpenUI) -> None:
    """A "Thinking…" line shows right after sending, animated unless reduced motion is asked, and is gone once the answer's text streams."""
    ui = await open_page(vernis, open_ui)
    # The first text is held 2 s (the role's chunk goes at once): time enough for the checks of the
    # line on a loaded machine (a first word 0.6 s after the request once came before them).
    first_text_held = Fault.stall(after=1, seconds=2.0)
    ui.vernis.scripted.add(Reply("Here it is.", chunk_delay=0.6, fault=first_text_held), match="slowly")
    await ui.open()
    await ui.send("answer slowly")
    thinking = ui.log.locator(".thinking")
    await expect(thinking).to_have_count(1)
    await expect(thinking).to_have_text("Thinking…")
    await expect(thinking).to_be_visible()
    await expect(thinking.locator(".thinking-dot")).to_have_css("animation-name", "thinking")
    await expect(ui.log.locator(".msg.assistant .answer-head")).to_have_count(1)
    await ui.screenshot("look-thinking.png")
    await expect(ui.answers().first.locator(".markdown")).to_contain_text("Here")
    await expect(thinking).to_have_count(0)
    # Gone while the answer still streams, not only at its end.
    await expect(ui.answers().first).to_have_attribute("data-streaming", "")
    await ui.answered()

    await ui.page.emulate_media(reduced_motion="reduce")
    ui.vernis.scripted.add(Reply("Calmly.", fault=first_text_held), match="calmly")
    await ui.send("answer calmly")
    await expect(thinking).to_be_visible()
    await expect(thinking.locator(".thinking-dot")).to_have_css("animation-name", "none")
    await ui.answered(2)
    await expect(thinking).to_have_count(0)


async def test_streamed_reasoning_folds_into_the_thinking_line(vernis: Vernis, open_ui: OpenUI) -> None:
    """Reasoning streamed before the text becomes the one "Thinking…" line (a folded disclosure, animated), not a second line; it stops once text streams."""
    ui = await open_page(vernis, open_ui)
    thoughts = ["Jane ", "called ", "on ", "Tuesday, ", "about ", "prices."]
    ui.vernis.scripted.add(
        Reply("She called on Tuesday.", reasoning=thoughts, quirks=Quirk.REASONING, chunk_delay=0.25),
        match="Jane",
    )
    await ui.open()
    await ui.send("When did Jane call?")
    reasoning = ui.log.locator("details.reasoning[data-active]")
    await expect(reasoning).to_be_visible()
    await expect(ui.log.locator(".thinking")).to_have_count(0)
    await expect(ui.log.get_by_text("Thinking…")).to_have_count(1)
    await expect(reasoning.locator(".thinking-dot")).to_be_visible()
    answer = await ui.answered()
    await expect(answer.locator("details.reasoning")).not_to_have_attribute("data-active", "")
    await expect(answer.locator("details.reasoning summary")).to_have_text("Thinking…")
    await expect(answer.locator("details.reasoning .thinking-dot")).to_be_hidden()


async def test_full_screen_answers_read_comfortably(vernis: Vernis, open_ui: OpenUI) -> None:
    """In full screen an answer's text is 16 px on 1.6 lines, with at least 0.8 em between its blocks."""
    ui = await open_page(vernis, open_ui)
    await ui.open()
    await converse(ui)
    await ui.panel.get_by_role("button", name="Expand to full screen").click()
    await expect(ui.panel).to_have_attribute("data-expanded", "")
    paragraph = ui.answers().first.locator(".markdown").last.locator("p").first
    await expect(paragraph).to_have_css("font-size", "16px")
    await expect(paragraph).to_have_css("line-height", "25.6px")
    gap = await paragraph.evaluate(
        "(p) => p.nextElementSibling.getBoundingClientRect().top - p.getBoundingClientRect().bottom"
    )
    assert gap >= 12.8, gap
    await ui.page.wait_for_function(
        "() => document.querySelector('vernis-assistant').shadowRoot.querySelector('.panel')"
        ".getBoundingClientRect().width === window.innerWidth"
    )
    await ui.screenshot("look-expanded.png")


async def test_right_to_left_and_phone(vernis: Vernis, open_ui: OpenUI) -> None:
    """On a right-to-left page the head of an answer starts at the right; on a phone the float layout takes the whole screen."""
    ui = await open_page(vernis, open_ui)
    await ui.page.evaluate("document.documentElement.dir = 'rtl'")
    ui.vernis.scripted.add(
        Reply("שלום! יש לך **הודעה אחת** שלא נקראה.\n\n- היא ביקשה מחירון\n- היא מחכה לשיחה"),
        match="שלום",
    )
    await ui.open()
    await ui.send("שלום, מה חדש?")
    answer = await ui.answered()
    head = answer.locator(".answer-head")
    side = await head.evaluate(
        """(head) => {
            const avatar = head.querySelector('.avatar').getBoundingClientRect();
            const name = head.querySelector('.answer-name').getBoundingClientRect();
            return avatar.left > name.left;
        }"""
    )
    assert side, "the avatar comes first on the right in a right-to-left page"
    await ui.page.wait_for_function(AT_REST)
    await ui.screenshot("look-rtl.png")

    phone = await open_page(vernis, open_ui, viewport=PHONE, email="owner@acme.test")
    await phone.open()
    await converse(phone)
    await phone.page.wait_for_function(AT_REST)
    box = await phone.page.locator("vernis-assistant").evaluate(FLOAT)
    assert (box["left"], box["top"]) == (0, 0), box
    assert (box["right"], box["bottom"]) == PHONE, box
    await phone.screenshot("look-phone.png")
