"""Test helpers shared by every layer: real servers on free loopback ports."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def run_server(app: Any, **config: Any) -> AsyncIterator[uvicorn.Server]:
    """Serve `app` with a real uvicorn on a free loopback port, in the running event loop.

    Yields the started `uvicorn.Server`; its URL is `http://127.0.0.1:{server.config.port}`.
    Extra keyword arguments go to `uvicorn.Config` (ws limits, lifespan, ...).
    """
    config.setdefault("port", free_port())
    config.setdefault("log_level", "warning")
    config.setdefault("lifespan", "on")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", **config))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # raises the start-up error
                raise RuntimeError("server stopped before it started")
            await asyncio.sleep(0.01)
        yield server
    finally:
        server.should_exit = True
        await task
