"""SSE responses (vernis.web.sse) on a real uvicorn with Vernis's HTTP protocol: chunks written
directly while the client reads, and a client that leaves stopping the stream at once, without the
task group starlette's streaming response would start for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from starlette.types import Receive, Scope, Send

from tests.utils import run_server
from vernis.web.sse import EventStream, VernisHttpProtocol, WriteNow


class _App:
    """One SSE response per request: "first", then every chunk handed to `direct`'s writer, forever
    (until the client leaves); what happened is kept for the test."""

    def __init__(self) -> None:
        self.writer: WriteNow | None = None
        self.ended = asyncio.Event()
        self.closed = asyncio.Event()
        self.cancelled_outside = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            return
        ended, wake = self.ended, asyncio.Event()

        async def events() -> AsyncIterator[str]:
            try:
                yield "data: first\n\n"
                await wake.wait()  # never set: only the client's leaving ends this stream
            finally:
                ended.set()

        def direct(write: WriteNow) -> None:
            self.writer = write

        response = EventStream(events(), headers={}, close=self.closed.set, direct=direct)
        try:
            await response(scope, receive, send)
        except asyncio.CancelledError:
            self.cancelled_outside = True
            raise


@asynccontextmanager
async def _stream(server: uvicorn.Server) -> AsyncIterator[httpx.Response]:
    """One request to the server, its response streaming; the client leaves at the block's end."""
    url = f"http://127.0.0.1:{server.config.port}"
    async with httpx.AsyncClient(base_url=url, timeout=5) as client, client.stream("GET", "/") as response:
        yield response


async def test_a_client_that_leaves_stops_the_stream_and_the_response_closes() -> None:
    """A client that reads the first event and leaves: the stream's generator is stopped at once, the response's close runs, and the request's task is not cancelled past the response (it ends normally)."""
    app = _App()
    async with run_server(app, http=VernisHttpProtocol, lifespan="off") as server:
        async with _stream(server) as response:
            async for chunk in response.aiter_text():
                assert chunk.startswith("data: first")
                break
            assert app.writer is not None
            assert app.writer(b"data: direct\n\n")  # the client reads: written at once
        async with asyncio.timeout(5):  # the server still runs: the client's leaving ended it
            await app.ended.wait()
            await app.closed.wait()
        assert not app.cancelled_outside
        assert app.writer(b"data: late\n\n") is False  # the client is gone: nothing written


async def test_direct_writes_reach_the_client_between_the_streams_chunks() -> None:
    """A chunk written through the writer `direct` was given arrives on the wire as its own chunk of the same response, after the stream's first event."""
    app = _App()
    async with (
        run_server(app, http=VernisHttpProtocol, lifespan="off") as server,
        _stream(server) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        received = ""
        async for chunk in response.aiter_text():
            received += chunk
            if received == "data: first\n\n":
                assert app.writer is not None
                assert app.writer(b"data: direct\n\n")
            if "direct" in received:
                break
        assert received == "data: first\n\ndata: direct\n\n"
