"""How the Redis hub's publisher calls its script (`vernis.hub._redis_pipeline`): by digest, the
script's text sent once per connection, and again after Redis forgot it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis

from tests.fixtures.redis import OwnRedis
from tests.hub.test_shared_state import Sink, eventually, running_hub, texts_of
from vernis.conversation import events
from vernis.hub.redis import RedisHub


@asynccontextmanager
async def _showing(own_redis: OwnRedis) -> AsyncIterator[tuple[RedisHub, aioredis.Redis, uuid.UUID, Sink]]:
    """A hub on the test's own Redis, a client of the test's, and a conversation a sink shows."""
    conversation, sink = uuid.uuid4(), Sink()
    async with running_hub(own_redis.url) as (hub, admin):
        hub.subscribe(conversation, sink)
        await hub.last_seq(conversation)
        yield hub, admin, conversation, sink


async def test_each_batch_names_the_script_by_digest_and_its_text_goes_once_per_connection(
    own_redis: OwnRedis,
) -> None:
    """In Redis every batch is one EVALSHA (never an EVAL carrying the script's text), and the publisher's connection loaded the script once, before its first call."""
    async with _showing(own_redis) as (hub, admin, conversation, sink):
        await admin.config_resetstat()
        hub.publish(conversation, events.TextDelta("one "))  # the publisher's connection is made
        await hub.flush()
        stats = await admin.info("commandstats")
        assert stats["cmdstat_script|load"]["calls"] == 1
        await admin.config_resetstat()
        for word in ("two ", "three ", "four "):
            hub.publish(conversation, events.TextDelta(word))
            await hub.flush()
        assert texts_of(sink) == ["one ", "two ", "three ", "four "]
        stats = await admin.info("commandstats")
        assert "cmdstat_eval" not in stats
        assert stats["cmdstat_evalsha"]["calls"] >= 3  # the hub's other scripts may run meanwhile
        assert "cmdstat_script|load" not in stats


async def test_scripts_flushed_in_redis_the_batch_goes_again_on_a_connection_that_loads_it(
    own_redis: OwnRedis,
) -> None:
    """In Redis, once its scripts are flushed, the next batch's call fails with NOSCRIPT (nothing ran): it is sent again on a new connection that loads the script first, and the subscribers get every event once, in order, under consecutive seqs."""
    async with _showing(own_redis) as (hub, admin, conversation, sink):
        hub.publish(conversation, events.TextDelta("one "))
        await eventually(lambda: len(sink.events) == 1)
        connection = hub._publisher._line._connection
        assert connection is not None
        await admin.script_flush()
        hub.publish(conversation, events.TextDelta("two "))
        hub.publish(conversation, events.TextDelta("three "))
        await eventually(lambda: len(sink.events) == 3, timeout=10)
        await hub.flush()
        assert texts_of(sink) == ["one ", "two ", "three "]
        seqs = [event.seq for event in sink.events]
        assert seqs == list(range(seqs[0], seqs[0] + 3))
        assert hub._publisher._line._connection is not connection, "sent again on a new connection"
        assert (await admin.info("commandstats"))["cmdstat_script|load"]["calls"] >= 1
