"""The Redis hub's publisher: it takes the events `RedisHub.publish()` queues and sends them to Redis
in batches, each batch one call of the publish script (`lua/publish.lua`).

Publishing stays off the per-delta critical path: `queue()` appends to the batch being gathered and
returns; one call sends the events of every conversation in it. A batch leaves in the loop's next
turn when no batch is on its way to Redis (an event waits for nothing but Redis itself), else once
the reply of the last one is read, or `linger` after its first event, whichever comes first: the
busier Redis, the larger the batches, with no fixed wait when it is not. The script numbers the
events, keeps them for replay and relays them to the other instances; its reply, the first `seq`
it gave each conversation's events, is handed to `deliver`, so the publishing instance gives its
own subscribers their events from the frames it holds (they make no second trip through Redis).

A batch is written without waiting for the reply of the one before (Redis runs the calls in the
order written, at most `MAX_IN_FLIGHT` unanswered), on a connection of the publisher's own; the
replies are read, and handed out, in that order.

Frames are encoded once, before their `seq` is known: a frame that takes one ends with `"seq":0}`,
and the script completes it with the seq it gives.

A conversation's keys in Redis expire unless renewed, and renewing them (and trimming its stream by
age) costs the script a few calls: so a batch asks for it only for the conversations this publisher
has not renewed for `renew_every` seconds (and a batch sent again, for all of its conversations).
Each renewal keeps the keys `keep` seconds; given `keep` of at least the replay window plus
`renew_every` plus `CALL_SECONDS` (a call that takes longer fails, and its batch is sent again),
every event stays in Redis for at least the replay window after it was published.

Redis out of reach: queued events are kept, at most `max_queued` (beyond that every waiting event
is dropped, and logged), and sent when Redis is back, after the batches that were written but not
answered when the connection failed: those are sent again as they were, under their numbers, in
the order they were made, and one Redis had run already is answered from the record the script
kept of its reply (not run twice).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import cast
from uuid import UUID

import orjson
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError

from vernis.conversation import events
from vernis.hub.base import HubEvent

__all__ = [
    "CALL_SECONDS",
    "LINGER_SECONDS",
    "MAX_IN_FLIGHT",
    "MAX_QUEUED_EVENTS",
    "RENEW_SECONDS",
    "Deliver",
    "Publisher",
    "Queued",
    "event_of",
    "kind_of",
    "read_window",
]

logger = logging.getLogger("vernis.hub.redis")

# How long one call of the publish script may take, its send and its reply together.
CALL_SECONDS = 5.0
# Conversation ids kept as text for the next batches, at most (then forgotten, all at once).
MAX_IDS_KEPT = 10_000
# Batches written to Redis whose replies are not read yet, at most.
MAX_IN_FLIGHT = 8
# How long a batch of published events waits for more before it is sent (at most ~20 ms: SPEC §10).
LINGER_SECONDS = 0.005
# Events kept while Redis is out of reach; beyond that they are dropped (and logged).
MAX_QUEUED_EVENTS = 100_000
# How often, at most, the keys of a conversation this instance publishes to are renewed (at most a
# tenth of the replay window: see `RedisHub`).
RENEW_SECONDS = 30.0
_SEQ_TAIL = ',"seq":0}'


def kind_of(event: events.Event) -> tuple[str, str]:
    """The event's kind in a batch and in the stream, and its extra (a start's message id)."""
    if type(event) is events.TextDelta:
        return "d", ""
    if isinstance(event, events.AnswerStarted):
        return "s", str(event.message_id)
    if isinstance(event, events.AnswerEnded):
        return "e", ""
    return "o", ""


def event_of(kind: str, frame: str) -> events.Event | None:
    """The typed event a subscriber may need back from a relayed frame (deltas, starts, ends)."""
    if kind == "o":
        return None
    data = orjson.loads(frame)
    if kind == "d":
        return events.TextDelta(data["content"])
    if kind == "s":
        return events.AnswerStarted(
            UUID(data["conversation_id"]), UUID(data["message_id"]), continues=data.get("continues")
        )
    return events.AnswerEnded(
        UUID(data["conversation_id"]), UUID(data["message_id"]), bool(data["stopped"]), data.get("model")
    )


async def read_window(
    client: aioredis.Redis, seq_key: str, stream_key: str, after_seq: int, *, partial: bool = False
) -> list[HubEvent] | None:
    """A conversation's kept events after `after_seq`, from its seq and its stream, or None when the
    window does not reach back to it (with `partial`, what it does reach: Redis lost its data, and
    that is all there is)."""
    last = await client.get(seq_key)
    if last is None or (after_seq > int(last) and not partial):
        return None
    if after_seq == int(last):
        return []
    # Newest first, a page at a time, back to the first wanted seq.
    found: list[HubEvent] = []
    upper = "+"
    now = time.monotonic()
    while True:
        page = cast(
            list[tuple[str, dict[str, str]]],
            await client.xrevrange(stream_key, max=upper, min="-", count=500),
        )
        if not page:
            # The stream's start: complete if its first event is the first one wanted (the
            # conversation's first events), else the window no longer reaches back that far.
            found.reverse()
            return found if (partial or (found and found[0].seq == after_seq + 1)) else None
        for _, fields in page:
            seq = int(fields["s"])
            if seq <= after_seq:
                found.reverse()
                return found if (partial or not found or found[0].seq == after_seq + 1) else None
            found.append(HubEvent(seq, fields["f"], event_of(fields["k"], fields["f"]), now))
        last_id = page[-1][0]
        millis, _, counter = last_id.partition("-")
        if int(counter) > 0:
            upper = f"{millis}-{int(counter) - 1}"
        elif int(millis) > 0:
            upper = f"{int(millis) - 1}-{2**63 - 1}"
        else:
            return found[::-1] if partial else None


class _Known:
    """What the publisher keeps of a conversation between batches: its id as text (not made anew
    for every batch) and when it last asked for its keys to be renewed (monotonic)."""

    __slots__ = ("renewed", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.renewed = -math.inf


class Queued:
    """One conversation's events waiting for the next batch: as the publish script takes them (its
    id first), and as this instance hands them to its own subscribers once they are numbered (the
    frame, without its seq when it takes one, and the event, kept for any but a delta)."""

    __slots__ = ("frames", "known", "lines")

    def __init__(self, known: _Known) -> None:
        self.known = known
        self.lines = [known.text]
        self.frames: list[tuple[str, bool, events.Event | None]] = []


# Hands a batch's events to this instance's own subscribers: the batch's conversations and their
# queued events, and the first seq given to each one's events, in the same order.
Deliver = Callable[[dict[UUID, Queued], list[int]], Awaitable[None]]


class _Line:
    """The publisher's connection of its own: its calls of the publish script are written one after
    the other without waiting for the replies of those before (Redis runs them and answers in the
    order written), and the replies are read in that order.

    Each call is `EVALSHA`, the script named by its digest: the connection loads the script
    (`SCRIPT LOAD`) when it is made, before its first call. Sending the text with every call
    (`EVAL`) cost both sides a copy of its 4 KB and Redis a digest of it, and the paced load's
    latency in Redis mode (`bench/results/2026-11-server.md`, session 22). A Redis that forgot its
    scripts since (flushed them; a restart drops the connection anyway) answers "no such script",
    having run nothing: the call fails like a lost connection, and its batches, with those written
    after them, go again on a new connection, which loads the script first.

    Not a connection of the pool, and without redis-py's socket timeout, for what each would add to
    every call: the blocking pool's checkout (its condition, its lock, its timing records) costs
    about what the call itself does; and with a socket timeout redis-py sends each command in a task
    of its own (`asyncio.wait_for`), which adds turns of the event loop to every call. On a loop near
    its limit a turn lasts milliseconds, and every event of the batch waits for them. Connecting,
    writing and reading are bounded by `asyncio.timeout` (`CALL_SECONDS`) instead.
    """

    def __init__(self, client: aioredis.Redis, script: str, head: tuple[str, ...], tail: int) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._connection_kwargs = {**pool.connection_kwargs, "socket_timeout": None}
        # Every call is `EVALSHA digest *head *tail` (`tail` arguments of its own): what is the same
        # in every call is packed once, as the protocol has it.
        self._script = script
        digest = hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()
        self._packed_head = b"".join(
            [
                b"*%d\r\n" % (2 + len(head) + tail),
                *(_bulk(part.encode()) for part in ("EVALSHA", digest, *head)),
            ]
        )
        self._tail = tail
        self._connection: AbstractConnection | None = None

    @property
    def lost(self) -> AbstractConnection | None:
        """The connection, if it was lost (redis-py closed it after an error) but not yet forgotten."""
        connection = self._connection
        return connection if connection is not None and not connection.is_connected else None

    async def connect(self) -> AbstractConnection:
        """The connection, made if there is none. One connection is connected once: a lost one is
        forgotten, never connected again (the replies of the calls written on it are gone)."""
        connection = self._connection
        if connection is None:
            connection = self._connection = self._connection_class(**self._connection_kwargs)
            try:
                async with asyncio.timeout(CALL_SECONDS):
                    await connection.connect()  # type: ignore[no-untyped-call]
                    # In Redis's cache before the first call written here, which names it by digest.
                    await connection.send_command("SCRIPT", "LOAD", self._script, check_health=False)
                    await connection.read_response(timeout=math.inf)
            except BaseException:
                await self.forget(connection)
                raise
        return connection

    def holds(self, connection: AbstractConnection) -> bool:
        """Whether `connection` is the line's, and connected (not failed, not closed by redis-py)."""
        return connection is self._connection and connection.is_connected

    async def write(self, connection: AbstractConnection, *tail: str) -> None:
        assert len(tail) == self._tail
        packed = [self._packed_head, *(_bulk(part.encode()) for part in tail)]
        async with asyncio.timeout(CALL_SECONDS):  # only waits when Redis stops reading
            await connection.send_packed_command(packed, check_health=False)

    async def forget(self, connection: AbstractConnection) -> None:
        """Drop `connection` (failed: what it was doing is unknown); the next call connects anew."""
        if self._connection is connection:
            self._connection = None
        await connection.disconnect(nowait=True)

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.disconnect()


def _bulk(value: bytes) -> bytes:
    """`value` as a bulk string of the Redis protocol."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


class _Sent:
    """A batch written to Redis on `connection` (set by each write) whose reply is not read yet, or,
    once that connection failed before the reply came, to be written again as it was, under its
    number.

    The whole batch is one argument of the call, whatever it holds: the client packs each argument
    in Python, copying its buffer, so a call's cost must not grow with its conversations."""

    __slots__ = ("again", "batches", "connection", "count", "number", "payload")
    connection: AbstractConnection

    def __init__(self, batches: dict[UUID, Queued], count: int, number: int) -> None:
        self.batches = batches
        self.count = count
        self.number = number
        self.again = False  # sent again: it renews the keys of all of its conversations
        self.payload = "\r".join(["\n".join(queued.lines) for queued in batches.values()])


class Publisher:
    """Sends queued events to Redis in batches, each a call of `script` with `keys` and `args`,
    then the batch, its number and whether it renews the keys of all of its conversations
    (`lua/publish.lua`); it asks for a conversation's keys to be renewed every `renew_every`
    seconds (see the module's docstring). `run_sender()` and `run_receiver()` are its two loops,
    run by the hub for as long as it runs."""

    def __init__(
        self,
        client: aioredis.Redis,
        script: str,
        *,
        keys: list[str],
        args: list[str],
        deliver: Deliver,
        renew_every: float = RENEW_SECONDS,
        linger: float = LINGER_SECONDS,
        max_queued: int = MAX_QUEUED_EVENTS,
    ) -> None:
        self._line = _Line(client, script, (str(len(keys)), *keys, *args), 3)
        self._deliver = deliver
        self._renew_every = renew_every
        # The conversations published to lately (at most MAX_IDS_KEPT, then forgotten all at once:
        # a forgotten one is renewed the next time, never too late).
        self._known: dict[UUID, _Known] = {}
        self._linger = linger
        self._max_queued = max_queued
        # Events waiting for the next batch, per conversation.
        self._queued: dict[UUID, Queued] = {}
        self._queued_count = 0
        # Set when the batch being gathered is due (see the module's docstring), or to retry.
        self._wake = asyncio.Event()
        self._due: asyncio.Handle | None = None
        # Batches written to Redis, oldest first, whose replies are not read yet.
        self._in_flight: collections.deque[_Sent] = collections.deque()
        # Batches to write again (their connection failed before their replies came), oldest first.
        self._again: collections.deque[_Sent] = collections.deque()
        # The number of the last batch made here (the publish script's record of it).
        self._numbered = 0
        self._sending = asyncio.Lock()
        self._reading = asyncio.Lock()
        # Set while a batch is in flight (the receiver waits for one); set when one leaves it.
        self._sent = asyncio.Event()
        self._progress = asyncio.Event()

    def queue(self, conversation_id: UUID, kind: str, extra: str, frame: str, event: events.Event) -> None:
        """Add an event to the batch being gathered: its kind and extra (`kind_of`; an end's extra is
        the lease it releases, or ''), its frame encoded with seq 0. Never blocks."""
        if frame.endswith(_SEQ_TAIL):
            head, has_seq = frame[:-2], "1"
        else:
            head, has_seq = frame, "0"
        queued = self._queued.get(conversation_id)
        if queued is None:
            known = self._known.get(conversation_id)
            if known is None:
                if len(self._known) >= MAX_IDS_KEPT:
                    self._known.clear()
                known = self._known[conversation_id] = _Known(str(conversation_id))
            queued = self._queued[conversation_id] = Queued(known)
        queued.lines.append(f"{kind}\t{extra}\t{has_seq}\t{head}")
        queued.frames.append((head, has_seq == "1", None if kind == "d" else event))
        self._queued_count += 1
        if self._due is None:
            # A callback, not the sender waking to sleep out the linger: when it is due the sender
            # writes in the loop's next turn (waking first, then sleeping, takes two).
            loop = asyncio.get_running_loop()
            if self._in_flight:
                self._due = loop.call_later(self._linger, self._ripe)
            else:
                self._due = loop.call_soon(self._ripe)

    def _ripe(self) -> None:
        self._due = None
        self._wake.set()

    async def flush(self) -> None:
        """Send every queued event now, and wait until every batch sent is handed out here."""
        await self._send()
        while self._in_flight:
            await self._receive()

    async def run_sender(self) -> None:
        while True:
            await self._wake.wait()
            while len(self._in_flight) >= MAX_IN_FLIGHT:
                self._progress.clear()
                await self._progress.wait()
            self._wake.clear()
            try:
                await self._send()
            except (RedisError, OSError) as exc:
                logger.warning("publishing to Redis failed (%r); retrying", exc)
                await asyncio.sleep(0.5)
                self._wake.set()
            except Exception:  # a bug here must not end publishing for good
                logger.exception("publishing to Redis failed")
                await asyncio.sleep(0.5)
                self._wake.set()

    async def run_receiver(self) -> None:
        while True:
            await self._sent.wait()
            try:
                await self._receive()
            except (RedisError, OSError) as exc:  # kept for the sender's next try
                logger.warning("publishing to Redis failed (%r); retrying", exc)
            except Exception:  # a bug here must not end publishing for good
                logger.exception("publishing to Redis failed")
                await asyncio.sleep(0.5)

    async def aclose(self) -> None:
        """Send what is queued (if Redis answers) and close the connection."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        with contextlib.suppress(RedisError, OSError):
            await self.flush()
        await self._line.close()

    async def _send(self) -> None:
        """Write the batches to send again, then the queued events as one new batch, each as one call
        of the publish script, without waiting for the reply of a batch written before (`_receive`
        reads the replies, in order)."""
        async with self._sending:
            if not self._queued and not self._again:
                return
            lost = self._line.lost
            if lost is not None:
                await self._fail(lost)
            try:
                connection = await self._line.connect()
            except BaseException:
                self._bound()  # Redis out of reach: what waits must stay bounded meanwhile
                raise
            while self._again:
                await self._write(connection, self._again.popleft())
            if self._queued:
                batches, self._queued = self._queued, {}
                count, self._queued_count = self._queued_count, 0
                self._numbered += 1
                self._ask_renewals(batches)
                await self._write(connection, _Sent(batches, count, self._numbered))

    def _ask_renewals(self, batches: dict[UUID, Queued]) -> None:
        """Mark, in the batch, the conversations whose keys were not renewed for `renew_every`."""
        now = time.monotonic()
        due = now - self._renew_every
        for queued in batches.values():
            if queued.known.renewed <= due:
                queued.known.renewed = now
                queued.lines[0] += "\t1"

    async def _write(self, connection: AbstractConnection, sent: _Sent) -> None:
        # In flight from now on: if the write fails, it is sent again in its place.
        sent.connection = connection
        self._in_flight.append(sent)
        self._sent.set()
        try:
            if not self._line.holds(connection):
                # Failed (by the receiver) while the batches before this one were written: redis-py
                # would connect it anew, and batches on two connections may run out of order.
                raise ConnectionError("the connection to Redis was lost")
            await self._line.write(connection, sent.payload, str(sent.number), "1" if sent.again else "0")
        except BaseException:
            await self._fail(connection)
            raise

    async def _receive(self) -> None:
        """Read the reply of the oldest batch in flight and hand its events to the subscribers here."""
        async with self._reading:
            if not self._in_flight:
                self._sent.clear()
                return
            sent = self._in_flight[0]
            try:
                async with asyncio.timeout(CALL_SECONDS):
                    firsts: list[int] = await sent.connection.read_response(timeout=math.inf)
            except BaseException:
                await self._fail(sent.connection)
                raise
            if not self._in_flight or self._in_flight[0] is not sent:  # failed meanwhile: queued again
                return
            self._in_flight.popleft()
            if not self._in_flight:
                self._sent.clear()
                if self._due is not None:  # the batch gathered meanwhile goes now
                    self._due.cancel()
                    self._ripe()
            self._progress.set()
            await self._deliver(sent.batches, firsts)

    async def _fail(self, connection: AbstractConnection) -> None:
        """`connection` failed: every batch in flight on it is to be sent again, as it was, with the
        ones waiting to be, in the order they were made (their numbers), ahead of anything queued
        since. Whether Redis ran them is unknown: a batch it ran returns its recorded reply and is
        not run again. Bounded, with the queue."""
        failed = [sent for sent in self._in_flight if sent.connection is connection]
        for sent in failed:
            sent.again = True
        if failed:
            self._in_flight = collections.deque(s for s in self._in_flight if s.connection is not connection)
            if not self._in_flight:
                self._sent.clear()
            self._progress.set()
            self._again = collections.deque(sorted([*failed, *self._again], key=lambda sent: sent.number))
            self._bound()
            self._wake.set()
        await self._line.forget(connection)

    def _bound(self) -> None:
        """Drop every event waiting to be sent once there are more than `max_queued`."""
        waiting = self._queued_count + sum(sent.count for sent in self._again)
        if waiting > self._max_queued:
            logger.error("Redis unreachable: dropping %d queued events", waiting)
            self._again.clear()
            self._queued, self._queued_count = {}, 0
