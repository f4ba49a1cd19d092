"""The in-memory event hub: numbering, fan-out and the answer lease."""

from __future__ import annotations

import uuid

from vernis.services.hub import MemoryHub


class Sink:
    def __init__(self) -> None:
        self.frames: list[str] = []

    def deliver(self, frame: str) -> None:
        self.frames.append(frame)


def test_publish_numbers_and_fans_out() -> None:
    """Each published event gets the next seq and reaches every subscriber of that conversation only."""
    hub = MemoryHub(clock=lambda: 5.0)
    a, b, other = Sink(), Sink(), Sink()
    conversation, elsewhere = uuid.uuid4(), uuid.uuid4()
    hub.subscribe(conversation, a)
    hub.subscribe(conversation, b)
    hub.subscribe(elsewhere, other)
    first = hub.publish(conversation, lambda seq: f"e{seq}")
    second = hub.publish(conversation, lambda seq: f"e{seq}")
    assert first == 5_000_001
    assert second == first + 1
    assert a.frames == b.frames == [f"e{first}", f"e{second}"]
    assert other.frames == []


def test_seq_keeps_growing_after_a_restart() -> None:
    """A new hub (a restarted process) numbers above anything an earlier one handed out."""
    conversation = uuid.uuid4()
    before = MemoryHub(clock=lambda: 100.0)
    for _ in range(1000):
        last = before.publish(conversation, str)
    after = MemoryHub(clock=lambda: 101.0)
    assert after.publish(conversation, str) > last


def test_lease_is_exclusive_and_released_by_its_owner_only() -> None:
    """One owner holds a conversation's lease; others are refused until the owner releases it."""
    hub = MemoryHub()
    conversation = uuid.uuid4()
    assert hub.try_acquire(conversation, "one")
    assert not hub.try_acquire(conversation, "two")
    hub.release(conversation, "two")
    assert hub.holder(conversation) == "one"
    hub.release(conversation, "one")
    assert hub.try_acquire(conversation, "two")


def test_unsubscribed_sink_gets_nothing() -> None:
    """After unsubscribing, a sink receives no further events."""
    hub = MemoryHub()
    conversation = uuid.uuid4()
    sink = Sink()
    hub.subscribe(conversation, sink)
    hub.unsubscribe(conversation, sink)
    hub.publish(conversation, str)
    assert sink.frames == []
