"""The reference CRM: contacts (notes, tags, e-mail addresses, phone numbers), voice and text agents,
analyzers, phone numbers, calls, SMS, plan templates and plans, tasks, knowledge items, and the
members' notifications.

The first revision of the CRM toolkit's own Alembic branch (`crm`), on top of the core's tables.

Revision ID: crm_0001
Revises:
Depends on: 0002

Mirrors `vernis_crm.models` as of this revision, written out in full (no import of the models).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "crm_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("crm",)
depends_on: str | Sequence[str] | None = "0002"


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _id() -> sa.Column[object]:
    return sa.Column("id", sa.Uuid(), nullable=False)


def _organization_id(table: str) -> tuple[sa.Column[object], sa.ForeignKeyConstraint]:
    return (
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organization.id"],
            name=f"fk_{table}_organization_id",
            ondelete="CASCADE",
        ),
    )


def _tenant_key(table: str) -> sa.UniqueConstraint:
    return sa.UniqueConstraint("id", "organization_id", name=f"uq_{table}_id_organization_id")


def _owned_by(
    table: str, column: str, target: str, ondelete: str | None = "CASCADE"
) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column, "organization_id"],
        [f"{target}.id", f"{target}.organization_id"],
        name=f"fk_{table}_{column}",
        ondelete=ondelete,
    )


def _set_null(table: str, column: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{target}.id"], name=f"fk_{table}_{column}", ondelete="SET NULL"
    )


def upgrade() -> None:
    op.create_table(
        "notification",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("member_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("title", sa.String(length=255), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("link", sa.String(length=512), nullable=True),
        sa.Column("read_at", _timestamp(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notification"),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organization.id"],
            name="fk_notification_organization_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["member_id"], ["member.id"], name="fk_notification_member_id", ondelete="CASCADE"
        ),
    )
    op.create_index(
        "ix_notification_member_read", "notification", ["organization_id", "member_id", "read_at"]
    )
    op.create_table(
        "contact",
        _id(),
        *_organization_id("contact"),
        sa.Column("first_name", sa.String(length=100), nullable=False),
        sa.Column("last_name", sa.String(length=100), nullable=False),
        sa.Column("company", sa.String(length=255), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_contact"),
        _tenant_key("contact"),
    )
    op.create_index("ix_contact_org_name", "contact", ["organization_id", "last_name", "first_name"])

    op.create_table(
        "contact_note",
        _id(),
        *_organization_id("contact_note"),
        sa.Column("contact_id", sa.Uuid(), nullable=False),
        sa.Column("author_id", sa.Uuid(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_contact_note"),
        _owned_by("contact_note", "contact_id", "contact"),
        _set_null("contact_note", "author_id", "member"),
    )
    op.create_index("ix_contact_note_contact_created", "contact_note", ["contact_id", "created_at"])

    op.create_table(
        "tag",
        _id(),
        *_organization_id("tag"),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tag"),
        _tenant_key("tag"),
        sa.UniqueConstraint("organization_id", "name", name="uq_tag_org_name"),
    )

    op.create_table(
        "contact_tag",
        sa.Column("contact_id", sa.Uuid(), nullable=False),
        sa.Column("tag_id", sa.Uuid(), nullable=False),
        *_organization_id("contact_tag"),
        sa.PrimaryKeyConstraint("contact_id", "tag_id", name="pk_contact_tag"),
        _owned_by("contact_tag", "contact_id", "contact"),
        _owned_by("contact_tag", "tag_id", "tag"),
    )
    op.create_index("ix_contact_tag_tag", "contact_tag", ["tag_id"])

    op.create_table(
        "contact_email",
        _id(),
        *_organization_id("contact_email"),
        sa.Column("contact_id", sa.Uuid(), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("label", sa.String(length=32), nullable=False),
        sa.Column("is_primary", sa.Boolean(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_contact_email"),
        _owned_by("contact_email", "contact_id", "contact"),
        sa.UniqueConstraint("contact_id", "email", name="uq_contact_email_address"),
    )
    op.create_index("ix_contact_email_org_email", "contact_email", ["organization_id", "email"])
    op.create_index(
        "ix_contact_email_primary",
        "contact_email",
        ["contact_id"],
        unique=True,
        sqlite_where=sa.text("is_primary"),
        postgresql_where=sa.text("is_primary"),
    )

    op.create_table(
        "contact_phone",
        _id(),
        *_organization_id("contact_phone"),
        sa.Column("contact_id", sa.Uuid(), nullable=False),
        sa.Column("number", sa.String(length=32), nullable=False),
        sa.Column("number_e164", sa.String(length=16), nullable=False),
        sa.Column("label", sa.String(length=32), nullable=False),
        sa.Column("is_primary", sa.Boolean(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_contact_phone"),
        _owned_by("contact_phone", "contact_id", "contact"),
        sa.CheckConstraint("number_e164 LIKE '+%'", name="ck_contact_phone_e164"),
        sa.UniqueConstraint("contact_id", "number_e164", name="uq_contact_phone_number"),
    )
    op.create_index("ix_contact_phone_org_e164", "contact_phone", ["organization_id", "number_e164"])
    op.create_index(
        "ix_contact_phone_primary",
        "contact_phone",
        ["contact_id"],
        unique=True,
        sqlite_where=sa.text("is_primary"),
        postgresql_where=sa.text("is_primary"),
    )

    op.create_table(
        "voice_agent",
        _id(),
        *_organization_id("voice_agent"),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("voice", sa.String(length=64), nullable=False),
        sa.Column("language", sa.String(length=16), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_voice_agent"),
        sa.UniqueConstraint("organization_id", "name", name="uq_voice_agent_org_name"),
    )

    op.create_table(
        "text_agent",
        _id(),
        *_organization_id("text_agent"),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_text_agent"),
        sa.UniqueConstraint("organization_id", "name", name="uq_text_agent_org_name"),
    )

    op.create_table(
        "analyzer",
        _id(),
        *_organization_id("analyzer"),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("criteria", sa.Text(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_analyzer"),
        _tenant_key("analyzer"),
        sa.UniqueConstraint("organization_id", "name", name="uq_analyzer_org_name"),
    )

    op.create_table(
        "phone_number",
        _id(),
        *_organization_id("phone_number"),
        sa.Column("number", sa.String(length=16), nullable=False),
        sa.Column("label", sa.String(length=64), nullable=False),
        sa.Column("voice_agent_id", sa.Uuid(), nullable=True),
        sa.Column("text_agent_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_phone_number"),
        _tenant_key("phone_number"),
        sa.CheckConstraint("number LIKE '+%'", name="ck_phone_number_e164"),
        sa.UniqueConstraint("organization_id", "number", name="uq_phone_number_org_number"),
        _set_null("phone_number", "voice_agent_id", "voice_agent"),
        _set_null("phone_number", "text_agent_id", "text_agent"),
    )

    op.create_table(
        "phone_number_analyzer",
        sa.Column("phone_number_id", sa.Uuid(), nullable=False),
        sa.Column("analyzer_id", sa.Uuid(), nullable=False),
        *_organization_id("phone_number_analyzer"),
        sa.PrimaryKeyConstraint("phone_number_id", "analyzer_id", name="pk_phone_number_analyzer"),
        _owned_by("phone_number_analyzer", "phone_number_id", "phone_number"),
        _owned_by("phone_number_analyzer", "analyzer_id", "analyzer"),
    )
    op.create_index("ix_phone_number_analyzer_analyzer", "phone_number_analyzer", ["analyzer_id"])

    op.create_table(
        "call",
        _id(),
        *_organization_id("call"),
        sa.Column("contact_id", sa.Uuid(), nullable=True),
        sa.Column("contact_number", sa.String(length=16), nullable=True),
        sa.Column("phone_number_id", sa.Uuid(), nullable=True),
        sa.Column("agent_id", sa.Uuid(), nullable=True),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("duration_seconds", sa.Integer(), nullable=False),
        sa.Column("started_at", _timestamp(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_call"),
        _set_null("call", "contact_id", "contact"),
        _set_null("call", "phone_number_id", "phone_number"),
        _set_null("call", "agent_id", "voice_agent"),
        sa.CheckConstraint("direction IN ('inbound', 'outbound')", name="ck_call_direction"),
        sa.CheckConstraint("status IN ('answered', 'missed', 'voicemail', 'failed')", name="ck_call_status"),
        sa.CheckConstraint("duration_seconds >= 0", name="ck_call_duration"),
    )
    op.create_index("ix_call_org_started", "call", ["organization_id", "started_at"])
    op.create_index("ix_call_contact_started", "call", ["contact_id", "started_at"])

    op.create_table(
        "sms_message",
        _id(),
        *_organization_id("sms_message"),
        sa.Column("contact_id", sa.Uuid(), nullable=True),
        sa.Column("contact_number", sa.String(length=16), nullable=True),
        sa.Column("phone_number_id", sa.Uuid(), nullable=True),
        sa.Column("sender_id", sa.Uuid(), nullable=True),
        sa.Column("direction", sa.String(length=16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sms_message"),
        _set_null("sms_message", "contact_id", "contact"),
        _set_null("sms_message", "phone_number_id", "phone_number"),
        _set_null("sms_message", "sender_id", "member"),
        sa.CheckConstraint("direction IN ('inbound', 'outbound')", name="ck_sms_message_direction"),
        sa.CheckConstraint(
            "status IN ('received', 'queued', 'sent', 'delivered', 'failed')", name="ck_sms_message_status"
        ),
        sa.CheckConstraint(
            "(direction = 'inbound') = (status = 'received')", name="ck_sms_message_received_inbound"
        ),
    )
    op.create_index("ix_sms_org_created", "sms_message", ["organization_id", "created_at"])
    op.create_index("ix_sms_contact_created", "sms_message", ["contact_id", "created_at"])
    op.create_index(
        "ix_sms_queued",
        "sms_message",
        ["created_at"],
        sqlite_where=sa.text("status = 'queued'"),
        postgresql_where=sa.text("status = 'queued'"),
    )

    op.create_table(
        "plan_template",
        _id(),
        *_organization_id("plan_template"),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_plan_template"),
        _tenant_key("plan_template"),
        sa.UniqueConstraint("organization_id", "name", name="uq_plan_template_org_name"),
    )

    op.create_table(
        "plan",
        _id(),
        *_organization_id("plan"),
        sa.Column("template_id", sa.Uuid(), nullable=False),
        sa.Column("contact_id", sa.Uuid(), nullable=False),
        sa.Column("assignee_id", sa.Uuid(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("current_step", sa.Integer(), nullable=False),
        sa.Column("started_at", _timestamp(), nullable=False),
        sa.Column("completed_at", _timestamp(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_plan"),
        _owned_by("plan", "template_id", "plan_template", ondelete=None),
        _owned_by("plan", "contact_id", "contact"),
        _set_null("plan", "assignee_id", "member"),
        sa.CheckConstraint("status IN ('active', 'completed', 'cancelled')", name="ck_plan_status"),
    )
    op.create_index("ix_plan_org_status_started", "plan", ["organization_id", "status", "started_at"])
    op.create_index("ix_plan_assignee_status", "plan", ["assignee_id", "status"])
    op.create_index("ix_plan_contact", "plan", ["contact_id"])
    op.create_index("ix_plan_template", "plan", ["template_id"])

    op.create_table(
        "task",
        _id(),
        *_organization_id("task"),
        sa.Column("title", sa.String(length=255), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("due_at", _timestamp(), nullable=True),
        sa.Column("assignee_id", sa.Uuid(), nullable=True),
        sa.Column("contact_id", sa.Uuid(), nullable=True),
        sa.Column("plan_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("completed_at", _timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_task"),
        _set_null("task", "assignee_id", "member"),
        _set_null("task", "contact_id", "contact"),
        _set_null("task", "plan_id", "plan"),
        sa.CheckConstraint("status IN ('open', 'done', 'dismissed')", name="ck_task_status"),
        sa.CheckConstraint("(status = 'done') = (completed_at IS NOT NULL)", name="ck_task_completed_at"),
    )
    op.create_index("ix_task_org_status_due", "task", ["organization_id", "status", "due_at"])
    op.create_index("ix_task_assignee_status_due", "task", ["assignee_id", "status", "due_at"])
    op.create_index("ix_task_contact", "task", ["contact_id"])

    op.create_table(
        "knowledge_item",
        _id(),
        *_organization_id("knowledge_item"),
        sa.Column("title", sa.String(length=255), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_knowledge_item"),
    )
    op.create_index("ix_knowledge_item_org_title", "knowledge_item", ["organization_id", "title"])


def downgrade() -> None:
    op.drop_table("notification")
    for table in (
        "knowledge_item",
        "task",
        "plan",
        "plan_template",
        "sms_message",
        "call",
        "phone_number_analyzer",
        "phone_number",
        "analyzer",
        "text_agent",
        "voice_agent",
        "contact_phone",
        "contact_email",
        "contact_tag",
        "tag",
        "contact_note",
        "contact",
    ):
        op.drop_table(table)
