"""The lease's fence in the store, and start-up recovery with several instances (SPEC §10), on a real
SQLite file and a real PostgreSQL database alike, with the machine's Redis."""

from __future__ import annotations

import asyncio
import uuid

from tests.fixtures.db import *  # noqa: F403
from vernis.conversation.store import ConversationStore, MessageUpdate
from vernis.hub.redis import RedisHub
from vernis.runtime import recover_interrupted
from vernis.store.models import MessageStatus
from vernis.store.redis import redis_client
from vernis.ws.encoder import encode
from vernis_crm.demo.seed import SeedResult


async def _exchange(store: ConversationStore, seeded: SeedResult) -> tuple[uuid.UUID, uuid.UUID]:
    """A conversation of member@acme.test with an answer streaming: (conversation id, answer id)."""
    member = seeded.members["member@acme.test"]
    conversation = await store.create_conversation(member, seeded.organizations["acme"])
    answer_id = uuid.uuid4()
    await store.add_exchange(conversation.id, "question", answer_id=answer_id, model="m")
    return conversation.id, answer_id


async def test_an_answer_no_longer_streaming_cannot_be_written_again(
    store: ConversationStore, seeded: SeedResult
) -> None:
    """Once an answer is failed (another instance took its lease over), the late writes of its old holder change nothing: neither a flush nor a final row."""
    conversation_id, answer_id = await _exchange(store, seeded)
    await store.update_messages([MessageUpdate(answer_id, "half", None, MessageStatus.STREAMING)])
    assert await store.fail_answers([answer_id]) == 1
    await store.update_messages([MessageUpdate(answer_id, "half and more", None, MessageStatus.STREAMING)])
    await store.update_messages([MessageUpdate(answer_id, "the whole answer", None, MessageStatus.COMPLETE)])
    (_, answer) = await store.messages(conversation_id)
    assert (answer.status, answer.content) == ("failed", "half")
    assert await store.fail_answers([answer_id]) == 0


async def test_start_up_with_redis_fails_only_answers_no_instance_holds(
    store: ConversationStore, seeded: SeedResult, redis_url: str, redis_prefix: str
) -> None:
    """A starting instance in Redis mode fails an answer left streaming whose lease lapsed, and leaves alone one whose lease a live instance holds."""
    held_conversation, held_answer = await _exchange(store, seeded)
    orphan_conversation, orphan_answer = await _exchange(store, seeded)
    client = redis_client(redis_url)
    hub = RedisHub(client, encode, prefix=redis_prefix)
    try:
        assert await hub.try_acquire(held_conversation, "live answer")
        assert await recover_interrupted(store, hub, shared=True) == 1
        statuses = {
            message.id: message.status
            for conversation in (held_conversation, orphan_conversation)
            for message in await store.messages(conversation)
        }
        assert statuses[held_answer] == "streaming"
        assert statuses[orphan_answer] == "failed"
        await hub.release(held_conversation, "live answer")
    finally:
        await hub.aclose()
        await client.aclose()
        await asyncio.sleep(0)
