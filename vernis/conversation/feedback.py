"""Feedback (SPEC §22): a member's rating of an answer, stored with its `feedback.created` webhook
(`FeedbackStore`), and every rated answer since a time, as the rows an evaluation set is made of,
for the admin API (`GET /api/admin/feedback`) and `vernis export-feedback` (`feedback_records`).

One record per rated answer, oldest rating first: when it was rated, the rating and comment, the
host's `org` and `sub` of the member who rated it, the conversation and message ids, the answer's
text and model, the tools it used (their names, in order), and the user message it answered (the
last one before it in the conversation). Text is exported as stored: it passed the guards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.conversation._sql import owned_by
from vernis.exceptions import InvalidMessage
from vernis.store.models import Conversation, Member, Message, MessageRole, Organization, table_of, utcnow
from vernis.webhooks.outbox import Outbox, ids

__all__ = ["BATCH", "FEEDBACK_RATINGS", "FeedbackStore", "feedback_records"]

_message = table_of(Message)
_conversation = table_of(Conversation)
_member = table_of(Member)
_organization = table_of(Organization)

# Rows read per query: an export of any size streams in bounded memory.
BATCH = 500
FEEDBACK_RATINGS = frozenset({"up", "down"})


class FeedbackStore:
    """Writes members' ratings; `feedback.created` goes to the outbox in the rating's transaction."""

    def __init__(self, engine: AsyncEngine, *, outbox: Outbox | None = None) -> None:
        self._engine = engine
        self._outbox = outbox

    async def rate(
        self, message_id: UUID, member_id: UUID, organization_id: UUID, rating: str, comment: str | None
    ) -> bool:
        """Record the member's rating (`up`/`down`, else `InvalidMessage`) and optional comment on an
        assistant message of one of their conversations; False for any other message. Rating again
        replaces the earlier feedback (and is an event of its own)."""
        if rating not in FEEDBACK_RATINGS:
            raise InvalidMessage("Feedback must be 'up' or 'down'.")
        comment = (comment or "").strip() or None
        now = utcnow()
        statement = (
            sa.update(_message)
            .where(
                _message.c.id == message_id,
                _message.c.role == MessageRole.ASSISTANT.value,
                _message.c.conversation_id.in_(
                    sa.select(_conversation.c.id).where(owned_by(member_id, organization_id))
                ),
            )
            .values(feedback_rating=rating, feedback_comment=comment, feedback_at=now)
            .returning(_message.c.conversation_id, _message.c.model)
        )
        async with self._engine.begin() as connection:
            rated = (await connection.execute(statement)).first()
            if rated is None:
                return False
            if self._outbox is not None:
                data = ids(
                    conversation_id=rated.conversation_id,
                    message_id=message_id,
                    rating=rating,
                    model=rated.model,
                    rated_at=now,
                )
                await self._outbox.add(
                    connection, "feedback.created", data, member_id=member_id, text={"comment": comment}
                )
        return True


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


async def feedback_records(
    engine: AsyncEngine, *, since: datetime, org: str | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The rated answers whose rating was given at or after `since`, of the organization whose host
    id is `org` (every organization when None), oldest rating first, read `BATCH` at a time."""
    asked = _message.alias("asked")
    before = (
        sa.select(asked.c.content)
        .where(
            asked.c.conversation_id == _message.c.conversation_id,
            asked.c.position < _message.c.position,
            asked.c.role == MessageRole.USER.value,
        )
        .order_by(asked.c.position.desc())
        .limit(1)
        .scalar_subquery()
    )
    query = (
        sa.select(
            _message.c.id,
            _message.c.conversation_id,
            _message.c.content,
            _message.c.model,
            _message.c.tool_calls_json,
            _message.c.feedback_rating,
            _message.c.feedback_comment,
            _message.c.feedback_at,
            _message.c.created_at,
            _organization.c.external_id.label("org"),
            _member.c.external_id.label("sub"),
            before.label("user_message"),
        )
        .join(_conversation, _conversation.c.id == _message.c.conversation_id)
        .join(_member, _member.c.id == _conversation.c.member_id)
        .join(_organization, _organization.c.id == _conversation.c.organization_id)
        .where(_message.c.feedback_rating.is_not(None), _message.c.feedback_at >= since)
        .order_by(_message.c.feedback_at, _message.c.id)
    )
    if org is not None:
        query = query.where(_organization.c.external_id == org)
    after: tuple[datetime, Any] | None = None
    while True:
        page = query
        if after is not None:
            page = page.where(sa.tuple_(_message.c.feedback_at, _message.c.id) > sa.tuple_(*after))
        async with engine.connect() as connection:
            rows = (await connection.execute(page.limit(BATCH))).mappings().all()
        for row in rows:
            yield {
                "rated_at": _iso(row["feedback_at"]),
                "rating": row["feedback_rating"],
                "comment": row["feedback_comment"],
                "org": row["org"],
                "sub": row["sub"],
                "conversation_id": str(row["conversation_id"]),
                "message_id": str(row["id"]),
                "answered_at": _iso(row["created_at"]),
                "model": row["model"],
                "tools": [str(call.get("tool_name")) for call in row["tool_calls_json"] or ()],
                "user_message": row["user_message"],
                "answer": row["content"],
            }
        if len(rows) < BATCH:
            return
        after = (rows[-1]["feedback_at"], rows[-1]["id"])
