"""The reference CRM the tools work on (SPEC §5, §8): contacts, calls, SMS, plans, tasks and the
organization's phone numbers, voice agents, analyzers, text agents and knowledge.

Tenancy: every row has `organization_id` and every query must filter on it. A row that cannot exist
without its parent (a contact's notes, e-mail addresses, phone numbers and tags; a plan's template and
contact; a phone number's analyzers) references it by `(parent_id, organization_id)`, so the database
itself refuses to hang it off another organization's row. Optional references (a call's contact, a
task's assignee, a phone number's agent) are plain foreign keys that become NULL when their target is
deleted; that both ends belong to one organization is the writer's job: look the target up in the
caller's organization first, exactly as a tool must to answer "not found".

Conventions a writer must keep:

- E-mail addresses are stored lowercased. Phone numbers keep the text as typed (`number`) and its
  E.164 form (`number_e164`, from `to_e164`), which is what search compares.
- At most one primary e-mail address and one primary phone number per contact (partial unique
  indexes): clear the old primary, then set the new one, in two statements.
- Tag names are lowercase words unique per organization (`patient`, `insurance-pending`).
- Enumerated columns hold the values of the enums below; CHECK constraints refuse anything else.
  A task's `completed_at` is set exactly when its status is `done`; an SMS is `received` exactly
  when it is inbound. Messages the assistant sends are stored `queued`: the outbox the host product
  delivers from (`ix_sms_queued`).

Indexes serve the tools: contacts by name within an organization, e-mail and E.164 lookups scoped
by organization, calls and messages by organization or contact and time, tasks by organization (or
assignee), status and due date, plans by organization or assignee and status.
"""

from __future__ import annotations

import enum
import re
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from vernis.store.models import _tz, utcnow

__all__ = [
    "Analyzer",
    "Call",
    "CallStatus",
    "Contact",
    "ContactEmail",
    "ContactNote",
    "ContactPhone",
    "ContactTag",
    "Direction",
    "KnowledgeItem",
    "Notification",
    "PhoneNumber",
    "PhoneNumberAnalyzer",
    "Plan",
    "PlanStatus",
    "PlanTemplate",
    "SmsMessage",
    "SmsStatus",
    "Tag",
    "Task",
    "TaskStatus",
    "TextAgent",
    "VoiceAgent",
    "to_e164",
]


class Direction(enum.StrEnum):
    INBOUND = "inbound"
    OUTBOUND = "outbound"


class CallStatus(enum.StrEnum):
    ANSWERED = "answered"
    MISSED = "missed"
    VOICEMAIL = "voicemail"
    FAILED = "failed"


class SmsStatus(enum.StrEnum):
    # Inbound messages are `received`; outbound ones go queued → sent → delivered | failed.
    RECEIVED = "received"
    QUEUED = "queued"
    SENT = "sent"
    DELIVERED = "delivered"
    FAILED = "failed"


class PlanStatus(enum.StrEnum):
    ACTIVE = "active"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class TaskStatus(enum.StrEnum):
    OPEN = "open"
    DONE = "done"
    DISMISSED = "dismissed"


_MIN_E164_DIGITS = 8
_MAX_E164_DIGITS = 15
_PHONE_PUNCTUATION = re.compile(r"[\s().\-/\u00a0]")


def to_e164(number: str, default_country_code: str = "1") -> str | None:
    """The E.164 form (`+` and 8 to 15 digits) of a phone number typed in any common format, or None.

    `+1 (212) 555-0147`, `212.555.0147`, `1-212-555-0147` and `0012125550147` all give
    `+12125550147`; the `(0)` of `+49 (0)30 1234567` is dropped. A number without a country prefix
    is read in `default_country_code` (digits, no `+`): for `1` (North America) ten digits, or
    eleven starting with 1; elsewhere a leading trunk `0` is dropped (`030 1234567` with `49` gives
    `+49301234567`). Letters, extensions and numbers too short or too long for E.164 give None.
    """
    text = _PHONE_PUNCTUATION.sub("", number.strip().replace("(0)", ""))
    if text.startswith("+"):
        digits = text[1:]
    elif text.startswith("00"):
        digits = text[2:]
    elif not text.isdigit():
        return None
    elif default_country_code == "1":
        if len(text) == 10:
            digits = "1" + text
        elif len(text) == 11 and text.startswith("1"):
            digits = text
        else:
            return None
    else:
        digits = default_country_code + text.removeprefix("0")
    if not digits.isdigit() or not _MIN_E164_DIGITS <= len(digits) <= _MAX_E164_DIGITS:
        return None
    if digits.startswith("0"):
        return None
    return "+" + digits


def _one_of(column: str, values: type[enum.StrEnum]) -> str:
    return f"{column} IN ({', '.join(repr(member.value) for member in values)})"


def _org() -> Any:
    return Field(foreign_key="organization.id", ondelete="CASCADE")


def _tenant_key(table: str) -> sa.UniqueConstraint:
    """(id, organization_id): the target of the organization-checked references to `table`."""
    return sa.UniqueConstraint("id", "organization_id", name=f"uq_{table}_id_organization_id")


def _owned_by(column: str, table: str, ondelete: str | None = "CASCADE") -> sa.ForeignKeyConstraint:
    """A reference to `table` that only a row of the same organization can satisfy."""
    return sa.ForeignKeyConstraint(
        [column, "organization_id"], [f"{table}.id", f"{table}.organization_id"], ondelete=ondelete
    )


class Contact(SQLModel, table=True):
    __tablename__ = "contact"
    __table_args__ = (
        _tenant_key("contact"),
        # Lists sorted by name and name search, both within one organization.
        sa.Index("ix_contact_org_name", "organization_id", "last_name", "first_name"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    first_name: str = Field(max_length=100)
    last_name: str = Field(default="", max_length=100)
    company: str | None = Field(default=None, max_length=255)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class ContactNote(SQLModel, table=True):
    __tablename__ = "contact_note"
    __table_args__ = (
        _owned_by("contact_id", "contact"),
        sa.Index("ix_contact_note_contact_created", "contact_id", "created_at"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    contact_id: uuid.UUID
    author_id: uuid.UUID | None = Field(default=None, foreign_key="member.id", ondelete="SET NULL")
    body: str = Field(sa_type=sa.Text())
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Tag(SQLModel, table=True):
    __tablename__ = "tag"
    __table_args__ = (
        _tenant_key("tag"),
        sa.UniqueConstraint("organization_id", "name", name="uq_tag_org_name"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    name: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class ContactTag(SQLModel, table=True):
    __tablename__ = "contact_tag"
    __table_args__ = (
        _owned_by("contact_id", "contact"),
        _owned_by("tag_id", "tag"),
        # The primary key serves "tags of a contact"; this one "contacts with a tag".
        sa.Index("ix_contact_tag_tag", "tag_id"),
    )

    contact_id: uuid.UUID = Field(primary_key=True)
    tag_id: uuid.UUID = Field(primary_key=True)
    organization_id: uuid.UUID = _org()


class ContactEmail(SQLModel, table=True):
    __tablename__ = "contact_email"
    __table_args__ = (
        _owned_by("contact_id", "contact"),
        sa.UniqueConstraint("contact_id", "email", name="uq_contact_email_address"),
        sa.Index("ix_contact_email_org_email", "organization_id", "email"),
        sa.Index(
            "ix_contact_email_primary",
            "contact_id",
            unique=True,
            sqlite_where=sa.text("is_primary"),
            postgresql_where=sa.text("is_primary"),
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    contact_id: uuid.UUID
    email: str = Field(max_length=320)  # lowercased
    label: str = Field(default="personal", max_length=32)  # personal, work, other
    is_primary: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class ContactPhone(SQLModel, table=True):
    __tablename__ = "contact_phone"
    __table_args__ = (
        _owned_by("contact_id", "contact"),
        sa.CheckConstraint("number_e164 LIKE '+%'", name="e164"),
        sa.UniqueConstraint("contact_id", "number_e164", name="uq_contact_phone_number"),
        sa.Index("ix_contact_phone_org_e164", "organization_id", "number_e164"),
        sa.Index(
            "ix_contact_phone_primary",
            "contact_id",
            unique=True,
            sqlite_where=sa.text("is_primary"),
            postgresql_where=sa.text("is_primary"),
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    contact_id: uuid.UUID
    number: str = Field(max_length=32)  # as typed
    number_e164: str = Field(max_length=16)  # to_e164(number): what search compares
    label: str = Field(default="mobile", max_length=32)  # mobile, home, work, other
    is_primary: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class VoiceAgent(SQLModel, table=True):
    """An AI agent that answers or places calls on the organization's phone numbers."""

    __tablename__ = "voice_agent"
    __table_args__ = (sa.UniqueConstraint("organization_id", "name", name="uq_voice_agent_org_name"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    name: str = Field(max_length=255)
    voice: str = Field(max_length=64)
    language: str = Field(default="en-US", max_length=16)  # BCP 47
    instructions: str = Field(default="", sa_type=sa.Text())  # the agent's prompt
    active: bool = True
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class TextAgent(SQLModel, table=True):
    """An AI agent that answers SMS on the organization's phone numbers."""

    __tablename__ = "text_agent"
    __table_args__ = (sa.UniqueConstraint("organization_id", "name", name="uq_text_agent_org_name"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    name: str = Field(max_length=255)
    instructions: str = Field(default="", sa_type=sa.Text())
    active: bool = True
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Analyzer(SQLModel, table=True):
    """Criteria a finished call on a phone number is assessed against."""

    __tablename__ = "analyzer"
    __table_args__ = (
        _tenant_key("analyzer"),
        sa.UniqueConstraint("organization_id", "name", name="uq_analyzer_org_name"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    name: str = Field(max_length=255)
    description: str = Field(default="", sa_type=sa.Text())
    criteria: str = Field(default="", sa_type=sa.Text())
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class PhoneNumber(SQLModel, table=True):
    """One of the organization's own lines, with the agents that answer it."""

    __tablename__ = "phone_number"
    __table_args__ = (
        _tenant_key("phone_number"),
        sa.CheckConstraint("number LIKE '+%'", name="e164"),
        sa.UniqueConstraint("organization_id", "number", name="uq_phone_number_org_number"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    number: str = Field(max_length=16)  # E.164
    label: str = Field(max_length=64)
    voice_agent_id: uuid.UUID | None = Field(default=None, foreign_key="voice_agent.id", ondelete="SET NULL")
    text_agent_id: uuid.UUID | None = Field(default=None, foreign_key="text_agent.id", ondelete="SET NULL")
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class PhoneNumberAnalyzer(SQLModel, table=True):
    __tablename__ = "phone_number_analyzer"
    __table_args__ = (
        _owned_by("phone_number_id", "phone_number"),
        _owned_by("analyzer_id", "analyzer"),
        sa.Index("ix_phone_number_analyzer_analyzer", "analyzer_id"),
    )

    phone_number_id: uuid.UUID = Field(primary_key=True)
    analyzer_id: uuid.UUID = Field(primary_key=True)
    organization_id: uuid.UUID = _org()


class Call(SQLModel, table=True):
    __tablename__ = "call"
    __table_args__ = (
        sa.CheckConstraint(_one_of("direction", Direction), name="direction"),
        sa.CheckConstraint(_one_of("status", CallStatus), name="status"),
        sa.CheckConstraint("duration_seconds >= 0", name="duration"),
        sa.Index("ix_call_org_started", "organization_id", "started_at"),
        sa.Index("ix_call_contact_started", "contact_id", "started_at"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    # The other party, when known; their number is kept even if the contact goes.
    contact_id: uuid.UUID | None = Field(default=None, foreign_key="contact.id", ondelete="SET NULL")
    contact_number: str | None = Field(default=None, max_length=16)  # E.164
    # Our line it came in on or went out from, and the voice agent that handled it (None: a person).
    phone_number_id: uuid.UUID | None = Field(
        default=None, foreign_key="phone_number.id", ondelete="SET NULL"
    )
    agent_id: uuid.UUID | None = Field(default=None, foreign_key="voice_agent.id", ondelete="SET NULL")
    direction: str = Field(max_length=16)
    status: str = Field(max_length=16)
    duration_seconds: int = 0
    started_at: datetime = Field(sa_type=_tz())
    summary: str | None = Field(default=None, sa_type=sa.Text())


class SmsMessage(SQLModel, table=True):
    __tablename__ = "sms_message"
    __table_args__ = (
        sa.CheckConstraint(_one_of("direction", Direction), name="direction"),
        sa.CheckConstraint(_one_of("status", SmsStatus), name="status"),
        sa.CheckConstraint("(direction = 'inbound') = (status = 'received')", name="received_inbound"),
        sa.Index("ix_sms_org_created", "organization_id", "created_at"),
        sa.Index("ix_sms_contact_created", "contact_id", "created_at"),
        sa.Index(
            "ix_sms_queued",
            "created_at",
            sqlite_where=sa.text("status = 'queued'"),
            postgresql_where=sa.text("status = 'queued'"),
        ),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    contact_id: uuid.UUID | None = Field(default=None, foreign_key="contact.id", ondelete="SET NULL")
    contact_number: str | None = Field(default=None, max_length=16)  # E.164
    phone_number_id: uuid.UUID | None = Field(
        default=None, foreign_key="phone_number.id", ondelete="SET NULL"
    )
    # For outbound messages written by someone in the product (or by the assistant for them).
    sender_id: uuid.UUID | None = Field(default=None, foreign_key="member.id", ondelete="SET NULL")
    direction: str = Field(max_length=16)
    body: str = Field(sa_type=sa.Text())
    status: str = Field(max_length=16)
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class PlanTemplate(SQLModel, table=True):
    """A reusable sequence of follow-up steps."""

    __tablename__ = "plan_template"
    __table_args__ = (
        _tenant_key("plan_template"),
        sa.UniqueConstraint("organization_id", "name", name="uq_plan_template_org_name"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    name: str = Field(max_length=255)
    description: str = Field(default="", sa_type=sa.Text())
    # [{"day": int (after the plan starts), "channel": "call" | "sms" | "task", "action": str}]
    steps: list[dict[str, Any]] = Field(default_factory=list, sa_type=sa.JSON())
    active: bool = True
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Plan(SQLModel, table=True):
    """A template being carried out for one contact."""

    __tablename__ = "plan"
    __table_args__ = (
        # A template with plans cannot be deleted (deactivate it instead); a contact's plans go with it.
        _owned_by("template_id", "plan_template", ondelete=None),
        _owned_by("contact_id", "contact"),
        sa.CheckConstraint(_one_of("status", PlanStatus), name="status"),
        sa.Index("ix_plan_org_status_started", "organization_id", "status", "started_at"),
        sa.Index("ix_plan_assignee_status", "assignee_id", "status"),
        sa.Index("ix_plan_contact", "contact_id"),
        sa.Index("ix_plan_template", "template_id"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    template_id: uuid.UUID
    contact_id: uuid.UUID
    assignee_id: uuid.UUID | None = Field(default=None, foreign_key="member.id", ondelete="SET NULL")
    status: str = Field(default=PlanStatus.ACTIVE.value, max_length=16)
    current_step: int = 0  # index into the template's steps
    started_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    completed_at: datetime | None = Field(default=None, sa_type=_tz())
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Task(SQLModel, table=True):
    __tablename__ = "task"
    __table_args__ = (
        sa.CheckConstraint(_one_of("status", TaskStatus), name="status"),
        sa.CheckConstraint("(status = 'done') = (completed_at IS NOT NULL)", name="completed_at"),
        sa.Index("ix_task_org_status_due", "organization_id", "status", "due_at"),
        sa.Index("ix_task_assignee_status_due", "assignee_id", "status", "due_at"),
        sa.Index("ix_task_contact", "contact_id"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    title: str = Field(max_length=255)
    description: str = Field(default="", sa_type=sa.Text())
    status: str = Field(default=TaskStatus.OPEN.value, max_length=16)
    due_at: datetime | None = Field(default=None, sa_type=_tz())
    assignee_id: uuid.UUID | None = Field(default=None, foreign_key="member.id", ondelete="SET NULL")
    contact_id: uuid.UUID | None = Field(default=None, foreign_key="contact.id", ondelete="SET NULL")
    plan_id: uuid.UUID | None = Field(default=None, foreign_key="plan.id", ondelete="SET NULL")
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    completed_at: datetime | None = Field(default=None, sa_type=_tz())


class KnowledgeItem(SQLModel, table=True):
    """A piece of the organization's own knowledge (policies, prices, FAQs) the assistant may cite."""

    __tablename__ = "knowledge_item"
    __table_args__ = (sa.Index("ix_knowledge_item_org_title", "organization_id", "title"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = _org()
    title: str = Field(max_length=255)
    body: str = Field(sa_type=sa.Text())
    tags: list[str] = Field(default_factory=list, sa_type=sa.JSON())
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=_tz())


class Notification(SQLModel, table=True):
    """A notification for one member (the product's bell icon)."""

    __tablename__ = "notification"
    __table_args__ = (sa.Index("ix_notification_member_read", "organization_id", "member_id", "read_at"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    organization_id: uuid.UUID = Field(foreign_key="organization.id", ondelete="CASCADE")
    member_id: uuid.UUID = Field(foreign_key="member.id", ondelete="CASCADE")
    # e.g. missed_call, new_sms, task_due, plan_completed, mention
    kind: str = Field(max_length=32)
    title: str = Field(max_length=255)
    body: str = Field(default="", sa_type=sa.Text())
    # The route of the thing it is about, when there is one (e.g. /contacts/<id>).
    link: str | None = Field(default=None, max_length=512)
    read_at: datetime | None = Field(default=None, sa_type=_tz())
    created_at: datetime = Field(default_factory=utcnow, sa_type=_tz())
