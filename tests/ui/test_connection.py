"""The connection (SPEC §4, §11): state shown, reconnect with backoff, an answer in flight resumed whole."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.async_api import WebSocket, WebSocketRoute, expect

from tests.fixtures.server import VernisFactory
from tests.ui.conftest import UI, EmbedFactory, OpenUI, UIFactory
from vernis.model.scripted import Reply

WORDS = [f"w{n:02d}" for n in range(60)]
TEXT = " ".join(WORDS)


async def answer_text(ui: UI) -> str:
    return " ".join((await ui.answers().last.locator(".markdown").inner_text()).split())


async def test_cut_socket_mid_answer_resumes_without_losing_or_doubling_text(ui: UI) -> None:
    """The network drops mid-answer (offline shown); back online the socket resumes after the last seq and the answer ends whole, once."""
    ui.console_errors_expected = True  # the sockets refused while offline
    ui.vernis.scripted.add(Reply(TEXT, chunk_delay=0.03), match="long answer")
    sockets: list[WebSocket] = []
    ui.page.on("websocket", lambda socket: sockets.append(socket))
    await ui.open()
    await ui.send("a long answer please")
    await expect(ui.answers().last).to_contain_text("w05")
    await ui.context.set_offline(True)
    await expect(ui.connection).to_have_attribute("data-state", "offline")
    await expect(ui.connection).to_contain_text("Offline")
    await expect(ui.connection.get_by_role("button", name="Retry now")).to_be_visible()
    # What arrived before the cut is drawn at the panel's next markdown pass (at most 50 ms later,
    # in an animation frame): read the answer once that pass is done.
    await ui.page.evaluate(
        "() => new Promise((done) => setTimeout(() => requestAnimationFrame(() => requestAnimationFrame(done)), 60))"
    )
    shown_offline = await answer_text(ui)
    await ui.page.wait_for_timeout(600)
    # Nothing arrives while offline: the answer goes on on the server, unseen.
    assert await answer_text(ui) == shown_offline
    assert shown_offline != TEXT
    await ui.context.set_offline(False)
    await ui.connected()
    await ui.answered()
    assert await answer_text(ui) == TEXT
    await expect(ui.answers()).to_have_count(1)
    await expect(ui.log.locator(".msg.user")).to_have_count(1)
    assert sockets[0].is_closed()
    resumed = urlsplit(sockets[-1].url)
    query = parse_qs(resumed.query)
    assert resumed.path == "/api/assistant/ws"
    assert query["conversation_id"]
    assert int(query["after_seq"][0]) > 1


async def test_reload_mid_answer_joins_it_in_flight(ui: UI) -> None:
    """A page reload mid-answer redraws the history and joins the answer still streaming: the whole text, once."""
    ui.vernis.scripted.add(Reply(TEXT, chunk_delay=0.03), match="long answer")
    await ui.open()
    await ui.send("a long answer please")
    await expect(ui.answers().last).to_contain_text("w05")
    await ui.page.reload()
    await ui.connected()
    await expect(ui.log.locator(".msg.user .bubble")).to_have_text("a long answer please")
    await expect(ui.log.locator(".msg.assistant[data-streaming]")).to_have_count(1)
    await ui.answered()
    assert await answer_text(ui) == TEXT


async def test_reconnects_by_itself_after_the_server_drops_the_socket(ui: UI) -> None:
    """When the socket is cut, the panel says it is reconnecting, comes back after a backoff delay, and works as before."""
    ui.vernis.scripted.add(Reply("Still here."), match="still there")
    await ui.open()
    states = await ui.page.locator("vernis-assistant").evaluate(
        """element => new Promise(resolve => {
            const seen = [];
            element.connection.addEventListener("state", event => {
                seen.push(event.detail.state);
                if (event.detail.state === "connected") resolve(seen);
            });
            element.connection.drop();
        })"""
    )
    assert states[0] == "reconnecting"
    assert states[-1] == "connected"
    await ui.send("are you still there?")
    await expect(await ui.answered()).to_contain_text("Still here.")


async def test_a_message_sent_before_the_first_load_arrives_keeps_its_bubble(ui: UI) -> None:
    """The panel takes input as soon as its socket opens: a message sent before the server's first `conversation_loaded` reaches the page keeps its bubble through that load, above its answer."""
    ui.vernis.scripted.add(Reply("Answered after the load."), match="early")
    held: list[str | bytes] = []
    first_held = asyncio.Event()
    released = False

    def route(page: WebSocketRoute) -> None:
        server = page.connect_to_server()

        def from_server(message: str | bytes) -> None:
            if released:
                page.send(message)
            else:
                held.append(message)
                first_held.set()

        def from_page(message: str | bytes) -> None:
            nonlocal released
            server.send(message)
            if not released and '"user_message"' in str(message):
                # The server's first frames reach the page only now, after the message went.
                released = True
                for frame in held:
                    page.send(frame)

        server.on_message(from_server)
        page.on_message(from_page)

    await ui.page.route_web_socket("**/api/assistant/ws**", route)
    await ui.open()
    # The server's first frames are on their way (held here) before the message goes.
    await asyncio.wait_for(first_held.wait(), 10)
    await ui.send("early question")
    await expect(await ui.answered()).to_contain_text("Answered after the load.")
    assert released, "the message went"
    assert held, "the server's first frames were held until the message went"
    users = ui.log.locator(".msg.user")
    await expect(users).to_have_count(1)
    await expect(users).to_contain_text("early question")
    await expect(users.locator("xpath=following-sibling::*[contains(@class, 'assistant')]")).to_have_count(1)


NAME_WHOLE = "(name) => name.scrollWidth <= name.clientWidth"


async def test_vernis_down_says_unavailable_not_offline(
    vernis_factory: VernisFactory, open_ui: OpenUI
) -> None:
    """With the network up and Vernis stopped, after a few failed attempts the panel says it cannot reach the assistant (not "Offline"), offers Retry now, and keeps the assistant's name whole."""
    async with vernis_factory() as vernis:
        ui = await open_ui(vernis)
        ui.console_errors_expected = True  # the sockets refused while Vernis is down
        await ui.open()
        await ui.connected()
    await expect(ui.connection).to_have_attribute("data-state", "unavailable", timeout=20_000)
    await expect(ui.connection.locator(".conn-text")).to_have_text("Can't reach the assistant, retrying")
    await expect(ui.connection.get_by_role("button", name="Retry now")).to_be_visible()
    assert await ui.panel.locator(".assistant-name").evaluate(NAME_WHOLE)
    await ui.screenshot("state-unavailable.png")


async def test_a_failing_get_token_is_named_as_such(embed_factory: EmbedFactory, open_ui: OpenUI) -> None:
    """When the host page's getToken keeps failing, the panel says it cannot get a session from the page, not "Offline"."""
    async with embed_factory() as embed:
        ui = await open_ui(embed.vernis, host=embed, email=None, path="/")
        ui.console_errors_expected = True
        await ui.page.evaluate(
            """() => {
                document.querySelector("vernis-assistant").getToken = async () => {
                    throw new Error("the host's session service is down");
                };
            }"""
        )
        await ui.launcher.click()
        await expect(ui.connection).to_have_attribute("data-state", "unavailable", timeout=20_000)
        await expect(ui.connection.locator(".conn-text")).to_have_text(
            "Can't get a session from this page, retrying"
        )


PANELS = 20


@pytest.mark.slow
async def test_panels_cut_at_once_come_back_spread_over_time(ui_factory: UIFactory, open_ui: OpenUI) -> None:
    """Twenty panels whose sockets are cut in the same instant all come back, each resuming with `after_seq`, their reconnects spread over the backoff's first window (0.5-1 s after the cut) instead of arriving together."""
    # One member's twenty tabs, and the sockets the cut left on the server's side (a routed socket
    # closed by Playwright is never closed towards the server) count against the member's cap.
    async with ui_factory(max_sockets_per_member=100) as vernis:
        await cut_and_come_back(await open_ui(vernis))


async def cut_and_come_back(ui: UI) -> None:
    ui.vernis.scripted.add(Reply("Here."), match="hello")
    loop = asyncio.get_running_loop()
    sockets: list[list[tuple[WebSocketRoute, WebSocketRoute]]] = []
    back: list[tuple[float, str]] = []
    all_back = asyncio.Event()
    cut_at: float | None = None

    def watch(index: int) -> Callable[[WebSocketRoute], None]:
        def route(page: WebSocketRoute) -> None:
            sockets[index].append((page, page.connect_to_server()))
            if cut_at is not None:
                back.append((loop.time() - cut_at, page.url))
                if len(back) == PANELS:
                    all_back.set()

        return route

    tabs = [ui, *[UI(ui.vernis, ui.context, await ui.context.new_page()) for _ in range(PANELS - 1)]]
    for index, tab in enumerate(tabs):
        sockets.append([])
        await tab.page.route_web_socket(re.compile(r".*/api/assistant/ws.*"), watch(index))
    await ui.goto()
    await ui.open()
    await ui.send("hello")
    await ui.answered()
    # The other tabs open the same conversation: each knows the seq it has seen.
    await asyncio.gather(*(tab.goto(seconds=30) for tab in tabs[1:]))
    # Twenty panels opening at once on a loaded machine: each is given 20 s to connect.
    for tab in tabs[1:]:
        # A page in the background of its browser is throttled (its frames wait): the click waits
        # for the launcher to be stable, as for a tab the user looks at.
        await tab.page.bring_to_front()
        await tab.launcher.click()
    await asyncio.gather(*(tab.connected(seconds=20) for tab in tabs[1:]))
    for tab in tabs:
        tab.console_errors_expected = True
        # The delay each panel gives its first retry after the cut, as it schedules it.
        await tab.page.locator("vernis-assistant").evaluate(
            """element => element.connection.addEventListener("state", ({ detail }) => {
                if (window.scheduledRetry === undefined && detail.state === "reconnecting" && detail.nextRetryAt)
                    window.scheduledRetry = detail.nextRetryAt - Date.now();
            })"""
        )
    cut_at = loop.time()
    for page, server in (opened[-1] for opened in sockets):
        await page.close(code=1012, reason="service restart")
        await server.close(code=1012, reason="service restart")
    async with asyncio.timeout(15):
        await all_back.wait()
    # Twenty pages replaying at once in one browser on a loaded machine: a generous wait, and if one
    # is not back, every panel's state and what its sockets did, to tell a slow one from a lost one.
    try:
        await asyncio.gather(*(tab.connected(seconds=20) for tab in tabs))
    except AssertionError:
        states = [await tab.connection.get_attribute("data-state") for tab in tabs]
        raise AssertionError(
            f"states {states}, sockets per tab {[len(s) for s in sockets]}, back {back}"
        ) from None
    assert all("after_seq=" in url for _, url in back)
    delays = sorted([await tab.page.evaluate("window.scheduledRetry") for tab in tabs])
    # Each within the first window, 0.5-1 s, at random: spread over it, not together (twenty draws
    # within 150 ms of each other would be a one-in-a-hundred-million chance).
    assert 500 <= delays[0] <= delays[-1] <= 1000
    assert delays[-1] - delays[0] >= 150
