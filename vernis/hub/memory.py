"""The single-instance hub: `MemoryHub`, the `EventHub` of `vernis.hub.base` with everything kept
in this process.

Each conversation's replay window is kept in memory, trimmed by age (`replay_seconds`) and by count
(`replay_max_events`) when it is read, and when it is written (by age, once a block of events);
the windows of conversations nobody shows or answers in any more are swept every `sweep_seconds` by
`run()`. Seqs start from the clock in microseconds, so they keep growing across restarts without
being stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any
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

# How the memory hub keeps its replay windows: an event's frame, its content (a text delta's text, or
# None for any other event, itself kept aside in `_Window.others`) and its time, in three lists side
# by side, its seq being the window's first plus its place. No container is made per event: a delta
# kept in a tuple of its own was one more object the collector tracks, and at every delta of every
# stream those made most of its young collections (`bench/results/`).
#
# Full lists are frozen into blocks of this many (one tuple of the frames, then the contents, then
# the times: strings and numbers, which the collector stops tracking at its first pass), so that a
# full collection, which walks every container the collector tracks, visits one object per block
# rather than one per kept event: a replay window holds every delta of its minutes, and a full
# collection pauses the process for as long as its walk takes.
BLOCK = 64

# Where a block's contents and times start.
_CONTENTS, _ATS = BLOCK, 2 * BLOCK

# A block: BLOCK frames (str), then as many contents (str | None), then as many times (float).
Block = tuple[Any, ...]


def _older(at: float | None, horizon: float) -> bool:
    return at is None or at < horizon


class _Window:
    """One conversation's replay window: its kept events, oldest first, with consecutive seqs."""

    __slots__ = ("ats", "blocks", "contents", "first", "frames", "others", "size", "skip")

    def __init__(self, first: int) -> None:
        self.first = first  # the seq of the oldest kept event
        self.size = 0  # how many are kept
        self.blocks: deque[Block] = deque()  # full blocks, oldest first
        self.skip = 0  # events of blocks[0] already dropped
        # The newest events, fewer than BLOCK: their frames, contents and times.
        self.frames: list[str] = []
        self.contents: list[str | None] = []
        self.ats: list[float] = []
        self.others: dict[int, Event] = {}  # the kept events that are not text deltas, by seq

    def append(self, seq: int, frame: str, event: Event, at: float) -> None:
        frames = self.frames
        frames.append(frame)
        if type(event) is TextDelta:
            self.contents.append(event.content)
        else:
            self.contents.append(None)
            self.others[seq] = event
        self.ats.append(at)
        self.size += 1
        if len(frames) == BLOCK:
            self.blocks.append((*frames, *self.contents, *self.ats))
            self.frames, self.contents, self.ats = [], [], []

    def trim(self, horizon: float, max_events: int) -> None:
        """Drop the events older than `horizon` and the oldest beyond `max_events`."""
        blocks = self.blocks
        while blocks:
            block = blocks[0]
            skip = self.skip
            if block[_ATS + skip] >= horizon and self.size <= max_events:
                return
            if block[_CONTENTS + skip] is None:
                del self.others[self.first]
            self.skip += 1
            self.first += 1
            self.size -= 1
            if self.skip == BLOCK:
                blocks.popleft()
                self.skip = 0
        drop = 0
        ats, contents = self.ats, self.contents
        while drop < len(ats) and (ats[drop] < horizon or self.size > max_events):
            if contents[drop] is None:
                del self.others[self.first + drop]
            drop += 1
            self.size -= 1
        if drop:
            del self.frames[:drop], contents[:drop], ats[:drop]
            self.first += drop

    def last_at(self) -> float | None:
        if self.ats:
            return self.ats[-1]
        return self.blocks[-1][-1] if self.blocks else None

    def since(self, after_seq: int) -> list[HubEvent] | None:
        """The kept events after `after_seq`; None when some of them are no longer kept."""
        if not self.size or self.first > after_seq + 1:
            return None
        # Seqs are consecutive, so the first wanted event sits at a known offset.
        start = max(0, after_seq + 1 - self.first) + self.skip
        seq = self.first - self.skip  # the seq of the first event of the first part
        others = self.others
        out: list[HubEvent] = []
        for block in self.blocks:
            if start < BLOCK:
                for index in range(start, BLOCK):
                    content = block[_CONTENTS + index]
                    event = TextDelta(content) if content is not None else others[seq + index]
                    out.append(HubEvent(seq + index, block[index], event, block[_ATS + index]))
                start = 0
            else:
                start -= BLOCK
            seq += BLOCK
        frames, contents, ats = self.frames, self.contents, self.ats
        for index in range(start, len(frames)):
            content = contents[index]
            event = TextDelta(content) if content is not None else others[seq + index]
            out.append(HubEvent(seq + index, frames[index], event, ats[index]))
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
        # Every map is keyed by the conversation id's `int`: a `uuid.UUID` hashes in Python code (its
        # `__hash__`), and a delta's publish looks its conversation up four times.
        self._subscribers: dict[int, dict[Sink, None]] = {}
        self._seq: dict[int, int] = {}
        self._events: dict[int, _Window] = {}
        self._in_flight: dict[int, InFlight] = {}
        self._leases: dict[int, str] = {}
        self._clock = clock
        self._monotonic = monotonic
        self._replay_seconds = replay_seconds
        self._replay_max = replay_max_events
        self._stop_handlers: list[StopHandler] = []

    # --- subscriptions ---------------------------------------------------------------------------

    def subscribe(self, conversation_id: UUID, sink: Sink) -> None:
        self._subscribers.setdefault(conversation_id.int, {})[sink] = None

    def unsubscribe(self, conversation_id: UUID, sink: Sink) -> None:
        key = conversation_id.int
        sinks = self._subscribers.get(key)
        if sinks is None:
            return
        sinks.pop(sink, None)
        if not sinks:
            del self._subscribers[key]

    # --- events ----------------------------------------------------------------------------------

    def publish(self, conversation_id: UUID, event: Event) -> None:
        key = conversation_id.int
        seq = self._seq.get(key)
        seq = (self._start(key) if seq is None else seq) + 1
        self._seq[key] = seq
        frame = self._encode(event, seq)
        now = self._monotonic()
        window = self._events.get(key)
        if window is None:
            window = self._events[key] = _Window(seq)
        elif not window.frames or window.size >= self._replay_max:
            # By count before every append that would pass it; by age once a block of events: a
            # read (`events_since`) trims again first, so what it returns is exact.
            window.trim(now - self._replay_seconds, self._replay_max - 1)
        window.append(seq, frame, event, now)
        published = HubEvent(seq, frame, event, now)
        if type(event) is not TextDelta:
            if isinstance(event, AnswerStarted):
                self._in_flight[key] = InFlight(event.message_id, seq)
            elif isinstance(event, AnswerEnded):
                self._in_flight.pop(key, None)
        sinks = self._subscribers.get(key)
        if sinks:
            for sink in tuple(sinks):
                sink.deliver(published)

    async def last_seq(self, conversation_id: UUID) -> int:
        return self._last(conversation_id.int)

    def _last(self, key: int) -> int:
        seq = self._seq.get(key)
        return self._start(key) if seq is None else seq

    def _start(self, key: int) -> int:
        # The counter starts from the clock (microseconds), so that it keeps growing across restarts
        # of the process without storing it: a client holding an older `seq` never mistakes a new
        # event for one it has already seen.
        seq = self._seq[key] = int(self._clock() * 1_000_000)
        return seq

    async def in_flight(self, conversation_id: UUID) -> InFlight | None:
        return self._in_flight.get(conversation_id.int)

    def on_stop(self, handler: StopHandler) -> None:
        self._stop_handlers.append(handler)

    async def request_stop(self, conversation_id: UUID) -> None:
        for handler in self._stop_handlers:
            handler(conversation_id)

    async def aclose(self) -> None:
        return None

    async def events_since(self, conversation_id: UUID, after_seq: int) -> list[HubEvent] | None:
        key = conversation_id.int
        last = self._seq.get(key)
        if last is None or after_seq > last:
            return None
        if after_seq == last:
            return []
        window = self._events.get(key)
        if window is None:
            return None
        window.trim(self._monotonic() - self._replay_seconds, self._replay_max)
        return window.since(after_seq)

    def sweep(self) -> None:
        """Forget conversations whose last event left the replay window and that nobody shows."""
        horizon = self._monotonic() - self._replay_seconds
        for key in [k for k, window in self._events.items() if _older(window.last_at(), horizon)]:
            if key in self._subscribers or key in self._leases:
                continue
            del self._events[key]
            self._seq.pop(key, None)
            self._in_flight.pop(key, None)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_seconds)
            try:
                self.sweep()
            except Exception:  # pragma: no cover - a bug here must not stop the upkeep
                logger.exception("sweeping replay windows failed")

    # --- the answer lease ------------------------------------------------------------------------

    async def try_acquire(self, conversation_id: UUID, owner: str) -> bool:
        key = conversation_id.int
        if self._leases.get(key, owner) != owner:
            return False
        self._leases[key] = owner
        return True

    async def release(self, conversation_id: UUID, owner: str) -> None:
        key = conversation_id.int
        if self._leases.get(key) == owner:
            del self._leases[key]

    async def holder(self, conversation_id: UUID) -> str | None:
        return self._leases.get(conversation_id.int)

    def lease_mark(self, conversation_id: UUID) -> str | None:
        return None

    def unchanged(self, conversation_id: UUID, mark: str | None) -> bool:
        # One instance: every write is this process's own, and whoever makes one updates or
        # discards the conversation's window.
        return True

    async def touch(self, conversation_id: UUID) -> None:
        pass
