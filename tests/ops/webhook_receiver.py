"""A real webhook receiver for the tests: an ASGI app served by uvicorn on a free loopback port.

Each request is queued as it arrives (`next()` awaits it); what it answers is scripted in order:
"ok" (204, the default once the script is used up), "500", "close" (the headers of a 200, then the
connection dropped mid-body), "hang" (no answer until the client gives up), "slow" (200 after 6 s).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.utils import run_server

__all__ = ["Received", "Receiver", "receiver", "verify"]


def verify(secret: str, header: str, body: bytes, tolerance: float = 300) -> bool:
    """The receiver of docs/webhooks.md, as a host writes it with the standard library alone."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    signed = fields["t"].encode() + b"." + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(fields["t"])) < tolerance
    return fresh and hmac.compare_digest(expected, fields["v1"])


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float
    behaviour: str

    @property
    def json(self) -> dict[str, Any]:
        payload: dict[str, Any] = orjson.loads(self.body)
        return payload


@dataclass
class Receiver:
    port: int = 0
    script: list[str] = field(default_factory=list)
    arrived: asyncio.Queue[Received] = field(default_factory=asyncio.Queue)
    seen: list[Received] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    async def next(self, timeout: float = 20.0) -> Received:
        async with asyncio.timeout(timeout):
            return await self.arrived.get()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {key.decode().lower(): value.decode() for key, value in scope["headers"]}
        behaviour = self.script.pop(0) if self.script else "ok"
        got = Received(headers, body, time.monotonic(), behaviour)
        self.seen.append(got)
        self.arrived.put_nowait(got)
        if behaviour == "hang":
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        if behaviour == "slow":
            await asyncio.sleep(6)
        if behaviour == "close":
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]}
            )
            raise ConnectionAbortedError("the receiver drops the connection mid-answer")
        status = 500 if behaviour == "500" else 200 if behaviour == "slow" else 204
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@asynccontextmanager
async def receiver(*script: str) -> AsyncIterator[Receiver]:
    """A receiver on a free port, answering as `script` says."""
    app = Receiver(script=list(script))
    async with run_server(app, lifespan="off", timeout_graceful_shutdown=1) as server:
        app.port = server.config.port
        yield app
