"""Fixtures of the helpdesk example: its API behind a real uvicorn, and its toolkit started against it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.helpdesk.support import SECRET, Desk, HelpdeskApi, Recorder, RsaKey, start_desk
from tests.utils import run_server
from vernis_helpdesk.api import create_api


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """The helpdesk's tests need a Vernis database for members and approvals: SQLite is enough."""
    name: str = request.param
    return name


@pytest.fixture
async def helpdesk_api() -> AsyncIterator[HelpdeskApi]:
    """The helpdesk API (HS256, `SECRET`) on a free loopback port, recording what it is sent."""
    recorder = Recorder(create_api(SECRET))
    async with run_server(recorder) as server:
        yield HelpdeskApi(f"http://127.0.0.1:{server.config.port}", recorder)


@pytest.fixture
async def desk(engine: AsyncEngine, helpdesk_api: HelpdeskApi) -> AsyncIterator[Desk]:
    """The toolkit started against `helpdesk_api` (stopped after the test)."""
    started = await start_desk(engine, helpdesk_api.url)
    try:
        yield started
    finally:
        await started.catalog.stop()


@pytest.fixture(scope="session")
def rsa_key() -> RsaKey:
    """One RSA key for the session (generating one takes a while)."""
    return RsaKey.generate()
