"""One socket's conversation session: who is on it and which conversation it shows (SPEC §4).

State only: the use-cases beside it (`send`, `versions`, `confirm`, `loading`, `conversations`) take
a session and act on it; the socket's dispatch calls them directly. No I/O of its own: a session
answers through an `Outbox` (the socket layer encodes and sends) and receives a conversation's
published events as the hub's `Sink`.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol
from uuid import UUID

from vernis.conversation import events
from vernis.conversation.store import ConversationInfo
from vernis.hub.base import HubEvent
from vernis.identity.members import Identity, MemberInfo
from vernis.limits.rate import SlidingWindow
from vernis.logs import set_conversation
from vernis.runtime import Services
from vernis.tools.base import Tool
from vernis.tools.client import with_client_tools
from vernis.tools.reviews import review_channel
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
    __slots__ = (
        "_feeds",
        "_held",
        "client_tools",
        "conversation",
        "identity",
        "outbox",
        "rate",
        "services",
        "settings",
        "toolset",
    )

    def __init__(self, services: Services, identity: Identity, outbox: Outbox) -> None:
        self.services = services
        self.settings = services.settings
        self.outbox = outbox
        self.conversation: ConversationInfo | None = None
        self.rate = SlidingWindow(self.settings.rate_limit)
        self._held: list[HubEvent] | None = None
        # The review channels this socket hears (SPEC §23), with the sink that forwards them.
        self._feeds: dict[UUID, _ReviewFeed] = {}
        # The host page's own tools (SPEC §18), declared with `client_tools`, by name.
        self.client_tools: dict[str, Tool] = {}
        self._apply(identity)

    def _apply(self, identity: Identity) -> None:
        self.identity = identity
        self.toolset: Toolset = with_client_tools(
            self.services.catalog.registry.for_member(identity.permissions), self.client_tools
        )
        self._watch_reviews()

    def _watch_reviews(self) -> None:
        """Hear the review requests this member may answer (their organization's, for each reviewer
        permission they hold), besides the conversation shown; on every instance, through the hub."""
        hub, member = self.services.hub, self.identity.member
        wanted = {
            review_channel(member.organization_id, permission)
            for permission in self.services.catalog.reviewer_permissions(self.identity.permissions)
        }
        for channel in set(self._feeds) - wanted:
            hub.unsubscribe(channel, self._feeds.pop(channel))
        for channel in wanted - set(self._feeds):
            feed = self._feeds[channel] = _ReviewFeed(self.outbox)
            hub.subscribe(channel, feed)

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
        """The socket is gone: stop receiving the conversation's events and the reviews'."""
        if self.conversation is not None:
            self.services.hub.unsubscribe(self.conversation.id, self)
        for channel, feed in self._feeds.items():
            self.services.hub.unsubscribe(channel, feed)
        self._feeds = {}
        self.services.client_tools.detach(self)

    def ask(self, call_id: str, tool_name: str, arguments: Any) -> None:
        """Ask this socket's page to run one of its tools (`ClientToolBroker.call`)."""
        self.outbox.send(events.ClientToolCall(call_id=call_id, tool_name=tool_name, arguments=arguments))

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

    async def reauthenticate(self, token: str) -> None:
        """A new token for this socket (SPEC §2): same member, new expiry, role and permissions from
        the next message on. Raises `AuthError` for anything else (the socket closes with 4401)."""
        refreshed = await self.services.identity.refresh(self.identity, token)
        self._apply(refreshed)
        logger.info("token refreshed", extra={"expires_at": refreshed.expires_at})


class _ReviewFeed:
    """A review channel's events, sent on to the socket as they come (never held: they belong to
    no conversation and carry no `seq`)."""

    __slots__ = ("outbox",)

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def deliver(self, event: HubEvent) -> None:
        self.outbox.put(event.frame)
