"""The WebSocket protocol Vernis runs under uvicorn: its keepalive (`vernis.ws.keepalive`), and a
text frame written without the ASGI send's coroutine, for the frames of a streaming answer (those
that come in a row in one write).

A streamed delta is the one frame Vernis sends thousands of times a second. Through ASGI it costs a
coroutine of starlette's `WebSocket.send`, one of uvicorn's `send`, and the websockets library's frame
object and serializer, a large share of the server's CPU under many streams. A server-to-client text
frame without extensions (Vernis turns per-message deflate off) is two to ten bytes of header and the
UTF-8 text (RFC 6455 §5.2: unmasked from a server), so the protocol offers the app a plain function
that takes one (`VernisProtocol.send_text_now`), as an ASGI extension in the socket's scope
(`SEND_TEXT`): the socket layer calls it when it is there and falls back to the ASGI send when it is
not (another server), or when it returns False: the handshake is not done, a close was sent or
received, or the peer reads slower than we write (the transport asked us to pause), where the ASGI
send waits as it should.

It also keeps an open socket small, since thousands of them sit idle: a lighter receive queue and
writability flag than uvicorn's asyncio ones (`Inbox`, `Flag`), and none of the handshake's headers
once the socket is open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import monotonic
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from websockets.http11 import Request
from websockets.protocol import State

from vernis.ws.keepalive import KeepaliveProtocol

if TYPE_CHECKING:
    from uvicorn._types import ASGISendEvent

T = TypeVar("T")

__all__ = ["CORK_SECONDS", "SEND_TEXT", "Flag", "Inbox", "SendText", "VernisProtocol", "text_frame"]

# The scope extension: {"send": SendText}.
SEND_TEXT = "vernis.send_text"

SendText = Callable[[str], bool]

# A frame that comes this soon after the socket's last one waits for the others of its step
# (`VernisProtocol.send_text_now`); one that comes later is written at once.
CORK_SECONDS = 0.001


def text_frame(text: str) -> bytes:
    """One final, unmasked text frame (opcode 1) carrying `text`."""
    data = text.encode()
    size = len(data)
    if size < 126:
        return bytes((0x81, size)) + data
    if size < 65536:
        return b"\x81\x7e" + size.to_bytes(2, "big") + data
    return b"\x81\x7f" + size.to_bytes(8, "big") + data


class Inbox(Generic[T]):
    """What uvicorn's protocol needs of the queue of received messages (`put_nowait`, `get`,
    `empty`), in a small part of an `asyncio.Queue`'s memory: a queue keeps three deques and an
    event for every open socket, and this one holds at most a message or two (uvicorn stops reading
    the socket until the app has taken the last one). One reader: the app's `receive`."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    async def get(self) -> T:
        while not self._items:
            if self._waiter is not None:
                raise RuntimeError("two readers of one socket's messages")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.pop(0)


class Flag:
    """`asyncio.Event`'s `set`, `clear`, `is_set` and `wait`, without the deque every event keeps
    for its whole life: waiters are few (the peer fell behind) and their list is made then."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = True
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        if self._set:
            return
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)


class VernisProtocol(KeepaliveProtocol):
    # The frames `send_text_now` corked, None when there are none, and when it last wrote or corked
    # one that came alone (class defaults: an idle socket keeps neither).
    _corked: list[bytes] | None = None
    _written_at = float("-inf")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Thousands of sockets stay open and idle: lighter equivalents of uvicorn's receive queue and
        # writability event, which with the headers dropped below and in the app keep an idle
        # socket's share of the server's memory down.
        self.queue = Inbox()  # type: ignore[assignment]
        self.writable = Flag()  # type: ignore[assignment]

    def start_keepalive(self) -> None:
        # Called once the handshake's response is written. uvicorn keeps the request and the response
        # for the socket's life and never reads them again, and the websockets parser's generator
        # keeps the request as a local: their headers (the app's copy is in the scope) are dropped.
        super().start_keepalive()
        request, self.request, self.response = self.request, None, None  # type: ignore[assignment]
        request.headers.clear()

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:  # the handshake was accepted; the app's task has not run yet
            scope["extensions"][SEND_TEXT] = {"send": self.send_text_now}

    def send_text_now(self, text: str) -> bool:
        """Write a text frame now, or with the others that come soon after it; False, having taken
        nothing, when it must go through ASGI.

        A frame that comes alone (a paced answer's delta: one a read of the model's stream, tens of
        milliseconds apart on one socket) is written at once. A frame that comes within
        `CORK_SECONDS` of the last one written is corked: it and any that follow before the loop's
        next step (an answer's last delta and its end, what a reconnect replays, a history) go out
        in one write (`_uncork`). A write is a system call; the cork costs the event loop a step of
        its own (bench/results/2026-11-server.md), so it is kept for the frames that come in a row.
        Order holds: nothing is written past corked frames, the ASGI send writes what was corked
        first (`send`), and nothing corked is written after a close frame (it is dropped: the peer
        reads nothing after that). A transport already closing takes nothing (uvloop's write on a
        closed one raises): the ASGI send says why."""
        if (
            not self.handshake_complete
            or self.close_sent
            or self.disconnected
            or self.initial_response is not None
            or not self.writable.is_set()
            or self.conn.state is not State.OPEN
            or self.conn.extensions
            or self.transport.is_closing()
        ):
            return False
        corked = self._corked
        if corked is not None:
            corked.append(text_frame(text))
            return True
        now = monotonic()
        if now - self._written_at < CORK_SECONDS:
            self._corked = [text_frame(text)]
            self.loop.call_soon(self._uncork)
        else:
            self.transport.write(text_frame(text))
        self._written_at = now
        return True

    def _uncork(self) -> None:
        """Write the frames taken in this step, in one write, unless the socket closed meanwhile."""
        corked, self._corked = self._corked, None
        if not corked or self.close_sent or self.conn.state is not State.OPEN or self.transport.is_closing():
            return
        self.transport.write(corked[0] if len(corked) == 1 else b"".join(corked))

    async def send(self, message: ASGISendEvent) -> None:
        """uvicorn's ASGI send, after the frames taken by `send_text_now` (they were first)."""
        if self._corked is not None:
            self._uncork()
        await super().send(message)
