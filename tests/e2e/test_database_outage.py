"""PostgreSQL out of reach (SPEC §10): a clear `error unavailable`, sockets stay open, service returns
by itself. The database is reached through a TCP relay the test cuts and restores, as a network
partition or a database restart does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.engine import make_url

from tests.fixtures.server import VernisFactory
from tests.utils import free_port


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


class Relay:
    """A TCP relay to the database that can be cut (every connection dropped, new ones refused)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        self._server = None
        for writer in list(self._writers):
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, upstream_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.transport.abort()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        self._writers -= {writer, upstream_writer}


@pytest.fixture
async def relay(database_url: str) -> AsyncIterator[tuple[Relay, str]]:
    url = make_url(database_url)
    relay = Relay(url.host or "127.0.0.1", url.port or 5432)
    await relay.start()
    try:
        yield relay, url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
    finally:
        if relay._server is not None:
            await relay.cut()


async def test_database_down_refuses_new_answers_keeps_sockets_and_recovers(
    vernis_factory: VernisFactory, relay: tuple[Relay, str]
) -> None:
    """With PostgreSQL cut off, an open socket stays open and a new message gets error unavailable; once the database is back, a message is answered with no restart."""
    cut, url = relay
    async with vernis_factory(database_url=url) as vernis, vernis.opened() as client:
        await client.answer("hello")
        await client.until("title_updated")
        await cut.cut()
        await client.send("user_message", content="are you there?")
        refused = (await client.until("error"))[-1]
        assert refused["code"] == "unavailable"
        await client.send("ping")
        await client.until("pong")
        await cut.start()
        answered = await client.answer_once_available("and now?")
        assert answered[-1]["stopped"] is False
