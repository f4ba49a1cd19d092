"""CopilotKit's open-source React chat drives Vernis in Chromium (SPEC §20): the example page
(`examples/copilotkit/`, bundled into its `dist/` by scripts/bootstrap) served from another origin
that Vernis allows, with Vernis registered as an AG-UI `HttpAgent` in CopilotKit's provider (no
CopilotKit runtime). What the page shows comes from Vernis's AG-UI routes, and what it sends is
stored by Vernis: the tests read both ends."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import pytest_asyncio
from playwright.async_api import Locator, expect
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from tests.data import add_notification, is_read
from tests.fixtures.server import Vernis
from tests.ui.conftest import UI, OpenUI, UIFactory, eventually
from tests.utils import free_port, run_server
from vernis.model.scripted import Reply, ScriptedToolCall

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "examples" / "copilotkit" / "dist"

# Node is optional for Vernis (scripts/bootstrap skips the example without it); where it is
# installed, bootstrap bundled the example, and a missing bundle is a failure, not a skip.
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js (the example's bundle)")


@dataclass(frozen=True)
class Example:
    """A Vernis, and the example page served from another origin (`url`) that it allows."""

    vernis: Vernis
    url: str

    def address(self, *, token: str | None = None, **params: str) -> str:
        """The page's address, its settings in the fragment as the README shows them."""
        settings = {"vernis": self.vernis.http_url, **params}
        if token is not None:
            settings["token"] = token
        return f"{self.url}/#{urlencode(settings)}"


ExampleFactory = Callable[..., AbstractAsyncContextManager[Example]]


@pytest.fixture
def example_factory(ui_factory: UIFactory) -> ExampleFactory:
    """`async with example_factory(**settings) as example:` the page's origin is in the Vernis's
    `VERNIS_ALLOWED_ORIGINS` (AG-UI answers CORS for it)."""
    if not (DIST / "index.html").exists() or not (DIST / "app.js").exists():
        pytest.fail("examples/copilotkit/dist/ is missing: run scripts/bootstrap", pytrace=False)

    @asynccontextmanager
    async def start(**overrides: Any) -> AsyncIterator[Example]:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        site = Starlette(routes=[Mount("/", StaticFiles(directory=DIST, html=True))])
        async with ui_factory(allowed_origins=[url], **overrides) as vernis, run_server(site, port=port):
            yield Example(vernis, url)

    return start


@pytest_asyncio.fixture(loop_scope="session")
async def example(example_factory: ExampleFactory) -> AsyncIterator[Example]:
    """A Vernis with the UI tests' settings, and the example page on an origin it allows."""
    async with example_factory() as started:
        yield started


async def open_example(open_ui: OpenUI, example: Example, address: str | None = None) -> UI:
    """A tab on the example page, signed in as `member@acme.test` by the host token in its address."""
    ui = await open_ui(example.vernis, email=None, path=None)
    await ui.page.goto(address or example.address(token=example.vernis.token()))
    return ui


def chat_input(ui: UI) -> Locator:
    return ui.page.get_by_test_id("copilot-chat-textarea")


def messages(ui: UI) -> Locator:
    return ui.page.get_by_test_id("copilot-message-list")


async def send(ui: UI, text: str) -> None:
    """Type in CopilotKit's chat input and press Enter, as a user does."""
    await chat_input(ui).fill(text)
    await chat_input(ui).press("Enter")


async def thread_of(ui: UI) -> str:
    thread = await ui.page.locator("[data-thread]").get_attribute("data-thread")
    assert thread is not None
    return thread


async def stored_history_messages(vernis: Vernis, thread: str) -> list[dict[str, Any]]:
    """The conversation `thread` as a socket tab of the same member loads it: its `history_message`s."""
    async with vernis.connect(query=f"?conversation_id={thread}") as client:
        loaded, *history = await client.until("history_end")
    assert loaded["conversation_id"] == thread
    return [m for m in history if m["type"] == "history_message"]


async def stored_history(vernis: Vernis, thread: str, count: int) -> list[tuple[str, str]]:
    """The conversation `thread` as Vernis stored it, once it holds `count` messages (an answer is
    stored when it ends, just after its last words reach the page): (role, text) pairs."""

    async def stored() -> bool:
        return len(await stored_history_messages(vernis, thread)) >= count

    await eventually(stored)
    return [(m["role"], m["content"]) for m in await stored_history_messages(vernis, thread)]


async def test_copilotkit_chat_streams_a_vernis_answer_and_vernis_stores_it(
    example: Example, open_ui: OpenUI
) -> None:
    """A message typed in CopilotKit's chat goes cross-origin to /api/agui/run with the host token; Vernis's streamed answer shows in CopilotKit's message list, and Vernis stores the conversation under the page's thread id."""
    vernis = example.vernis
    vernis.scripted.add(
        Reply("Hello from Vernis, through CopilotKit.", chunk_delay=0.01), match="hello copilotkit"
    )
    token = vernis.token()
    ui = await open_example(open_ui, example, example.address(token=token))
    await expect(chat_input(ui)).to_be_editable()
    async with ui.page.expect_response("**/api/agui/run") as run:
        await send(ui, "hello copilotkit")
    response = await run.value
    headers = await response.request.all_headers()
    assert headers["authorization"] == f"Bearer {token}"
    assert headers["origin"] == example.url
    assert (await response.all_headers())["access-control-allow-origin"] == example.url

    await expect(messages(ui).get_by_test_id("copilot-user-message")).to_have_text("hello copilotkit")
    answer = messages(ui).get_by_test_id("copilot-assistant-message")
    await expect(answer).to_have_count(1)
    await expect(answer).to_contain_text("Hello from Vernis, through CopilotKit.")
    thread = await thread_of(ui)
    assert await stored_history(vernis, thread, 2) == [
        ("user", "hello copilotkit"),
        ("assistant", "Hello from Vernis, through CopilotKit."),
    ]
    await ui.screenshot("copilotkit-chat.png")


async def test_a_reload_rejoins_the_thread_through_agui_connect(example: Example, open_ui: OpenUI) -> None:
    """The page's address names its thread; reloaded, CopilotKit's chat shows the conversation Vernis stored (POST /api/agui/connect), and the next message goes on in the same conversation."""
    vernis = example.vernis
    vernis.scripted.add(Reply("First answer."), match="first question")
    vernis.scripted.add(Reply("Second answer, same thread."), match="second question")
    ui = await open_example(open_ui, example)
    await send(ui, "first question")
    await expect(messages(ui).get_by_test_id("copilot-assistant-message")).to_contain_text("First answer.")
    thread = await thread_of(ui)
    assert f"thread={thread}" in ui.page.url

    async with ui.page.expect_response("**/api/agui/connect") as connect:
        await ui.page.reload()
    assert (await connect.value).status == 200
    assert await thread_of(ui) == thread
    await expect(messages(ui).get_by_test_id("copilot-user-message")).to_have_text("first question")
    await expect(messages(ui).get_by_test_id("copilot-assistant-message")).to_have_text("First answer.")

    await send(ui, "second question")
    await expect(messages(ui).get_by_test_id("copilot-assistant-message").last).to_contain_text(
        "Second answer, same thread."
    )
    assert [role for role, _ in await stored_history(vernis, thread, 4)] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]


async def test_a_write_awaiting_approval_shows_in_the_chat_and_approving_runs_it(
    example: Example, open_ui: OpenUI
) -> None:
    """A write ends Vernis's run with a tool_approval interrupt; CopilotKit's useInterrupt shows it in the chat with its preview, nothing is written until Approve, and Approve resumes the run: the write runs and the answer that follows streams in."""
    vernis = example.vernis
    notification_id = await add_notification(vernis)
    vernis.scripted.add(
        Reply(tool_calls=[ScriptedToolCall("mark_notification_read", {"notification_id": notification_id})]),
        match="mark it read",
    )
    # The model reads the write's "awaiting approval" result and says so; then, once approved, its result.
    vernis.scripted.add(
        "Approve it, and it is done.",
        match=lambda body: "confirmation_id" in str(body["messages"][-1].get("content")),
    )
    vernis.scripted.add(
        "It is marked read.", match=lambda body: "The user approved" in str(body["messages"][0]["content"])
    )
    ui = await open_example(open_ui, example)
    await send(ui, "mark it read please")

    approval = ui.page.get_by_role("region", name="Approval")
    await expect(approval).to_contain_text("mark_notification_read")
    await expect(approval).to_contain_text("read: false → true")
    await expect(messages(ui)).to_contain_text("Approve it, and it is done.")
    assert not await is_read(vernis, notification_id)
    await ui.screenshot("copilotkit-approval.png")
    interrupt_id = await approval.get_attribute("data-interrupt")

    async with ui.page.expect_request(
        lambda request: request.url.endswith("/api/agui/run") and "resume" in (request.post_data or "")
    ) as resumed:
        await approval.get_by_role("button", name="Approve").click()
    body = (await resumed.value).post_data_json
    assert body is not None
    assert body["resume"] == [{"interruptId": interrupt_id, "status": "resolved"}]
    await expect(messages(ui)).to_contain_text("It is marked read.")
    await expect(approval).to_have_count(0)
    assert await is_read(vernis, notification_id)


async def test_copilotkit_stop_button_stops_the_answer_in_vernis(example: Example, open_ui: OpenUI) -> None:
    """CopilotKit's stop button, while an answer streams, sends POST /api/agui/stop: Vernis stops the answer and stores it cut short, as stopped."""
    vernis = example.vernis
    long = " ".join(f"word{i}" for i in range(400))
    vernis.scripted.add(Reply(long, chunk_delay=0.02), match="talk a lot")
    ui = await open_example(open_ui, example)
    await send(ui, "talk a lot")
    await expect(messages(ui).get_by_test_id("copilot-assistant-message")).to_contain_text("word3 ")
    async with ui.page.expect_response("**/api/agui/stop") as stop:
        await ui.page.get_by_test_id("copilot-send-button").click()
    assert (await stop.value).status == 204
    thread = await thread_of(ui)

    async def stored_stopped() -> bool:
        stored = await stored_history_messages(vernis, thread)
        return len(stored) == 2 and stored[1]["status"] == "stopped"

    await eventually(stored_stopped)
    (user, answer) = await stored_history_messages(vernis, thread)
    assert user["content"] == "talk a lot"
    assert answer["content"].startswith("word0 word1 word2 word3")
    assert len(answer["content"]) < len(long)


async def test_the_page_says_what_is_wrong_instead_of_a_blank_page(example: Example, open_ui: OpenUI) -> None:
    """Without a token, with a token Vernis refuses, and with Vernis unreachable, the page shows a message that says so (and no chat)."""
    ui = await open_example(open_ui, example, example.address())
    problem = ui.page.get_by_role("alert")
    await expect(problem).to_contain_text("No host token")

    # The refused token and the closed port are console errors of the browser's own (failed loads).
    ui.console_errors_expected = True
    # Another fragment alone does not load the page again: each address is reloaded.
    await ui.page.goto(example.address(token="not-a-token"))
    await ui.page.reload()
    await expect(problem).to_contain_text("Vernis refused the token")

    closed = f"http://127.0.0.1:{free_port()}"
    await ui.page.goto(example.address(token=example.vernis.token(), vernis=closed))
    await ui.page.reload()
    await expect(problem).to_contain_text(f"Cannot reach Vernis at {closed}")
    await expect(chat_input(ui)).to_have_count(0)
