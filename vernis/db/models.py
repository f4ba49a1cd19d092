"""The tables. Alembic migrations (`migrations/`) create them; `SQLModel.metadata` is never used to
create the schema outside tests of the migrations themselves.

Times are timezone-aware UTC. Ids are UUIDs generated in Python so that a row's id is known before
it is written (the wire protocol announces message ids before the answer is stored).
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

__all__ = [
    "Conversation",
    "Member",
    "Message",
    "MessageRole",
    "MessageStatus",
    "OrgAIRules",
    "Organization",
    "Role",
    "utcnow",
]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Role(enum.StrEnum):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


class MessageRole(enum.StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


class MessageStatus(enum.StrEnum):
    # An assistant message is `streaming` while its answer runs (flushed periodically); it ends as
    # one of the three others. Startup recovery turns a leftover `streaming` row into `failed`.
    STREAMING = "streaming"
    COMPLETE = "complete"
    STOPPED = "stopped"
    FAILED = "failed"


def _tz() -> sa.DateTime:
    return sa.DateTime(timezone=True)


class Organization(SQLModel, table=True):
    __tablename__ = "organization"

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    name: str = Field(max_length=255)
    slug: str = Field(max_length=64, unique=True)
    # IANA zone name; "today" in the system prompt and analytics are computed in it.
    timezone: str = Field(default="UTC", max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Member(SQLModel, table=True):
    __tablename__ = "member"

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", index=True, ondelete="CASCADE")
    email: str = Field(max_length=320, unique=True)
    name: str = Field(max_length=255)
    role: str = Field(default=Role.MEMBER.value, max_length=16)
    # A removed member keeps their rows (audit) but can no longer connect; open sockets close (4401).
    removed_at: datetime | None = Field(default=None, sa_type=_tz())
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class OrgAIRules(SQLModel, table=True):
    """Admin-written instructions an organization gives its assistant (system prompt, SPEC §7)."""

    __tablename__ = "organization_ai_rules"

    organization_id: uuid.UUID = Field(foreign_key="organization.id", primary_key=True, ondelete="CASCADE")
    rules: str = Field(default="", sa_type=sa.Text())
    updated_by: uuid.UUID | None = Field(default=None, foreign_key="member.id", ondelete="SET NULL")
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Conversation(SQLModel, table=True):
    __tablename__ = "assistant_conversation"
    __table_args__ = (
        sa.Index("ix_conversation_member_org_updated", "member_id", "organization_id", "updated_at"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    member_id: uuid.UUID = Field(foreign_key="member.id", ondelete="CASCADE")
    title: str | None = Field(default=None, max_length=255)
    # Set on a conversation created by rollover: the full conversation it continues.
    previous_conversation_id: uuid.UUID | None = Field(
        default=None, foreign_key="assistant_conversation.id", ondelete="SET NULL"
    )
    # Number of stored messages; kept with every insert so listing and rollover need no COUNT.
    message_count: int = Field(default=0)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Message(SQLModel, table=True):
    __tablename__ = "assistant_message"
    __table_args__ = (
        sa.UniqueConstraint("conversation_id", "position", name="uq_message_conversation_position"),
        sa.Index(
            "ix_message_client_id",
            "conversation_id",
            "client_message_id",
            unique=True,
            sqlite_where=sa.text("client_message_id IS NOT NULL"),
            postgresql_where=sa.text("client_message_id IS NOT NULL"),
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    conversation_id: uuid.UUID = Field(foreign_key="assistant_conversation.id", ondelete="CASCADE")
    # 0-based order within the conversation; also its count at insert time.
    position: int
    role: str = Field(max_length=16)
    content: str = Field(default="", sa_type=sa.Text())
    # [{call_id, tool_name, arguments, status, result}] in the order the calls were made.
    tool_calls_json: list[dict[str, Any]] | None = Field(default=None, sa_type=sa.JSON())
    status: str = Field(default=MessageStatus.COMPLETE.value, max_length=16)
    client_message_id: str | None = Field(default=None, max_length=128)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = Field(default=None, max_length=255)
    feedback_rating: str | None = Field(default=None, max_length=8)
    feedback_comment: str | None = Field(default=None, sa_type=sa.Text())
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
