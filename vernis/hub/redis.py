"""The hub for several server instances, in Redis (SPEC §10): `RedisHub`, the `EventHub` of
`vernis.hub.base` with its state shared by every instance.

Keys, under the deployment's prefix `P` (`VERNIS_REDIS_PREFIX`), for a conversation `C`:

- `P{c:C}:seq`: the conversation's last `seq` (it starts from Redis's clock in microseconds, so it
  keeps growing when the key expires or Redis restarts, like the in-memory hub's);
- `P{c:C}:ev`: a stream, the replay window: one entry per event (`s` seq, `k` kind, `f` frame),
  trimmed by length and by age; with the other keys of the conversation, it lapses once no event
  came for longer than the replay window (an instance publishing to the conversation renews its
  keys at least every `RENEW_SECONDS`, and a renewal lasts the window, that interval and
  `CALL_SECONDS`);
- `P{c:C}:fl`: the answer in flight (`m` its message id, `s` the seq of its start);
- `P{c:C}:lease`: the one-answer lease, `<instance>:<owner>`, with an expiry renewed while the
  answer runs (`vernis.hub._redis_lease`); `P:running`: the conversations with an answer in flight
  (what the reaper checks);
- `P{c:C}:w`: who wrote to the conversation's messages last: the value of the last lease taken on
  it, or a one-off value after a write made without the lease (`touch`). An instance whose own
  lease was the last keeps using the conversation window it holds in memory; any other reads the
  window anew from the database (`unchanged`);
- `P{c:C}:subs`: the instances with a socket showing the conversation, scored by when their entry
  lapses unless renewed (`SUBSCRIBER_SECONDS`; each instance renews its own);
- the channel `P:i:<instance>` carries, live, the events of every conversation the instance shows;
  `P:ctl` requests to stop an answer.

Publishing (`vernis.hub._redis_pipeline`): `publish()` queues the event and returns; every few
milliseconds one call of the publish script (`lua/publish.lua`) sends the batch of every
conversation: it numbers the events, appends them to the streams, updates the in-flight records
(and releases the lease with an answer's end), then publishes to each other instance showing any of
them one pub/sub message holding all of their events (so live delivery and the replay agree on the
order, and an instance reads one message per batch, not one per conversation). The publishing
instance hands its own events to its own subscribers from the script's reply. Every instance drops
events it already delivered (by `seq`) and fetches a gap from the stream (an event of another
instance's that its pub/sub message has not brought yet, or a message lost to a reconnect).

An instance that dies mid-answer stops renewing its lease; within `REAP_SECONDS` plus the lease's
time to live another instance takes the lease, marks the stored partial answer failed and publishes
`error` + `assistant_end` (`on_orphan`).

Redis out of reach: taking a lease raises `Unavailable` (a new message gets `error unavailable`);
queued events are kept (bounded) and sent when Redis is back, none twice; the background loops retry.

The Lua scripts are the files of `lua/`, read once, at import.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from uuid import UUID

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from vernis.conversation import events
from vernis.exceptions import Unavailable
from vernis.hub._redis_lease import Leases
from vernis.hub._redis_pipeline import (
    CALL_SECONDS,
    LINGER_SECONDS,
    MAX_QUEUED_EVENTS,
    RENEW_SECONDS,
    Publisher,
    Queued,
    event_of,
    kind_of,
    read_window,
)
from vernis.hub.base import (
    REPLAY_MAX_EVENTS,
    REPLAY_SECONDS,
    Encoder,
    HubEvent,
    InFlight,
    Sink,
    StopHandler,
)
from vernis.store.redis import lua_script

__all__ = ["LEASE_SECONDS", "OrphanHandler", "RedisHub"]

logger = logging.getLogger("vernis.hub.redis")

# The answer lease's time to live; renewed every third of it while the answer runs.
LEASE_SECONDS = 10.0
# How often an instance looks for answers whose instance died (their lease lapsed).
REAP_SECONDS = 5.0
# How long an instance's entry among a conversation's subscribers lives; renewed every third of it.
SUBSCRIBER_SECONDS = 60.0
# How long a new subscriber waits to be registered before it is told Redis is unavailable.
SUBSCRIBE_SECONDS = 5.0

_PUBLISH = lua_script("vernis.hub", "publish")
_REGISTER = lua_script("vernis.hub", "register")
_UNREGISTER = lua_script("vernis.hub", "unregister")
_LAST_SEQ = lua_script("vernis.hub", "last_seq")
_UNLEASED = lua_script("vernis.hub", "unleased")

# (conversation id, message id of the orphaned answer) -> stores it failed and ends it for clients.
OrphanHandler = Callable[[UUID, UUID], Awaitable[None]]


class _Local:
    """This instance's subscribers of one conversation and how far they were delivered."""

    __slots__ = ("conversation_id", "delivered", "ready", "sinks")

    def __init__(self, conversation_id: UUID, loop: asyncio.AbstractEventLoop) -> None:
        self.conversation_id = conversation_id
        # A dict as an ordered set: adding or removing one of thousands of sinks is O(1).
        self.sinks: dict[Sink, None] = {}
        self.delivered: int | None = None
        # Resolved once this instance is among the conversation's subscribers in Redis: from then on
        # no event is missed.
        self.ready: asyncio.Future[None] = loop.create_future()


class RedisHub:
    """The hub of several instances, its state in Redis. `run()` must run for as long as the hub
    serves: it publishes, listens, renews leases and subscriptions, and ends orphaned answers."""

    def __init__(
        self,
        client: aioredis.Redis,
        encode: Encoder,
        *,
        prefix: str = "vernis:",
        replay_seconds: float = REPLAY_SECONDS,
        replay_max_events: int = REPLAY_MAX_EVENTS,
        lease_seconds: float = LEASE_SECONDS,
        reap_seconds: float = REAP_SECONDS,
        linger: float = LINGER_SECONDS,
        max_queued_events: int = MAX_QUEUED_EVENTS,
    ) -> None:
        self._redis = client
        self._encode = encode
        self._prefix = prefix
        self._replay_ms = str(int(replay_seconds * 1000))
        # A conversation's keys are renewed at least this often while events are published to it,
        # and each renewal keeps them long enough that every event outlives the replay window
        # (`vernis.hub._redis_pipeline`).
        renew_every = min(RENEW_SECONDS, replay_seconds / 10)
        keep_ms = str(int((replay_seconds + renew_every + CALL_SECONDS) * 1000))
        self._replay_max = str(replay_max_events)
        self._reap_seconds = reap_seconds
        self.instance = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._running_key = f"{prefix}running"
        self._publisher = Publisher(
            client,
            _PUBLISH,
            keys=[self._running_key],
            args=[self._replay_max, self._replay_ms, keep_ms, prefix, self.instance],
            deliver=self._deliver_own,
            renew_every=renew_every,
            linger=linger,
            max_queued=max_queued_events,
        )
        self._last_seq_script = client.register_script(_LAST_SEQ)
        self._unleased_script = client.register_script(_UNLEASED)
        self._register_script = client.register_script(_REGISTER)
        self._unregister_script = client.register_script(_UNREGISTER)
        self._subscriber_ms = str(int(SUBSCRIBER_SECONDS * 1000))
        self._local: dict[UUID, _Local] = {}
        # Conversations whose subscribers here wait for missed events to be fetched (`_fill_gap`).
        self._gaps: set[UUID] = set()
        # The same, by their ids as text: what a pub/sub message names (no id parsed per message).
        self._by_id: dict[str, _Local] = {}
        self._lease = Leases(client, self._key, instance=self.instance, lease_seconds=lease_seconds)
        self._stop_handlers: list[StopHandler] = []
        self._orphan_handlers: list[OrphanHandler] = []
        self._pubsub = client.pubsub()
        self._control = f"{prefix}ctl"
        # This instance's own channel: the events of the conversations it shows.
        self._inbox = f"{prefix}i:{self.instance}"
        # Set while this instance's channel is subscribed (Redis confirmed it): registrations wait.
        self._listening = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    # --- keys ------------------------------------------------------------------------------------

    def _key(self, conversation_id: UUID, suffix: str) -> str:
        return f"{self._prefix}{{c:{conversation_id}}}:{suffix}"

    # --- subscriptions ---------------------------------------------------------------------------

    def subscribe(self, conversation_id: UUID, sink: Sink) -> None:
        local = self._local.get(conversation_id)
        if local is None:
            local = self._local[conversation_id] = _Local(conversation_id, asyncio.get_running_loop())
            self._by_id[str(conversation_id)] = local
            self._background(self._subscribe(conversation_id, local))
        local.sinks[sink] = None

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """(Un)subscribing runs beside the caller, which must not wait; kept until done."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _subscribe(self, conversation_id: UUID, local: _Local) -> None:
        """Add this instance to the conversation's subscribers; from then on no event is missed."""
        try:
            async with asyncio.timeout(SUBSCRIBE_SECONDS):
                await self._listening.wait()
            await self._register([conversation_id])
        except (RedisError, OSError, TimeoutError) as exc:
            # Registered again by the listener when Redis is back.
            logger.warning("subscribing to a conversation failed: %r", exc)
            if not local.ready.done():
                local.ready.set_exception(Unavailable())
                local.ready.exception()  # retrieved: nobody may be waiting
            return
        if self._local.get(conversation_id) is local:
            self._subscribed(local)

    async def _register(self, conversation_ids: list[UUID]) -> None:
        for start in range(0, len(conversation_ids), 1000):
            await self._register_script(
                args=[
                    self._prefix,
                    self.instance,
                    self._subscriber_ms,
                    *map(str, conversation_ids[start : start + 1000]),
                ]
            )

    def unsubscribe(self, conversation_id: UUID, sink: Sink) -> None:
        local = self._local.get(conversation_id)
        if local is None:
            return
        local.sinks.pop(sink, None)
        if not local.sinks:
            del self._local[conversation_id]
            del self._by_id[str(conversation_id)]
            self._background(self._unsubscribe(conversation_id))

    async def _unsubscribe(self, conversation_id: UUID) -> None:
        if conversation_id in self._local:  # subscribed again meanwhile
            return
        try:
            await self._unregister_script(args=[self._prefix, self.instance, str(conversation_id)])
        except (RedisError, OSError) as exc:  # its entry lapses by itself
            logger.warning("unsubscribing from a conversation failed: %r", exc)

    # --- publishing ------------------------------------------------------------------------------

    def publish(self, conversation_id: UUID, event: events.Event) -> None:
        frame = self._encode(event, 0)
        kind, extra = kind_of(event)
        if kind == "e":
            extra = self._lease.ending(conversation_id)
        self._publisher.queue(conversation_id, kind, extra, frame, event)

    async def flush(self) -> None:
        """Send every queued event now, and wait until every batch sent is handed out here."""
        await self._publisher.flush()

    # --- live delivery ---------------------------------------------------------------------------

    async def _listen(self) -> None:
        """Deliver pub/sub messages to this instance's subscribers; reconnect when Redis drops, then
        catch up on what each shown conversation missed meanwhile."""
        reconnected = False
        while True:
            try:
                await self._pubsub.subscribe(self._control, self._inbox)
                # Read from the subscription's connection directly: redis-py's `listen()` wraps
                # each message in its retry and observability layers and a dict, work done per
                # message for nobody. A lost connection raises here, and the loop reconnects.
                pubsub = self._pubsub
                connection = pubsub.connection
                assert connection is not None  # made by the first subscribe
                read = connection.read_response
                while True:
                    await pubsub.check_health()  # a PING now and then, as `listen()` sends
                    response = await read(timeout=math.inf, disconnect_on_error=False, push_request=True)
                    kind, channel = response[0], response[1]
                    if kind == "message":
                        if channel == self._control:
                            self._control_message(response[2])
                        else:
                            await self._deliver(response[2])
                        continue
                    # (Un)subscription replies: redis-py keeps its record of the subscriptions.
                    await pubsub.handle_message(response)
                    if kind == "subscribe" and channel == self._inbox:
                        self._listening.set()
                        self._background(self._resubscribe(catch_up=reconnected))
                        reconnected = False
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                self._listening.clear()
                reconnected = True
                logger.warning("Redis pub/sub lost (%r); reconnecting", exc)
                await asyncio.sleep(0.5)
                with contextlib.suppress(RedisError, OSError):
                    await self._pubsub.aclose()  # type: ignore[no-untyped-call]
                self._pubsub = self._redis.pubsub()
            except Exception:  # a bug here must not end live delivery for good
                logger.exception("delivering Redis events failed; reconnecting")
                self._listening.clear()
                reconnected = True
                await asyncio.sleep(0.5)
                with contextlib.suppress(Exception):
                    await self._pubsub.aclose()  # type: ignore[no-untyped-call]
                self._pubsub = self._redis.pubsub()

    async def _resubscribe(self, *, catch_up: bool) -> None:
        """(Re)connected: register every conversation shown here (Redis may have lost the entries, or
        they lapsed meanwhile) and, after a loss, deliver what each missed."""
        shown = list(self._local.items())
        try:
            await self._register([conversation_id for conversation_id, _ in shown])
        except (RedisError, OSError) as exc:
            logger.warning("registering the conversations shown failed (%r); the listener retries", exc)
            return
        for conversation_id, local in shown:
            if self._local.get(conversation_id) is not local:
                continue
            self._subscribed(local)
            if catch_up and local.delivered is not None:
                with contextlib.suppress(RedisError, OSError):
                    await self._catch_up(conversation_id, local, None)

    async def _renew_subscriptions(self) -> None:
        """Keep this instance's entries among its conversations' subscribers from lapsing (and
        register any whose registration failed)."""
        while True:
            await asyncio.sleep(SUBSCRIBER_SECONDS / 3)
            if self._listening.is_set():
                await self._resubscribe(catch_up=False)

    def _subscribed(self, local: _Local) -> None:
        if local.ready.done():
            if local.ready.exception() is not None:  # failed while Redis was away; now it is back
                local.ready = asyncio.get_running_loop().create_future()
                local.ready.set_result(None)
        else:
            local.ready.set_result(None)

    def _control_message(self, data: str) -> None:
        command, _, argument = data.partition("\t")
        if command == "stop":
            self._stop_here(UUID(argument))

    def _stop_here(self, conversation_id: UUID) -> None:
        for handler in self._stop_handlers:
            handler(conversation_id)

    async def _deliver(self, data: str) -> None:
        """One batch's events for this instance: a block per conversation, its id on the first line."""
        now = time.monotonic()
        for block in data.split("\r"):
            conversation, _, lines = block.partition("\n")
            local = self._by_id.get(conversation)
            if local is None:
                continue
            items = []
            for line in lines.split("\n"):
                seq_text, kind, frame = line.split("\t", 2)
                # A live delta goes on as its frame: nobody here reads it (a resume reads the stream).
                items.append(
                    HubEvent(int(seq_text), frame, None if kind == "d" else event_of(kind, frame), now)
                )
            if local.delivered is not None and items[0].seq > local.delivered + 1:
                await self._catch_up(local.conversation_id, local, items[0].seq)
            self._hand_out(local, items)

    async def _deliver_own(self, batches: dict[UUID, Queued], firsts: list[int]) -> None:
        """This instance's own events, numbered, to its own subscribers (no pub/sub message)."""
        now = time.monotonic()
        for (conversation_id, queued), first in zip(batches.items(), firsts, strict=True):
            local = self._local.get(conversation_id)
            if local is None:
                continue
            items = [
                HubEvent(seq, f"{head}{seq}}}" if has_seq else head, event, now)
                for seq, (head, has_seq, event) in enumerate(queued.frames, first)
            ]
            if local.delivered is not None and first > local.delivered + 1:
                # Another instance's events came between, and its message is not here yet.
                try:
                    await self._catch_up(conversation_id, local, first)
                except (RedisError, OSError) as exc:
                    # Not handed out past the gap: the stream has them all, in order, for the retry.
                    logger.warning("fetching events another instance published failed (%r); retrying", exc)
                    self._fill_gap(conversation_id, local)
                    continue
            self._hand_out(local, items)

    def _fill_gap(self, conversation_id: UUID, local: _Local) -> None:
        """Deliver, from the stream, what followed `local.delivered`, retrying until Redis answers
        (or nobody here shows the conversation any more); one retry per conversation at a time."""
        if conversation_id in self._gaps:
            return
        self._gaps.add(conversation_id)

        async def fill() -> None:
            try:
                while self._local.get(conversation_id) is local:
                    await asyncio.sleep(0.5)
                    try:
                        await self._catch_up(conversation_id, local, None)
                        return
                    except (RedisError, OSError) as exc:
                        logger.warning("fetching missed events failed (%r); retrying", exc)
            finally:
                self._gaps.discard(conversation_id)

        self._background(fill())

    async def _catch_up(self, conversation_id: UUID, local: _Local, before: int | None) -> None:
        """Deliver events missed between what was delivered and `before` (a lost message)."""
        assert local.delivered is not None
        missed = await self._range(conversation_id, local.delivered, partial=True)
        if missed is not None:
            self._hand_out(local, [e for e in missed if before is None or e.seq < before])

    @staticmethod
    def _hand_out(local: _Local, items: list[HubEvent]) -> None:
        for item in items:
            if local.delivered is not None and item.seq <= local.delivered:
                continue
            local.delivered = item.seq
            for sink in tuple(local.sinks):
                sink.deliver(item)

    # --- reading shared state --------------------------------------------------------------------

    async def last_seq(self, conversation_id: UUID) -> int:
        local = self._local.get(conversation_id)
        if local is not None:
            try:
                await asyncio.wait_for(asyncio.shield(local.ready), timeout=SUBSCRIBE_SECONDS)
            except TimeoutError:
                raise Unavailable() from None
        seq = int(
            await self._call(
                self._last_seq_script(keys=[self._key(conversation_id, "seq")], args=[self._replay_ms])
            )
        )
        if local is not None and local.delivered is None:
            local.delivered = seq
        return seq

    async def in_flight(self, conversation_id: UUID) -> InFlight | None:
        record = await self._call(self._redis.hgetall(self._key(conversation_id, "fl")))
        if not record:
            return None
        return InFlight(UUID(record["m"]), int(record["s"]))

    async def events_since(self, conversation_id: UUID, after_seq: int) -> list[HubEvent] | None:
        found: list[HubEvent] | None = await self._call(self._range(conversation_id, after_seq))
        return found

    def _range(
        self, conversation_id: UUID, after_seq: int, *, partial: bool = False
    ) -> Awaitable[list[HubEvent] | None]:
        seq_key, stream_key = self._key(conversation_id, "seq"), self._key(conversation_id, "ev")
        return read_window(self._redis, seq_key, stream_key, after_seq, partial=partial)

    # --- stop, from any instance -----------------------------------------------------------------

    def on_stop(self, handler: StopHandler) -> None:
        self._stop_handlers.append(handler)

    def on_orphan(self, handler: OrphanHandler) -> None:
        self._orphan_handlers.append(handler)

    async def request_stop(self, conversation_id: UUID) -> None:
        await self._call(self._redis.publish(self._control, f"stop\t{conversation_id}"))

    # --- the answer lease ------------------------------------------------------------------------

    async def try_acquire(self, conversation_id: UUID, owner: str) -> bool:
        taken: bool = await self._call(self._lease.acquire(conversation_id, owner))
        return taken

    def lease_mark(self, conversation_id: UUID) -> str | None:
        return self._lease.mark(conversation_id)

    def unchanged(self, conversation_id: UUID, mark: str | None) -> bool:
        return self._lease.unchanged(conversation_id, mark)

    async def touch(self, conversation_id: UUID) -> None:
        await self._lease.touch(conversation_id)

    async def release(self, conversation_id: UUID, owner: str) -> None:
        await self._lease.release(conversation_id, owner)

    async def holder(self, conversation_id: UUID) -> str | None:
        value: str | None = await self._call(self._lease.holder(conversation_id))
        return value

    async def _reap(self) -> None:
        """End the answers of instances that died: their lease lapsed while still in flight."""
        while True:
            await asyncio.sleep(self._reap_seconds)
            try:
                await self.reap_once()
            except (RedisError, OSError) as exc:
                logger.warning("looking for interrupted answers failed (%r)", exc)
            except Exception:
                logger.exception("ending an interrupted answer failed")

    async def reap_once(self) -> int:
        ended = 0
        for member in await self._unleased_script(keys=[self._running_key], args=[self._prefix]):
            conversation_id = UUID(str(member))
            owner = f"reaper-{uuid.uuid4().hex}"
            if not await self.try_acquire(conversation_id, owner):
                continue
            try:
                record = await self._redis.hgetall(self._key(conversation_id, "fl"))
                if not record:
                    await self._redis.srem(self._running_key, member)
                    continue
                logger.warning("an answer's instance stopped mid-answer; ending it as failed")
                for handler in self._orphan_handlers:
                    await handler(conversation_id, UUID(str(record["m"])))
                ended += 1
            finally:
                await self.release(conversation_id, owner)
        return ended

    # --- upkeep ----------------------------------------------------------------------------------

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._publisher.run_sender(), name="redis hub publisher"),
            asyncio.create_task(self._publisher.run_receiver(), name="redis hub publisher's replies"),
            asyncio.create_task(self._listen(), name="redis hub listener"),
            asyncio.create_task(self._lease.run_renewal(self._stop_here), name="redis hub lease renewal"),
            asyncio.create_task(self._reap(), name="redis hub reaper"),
            asyncio.create_task(self._renew_subscriptions(), name="redis hub subscriptions"),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_listening(self) -> None:
        await self._listening.wait()

    async def aclose(self) -> None:
        background = tuple(self._tasks)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self._publisher.aclose()
        if self._local:  # others stop sending here now, not when the entries lapse
            with contextlib.suppress(RedisError, OSError):
                await self._unregister_script(args=[self._prefix, self.instance, *map(str, self._local)])
        with contextlib.suppress(RedisError, OSError):
            await self._pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _call(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except (RedisError, OSError) as exc:
            logger.warning("Redis unreachable: %r", exc)
            raise Unavailable() from exc
