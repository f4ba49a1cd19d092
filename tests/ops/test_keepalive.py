"""Vernis's keepalive (SPEC §2) through a real server: a client that stops answering pings is closed
with 4408 (not 1011); a client that answers them stays connected through many intervals.
"""

from __future__ import annotations

import asyncio

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from tests.fixtures.server import Vernis, VernisFactory


async def silent_client(vernis: Vernis) -> tuple[int, int]:
    """A client that opens the socket and then answers nothing, pongs included (the sans-I/O
    protocol queues each pong; this client never sends it): (pings seen, the close code)."""
    protocol = ClientProtocol(parse_uri(vernis.ws_url), subprotocols=[Subprotocol("vernis.v1")])
    request = protocol.connect()
    request.headers["Authorization"] = f"Bearer {vernis.token()}"
    protocol.send_request(request)
    reader, writer = await asyncio.open_connection("127.0.0.1", vernis.port)
    writer.write(b"".join(protocol.data_to_send()))
    pings = 0
    try:
        async with asyncio.timeout(15):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                protocol.receive_data(data)
                for event in protocol.events_received():
                    if isinstance(event, Frame) and event.opcode is Opcode.PING:
                        pings += 1
                # Only a close frame's reply would go out; pongs are dropped on purpose.
                protocol.data_to_send()
    finally:
        writer.close()
    assert protocol.handshake_exc is None
    assert protocol.close_rcvd is not None, "closed without a close frame"
    return pings, protocol.close_rcvd.code


async def test_a_client_that_stops_answering_pings_is_closed_with_4408(vernis_factory: VernisFactory) -> None:
    """With a 0.5 s interval and timeout, a client that never sends a pong gets a ping and then a close with code 4408."""
    async with vernis_factory(ping_interval=0.5, ping_timeout=0.5) as vernis:
        pings, code = await silent_client(vernis)
    assert pings >= 1
    assert code == 4408


async def test_a_client_that_answers_pings_stays_connected(vernis_factory: VernisFactory) -> None:
    """A client that answers pings (the websockets client does, as browsers do) is still served after several ping intervals."""
    async with vernis_factory(ping_interval=0.2, ping_timeout=0.5) as vernis, vernis.opened() as client:
        for _ in range(6):
            await client.silent(0.3)
        await client.send("ping")
        await client.expect("pong")
        assert client.ws.close_code is None
