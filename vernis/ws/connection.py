"""One accepted socket: I/O glue around the conversation session of `vernis.session.state`.

A `Connection` reads frames, turns each into a command (`protocol.parse_command`) and calls the
session's use-case for it; the session answers with internal events, which this module encodes
(`vernis.ws.encoder`) and sends. Every outgoing frame, whether a direct reply or an event the hub
delivers from an answer, is handed to the socket at once when it takes it (written at the end of
the loop's step, with the others of that step: `vernis.ws.transport`), else goes through one bounded
queue drained by one writer task, so frames leave in order and a publisher never waits on a slow
socket.

The reader is the endpoint's own task; the writer runs only while frames wait (a socket that falls
behind, a close to send), so an idle socket holds no task but its reader. A timer closes the socket
when its token expires (4401); members removed or revoked meanwhile are found by the app's socket
registry, for all sockets at once (`Sockets.watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from typing import assert_never

from sqlalchemy import exc as sa_exc
from starlette.websockets import WebSocket, WebSocketDisconnect

from vernis.conversation import events
from vernis.exceptions import AuthError, ClientError, QuotaExceeded, Unavailable
from vernis.identity.members import Identity
from vernis.limits.rate import SlidingWindow
from vernis.pages import PageRequest
from vernis.runtime import Services
from vernis.session import conversations, reviews
from vernis.session.client_tools import client_tool_result, declare_client_tools
from vernis.session.confirm import confirm_tool
from vernis.session.questions import answer_question
from vernis.session.send import send_user_message
from vernis.session.state import Session
from vernis.session.versions import edit_message, regenerate
from vernis.tools.client import ClientToolSpec
from vernis.ws import protocol
from vernis.ws.closecodes import CloseCode
from vernis.ws.encoder import encode
from vernis.ws.transport import SEND_TEXT, SendText

__all__ = ["Connection", "ConnectionState", "out_of_reach"]

logger = logging.getLogger("vernis.ws")

SEND_QUEUE_FRAMES = 4096
# Frames are counted in the socket and added to the metrics this many at a time (and at its close).
FRAMES_BATCH = 256
# How long a socket that is closing may take to send its queued frames and the close frame.
CLOSE_FLUSH_SECONDS = 2.0


def out_of_reach(exc: BaseException) -> bool:
    """Whether `exc` says a dependency (the database) is out of reach rather than that the command
    failed: a refused connection, or one cut in the middle of a statement, whichever class the
    driver gives the error (asyncpg's "connection was closed in the middle of operation" comes as
    a plain `DBAPIError`, its connection invalidated)."""
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | OSError):
        return True
    return isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated


class ConnectionState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class Connection:
    # One per socket, thousands of them idle: no instance dictionary (about 200 bytes each).
    __slots__ = (
        "_expiry",
        "_flood",
        "_frames",
        "_frames_in",
        "_frames_out",
        "_send_text",
        "_writer",
        "services",
        "session",
        "settings",
        "socket_id",
        "state",
        "websocket",
    )

    def __init__(self, websocket: WebSocket, services: Services, identity: Identity) -> None:
        self.websocket = websocket
        self.services = services
        # Its entry in the member's socket count (SocketCap).
        self.socket_id = ""
        self.settings = services.settings
        self.state = ConnectionState.OPEN
        # The frames waiting to be sent (a deque: an asyncio.Queue weighs more per socket and per
        # frame), and the writer sending them, while there are any (an idle task would hold memory
        # for every socket). The deque is made when a frame first has to wait (an empty deque is
        # not free), and most sockets never fall behind.
        self._frames: deque[str | CloseCode] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._flood = SlidingWindow(self.settings.flood_limit)
        self._expiry: asyncio.TimerHandle | None = None
        # Frames not yet added to the metrics (FRAMES_BATCH).
        self._frames_in = 0
        self._frames_out = 0
        # The server's direct text-frame write (vernis.ws.transport), when it offers one.
        extension = websocket.scope.get("extensions", {}).get(SEND_TEXT)
        self._send_text: SendText | None = extension["send"] if extension else None
        self.session = Session(services, identity, self)

    @property
    def identity(self) -> Identity:
        return self.session.identity

    # --- lifecycle ----------------------------------------------------------------------------

    async def serve(self, conversation_id: str | None, after_seq: str | None = None) -> None:
        """Run the socket until it closes. The caller has accepted the handshake."""
        self._arm_expiry()
        metrics = self.services.metrics
        metrics.sockets_open.inc()
        try:
            await conversations.open_session(self.session, conversation_id, after_seq)
            await self._read_loop()
        finally:
            closing = self.state is ConnectionState.CLOSING
            self.state = ConnectionState.CLOSED
            self.session.close()
            self.services.identity.closed(self.identity)
            if self._expiry is not None:
                self._expiry.cancel()
            writer = self._writer
            if writer is not None:
                if closing and not writer.done():
                    # A close is queued (a flood, say): let the writer send it, not just drop the socket.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(writer), CLOSE_FLUSH_SECONDS)
                if not writer.done():
                    writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
            metrics.sockets_open.dec()
            metrics.frames_in.inc(self._frames_in)
            metrics.frames_out.inc(self._frames_out)
            self._frames_in = self._frames_out = 0

    def close(self, code: CloseCode) -> None:
        """Send what is queued, then close with `code`."""
        if self.state is not ConnectionState.OPEN:
            return
        self.state = ConnectionState.CLOSING
        if not self._push(code):
            asyncio.get_running_loop().create_task(self._close_now(code))

    async def _close_now(self, code: CloseCode) -> None:
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
            await self.websocket.close(code)

    def _push(self, item: str | CloseCode) -> bool:
        """Send a frame now if the socket takes it at once, else queue it (or the close) for the
        writer; False when the queue is full."""
        self._frames_out += 1
        if self._frames_out >= FRAMES_BATCH:
            self.services.metrics.frames_out.inc(self._frames_out)
            self._frames_out = 0
        frames = self._frames
        if not frames and self._writer is None and type(item) is str and self._send_now(item):
            return True
        if frames is None:
            frames = self._frames = deque()
        elif len(frames) >= SEND_QUEUE_FRAMES:
            return False
        frames.append(item)
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        return True

    def _send_now(self, frame: str) -> bool:
        """Send `frame` without a task switch, when nothing is queued and the socket is writable:
        one wake-up per streamed delta instead of two (the writer's), in the publisher's task.

        Under Vernis's own protocol the frame is taken by the transport directly, to be written with
        the others of this step of the loop (`vernis.ws.transport`). Under another server, the ASGI
        send of uvicorn's sans-I/O WebSocket waits for one thing only, first of all: the socket
        being writable again after the peer fell behind. When it is writable the coroutine runs to
        its end in one step, here. When it would wait, it is closed at that first wait, before it
        wrote anything, and the frame goes to the writer, which waits as it should.
        (uvicorn is pinned by the lockfile; tests/e2e/test_transport.py covers a slow reader.)
        """
        send_text = self._send_text
        if send_text is not None:
            return send_text(frame)
        step = self.websocket.send({"type": "websocket.send", "text": frame})
        try:
            step.send(None)
        except StopIteration:
            return True
        except (RuntimeError, OSError, WebSocketDisconnect):
            return True  # the peer is gone; the reader sees the disconnect
        step.close()
        return False

    async def _write_loop(self) -> None:
        """Send what is queued, in order, waiting for the socket when it cannot take more; ends when
        the queue is empty (the next frame that cannot go at once starts a writer again)."""
        send = self.websocket.send
        send_text = self._send_text
        frames = self._frames
        assert frames is not None
        try:
            while frames:
                item = frames.popleft()
                if isinstance(item, CloseCode):
                    await self.websocket.close(item)
                    return
                if send_text is None or not send_text(item):
                    await send({"type": "websocket.send", "text": item})
        except (RuntimeError, OSError, WebSocketDisconnect):
            # The peer is gone; the reader sees the disconnect and ends the connection.
            return
        finally:
            self._writer = None

    def _arm_expiry(self) -> None:
        """Close with 4401 when the token expires (again after each refresh)."""
        if self._expiry is not None:
            self._expiry.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, self.identity.expires_at - time.time())
        self._expiry = loop.call_at(loop.time() + delay, self._expired)

    def _expired(self) -> None:
        logger.info("token expired, closing")
        self.close(CloseCode.AUTH_EXPIRED)

    def revoked(self) -> None:
        """The member was removed or lost access (the registry's watch found it): close with 4401."""
        logger.info("member removed or revoked, closing")
        self.close(CloseCode.AUTH_EXPIRED)

    async def _read_loop(self) -> None:
        receive = self.websocket.receive
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            self._frames_in += 1
            if self._frames_in >= FRAMES_BATCH:
                self.services.metrics.frames_in.inc(self._frames_in)
                self._frames_in = 0
            if self._flood.hit() is not None:
                logger.warning("command flood, closing")
                self.close(CloseCode.POLICY_VIOLATION)
                return
            if self.state is not ConnectionState.OPEN:
                continue
            frame = message.get("text")
            if frame is None:
                self.send_error("invalid_message", "Frames must be JSON text, not binary.")
                continue
            try:
                command = protocol.parse_command(frame)
                await self._dispatch(command)
            except QuotaExceeded as exc:
                quota = events.QuotaDetail(exc.scope, exc.limit, exc.used, exc.reset_at)
                self.send(events.ErrorOccurred(exc.code, exc.public_message, exc.retry_after_ms, quota))
            except ClientError as exc:
                self.send(
                    events.ErrorOccurred(
                        exc.code,
                        exc.public_message,
                        getattr(exc, "retry_after_ms", None),
                        # An answer that does not fit its question names it (SPEC §17).
                        question_id=getattr(exc, "question_id", None),
                    )
                )
            except AuthError as exc:
                logger.info("token refresh refused: %s", exc.public_message)
                self.close(CloseCode.AUTH_EXPIRED)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if out_of_reach(exc):
                    # The database is out of reach (restarting, network): say so; the socket stays.
                    logger.warning("command failed, a dependency is unavailable: %r", exc)
                    self.send_error("unavailable", Unavailable.default_message)
                else:
                    logger.exception("command failed")
                    self.send_error("internal", "Something went wrong on the server; nothing was changed.")

    # --- sending (the session's Outbox) ------------------------------------------------------------

    def put(self, frame: str) -> None:
        """Queue a frame for this socket alone."""
        if self.state is not ConnectionState.OPEN:
            return
        if not self._push(frame):
            # The client reads slower than the answer streams: drop it rather than grow without
            # bound; it reconnects and resumes.
            logger.warning("socket too slow, closing")
            self.state = ConnectionState.CLOSING
            asyncio.get_running_loop().create_task(self._close_now(CloseCode.TRY_AGAIN_LATER))

    def send(self, event: events.Event, seq: int | None = None) -> None:
        self.put(encode(event, seq))

    def send_error(self, code: str, message: str, retry_after_ms: int | None = None) -> None:
        self.send(events.ErrorOccurred(code=code, message=message, retry_after_ms=retry_after_ms))

    # --- commands -----------------------------------------------------------------------------

    async def _dispatch(self, command: protocol.Command) -> None:
        session = self.session
        match command:
            case protocol.UserMessage():
                page = command.page_context
                await send_user_message(
                    session,
                    command.content,
                    PageRequest(page.route, page.entity_type, page.entity_id) if page is not None else None,
                    command.client_message_id,
                    command.attachments or (),
                )
            case protocol.NewConversation():
                session.show_pending()
            case protocol.ListConversations():
                await conversations.list_conversations(session, command.before)
            case protocol.LoadConversation():
                await conversations.load(session, command.conversation_id, command.after_seq)
            case protocol.Stop():
                await conversations.stop_answer(session)
            case protocol.ConfirmTool():
                await confirm_tool(session, command.confirmation_id, command.approved)
            case protocol.RenameConversation():
                await conversations.rename_conversation(session, command.conversation_id, command.title)
            case protocol.DeleteConversation():
                await conversations.delete_conversation(session, command.conversation_id)
            case protocol.CompactConversation():
                await conversations.compact_conversation(session, command.conversation_id)
            case protocol.Feedback():
                await conversations.give_feedback(
                    session, command.message_id, command.rating, command.comment
                )
            case protocol.Regenerate():
                await regenerate(session, command.client_message_id)
            case protocol.EditMessage():
                await edit_message(session, command.message_id, command.content, command.client_message_id)
            case protocol.Authenticate():
                await session.reauthenticate(command.token)
                self._arm_expiry()
            case protocol.ListReviews():
                await reviews.list_reviews(session)
            case protocol.ReviewTool():
                await reviews.review_tool(session, command.review_id, command.approved, command.note)
            case protocol.AnswerQuestion():
                await answer_question(session, command.question_id, command.answers, command.cancelled)
            case protocol.ClientTools():
                declare_client_tools(
                    session,
                    [
                        ClientToolSpec(tool.name, tool.description, tool.parameters, tool.write)
                        for tool in command.tools
                    ],
                )
            case protocol.ClientToolResult():
                client_tool_result(session, command.call_id, command.ok, command.data, command.error)
            case protocol.Ping():
                self.send(events.Pong())
            case _:
                assert_never(command)
