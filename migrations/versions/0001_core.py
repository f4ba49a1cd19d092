"""Core tables: organizations, members, AI rules, conversations and their messages.

Revision ID: 0001
Revises:

Mirrors `vernis.store.models` as of this revision, written out in full (no import of the models) so
that later changes to the models never rewrite history.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "organization",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        # The host's id of the organization (the token's `org` claim).
        sa.Column("external_id", sa.String(length=255), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_organization"),
        sa.UniqueConstraint("external_id", name="uq_organization_external_id"),
    )
    op.create_table(
        "member",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        # The host's id of the user (the token's `sub`), unique within the organization.
        sa.Column("external_id", sa.String(length=255), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=64), nullable=False),
        sa.Column("revoked_permissions", sa.JSON(), server_default=sa.text("'[]'"), nullable=False),
        sa.Column("removed_at", _timestamp(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_member"),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organization.id"],
            name="fk_member_organization_id",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("organization_id", "external_id", name="uq_member_organization_id"),
    )
    op.create_table(
        "organization_ai_rules",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("rules", sa.Text(), nullable=False),
        sa.Column("updated_by", sa.Uuid(), nullable=True),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("organization_id", name="pk_organization_ai_rules"),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organization.id"],
            name="fk_organization_ai_rules_organization_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["updated_by"],
            ["member.id"],
            name="fk_organization_ai_rules_updated_by",
            ondelete="SET NULL",
        ),
    )
    op.create_table(
        "assistant_conversation",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("member_id", sa.Uuid(), nullable=False),
        sa.Column("title", sa.String(length=255), nullable=True),
        sa.Column("previous_conversation_id", sa.Uuid(), nullable=True),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_assistant_conversation"),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organization.id"],
            name="fk_assistant_conversation_organization_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["member_id"],
            ["member.id"],
            name="fk_assistant_conversation_member_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["previous_conversation_id"],
            ["assistant_conversation.id"],
            name="fk_assistant_conversation_previous_conversation_id",
            ondelete="SET NULL",
        ),
    )
    op.create_index(
        "ix_conversation_member_org_updated",
        "assistant_conversation",
        ["member_id", "organization_id", "updated_at"],
    )
    op.create_index(
        "ix_assistant_conversation_previous_conversation_id",
        "assistant_conversation",
        ["previous_conversation_id"],
    )
    op.create_table(
        "assistant_message",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tool_calls_json", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("client_message_id", sa.String(length=128), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("model", sa.String(length=255), nullable=True),
        sa.Column("feedback_rating", sa.String(length=8), nullable=True),
        sa.Column("feedback_comment", sa.Text(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_assistant_message"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["assistant_conversation.id"],
            name="fk_assistant_message_conversation_id",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("conversation_id", "position", name="uq_message_conversation_position"),
    )
    op.create_index(
        "ix_message_client_id",
        "assistant_message",
        ["conversation_id", "client_message_id"],
        unique=True,
        sqlite_where=sa.text("client_message_id IS NOT NULL"),
        postgresql_where=sa.text("client_message_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_table("assistant_message")
    op.drop_table("assistant_conversation")
    op.drop_table("organization_ai_rules")
    op.drop_table("member")
    op.drop_table("organization")
