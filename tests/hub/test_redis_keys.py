"""A conversation's keys in Redis: each event outlives the replay window, and the publish script
renews them only when due, not with every batch (`vernis.hub._redis_pipeline`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.hub.test_shared_state import Sink, eventually, running_hub
from vernis.conversation import events
from vernis.hub._redis_pipeline import _Known
from vernis.hub.redis import RedisHub

WINDOW = 0.5  # seconds of replay window: renewals are due every 0.05 s, each keeps the keys 5.55 s


def _keys(prefix: str, conversation: uuid.UUID) -> list[str]:
    return [f"{prefix}{{c:{conversation}}}:{suffix}" for suffix in ("seq", "ev", "fl")]


async def _published(hub: RedisHub, conversation: uuid.UUID, *published: events.Event) -> None:
    for event in published:
        hub.publish(conversation, event)
    await hub.flush()


async def _ttls(admin: aioredis.Redis, keys: list[str]) -> list[int]:
    return [await admin.pttl(key) for key in keys]


async def test_each_event_outlives_the_window_and_keys_are_renewed_only_when_due(
    redis_url: str, redis_prefix: str
) -> None:
    """In Redis every key of a conversation outlives the replay window after each event published, yet a batch renews them only once the last renewal is due again, not with every event."""
    conversation, message = uuid.uuid4(), uuid.uuid4()
    keys = _keys(redis_prefix, conversation)
    async with running_hub(redis_url, redis_prefix, replay_seconds=WINDOW) as (hub, admin):
        hub.subscribe(conversation, Sink())
        await _published(
            hub, conversation, events.AnswerStarted(conversation, message), events.TextDelta("a ")
        )
        assert all(WINDOW * 1000 < ttl <= 5550 for ttl in await _ttls(admin, keys))

        for key in keys:  # as if renewed long ago: the next renewal shows as a longer life
            await admin.pexpire(key, 3000)
        await _published(hub, conversation, events.TextDelta("b "))
        assert all(WINDOW * 1000 < ttl <= 3000 for ttl in await _ttls(admin, keys)), "renewed before due"

        await asyncio.sleep(0.06)  # the renewal is due (a tenth of the window)
        await _published(hub, conversation, events.TextDelta("c "))
        assert all(3000 < ttl <= 5550 for ttl in await _ttls(admin, keys)), "due, not renewed"


async def test_a_new_conversation_and_a_batch_sent_again_renew_the_keys(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In Redis a conversation's first event gives its keys their expiry even when its renewal is not due, and a batch sent again after a failed write renews the keys of all its conversations."""
    conversation = uuid.uuid4()
    seq_key, stream_key, _ = _keys(redis_prefix, conversation)
    async with running_hub(redis_url, redis_prefix, replay_seconds=WINDOW) as (hub, admin):
        hub._publisher._known[conversation] = known = _Known(str(conversation))
        known.renewed = time.monotonic() + 3600  # never due here
        sink = Sink()
        hub.subscribe(conversation, sink)
        await _published(hub, conversation, events.TextDelta("a "))
        assert all(WINDOW * 1000 < ttl <= 5550 for ttl in await _ttls(admin, [seq_key, stream_key]))

        for key in (seq_key, stream_key):
            await admin.pexpire(key, 3000)
        line = hub._publisher._line
        write = line.write

        async def fail_once(*args: Any, **kwargs: Any) -> None:
            monkeypatch.setattr(line, "write", write)
            raise RedisConnectionError("the connection dropped before the batch was written")

        monkeypatch.setattr(line, "write", fail_once)
        hub.publish(conversation, events.TextDelta("b "))  # the publisher's sender meets the failure
        await eventually(lambda: len(sink.events) == 2)
        assert all(3000 < ttl <= 5550 for ttl in await _ttls(admin, [seq_key, stream_key]))
