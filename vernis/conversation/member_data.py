"""A member's conversations for the admin API (SPEC §15): exported as JSON, or erased.

Erasing deletes the member's conversations, their messages and their approvals; the audit of
writes (`audit_log`) stays, still naming the member (and through them the host's `sub`), and so
does the token usage (counts, no text).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from vernis.store.models import Approval, Conversation, Message, table_of

__all__ = ["MemberData"]

_conversation = table_of(Conversation)
_message = table_of(Message)
_approval = table_of(Approval)


def _iso(value: Any) -> Any:
    return value.isoformat().replace("+00:00", "Z") if hasattr(value, "isoformat") else value


class MemberData:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def export(self, member_id: UUID) -> list[dict[str, Any]]:
        """Every conversation of the member, oldest first, each with its messages in order."""
        async with self._engine.connect() as connection:
            conversations = (
                await connection.execute(
                    sa.select(
                        _conversation.c.id,
                        _conversation.c.title,
                        _conversation.c.previous_conversation_id,
                        _conversation.c.created_at,
                        _conversation.c.updated_at,
                    )
                    .where(_conversation.c.member_id == member_id)
                    .order_by(_conversation.c.created_at, _conversation.c.id)
                )
            ).all()
            messages = (
                await connection.execute(
                    sa.select(
                        _message.c.conversation_id,
                        _message.c.id,
                        _message.c.position,
                        _message.c.role,
                        _message.c.content,
                        _message.c.tool_calls_json,
                        _message.c.status,
                        _message.c.model,
                        _message.c.feedback_rating,
                        _message.c.feedback_comment,
                        _message.c.created_at,
                    )
                    .join(_conversation, _conversation.c.id == _message.c.conversation_id)
                    .where(_conversation.c.member_id == member_id)
                    .order_by(_message.c.conversation_id, _message.c.position)
                )
            ).all()
        by_conversation: dict[UUID, list[dict[str, Any]]] = {}
        for row in messages:
            by_conversation.setdefault(row.conversation_id, []).append(
                {
                    "id": str(row.id),
                    "position": row.position,
                    "role": row.role,
                    "content": row.content,
                    "tool_calls": row.tool_calls_json,
                    "status": row.status,
                    "model": row.model,
                    "feedback": None
                    if row.feedback_rating is None
                    else {"rating": row.feedback_rating, "comment": row.feedback_comment},
                    "created_at": _iso(row.created_at),
                }
            )
        return [
            {
                "id": str(row.id),
                "title": row.title,
                "previous_conversation_id": None
                if row.previous_conversation_id is None
                else str(row.previous_conversation_id),
                "created_at": _iso(row.created_at),
                "updated_at": _iso(row.updated_at),
                "messages": by_conversation.get(row.id, []),
            }
            for row in conversations
        ]

    async def erase(self, member_id: UUID) -> tuple[list[UUID], int]:
        """Delete the member's conversations with their messages and approvals, in one transaction;
        the ids of the conversations and how many messages went."""
        async with self._engine.begin() as connection:
            ids = list(
                (
                    await connection.execute(
                        sa.select(_conversation.c.id).where(_conversation.c.member_id == member_id)
                    )
                ).scalars()
            )
            if not ids:
                return [], 0
            await connection.execute(sa.delete(_approval).where(_approval.c.conversation_id.in_(ids)))
            removed = await connection.execute(sa.delete(_message).where(_message.c.conversation_id.in_(ids)))
            # Another member's conversation never links to this member's, but unlink to be sure.
            await connection.execute(
                sa.update(_conversation)
                .where(_conversation.c.previous_conversation_id.in_(ids))
                .values(previous_conversation_id=None)
            )
            await connection.execute(sa.delete(_conversation).where(_conversation.c.id.in_(ids)))
            return ids, removed.rowcount
