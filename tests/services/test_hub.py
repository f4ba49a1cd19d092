"""The in-memory event hub: numbering, fan-out and the answer lease."""

from __future__ import annotations

import uuid

from vernis.services.hub import MemoryHub


class Sink:
    def __init__(self) -> None:
        self.frames: list[str] = []

    def deliver(self, frame: str, seq: int) -> None:
        self.frames.append(frame)


def test_publish_numbers_and_fans_out() -> None:
    """Each published event gets the next seq and reaches every subscriber of that conversation only."""
    hub = MemoryHub(clock=lambda: 5.0)
    a, b, other = Sink(), Sink(), Sink()
    conversation, elsewhere = uuid.uuid4(), uuid.uuid4()
    hub.subscribe(conversation, a)
    hub.subscribe(conversation, b)
    hub.subscribe(elsewhere, other)
    first = hub.publish(conversation, lambda seq: f"e{seq}", "x")
    second = hub.publish(conversation, lambda seq: f"e{seq}", "x")
    assert first == 5_000_001
    assert second == first + 1
    assert a.frames == b.frames == [f"e{first}", f"e{second}"]
    assert other.frames == []


def test_seq_keeps_growing_after_a_restart() -> None:
    """A new hub (a restarted process) numbers above anything an earlier one handed out."""
    conversation = uuid.uuid4()
    before = MemoryHub(clock=lambda: 100.0)
    for _ in range(1000):
        last = before.publish(conversation, str, "x")
    after = MemoryHub(clock=lambda: 101.0)
    assert after.publish(conversation, str, "x") > last


async def test_lease_is_exclusive_and_released_by_its_owner_only() -> None:
    """One owner holds a conversation's lease; others are refused until the owner releases it."""
    hub = MemoryHub()
    conversation = uuid.uuid4()
    assert await hub.try_acquire(conversation, "one")
    assert not await hub.try_acquire(conversation, "two")
    await hub.release(conversation, "two")
    assert await hub.holder(conversation) == "one"
    await hub.release(conversation, "one")
    assert await hub.try_acquire(conversation, "two")


def test_unsubscribed_sink_gets_nothing() -> None:
    """After unsubscribing, a sink receives no further events."""
    hub = MemoryHub()
    conversation = uuid.uuid4()
    sink = Sink()
    hub.subscribe(conversation, sink)
    hub.unsubscribe(conversation, sink)
    hub.publish(conversation, str, "x")
    assert sink.frames == []


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_events_since_replays_exactly_what_followed() -> None:
    """events_since gives every event after the seq, in order; [] when nothing followed."""
    hub = MemoryHub(clock=lambda: 1.0)
    conversation = uuid.uuid4()
    seqs = [hub.publish(conversation, lambda seq: f"e{seq}", "text_delta", text=str(n)) for n in range(5)]
    events = await hub.events_since(conversation, seqs[1])
    assert events is not None
    assert [e.seq for e in events] == seqs[2:]
    assert [e.text for e in events] == ["2", "3", "4"]
    assert await hub.events_since(conversation, seqs[-1]) == []


async def test_events_since_refuses_gaps_it_cannot_fill() -> None:
    """Events older than the replay window, an unknown conversation or a future seq give None (reload instead)."""
    monotonic = Clock()
    hub = MemoryHub(clock=lambda: 1.0, monotonic=monotonic, replay_seconds=120)
    conversation = uuid.uuid4()
    first = hub.publish(conversation, str, "x")
    monotonic.now += 60
    second = hub.publish(conversation, str, "x")
    assert await hub.events_since(conversation, first - 1) is not None
    monotonic.now += 61
    assert await hub.events_since(conversation, first - 1) is None
    events = await hub.events_since(conversation, first)
    assert events is not None
    assert [e.seq for e in events] == [second]
    assert await hub.events_since(uuid.uuid4(), 5) is None
    assert await hub.events_since(conversation, second + 10) is None


def test_in_flight_follows_start_and_end() -> None:
    """An assistant_start marks its answer in flight until its assistant_end."""
    hub = MemoryHub()
    conversation, message = uuid.uuid4(), uuid.uuid4()
    start = hub.publish(conversation, str, "assistant_start", message_id=message)
    hub.publish(conversation, str, "text_delta", text="hi")
    assert hub.in_flight(conversation) == (message, start)
    hub.publish(conversation, str, "assistant_end")
    assert hub.in_flight(conversation) is None
