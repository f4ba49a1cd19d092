"""Server-sent events written the way the socket's frames are: from the hub's publish, straight to
the connection (SPEC §20's AG-UI runs).

`VernisHttpProtocol` is uvicorn's httptools protocol, which also tells each request's scope how to
write a body chunk now (`WRITE_BODY` in its extensions): synchronously, when the response has
started with chunked encoding, is not complete, the client is still there and reading (the
transport's writes are not paused); otherwise it writes nothing and says so, and the chunk takes
the ASGI way. It also calls the request's `lost` callback, when one is set, as the client goes
away before the response is complete. `EventStream` is the response that uses both: its start goes
through the middleware (the security headers, CORS), `direct` is handed the writer before the first
chunk, and a client that leaves stops the stream (as starlette's `StreamingResponse` does with a
task group listening for the disconnect, which costs every response two tasks more).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["WRITE_BODY", "EventStream", "VernisHttpProtocol", "WriteNow"]

WRITE_BODY = "vernis.write_body"

WriteNow = Callable[[bytes], bool]


def _write_now(cycle: RequestResponseCycle, body: bytes) -> bool:
    if (
        cycle.disconnected
        or not cycle.response_started
        or cycle.response_complete
        or not cycle.chunked_encoding
        or cycle.flow.write_paused
        or cycle.scope["method"] == "HEAD"
    ):
        return False
    cycle.transport.write(b"%x\r\n%b\r\n" % (len(body), body))
    return True


class VernisHttpProtocol(HttpToolsProtocol):
    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        # The request's task has not run yet (it was only created): its scope gets the writer.
        if cycle is not None and cycle.scope is self.scope and not cycle.response_started:
            self.scope.setdefault("extensions", {})[WRITE_BODY] = {
                "write": partial(_write_now, cycle),
                "lost": None,
            }

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and cycle.disconnected:
            extensions: dict[str, Any] = cycle.scope.get("extensions", {})
            extension = extensions.get(WRITE_BODY)
            lost = extension.get("lost") if extension else None
            if lost is not None:
                lost()


class EventStream(StreamingResponse):
    """`text/event-stream` of `events`; `direct`, when the server can write chunks now, is given the
    writer (`WriteNow`) once the response has started; `close` runs after the response."""

    def __init__(
        self,
        events: AsyncIterator[str],
        *,
        headers: dict[str, str],
        close: Callable[[], None],
        direct: Callable[[WriteNow], None] | None = None,
    ) -> None:
        async def closed() -> None:  # a coroutine: starlette runs a plain function on a worker thread
            close()

        super().__init__(
            events, media_type="text/event-stream", headers=headers, background=BackgroundTask(closed)
        )
        self._direct = direct
        self._write: WriteNow | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extension: dict[str, Any] | None = scope.get("extensions", {}).get(WRITE_BODY)
        if extension is None:  # another server: starlette's way
            await super().__call__(scope, receive, send)
            return
        self._write = extension["write"]
        task = asyncio.current_task()
        assert task is not None
        gone = False

        def lost() -> None:
            # Called by the protocol while this task waits inside `stream_response`: it is cancelled
            # there, as starlette's task group would cancel it.
            nonlocal gone
            gone = True
            task.cancel()

        extension["lost"] = lost
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()
        finally:
            extension["lost"] = None
        if self.background is not None:
            await self.background()

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if self._direct is not None and self._write is not None:
            self._direct(self._write)
        async for chunk in self.body_iterator:
            data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
