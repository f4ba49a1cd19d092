"""The single-instance hub: `MemoryHub`, the `EventHub` of `vernis.hub.base` with everything kept
in this process.

Each conversation's replay window is kept in memory, trimmed by age (`replay_seconds`) and by count
(`replay_max_events`) when it is written or read; the windows of conversations nobody shows or
answers in any more are swept every `sweep_seconds` by `run()`. Seqs start from the clock in
microseconds, so they keep growing across restarts without being stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from uuid import UUID

from vernis.conversation.events import AnswerEnded, AnswerStarted, Event, TextDelta
from vernis.hub.base import (
    REPLAY_MAX_EVENTS,
    REPLAY_SECONDS,
    Encoder,
    HubEvent,
    InFlight,
    Sink,
    StopHandler,
)

__all__ = ["SWEEP_SECONDS", "MemoryHub"]

logger = logging.getLogger("vernis.hub")

# How often replay windows nobody needs any more are forgotten.
SWEEP_SECONDS = 60.0

# How the memory hub keeps an event in its replay window: a plain tuple of its seq, frame, content and
# time, or for any event but a text delta (None, the event itself kept aside in `_Window.others`). A
# tuple of strings and numbers only is untracked by the garbage collector at its first collection.
Kept = tuple[int, str, str | None, float]

# Kept events are grouped in tuples of this many, themselves untracked then, so that a full
# collection, which walks every container the collector tracks, visits one object per block rather
# than one per kept event: a replay window holds every delta of its minutes, and a full collection
# pauses the process for as long as its walk takes.
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
        # Per conversation, its sinks in the order they came (a dict as an ordered set: a review
        # channel has every reviewer of an organization, thousands; adding or removing one is O(1)).
        self._subscribers: dict[UUID, dict[Sink, None]] = {}
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
        self._subscribers.setdefault(conversation_id, {})[sink] = None

    def unsubscribe(self, conversation_id: UUID, sink: Sink) -> None:
        sinks = self._subscribers.get(conversation_id)
        if sinks is None:
            return
        sinks.pop(sink, None)
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
