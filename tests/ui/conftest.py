"""The web UI in a real browser: Debian's Chromium, driven by Playwright, against a real Vernis.

Each test gets a Vernis on a free loopback port started as `vernis serve --demo --scripted-model`
starts it (demo mode: the CRM toolkit, its pages and the demo login; `create_app(scripted=True)`,
the scripted model on its own port), on a copy of the session's seeded SQLite file, and a fresh
browser context in the session's headless Chromium.
Playwright's async API runs in the test's own event loop, beside the in-process uvicorn server.
Playwright never downloads a browser here: it starts `/usr/bin/chromium` (scripts/test installs it).
Screenshots go to `test-artifacts/`.

`embed` adds the embed demo's host app (`vernis_crm.web.embed`) on a port of its own, another origin,
which the Vernis allows (`VERNIS_ALLOWED_ORIGINS`); `open_ui(..., host=embed)` opens a tab on it.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Locator,
    Page,
    async_playwright,
    expect,
)

from tests.fixtures.db import SeededTemplate
from tests.fixtures.scripted import ScriptedServer
from tests.fixtures.server import Vernis, make_settings
from tests.utils import free_port, run_server
from vernis.app import create_app
from vernis.cli import uvicorn_options
from vernis.identity import COOKIE_NAME
from vernis.model.scripted import ScriptedModel
from vernis_crm.demo.seed import SeedResult
from vernis_crm.web.embed import embed_host_app

CHROMIUM = Path("/usr/bin/chromium")
# The features Playwright's launcher (1.65, its `chromiumSwitches`) switches off: Chromium keeps only
# the last `--disable-features` of its command line, so ours below carries these too
# (`tests/ui/test_browser.py` checks the installed Playwright's list against it).
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
# The address bar's two pop-ups, web pages of the browser's own (`chrome://omnibox-popup.top-chrome`)
# that new headless Chromium loads, unseen, into every window it opens: one window a test's browser
# context, so two pages more to load and lay out per test, in a renderer of their own.
UNSEEN_FEATURES = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup")
# As the machine's notes prescribe: without the background-networking flags Chromium tries to reach
# Google's hosts at every start, and this machine's closed network refuses them.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-features=" + ",".join((*PLAYWRIGHT_DISABLED_FEATURES, *UNSEEN_FEATURES)),
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
VENDOR = ROOT / "static" / "vendor"
# One bound for the page's actions and for `expect`'s assertions (Playwright's own default for the
# latter is 5 s, too short for a first answer on CI's machine with four workers and Chromium).
TIMEOUT_MS = 10_000
expect.set_options(timeout=TIMEOUT_MS)
UI_STALL_TIMEOUT = 10.0

UIFactory = Callable[..., AbstractAsyncContextManager[Vernis]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # One event loop for every UI test: the browser (slow to start) is shared by all of them, and
    # Playwright's objects belong to the loop they were made in. The servers still start per test.
    here = Path(__file__).parent
    session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if pytest_asyncio.is_async_test(item) and here in item.path.parents:
            item.add_marker(session_loop, append=False)


@pytest.fixture
def database_url(sqlite_seeded_template: SeededTemplate, tmp_path: Path) -> str:
    """A copy of the session's migrated (core and CRM branch) and seeded SQLite file, for this test
    alone: the UI runs on SQLite only, so the plugin's backend parametrization is left out."""
    path = tmp_path / "vernis.db"
    shutil.copyfile(sqlite_seeded_template.location, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
def seeded(sqlite_seeded_template: SeededTemplate) -> SeedResult:
    """The demo data in `database_url` (demo ids are the same in every seeded database)."""
    return sqlite_seeded_template.result


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def scripted_session() -> AsyncIterator[ScriptedServer]:
    model = ScriptedModel()
    async with run_server(model.app) as server:
        yield ScriptedServer(model, f"http://127.0.0.1:{server.config.port}/v1")


@pytest.fixture(name="scripted")
def scripted_fixture(scripted_session: ScriptedServer) -> ScriptedServer:
    """The scripted model on its own loopback port (one server for the session), with no rules and no
    requests recorded yet."""
    model = scripted_session.model
    model.rules.clear()
    model.requests.clear()
    model.exchanges.clear()
    return scripted_session


# The browser contexts open on each Vernis the UI tests start, by port (see `ui_factory`).
_TABS: dict[int, list[BrowserContext]] = {}


@pytest.fixture
def ui_factory(database_url: str, seeded: SeedResult, scripted: ScriptedServer) -> UIFactory:
    """Start a Vernis for the UI with settings overridden: `async with ui_factory(rate_limit=...) as v:`.

    Like `vernis serve --scripted-model`, the app knows its answers are scripted (`scripted_flag`).
    The model's stall timeout is 10 s, not the suite's 2: no UI test stalls a model, and on a loaded
    machine the test's process (the server, the scripted model and Playwright in one event loop)
    was once 2 s late with a first chunk, retried, and got another answer than the test's.
    """

    @asynccontextmanager
    async def start(*, scripted_flag: bool = True, **overrides: Any) -> AsyncIterator[Vernis]:
        overrides.setdefault("llm_stall_timeout", UI_STALL_TIMEOUT)
        settings = make_settings(database_url, scripted, **overrides)
        app = create_app(settings, scripted=scripted_flag)
        async with run_server(app, **uvicorn_options(settings)) as server:
            try:
                yield Vernis(server.config.port, settings, scripted.model, seeded)
            finally:
                # The tabs on this Vernis close before it stops: a tab left open would try to
                # reconnect to a server that is gone (a console error at the test's end).
                for context in _TABS.pop(server.config.port, []):
                    await context.close()

    return start


@pytest_asyncio.fixture(loop_scope="session")
async def vernis(ui_factory: UIFactory) -> AsyncIterator[Vernis]:
    """A Vernis serving the UI, with the scripted model."""
    async with ui_factory() as server:
        yield server


@dataclass(frozen=True)
class Embed:
    """The embed demo: a Vernis, and a host product's page on another origin (`url`) embedding it."""

    vernis: Vernis
    url: str


EmbedFactory = Callable[..., AbstractAsyncContextManager[Embed]]


@pytest.fixture
def embed_factory(ui_factory: UIFactory) -> EmbedFactory:
    """`async with embed_factory(token_ttl=6) as embed:` the host app signs tokens living `token_ttl`
    seconds; other keywords are the Vernis's settings."""

    @asynccontextmanager
    async def start(*, token_ttl: float = 600, **overrides: Any) -> AsyncIterator[Embed]:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        async with ui_factory(allowed_origins=[url], **overrides) as vernis:
            host = embed_host_app(vernis.http_url, vernis.settings, token_ttl=token_ttl)
            async with run_server(host, port=port):
                yield Embed(vernis, url)

    return start


@pytest_asyncio.fixture(loop_scope="session")
async def embed(embed_factory: EmbedFactory) -> AsyncIterator[Embed]:
    """The embed demo with the host's default (long-lived) tokens."""
    async with embed_factory() as started:
        yield started


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, and the vendored libraries the UI needs: both set up by the scripts."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/test does)", pytrace=False)
    if not (VENDOR / "marked.js").exists() or not (VENDOR / "purify.js").exists():
        pytest.fail("static/vendor/ is empty: run scripts/bootstrap (npm ci)", pytrace=False)
    return CHROMIUM


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    """A headless Chromium, shared by the session's UI tests (each test gets its own context)."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()


class UI:
    """One signed-in browser tab on a Vernis (or on the embed demo's host page, `host`), with the
    assistant's parts as locators."""

    def __init__(
        self, vernis: Vernis, context: BrowserContext, page: Page, host: Embed | None = None
    ) -> None:
        self.vernis = vernis
        self.host = host
        self.context = context
        self.page = page
        self.errors: list[str] = []
        self.console_errors: list[str] = []
        # Set by a test that provokes them (a failed image load, a socket refused while offline).
        self.console_errors_expected = False
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", lambda message: self._console(message))
        page.set_default_timeout(TIMEOUT_MS)
        # Playwright's CSS locators pierce the element's open shadow root.
        self.panel = page.locator("vernis-assistant .panel")
        self.launcher = page.locator("vernis-assistant .launcher")
        self.title = self.panel.locator(".title")
        self.connection = self.panel.locator(".conn")
        self.input = self.panel.locator("textarea")
        self.log = self.panel.locator(".log")
        self.picker = self.panel.locator(".picker")

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)

    @property
    def url(self) -> str:
        return self.host.url if self.host is not None else self.vernis.http_url

    async def goto(
        self, path: str = "/contacts", *, assistant: bool = True, seconds: float | None = None
    ) -> None:
        """Load a page of the demo and (unless `assistant` is false) wait for the assistant on it;
        `seconds`: the page's load may take that long (else the default timeout)."""
        await self.page.goto(self.url + path, timeout=None if seconds is None else seconds * 1000)
        if not assistant:
            return
        # Styled and defined (the element's module loads after the page's load event).
        await self.page.locator("vernis-assistant .root:not([hidden])").wait_for(state="attached")

    async def open(self) -> None:
        """Open the panel with the launcher and wait until it is connected."""
        await self.launcher.click()
        await self.connected()

    async def connected(self, *, seconds: float = 5) -> None:
        await expect(self.connection).to_have_attribute("data-state", "connected", timeout=seconds * 1000)

    async def send(self, text: str) -> None:
        """Type a message and press Enter, as a user does."""
        await self.input.fill(text)
        await self.input.press("Enter")

    def answers(self) -> Locator:
        return self.log.locator(".msg.assistant")

    async def answered(self, count: int = 1, *, seconds: float = 15) -> Locator:
        """Wait until `count` answers are shown and none streams (for at most `seconds`: a long
        answer on a loaded machine takes a while); the last one."""
        await expect(self.answers()).to_have_count(count, timeout=seconds * 1000)
        await expect(self.log.locator(".msg.assistant[data-streaming]")).to_have_count(
            0, timeout=seconds * 1000
        )
        return self.answers().last

    async def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        await self.page.screenshot(path=str(path))
        return path

    async def sign_in(self, email: str) -> None:
        await self.context.add_cookies(
            [{"name": COOKIE_NAME, "value": self.vernis.token(email), "url": self.url, "httpOnly": True}]
        )


OpenUI = Callable[..., Awaitable[UI]]


@pytest_asyncio.fixture(loop_scope="session")
async def open_ui(browser: Browser) -> AsyncIterator[OpenUI]:
    """`await open_ui(vernis, email=..., viewport=..., path=...)`: a signed-in tab on a page;
    `open_ui(embed.vernis, host=embed, email=None, path="/")`: a tab on the host's page."""
    contexts: list[BrowserContext] = []
    uis: list[UI] = []

    async def make(
        vernis: Vernis,
        *,
        email: str | None = "member@acme.test",
        viewport: tuple[int, int] = (1280, 800),
        path: str | None = "/contacts",
        assistant: bool = True,
        host: Embed | None = None,
    ) -> UI:
        context = await browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(context)
        _TABS.setdefault(vernis.port, []).append(context)
        ui = UI(vernis, context, await context.new_page(), host)
        uis.append(ui)
        if email is not None:
            await ui.sign_in(email)
        if path is not None:
            await ui.goto(path, assistant=assistant)
        return ui

    try:
        yield make
    finally:
        for context in contexts:
            await context.close()
    for ui in uis:
        assert not ui.errors, f"errors in the page: {ui.errors}"
        if not ui.console_errors_expected:
            assert not ui.console_errors, f"errors on the console: {ui.console_errors}"


@pytest_asyncio.fixture(loop_scope="session")
async def ui(vernis: Vernis, open_ui: OpenUI) -> UI:
    """The member `member@acme.test` signed in, on the contact list, the panel closed."""
    return await open_ui(vernis)


@pytest_asyncio.fixture(loop_scope="session")
async def login_page(vernis: Vernis, open_ui: OpenUI) -> UI:
    """A light page of the server (the login, without the assistant), to import the client's modules in."""
    return await open_ui(vernis, email=None, path="/login", assistant=False)


# --- data helpers ----------------------------------------------------------------------------------


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    """Wait until `check()` holds (a database row the UI changed through the server)."""
    for _ in range(int(timeout / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"still false after {timeout} s: {check}")
