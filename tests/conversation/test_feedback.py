"""Ratings (vernis.conversation.feedback.FeedbackStore) on a real SQLite file and a real PostgreSQL
database: where a rating may land, and its `feedback.created` outbox row written with it."""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.config import WebhookEntry
from vernis.conversation.feedback import FeedbackStore
from vernis.conversation.store import ConversationStore
from vernis.exceptions import InvalidMessage
from vernis.store.models import Message, WebhookDelivery, table_of
from vernis.webhooks.outbox import Outbox
from vernis_crm.demo.seed import SeedResult

_message = table_of(Message)
_delivery = table_of(WebhookDelivery)


def hooks(*, include_text: bool) -> Outbox:
    return Outbox(
        [
            WebhookEntry.model_validate(
                {
                    "url": "https://hooks.example.com/vernis",
                    "events": ["feedback.created"],
                    "secret_env": "HOOK",
                    "include_text": include_text,
                }
            )
        ]
    )


async def rated(engine: AsyncEngine, message_id: UUID) -> tuple[str | None, str | None]:
    async with engine.connect() as connection:
        row = (
            await connection.execute(
                sa.select(_message.c.feedback_rating, _message.c.feedback_comment).where(
                    _message.c.id == message_id
                )
            )
        ).one()
    return row.feedback_rating, row.feedback_comment


async def payloads(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            sa.select(_delivery.c.event, _delivery.c.payload_json).order_by(_delivery.c.created_at)
        )
        return [{"event": row.event, **row.payload_json} for row in rows]


async def test_feedback_on_own_assistant_messages_only(
    engine: AsyncEngine, store: ConversationStore, seeded: SeedResult
) -> None:
    """A rating lands on an assistant message of the member's own conversation, and nowhere else."""
    org, owner = seeded.organizations["acme"], seeded.members["owner@acme.test"]
    conversation = await store.create_conversation(owner, org)
    question = await store.add_message(conversation.id, "user", "How many calls today?")
    answer = await store.add_message(conversation.id, "assistant", "Twelve.")
    feedback = FeedbackStore(engine)
    assert await feedback.rate(answer.id, owner, org, "down", "  It was eleven.  ")
    assert await rated(engine, answer.id) == ("down", "It was eleven.")
    assert await feedback.rate(answer.id, owner, org, "up", None)
    assert await rated(engine, answer.id) == ("up", None)
    assert not await feedback.rate(question.id, owner, org, "up", None)
    assert not await feedback.rate(answer.id, seeded.members["member@acme.test"], org, "down", "x")
    assert not await feedback.rate(answer.id, owner, seeded.organizations["globex"], "down", "x")
    assert not await feedback.rate(uuid.uuid4(), owner, org, "up", None)
    with pytest.raises(InvalidMessage):
        await feedback.rate(answer.id, owner, org, "meh", None)
    assert await rated(engine, answer.id) == ("up", None)


async def test_each_rating_writes_feedback_created_and_a_refused_one_nothing(
    engine: AsyncEngine, store: ConversationStore, seeded: SeedResult
) -> None:
    """Every stored rating adds one `feedback.created` row (ids, rating, the host's org and sub, no comment without include_text); a rating refused adds none."""
    org, owner = seeded.organizations["acme"], seeded.members["owner@acme.test"]
    conversation = await store.create_conversation(owner, org)
    answer = await store.add_message(conversation.id, "assistant", "Twelve.")
    feedback = FeedbackStore(engine, outbox=hooks(include_text=False))
    assert await feedback.rate(answer.id, owner, org, "down", "It was eleven.")
    assert not await feedback.rate(answer.id, seeded.members["member@acme.test"], org, "up", None)
    assert await feedback.rate(answer.id, owner, org, "up", None)
    rows = await payloads(engine)
    assert [(row["event"], row["type"], row["data"]["rating"]) for row in rows] == [
        ("feedback.created", "feedback.created", "down"),
        ("feedback.created", "feedback.created", "up"),
    ]
    data = rows[0]["data"]
    assert data["conversation_id"] == str(conversation.id)
    assert data["message_id"] == str(answer.id)
    assert (data["org"], data["sub"]) == ("acme", "owner@acme.test")
    assert "comment" not in data
    assert "eleven" not in str(rows)


async def test_the_comment_goes_to_include_text_receivers(
    engine: AsyncEngine, store: ConversationStore, seeded: SeedResult
) -> None:
    """With include_text the row's data holds the comment as stored (trimmed)."""
    org, owner = seeded.organizations["acme"], seeded.members["owner@acme.test"]
    conversation = await store.create_conversation(owner, org)
    answer = await store.add_message(conversation.id, "assistant", "Twelve.")
    feedback = FeedbackStore(engine, outbox=hooks(include_text=True))
    assert await feedback.rate(answer.id, owner, org, "down", "  It was eleven. ")
    [row] = await payloads(engine)
    assert row["data"]["comment"] == "It was eleven."
