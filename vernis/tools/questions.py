"""Pending questions of `ask_user` (SPEC §17), stored like approvals.

When the model calls `ask_user`, the tool runner stores a `Question`: bound to its member,
conversation and the tool call that asked, with an expiry (`VERNIS_APPROVAL_TTL`). It survives a
reload (the call's stored record carries it, `question_record`) and is resolved exactly once, by a
compare-and-set on its status, whether the user answers it, cancels it, or it expires: two tabs
answering at once, one wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.store.models import Question, QuestionStatus, table_of, utcnow
from vernis.tools.asking import AskUserArgs, QuestionSpec
from vernis.tracing.spans import traceparent
from vernis.webhooks.outbox import Outbox, ids

__all__ = ["QuestionInfo", "QuestionService", "asked_envelope", "question_record"]

_question = table_of(Question)


@dataclass(frozen=True, slots=True)
class QuestionInfo:
    id: UUID
    organization_id: UUID
    member_id: UUID
    conversation_id: UUID
    message_id: UUID
    call_id: str
    title: str | None
    questions: list[QuestionSpec]
    status: str
    answers: dict[str, Any] | None
    created_at: datetime
    expires_at: datetime
    # The traceparent of the `ask_user` call (SPEC §22), when traced.
    trace_parent: str | None = None

    def wire_questions(self) -> list[dict[str, Any]]:
        """The questions as the client gets them (`question_required`, history)."""
        return [question.model_dump(exclude_none=True) for question in self.questions]


def _info(row: Any) -> QuestionInfo:
    return QuestionInfo(
        id=row.id,
        organization_id=row.organization_id,
        member_id=row.member_id,
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        call_id=row.call_id,
        title=row.title,
        questions=[QuestionSpec.model_validate(question) for question in row.questions_json],
        status=row.status,
        answers=row.answers_json,
        created_at=row.created_at,
        expires_at=row.expires_at,
        trace_parent=row.trace_parent,
    )


def question_record(question: QuestionInfo) -> dict[str, Any]:
    """What the `ask_user` call's stored record keeps of its question (`question` beside `result`):
    enough for history replay to draw the form again, or how it was answered."""
    return {
        "question_id": str(question.id),
        "title": question.title,
        "questions": question.wire_questions(),
        "expires_at": question.expires_at.isoformat(),
    }


def asked_envelope(question: QuestionInfo) -> dict[str, Any]:
    """The `ask_user` call's result while its question waits: what the model would read."""
    return {
        "ok": True,
        "data": {
            "question_id": str(question.id),
            "status": "waiting",
            "instructions": "The user has been shown the form; their answers come back as this result.",
        },
    }


class QuestionService:
    def __init__(self, engine: AsyncEngine, ttl: float, *, outbox: Outbox | None = None) -> None:
        self._engine = engine
        self.ttl = ttl
        # Webhooks (SPEC §22): question.asked, written with the question.
        self._outbox = outbox

    async def create(
        self,
        *,
        organization_id: UUID,
        member_id: UUID,
        conversation_id: UUID,
        message_id: UUID,
        call_id: str,
        args: AskUserArgs,
    ) -> QuestionInfo:
        now = utcnow()
        row = Question(
            organization_id=organization_id,
            member_id=member_id,
            conversation_id=conversation_id,
            message_id=message_id,
            call_id=call_id,
            title=args.title or None,
            questions_json=[question.model_dump(exclude_none=True) for question in args.questions],
            created_at=now,
            expires_at=now + timedelta(seconds=self.ttl),
            trace_parent=traceparent(),
        )
        async with self._engine.begin() as connection:
            await connection.execute(sa.insert(_question).values(row.model_dump()))
            if self._outbox is not None:
                data = ids(question_id=row.id, conversation_id=conversation_id, message_id=message_id)
                text = {"title": row.title, "questions": row.questions_json}
                await self._outbox.add(connection, "question.asked", data, member_id=member_id, text=text)
        return _info(row)

    async def get(self, question_id: UUID, member_id: UUID, organization_id: UUID) -> QuestionInfo | None:
        """The member's own question; None for an unknown id or another member's."""
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(
                    sa.select(_question).where(
                        _question.c.id == question_id,
                        _question.c.member_id == member_id,
                        _question.c.organization_id == organization_id,
                    )
                )
            ).first()
        return _info(row) if row is not None else None

    async def resolve(self, question_id: UUID, answers: dict[str, Any] | None) -> bool:
        """pending → answered (with `answers`) or cancelled (None), if it has not expired. True for
        the one caller whose compare-and-set won."""
        now = utcnow()
        status = QuestionStatus.CANCELLED if answers is None else QuestionStatus.ANSWERED
        async with self._engine.begin() as connection:
            result = await connection.execute(
                sa.update(_question)
                .where(
                    _question.c.id == question_id,
                    _question.c.status == QuestionStatus.PENDING,
                    _question.c.expires_at > now,
                )
                .values(status=status, answers_json=answers, resolved_at=now)
            )
        return result.rowcount == 1

    async def overdue(self, limit: int = 100) -> list[QuestionInfo]:
        """Pending questions past their expiry, the oldest first (at most `limit`)."""
        async with self._engine.connect() as connection:
            rows = (
                await connection.execute(
                    sa.select(_question)
                    .where(_question.c.status == QuestionStatus.PENDING, _question.c.expires_at <= utcnow())
                    .order_by(_question.c.expires_at)
                    .limit(limit)
                )
            ).all()
        return [_info(row) for row in rows]

    async def expire(self, question_id: UUID) -> bool:
        """pending → expired; True for the one caller that made the change."""
        async with self._engine.begin() as connection:
            result = await connection.execute(
                sa.update(_question)
                .where(_question.c.id == question_id, _question.c.status == QuestionStatus.PENDING)
                .values(status=QuestionStatus.EXPIRED, resolved_at=utcnow())
            )
        return result.rowcount == 1
