"""The WebSocket protocol Vernis runs under uvicorn: its keepalive (`vernis.ws.keepalive`), and a
text frame written at once, without the ASGI send's coroutine, for the frames of a streaming answer.

A streamed delta is the one frame Vernis sends thousands of times a second. Through ASGI it costs a
coroutine of starlette's `WebSocket.send`, one of uvicorn's `send`, and the websockets library's frame
object and serializer: 14 % of a py-spy profile of the server under 200 paced streams. A
server-to-client text frame without extensions (Vernis turns per-message deflate off) is two to ten
bytes of header and the UTF-8 text (RFC 6455 §5.2: unmasked from a server), so the protocol offers
the app a plain function that writes one, as an ASGI extension in the socket's scope (`SEND_TEXT`):
the socket layer calls it when it is there and falls back to the ASGI send when it is not (another
server), or when it returns False: the handshake is not done, a close was sent or received, or the
peer reads slower than we write (the transport asked us to pause), where the ASGI send waits as it
should.
"""

from __future__ import annotations

from collections.abc import Callable

from websockets.http11 import Request
from websockets.protocol import State

from vernis.ws.keepalive import KeepaliveProtocol

__all__ = ["SEND_TEXT", "SendText", "VernisProtocol", "text_frame"]

# The scope extension: {"send": SendText}.
SEND_TEXT = "vernis.send_text"

SendText = Callable[[str], bool]


def text_frame(text: str) -> bytes:
    """One final, unmasked text frame (opcode 1) carrying `text`."""
    data = text.encode()
    size = len(data)
    if size < 126:
        return bytes((0x81, size)) + data
    if size < 65536:
        return b"\x81\x7e" + size.to_bytes(2, "big") + data
    return b"\x81\x7f" + size.to_bytes(8, "big") + data


class VernisProtocol(KeepaliveProtocol):
    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:  # the handshake was accepted; the app's task has not run yet
            scope["extensions"][SEND_TEXT] = {"send": self.send_text_now}

    def send_text_now(self, text: str) -> bool:
        """Write a text frame now; False, having written nothing, when it must go through ASGI."""
        if (
            not self.handshake_complete
            or self.close_sent
            or self.disconnected
            or self.initial_response is not None
            or not self.writable.is_set()
            or self.conn.state is not State.OPEN
            or self.conn.extensions
        ):
            return False
        self.transport.write(text_frame(text))
        return True
