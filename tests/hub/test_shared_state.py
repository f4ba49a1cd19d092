"""The hub, the lease and the limits behave the same in memory and in Redis (SPEC §10).

Each test gets two views of the shared state: in memory both are the one hub of the process; in
Redis they are two hubs with their own connections, as two instances have. What one view
publishes, leases or limits, the other sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.fixtures.redis import OwnRedis
from vernis.conversation import events
from vernis.exceptions import Unavailable
from vernis.hub.base import EventHub, HubEvent
from vernis.hub.memory import MemoryHub
from vernis.hub.redis import RedisHub
from vernis.limits.rate import MemberRateLimiter, MemorySocketCap, RateLimiter, SocketCap
from vernis.limits.redis import RedisRateLimiter, RedisSocketCap
from vernis.settings import RateLimit
from vernis.store.redis import redis_client
from vernis.ws.encoder import encode


class Sink:
    def __init__(self) -> None:
        self.events: list[HubEvent] = []

    def deliver(self, event: HubEvent) -> None:
        self.events.append(event)


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def settle(hub: EventHub) -> None:
    """What was published is in the shared state (Redis batches its events)."""
    if isinstance(hub, RedisHub):
        await hub.flush()


@dataclass
class Views:
    kind: str
    one: EventHub
    two: EventHub
    limiter: Callable[[RateLimit], tuple[RateLimiter, RateLimiter]]
    cap: Callable[[int], tuple[SocketCap, SocketCap]]
    stopped: list[tuple[str, uuid.UUID]] = field(default_factory=list)


async def _running(hub: RedisHub) -> asyncio.Task[None]:
    task = asyncio.create_task(hub.run())
    await asyncio.wait_for(hub.wait_listening(), 5)
    return task


async def _stopped(tasks: list[asyncio.Task[None]], *hubs: RedisHub) -> None:
    """End the hubs' loops (`_running`) and close the hubs."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for hub in hubs:
        await hub.aclose()


@contextlib.asynccontextmanager
async def _two_hubs_and_a_spy(
    redis_url: str, prefix: str
) -> AsyncIterator[tuple[RedisHub, RedisHub, aioredis.Redis, PubSub]]:
    """Two running Redis hubs on `prefix`, and a client of the test's own with a pub/sub listener
    (subscribed to nothing yet), all stopped and closed after."""
    clients = [redis_client(redis_url), redis_client(redis_url)]
    one, two = (RedisHub(client, encode, prefix=prefix) for client in clients)
    tasks = [await _running(one), await _running(two)]
    spy = aioredis.Redis.from_url(redis_url, decode_responses=True, protocol=2)
    listener = spy.pubsub()
    try:
        yield one, two, spy, listener
    finally:
        await _stopped(tasks, one, two)
        await listener.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves PubSub.aclose unannotated
        for client in (*clients, spy):
            await client.aclose()


@pytest.fixture(params=["memory", "redis"])
async def views(request: pytest.FixtureRequest, redis_url: str) -> AsyncIterator[Views]:
    """Two views of one shared state: one in-memory hub twice, or two Redis hubs on one prefix."""
    if request.param == "memory":
        hub = MemoryHub(encode)

        def memory_limiters(limit: RateLimit) -> tuple[RateLimiter, RateLimiter]:
            limiter = MemberRateLimiter(limit)
            return limiter, limiter

        def memory_caps(cap: int) -> tuple[SocketCap, SocketCap]:
            shared = MemorySocketCap(cap)
            return shared, shared

        views = Views("memory", hub, hub, memory_limiters, memory_caps)
        hub.on_stop(lambda c: views.stopped.append(("one", c)))
        yield views
        return

    prefix = f"vernis-test:{uuid.uuid4().hex[:12]}:"
    clients = [redis_client(redis_url), redis_client(redis_url)]
    one, two = (RedisHub(client, encode, prefix=prefix, lease_seconds=1.0) for client in clients)

    def redis_limiters(limit: RateLimit) -> tuple[RateLimiter, RateLimiter]:
        first, second = (RedisRateLimiter(client, limit, prefix=prefix) for client in clients)
        return first, second

    def redis_caps(cap: int) -> tuple[SocketCap, SocketCap]:
        first, second = (RedisSocketCap(client, cap, prefix=prefix) for client in clients)
        return first, second

    views = Views("redis", one, two, redis_limiters, redis_caps)
    one.on_stop(lambda c: views.stopped.append(("one", c)))
    two.on_stop(lambda c: views.stopped.append(("two", c)))
    tasks = [await _running(one), await _running(two)]
    try:
        yield views
    finally:
        await _stopped(tasks, one, two)
        keys = [key async for key in clients[0].scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await clients[0].delete(*keys)
        for client in clients:
            await client.aclose()


def _answer(conversation: uuid.UUID, message: uuid.UUID, words: int) -> list[events.Event]:
    return [
        events.AnswerStarted(conversation, message),
        *(events.TextDelta(f"w{n} ") for n in range(words)),
        events.ToolCallStarted("call_1", "lookup", {"q": "x"}),
        events.AnswerEnded(conversation, message, stopped=False),
    ]


def _frames(sink: Sink) -> list[dict[str, Any]]:
    return [orjson.loads(e.frame) for e in sink.events]


async def test_a_subscriber_on_the_other_view_gets_every_event_once_in_seq_order(views: Views) -> None:
    """Events published on one view reach a subscriber of the other: all of them, in order, consecutive seqs, none twice, each frame carrying its own seq; another conversation's subscriber gets nothing."""
    conversation, elsewhere, message = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    sink, other = Sink(), Sink()
    views.two.subscribe(conversation, sink)
    views.two.subscribe(elsewhere, other)
    start = await views.two.last_seq(conversation)
    await views.two.last_seq(elsewhere)
    published = _answer(conversation, message, 300)
    for event in published:
        views.one.publish(conversation, event)
        if isinstance(event, events.TextDelta) and event.content == "w150 ":
            await asyncio.sleep(0.02)  # a second batch
    await settle(views.one)
    await eventually(lambda: len(sink.events) >= len(published))
    await asyncio.sleep(0.05)
    assert [e.seq for e in sink.events] == list(range(start + 1, start + 1 + len(published)))
    frames = _frames(sink)
    assert [f["seq"] for f in frames] == [e.seq for e in sink.events]
    assert "".join(f.get("content", "") for f in frames) == "".join(f"w{n} " for n in range(300))
    assert [f["type"] for f in (frames[0], frames[-2], frames[-1])] == [
        "assistant_start",
        "tool_call_started",
        "assistant_end",
    ]
    # The answer's start and end carry their events too (a socket that joins reads them).
    assert isinstance(sink.events[0].event, events.AnswerStarted)
    assert isinstance(sink.events[-1].event, events.AnswerEnded)
    assert other.events == []


async def test_both_views_publishing_to_one_conversation_give_every_subscriber_one_order(
    views: Views,
) -> None:
    """Two views publishing to one conversation at once: a subscriber on each gets every event once, consecutive seqs, and the same frames as the other and as the replay."""
    conversation = uuid.uuid4()
    sinks = Sink(), Sink()
    views.one.subscribe(conversation, sinks[0])
    views.two.subscribe(conversation, sinks[1])
    start = await views.one.last_seq(conversation)
    await views.two.last_seq(conversation)
    for round_ in range(40):
        views.one.publish(conversation, events.TextDelta(f"one{round_} "))
        views.two.publish(conversation, events.TextDelta(f"two{round_} "))
        await asyncio.gather(settle(views.one), settle(views.two))
    expected = list(range(start + 1, start + 81))
    await eventually(lambda: [[e.seq for e in sink.events] for sink in sinks] == [expected, expected])
    replayed = await views.one.events_since(conversation, start)
    assert replayed is not None
    assert [e.frame for e in sinks[0].events] == [e.frame for e in sinks[1].events]
    assert [e.frame for e in sinks[0].events] == [e.frame for e in replayed]
    contents = sorted(f["content"] for f in _frames(sinks[0]))
    assert contents == sorted(f"{who}{n} " for who in ("one", "two") for n in range(40))


async def test_events_since_on_the_other_view_replays_exactly_what_followed(views: Views) -> None:
    """A client resuming on the other view gets exactly the events after its seq, with their typed deltas; [] when nothing followed, None for a seq never handed out."""
    conversation, message = uuid.uuid4(), uuid.uuid4()
    before = await views.one.last_seq(conversation)
    for event in _answer(conversation, message, 20):
        views.one.publish(conversation, event)
    await settle(views.one)
    last = await views.two.last_seq(conversation)
    assert last == before + 23
    replayed = await views.two.events_since(conversation, before + 5)
    assert replayed is not None
    assert [e.seq for e in replayed] == list(range(before + 6, last + 1))
    assert replayed[0].event == events.TextDelta("w4 ")
    assert await views.two.events_since(conversation, last) == []
    assert await views.two.events_since(conversation, last + 10) is None
    assert await views.two.events_since(uuid.uuid4(), 5) is None


async def test_the_answer_in_flight_is_seen_from_the_other_view(views: Views) -> None:
    """An AnswerStarted on one view is the answer in flight on the other, until its AnswerEnded."""
    conversation, message = uuid.uuid4(), uuid.uuid4()
    views.one.publish(conversation, events.AnswerStarted(conversation, message))
    await settle(views.one)
    start = await views.one.last_seq(conversation)
    assert await views.two.in_flight(conversation) == (message, start)
    views.one.publish(conversation, events.AnswerEnded(conversation, message, stopped=False))
    await settle(views.one)
    assert await views.two.in_flight(conversation) is None


async def test_one_lease_per_conversation_across_views(views: Views) -> None:
    """The lease taken on one view is refused on the other, is not released by another owner, and is free once its owner releases it."""
    conversation = uuid.uuid4()
    assert await views.one.try_acquire(conversation, "first")
    assert not await views.two.try_acquire(conversation, "second")
    assert await views.two.holder(conversation) is not None
    await views.two.release(conversation, "second")
    assert not await views.two.try_acquire(conversation, "second")
    await views.one.release(conversation, "first")
    assert await views.two.holder(conversation) is None
    assert await views.two.try_acquire(conversation, "second")
    await views.two.release(conversation, "second")


async def test_stop_asked_on_either_view_reaches_the_one_that_runs_the_answer(views: Views) -> None:
    """request_stop on the other view calls the stop handler of the view that runs the answer."""
    conversation = uuid.uuid4()
    await views.two.request_stop(conversation)
    await eventually(lambda: ("one", conversation) in views.stopped)


async def test_the_member_rate_limit_holds_across_views(views: Views) -> None:
    """Three messages a minute: two on one view and one on the other pass, the fourth is refused on either with a retry-after within the window."""
    one, two = views.limiter(RateLimit(3, 60))
    member = uuid.uuid4()
    assert await one.hit(member) is None
    assert await two.hit(member) is None
    assert await one.hit(member) is None
    retry = await two.hit(member)
    assert retry is not None
    assert 0 < retry <= 60_000
    assert await one.hit(uuid.uuid4()) is None


async def test_the_socket_cap_holds_across_views(views: Views) -> None:
    """Two sockets per member: the third is refused on either view until one of the two closes."""
    one, two = views.cap(2)
    member = uuid.uuid4()
    assert await one.acquire(member, "a")
    assert await two.acquire(member, "b")
    assert not await one.acquire(member, "c")
    assert not await two.acquire(member, "c")
    await one.release(member, "a")
    assert await two.acquire(member, "c")


async def test_an_answer_whose_instance_died_is_ended_by_another(redis_url: str) -> None:
    """An instance that dies mid-answer (lease not renewed, not released): another instance's reaper takes over within the lease time, ends the answer once, and the conversation is free again."""
    prefix = f"vernis-test:{uuid.uuid4().hex[:12]}:"
    clients = [redis_client(redis_url), redis_client(redis_url)]
    dying = RedisHub(clients[0], encode, prefix=prefix, lease_seconds=0.6, reap_seconds=0.1)
    survivor = RedisHub(clients[1], encode, prefix=prefix, lease_seconds=0.6, reap_seconds=0.1)
    ended: list[tuple[uuid.UUID, uuid.UUID]] = []

    async def end(conversation_id: uuid.UUID, message_id: uuid.UUID) -> None:
        ended.append((conversation_id, message_id))
        survivor.publish(conversation_id, events.AnswerEnded(conversation_id, message_id, stopped=False))

    survivor.on_orphan(end)
    conversation, message = uuid.uuid4(), uuid.uuid4()
    dying_task = await _running(dying)
    survivor_task = await _running(survivor)
    try:
        assert await dying.try_acquire(conversation, "answer")
        dying.publish(conversation, events.AnswerStarted(conversation, message))
        dying.publish(conversation, events.TextDelta("half an ans"))
        await dying.flush()
        await asyncio.sleep(0.8)  # renewed meanwhile: still alive, nothing reaped
        assert ended == []
        dying_task.cancel()  # the instance dies: no renewal, no release
        await asyncio.gather(dying_task, return_exceptions=True)
        await eventually(lambda: ended == [(conversation, message)], timeout=5)

        async def cleared() -> bool:
            return await survivor.in_flight(conversation) is None

        await eventually(cleared)
        assert await survivor.try_acquire(conversation, "next answer")
        await asyncio.sleep(0.3)
        assert ended == [(conversation, message)], "reaped once"
    finally:
        await _stopped([survivor_task], dying, survivor)
        keys = [key async for key in clients[0].scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await clients[0].delete(*keys)
        for client in clients:
            await client.aclose()


async def test_redis_down_refuses_new_leases_and_keeps_events_until_it_is_back(own_redis: OwnRedis) -> None:
    """With Redis killed, taking a lease raises Unavailable and published events wait; once Redis is back (empty), the hub recovers by itself: leases work and events published meanwhile reach a subscriber."""
    client = redis_client(own_redis.url)
    hub = RedisHub(client, encode, prefix="p:", lease_seconds=1.0)
    task = await _running(hub)
    conversation = uuid.uuid4()
    sink = Sink()
    try:
        hub.subscribe(conversation, sink)
        await hub.last_seq(conversation)
        hub.publish(conversation, events.TextDelta("before"))
        await eventually(lambda: len(sink.events) == 1)
        own_redis.kill()
        with pytest.raises(Unavailable):
            await hub.try_acquire(conversation, "owner")
        hub.publish(conversation, events.TextDelta("during"))
        await asyncio.sleep(0.3)
        own_redis.start()
        await eventually(
            lambda: [orjson.loads(e.frame)["content"] for e in sink.events][-1:] == ["during"], timeout=10
        )
        assert await hub.try_acquire(conversation, "owner")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await hub.aclose()
        await client.aclose()
        if own_redis.process is None:
            own_redis.start()
        probe = aioredis.Redis.from_url(own_redis.url)
        await probe.flushall()
        await probe.aclose()


async def test_the_lease_goes_with_the_end_of_the_answer_in_redis(redis_url: str, redis_prefix: str) -> None:
    """In Redis the answer's lease is released in the same step that publishes its assistant_end: a client that reads the end and asks again at once finds the conversation free, before the holder's own release call."""
    client = redis_client(redis_url)
    hub = RedisHub(client, encode, prefix=redis_prefix)
    conversation, message = uuid.uuid4(), uuid.uuid4()
    try:
        assert await hub.try_acquire(conversation, "answer")
        hub.publish(conversation, events.AnswerStarted(conversation, message))
        await hub.flush()
        assert await hub.holder(conversation) is not None
        hub.publish(conversation, events.AnswerEnded(conversation, message, stopped=False))
        await hub.flush()
        assert await hub.holder(conversation) is None
        assert await hub.try_acquire(conversation, "next answer")
        await hub.release(conversation, "answer")  # the old holder's late release frees nothing
        assert await hub.holder(conversation) is not None
    finally:
        await hub.aclose()
        await client.aclose()


async def test_hundreds_of_concurrent_calls_wait_for_a_pooled_connection(
    redis_url: str, redis_prefix: str
) -> None:
    """300 sockets hitting the Redis rate limit at once through a pool of 4 connections all get an answer (they wait for a connection), none an error."""
    client = redis_client(redis_url, max_connections=4)
    limiter = RedisRateLimiter(client, RateLimit(10_000, 60), prefix=redis_prefix)
    try:
        results = await asyncio.gather(*(limiter.hit(uuid.uuid4()) for _ in range(300)))
        assert results == [None] * 300
    finally:
        await client.aclose()


async def test_a_window_kept_under_its_own_lease_is_known_stale_once_another_writer_came(
    views: Views,
) -> None:
    """Taking a conversation's lease again right after its own, a view is told nothing changed; after the other view's lease came between, or a write marked with touch(), a Redis view is told it changed (a window marked with no lease too); one process never is."""
    conversation = uuid.uuid4()
    one, two = views.one, views.two

    async def again(mark: str | None, owner: str) -> tuple[bool, str | None]:
        assert await one.try_acquire(conversation, owner)
        unchanged, new_mark = one.unchanged(conversation, mark), one.lease_mark(conversation)
        await one.release(conversation, owner)
        return unchanged, new_mark

    _, mark = await again(None, "first")
    unchanged, mark = await again(mark, "second")
    assert unchanged
    assert await two.try_acquire(conversation, "other")
    await two.release(conversation, "other")
    unchanged, mark = await again(mark, "third")
    assert unchanged is (views.kind == "memory")
    unchanged, mark = await again(mark, "fourth")
    assert unchanged
    await two.touch(conversation)
    unchanged, mark = await again(mark, "fifth")
    assert unchanged is (views.kind == "memory")
    unchanged, _ = await again(None, "sixth")
    assert unchanged is (views.kind == "memory")


async def test_leases_are_renewed_together_and_one_taken_over_stops_its_answer(redis_url: str) -> None:
    """Three leases held past their time to live stay held (renewed, in one call); one taken over meanwhile by another holder makes the hub call its stop handlers for that conversation only, and let go of it."""
    prefix = f"vernis-test:{uuid.uuid4().hex[:12]}:"
    client = redis_client(redis_url)
    hub = RedisHub(client, encode, prefix=prefix, lease_seconds=0.6)
    stopped: list[uuid.UUID] = []
    hub.on_stop(stopped.append)
    conversations = [uuid.uuid4() for _ in range(3)]
    task = await _running(hub)
    try:
        for conversation in conversations:
            assert await hub.try_acquire(conversation, "answer")
        await asyncio.sleep(1.0)  # beyond the time to live
        assert [await hub.holder(c) is not None for c in conversations] == [True, True, True]
        assert stopped == []
        await client.set(f"{prefix}{{c:{conversations[1]}}}:lease", "elsewhere:answer", px=5000)
        await eventually(lambda: stopped == [conversations[1]], timeout=3)
        assert hub.lease_mark(conversations[1]) is None
        assert hub.lease_mark(conversations[0]) is not None
        assert await hub.holder(conversations[1]) == "elsewhere:answer"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def test_redis_sends_an_instance_one_message_per_batch_for_every_conversation_it_shows(
    redis_url: str, redis_prefix: str
) -> None:
    """In Redis one batch reaches an instance as one pub/sub message on its own channel, holding the events of each conversation it shows; once it shows one no longer, that one's events stop going to it."""
    first, second = uuid.uuid4(), uuid.uuid4()
    sinks = Sink(), Sink()
    async with _two_hubs_and_a_spy(redis_url, redis_prefix) as (one, two, spy, listener):

        async def received() -> list[str]:
            """The conversation ids of the next message on the second instance's channel."""
            async with asyncio.timeout(5):
                message = None
                while message is None or message["type"] != "message":  # past the subscription's reply
                    message = await listener.get_message(timeout=5)
            return [block.partition("\n")[0] for block in message["data"].split("\r")]

        await listener.subscribe(f"{redis_prefix}i:{two.instance}")
        for conversation, sink in zip((first, second), sinks, strict=True):
            two.subscribe(conversation, sink)
            await two.last_seq(conversation)  # registered: no event is missed from here on
        one.publish(first, events.TextDelta("a"))
        one.publish(second, events.TextDelta("b"))
        one.publish(first, events.TextDelta("c"))
        await one.flush()
        assert sorted(await received()) == sorted([str(first), str(second)])
        await eventually(lambda: [len(sink.events) for sink in sinks] == [2, 1])

        two.unsubscribe(second, sinks[1])
        subscribers = f"{redis_prefix}{{c:{second}}}:subs"
        await eventually(lambda: _not_a_member(spy, subscribers, two.instance))
        one.publish(second, events.TextDelta("unseen"))
        one.publish(first, events.TextDelta("d"))
        await one.flush()
        assert await received() == [str(first)]
        await eventually(lambda: len(sinks[0].events) == 3)
        assert len(sinks[1].events) == 1


async def test_redis_hands_the_publishers_own_subscribers_its_events_without_a_message(
    redis_url: str, redis_prefix: str
) -> None:
    """In Redis the publishing instance hands its own subscribers their events from the publish script's reply, numbered as another instance gets them, and sends itself no pub/sub message."""
    conversation, message = uuid.uuid4(), uuid.uuid4()
    own, remote = Sink(), Sink()
    async with _two_hubs_and_a_spy(redis_url, redis_prefix) as (one, two, _, listener):
        await listener.subscribe(f"{redis_prefix}i:{one.instance}", f"{redis_prefix}i:{two.instance}")
        for hub, sink in ((one, own), (two, remote)):
            hub.subscribe(conversation, sink)
            await hub.last_seq(conversation)
        published = _answer(conversation, message, 10)
        for event in published:
            one.publish(conversation, event)
        await one.flush()
        # Handed out by the time the flush returns: no trip through pub/sub.
        assert len(own.events) == len(published)
        await eventually(lambda: len(remote.events) == len(published))
        assert [(e.seq, e.frame) for e in own.events] == [(e.seq, e.frame) for e in remote.events]
        assert own.events[0].event == published[0]
        assert own.events[-1].event == published[-1]
        channels: list[tuple[str, str]] = []
        async with asyncio.timeout(5):
            while len(channels) < 3:  # the two subscription replies, then the one message
                received = await listener.get_message(timeout=5)
                if received is not None:
                    channels.append((received["type"], received["channel"]))
        assert channels[-1] == ("message", f"{redis_prefix}i:{two.instance}")
        assert await listener.get_message(timeout=0.2) is None


async def test_redis_own_events_wait_for_another_instances_missed_ones_when_fetching_them_fails(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Redis, when an instance cannot fetch another's events that came before its own, its subscribers get its own events only after them, once a retry fetched them: never a gap."""
    conversation = uuid.uuid4()
    sink = Sink()
    async with _two_hubs_and_a_spy(redis_url, redis_prefix) as (one, two, spy, _):
        one.subscribe(conversation, sink)
        await one.last_seq(conversation)
        one.publish(conversation, events.TextDelta("a "))
        await one.flush()
        # The other instance's event reaches no message here (as if it were lost on the way).
        await spy.zrem(f"{redis_prefix}{{c:{conversation}}}:subs", one.instance)
        two.publish(conversation, events.TextDelta("b "))
        await two.flush()
        fetch = one._range
        failures: list[tuple[Any, ...]] = []

        async def fails_once(*args: Any, **kwargs: Any) -> list[HubEvent] | None:
            if not failures:
                failures.append(args)
                raise RedisConnectionError("Redis dropped the connection")
            return await fetch(*args, **kwargs)

        monkeypatch.setattr(one, "_range", fails_once)
        one.publish(conversation, events.TextDelta("c "))
        await one.flush()
        assert failures
        assert [f["content"] for f in _frames(sink)] == ["a "]
        await eventually(lambda: len(sink.events) == 3)
        assert [f["content"] for f in _frames(sink)] == ["a ", "b ", "c "]
        seqs = [e.seq for e in sink.events]
        assert seqs == list(range(seqs[0], seqs[0] + 3))


@contextlib.asynccontextmanager
async def running_hub(
    url: str, prefix: str = "p:", **options: Any
) -> AsyncIterator[tuple[RedisHub, aioredis.Redis]]:
    """A running hub on the Redis of `url` (made with `prefix` and `options`), and a client of the
    test's own, stopped and closed after."""
    client = redis_client(url)
    hub = RedisHub(client, encode, prefix=prefix, **options)
    task = await _running(hub)
    admin = aioredis.Redis.from_url(url)
    try:
        yield hub, admin
    finally:
        await _stopped([task], hub)
        for each in (client, admin):
            await each.aclose()


def _hub_on(
    own_redis: OwnRedis, **options: Any
) -> contextlib.AbstractAsyncContextManager[tuple[RedisHub, aioredis.Redis]]:
    """`running_hub` on `own_redis` (a pause the test leaves ends with the test's `redis-server`)."""
    return running_hub(own_redis.url, **options)


def texts_of(sink: Sink) -> list[str]:
    """The text of each delta `sink` was given, in order."""
    return [frame["content"] for frame in _frames(sink)]


async def _in_flight(hub: RedisHub, batches: int) -> None:
    await eventually(lambda: len(hub._publisher._in_flight) == batches)


async def _shown_then_paused(
    hub: RedisHub, admin: aioredis.Redis, conversation: uuid.UUID, sink: Sink
) -> None:
    """`sink` shows `conversation` on `hub`; then Redis holds every write (`CLIENT PAUSE WRITE`)."""
    hub.subscribe(conversation, sink)
    await hub.last_seq(conversation)
    await admin.client_pause(20000, all=False)  # CLIENT PAUSE 20000 WRITE


async def test_redis_writes_a_batch_while_the_one_before_waits_for_its_reply(own_redis: OwnRedis) -> None:
    """In Redis a batch is written while the one before it still waits for Redis's reply (Redis paused), and the subscribers get both, in the order published, once Redis answers."""
    conversation, sink = uuid.uuid4(), Sink()
    async with _hub_on(own_redis) as (hub, admin):
        await _shown_then_paused(hub, admin, conversation, sink)
        hub.publish(conversation, events.TextDelta("one "))
        await _in_flight(hub, 1)
        hub.publish(conversation, events.TextDelta("two "))
        await _in_flight(hub, 2)
        assert sink.events == []
        await admin.client_unpause()
        await eventually(lambda: len(sink.events) == 2)
        assert texts_of(sink) == ["one ", "two "]
        assert sink.events[1].seq == sink.events[0].seq + 1


async def test_redis_lost_with_batches_in_flight_sends_them_again_in_order(own_redis: OwnRedis) -> None:
    """In Redis, batches written but unanswered when Redis dies go back to the queue in the order written, ahead of what came after, and reach the subscribers in that order once Redis is back."""
    conversation, sink = uuid.uuid4(), Sink()
    async with _hub_on(own_redis) as (hub, admin):
        await _shown_then_paused(hub, admin, conversation, sink)
        for batch, word in enumerate(("one ", "two ", "three ")):
            hub.publish(conversation, events.TextDelta(word))
            await _in_flight(hub, batch + 1)
        own_redis.kill()
        hub.publish(conversation, events.TextDelta("four "))
        await eventually(lambda: not hub._publisher._in_flight)
        assert sink.events == []
        own_redis.start()
        await eventually(lambda: len(sink.events) == 4, timeout=10)
        assert texts_of(sink) == ["one ", "two ", "three ", "four "]
        seqs = [event.seq for event in sink.events]
        assert seqs == list(range(seqs[0], seqs[0] + 4))


async def test_redis_out_of_reach_keeps_at_most_the_bound_of_events_waiting(own_redis: OwnRedis) -> None:
    """In Redis, while Redis cannot be reached at all, events waiting to be sent stay bounded: past the bound they are dropped, and what comes after is sent once Redis is back."""
    conversation, sink = uuid.uuid4(), Sink()
    async with _hub_on(own_redis, max_queued_events=5) as (hub, _):
        hub.subscribe(conversation, sink)
        await hub.last_seq(conversation)
        own_redis.kill()
        for n in range(10):
            hub.publish(conversation, events.TextDelta(f"lost{n} "))
        await eventually(lambda: hub._publisher._queued_count == 0)
        own_redis.start()
        hub.publish(conversation, events.TextDelta("after "))
        await eventually(lambda: len(sink.events) == 1, timeout=10)
        assert texts_of(sink) == ["after "]


async def test_redis_answers_a_batch_sent_again_after_its_reply_was_lost_from_its_record(
    own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Redis a batch whose reply is lost after Redis ran it is sent again and answered from the record of that run, not run twice: its events are in the stream once and reach the subscribers once."""
    conversation, sink = uuid.uuid4(), Sink()
    async with _hub_on(own_redis) as (hub, _):
        hub.subscribe(conversation, sink)
        start = await hub.last_seq(conversation)
        hub.publish(conversation, events.TextDelta("one "))
        await eventually(lambda: len(sink.events) == 1)
        connection = hub._publisher._line._connection
        assert connection is not None
        read = connection.read_response

        async def read_then_lose(*args: Any, **kwargs: Any) -> Any:
            await read(*args, **kwargs)  # Redis ran the batch and answered
            monkeypatch.setattr(connection, "read_response", read)
            raise RedisConnectionError("the connection dropped before the reply was read")

        monkeypatch.setattr(connection, "read_response", read_then_lose)
        hub.publish(conversation, events.TextDelta("two "))
        await eventually(lambda: len(sink.events) == 2)
        assert hub._publisher._line._connection is not connection, "sent again on a new connection"
        await hub.flush()
        assert texts_of(sink) == ["one ", "two "]
        replayed = await hub.events_since(conversation, start)
        assert replayed is not None
        assert [orjson.loads(event.frame)["content"] for event in replayed] == ["one ", "two "]


async def _not_a_member(client: aioredis.Redis, key: str, member: str) -> bool:
    return await client.zscore(key, member) is None


async def test_a_batch_waits_for_nothing_but_redis_itself(redis_url: str, redis_prefix: str) -> None:
    """With a one-minute linger, an event published while nothing is on its way to Redis goes at once, and one published while a batch is on its way goes when that batch's reply is read: neither waits out the linger."""
    client = redis_client(redis_url)
    hub = RedisHub(client, encode, prefix=redis_prefix, linger=60.0)
    task = await _running(hub)
    conversation, sink = uuid.uuid4(), Sink()
    hub.subscribe(conversation, sink)
    try:
        first = _answer(conversation, uuid.uuid4(), 1)
        publisher = hub._publisher
        hub.publish(conversation, first[0])
        async with asyncio.timeout(5):  # no task in between: back before Redis's reply is read
            await publisher._sent.wait()  # nothing was on its way: it left at once
        assert publisher._in_flight
        assert not sink.events
        for event in first[1:]:
            hub.publish(conversation, event)  # gathered while the first batch is on its way
        assert publisher._queued_count == len(first) - 1
        await eventually(lambda: len(sink.events) == len(first), timeout=30)
        seqs = [event.seq for event in sink.events]
        assert seqs == list(range(seqs[0], seqs[0] + len(first)))
    finally:
        await _stopped([task], hub)
        await client.aclose()
