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
from datetime import UTC, datetime
from typing import assert_never
from uuid import UUID, uuid4

from starlette.websockets import WebSocket, WebSocketDisconnect

from vernis.auth import Claims
from vernis.context.window import ConversationWindow, WindowEntry
from vernis.db.models import MessageRole
from vernis.exceptions import ClientError, NotFound, RateLimited, ResponseInProgress
from vernis.logs import set_conversation
from vernis.runtime import Services
from vernis.services.answers import AnswerSpec
from vernis.services.assistant import LoopSettings
from vernis.services.permissions import ASSISTANT_USE
from vernis.services.persistence import ConversationInfo, DuplicateClientMessage, MemberInfo
from vernis.services.prompt import PromptParts, build_system_prompt
from vernis.services.registry import ToolContext, ToolRunner
from vernis.ws import protocol
from vernis.ws.closecodes import CloseCode
from vernis.ws.limits import SlidingWindow

__all__ = ["Connection", "ConnectionState"]

logger = logging.getLogger("vernis.ws")

SEND_QUEUE_FRAMES = 4096


class ConnectionState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class InvalidState(RuntimeError):
    def __init__(self, expected: ConnectionState, actual: ConnectionState) -> None:
        super().__init__(f"connection is {actual.value}, expected {expected.value}")


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
        self._rate = SlidingWindow(self.settings.rate_limit)
        self._flood = SlidingWindow(self.settings.flood_limit)

    # --- the hub's side -----------------------------------------------------------------------

    def deliver(self, frame: str) -> None:
        if self.state is not ConnectionState.OPEN:
            return
        try:
            self._queue.put_nowait(frame)
        except asyncio.QueueFull:
            # The client reads slower than the answer streams: drop it rather than grow without
            # bound; it reconnects and gets the stored history.
            logger.warning("socket too slow, closing")
            self.state = ConnectionState.CLOSING
            asyncio.get_running_loop().create_task(self._close_now(CloseCode.TRY_AGAIN_LATER))

    # --- lifecycle ----------------------------------------------------------------------------

    async def serve(self, conversation_id: str | None) -> None:
        """Run the socket until it closes. The caller has accepted the handshake."""
        writer = asyncio.create_task(self._write_loop())
        watchdog = asyncio.create_task(self._watch())
        try:
            await self._open_initial(conversation_id)
            await self._read_loop()
        finally:
            self.state = ConnectionState.CLOSED
            self._unsubscribe()
            watchdog.cancel()
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
                self._send_error("invalid_message", "Frames must be JSON text, not binary.")
                continue
            try:
                command = protocol.parse_command(frame)
                await self._dispatch(command)
            except ClientError as exc:
                self._send_error(exc.code, exc.public_message, getattr(exc, "retry_after_ms", None))
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("command failed")
                self._send_error("internal", "Something went wrong on the server; nothing was changed.")

    # --- sending ------------------------------------------------------------------------------

    def _send(self, event: protocol.Event) -> None:
        self.deliver(protocol.encode(event))

    def _send_error(self, code: str, message: str, retry_after_ms: int | None = None) -> None:
        self._send(protocol.ErrorEvent(code=code, message=message, retry_after_ms=retry_after_ms))

    # --- commands -----------------------------------------------------------------------------

    async def _dispatch(self, command: protocol.Command) -> None:
        match command:
            case protocol.UserMessage():
                await self._user_message(command)
            case protocol.NewConversation():
                self._show_pending()
            case protocol.ListConversations():
                await self._list(command.before)
            case protocol.LoadConversation():
                conversation = await self._find(command.conversation_id)
                await self._load(conversation)
            case protocol.Stop():
                if self.conversation is not None:
                    self.services.answers.stop(self.conversation.id)
            case protocol.ConfirmTool():
                raise NotFound("No such confirmation, or it has already been answered.")
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
                self._send(protocol.Pong())
            case _:
                assert_never(command)

    async def _find(self, conversation_id: UUID) -> ConversationInfo:
        conversation = await self.services.store.get_conversation(
            conversation_id, self.member.id, self.member.organization_id
        )
        if conversation is None:
            raise NotFound()
        return conversation

    async def _open_initial(self, requested: str | None) -> None:
        store = self.services.store
        conversation = None
        if requested:
            try:
                conversation = await self._find(UUID(requested))
            except (ValueError, NotFound):
                self._send_error("not_found", "No such conversation; opening your latest one.")
        if conversation is None:
            conversation = await store.latest_conversation(self.member.id, self.member.organization_id)
        if conversation is None:
            self._show_pending()
        else:
            await self._load(conversation)

    def _subscribe(self, conversation: ConversationInfo) -> None:
        self._unsubscribe()
        self.conversation = conversation
        self.services.hub.subscribe(conversation.id, self)
        set_conversation(conversation.id)

    def _unsubscribe(self) -> None:
        if self.conversation is not None:
            self.services.hub.unsubscribe(self.conversation.id, self)
            self.conversation = None
            set_conversation(None)

    def _show_pending(self) -> None:
        self._unsubscribe()
        self._send(protocol.ConversationLoaded(conversation_id=None, title=None))
        self._send(protocol.HistoryEnd(conversation_id=None))

    async def _load(self, conversation: ConversationInfo, *, rolled_over_from: UUID | None = None) -> None:
        services = self.services
        self._subscribe(conversation)
        messages = await services.store.messages(conversation.id)
        window_messages = messages[-self.settings.window_messages :]
        if services.answers.running(conversation.id) is None:
            services.windows.build(conversation.id, window_messages)
        self._send(
            protocol.ConversationLoaded(
                conversation_id=conversation.id, title=conversation.title, rolled_over_from=rolled_over_from
            )
        )
        for message in messages:
            self._send(
                protocol.HistoryMessage(
                    message_id=message.id,
                    role=message.role,
                    content=message.content,
                    tool_calls=message.tool_calls,
                    status=message.status,
                    created_at=message.created_at,
                )
            )
        self._send(
            protocol.HistoryEnd(conversation_id=conversation.id, seq=services.hub.last_seq(conversation.id))
        )

    async def _list(self, before: str | None) -> None:
        conversations, next_before = await self.services.store.list_conversations(
            self.member.id, self.member.organization_id, before=before, limit=20
        )
        self._send(
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
        event = protocol.TitleUpdated(conversation_id=renamed.id, title=renamed.title)
        build = protocol.numbered(event)
        seq = self.services.hub.publish(renamed.id, build)
        if self.conversation is None or self.conversation.id != renamed.id:
            # Not showing it (renamed from the picker): the hub did not deliver it here.
            self.deliver(build(seq))

    async def _delete(self, conversation_id: UUID) -> None:
        services = self.services
        await self._find(conversation_id)
        task = services.answers.running(conversation_id)
        if task is not None and services.answers.stop(conversation_id) and task.task is not None:
            await asyncio.gather(task.task, return_exceptions=True)
        if not await services.store.delete_conversation(
            conversation_id, self.member.id, self.member.organization_id
        ):
            raise NotFound()
        services.windows.discard(conversation_id)
        if self.conversation is not None and self.conversation.id == conversation_id:
            self._show_pending()
        await self._list(None)

    # --- a chat message -----------------------------------------------------------------------

    async def _user_message(self, command: protocol.UserMessage) -> None:
        services, member, store = self.services, self.member, self.services.store
        if command.client_message_id is not None:
            seen = await store.find_by_client_message_id(
                member.id, member.organization_id, command.client_message_id
            )
            if seen is not None:
                # Already received (the client resent after a reconnect): answered once, not twice.
                logger.info("duplicate client_message_id ignored")
                return

        # 1. Rate limits: this socket's, then the member's across all their sockets.
        retry_after = self._rate.peek()
        if retry_after is None:
            retry_after = await services.member_limiter.hit(member.id)
        if retry_after is not None:
            raise RateLimited(retry_after)
        self._rate.hit()

        # 2. One answer at a time per conversation.
        conversation = self.conversation
        if conversation is not None:
            if services.hub.holder(conversation.id) is not None:
                raise ResponseInProgress()
            conversation = await store.get_conversation(conversation.id, member.id, member.organization_id)
            if conversation is None:  # deleted from another tab
                self._unsubscribe()

        window: ConversationWindow | None = None
        first_exchange = conversation is not None and conversation.message_count == 0
        if conversation is None:
            # 3. Lazy creation: a pending conversation is stored now.
            conversation = await store.create_conversation(member.id, member.organization_id)
            self._subscribe(conversation)
            window = services.windows.build(conversation.id, ())
            first_exchange = True
            services.hub.publish(
                conversation.id,
                protocol.numbered(protocol.ConversationCreated(conversation_id=conversation.id)),
            )
        elif conversation.message_count >= self.settings.rollover_messages:
            # 4. Rollover: continue in a new conversation linked to the full one, same context.
            previous = conversation
            old_window = services.windows.get(previous.id) or services.windows.build(
                previous.id, await store.messages(previous.id, last=self.settings.window_messages)
            )
            conversation = await store.create_conversation(
                member.id, member.organization_id, previous_conversation_id=previous.id
            )
            self._subscribe(conversation)
            first_exchange = True
            window = old_window.copy()
            services.windows.put(conversation.id, window)
            loaded = protocol.ConversationLoaded(
                conversation_id=conversation.id, title=None, rolled_over_from=previous.id
            )
            services.hub.publish(conversation.id, protocol.numbered(loaded))
        if window is None:
            window = services.windows.get(conversation.id) or services.windows.build(
                conversation.id, await store.messages(conversation.id, last=self.settings.window_messages)
            )

        owner = uuid4().hex
        if not services.hub.try_acquire(conversation.id, owner):
            raise ResponseInProgress()
        try:
            # 5. Store the user message.
            try:
                await store.add_message(
                    conversation.id,
                    MessageRole.USER,
                    command.content,
                    client_message_id=command.client_message_id,
                )
            except DuplicateClientMessage:
                services.hub.release(conversation.id, owner)
                return
            window.append(WindowEntry(MessageRole.USER, command.content))
            self.conversation = conversation

            # 6. The system prompt and this member's tools.
            page = None
            if command.page_context is not None:
                page = await services.resolve_page(command.page_context, member)
            system = build_system_prompt(
                PromptParts(
                    member=member,
                    ai_rules=await store.get_ai_rules(member.organization_id),
                    toolset=self.toolset,
                    page=page,
                    now=datetime.now(UTC),
                )
            )
            runner = None
            if self.toolset:
                runner = ToolRunner(
                    self.toolset,
                    ToolContext(member=member, permissions=self.permissions, conversation_id=conversation.id),
                )
            messages = [{"role": "system", "content": system}, *window.to_messages()]
        except BaseException:
            services.hub.release(conversation.id, owner)
            raise

        # 7. Stream the answer; it belongs to the conversation from here on.
        services.answers.start(
            AnswerSpec(
                conversation_id=conversation.id,
                member_id=member.id,
                messages=messages,
                runner=runner,
                window=window,
                loop=LoopSettings(
                    model=self.settings.chat_model,
                    max_tool_rounds=self.settings.max_tool_rounds,
                    retries=self.settings.llm_max_retries,
                    max_tokens=self.settings.llm_max_tokens,
                ),
                first_user_message=command.content if first_exchange else None,
            ),
            owner,
        )
