"""The event hub's interface: where a conversation's events are published, replayed, and who may
answer in it.

Every socket that shows a conversation subscribes to it; the answer running in that conversation
publishes its events once, and the hub delivers each frame to every subscriber. The hub also:

- numbers the events (`seq`, growing within the conversation, also across restarts);
- keeps the recent events of each conversation (the replay window, at least `REPLAY_SECONDS`) so a
  client that lost its socket can ask for exactly what it missed (`events_since`);
- knows which answer is in flight in a conversation (`in_flight`), so a socket that loads the
  conversation mid-answer can join it;
- holds the one-answer-per-conversation lease.

`EventHub` is the interface, with two implementations beside it: `vernis.hub.memory.MemoryHub`
keeps everything in this process; `vernis.hub.redis.RedisHub` shares it between several server
instances (SPEC §10): a Redis stream per conversation is its replay window, pub/sub carries the live
events, its lease is a key with an expiry. For that reason what reads shared state is a coroutine,
`publish` returns nothing (a Redis hub numbers the event when it reaches Redis), and a subscriber
must expect a frame to be delivered while it is still reading the replay (it holds such frames and
drops those it already sent, by `seq`).

Events are the services' typed events (`vernis.conversation.events`); the hub encodes each once, with
the encoder the socket layer gives it, and keeps the frame beside the event. Delivery never blocks
the publisher: a subscriber is a `Sink` whose `deliver()` queues the frame and returns at once (a
subscriber too slow to keep up is disconnected by its own connection).

A hub's `run()` does its background upkeep (sweeping replay windows nobody needs any more, renewing
what it holds in Redis); the app runs it for as long as it serves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol
from uuid import UUID

from vernis.conversation.events import Event

__all__ = [
    "REPLAY_MAX_EVENTS",
    "REPLAY_SECONDS",
    "Encoder",
    "EventHub",
    "HubEvent",
    "InFlight",
    "Sink",
    "StopHandler",
]

# How long published events stay replayable. The spec asks for at least two minutes.
REPLAY_SECONDS = 300.0
# Per conversation, so one runaway answer cannot hold unbounded memory.
REPLAY_MAX_EVENTS = 50_000

# The socket layer's encoder, injected: an event and its seq -> the frame every subscriber gets.
Encoder = Callable[[Event, int], str]


class HubEvent(NamedTuple):
    """One kept event. A tuple, not a frozen dataclass: one is made per streamed delta, and a tuple
    is cheaper to build.

    `event` is None for an event that reached this process through Redis and that nobody here needs
    to inspect (only its frame is sent on): a delta delivered live, or any event but a delta, an
    answer's start or its end. Answer starts and ends always have it, and so do the deltas of a
    replay (`events_since`), which a resume merges.
    """

    seq: int
    frame: str
    event: Event | None
    at: float


class Sink(Protocol):
    def deliver(self, event: HubEvent) -> None:
        """Queue one published event for the socket; must not block or raise."""
        ...


class InFlight(NamedTuple):
    message_id: UUID
    # The seq of the answer's `assistant_start`.
    start_seq: int


# Called with a conversation whose answer must stop (`request_stop`, from any instance).
StopHandler = Callable[[UUID], object]


class EventHub(Protocol):
    def subscribe(self, conversation_id: UUID, sink: Sink) -> None: ...

    def unsubscribe(self, conversation_id: UUID, sink: Sink) -> None: ...

    def publish(self, conversation_id: UUID, event: Event) -> None:
        """Number the event, encode it once, keep it for replay, deliver it to every subscriber
        (on every instance). Never blocks.

        An `AnswerStarted` puts its answer in flight until the matching `AnswerEnded`.
        """
        ...

    async def last_seq(self, conversation_id: UUID) -> int:
        """The `seq` of the newest event published in the conversation (a floor if none yet).

        Called by a subscriber before it reads the replay: once it returns, every event with a
        higher seq reaches the subscriber live."""
        ...

    async def in_flight(self, conversation_id: UUID) -> InFlight | None: ...

    def on_stop(self, handler: StopHandler) -> None:
        """`handler(conversation_id)` is called when any instance asks to stop that answer."""
        ...

    async def request_stop(self, conversation_id: UUID) -> None:
        """Ask whichever instance runs the conversation's answer to stop it."""
        ...

    async def events_since(self, conversation_id: UUID, after_seq: int) -> list[HubEvent] | None:
        """Every kept event with a seq above `after_seq`, in order; None when some of them are no
        longer kept (or `after_seq` was never handed out here), so the caller must reload instead."""
        ...

    async def try_acquire(self, conversation_id: UUID, owner: str) -> bool:
        """Take the conversation's answer lease; False when another answer holds it."""
        ...

    async def release(self, conversation_id: UUID, owner: str) -> None: ...

    async def holder(self, conversation_id: UUID) -> str | None: ...

    def lease_mark(self, conversation_id: UUID) -> str | None:
        """What names the lease this instance holds on the conversation now, for `unchanged` to
        recognise later (None with a single instance: nobody else writes)."""
        ...

    def unchanged(self, conversation_id: UUID, mark: str | None) -> bool:
        """Called holding the lease: whether nobody wrote to the conversation's messages since this
        instance held the lease named `mark`. Every write to a conversation's messages is made
        holding its lease, or followed by `touch`; so a conversation window kept up to date under
        `mark` is still the stored one when this is true."""
        ...

    async def touch(self, conversation_id: UUID) -> None:
        """Tell every instance that the conversation's messages changed outside its lease (an
        approval's outcome written into a stored tool call)."""
        ...

    async def aclose(self) -> None:
        """Deliver what is still queued and let go of connections (at shutdown)."""
        ...

    async def run(self) -> None:
        """Background upkeep for as long as the app runs (cancelled at shutdown)."""
        ...
