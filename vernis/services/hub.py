"""Where a conversation's events are published, and who may answer in it.

Every socket that shows a conversation subscribes to it; the answer running in that conversation
publishes its events once, and the hub delivers each frame to every subscriber. The hub also
numbers the events (`seq`, growing within the conversation) and holds the one-answer-per-
conversation lease.

`EventHub` is the interface; `MemoryHub` keeps everything in this process. A Redis-backed hub for
several server instances implements the same interface (SPEC §10).

Delivery never blocks the publisher: a subscriber is a `Sink` whose `deliver()` queues the frame
and returns at once (a subscriber too slow to keep up is disconnected by its own connection).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol
from uuid import UUID

__all__ = ["EventHub", "MemoryHub", "Sink"]


class Sink(Protocol):
    def deliver(self, frame: str) -> None:
        """Queue one encoded frame for the socket; must not block or raise."""
        ...


# An event that still needs its `seq`: called once with the number, returns the encoded frame.
FrameBuilder = Callable[[int], str]


class EventHub(Protocol):
    def subscribe(self, conversation_id: UUID, sink: Sink) -> None: ...

    def unsubscribe(self, conversation_id: UUID, sink: Sink) -> None: ...

    def publish(self, conversation_id: UUID, build: FrameBuilder) -> int:
        """Number the event, deliver it to every subscriber, return its `seq`."""
        ...

    def last_seq(self, conversation_id: UUID) -> int:
        """The `seq` of the newest event published in the conversation (a floor if none yet)."""
        ...

    def try_acquire(self, conversation_id: UUID, owner: str) -> bool:
        """Take the conversation's answer lease; False when another answer holds it."""
        ...

    def release(self, conversation_id: UUID, owner: str) -> None: ...

    def holder(self, conversation_id: UUID) -> str | None: ...


class MemoryHub:
    """The single-instance hub."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._subscribers: dict[UUID, list[Sink]] = {}
        self._seq: dict[UUID, int] = {}
        self._leases: dict[UUID, str] = {}
        self._clock = clock

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
            if conversation_id not in self._leases:
                self._seq.pop(conversation_id, None)

    def subscriber_count(self, conversation_id: UUID) -> int:
        return len(self._subscribers.get(conversation_id, ()))

    def publish(self, conversation_id: UUID, build: FrameBuilder) -> int:
        seq = self.last_seq(conversation_id) + 1
        self._seq[conversation_id] = seq
        frame = build(seq)
        for sink in tuple(self._subscribers.get(conversation_id, ())):
            sink.deliver(frame)
        return seq

    def last_seq(self, conversation_id: UUID) -> int:
        seq = self._seq.get(conversation_id)
        if seq is None:
            # The counter starts from the clock (microseconds), so that it keeps growing across
            # restarts of the process without storing it: a client holding an older `seq` never
            # mistakes a new event for one it has already seen.
            seq = self._seq[conversation_id] = int(self._clock() * 1_000_000)
        return seq

    def try_acquire(self, conversation_id: UUID, owner: str) -> bool:
        if self._leases.get(conversation_id, owner) != owner:
            return False
        self._leases[conversation_id] = owner
        return True

    def release(self, conversation_id: UUID, owner: str) -> None:
        if self._leases.get(conversation_id) == owner:
            del self._leases[conversation_id]
            if conversation_id not in self._subscribers:
                self._seq.pop(conversation_id, None)

    def holder(self, conversation_id: UUID) -> str | None:
        return self._leases.get(conversation_id)
