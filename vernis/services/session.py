"""One socket's conversation session: who is on it, which conversation it shows, and the use-cases
its commands run (SPEC §4). No I/O of its own: it answers through an `Outbox` (the socket layer
encodes and sends) and receives a conversation's published events as the hub's `Sink`.

The use-cases that take more than a few lines live beside it: sending a message (`chat`), loading a
conversation (`loading`), confirming a previewed write (`confirm`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol
from uuid import UUID

from vernis.context.page import PageRequest
from vernis.exceptions import NotFound
from vernis.identity.members import Identity, MemberInfo
from vernis.logs import set_conversation
from vernis.services import events
from vernis.services.chat import send_user_message
from vernis.services.confirm import confirm_tool
from vernis.services.hub import HubEvent
from vernis.services.limits import SlidingWindow
from vernis.services.loading import load_conversation
from vernis.services.persistence import ConversationInfo
from vernis.services.runtime import Services
from vernis.tools.runner import Toolset

__all__ = ["Outbox", "Session"]

logger = logging.getLogger("vernis.session")


class Outbox(Protocol):
    """Where a session's events go: the one socket it belongs to."""

    def send(self, event: events.Event, seq: int | None = None) -> None:
        """Encode and queue an event for this socket alone."""
        ...

    def put(self, frame: str) -> None:
        """Queue a frame already encoded (a published event) for this socket alone."""
        ...


class Session:
    # One per socket: no instance dictionary (see Connection).
    __slots__ = ("_held", "conversation", "identity", "outbox", "rate", "services", "settings", "toolset")

    def __init__(self, services: Services, identity: Identity, outbox: Outbox) -> None:
        self.services = services
        self.settings = services.settings
        self.outbox = outbox
        self.conversation: ConversationInfo | None = None
        self.rate = SlidingWindow(self.settings.rate_limit)
        self._held: list[HubEvent] | None = None
        self._apply(identity)

    def _apply(self, identity: Identity) -> None:
        self.identity = identity
        self.toolset: Toolset = self.services.catalog.registry.for_member(identity.permissions)

    @property
    def member(self) -> MemberInfo:
        return self.identity.member

    @property
    def permissions(self) -> frozenset[str]:
        return self.identity.permissions

    # --- the hub's side -----------------------------------------------------------------------

    def deliver(self, event: HubEvent) -> None:
        if self._held is not None:
            self._held.append(event)
        else:
            self.outbox.put(event.frame)

    def close(self) -> None:
        """The socket is gone: stop receiving the conversation's events."""
        if self.conversation is not None:
            self.services.hub.unsubscribe(self.conversation.id, self)

    # --- which conversation this session shows -------------------------------------------------

    def show(self, conversation: ConversationInfo | None, *, hold: bool = False) -> None:
        """Switch to `conversation` (None: pending). With `hold`, live events are held until
        `release_held()`, while the caller replays what came before."""
        hub = self.services.hub
        if self.conversation is not None:
            hub.unsubscribe(self.conversation.id, self)
        self._held = [] if hold else None
        self.conversation = conversation
        set_conversation(conversation.id if conversation is not None else None)
        if conversation is not None:
            hub.subscribe(conversation.id, self)

    def held_answer_ids(self) -> set[UUID]:
        """Message ids of answers that started while events were held (they arrive live)."""
        return {
            held.event.message_id for held in self._held or () if isinstance(held.event, events.AnswerStarted)
        }

    def release_held(self, upto: int) -> None:
        """Stop holding; send the held events newer than `upto` (older ones were replayed)."""
        held, self._held = self._held, None
        for event in held or ():
            if event.seq > upto:
                self.outbox.put(event.frame)

    def show_pending(self) -> None:
        self.show(None)
        self.outbox.send(events.ConversationLoaded(conversation_id=None, title=None))
        self.outbox.send(events.HistoryEnd(conversation_id=None))

    def publish(self, conversation_id: UUID, event: events.Event) -> None:
        """Publish an event of a conversation to every socket showing it, this one included even when
        it shows another (it acted on the conversation from the picker)."""
        self.services.hub.publish(conversation_id, event)
        if self.conversation is None or self.conversation.id != conversation_id:
            # Not subscribed to it: sent here directly (no seq: this socket does not resume it).
            self.outbox.send(event)

    # --- use-cases ----------------------------------------------------------------------------

    async def find(self, conversation_id: UUID) -> ConversationInfo:
        conversation = await self.services.store.get_conversation(
            conversation_id, self.member.id, self.member.organization_id
        )
        if conversation is None:
            raise NotFound()
        return conversation

    async def open(self, requested: str | None, after_seq: str | None) -> None:
        """What a socket shows when it opens: the conversation it asked for, else the latest one."""
        conversation = None
        if requested:
            try:
                conversation = await self.find(UUID(requested))
            except (ValueError, NotFound):
                self.outbox.send(
                    events.ErrorOccurred("not_found", "No such conversation; opening your latest one.")
                )
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

    async def load(self, conversation_id: UUID, after_seq: int | None) -> None:
        await load_conversation(self, await self.find(conversation_id), after_seq=after_seq)

    async def send_message(
        self, content: str, page: PageRequest | None = None, client_message_id: str | None = None
    ) -> None:
        await send_user_message(self, content, page, client_message_id)

    async def confirm(self, confirmation_id: UUID, approved: bool) -> None:
        await confirm_tool(self, confirmation_id, approved)

    async def stop(self) -> None:
        """Stop the shown conversation's answer, here or on whichever instance runs it."""
        if self.conversation is not None and not self.services.answers.stop(self.conversation.id):
            await self.services.hub.request_stop(self.conversation.id)

    async def list(self, before: str | None) -> None:
        conversations, next_before = await self.services.store.list_conversations(
            self.member.id, self.member.organization_id, before=before, limit=20
        )
        self.outbox.send(events.ConversationList(conversations=conversations, next_before=next_before))

    async def rename(self, conversation_id: UUID, title: str) -> None:
        renamed = await self.services.store.rename_conversation(
            conversation_id, self.member.id, self.member.organization_id, title
        )
        if renamed is None or renamed.title is None:
            raise NotFound()
        self.publish(renamed.id, events.TitleUpdated(conversation_id=renamed.id, title=renamed.title))

    async def delete(self, conversation_id: UUID) -> None:
        services = self.services
        await self.find(conversation_id)
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
        await self.list(None)

    async def feedback(self, message_id: UUID, rating: str, comment: str | None) -> None:
        stored = await self.services.store.set_feedback(
            message_id, self.member.id, self.member.organization_id, rating, comment
        )
        if not stored:
            raise NotFound("No such answer.")

    async def reauthenticate(self, token: str) -> None:
        """A new token for this socket (SPEC §2): same member, new expiry, role and permissions from
        the next message on. Raises `AuthError` for anything else (the socket closes with 4401)."""
        refreshed = await self.services.identity.refresh(self.identity, token)
        self._apply(refreshed)
        logger.info("token refreshed", extra={"expires_at": refreshed.expires_at})
