"""One accepted socket: its member, the conversation it shows, and the commands it sends.

A `Connection` reads frames, turns each into a command (`protocol.parse_command`), and answers
with events. Every outgoing frame, whether a direct reply or an event the hub delivers from an
answer, goes through one bounded queue drained by one writer task, so frames leave in order and a
publisher never waits on a slow socket.

Three tasks per socket: the reader (the endpoint's own task), the writer, and a watchdog that
closes the socket when the token expires or the member is removed (4401).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from typing import assert_never
from uuid import UUID, uuid4

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from vernis.auth import Claims
from vernis.exceptions import ClientError, NotFound
from vernis.logs import set_conversation
from vernis.runtime import Services
from vernis.services.hub import publish_event
from vernis.services.permissions import ASSISTANT_USE
from vernis.services.persistence import ConversationInfo, MemberInfo
from vernis.ws import protocol
from vernis.ws.approvals import confirm_tool
from vernis.ws.chat import send_user_message
from vernis.ws.closecodes import CloseCode
from vernis.ws.limits import SlidingWindow
from vernis.ws.loading import load_conversation

__all__ = ["Connection", "ConnectionState"]

logger = logging.getLogger("vernis.ws")

SEND_QUEUE_FRAMES = 4096
# How long a socket that is closing may take to send its queued frames and the close frame.
CLOSE_FLUSH_SECONDS = 2.0


class ConnectionState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class Connection:
    def __init__(
        self,
        websocket: WebSocket,
        services: Services,
        member: MemberInfo,
        claims: Claims,
        permissions: frozenset[str],
    ) -> None:
        self.websocket = websocket
        self.services = services
        self.settings = services.settings
        self.member = member
        self.claims = claims
        self.permissions = permissions
        self.toolset = services.registry.for_member(permissions)
        self.state = ConnectionState.OPEN
        self.conversation: ConversationInfo | None = None
        self.id = uuid4().hex
        self._queue: asyncio.Queue[str | CloseCode] = asyncio.Queue(SEND_QUEUE_FRAMES)
        self.rate = SlidingWindow(self.settings.rate_limit)
        self._flood = SlidingWindow(self.settings.flood_limit)
        self._held: list[tuple[int, str]] | None = None

    # --- the hub's side -----------------------------------------------------------------------

    def deliver(self, frame: str, seq: int) -> None:
        if self._held is not None:
            self._held.append((seq, frame))
        else:
            self.put(frame)

    # --- lifecycle ----------------------------------------------------------------------------

    async def serve(self, conversation_id: str | None, after_seq: str | None = None) -> None:
        """Run the socket until it closes. The caller has accepted the handshake."""
        writer = asyncio.create_task(self._write_loop())
        watchdog = asyncio.create_task(self._watch())
        try:
            await self._open_initial(conversation_id, after_seq)
            await self._read_loop()
        finally:
            closing = self.state is ConnectionState.CLOSING
            self.state = ConnectionState.CLOSED
            if self.conversation is not None:
                self.services.hub.unsubscribe(self.conversation.id, self)
            watchdog.cancel()
            if closing and not writer.done():
                # A close is queued (a flood, say): let the writer send it, not just drop the socket.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(writer), CLOSE_FLUSH_SECONDS)
            if not writer.done():
                writer.cancel()
            await asyncio.gather(writer, watchdog, return_exceptions=True)

    def close(self, code: CloseCode) -> None:
        """Send what is queued, then close with `code`."""
        if self.state is not ConnectionState.OPEN:
            return
        self.state = ConnectionState.CLOSING
        try:
            self._queue.put_nowait(code)
        except asyncio.QueueFull:
            asyncio.get_running_loop().create_task(self._close_now(code))

    async def _close_now(self, code: CloseCode) -> None:
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
            await self.websocket.close(code)

    async def _write_loop(self) -> None:
        send = self.websocket.send_text
        queue = self._queue
        try:
            while True:
                item = await queue.get()
                if isinstance(item, CloseCode):
                    await self.websocket.close(item)
                    return
                await send(item)
        except (RuntimeError, OSError, WebSocketDisconnect):
            # The peer is gone; the reader sees the disconnect and ends the connection.
            return

    async def _watch(self) -> None:
        """Close with 4401 when the token expires or the member loses access."""
        interval = self.settings.auth_check_interval
        while True:
            remaining = self.claims.expires_at - time.time()
            if remaining <= 0:
                logger.info("token expired, closing")
                self.close(CloseCode.AUTH_EXPIRED)
                return
            await asyncio.sleep(min(remaining, interval))
            if self.claims.expires_at - time.time() <= 0:
                continue
            member = await self.services.store.get_member(self.member.id)
            if member is None or member.removed or member.organization_id != self.member.organization_id:
                logger.info("member removed, closing")
                self.close(CloseCode.AUTH_EXPIRED)
                return
            revoked = getattr(member, "revoked_permissions", ())
            if ASSISTANT_USE in revoked or member.role != self.member.role:
                self.close(CloseCode.AUTH_EXPIRED)
                return

    async def _read_loop(self) -> None:
        receive = self.websocket.receive
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
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
            except ClientError as exc:
                self.send_error(exc.code, exc.public_message, getattr(exc, "retry_after_ms", None))
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("command failed")
                self.send_error("internal", "Something went wrong on the server; nothing was changed.")

    # --- sending ------------------------------------------------------------------------------

    def put(self, frame: str) -> None:
        """Queue a frame for this socket alone (direct replies, replays)."""
        if self.state is not ConnectionState.OPEN:
            return
        try:
            self._queue.put_nowait(frame)
        except asyncio.QueueFull:
            # The client reads slower than the answer streams: drop it rather than grow without
            # bound; it reconnects and resumes.
            logger.warning("socket too slow, closing")
            self.state = ConnectionState.CLOSING
            asyncio.get_running_loop().create_task(self._close_now(CloseCode.TRY_AGAIN_LATER))

    def send(self, event: protocol.Event) -> None:
        self.put(protocol.encode(event))

    def publish(self, conversation_id: UUID, event: protocol.Event) -> None:
        """Publish an event of a conversation to every socket showing it, this one included even when
        it shows another (it acted on the conversation from the picker)."""
        _, frame = publish_event(self.services.hub, conversation_id, event)
        if self.conversation is None or self.conversation.id != conversation_id:
            self.put(frame)

    def send_error(self, code: str, message: str, retry_after_ms: int | None = None) -> None:
        self.send(protocol.ErrorEvent(code=code, message=message, retry_after_ms=retry_after_ms))

    # --- which conversation this socket shows ----------------------------------------------------

    def show(self, conversation: ConversationInfo | None, *, hold: bool = False) -> None:
        """Switch the socket to `conversation` (None: pending). With `hold`, live frames are held
        until `release_held()`, while the caller replays what came before."""
        hub = self.services.hub
        if self.conversation is not None:
            hub.unsubscribe(self.conversation.id, self)
        self._held = [] if hold else None
        self.conversation = conversation
        set_conversation(conversation.id if conversation is not None else None)
        if conversation is not None:
            hub.subscribe(conversation.id, self)

    def held_answer_ids(self) -> set[UUID]:
        """Message ids of answers that started while frames were held (they arrive live)."""
        ids: set[UUID] = set()
        for _, frame in self._held or ():
            if '"assistant_start"' in frame:
                ids.add(UUID(orjson.loads(frame)["message_id"]))
        return ids

    def release_held(self, upto: int) -> None:
        """Stop holding; send the held frames newer than `upto` (older ones were replayed)."""
        held, self._held = self._held, None
        for seq, frame in held or ():
            if seq > upto:
                self.put(frame)

    def show_pending(self) -> None:
        self.show(None)
        self.send(protocol.ConversationLoaded(conversation_id=None, title=None))
        self.send(protocol.HistoryEnd(conversation_id=None))

    # --- commands -----------------------------------------------------------------------------

    async def _dispatch(self, command: protocol.Command) -> None:
        match command:
            case protocol.UserMessage():
                await send_user_message(self, command)
            case protocol.NewConversation():
                self.show_pending()
            case protocol.ListConversations():
                await self._list(command.before)
            case protocol.LoadConversation():
                conversation = await self._find(command.conversation_id)
                await load_conversation(self, conversation, after_seq=command.after_seq)
            case protocol.Stop():
                if self.conversation is not None:
                    self.services.answers.stop(self.conversation.id)
            case protocol.ConfirmTool():
                await confirm_tool(self, command)
            case protocol.RenameConversation():
                await self._rename(command)
            case protocol.DeleteConversation():
                await self._delete(command.conversation_id)
            case protocol.Feedback():
                stored = await self.services.store.set_feedback(
                    command.message_id,
                    self.member.id,
                    self.member.organization_id,
                    command.rating,
                    command.comment,
                )
                if not stored:
                    raise NotFound("No such answer.")
            case protocol.Ping():
                self.send(protocol.Pong())
            case _:
                assert_never(command)

    async def _find(self, conversation_id: UUID) -> ConversationInfo:
        conversation = await self.services.store.get_conversation(
            conversation_id, self.member.id, self.member.organization_id
        )
        if conversation is None:
            raise NotFound()
        return conversation

    async def _open_initial(self, requested: str | None, after_seq: str | None) -> None:
        conversation = None
        if requested:
            try:
                conversation = await self._find(UUID(requested))
            except (ValueError, NotFound):
                self.send_error("not_found", "No such conversation; opening your latest one.")
        if conversation is None:
            conversation = await self.services.store.latest_conversation(
                self.member.id, self.member.organization_id
            )
            after_seq = None
        if conversation is None:
            self.show_pending()
            return
        resume_from = int(after_seq) if after_seq is not None and after_seq.isdigit() else None
        await load_conversation(self, conversation, after_seq=resume_from)

    async def _list(self, before: str | None) -> None:
        conversations, next_before = await self.services.store.list_conversations(
            self.member.id, self.member.organization_id, before=before, limit=20
        )
        self.send(
            protocol.ConversationList(
                conversations=[
                    protocol.ConversationListItem(
                        conversation_id=c.id,
                        title=c.title,
                        updated_at=c.updated_at,
                        message_count=c.message_count,
                    )
                    for c in conversations
                ],
                next_before=next_before,
            )
        )

    async def _rename(self, command: protocol.RenameConversation) -> None:
        renamed = await self.services.store.rename_conversation(
            command.conversation_id, self.member.id, self.member.organization_id, command.title
        )
        if renamed is None or renamed.title is None:
            raise NotFound()
        self.publish(renamed.id, protocol.TitleUpdated(conversation_id=renamed.id, title=renamed.title))

    async def _delete(self, conversation_id: UUID) -> None:
        services = self.services
        await self._find(conversation_id)
        running = services.answers.running(conversation_id)
        if running is not None and services.answers.stop(conversation_id) and running.task is not None:
            await asyncio.gather(running.task, return_exceptions=True)
        if not await services.store.delete_conversation(
            conversation_id, self.member.id, self.member.organization_id
        ):
            raise NotFound()
        services.windows.discard(conversation_id)
        if self.conversation is not None and self.conversation.id == conversation_id:
            self.show_pending()
        await self._list(None)
