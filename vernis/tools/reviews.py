"""Review requests: writes a second member approves (SPEC §23), and where reviewers hear of them.

A tool the configuration names in `[[reviews]]` is not run when its member approves it (the card's
button or a chat confirmation): its approved `Approval` becomes a `Review`, waiting for a member of
the same organization who holds the reviewer permission and is not the requester. It is answered
exactly once, by a compare-and-set on its status (two reviewers' tabs, two instances: one wins), and
expires after `VERNIS_REVIEW_TTL`.

Reviewers hear of new requests on a channel of the event hub per organization and reviewer
permission (`review_channel`): a name of the same kind as a conversation's, which their sessions
subscribe to besides the conversation they show, on whichever instance they are connected.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid5

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from vernis.store.models import Member, Review, ReviewStatus, table_of, utcnow
from vernis.tools.approvals import ApprovalInfo
from vernis.webhooks.outbox import Outbox, ids

__all__ = ["MAX_LISTED", "ReviewInfo", "ReviewService", "review_channel", "review_envelope"]

_review = table_of(Review)
_member = table_of(Member)

# The most pending reviews a list shows (the oldest waiting first).
MAX_LISTED = 100
_CHANNELS = UUID("6f1d2c47-52a1-4f0e-9d55-3e1c2a9b7d10")


def review_channel(organization_id: UUID, permission: str) -> UUID:
    """The hub channel where the reviewers of `organization_id` holding `permission` hear of reviews."""
    return uuid5(_CHANNELS, f"{organization_id}:{permission}")


@dataclass(frozen=True, slots=True)
class ReviewInfo:
    id: UUID
    organization_id: UUID
    approval_id: UUID
    requester_id: UUID
    conversation_id: UUID
    message_id: UUID
    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    preview: dict[str, Any]
    reviewer_permission: str
    requester_permissions: frozenset[str]
    status: str
    reviewer_id: UUID | None
    note: str | None
    created_at: datetime
    expires_at: datetime
    # The requester's name, when read with it (lists).
    requester_name: str | None = None
    # The traceparent of the tool call that asked for the write (SPEC §22), when traced.
    trace_parent: str | None = None

    @property
    def channel(self) -> UUID:
        return review_channel(self.organization_id, self.reviewer_permission)


def _info(row: Any, requester_name: str | None = None) -> ReviewInfo:
    return ReviewInfo(
        id=row.id,
        organization_id=row.organization_id,
        approval_id=row.approval_id,
        requester_id=row.requester_id,
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        call_id=row.call_id,
        tool_name=row.tool_name,
        arguments=row.arguments_json,
        preview=row.preview_json,
        reviewer_permission=row.reviewer_permission,
        requester_permissions=frozenset(row.requester_permissions),
        status=row.status,
        reviewer_id=row.reviewer_id,
        note=row.note,
        created_at=row.created_at,
        expires_at=row.expires_at,
        requester_name=requester_name,
        trace_parent=row.trace_parent,
    )


def _event_data(row: Any) -> dict[str, Any]:
    """What a webhook says of a review (SPEC §22); its arguments, preview and note are text."""
    return ids(
        review_id=row.id,
        approval_id=row.approval_id,
        conversation_id=row.conversation_id,
        tool_name=row.tool_name,
        reviewer_permission=row.reviewer_permission,
        expires_at=row.expires_at,
    )


class ReviewService:
    def __init__(self, engine: AsyncEngine, ttl: float, *, outbox: Outbox | None = None) -> None:
        self._engine = engine
        self.ttl = ttl
        # Webhooks (SPEC §22): review.requested / review.resolved, written with the change.
        self._outbox = outbox

    async def _resolved(self, connection: AsyncConnection, row: Any) -> None:
        if self._outbox is not None:
            data = _event_data(row) | ids(status=row.status, reviewer_id=row.reviewer_id)
            text = {"note": row.note}
            await self._outbox.add(connection, "review.resolved", data, member_id=row.requester_id, text=text)

    async def create(
        self,
        approval: ApprovalInfo,
        reviewer_permission: str,
        requester_permissions: frozenset[str],
        requester_name: str | None = None,
    ) -> ReviewInfo:
        """The approved `approval` waits for a reviewer from now on."""
        now = utcnow()
        row = Review(
            organization_id=approval.organization_id,
            approval_id=approval.id,
            requester_id=approval.member_id,
            conversation_id=approval.conversation_id,
            message_id=approval.message_id,
            call_id=approval.call_id,
            tool_name=approval.tool_name,
            arguments_json=approval.arguments,
            preview_json=approval.preview,
            reviewer_permission=reviewer_permission,
            requester_permissions=sorted(requester_permissions),
            created_at=now,
            expires_at=now + timedelta(seconds=self.ttl),
            trace_parent=approval.trace_parent,
        )
        async with self._engine.begin() as connection:
            await connection.execute(sa.insert(_review).values(row.model_dump()))
            if self._outbox is not None:
                text = {"arguments": row.arguments_json, "preview": row.preview_json}
                data = _event_data(row)
                await self._outbox.add(
                    connection, "review.requested", data, member_id=row.requester_id, text=text
                )
        return _info(row, requester_name)

    async def get(self, review_id: UUID, organization_id: UUID) -> ReviewInfo | None:
        """The review, if it belongs to `organization_id` (another organization's is not found)."""
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(
                    sa.select(_review).where(
                        _review.c.id == review_id, _review.c.organization_id == organization_id
                    )
                )
            ).first()
        return _info(row) if row is not None else None

    async def pending(self, organization_id: UUID, permissions: frozenset[str]) -> list[ReviewInfo]:
        """The reviews waiting in `organization_id` for a holder of one of `permissions`, oldest first,
        with their requesters' names; expired ones left out."""
        if not permissions:
            return []
        async with self._engine.connect() as connection:
            rows = (
                await connection.execute(
                    sa.select(_review, _member.c.name.label("requester_name"))
                    .join(_member, _member.c.id == _review.c.requester_id)
                    .where(
                        _review.c.organization_id == organization_id,
                        _review.c.status == ReviewStatus.PENDING,
                        _review.c.reviewer_permission.in_(sorted(permissions)),
                        _review.c.expires_at > utcnow(),
                    )
                    .order_by(_review.c.created_at, _review.c.id)
                    .limit(MAX_LISTED)
                )
            ).all()
        return [_info(row, row.requester_name) for row in rows]

    async def overdue(self, organization_id: UUID | None = None) -> list[ReviewInfo]:
        """The pending reviews past their expiry (of `organization_id`, else of every organization),
        each now marked expired (by the one caller whose compare-and-set won: every review is
        returned once, across instances)."""
        where = [_review.c.status == ReviewStatus.PENDING, _review.c.expires_at <= utcnow()]
        if organization_id is not None:
            where.append(_review.c.organization_id == organization_id)
        async with self._engine.connect() as connection:
            rows = (await connection.execute(sa.select(_review).where(*where).limit(MAX_LISTED))).all()
        return [_info(row) for row in rows if await self.expire(row.id)]

    async def expire(self, review_id: UUID) -> bool:
        """pending → expired once it is overdue; True for the one caller that made the change."""
        now = utcnow()
        async with self._engine.begin() as connection:
            result = await connection.execute(
                sa.update(_review)
                .where(
                    _review.c.id == review_id,
                    _review.c.status == ReviewStatus.PENDING,
                    _review.c.expires_at <= now,
                )
                .values(status=ReviewStatus.EXPIRED, resolved_at=now)
                .returning(*_review.c)
            )
            row = result.first()
            if row is not None:
                await self._resolved(connection, row)
        return row is not None

    async def resolve(self, review_id: UUID, reviewer_id: UUID, *, approved: bool, note: str | None) -> bool:
        """pending → approved / rejected, if it has not expired and the reviewer is not the requester.
        True for the one winner, across tabs and instances."""
        now = utcnow()
        async with self._engine.begin() as connection:
            result = await connection.execute(
                sa.update(_review)
                .where(
                    _review.c.id == review_id,
                    _review.c.status == ReviewStatus.PENDING,
                    _review.c.expires_at > now,
                    _review.c.requester_id != reviewer_id,
                )
                .values(
                    status=ReviewStatus.APPROVED if approved else ReviewStatus.REJECTED,
                    reviewer_id=reviewer_id,
                    note=note,
                    resolved_at=now,
                )
                .returning(*_review.c)
            )
            row = result.first()
            if row is not None:
                await self._resolved(connection, row)
        return row is not None

    async def finish(self, review_id: UUID, *, ok: bool, result: dict[str, Any]) -> None:
        """approved → executed / failed, with what the write returned."""
        async with self._engine.begin() as connection:
            await connection.execute(
                sa.update(_review)
                .where(_review.c.id == review_id, _review.c.status == ReviewStatus.APPROVED)
                .values(status=ReviewStatus.EXECUTED if ok else ReviewStatus.FAILED, result_json=result)
            )


def review_envelope(review: ReviewInfo) -> dict[str, Any]:
    """What the model and the card read while the write waits for a reviewer."""
    return {
        "ok": True,
        "data": {
            "review_requested": True,
            "review_id": str(review.id),
            "expires_at": review.expires_at.isoformat(),
            "instructions": (
                "Nothing has changed yet: this change needs a reviewer's approval, which was requested. "
                "Tell the user it is waiting for a reviewer; its outcome comes back in this conversation."
            ),
        },
    }
