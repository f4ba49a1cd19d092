"""The hub, the lease and the limits shared by several server instances, in Redis (SPEC §10).

Keys, under the deployment's prefix `P` (`VERNIS_REDIS_PREFIX`), for a conversation `C`:

- `P{c:C}:seq`: the conversation's last `seq` (it starts from Redis's clock in microseconds, so it
  keeps growing when the key expires or Redis restarts, like the in-memory hub's);
- `P{c:C}:ev`: a stream, the replay window: one entry per event (`s` seq, `k` kind, `f` frame),
  trimmed by length and by age, expiring with the conversation's last event;
- `P{c:C}:fl`: the answer in flight (`m` its message id, `s` the seq of its start);
- `P{c:C}:lease`: the one-answer lease, `<instance>:<owner>`, with an expiry renewed while the
  answer runs; `P:running`: the conversations with an answer in flight (what the reaper checks);
- `P{c:C}:w`: who wrote to the conversation's messages last: the value of the last lease taken on
  it, or a one-off value after a write made without the lease (`touch`). An instance whose own
  lease was the last keeps using the conversation window it holds in memory; any other reads the
  window anew from the database (`unchanged`);
- `P{c:C}:subs`: the instances with a socket showing the conversation, scored by when their entry
  lapses unless renewed (`SUBSCRIBER_SECONDS`; each instance renews its own);
- the channel `P:i:<instance>` carries, live, the events of every conversation the instance shows;
  `P:ctl` requests to stop an answer.

Publishing stays off the per-delta critical path: `publish()` appends to a local batch and returns;
every few milliseconds (`linger`) one call of a Lua script sends the batch of every conversation:
for each, atomically, it numbers the events, appends them to the stream, updates the in-flight
record (and releases the lease with an answer's end); then it publishes to each other instance
showing any of them one pub/sub message holding all of their events (so live delivery and the replay
agree on the order, and an instance reads one message per batch, not one per conversation: parsing a
message per conversation was most of what reading pub/sub cost). The script returns the first `seq`
it gave each conversation's events, and the publisher hands its own events to its own subscribers
from that reply: the frames are here already, so they make no second trip through Redis. A batch is
written without waiting for the reply of the one before (Redis runs them in the order written), on
a connection of the publisher's own; the replies are read, and handed out, in that order. Every
instance drops events it already delivered (by `seq`) and fetches a gap from the stream (an event
of another instance's that its pub/sub message has not brought yet, or a message lost to a
reconnect).

Frames are encoded once, before their `seq` is known: each frame's encoding ends with `"seq":0}`,
which the script replaces with the seq it assigns.

An instance that dies mid-answer stops renewing its lease; within `REAP_SECONDS` plus the lease's
time to live another instance takes the lease, marks the stored partial answer failed and publishes
`error` + `assistant_end` (`on_orphan`).

Redis out of reach: taking a lease raises `Unavailable` (a new message gets `error unavailable`),
queued events are kept (bounded) and sent when Redis is back, after the batches that were written
but not answered when the connection failed: those are sent again as they were, in their order, and
one Redis had run already is answered from the record the script left of it (not run twice). The
background loops retry.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any, cast
from uuid import UUID

import orjson
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError

from vernis.exceptions import Unavailable
from vernis.services import events
from vernis.services.hub import (
    REPLAY_MAX_EVENTS,
    REPLAY_SECONDS,
    Encoder,
    HubEvent,
    InFlight,
    Sink,
    StopHandler,
)
from vernis.settings import RateLimit

__all__ = [
    "LEASE_SECONDS",
    "OrphanHandler",
    "RedisHub",
    "RedisRateLimiter",
    "RedisSocketCap",
    "redis_client",
]

logger = logging.getLogger("vernis.hub.redis")

# The answer lease's time to live; renewed every third of it while the answer runs.
LEASE_SECONDS = 10.0
# How often an instance looks for answers whose instance died (their lease lapsed).
REAP_SECONDS = 5.0
# How long an instance may keep using a conversation window it holds after its own last lease.
WRITER_SECONDS = 3600.0
# How long an instance's entry among a conversation's subscribers lives; renewed every third of it.
SUBSCRIBER_SECONDS = 60.0
# How long a new subscriber waits to be registered before it is told Redis is unavailable.
SUBSCRIBE_SECONDS = 5.0
# How long one call of the publish script may take, its send and its reply together.
CALL_SECONDS = 5.0
# Conversation ids kept as text for the next batches, at most (then forgotten, all at once).
MAX_IDS_KEPT = 10_000
# Batches written to Redis whose replies are not read yet, at most.
MAX_IN_FLIGHT = 8
# How long a batch of published events waits for more before it is sent (at most ~20 ms: SPEC §10).
LINGER_SECONDS = 0.005
# Events kept while Redis is out of reach; beyond that the oldest are dropped (and logged).
MAX_QUEUED_EVENTS = 100_000
_SEQ_TAIL = ',"seq":0}'

# (conversation id, message id of the orphaned answer) -> stores it failed and ends it for clients.
OrphanHandler = Callable[[UUID, UUID], Awaitable[None]]

# One call per batch, for every conversation in it, with six arguments whatever the batch holds (the
# client packs each argument in Python, copying its buffer each time: with a few arguments per
# conversation, packing was a tenth of the server's CPU in Redis mode). KEYS: the running set. ARGV:
# the stream's length cap, the replay window (ms), the key prefix, the publishing instance (sent no
# message: it delivers from the reply, the first seq of each conversation's events in the batch's
# order), the batch, and the batch's number at its instance. The batch: one block per
# conversation (`\r` between), its first line the conversation's id, then its events, one line each
# (`\n` between), each line: kind, extra (a start's message id, an end's lease), whether the frame
# takes a seq (1/0) and the frame without its seq, `\t` between. A frame is JSON: a tab, a line break
# or a carriage return in it is escaped, never raw. The conversation's keys are named here, from
# the prefix (one batch spans many conversations, so it could not run on a Redis Cluster anyway).
# Each batch run leaves a record of its reply for the replay window (`P:b:<instance>:<number>`): a
# batch sent again because its reply was lost is not run twice.
_PUBLISH = """
local maxlen, ttl, prefix, self, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
-- A batch sent again after its reply was lost: if Redis ran it, its record gives the same reply.
local record = prefix .. 'b:' .. self .. ':' .. ARGV[6]
local ran = redis.call('GET', record)
if ran then
  local again = {}
  for first in string.gmatch(ran, '%d+') do again[#again + 1] = tonumber(first) end
  return again
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local horizon = now - tonumber(ttl)
local outbox, firsts = {}, {}
local find, sub = string.find, string.sub
local size, pos = #payload, 1
while pos <= size do
  local last = find(payload, '\\r', pos, true)
  last = last and last - 1 or size
  local nl = find(payload, '\\n', pos, true)
  local cid = sub(payload, pos, nl - 1)
  pos = last + 2
  local channel = prefix .. '{c:' .. cid .. '}'
  local seqk, evk, flk, leasek = channel .. ':seq', channel .. ':ev', channel .. ':fl', channel .. ':lease'
  local lines, at = {}, nl + 1
  while true do
    local e = find(payload, '\\n', at, true)
    if e == nil or e > last then
      lines[#lines + 1] = sub(payload, at, last)
      break
    end
    lines[#lines + 1] = sub(payload, at, e - 1)
    at = e + 1
  end
  local n = #lines
  if redis.call('EXISTS', seqk) == 0 then
    redis.call('SET', seqk, string.format('%d', t[1] * 1000000 + t[2]))
  end
  local first = redis.call('INCRBY', seqk, n) - n + 1
  firsts[#firsts + 1] = first
  -- The other instances showing the conversation: each gets the events in its message.
  local others = {}
  for _, instance in ipairs(redis.call('ZRANGEBYSCORE', channel .. ':subs', now, '+inf')) do
    if instance ~= self then others[#others + 1] = instance end
  end
  local out = #others > 0 and {} or nil
  for i = 1, n do
    local line = lines[i]
    local t1 = find(line, '\\t', 1, true)
    local t2 = find(line, '\\t', t1 + 1, true)
    local kind, extra = sub(line, 1, t1 - 1), sub(line, t1 + 1, t2 - 1)
    local seq = string.format('%d', first + i - 1)
    local frame = sub(line, t2 + 3)
    if sub(line, t2 + 1, t2 + 1) == '1' then frame = frame .. seq .. '}' end
    redis.call('XADD', evk, 'MAXLEN', '~', maxlen, '*', 's', seq, 'k', kind, 'f', frame)
    if kind == 's' then
      redis.call('HSET', flk, 'm', extra, 's', seq)
      redis.call('SADD', KEYS[1], cid)
    elseif kind == 'e' then
      redis.call('DEL', flk)
      redis.call('SREM', KEYS[1], cid)
      -- The answer's lease goes with its end, in the same step: a client that reads the end and
      -- sends its next message at once must find the conversation free.
      if extra ~= '' and redis.call('GET', leasek) == extra then redis.call('DEL', leasek) end
    end
    if out then out[i] = seq .. '\\t' .. kind .. '\\t' .. frame end
  end
  if horizon > 0 then redis.call('XTRIM', evk, 'MINID', '~', string.format('%d', horizon)) end
  redis.call('PEXPIRE', seqk, ttl)
  redis.call('PEXPIRE', evk, ttl)
  if redis.call('EXISTS', flk) == 1 then redis.call('PEXPIRE', flk, ttl) end
  if out then
    local block = cid .. '\\n' .. table.concat(out, '\\n')
    for _, instance in ipairs(others) do
      local blocks = outbox[instance]
      if blocks == nil then outbox[instance] = {block} else blocks[#blocks + 1] = block end
    end
  end
end
for instance, blocks in pairs(outbox) do
  redis.call('PUBLISH', prefix .. 'i:' .. instance, table.concat(blocks, '\\r'))
end
local texts = {}
for i, first in ipairs(firsts) do texts[i] = string.format('%d', first) end
redis.call('SET', record, table.concat(texts, ','), 'PX', ttl)
return firsts
"""

# An instance shows these conversations (or shows them still). ARGV: the key prefix, the instance,
# its entry's time to live (ms), then the conversations' ids. Lapsed entries (instances that died)
# are dropped on the way.
_REGISTER = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[3])
for i = 4, #ARGV do
  local key = ARGV[1] .. '{c:' .. ARGV[i] .. '}:subs'
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  redis.call('ZADD', key, now + ttl, ARGV[2])
  redis.call('PEXPIRE', key, ttl)
end
return 1
"""

# An instance no longer shows these conversations. ARGV: the key prefix, the instance, the ids.
_UNREGISTER = """
for i = 3, #ARGV do redis.call('ZREM', ARGV[1] .. '{c:' .. ARGV[i] .. '}:subs', ARGV[2]) end
return 1
"""

_LAST_SEQ = """
local seq = redis.call('GET', KEYS[1])
if seq then return seq end
local t = redis.call('TIME')
seq = string.format('%d', t[1] * 1000000 + t[2])
redis.call('SET', KEYS[1], seq, 'PX', ARGV[1])
return seq
"""

# KEYS: the lease, the last writer. ARGV: the lease's value, its time to live (ms), the last
# writer's time to live (ms). Taken: the previous last writer ('' if unknown); else nil.
_ACQUIRE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local previous = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
return previous or ''
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Every lease this instance holds, in one call. KEYS: the leases; ARGV: their time to live (ms),
# then each one's value. Per lease: 1 renewed, 0 taken over.
_RENEW = """
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""

# The conversations with an answer in flight whose lease lapsed (their instance died), in one call:
# the reaper of every instance asks this, not each conversation's lease in turn. KEYS: the running
# set; ARGV: the key prefix.
_UNLEASED = """
local out = {}
for _, cid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. '{c:' .. cid .. '}:lease') == 0 then out[#out + 1] = cid end
end
return out
"""

# A sliding window in a sorted set, on Redis's clock (instances' clocks may differ): the hit is
# recorded only when allowed; otherwise the milliseconds until the oldest hit leaves the window.
_RATE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + window - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return -1
"""

# The sockets of a member on every instance: ids scored by when they lapse unless refreshed.
_SOCKET_ACQUIRE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

_SOCKET_REFRESH = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""


def redis_client(url: str, max_connections: int = 32) -> aioredis.Redis:
    """A client with bounded timeouts (a Redis that stops answering fails a call, never hangs it)
    and a bounded pool that makes a caller wait for a free connection: hundreds of sockets asking
    at once share `max_connections`, rather than failing (`MaxConnectionsError`) or opening one each."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=5.0,
        decode_responses=True,
        # RESP2: under RESP3 (redis-py's default) every pub/sub message is a push, and redis-py's
        # push handler formats the whole message for a debug log line before looking at the level.
        protocol=2,
        socket_connect_timeout=2.0,
        socket_timeout=5.0,
        health_check_interval=15,
    )
    return aioredis.Redis.from_pool(pool)  # closing the client closes its pool


def _kind(event: events.Event) -> tuple[str, str]:
    if type(event) is events.TextDelta:
        return "d", ""
    if isinstance(event, events.AnswerStarted):
        return "s", str(event.message_id)
    if isinstance(event, events.AnswerEnded):
        return "e", ""
    return "o", ""


def _event(kind: str, frame: str) -> events.Event | None:
    """The typed event a subscriber may need back from a relayed frame (deltas, starts, ends)."""
    if kind == "o":
        return None
    data = orjson.loads(frame)
    if kind == "d":
        return events.TextDelta(data["content"])
    if kind == "s":
        return events.AnswerStarted(UUID(data["conversation_id"]), UUID(data["message_id"]))
    return events.AnswerEnded(UUID(data["conversation_id"]), UUID(data["message_id"]), bool(data["stopped"]))


class _Queued:
    """One conversation's events waiting for the next batch: as the publish script takes them (its
    id first), and as this instance hands them to its own subscribers once they are numbered (the
    frame, without its seq when it takes one, and the event, kept for any but a delta)."""

    __slots__ = ("frames", "lines")

    def __init__(self, conversation_id: str) -> None:
        self.lines = [conversation_id]
        self.frames: list[tuple[str, bool, events.Event | None]] = []


class _Line:
    """The publisher's connection of its own: its calls of the publish script are written one after
    the other without waiting for the replies of those before (Redis runs them and answers in the
    order written), and the replies are read in that order.

    Each call is `EVAL` with the script's text: Redis keeps the script compiled under its digest,
    so this costs it a digest of the text per call, and never fails with "no such script" (Redis
    restarted or flushed its scripts) in the middle of calls already written.

    Not a connection of the pool, for two costs measured on this path (a trivial script, 5,000
    calls in a row):
    - the blocking pool's checkout (its condition, its lock, its timing records) cost about what the
      call did: 207-234 µs of client CPU per call through the pool, 108-134 µs on a kept pool
      connection, on a machine at half its usual speed;
    - with the pool's socket timeout, redis-py sends each command in a task of its own
      (`asyncio.wait_for`): 4.2-4.7 turns of the event loop per call, against 2.7-2.8 without it,
      and 91-159 µs of CPU against 60-100 µs. On a loop near its limit a turn lasts milliseconds,
      and every event of the batch waits for them. Writing and reading are bounded by the hub instead.
    """

    def __init__(self, client: aioredis.Redis, script: str) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._connection_kwargs = {**pool.connection_kwargs, "socket_timeout": None}
        self._script = script
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
            except BaseException:
                await self.forget(connection)
                raise
        return connection

    def holds(self, connection: AbstractConnection) -> bool:
        """Whether `connection` is the line's, and connected (not failed, not closed by redis-py)."""
        return connection is self._connection and connection.is_connected

    async def write(self, connection: AbstractConnection, *args: str | int) -> None:
        packed = connection.pack_command("EVAL", self._script, *args)
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


class _Sent:
    """A batch written to Redis on `connection` (set by each write) whose reply is not read yet, or,
    once that connection failed before the reply came, to be written again as it was, under its
    number."""

    __slots__ = ("batches", "connection", "count", "number", "payload")
    connection: AbstractConnection

    def __init__(self, batches: dict[UUID, _Queued], count: int, number: int) -> None:
        self.batches = batches
        self.count = count
        self.number = number
        self.payload = "\r".join(["\n".join(queued.lines) for queued in batches.values()])


class _Local:
    """This instance's subscribers of one conversation and how far they were delivered."""

    __slots__ = ("conversation_id", "delivered", "ready", "sinks")

    def __init__(self, conversation_id: UUID, loop: asyncio.AbstractEventLoop) -> None:
        self.conversation_id = conversation_id
        self.sinks: list[Sink] = []
        self.delivered: int | None = None
        # Resolved once this instance is among the conversation's subscribers in Redis: from then on
        # no event is missed.
        self.ready: asyncio.Future[None] = loop.create_future()


class RedisHub:
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
    ) -> None:
        self._redis = client
        self._encode = encode
        self._prefix = prefix
        self._replay_ms = str(int(replay_seconds * 1000))
        self._replay_max = str(replay_max_events)
        self._lease_ms = int(lease_seconds * 1000)
        self._writer_ms = int(WRITER_SECONDS * 1000)
        self._lease_seconds = lease_seconds
        self._reap_seconds = reap_seconds
        self._linger = linger
        self.instance = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._line = _Line(client, _PUBLISH)
        self._last_seq_script = client.register_script(_LAST_SEQ)
        self._acquire_script = client.register_script(_ACQUIRE)
        self._release_script = client.register_script(_RELEASE)
        self._renew_script = client.register_script(_RENEW)
        self._unleased_script = client.register_script(_UNLEASED)
        self._register_script = client.register_script(_REGISTER)
        self._unregister_script = client.register_script(_UNREGISTER)
        self._subscriber_ms = str(int(SUBSCRIBER_SECONDS * 1000))
        # Events waiting for the next batch, per conversation.
        self._queued: dict[UUID, _Queued] = {}
        self._queued_count = 0
        self._texts: dict[UUID, str] = {}
        # Set when the batch being gathered is due (`linger` after its first event), or to retry.
        self._wake = asyncio.Event()
        self._due: asyncio.TimerHandle | None = None
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
        self._local: dict[UUID, _Local] = {}
        # Conversations whose subscribers here wait for missed events to be fetched (`_fill_gap`).
        self._gaps: set[UUID] = set()
        # The same, by their ids as text: what a pub/sub message names (no id parsed per message).
        self._by_id: dict[str, _Local] = {}
        self._leases: dict[UUID, str] = {}
        # Per lease held: the conversation's last writer before it was taken (`unchanged`).
        self._previous: dict[UUID, str] = {}
        # Leases whose answer's end is published: the publishing script releases them.
        self._ending: set[str] = set()
        self._stop_handlers: list[StopHandler] = []
        self._orphan_handlers: list[OrphanHandler] = []
        self._pubsub = client.pubsub()
        self._control = f"{prefix}ctl"
        # This instance's own channel: the events of the conversations it shows.
        self._inbox = f"{prefix}i:{self.instance}"
        self._running_key = f"{prefix}running"
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
        if sink not in local.sinks:
            local.sinks.append(sink)

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
        with contextlib.suppress(ValueError):
            local.sinks.remove(sink)
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
        if frame.endswith(_SEQ_TAIL):
            head, has_seq = frame[:-2], "1"
        else:
            head, has_seq = frame, "0"
        kind, extra = _kind(event)
        if kind == "e":
            extra = self._leases.get(conversation_id, "")
            if extra:
                self._ending.add(extra)
        queued = self._queued.get(conversation_id)
        if queued is None:
            # The id as text, kept: made anew for every conversation of every batch, it was 1.5 % of
            # the server's CPU samples at 200 streams.
            text = self._texts.get(conversation_id)
            if text is None:
                if len(self._texts) >= MAX_IDS_KEPT:
                    self._texts.clear()
                text = self._texts[conversation_id] = str(conversation_id)
            queued = self._queued[conversation_id] = _Queued(text)
        queued.lines.append(f"{kind}\t{extra}\t{has_seq}\t{head}")
        queued.frames.append((head, has_seq == "1", None if kind == "d" else event))
        self._queued_count += 1
        if self._due is None:
            # A timer, not the publisher waking to sleep out the linger: at the linger's end the
            # publisher writes in the loop's next turn (waking first, then sleeping, took two).
            self._due = asyncio.get_running_loop().call_later(self._linger, self._ripe)

    def _ripe(self) -> None:
        self._due = None
        self._wake.set()

    async def flush(self) -> None:
        """Send every queued event now, and wait until every batch sent is handed out here."""
        await self._send()
        while self._in_flight:
            await self._receive()

    async def _publisher(self) -> None:
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

    async def _receiver(self) -> None:
        while True:
            await self._sent.wait()
            try:
                await self._receive()
            except (RedisError, OSError) as exc:  # kept for the publisher's next try
                logger.warning("publishing to Redis failed (%r); retrying", exc)
            except Exception:  # a bug here must not end publishing for good
                logger.exception("publishing to Redis failed")
                await asyncio.sleep(0.5)

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
                await self._write(connection, _Sent(batches, count, self._numbered))

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
            await self._line.write(
                connection,
                1,
                self._running_key,
                self._replay_max,
                self._replay_ms,
                self._prefix,
                self.instance,
                sent.payload,
                str(sent.number),
            )
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
            self._progress.set()
            await self._deliver_own(sent.batches, firsts)

    async def _fail(self, connection: AbstractConnection) -> None:
        """`connection` failed: every batch in flight on it is to be sent again, as it was, with the
        ones waiting to be, in the order they were made (their numbers), ahead of anything queued
        since. Whether Redis ran them is unknown: a batch it ran returns its recorded reply and is
        not run again. Bounded, with the queue."""
        failed = [sent for sent in self._in_flight if sent.connection is connection]
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
        """Drop every event waiting to be sent once there are more than `MAX_QUEUED_EVENTS`."""
        waiting = self._queued_count + sum(sent.count for sent in self._again)
        if waiting > MAX_QUEUED_EVENTS:
            logger.error("Redis unreachable: dropping %d queued events", waiting)
            self._again.clear()
            self._queued, self._queued_count = {}, 0

    # --- live delivery ---------------------------------------------------------------------------

    async def _listen(self) -> None:
        """Deliver pub/sub messages to this instance's subscribers; reconnect when Redis drops, then
        catch up on what each shown conversation missed meanwhile."""
        reconnected = False
        while True:
            try:
                await self._pubsub.subscribe(self._control, self._inbox)
                # Read from the subscription's connection directly: redis-py's `listen()` wraps
                # each message in its retry and observability layers and a dict (a third of the
                # CPU of live delivery in Redis mode when a message carried one conversation).
                # A lost connection raises here, and the loop reconnects.
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
            conversation_id = UUID(argument)
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
                    HubEvent(int(seq_text), frame, None if kind == "d" else _event(kind, frame), now)
                )
            if local.delivered is not None and items[0].seq > local.delivered + 1:
                await self._catch_up(local.conversation_id, local, items[0].seq)
            self._hand_out(local, items)

    async def _deliver_own(self, batches: dict[UUID, _Queued], firsts: list[int]) -> None:
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

    async def _range(
        self, conversation_id: UUID, after_seq: int, *, partial: bool = False
    ) -> list[HubEvent] | None:
        """The kept events after `after_seq`, or None when the window does not reach back to it
        (with `partial`, what it does reach: Redis lost its data, and that is all there is)."""
        last = await self._redis.get(self._key(conversation_id, "seq"))
        if last is None or (after_seq > int(last) and not partial):
            return None
        if after_seq == int(last):
            return []
        # Newest first, a page at a time, back to the first wanted seq.
        key = self._key(conversation_id, "ev")
        found: list[HubEvent] = []
        upper = "+"
        now = time.monotonic()
        while True:
            page = cast(
                list[tuple[str, dict[str, str]]],
                await self._redis.xrevrange(key, max=upper, min="-", count=500),
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
                found.append(HubEvent(seq, fields["f"], _event(fields["k"], fields["f"]), now))
            last_id = page[-1][0]
            millis, _, counter = last_id.partition("-")
            if int(counter) > 0:
                upper = f"{millis}-{int(counter) - 1}"
            elif int(millis) > 0:
                upper = f"{int(millis) - 1}-{2**63 - 1}"
            else:
                return found[::-1] if partial else None

    # --- stop, from any instance -----------------------------------------------------------------

    def on_stop(self, handler: StopHandler) -> None:
        self._stop_handlers.append(handler)

    def on_orphan(self, handler: OrphanHandler) -> None:
        self._orphan_handlers.append(handler)

    async def request_stop(self, conversation_id: UUID) -> None:
        await self._call(self._redis.publish(self._control, f"stop\t{conversation_id}"))

    # --- the answer lease ------------------------------------------------------------------------

    async def try_acquire(self, conversation_id: UUID, owner: str) -> bool:
        value = f"{self.instance}:{owner}"
        previous = await self._call(
            self._acquire_script(
                keys=[self._key(conversation_id, "lease"), self._key(conversation_id, "w")],
                args=[value, self._lease_ms, self._writer_ms],
            )
        )
        if previous is None:
            return False
        self._leases[conversation_id] = value
        self._previous[conversation_id] = previous
        return True

    def lease_mark(self, conversation_id: UUID) -> str | None:
        return self._leases.get(conversation_id)

    def unchanged(self, conversation_id: UUID, mark: str | None) -> bool:
        return mark is not None and self._previous.get(conversation_id) == mark

    async def touch(self, conversation_id: UUID) -> None:
        try:
            await self._redis.set(
                self._key(conversation_id, "w"), f"touch:{uuid.uuid4().hex}", px=self._writer_ms
            )
        except RedisError as exc:
            # The write itself is stored; another instance may answer once from its older window.
            logger.warning("marking a conversation changed failed (%r)", exc)

    async def release(self, conversation_id: UUID, owner: str) -> None:
        value = f"{self.instance}:{owner}"
        if self._leases.get(conversation_id) == value:
            del self._leases[conversation_id]
            self._previous.pop(conversation_id, None)
        if value in self._ending:
            # Its answer's end, queued, releases it in the same step that publishes the end.
            self._ending.discard(value)
            return
        try:
            await self._release_script(keys=[self._key(conversation_id, "lease")], args=[value])
        except RedisError as exc:
            logger.warning("releasing a lease failed (%r); it lapses by itself", exc)

    async def holder(self, conversation_id: UUID) -> str | None:
        value: str | None = await self._call(self._redis.get(self._key(conversation_id, "lease")))
        return value

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._lease_seconds / 3)
            held = list(self._leases.items())
            if not held:
                continue
            try:
                kept = await self._renew_script(
                    keys=[self._key(conversation_id, "lease") for conversation_id, _ in held],
                    args=[self._lease_ms, *(value for _, value in held)],
                )
            except (RedisError, OSError) as exc:
                logger.warning("renewing leases failed (%r); retrying", exc)
                continue
            for (conversation_id, value), renewed in zip(held, kept, strict=True):
                if not renewed and self._leases.get(conversation_id) == value:
                    # Taken over (this instance was out of reach too long): stop writing.
                    logger.error("lost the answer lease of a conversation; stopping its answer")
                    del self._leases[conversation_id]
                    self._previous.pop(conversation_id, None)
                    for handler in self._stop_handlers:
                        handler(conversation_id)

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
            asyncio.create_task(self._publisher(), name="redis hub publisher"),
            asyncio.create_task(self._receiver(), name="redis hub publisher's replies"),
            asyncio.create_task(self._listen(), name="redis hub listener"),
            asyncio.create_task(self._renew(), name="redis hub lease renewal"),
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
        if self._due is not None:
            self._due.cancel()
            self._due = None
        background = tuple(self._tasks)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        with contextlib.suppress(RedisError, OSError):
            await self.flush()
        await self._line.close()
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


class RedisRateLimiter:
    """The per-member rate limit across instances: a sliding window per key in a sorted set."""

    def __init__(self, client: aioredis.Redis, limit: RateLimit, *, prefix: str = "vernis:") -> None:
        self.limit = limit
        self._prefix = prefix
        self._script = client.register_script(_RATE)
        self._window_ms = str(max(1, int(limit.seconds * 1000)))

    async def hit(self, key: Hashable) -> int | None:
        try:
            retry_after = int(
                await self._script(
                    keys=[f"{self._prefix}rate:{key}"],
                    args=[self.limit.count, self._window_ms, uuid.uuid4().hex],
                )
            )
        except (RedisError, OSError) as exc:
            raise Unavailable() from exc
        return None if retry_after < 0 else math.ceil(retry_after)


class RedisSocketCap:
    """The per-member socket cap across instances. An instance that dies leaves its sockets'
    entries behind until they lapse (`ttl`, refreshed while the socket lives)."""

    def __init__(
        self, client: aioredis.Redis, cap: int, *, prefix: str = "vernis:", ttl: float = 90.0
    ) -> None:
        self.cap = cap
        self._redis = client
        self._prefix = prefix
        self._ttl_ms = str(int(ttl * 1000))
        self._acquire = client.register_script(_SOCKET_ACQUIRE)
        self._refresh = client.register_script(_SOCKET_REFRESH)

    def _key(self, member_id: Hashable) -> str:
        return f"{self._prefix}sockets:{member_id}"

    async def acquire(self, member_id: Hashable, socket_id: str) -> bool:
        try:
            return bool(
                await self._acquire(keys=[self._key(member_id)], args=[self.cap, self._ttl_ms, socket_id])
            )
        except (RedisError, OSError) as exc:
            raise Unavailable() from exc

    async def release(self, member_id: Hashable, socket_id: str) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._redis.zrem(self._key(member_id), socket_id)

    async def refresh(self, sockets: list[tuple[Hashable, str]]) -> None:
        for member_id, socket_id in sockets:
            await self._refresh(keys=[self._key(member_id)], args=[self._ttl_ms, socket_id])
