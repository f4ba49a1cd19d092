"""Vernis's WebSocket keepalive (SPEC §2): a ping every `VERNIS_PING_INTERVAL` seconds (20), and a
socket whose peer sends no pong within `VERNIS_PING_TIMEOUT` (20) closed with 4408.

Pings and pongs are WebSocket control frames, which a browser answers by itself and which ASGI does
not carry to the application: they live in the server's protocol. `KeepaliveProtocol` is the
protocol Vernis runs (uvicorn's sans-I/O WebSocket implementation, pinned by the lockfile) with the
keepalive's verdict made Vernis's: a missed pong closes with 4408, which a client tells apart from a
server failure, where uvicorn's own keepalive closes with 1011 (internal error). uvicorn takes the
class as its `ws` option (`vernis.cli.uvicorn_options`); the interval and timeout are its
`ws_ping_interval` / `ws_ping_timeout`.
"""

from __future__ import annotations

import logging

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from vernis.ws.closecodes import CloseCode

__all__ = ["KeepaliveProtocol"]

logger = logging.getLogger("vernis.ws")


class KeepaliveProtocol(WebSocketsSansIOProtocol):
    def keepalive_timeout(self) -> None:
        """No pong came within the timeout: close with 4408 (and drop the connection)."""
        self.pong_timer = None
        self.pending_ping_payload = None
        if self.close_sent or self.transport.is_closing():
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else None
        logger.info("no pong to the keepalive ping, closing", extra={"client": client})
        self.conn.fail(CloseCode.KEEPALIVE_TIMEOUT, "no pong to the keepalive ping")
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.transport.close()
