"""The tables. Alembic migrations (`migrations/`) create them; `SQLModel.metadata` is never used to
create the schema outside tests of the migrations themselves.

Times are timezone-aware UTC on every backend: `UTCDateTime` rejects naive datetimes on the way in
and returns aware UTC ones on the way out (SQLite itself stores no zone). Ids are UUIDs generated in
Python so that a row's id is known before it is written (the wire protocol announces message ids
before the answer is stored).

Constraint and index names follow `NAMING_CONVENTION`, so they are identical on SQLite and PostgreSQL
and later migrations (batch mode on SQLite) can address them by name. The convention is installed on
`SQLModel.metadata` when this module is imported: every module declaring tables imports it first.
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, date, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

__all__ = [
    "NAMING_CONVENTION",
    "Approval",
    "ApprovalStatus",
    "Attachment",
    "AuditEntry",
    "Conversation",
    "Member",
    "Message",
    "MessageAttachment",
    "MessageRole",
    "MessageStatus",
    "OrgAIRules",
    "Organization",
    "Question",
    "QuestionStatus",
    "Review",
    "ReviewStatus",
    "Summary",
    "UTCDateTime",
    "Usage",
    "WebhookDelivery",
    "WebhookStatus",
    "table_of",
    "utcnow",
]


NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    # The referred table is left out: it would push names past PostgreSQL's 63-character limit,
    # where they get truncated and hashed differently than on SQLite.
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "pk": "pk_%(table_name)s",
}
SQLModel.metadata.naming_convention = NAMING_CONVENTION


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """`TIMESTAMP WITH TIME ZONE` that only accepts and only returns aware UTC datetimes.

    SQLite keeps the text `YYYY-MM-DD HH:MM:SS.ffffff` with no zone; normalising to UTC before
    binding keeps that text sortable, so ordering and cursor comparisons agree with PostgreSQL.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: Vernis stores aware UTC times only")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


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
    # An exchange the user edited (`edit_message`): kept as the earlier version, out of the model's
    # window. The edited user message and its answer follow it.
    SUPERSEDED = "superseded"


def table_of(model: type[SQLModel]) -> sa.Table:
    """The Core `Table` of a table model, typed (SQLModel leaves `Model.__table__` untyped)."""
    table = model.__table__  # type: ignore[attr-defined]
    assert isinstance(table, sa.Table), f"{model.__name__} is not a table model"
    return table


def _tz() -> UTCDateTime:
    return UTCDateTime()


class Organization(SQLModel, table=True):
    __tablename__ = "organization"

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    name: str = Field(max_length=255)
    # The host's id of the organization (the token's `org` claim, SPEC §2).
    external_id: str = Field(max_length=255, unique=True)
    # IANA zone name; "today" in the system prompt and analytics are computed in it.
    timezone: str = Field(default="UTC", max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Member(SQLModel, table=True):
    """A host's user, made just in time from their first token and kept up to date from later ones."""

    __tablename__ = "member"
    __table_args__ = (
        sa.UniqueConstraint("organization_id", "external_id", name="uq_member_organization_id"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    # The host's id of the user (the token's `sub`), unique within the organization.
    external_id: str = Field(max_length=255)
    email: str | None = Field(default=None, max_length=320)
    name: str = Field(max_length=255)
    role: str = Field(default="member", max_length=64)
    # Permissions the organization took away from this one member, on top of their role's set
    # (e.g. "assistant:use" to keep them off the assistant). The database default covers inserts
    # that leave it out.
    revoked_permissions: list[str] = Field(
        default_factory=list, sa_type=sa.JSON(), sa_column_kwargs={"server_default": sa.text("'[]'")}
    )
    # A removed member keeps their rows (audit) but can no longer connect; open sockets close (4401).
    removed_at: datetime | None = Field(default=None, sa_type=_tz())
    # The admin API's revocation (SPEC §15): tokens issued at or before it are refused, and the
    # member's open sockets close (4401); a token issued later lets them in again.
    tokens_revoked_at: datetime | None = Field(default=None, sa_type=_tz())
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
    # Indexed because deleting a conversation looks up (and the foreign key nulls) its successor.
    previous_conversation_id: uuid.UUID | None = Field(
        default=None, foreign_key="assistant_conversation.id", ondelete="SET NULL", index=True
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
        sa.Index(
            "ix_message_feedback_at",
            "feedback_at",
            sqlite_where=sa.text("feedback_at IS NOT NULL"),
            postgresql_where=sa.text("feedback_at IS NOT NULL"),
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    conversation_id: uuid.UUID = Field(foreign_key="assistant_conversation.id", ondelete="CASCADE")
    # 0-based order within the conversation; also its count at insert time.
    position: int
    role: str = Field(max_length=16)
    content: str = Field(default="", sa_type=sa.Text())
    # [{call_id, tool_name, arguments, status, result}] in the order the calls were made.
    # None is SQL NULL, not the JSON text `null`, so "no tool calls" is queryable as IS NULL.
    tool_calls_json: list[dict[str, Any]] | None = Field(default=None, sa_type=sa.JSON(none_as_null=True))
    status: str = Field(default=MessageStatus.COMPLETE.value, max_length=16)
    # The reasoning the model streamed with the answer (SPEC §19): shown folded, never sent back to
    # the model; None when it sent none, or with VERNIS_STORE_REASONING=0.
    reasoning: str | None = Field(default=None, sa_type=sa.Text())
    client_message_id: str | None = Field(default=None, max_length=128)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str | None = Field(default=None, max_length=255)
    feedback_rating: str | None = Field(default=None, max_length=8)
    feedback_comment: str | None = Field(default=None, sa_type=sa.Text())
    # When the rating was given (the feedback export's `since`).
    feedback_at: datetime | None = Field(default=None, sa_type=_tz())
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class ApprovalStatus(enum.StrEnum):
    # pending → approved → executed | failed;  pending → rejected | expired.
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    EXECUTED = "executed"
    FAILED = "failed"


class Approval(SQLModel, table=True):
    """A previewed write waiting for the user's answer (SPEC §5).

    Bound to (member, conversation, tool, hash of the arguments); resolved once, by a compare-and-
    set on `status`, so two tabs approving at the same moment run the write once.
    """

    __tablename__ = "assistant_approval"
    __table_args__ = (
        sa.Index(
            "ix_approval_lookup", "member_id", "conversation_id", "tool_name", "arguments_hash", "status"
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    member_id: uuid.UUID = Field(foreign_key="member.id", ondelete="CASCADE")
    conversation_id: uuid.UUID = Field(foreign_key="assistant_conversation.id", ondelete="CASCADE")
    # The assistant message whose tool call showed the preview, and that call's id.
    message_id: uuid.UUID
    call_id: str = Field(max_length=128)
    tool_name: str = Field(max_length=64)
    arguments_json: dict[str, Any] = Field(sa_type=sa.JSON())
    # sha256 of the canonical arguments (sorted keys, `confirmed` left out).
    arguments_hash: str = Field(max_length=64)
    preview_json: dict[str, Any] = Field(sa_type=sa.JSON())
    status: str = Field(default=ApprovalStatus.PENDING.value, max_length=16)
    # How it was answered: "button" (confirm_tool) or "chat" (the model's confirmed call).
    resolved_via: str | None = Field(default=None, max_length=16)
    result_json: dict[str, Any] | None = Field(default=None, sa_type=sa.JSON(none_as_null=True))
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    expires_at: datetime = Field(sa_type=_tz())
    resolved_at: datetime | None = Field(default=None, sa_type=_tz())
    # The W3C traceparent of the tool call that made it, when the answer was traced (SPEC §22): the
    # answer that goes on after it, on whichever instance, joins that trace.
    trace_parent: str | None = Field(default=None, max_length=64)


class ReviewStatus(enum.StrEnum):
    # pending → approved → executed | failed;  pending → rejected | expired.
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    EXECUTED = "executed"
    FAILED = "failed"


class Review(SQLModel, table=True):
    """A write its member approved that waits for a second member (SPEC §23).

    Made from an approved `Approval` of a tool the configuration sends to review; answered once, by a
    compare-and-set on `status`, by a member of the same organization holding `reviewer_permission`
    who is not the requester. The write then runs as the requester, with `requester_permissions`.
    """

    __tablename__ = "assistant_review"
    __table_args__ = (sa.Index("ix_review_org_status", "organization_id", "status", "created_at"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    approval_id: uuid.UUID = Field(foreign_key="assistant_approval.id", ondelete="CASCADE", unique=True)
    requester_id: uuid.UUID = Field(foreign_key="member.id", ondelete="CASCADE")
    conversation_id: uuid.UUID = Field(foreign_key="assistant_conversation.id", ondelete="CASCADE")
    # The assistant message whose tool call showed the preview, and that call's id (its card).
    message_id: uuid.UUID
    call_id: str = Field(max_length=128)
    tool_name: str = Field(max_length=64)
    arguments_json: dict[str, Any] = Field(sa_type=sa.JSON())
    preview_json: dict[str, Any] = Field(sa_type=sa.JSON())
    reviewer_permission: str = Field(max_length=64)
    # What the requester held when they approved it: the write runs with these (less any revoked since).
    requester_permissions: list[str] = Field(sa_type=sa.JSON())
    status: str = Field(default=ReviewStatus.PENDING.value, max_length=16)
    reviewer_id: uuid.UUID | None = Field(default=None, foreign_key="member.id", ondelete="SET NULL")
    note: str | None = Field(default=None, sa_type=sa.Text())
    result_json: dict[str, Any] | None = Field(default=None, sa_type=sa.JSON(none_as_null=True))
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    expires_at: datetime = Field(sa_type=_tz())
    resolved_at: datetime | None = Field(default=None, sa_type=_tz())
    # The W3C traceparent of the tool call that made it, when the answer was traced (SPEC §22): the
    # answer that goes on after it, on whichever instance, joins that trace.
    trace_parent: str | None = Field(default=None, max_length=64)


class AuditEntry(SQLModel, table=True):
    """One row per tool run that writes: who, which tool, with what, how it ended, under which approval;
    and one per guard finding (vernis.guards)."""

    __tablename__ = "audit_log"
    __table_args__ = (sa.Index("ix_audit_org_created", "organization_id", "created_at"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    member_id: uuid.UUID | None = Field(default=None, foreign_key="member.id", ondelete="SET NULL")
    conversation_id: uuid.UUID | None = None
    tool_name: str = Field(max_length=64)
    arguments_json: dict[str, Any] = Field(sa_type=sa.JSON())
    # "ok", "error" (the tool refused or failed), "rejected" (the user said no); or a guard's finding
    # (vernis.guards): "guard_block" / "guard_redact" / "guard_warn", its details in `arguments_json`
    # ({"guard": where, "findings": [...]}, never the text) and `tool_name` "(user message)" for input.
    outcome: str = Field(max_length=16)
    detail: str | None = Field(default=None, sa_type=sa.Text())
    approval_id: uuid.UUID | None = Field(
        default=None, foreign_key="assistant_approval.id", ondelete="SET NULL"
    )
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Usage(SQLModel, table=True):
    """Tokens spent, per member, UTC day and model (SPEC §15): what `GET /api/assistant/usage` shows
    and what the token quotas start from. Added to at the end of each answer; kept when the member's
    conversations are deleted."""

    __tablename__ = "assistant_usage"
    __table_args__ = (sa.Index("ix_usage_org_day", "organization_id", "day"),)

    member_id: uuid.UUID = Field(foreign_key="member.id", ondelete="CASCADE", primary_key=True)
    day: date = Field(primary_key=True)
    model: str = Field(max_length=255, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    input_tokens: int = Field(default=0, sa_type=sa.BigInteger())
    output_tokens: int = Field(default=0, sa_type=sa.BigInteger())
    # Of `input_tokens`, those the provider read from its prompt cache (SPEC §19).
    cached_tokens: int = Field(default=0, sa_type=sa.BigInteger(), sa_column_kwargs={"server_default": "0"})
    answers: int = Field(default=0)


class QuestionStatus(enum.StrEnum):
    # pending → answered | cancelled | expired.
    PENDING = "pending"
    ANSWERED = "answered"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class Question(SQLModel, table=True):
    """Questions the assistant asked with `ask_user`, waiting for the user's form (SPEC §17).

    Like an approval: bound to its member and conversation, resolved once by a compare-and-set on
    `status`, expiring at `expires_at`; the answers the user gave are kept with it.
    """

    __tablename__ = "assistant_question"
    __table_args__ = (sa.Index("ix_question_member_status", "member_id", "status"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    member_id: uuid.UUID = Field(foreign_key="member.id", ondelete="CASCADE")
    conversation_id: uuid.UUID = Field(foreign_key="assistant_conversation.id", ondelete="CASCADE")
    # The assistant message whose `ask_user` call asked, and that call's id (its card).
    message_id: uuid.UUID
    call_id: str = Field(max_length=128)
    title: str | None = Field(default=None, max_length=255)
    # [{id, label, type, options?, required}] as the model asked them, checked.
    questions_json: list[dict[str, Any]] = Field(sa_type=sa.JSON())
    status: str = Field(default=QuestionStatus.PENDING.value, max_length=16)
    answers_json: dict[str, Any] | None = Field(default=None, sa_type=sa.JSON(none_as_null=True))
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    expires_at: datetime = Field(sa_type=_tz())
    resolved_at: datetime | None = Field(default=None, sa_type=_tz())
    # The W3C traceparent of the tool call that made it, when the answer was traced (SPEC §22): the
    # answer that goes on after it, on whichever instance, joins that trace.
    trace_parent: str | None = Field(default=None, max_length=64)


class WebhookStatus(enum.StrEnum):
    # pending → delivered | failed (retried for VERNIS_WEBHOOK_RETRY_FOR); failed → pending (retry).
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(SQLModel, table=True):
    """One event for one `[[webhooks]]` receiver (SPEC §22): the outbox, written in the transaction
    of the change it reports, and the delivery log.

    An instance sends it only while it holds its lease (`lease_until`, taken by a compare-and-set):
    several instances deliver each one once, and a lease left by a dead instance runs out."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (sa.Index("ix_webhook_due", "status", "next_at"),)

    # Also the delivery's `id` on the wire: a receiver drops what it has seen.
    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    url: str = Field(max_length=2048)
    event: str = Field(max_length=64)
    payload_json: dict[str, Any] = Field(sa_type=sa.JSON())
    status: str = Field(default=WebhookStatus.PENDING.value, max_length=16)
    attempts: int = 0
    next_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    lease_until: datetime | None = Field(default=None, sa_type=_tz())
    last_error: str | None = Field(default=None, max_length=500)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    delivered_at: datetime | None = Field(default=None, sa_type=_tz())


class Attachment(SQLModel, table=True):
    """A file a member uploaded (SPEC §21). Its bytes live in the attachment store under `digest`
    (SHA-256 of the content): two rows with the same bytes share one stored file, which is deleted
    with the last row naming it."""

    __tablename__ = "assistant_attachment"
    __table_args__ = (
        sa.Index("ix_attachment_member", "member_id", "organization_id"),
        sa.Index("ix_attachment_digest", "digest"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    member_id: uuid.UUID = Field(foreign_key="member.id", ondelete="CASCADE")
    name: str = Field(max_length=255)
    media_type: str = Field(max_length=64)
    # `image`, `document` or `text`: how the model receives it.
    kind: str = Field(max_length=16)
    size: int = Field(sa_type=sa.BigInteger())
    digest: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class MessageAttachment(SQLModel, table=True):
    """Which attachments a user message carries, in the order it listed them."""

    __tablename__ = "assistant_message_attachment"

    message_id: uuid.UUID = Field(foreign_key="assistant_message.id", ondelete="CASCADE", primary_key=True)
    attachment_id: uuid.UUID = Field(
        foreign_key="assistant_attachment.id", ondelete="CASCADE", primary_key=True, index=True
    )
    position: int = 0


class Summary(SQLModel, table=True):
    """A summary checkpoint of a conversation (SPEC §19): what the model reads instead of the
    messages it covers. The newest checkpoint of a conversation is the one in use; each earlier one
    still marks, in the history, where a compaction happened."""

    __tablename__ = "assistant_summary"
    __table_args__ = (sa.Index("ix_summary_conversation", "conversation_id", "created_at"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    conversation_id: uuid.UUID = Field(foreign_key="assistant_conversation.id", ondelete="CASCADE")
    # The newest message the summary covers. After a rollover it may be one of the previous
    # conversation's messages: no foreign key.
    through_message_id: uuid.UUID
    # The messages of this conversation it covers: those at positions below `covered` (0 when it
    # covers only messages of the conversation this one continues).
    covered: int = 0
    text: str = Field(sa_type=sa.Text())
    # The model that wrote it.
    model: str | None = Field(default=None, max_length=255)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
