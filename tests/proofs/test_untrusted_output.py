"""Untrusted output in a real browser (SPEC §11): a corpus of XSS payloads arrives as model text
(streamed and from history), as tool arguments, tool results and previews, and as conversation
titles (stored, listed and renamed live); the panel renders it in headless Chromium and nothing runs
(a trap records any execution), no request leaves for a foreign origin, and the page's CSP reports no
violation. A 1 MB answer and a 100,000-character line render without freezing the page.

The browser fixtures are the UI tests' own (`tests/ui/conftest.py`), on the session's event loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
import sqlalchemy as sa
from playwright.async_api import Request, expect

from tests.data import database
from tests.fixtures.server import Vernis
from tests.proofs.conftest import Figures
from tests.ui.conftest import UI, eventually
from tests.ui.conftest import browser as browser
from tests.ui.conftest import chromium as chromium
from tests.ui.conftest import database_url as database_url
from tests.ui.conftest import open_ui as open_ui
from tests.ui.conftest import scripted_fixture as scripted_fixture
from tests.ui.conftest import scripted_session as scripted_session
from tests.ui.conftest import seeded as seeded
from tests.ui.conftest import ui as ui
from tests.ui.conftest import ui_factory as ui_factory
from tests.ui.conftest import vernis as vernis
from tests.ui.test_picker import add_conversations
from vernis.model.scripted import Reply, ScriptedToolCall
from vernis_crm.models import Contact

pytestmark = pytest.mark.asyncio(loop_scope="session")

EVIL = "http://evil.example"
# Each payload calls the trap with its own tag if anything in it ever runs.
PAYLOADS = [
    '<script>__trap("script")</script>',
    "<img src=x onerror=\"__trap('img-onerror')\">",
    "<svg onload=\"__trap('svg-onload')\"><circle r=10 /></svg>",
    '<svg><script>__trap("svg-script")</script></svg>',
    "<math><mtext><table><mglyph><style><img src=x onerror=\"__trap('mxss')\">",
    '[md link](javascript:__trap("md-javascript"))',
    '[md link](JaVaScRiPt:__trap("md-mixed-case"))',
    '[md link](&#106;avascript:__trap("md-entity"))',
    "[md link](data:text/html;base64,PHNjcmlwdD5fX3RyYXAoMSk8L3NjcmlwdD4=)",
    "<a href=\"javascript&colon;__trap('colon-entity')\">entity link</a>",
    "<a href=\"  javascript:__trap('leading-space')\">spaced link</a>",
    "<a href=\"data:text/html,<script>__trap('data-link')</script>\">data link</a>",
    "<iframe srcdoc=\"<script>parent.__trap('srcdoc')</script>\"></iframe>",
    "<object data=\"javascript:__trap('object')\"></object>",
    "<embed src=\"javascript:__trap('embed')\">",
    f"<style>@import url({EVIL}/import.css); body {{ background: url({EVIL}/bg.png) }}</style>",
    f'<div style="background-image:url({EVIL}/div.png)">css injection</div>',
    f"<link rel=stylesheet href={EVIL}/link.css>",
    '<meta http-equiv="refresh" content="0;url=javascript:__trap(\'meta\')">',
    "<form action=\"javascript:__trap('form')\"><button>go</button></form>",
    "<details open ontoggle=\"__trap('ontoggle')\">details</details>",
    "<video><source onerror=\"__trap('video')\"></video>",
    "<input autofocus onfocus=\"__trap('autofocus')\">",
    f"![md image]({EVIL}/md.png)",
    "![md image](x\" onerror=\"__trap('md-attr'))",
    '[titled](https://docs.example.com "t\\" onmouseover=\\"__trap(\'md-title\')")',
    '&lt;script&gt;__trap("entities")&lt;/script&gt;',
    f'<base href="{EVIL}/">',
    f'<a href="{EVIL}/" ping="{EVIL}/ping">ping link</a>',
    "<noscript><p title=\"</noscript><img src=x onerror=__trap('noscript')>\"></noscript>",
    '<template><script>__trap("template")</script></template>',
    "<svg><a xlink:href=\"javascript:__trap('xlink')\"><text y=20>svg link</text></a></svg>",
    '`<script>__trap("inline-code")</script>`',
    f'<img srcset="{EVIL}/srcset.png 1x">',
]
TRAP = """
window.__trapped = [];
window.__trap = (tag) => window.__trapped.push(String(tag));
window.__violations = [];
document.addEventListener("securitypolicyviolation",
    (event) => window.__violations.push(`${event.violatedDirective} ${event.blockedURI}`), true);
"""
DANGEROUS = "script, iframe, object, embed, style, link, meta, base, form, input, template, noscript"


async def watch(ui: UI) -> list[str]:
    """Install the trap before any script of the page runs; the foreign requests seen from now on."""
    await ui.context.add_init_script(TRAP)
    foreign: list[str] = []

    def record(request: Request) -> None:
        if not request.url.startswith((ui.url, "data:", "blob:")):
            foreign.append(request.url)

    ui.page.on("request", record)
    return foreign


async def inert(ui: UI, foreign: list[str]) -> dict[str, Any]:
    """Assert that nothing ran, loaded or was refused; what the panel holds."""
    await ui.page.wait_for_timeout(300)  # every image error handler and autofocus gets its chance
    assert await ui.page.evaluate("() => window.__trapped") == []
    assert await ui.page.evaluate("() => window.__violations") == []
    assert foreign == []
    csp = [m for m in ui.console_errors if "Content Security Policy" in m or "Refused to" in m]
    assert csp == []
    found: dict[str, Any] = {"text": 0}
    # The log (answers, tool cards, previews) and the picker (titles): the panel's own controls are
    # a form and inputs, which is why these two are searched, not the whole panel (and in the
    # picker, not its search box).
    for part in (ui.log, ui.picker):
        seen: dict[str, Any] = await part.evaluate(
            """(root, dangerous) => {
                const all = [...root.querySelectorAll("*")];
                const attributes = ["href", "src", "action", "formaction", "xlink:href", "data", "srcdoc"];
                return {
                    // The picker's own search box is the panel's, not the model's.
                    dangerous: [...root.querySelectorAll(dangerous)].filter(e => !e.matches(".picker-search")).map(e => e.tagName),
                    handlers: all.flatMap(e => [...e.attributes].map(a => a.name)).filter(n => n.startsWith("on")),
                    schemes: all.flatMap(e => attributes.map(n => e.getAttribute(n)))
                        .filter(v => v && /^\\s*(javascript|data|vbscript):/i.test(v)),
                    styled: all.filter(e => e.closest(".markdown") && e.hasAttribute("style")).length,
                    text: root.textContent.length,
                };
            }""",
            DANGEROUS,
        )
        assert seen["dangerous"] == []
        assert seen["handlers"] == []
        assert seen["schemes"] == []
        assert seen["styled"] == 0
        found["text"] += seen["text"]
    return found


async def add_contact(vernis: Vernis, first_name: str, company: str) -> str:
    contact_id = uuid.uuid4()
    async with database(vernis) as engine, engine.begin() as connection:
        await connection.execute(
            sa.insert(Contact.__table__).values(  # type: ignore[attr-defined]
                id=contact_id,
                organization_id=vernis.seed.organizations["acme"],
                first_name=first_name[:100],
                last_name="",
                company=company[:255],
            )
        )
    return str(contact_id)


def after_tool(body: Mapping[str, Any]) -> bool:
    return bool(body["messages"]) and body["messages"][-1]["role"] == "tool"


async def test_xss_payloads_in_text_tools_and_titles_run_nothing_and_load_nothing(
    ui: UI, figures: Figures
) -> None:
    """Every payload of the corpus, as streamed and stored model text, tool arguments, tool results, a preview and titles (listed and renamed live), renders inert: no trap fires, no foreign request, no CSP violation, no dangerous element, handler or scheme in the panel."""
    ui.console_errors_expected = True  # same-origin `<img src=x>` answers 404; CSP messages are checked apart
    foreign = await watch(ui)
    vernis = ui.vernis
    corpus = "\n\n".join(PAYLOADS)
    titles = [payload[:255] for payload in PAYLOADS[:6]]
    await add_conversations(vernis, titles)
    contacts = [await add_contact(vernis, payload, payload) for payload in PAYLOADS[:8]]
    vernis.scripted.add(
        Reply(
            corpus,
            tool_calls=[
                *(ScriptedToolCall("get_contact_details", {"contact_id": c}) for c in contacts),
                ScriptedToolCall("search_contacts", {"query": PAYLOADS[1][:100]}),
                ScriptedToolCall("update_contact", {"contact_id": contacts[0], "company": PAYLOADS[2]}),
            ],
        ),
        match="show me everything",
    )
    vernis.scripted.add(Reply(corpus), match=after_tool)
    await ui.goto("/contacts")
    await ui.open()
    await expect(ui.title).to_have_text(titles[-1])  # the latest conversation, its history replayed
    toggle = ui.panel.get_by_role("button", name="Conversations")
    await toggle.click()
    await expect(ui.picker.locator(".conv-title")).to_have_count(len(titles))
    await toggle.click()
    await ui.send("show me everything")
    await ui.answered(2)
    await expect(ui.log.locator(".tool-card")).to_have_count(len(contacts) + 2)
    await expect(ui.log.locator(".tool-card[data-status='needs_confirmation']")).to_have_count(1)
    for card in await ui.log.locator(".tool-card summary, .tool-card .tool-head").all():
        await card.click()
    conversation_id = await ui.page.evaluate(
        "() => document.querySelector('vernis-assistant').session?.conversationId ?? null"
    )
    async with vernis.opened() as other_tab:
        await other_tab.send("list_conversations")
        (listed,) = await other_tab.expect("conversation_list")
        current = conversation_id or listed["conversations"][0]["conversation_id"]
        for payload in PAYLOADS[-6:]:
            await other_tab.send("rename_conversation", conversation_id=current, title=payload[:255])
            await expect(ui.title).to_have_text(payload[:255].strip())
    found = await inert(ui, foreign)
    figures(payloads=len(PAYLOADS), panel_text_chars=found["text"])


async def test_a_megabyte_answer_and_a_long_line_render_without_freezing(ui: UI, figures: Figures) -> None:
    """A 1 MB streamed answer and a 100,000-character line render whole; the page keeps answering, and its longest main-thread task is recorded."""
    foreign = await watch(ui)
    await ui.context.add_init_script(
        """window.__longest = 0;
        new PerformanceObserver((list) => {
            for (const entry of list.getEntries()) window.__longest = Math.max(window.__longest, entry.duration);
        }).observe({ type: "longtask", buffered: true });"""
    )
    line = "L" * 100_000
    paragraph = " ".join(f"word{n}" for n in range(200)) + "\n\n"
    chunks = [paragraph[i : i + 1024] for i in range(0, len(paragraph), 1024)]
    body = chunks * (1_000_000 // len(paragraph) + 1)
    big = Reply([*body, "\n\n", *(line[i : i + 1000] for i in range(0, len(line), 1000))])
    ui.vernis.scripted.add(big, match="a lot")
    await ui.goto("/contacts")
    await ui.open()
    await ui.send("give me a lot")
    await expect(ui.answers()).to_have_count(1)
    await expect(ui.log.locator(".msg.assistant[data-streaming]")).to_have_count(0, timeout=120_000)
    answer = ui.answers().last
    length = await answer.evaluate("element => element.textContent.length")
    assert length >= len(big.full_text) - len(big.full_text) // 100  # markdown drops the blank lines
    assert line in await answer.evaluate("element => element.textContent")
    assert await ui.page.evaluate("() => 1 + 1") == 2
    await ui.input.fill("still typing")
    await expect(ui.input).to_have_value("still typing")
    await inert(ui, foreign)
    longest = await ui.page.evaluate("() => window.__longest")
    figures(answer_bytes=len(big.full_text.encode()), longest_line=len(line), longest_task_ms=round(longest))


async def test_watch_sees_an_execution(ui: UI) -> None:
    """The trap and the foreign-request watch work: a payload run on purpose outside the panel is recorded."""
    ui.console_errors_expected = True  # the probe's request fails
    foreign = await watch(ui)
    await ui.goto("/contacts")
    await ui.page.evaluate(f"() => {{ __trap('on purpose'); new Image().src = '{EVIL}/probe.png'; }}")
    assert await ui.page.evaluate("() => window.__trapped") == ["on purpose"]
    await eventually(lambda: _true(bool(foreign)))


async def _true(value: bool) -> bool:
    return value
