"""Transport limits of SPEC §2 through real uvicorn with the production options, and the health routes."""

from __future__ import annotations

import asyncio
import base64
import gc
import os
import socket
import struct

import httpx
import orjson
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.fixtures.server import Client, Vernis, VernisFactory, text_of
from vernis.model.scripted import Reply
from vernis.ws import transport
from vernis.ws.transport import Flag, Inbox, VernisProtocol

MAX_FRAME = 65536
OPCODE_TEXT, OPCODE_CLOSE, OPCODE_PING = 0x1, 0x8, 0x9


async def closed_with(client: Client, timeout: float = 5.0) -> int:
    """Read until the server closes the socket; the close code it sent."""

    async def read_all() -> None:
        async with asyncio.timeout(timeout):
            while True:
                await client.ws.recv()

    with pytest.raises(ConnectionClosed) as closed:
        await read_all()
    assert closed.value.rcvd is not None, f"closed without a close frame from the server: {closed.value!r}"
    return closed.value.rcvd.code


def user_message_frame(size: int) -> str:
    """A `user_message` frame of exactly `size` bytes."""
    skeleton = orjson.dumps({"type": "user_message", "content": ""})
    frame = orjson.dumps({"type": "user_message", "content": "a" * (size - len(skeleton))}).decode()
    assert len(frame.encode()) == size
    return frame


async def still_open(client: Client) -> None:
    await client.send("ping")
    await client.expect("pong")


async def test_frame_over_the_cap_closes_with_1009(vernis: Vernis) -> None:
    """A frame one byte over VERNIS_MAX_FRAME_BYTES (64 KiB) closes the socket with 1009."""
    async with vernis.opened() as client:
        await client.send_raw(user_message_frame(MAX_FRAME + 1))
        assert await closed_with(client) == 1009


async def test_frame_at_the_cap_is_accepted(vernis: Vernis) -> None:
    """A frame of exactly 64 KiB is read and answered (here: message_too_long), and the socket stays open."""
    async with vernis.opened() as client:
        await client.send_raw(user_message_frame(MAX_FRAME))
        (error,) = await client.expect("error")
        assert error["code"] == "message_too_long"
        await still_open(client)


async def test_per_message_deflate_is_not_negotiated(vernis: Vernis) -> None:
    """A client offering permessage-deflate gets a handshake without Sec-WebSocket-Extensions: frames stay uncompressed."""
    async with vernis.opened(compression="deflate") as client:
        assert client.ws.request is not None
        assert client.ws.response is not None
        assert "permessage-deflate" in client.ws.request.headers["Sec-WebSocket-Extensions"]
        assert "Sec-WebSocket-Extensions" not in client.ws.response.headers
        await still_open(client)


async def test_offered_subprotocol_is_selected(vernis: Vernis) -> None:
    """Offering `vernis.v1` (among others) gets `vernis.v1` selected in the handshake response."""
    async with vernis.opened(subprotocols=["chat.other", "vernis.v1"]) as client:
        assert client.ws.subprotocol == "vernis.v1"
        assert client.ws.response is not None
        assert client.ws.response.headers["Sec-WebSocket-Protocol"] == "vernis.v1"


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One unmasked server frame: (opcode, payload)."""
    first, second = await reader.readexactly(2)
    length = second & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", await reader.readexactly(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", await reader.readexactly(8))
    return first & 0x0F, await reader.readexactly(length)


async def test_client_that_never_answers_pings_is_closed_with_4408(vernis_factory: VernisFactory) -> None:
    """A raw client that completes the handshake but never answers pings gets a ping, then a 4408 close (Vernis's keepalive, SPEC §2), within 2 s."""
    async with vernis_factory(ping_interval=0.2, ping_timeout=0.2) as vernis:
        reader, writer = await asyncio.open_connection("127.0.0.1", vernis.port)
        try:
            key = base64.b64encode(os.urandom(16)).decode()
            writer.write(
                (
                    "GET /api/assistant/ws HTTP/1.1\r\n"
                    f"Host: 127.0.0.1:{vernis.port}\r\n"
                    "Upgrade: websocket\r\n"
                    "Connection: Upgrade\r\n"
                    f"Sec-WebSocket-Key: {key}\r\n"
                    "Sec-WebSocket-Version: 13\r\n"
                    f"Authorization: Bearer {vernis.token()}\r\n"
                    "\r\n"
                ).encode()
            )
            await writer.drain()
            opcodes: list[int] = []
            async with asyncio.timeout(2.0):
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 101"), head
                while True:
                    opcode, payload = await read_frame(reader)
                    opcodes.append(opcode)
                    if opcode == OPCODE_CLOSE:
                        break
            (code,) = struct.unpack("!H", payload[:2])
            assert code == 4408
            assert OPCODE_PING in opcodes
            assert opcodes.index(OPCODE_PING) < len(opcodes) - 1
            assert OPCODE_TEXT in opcodes  # the opening replay arrived: the socket was really accepted
        finally:
            writer.close()
            await writer.wait_closed()


async def test_client_that_answers_pings_stays_connected(vernis_factory: VernisFactory) -> None:
    """A websockets client (which answers pings) stays connected across several 0.2 s keepalive intervals."""
    async with (
        vernis_factory(ping_interval=0.2, ping_timeout=0.2) as vernis,
        vernis.opened(ping_interval=None) as client,
    ):
        await asyncio.sleep(1.2)
        await still_open(client)


async def test_socket_cap_per_member_refuses_the_next_with_403(vernis_factory: VernisFactory) -> None:
    """With max_sockets_per_member=2 a member's third socket is refused with HTTP 403; other members still connect."""
    async with (
        vernis_factory(max_sockets_per_member=2) as vernis,
        vernis.opened() as first,
        vernis.opened() as second,
    ):
        with pytest.raises(InvalidStatus) as refused:
            async with vernis.connect():
                pass
        assert refused.value.response.status_code == 403
        async with vernis.opened("owner@acme.test") as other:
            await still_open(other)
        await still_open(first)
        await still_open(second)


async def test_socket_cap_frees_a_slot_when_a_socket_closes(vernis_factory: VernisFactory) -> None:
    """Once one of a member's capped sockets closes, the member may open another."""
    async with vernis_factory(max_sockets_per_member=1) as vernis:
        async with vernis.opened() as client:
            await still_open(client)
        # The server forgets the socket once its handler returns; allow it a moment.
        for _ in range(50):
            try:
                async with vernis.opened() as again:
                    await still_open(again)
                    return
            except InvalidStatus:
                await asyncio.sleep(0.05)
        raise AssertionError("the slot of the closed socket was never freed")


async def test_sixty_frames_pass_and_the_sixty_first_closes_with_1008(vernis: Vernis) -> None:
    """60 frames in 10 s are served; the 61st closes the socket with 1008 (command flood)."""
    async with vernis.opened() as client:
        for _ in range(60):
            await client.send("ping")
        pongs = [await client.recv() for _ in range(60)]
        assert {e["type"] for e in pongs} == {"pong"}
        await client.send("ping")
        assert await closed_with(client) == 1008


async def test_health_routes(vernis: Vernis) -> None:
    """/healthz answers 200 ok; /readyz answers 200 ready with the answers in flight."""
    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        health = await http.get("/healthz")
        ready = await http.get("/readyz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert ready.json()["answers_in_flight"] == 0


async def test_every_http_response_carries_the_security_headers(vernis: Vernis) -> None:
    """Health checks and the API carry the same Content-Security-Policy and nosniff as the pages."""
    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        for path in ("/healthz", "/readyz", "/api/organization/ai-rules"):
            response = await http.get(path)
            assert "script-src 'self'" in response.headers["content-security-policy"], path
            assert response.headers["x-content-type-options"] == "nosniff"


async def test_a_reader_that_falls_behind_gets_every_delta_once_in_order(vernis: Vernis) -> None:
    """A client that stops reading mid-answer (the server's socket stops being writable) then reads on gets every delta once, in order."""
    words = " ".join(f"word{n:05d}-{'x' * 5000}" for n in range(1200))
    vernis.scripted.add(Reply(words, chunk_delay=0), match="flood")
    # A small receive buffer and no read-ahead: the server's writes back up after a few MB.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.connect(("127.0.0.1", vernis.port))
    async with vernis.connect(sock=sock, max_queue=1) as client:
        await client.until("history_end")
        await client.send("user_message", content="flood please")
        first = await client.until("text_delta")
        await asyncio.sleep(1.0)  # not reading: the answer goes on and its frames back up
        rest = await client.until("assistant_end", timeout=30)
        # The title: with no read-ahead, unread frames would hold up the close.
        await client.until("title_updated")
    events = first + rest
    assert text_of(events) == words
    seqs = [event["seq"] for event in events if "seq" in event]
    assert seqs == sorted(set(seqs))


def _open_protocol(vernis: Vernis) -> VernisProtocol:
    """The server side of the one socket open to `vernis`."""
    (protocol,) = [
        o
        for o in gc.get_objects()
        if type(o) is VernisProtocol
        and o.server is not None
        and o.server[1] == vernis.port
        and not o.disconnected
    ]
    return protocol


async def test_an_open_socket_keeps_none_of_its_handshake_headers(vernis: Vernis) -> None:
    """Once the handshake is done the server's side of a socket holds no headers (3.5 KB and 1.5 KB a socket): uvicorn's request and response are dropped, the request the websockets parser keeps is emptied, the app's scope keeps none; the socket still answers."""
    async with vernis.opened() as client:
        await still_open(client)
        protocol = _open_protocol(vernis)
        assert protocol.request is None
        assert protocol.response is None
        assert protocol.scope["headers"] == []
        parser_request = protocol.conn.parser.gi_frame.f_locals["request"]
        assert len(parser_request.headers) == 0
        assert type(protocol.queue) is Inbox
        assert type(protocol.writable) is Flag
        await still_open(client)


class _CountedWrites:
    """The protocol's real transport, its writes counted (they still go out)."""

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


async def test_a_frame_alone_is_written_at_once_and_frames_in_a_row_in_one_write_in_order(
    vernis: Vernis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text frame that comes more than CORK_SECONDS after the socket's last one is written at once; the frames that follow it within CORK_SECONDS leave together in one write at the step's end, in the order given; a frame after a pause is written at once again."""
    now = [1000.0]
    monkeypatch.setattr(transport, "monotonic", lambda: now[0])
    async with vernis.opened() as client:
        await still_open(client)
        protocol = _open_protocol(vernis)
        counted = protocol.transport = _CountedWrites(protocol.transport)  # type: ignore[assignment]
        now[0] += 1
        assert protocol.send_text_now('{"n": 0}')
        assert len(counted.writes) == 1  # alone: written at once
        now[0] += transport.CORK_SECONDS / 2
        assert all(protocol.send_text_now(f'{{"n": {n}}}') for n in (1, 2, 3))
        assert len(counted.writes) == 1  # in a row: taken, not yet written
        received = [orjson.loads(await client.ws.recv()) for _ in range(4)]
        assert received == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]
        assert len(counted.writes) == 2
        now[0] += 2 * transport.CORK_SECONDS
        assert protocol.send_text_now('{"n": 4}')
        assert len(counted.writes) == 3
        assert orjson.loads(await client.ws.recv()) == {"n": 4}
        await still_open(client)


class _Closing(_CountedWrites):
    """The real transport, said to be closing (as between its `close()` and `connection_lost`)."""

    def is_closing(self) -> bool:
        return True


async def test_a_closing_transport_takes_no_frame(vernis: Vernis) -> None:
    """Once the transport is closing the protocol takes no text frame (send_text_now says False, the caller falls back to the ASGI send) and writes nothing: uvloop raises on a write to a closed transport."""
    async with vernis.opened() as client:
        await still_open(client)
        protocol = _open_protocol(vernis)
        real = protocol.transport
        closing = protocol.transport = _Closing(real)  # type: ignore[assignment]
        assert not protocol.send_text_now('{"n": 0}')
        assert closing.writes == []
        protocol.transport = real
        await still_open(client)


async def test_an_asgi_send_goes_out_after_the_frames_taken_before_it(vernis: Vernis) -> None:
    """A frame through the ASGI send (the writer's path, a close) is written after the frames the protocol took before it: a text frame, then a close frame, arrive in that order."""
    async with vernis.opened() as client:
        await still_open(client)
        protocol = _open_protocol(vernis)
        assert protocol.send_text_now('{"n": 0}')
        await protocol.send({"type": "websocket.send", "text": '{"n": 1}'})
        assert protocol.send_text_now('{"n": 2}')
        await protocol.send({"type": "websocket.close", "code": 4000, "reason": ""})
        assert [orjson.loads(await client.ws.recv()) for _ in range(3)] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert await closed_with(client) == 4000
        assert not protocol.send_text_now('{"n": 3}')  # a close was sent: the ASGI path says why
