"""The session's use-cases in process: no Vernis server, no socket.

`services` is the app's whole `Services`, opened from settings by `open_services` as the app's
lifespan opens them, on a copy of the session's seeded SQLite file (the store's own tests cover
PostgreSQL) with the scripted model on its own loopback port, talked to by the real `openai` client.
`connect(email)` signs a demo member in through the identity service and gives a `Tab`: a `Session`
whose `Outbox` records every event it is sent (decoded from the wire frame the socket would send).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures.db import SeededTemplate
from tests.fixtures.scripted import ScriptedServer
from tests.fixtures.server import JWT_SECRET, make_settings
from vernis.app import build_catalog
from vernis.config import HostConfig
from vernis.conversation import events
from vernis.identity import issue_token
from vernis.model.scripted import Reply
from vernis.runtime import Services, open_services
from vernis.session.state import Session
from vernis.ws.encoder import encode
from vernis_crm.demo.seed import SeedResult

WAIT = 10.0


class RecordingOutbox:
    """An `Outbox` that keeps what the session sends, as the client would read it."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.read = 0
        self._arrived = asyncio.Event()

    def send(self, event: events.Event, seq: int | None = None) -> None:
        self.put(encode(event, seq))

    def put(self, frame: str) -> None:
        self.received.append(orjson.loads(frame))
        self._arrived.set()

    async def until(self, type: str, timeout: float = WAIT) -> list[dict[str, Any]]:
        """The events not read yet up to and including the first of `type` (waiting for it)."""
        async with asyncio.timeout(timeout):
            while True:
                for index in range(self.read, len(self.received)):
                    if self.received[index]["type"] == type:
                        found, self.read = self.received[self.read : index + 1], index + 1
                        return found
                self._arrived.clear()
                await self._arrived.wait()

    def rest(self) -> list[dict[str, Any]]:
        """The events not read yet, marked read."""
        found, self.read = self.received[self.read :], len(self.received)
        return found


@dataclass
class Tab:
    """A member's session and what it was sent."""

    session: Session
    outbox: RecordingOutbox

    async def until(self, type: str, timeout: float = WAIT) -> list[dict[str, Any]]:
        return await self.outbox.until(type, timeout)

    def rest(self) -> list[dict[str, Any]]:
        return self.outbox.rest()


@dataclass
class App:
    """The app's services, the demo data in their database, and the tabs opened on them."""

    services: Services
    seed: SeedResult
    scripted: ScriptedServer
    tabs: list[Tab] = field(default_factory=list)

    async def connect(self, email: str = "member@acme.test") -> Tab:
        """A session of the demo member `email`, signed in with a token as the demo host signs it."""
        slug = email.split("@")[1].removesuffix(".test")
        identity = await self.services.identity.authenticate(issue_token(JWT_SECRET, sub=email, org=slug))
        outbox = RecordingOutbox()
        tab = Tab(Session(self.services, identity, outbox), outbox)
        self.tabs.append(tab)
        return tab

    def script(self, reply: Reply | str, about: str | None = None, *, times: int | None = 1) -> None:
        """Answer the next answer requests (not title requests) whose last message is the user's and
        holds `about` (any, when None) with `reply`."""
        chat = self.services.settings.chat_model

        def matches(body: Mapping[str, Any]) -> bool:
            last = body["messages"][-1]
            return (
                body["model"] == chat
                and last["role"] == "user"
                and (about is None or about in last["content"])
            )

        self.scripted.model.add(reply, match=matches, times=times)

    def chat_requests(self) -> list[dict[str, Any]]:
        """The bodies the model received for answers (not for titles)."""
        chat = self.services.settings.chat_model
        return [body for body in self.scripted.model.requests if body["model"] == chat]


AppFactory = Callable[..., AbstractAsyncContextManager[App]]


@pytest.fixture
def app_factory(
    sqlite_seeded_template: SeededTemplate, scripted: ScriptedServer, tmp_path: Path
) -> AppFactory:
    """`async with app_factory(rate_limit="1/60") as app:` the services with settings overridden, on a
    fresh copy of the seeded database."""
    copies = iter(range(1_000))

    @asynccontextmanager
    async def start(**overrides: Any) -> AsyncIterator[App]:
        path = tmp_path / f"vernis-{next(copies)}.db"
        shutil.copyfile(sqlite_seeded_template.location, path)
        settings = make_settings(f"sqlite+aiosqlite:///{path}", scripted, **overrides)
        config = HostConfig()
        async with open_services(
            settings, config, build_catalog(settings, config), encode=encode
        ) as services:
            app = App(services, sqlite_seeded_template.result, scripted)
            try:
                yield app
            finally:
                for tab in app.tabs:
                    tab.session.close()

    return start


@pytest.fixture
async def app(app_factory: AppFactory) -> AsyncIterator[App]:
    """The services with the default settings."""
    async with app_factory() as started:
        yield started


Connect = Callable[..., Awaitable[Tab]]


@pytest.fixture
def connect(app: App) -> Connect:
    """`await connect("owner@acme.test")`: a signed-in session on `app`."""
    return app.connect
