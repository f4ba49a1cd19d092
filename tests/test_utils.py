"""The test helpers' server (`tests.utils.run_server`): stopped at once, it still closes what it
serves the way uvicorn does: open WebSockets told 1012, requests in flight answered whole, the app's
lifespan ended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import websockets
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.utils import run_server


class _App:
    """A route that answers once released, a WebSocket that reads until closed, and the lifespan's
    end recorded."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.release = asyncio.Event()
        self.shut_down = asyncio.Event()
        self.app = Starlette(
            routes=[Route("/slow", self.slow), WebSocketRoute("/ws", self.socket)], lifespan=self.lifespan
        )

    async def slow(self, request: Request) -> PlainTextResponse:
        self.requested.set()
        await self.release.wait()
        return PlainTextResponse("done " * 1000)

    async def socket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                await websocket.receive_text()
        except WebSocketDisconnect:
            pass

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        self.shut_down.set()


async def test_a_stopped_server_closes_its_sockets_with_1012_and_ends_the_lifespan() -> None:
    """Told to stop, the server closes an open WebSocket with 1012 and ends the app's lifespan
    before its `serve()` returns; its Date header is set from the start."""
    app = _App()
    async with run_server(app.app) as server:
        url = f"127.0.0.1:{server.config.port}"
        async with httpx.AsyncClient() as http:
            assert "date" in (await http.get(f"http://{url}/missing")).headers
        client = await websockets.connect(f"ws://{url}/ws")
        server.should_exit = True
        await asyncio.wait_for(client.wait_closed(), 5)
        assert client.close_code == 1012
    assert app.shut_down.is_set()


async def test_a_request_in_flight_is_answered_whole_before_the_server_stops() -> None:
    """A request the app is still answering when the server is told to stop gets its whole response:
    the server waits for it before it ends the app's lifespan."""
    app = _App()
    async with run_server(app.app) as server, httpx.AsyncClient() as http:
        response = asyncio.create_task(http.get(f"http://127.0.0.1:{server.config.port}/slow"))
        await asyncio.wait_for(app.requested.wait(), 5)
        server.should_exit = True
        for _ in range(5000):  # until it stops listening: its shutdown has begun
            if not server.servers[0].is_serving():
                break
            await asyncio.sleep(0.001)
        assert not server.servers[0].is_serving()
        # The app's lifespan does not end while the request is in flight.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(app.shut_down.wait(), 0.2)
        assert not response.done()
        app.release.set()
        assert (await asyncio.wait_for(response, 5)).text == "done " * 1000
    assert app.shut_down.is_set()
