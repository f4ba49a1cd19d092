"""Pending approvals of previewed writes, and the audit log (SPEC §5).

A write tool's first call stores an `Approval`: bound to (member, conversation, tool, hash of the
canonical arguments), with an expiry. It is resolved exactly once, by a compare-and-set on its
status, whichever way the user answers:

- `resolve()`: the approve / reject button (`confirm_tool`), by approval id;
- `claim_for_chat()`: the user answered in the chat and the model repeated the identical call with
  `confirmed: true`; only a preview created before the user's latest message qualifies.

Two tabs approving at once, or a button click racing a chat answer: one compare-and-set wins, the
write runs once. An executed, rejected or expired approval can never be used again.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.store.models import Approval, ApprovalStatus, AuditEntry, Message, table_of, utcnow
from vernis.store.transactions import EngineTransactions, Transactions
from vernis.tracing.spans import traceparent
from vernis.webhooks.outbox import Outbox, ids

__all__ = ["ApprovalInfo", "ApprovalService", "arguments_hash"]

_approval = table_of(Approval)
_audit = table_of(AuditEntry)
_message = table_of(Message)

# Whether the member's conversation has an approval pending: read for nearly every message, built once.
_ANY_PENDING = (
    sa.select(_approval.c.id)
    .where(
        _approval.c.member_id == sa.bindparam("member_id"),
        _approval.c.organization_id == sa.bindparam("organization_id"),
        _approval.c.conversation_id == sa.bindparam("conversation_id"),
        _approval.c.status == ApprovalStatus.PENDING,
    )
    .limit(1)
)


def arguments_hash(tool_name: str, arguments: dict[str, Any]) -> str:
    canonical = orjson.dumps({"tool": tool_name, "arguments": arguments}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True, slots=True)
class ApprovalInfo:
    id: UUID
    organization_id: UUID
    member_id: UUID
    conversation_id: UUID
    message_id: UUID
    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    preview: dict[str, Any]
    status: str
    created_at: datetime
    expires_at: datetime
    # How it was resolved: "button", "chat", "superseded" (a new message moved on); None while pending.
    resolved_via: str | None = None
    # The traceparent of the tool call that asked for it (SPEC §22), when traced.
    trace_parent: str | None = None


def _info(row: Any) -> ApprovalInfo:
    return ApprovalInfo(
        id=row.id,
        organization_id=row.organization_id,
        member_id=row.member_id,
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        call_id=row.call_id,
        tool_name=row.tool_name,
        arguments=row.arguments_json,
        preview=row.preview_json,
        status=row.status,
        created_at=row.created_at,
        expires_at=row.expires_at,
        resolved_via=row.resolved_via,
        trace_parent=row.trace_parent,
    )


def _event_data(row: Any) -> dict[str, Any]:
    """What a webhook says of an approval (SPEC §22); its arguments and preview are text."""
    return ids(
        approval_id=row.id,
        conversation_id=row.conversation_id,
        message_id=row.message_id,
        call_id=row.call_id,
        tool_name=row.tool_name,
        expires_at=row.expires_at,
    )


class ApprovalService:
    def __init__(
        self,
        engine: AsyncEngine,
        ttl: float,
        *,
        outbox: Outbox | None = None,
        transactions: Transactions | None = None,
    ) -> None:
        self._engine = engine
        # Its reads for every message (`supersede`) go the short way (`Transactions.read`).
        self._transactions = transactions or EngineTransactions(engine)
        self.ttl = ttl
        # Webhooks (SPEC §22): approval.requested / approval.resolved, written with the change.
        self._outbox = outbox
        # SQLite begins a transaction only at the first write, so the read-modify-write of a
        # message's tool calls is serialized here; PostgreSQL also locks the row (FOR UPDATE).
        self._calls_lock = asyncio.Lock()

    async def create(
        self,
        *,
        organization_id: UUID,
        member_id: UUID,
        conversation_id: UUID,
        message_id: UUID,
        call_id: str,
        tool_name: str,
        arguments: dict[str, Any],
        preview: dict[str, Any],
    ) -> ApprovalInfo:
        now = utcnow()
        row = Approval(
            organization_id=organization_id,
            member_id=member_id,
            conversation_id=conversation_id,
            message_id=message_id,
            call_id=call_id,
            tool_name=tool_name,
            arguments_json=arguments,
            arguments_hash=arguments_hash(tool_name, arguments),
            preview_json=preview,
            created_at=now,
            expires_at=now + timedelta(seconds=self.ttl),
            trace_parent=traceparent(),
        )
        async with self._engine.begin() as connection:
            await connection.execute(sa.insert(_approval).values(row.model_dump()))
            if self._outbox is not None:
                text = {"arguments": arguments, "preview": preview}
                data = _event_data(row)
                await self._outbox.add(connection, "approval.requested", data, member_id=member_id, text=text)
        return _info(row)

    async def get(self, approval_id: UUID, member_id: UUID, organization_id: UUID) -> ApprovalInfo | None:
        async with self._engine.connect() as connection:
            row = (
                await connection.execute(
                    sa.select(_approval).where(
                        _approval.c.id == approval_id,
                        _approval.c.member_id == member_id,
                        _approval.c.organization_id == organization_id,
                    )
                )
            ).first()
        return _info(row) if row is not None else None

    async def resolve(
        self, approval_id: UUID, member_id: UUID, organization_id: UUID, *, approved: bool
    ) -> bool:
        """The button: pending → approved / rejected if it has not expired. True for the one winner."""
        return await self._transition(
            sa.and_(
                _approval.c.id == approval_id,
                _approval.c.member_id == member_id,
                _approval.c.organization_id == organization_id,
            ),
            ApprovalStatus.APPROVED if approved else ApprovalStatus.REJECTED,
            via="button",
        )

    async def claim_for_chat(
        self,
        *,
        member_id: UUID,
        organization_id: UUID,
        conversation_id: UUID,
        tool_name: str,
        arguments: dict[str, Any],
        answered_at: datetime,
    ) -> ApprovalInfo | None:
        """The chat: the newest pending preview of exactly this call, shown before the user's latest
        message (`answered_at`), becomes approved; None when there is no such preview."""
        digest = arguments_hash(tool_name, arguments)
        async with self._engine.connect() as connection:
            rows = (
                await connection.execute(
                    sa.select(_approval)
                    .where(
                        _approval.c.member_id == member_id,
                        _approval.c.organization_id == organization_id,
                        _approval.c.conversation_id == conversation_id,
                        _approval.c.tool_name == tool_name,
                        _approval.c.arguments_hash == digest,
                        _approval.c.status == ApprovalStatus.PENDING,
                        _approval.c.created_at < answered_at,
                        _approval.c.expires_at > utcnow(),
                    )
                    .order_by(_approval.c.created_at.desc())
                )
            ).all()
        for row in rows:
            if await self._transition(_approval.c.id == row.id, ApprovalStatus.APPROVED, via="chat"):
                return _info(row)
        return None

    async def _transition(self, which: sa.ColumnElement[bool], status: ApprovalStatus, *, via: str) -> bool:
        return bool(await self._resolve_pending(which, status, via=via, unexpired=True))

    async def supersede(
        self, *, member_id: UUID, organization_id: UUID, conversation_id: UUID
    ) -> list[ApprovalInfo]:
        """Every pending approval of the member's conversation → expired (`resolved_via`
        "superseded"): a new message moved on from it (SPEC §24). The ones that ended.

        Called for nearly every message: a read (on the approvals' index) finds whether any is
        pending first, and only then a write transaction ends them."""
        waiting = await self._transactions.read(
            _ANY_PENDING,
            {"member_id": member_id, "organization_id": organization_id, "conversation_id": conversation_id},
        )
        if not waiting:
            return []
        theirs = sa.and_(
            _approval.c.member_id == member_id,
            _approval.c.organization_id == organization_id,
            _approval.c.conversation_id == conversation_id,
        )
        rows = await self._resolve_pending(theirs, ApprovalStatus.EXPIRED, via="superseded", unexpired=False)
        return [_info(row) for row in rows]

    async def _resolve_pending(
        self, which: sa.ColumnElement[bool], status: ApprovalStatus, *, via: str, unexpired: bool
    ) -> list[Any]:
        """The pending approvals `which` selects (only those still in time, if `unexpired`) →
        `status`, each with its approval.resolved webhook in the same transaction; the rows changed."""
        now = utcnow()
        pending = _approval.c.status == ApprovalStatus.PENDING
        if unexpired:
            pending = sa.and_(pending, _approval.c.expires_at > now)
        async with self._engine.begin() as connection:
            rows = (
                await connection.execute(
                    sa.update(_approval)
                    .where(which, pending)
                    .values(status=status, resolved_via=via, resolved_at=now)
                    .returning(*_approval.c)
                )
            ).all()
            if self._outbox is not None:
                for row in rows:
                    data = _event_data(row) | {"status": str(status), "via": via}
                    await self._outbox.add(connection, "approval.resolved", data, member_id=row.member_id)
        return list(rows)

    async def expire(self, approval_id: UUID) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                sa.update(_approval)
                .where(_approval.c.id == approval_id, _approval.c.status == ApprovalStatus.PENDING)
                .values(status=ApprovalStatus.EXPIRED, resolved_at=utcnow())
            )

    async def finish(self, approval_id: UUID, *, ok: bool, result: dict[str, Any]) -> None:
        """approved → executed / failed, with what the write returned."""
        async with self._engine.begin() as connection:
            await connection.execute(
                sa.update(_approval)
                .where(_approval.c.id == approval_id, _approval.c.status == ApprovalStatus.APPROVED)
                .values(status=ApprovalStatus.EXECUTED if ok else ApprovalStatus.FAILED, result_json=result)
            )

    async def audit(
        self,
        *,
        organization_id: UUID,
        member_id: UUID,
        conversation_id: UUID | None,
        tool_name: str,
        arguments: dict[str, Any],
        outcome: str,
        approval_id: UUID | None,
        detail: str | None = None,
    ) -> None:
        async with self._engine.begin() as connection:
            await connection.execute(
                sa.insert(_audit).values(
                    AuditEntry(
                        organization_id=organization_id,
                        member_id=member_id,
                        conversation_id=conversation_id,
                        tool_name=tool_name,
                        arguments_json=arguments,
                        outcome=outcome,
                        approval_id=approval_id,
                        detail=detail,
                    ).model_dump()
                )
            )

    async def update_stored_call(
        self, message_id: UUID, call_id: str, *, status: str, result: dict[str, Any]
    ) -> bool:
        """Record an approval's outcome on the tool call that showed its preview, so history replay
        (and the model's window) show how it ended. False if the message is not stored."""
        async with self._calls_lock, self._engine.begin() as connection:
            row = (
                await connection.execute(
                    sa.select(_message.c.tool_calls_json).where(_message.c.id == message_id).with_for_update()
                )
            ).first()
            if row is None or not row.tool_calls_json:
                return False
            calls = [dict(call) for call in row.tool_calls_json]
            for call in calls:
                if call.get("call_id") == call_id:
                    asked = call.get("result")
                    if call.get("status") == "needs_confirmation" and isinstance(asked, dict):
                        # The preview the user answered stays: history shows it with its outcome.
                        data = asked.get("data")
                        if isinstance(data, dict) and "preview" in data:
                            call["approval"] = {
                                "confirmation_id": data.get("confirmation_id"),
                                "preview": data["preview"],
                            }
                    call["status"] = status
                    call["result"] = result
            await connection.execute(
                sa.update(_message).where(_message.c.id == message_id).values(tool_calls_json=calls)
            )
        return True
