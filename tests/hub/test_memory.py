"""The in-memory event hub: numbering, fan-out, replay, the answer lease, and forgetting what is done."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import uuid

from vernis.conversation import events
from vernis.hub.base import HubEvent
from vernis.hub.memory import MemoryHub


def label(event: events.Event, seq: int) -> str:
    """A stand-in encoder: which event, and its seq."""
    return f"{type(event).__name__}:{seq}"


def hub_at(now: float = 5.0, **options: object) -> MemoryHub:
    return MemoryHub(label, clock=lambda: now, **options)  # type: ignore[arg-type]


class Sink:
    def __init__(self) -> None:
        self.frames: list[str] = []

    def deliver(self, event: HubEvent) -> None:
        self.frames.append(event.frame)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


DELTA = events.TextDelta("x")


async def published(hub: MemoryHub, conversation: uuid.UUID, event: events.Event) -> int:
    """Publish and return the seq the event got."""
    hub.publish(conversation, event)
    return await hub.last_seq(conversation)


async def test_publish_numbers_encodes_once_and_fans_out() -> None:
    """Each published event gets the next seq, is encoded by the injected encoder, and reaches every subscriber of that conversation only."""
    hub = hub_at(5.0)
    a, b, other = Sink(), Sink(), Sink()
    conversation, elsewhere = uuid.uuid4(), uuid.uuid4()
    hub.subscribe(conversation, a)
    hub.subscribe(conversation, b)
    hub.subscribe(elsewhere, other)
    first = await published(hub, conversation, DELTA)
    second = await published(hub, conversation, events.TitleUpdated(conversation, "Hi"))
    assert first == 5_000_001
    assert second == first + 1
    assert a.frames == b.frames == [f"TextDelta:{first}", f"TitleUpdated:{second}"]
    assert other.frames == []


async def test_seq_keeps_growing_after_a_restart() -> None:
    """A new hub (a restarted process) numbers above anything an earlier one handed out."""
    conversation = uuid.uuid4()
    before = hub_at(100.0)
    for _ in range(1000):
        last = await published(before, conversation, DELTA)
    after = hub_at(101.0)
    assert await published(after, conversation, DELTA) > last


async def test_lease_is_exclusive_and_released_by_its_owner_only() -> None:
    """One owner holds a conversation's lease; others are refused until the owner releases it."""
    hub = hub_at()
    conversation = uuid.uuid4()
    assert await hub.try_acquire(conversation, "one")
    assert not await hub.try_acquire(conversation, "two")
    await hub.release(conversation, "two")
    assert await hub.holder(conversation) == "one"
    await hub.release(conversation, "one")
    assert await hub.try_acquire(conversation, "two")


def test_unsubscribed_sink_gets_nothing() -> None:
    """After unsubscribing, a sink receives no further events."""
    hub = hub_at()
    conversation = uuid.uuid4()
    sink = Sink()
    hub.subscribe(conversation, sink)
    hub.unsubscribe(conversation, sink)
    hub.publish(conversation, DELTA)
    assert sink.frames == []


async def test_events_since_replays_exactly_what_followed() -> None:
    """events_since gives every event after the seq, in order, with the event itself; [] when nothing followed."""
    hub = hub_at(1.0)
    conversation = uuid.uuid4()
    seqs = [await published(hub, conversation, events.TextDelta(str(n))) for n in range(5)]
    replayed = await hub.events_since(conversation, seqs[1])
    assert replayed is not None
    assert [e.seq for e in replayed] == seqs[2:]
    assert [e.event for e in replayed] == [
        events.TextDelta("2"),
        events.TextDelta("3"),
        events.TextDelta("4"),
    ]
    assert await hub.events_since(conversation, seqs[-1]) == []


async def test_events_since_refuses_gaps_it_cannot_fill() -> None:
    """Events older than the replay window, an unknown conversation or a future seq give None (reload instead)."""
    monotonic = Clock()
    hub = MemoryHub(label, clock=lambda: 1.0, monotonic=monotonic, replay_seconds=120)
    conversation = uuid.uuid4()
    first = await published(hub, conversation, DELTA)
    monotonic.now += 60
    second = await published(hub, conversation, DELTA)
    assert await hub.events_since(conversation, first - 1) is not None
    monotonic.now += 61
    assert await hub.events_since(conversation, first - 1) is None
    replayed = await hub.events_since(conversation, first)
    assert replayed is not None
    assert [e.seq for e in replayed] == [second]
    assert await hub.events_since(uuid.uuid4(), 5) is None
    assert await hub.events_since(conversation, second + 10) is None


async def test_in_flight_follows_start_and_end() -> None:
    """An AnswerStarted marks its answer in flight until its AnswerEnded."""
    hub = hub_at()
    conversation, message = uuid.uuid4(), uuid.uuid4()
    start = await published(hub, conversation, events.AnswerStarted(conversation, message))
    hub.publish(conversation, events.TextDelta("hi"))
    assert await hub.in_flight(conversation) == (message, start)
    hub.publish(conversation, events.AnswerEnded(conversation, message, stopped=False))
    assert await hub.in_flight(conversation) is None


def _finished_answer(hub: MemoryHub, conversation: uuid.UUID) -> None:
    message = uuid.uuid4()
    hub.publish(conversation, events.AnswerStarted(conversation, message))
    for n in range(50):
        hub.publish(conversation, events.TextDelta(f"word {n} "))
    hub.publish(conversation, events.AnswerEnded(conversation, message, stopped=False))


async def test_finished_conversations_are_forgotten_by_the_scheduled_sweep() -> None:
    """The memory of 1,000 finished answers returns to baseline once their replay windows lapse: `run()` sweeps on its own."""
    monotonic = Clock()
    hub = MemoryHub(label, clock=lambda: 7.0, monotonic=monotonic, replay_seconds=120, sweep_seconds=0.01)
    shown, leased = uuid.uuid4(), uuid.uuid4()
    sink = Sink()
    hub.subscribe(shown, sink)
    gc.collect()
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        finished = [uuid.uuid4() for _ in range(1000)]
        for conversation in finished:
            _finished_answer(hub, conversation)
        _finished_answer(hub, shown)
        _finished_answer(hub, leased)
        assert await hub.try_acquire(leased, "answer")
        grown = tracemalloc.get_traced_memory()[0] - baseline
        kept = await hub.last_seq(shown), await hub.last_seq(leased)
        one_of_them = finished[0]
        del finished
        monotonic.now += 121
        upkeep = asyncio.create_task(hub.run())
        try:
            await asyncio.sleep(0.1)
        finally:
            upkeep.cancel()
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - baseline
    finally:
        tracemalloc.stop()
    assert grown > 2_000_000  # 52,000 kept events
    # What is left is the two conversations still in use (shown, and answering: 104 events) and the
    # hub's dicts at the size they grew to (about 0.1 MB): under 2 % of what the finished answers held.
    assert left < grown / 50, (grown, left)
    # Forgotten: a finished conversation numbers from the clock again; the two in use kept theirs.
    assert await hub.last_seq(one_of_them) == 7_000_000
    assert (await hub.last_seq(shown), await hub.last_seq(leased)) == kept


async def test_replay_window_of_text_deltas_is_not_walked_by_the_garbage_collector() -> None:
    """Deltas kept for replay leave no object for the collector to track (full collections would walk every kept delta), yet replay whole."""
    hub = hub_at(1.0)
    conversation = uuid.uuid4()
    hub.publish(conversation, events.TextDelta("warm"))
    gc.collect()
    tracked = len(gc.get_objects())
    for n in range(10_000):
        hub.publish(conversation, events.TextDelta(f"d{n}"))
    gc.collect()
    assert len(gc.get_objects()) - tracked < 100
    replayed = await hub.events_since(conversation, await hub.last_seq(conversation) - 3)
    assert replayed is not None
    assert [e.event for e in replayed] == [events.TextDelta(f"d{n}") for n in (9_997, 9_998, 9_999)]


async def test_replay_is_exact_at_every_cut_point_across_blocks_and_trimming() -> None:
    """Whatever seq a client resumes from, it gets exactly the kept events after it, across block boundaries, or None once they are trimmed."""
    clock = Clock()
    hub = MemoryHub(label, clock=lambda: 1.0, monotonic=clock, replay_seconds=10.0, replay_max_events=150)
    conversation = uuid.uuid4()
    seqs = []
    for n in range(300):
        clock.now += 0.01
        seqs.append(
            await published(
                hub,
                conversation,
                events.TextDelta(str(n)) if n % 7 else events.TitleUpdated(conversation, str(n)),
            )
        )
    kept = seqs[-150:]
    for cut in range(len(seqs)):
        replayed = await hub.events_since(conversation, seqs[cut])
        if seqs[cut] + 1 < kept[0]:
            assert replayed is None, cut
        else:
            assert replayed is not None, cut
            assert [e.seq for e in replayed] == seqs[cut + 1 :]
            assert [e.frame for e in replayed] == [
                label(e.event, e.seq) for e in replayed if e.event is not None
            ]
    clock.now += 9.005  # the oldest fall out of the 10-second window: only the newest 100 stay
    replayed = await hub.events_since(conversation, seqs[-101])
    assert replayed is not None
    assert [e.seq for e in replayed] == seqs[-100:]
    assert await hub.events_since(conversation, seqs[-102]) is None
