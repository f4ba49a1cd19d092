"""Honest states (SPEC §2, §3, §11): a refused session says "Signed out", a model failure says so
plainly with a Retry, a long paste is counted before it is cut, a rate limit counts down."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from playwright.async_api import WebSocket, expect

from tests.ui.conftest import UI, EmbedFactory, OpenUI, UIFactory
from vernis.identity import COOKIE_NAME
from vernis.model.scripted import Fault, Reply
from vernis.model.scripted.scenarios import last_user_text
from vernis.settings import RateLimit


async def sign_out_while_offline(ui: UI) -> None:
    """The tab goes offline; meanwhile the host's session ends (its cookie now holds an expired
    token); back online, the handshake is refused and the panel is signed out."""
    await ui.context.set_offline(True)
    await expect(ui.connection).to_have_attribute("data-state", "offline")
    expired = ui.vernis.token("member@acme.test", ttl=-300)
    await ui.context.add_cookies([{"name": COOKIE_NAME, "value": expired, "url": ui.url, "httpOnly": True}])
    await ui.context.set_offline(False)
    await expect(ui.connection).to_have_attribute("data-state", "signed-out")


async def test_a_refused_handshake_shows_signed_out(ui: UI) -> None:
    """A session that expired while the tab was offline is refused at the next handshake: the panel says "Signed out", not "Offline, retrying"."""
    ui.console_errors_expected = True  # the sockets refused while offline and at the handshake
    await ui.open()
    await sign_out_while_offline(ui)
    await expect(ui.connection.locator(".conn-text")).to_have_text("Signed out")
    await expect(ui.log.get_by_role("alert")).to_contain_text("Sign in again")
    await expect(ui.connection.get_by_role("button", name="Retry now")).to_be_hidden()
    await expect(ui.panel.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    await ui.screenshot("state-signed-out.png")


async def test_a_host_whose_tokens_are_refused_is_asked_again_then_signed_out(
    embed_factory: EmbedFactory, open_ui: OpenUI
) -> None:
    """With getToken, a refused handshake asks the host for a fresh token and tries once more; refused again, it is "Signed out"."""
    async with embed_factory(token_ttl=-300) as embed:
        ui = await open_ui(embed.vernis, host=embed, email=None, path="/")
        ui.console_errors_expected = True
        sockets: list[WebSocket] = []
        ui.page.on("websocket", lambda socket: sockets.append(socket))
        await ui.launcher.click()
        await expect(ui.connection).to_have_attribute("data-state", "signed-out")
        # The first socket, then one with a fresh token from getToken; then it stops trying.
        assert len(sockets) == 2
        assert all("token" not in socket.url for socket in sockets)
        await expect(ui.connection.get_by_role("button", name="Retry now")).to_be_hidden()
        await ui.screenshot("state-signed-out-embed.png")


async def test_signed_out_calls_the_host_and_offers_to_sign_in_again(
    embed_factory: EmbedFactory, open_ui: OpenUI
) -> None:
    """Signed out (the host's tokens refused twice), the host's onSignedOut runs once, one alert says so and the composer is disabled; once the host's session is back, "Sign in again" asks getToken anew and the panel is connected and usable."""
    async with embed_factory(token_ttl=-300) as embed:
        ui = await open_ui(embed.vernis, host=embed, email=None, path="/")
        ui.console_errors_expected = True
        await ui.page.evaluate(
            """() => {
                const element = document.querySelector("vernis-assistant");
                window.signedOut = 0;
                element.onSignedOut = () => { window.signedOut += 1; };
                const hostGetToken = element.getToken;
                element.getToken = async () => window.goodToken || hostGetToken();
            }"""
        )
        await ui.launcher.click()
        await expect(ui.connection).to_have_attribute("data-state", "signed-out")
        assert await ui.page.evaluate("window.signedOut") == 1
        await expect(ui.log.get_by_role("alert")).to_have_count(1)
        await expect(ui.log.get_by_role("alert")).to_have_text("Your session has ended. Sign in again")
        await expect(ui.input).to_be_disabled()
        await ui.screenshot("state-signed-out-sign-in-again.png")
        # The host's session is back: its getToken now gives a good token.
        await ui.page.evaluate("(token) => { window.goodToken = token; }", embed.vernis.token())
        await ui.log.get_by_role("button", name="Sign in again").click()
        await expect(ui.connection).to_have_attribute("data-state", "connected")
        await expect(ui.log.get_by_role("alert")).to_have_count(0)
        await expect(ui.input).to_be_enabled()
        assert await ui.page.evaluate("window.signedOut") == 1


async def test_a_long_paste_is_counted_kept_and_not_sent(ui: UI) -> None:
    """A 20,000-character paste stays whole; the counter says it is 12,000 over the 8,000 limit and Send waits; shortened, it goes."""
    ui.vernis.scripted.add(Reply("Got it."), match="x")
    await ui.open()
    counter = ui.panel.locator(".counter")
    await expect(counter).to_be_hidden()
    await ui.input.fill("x" * 7000)
    await expect(counter).to_be_hidden()
    await ui.input.fill("x" * 7950)
    await expect(counter).to_have_text("7,950 / 8,000 characters")
    await ui.input.fill("x" * 20_000)
    await expect(ui.input).to_have_value("x" * 20_000)
    await expect(counter).to_contain_text("20,000 / 8,000 characters: 12,000 too many.")
    await expect(counter).to_have_attribute("data-over", "")
    await expect(ui.input).to_have_attribute("aria-invalid", "")
    send = ui.panel.get_by_role("button", name="Send", exact=True)
    await expect(send).to_be_disabled()
    await ui.input.press("Enter")
    await expect(ui.log.locator(".msg.user")).to_have_count(0)
    await expect(ui.input).to_have_value("x" * 20_000)
    await ui.screenshot("state-paste-over-limit.png")
    await ui.input.fill("x" * 8000)
    await expect(counter).not_to_have_attribute("data-over", "")
    await ui.input.press("Enter")
    await ui.answered()
    await expect(ui.log.locator(".msg.user .bubble")).to_have_text("x" * 8000)
    await expect(counter).to_be_hidden()


async def test_a_rate_limited_message_counts_down(ui_factory: UIFactory, open_ui: OpenUI) -> None:
    """Over the rate limit the message is marked not sent with a countdown from retry_after_ms; Send comes back when it ends."""
    async with ui_factory(rate_limit=RateLimit(1, 4)) as vernis:
        vernis.scripted.add(Reply("First."), match="one")
        ui = await open_ui(vernis)
        await ui.open()
        await ui.send("one")
        await ui.answered()
        await ui.send("two")
        note = ui.log.locator(".msg.user[data-refused] .msg-note")
        await expect(note).to_contain_text(re.compile(r"You can send again in [1-4] s\."))
        first = await note.inner_text()
        send = ui.panel.get_by_role("button", name="Send", exact=True)
        await expect(send).to_be_disabled()
        await expect(ui.input).to_have_value("two")
        await ui.screenshot("state-rate-limited.png")
        # It counts down, then says so, and Send is back.
        await expect(note).not_to_have_text(first)
        await expect(note).to_have_text(
            "Not sent: too many messages at once. You can send it again now.", timeout=8000
        )
        await expect(send).to_be_enabled()


def chat_about(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """A chat request (with tools; not the title's) whose last user message mentions `text`."""
    return lambda body: bool(body.get("tools")) and text in last_user_text(body)


async def test_a_model_failure_reads_plainly_with_a_retry(ui: UI) -> None:
    """A model outage shows the user a plain sentence (no setting names) and Retry, which asks again and gets the answer."""
    ui.vernis.scripted.add(Reply(fault=Fault.http(401)), match=chat_about("what is new"), times=1)
    ui.vernis.scripted.add(Reply("Here is what is new."), match=chat_about("what is new"))
    await ui.open()
    await ui.send("what is new")
    answer = await ui.answered()
    error = answer.get_by_role("alert")
    await expect(error).to_contain_text("The assistant could not answer just now. Please try again.")
    text = await answer.inner_text()
    assert "VERNIS_" not in text
    assert "HTTP" not in text
    await expect(answer.locator(".answer-state")).to_have_text("This answer did not finish.")
    await ui.screenshot("state-model-failure.png")
    await error.get_by_role("button", name="Retry").click()
    retried = await ui.answered(2)
    await expect(retried).to_contain_text("Here is what is new.")
