"""Where a conversation's events are published, replayed, and who may answer in it.

Every socket that shows a conversation subscribes to it; the answer running in that conversation
publishes its events once, and the hub delivers each frame to every subscriber. The hub also:

- numbers the events (`seq`, growing within the conversation, also across restarts);
- keeps the recent events of each conversation (the replay window, at least `REPLAY_SECONDS`) so a
  client that lost its socket can ask for exactly what it missed (`events_since`);
- knows which answer is in flight in a conversation (`in_flight`), so a socket that loads the
  conversation mid-answer can join it;
- holds the one-answer-per-conversation lease.

`EventHub` is the interface; `MemoryHub` keeps everything in this process. `RedisHub`
(`vernis.services.redis_hub`) implements the same interface for several server instances (SPEC §10):
a Redis stream per conversation is its replay window, pub/sub carries the live events, its lease is a
key with an expiry. For that reason what reads shared state is a coroutine, `publish` returns nothing
(a Redis hub numbers the event when it reaches Redis), and a subscriber must expect a frame to be
delivered while it is still reading the replay (it holds such frames and drops those it already
sent, by `seq`).

Events are the services' typed events (`vernis.services.events`); the hub encodes each once, with
the encoder the socket layer gives it, and keeps the frame beside the event. Delivery never blocks
the publisher: a subscriber is a `Sink` whose `deliver()` queues the frame and returns at once (a
subscriber too slow to keep up is disconnected by its own connection).

The replay windows of conversations nobody shows or answers in any more are swept once a minute by
`run()`, which the app runs for as long as it serves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol
from uuid import UUID

from vernis.services.events import AnswerEnded, AnswerStarted, Event, TextDelta

__all__ = [
    "REPLAY_SECONDS",
    "Encoder",
    "EventHub",
    "HubEvent",
    "InFlight",
    "MemoryHub",
    "Sink",
    "StopHandler",
]

logger = logging.getLogger("vernis.hub")

# How long published events stay replayable. The spec asks for at least two minutes.
REPLAY_SECONDS = 300.0
# Per conversation, so one runaway answer cannot hold unbounded memory.
REPLAY_MAX_EVENTS = 50_000
# How often replay windows nobody needs any more are forgotten.
SWEEP_SECONDS = 60.0

# The socket layer's encoder, injected: an event and its seq -> the frame every subscriber gets.
Encoder = Callable[[Event, int], str]


class HubEvent(NamedTuple):
    """One kept event. A tuple, not a frozen dataclass: one is made per streamed delta, and a tuple
    is built in a third of the time.

    `event` is None for an event that reached this process through Redis and that nobody here needs
    to inspect (only its frame is sent on): a delta delivered live, or any event but a delta, an
    answer's start or its end. Answer starts and ends always have it, and so do the deltas of a
    replay (`events_since`), which a resume merges.
    """

    seq: int
    frame: str
    event: Event | None
    at: float


# How the memory hub keeps an event in its replay window: a plain tuple of its seq, frame, content and
# time, or for any event but a text delta (None, the event itself kept aside in `_Window.others`). A
# tuple of strings and numbers only is untracked by the garbage collector at its first collection.
Kept = tuple[int, str, str | None, float]

# Kept events are grouped in tuples of this many, themselves untracked then, so that a full
# collection, which walks every container the collector tracks, does not visit each kept event:
# minutes of deltas (up to three million in the 5-minute window at 10,000 deltas/s) made pauses
# of 50-130 ms every few seconds.
BLOCK = 64


def _older(at: float | None, horizon: float) -> bool:
    return at is None or at < horizon


class _Window:
    """One conversation's replay window: its kept events, oldest first, with consecutive seqs."""

    __slots__ = ("blocks", "first", "others", "size", "skip", "tail")

    def __init__(self, first: int) -> None:
        self.first = first  # the seq of the oldest kept event
        self.size = 0  # how many are kept
        self.blocks: deque[tuple[Kept, ...]] = deque()  # full blocks, oldest first
        self.skip = 0  # events of blocks[0] already dropped
        self.tail: list[Kept] = []  # the newest events, fewer than BLOCK
        self.others: dict[int, Event] = {}  # the kept events that are not text deltas, by seq

    def append(self, seq: int, frame: str, event: Event, at: float) -> None:
        tail = self.tail
        if type(event) is TextDelta:
            tail.append((seq, frame, event.content, at))
        else:
            tail.append((seq, frame, None, at))
            self.others[seq] = event
        self.size += 1
        if len(tail) == BLOCK:
            self.blocks.append(tuple(tail))
            self.tail = []

    def trim(self, horizon: float, max_events: int) -> None:
        """Drop the events older than `horizon` and the oldest beyond `max_events`."""
        blocks = self.blocks
        while blocks:
            block = blocks[0]
            oldest = block[self.skip]
            if oldest[3] >= horizon and self.size <= max_events:
                return
            if oldest[2] is None:
                del self.others[oldest[0]]
            self.skip += 1
            self.first += 1
            self.size -= 1
            if self.skip == len(block):
                blocks.popleft()
                self.skip = 0
        tail = self.tail
        drop = 0
        while drop < len(tail) and (tail[drop][3] < horizon or self.size > max_events):
            if tail[drop][2] is None:
                del self.others[tail[drop][0]]
            drop += 1
            self.size -= 1
        if drop:
            del tail[:drop]
            self.first += drop

    def last_at(self) -> float | None:
        newest = self.tail[-1] if self.tail else self.blocks[-1][-1] if self.blocks else None
        return None if newest is None else newest[3]

    def since(self, after_seq: int) -> list[HubEvent] | None:
        """The kept events after `after_seq`; None when some of them are no longer kept."""
        if not self.size or self.first > after_seq + 1:
            return None
        # Seqs are consecutive, so the first wanted event sits at a known offset.
        start = max(0, after_seq + 1 - self.first) + self.skip
        out: list[HubEvent] = []
        for block in (*self.blocks, self.tail):
            if start >= len(block):
                start -= len(block)
                continue
            others = self.others
            for seq, frame, content, at in block[start:]:
                event = TextDelta(content) if content is not None else others[seq]
                out.append(HubEvent(seq, frame, event, at))
            start = 0
        return out


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


class MemoryHub:
    """The single-instance hub."""

    def __init__(
        self,
        encode: Encoder,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        replay_seconds: float = REPLAY_SECONDS,
        replay_max_events: int = REPLAY_MAX_EVENTS,
        sweep_seconds: float = SWEEP_SECONDS,
    ) -> None:
        self._encode = encode
        self._sweep_seconds = sweep_seconds
        self._subscribers: dict[UUID, list[Sink]] = {}
        self._seq: dict[UUID, int] = {}
        self._events: dict[UUID, _Window] = {}
        self._in_flight: dict[UUID, InFlight] = {}
        self._leases: dict[UUID, str] = {}
        self._clock = clock
        self._monotonic = monotonic
        self._replay_seconds = replay_seconds
        self._replay_max = replay_max_events
        self._stop_handlers: list[StopHandler] = []

    # --- subscriptions ---------------------------------------------------------------------------

    def subscribe(self, conversation_id: UUID, sink: Sink) -> None:
        sinks = self._subscribers.setdefault(conversation_id, [])
        if sink not in sinks:
            sinks.append(sink)

    def unsubscribe(self, conversation_id: UUID, sink: Sink) -> None:
        sinks = self._subscribers.get(conversation_id)
        if sinks is None:
            return
        try:
            sinks.remove(sink)
        except ValueError:
            return
        if not sinks:
            del self._subscribers[conversation_id]

    # --- events ----------------------------------------------------------------------------------

    def publish(self, conversation_id: UUID, event: Event) -> None:
        seq = self._last(conversation_id) + 1
        self._seq[conversation_id] = seq
        frame = self._encode(event, seq)
        now = self._monotonic()
        window = self._events.get(conversation_id)
        if window is None:
            window = self._events[conversation_id] = _Window(seq)
        else:
            window.trim(now - self._replay_seconds, self._replay_max - 1)
        window.append(seq, frame, event, now)
        published = HubEvent(seq, frame, event, now)
        if type(event) is not TextDelta:
            if isinstance(event, AnswerStarted):
                self._in_flight[conversation_id] = InFlight(event.message_id, seq)
            elif isinstance(event, AnswerEnded):
                self._in_flight.pop(conversation_id, None)
        sinks = self._subscribers.get(conversation_id)
        if sinks:
            for sink in tuple(sinks):
                sink.deliver(published)

    async def last_seq(self, conversation_id: UUID) -> int:
        return self._last(conversation_id)

    def _last(self, conversation_id: UUID) -> int:
        seq = self._seq.get(conversation_id)
        if seq is None:
            # The counter starts from the clock (microseconds), so that it keeps growing across
            # restarts of the process without storing it: a client holding an older `seq` never
            # mistakes a new event for one it has already seen.
            seq = self._seq[conversation_id] = int(self._clock() * 1_000_000)
        return seq

    async def in_flight(self, conversation_id: UUID) -> InFlight | None:
        return self._in_flight.get(conversation_id)

    def on_stop(self, handler: StopHandler) -> None:
        self._stop_handlers.append(handler)

    async def request_stop(self, conversation_id: UUID) -> None:
        for handler in self._stop_handlers:
            handler(conversation_id)

    async def aclose(self) -> None:
        return None

    async def events_since(self, conversation_id: UUID, after_seq: int) -> list[HubEvent] | None:
        last = self._seq.get(conversation_id)
        if last is None or after_seq > last:
            return None
        if after_seq == last:
            return []
        window = self._events.get(conversation_id)
        if window is None:
            return None
        window.trim(self._monotonic() - self._replay_seconds, self._replay_max)
        return window.since(after_seq)

    def sweep(self) -> None:
        """Forget conversations whose last event left the replay window and that nobody shows."""
        horizon = self._monotonic() - self._replay_seconds
        for conversation_id in [c for c, window in self._events.items() if _older(window.last_at(), horizon)]:
            if conversation_id in self._subscribers or conversation_id in self._leases:
                continue
            del self._events[conversation_id]
            self._seq.pop(conversation_id, None)
            self._in_flight.pop(conversation_id, None)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_seconds)
            try:
                self.sweep()
            except Exception:  # pragma: no cover - a bug here must not stop the upkeep
                logger.exception("sweeping replay windows failed")

    # --- the answer lease ------------------------------------------------------------------------

    async def try_acquire(self, conversation_id: UUID, owner: str) -> bool:
        if self._leases.get(conversation_id, owner) != owner:
            return False
        self._leases[conversation_id] = owner
        return True

    async def release(self, conversation_id: UUID, owner: str) -> None:
        if self._leases.get(conversation_id) == owner:
            del self._leases[conversation_id]

    async def holder(self, conversation_id: UUID) -> str | None:
        return self._leases.get(conversation_id)

    def lease_mark(self, conversation_id: UUID) -> str | None:
        return None

    def unchanged(self, conversation_id: UUID, mark: str | None) -> bool:
        # One instance: every write is this process's own, and whoever makes one updates or
        # discards the conversation's window.
        return True

    async def touch(self, conversation_id: UUID) -> None:
        pass
