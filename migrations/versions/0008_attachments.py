"""Attachments (SPEC §21): the files members upload, and which user messages carry them.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "assistant_attachment",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("member_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("media_type", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organization.id"],
            name="fk_assistant_attachment_organization_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["member_id"], ["member.id"], name="fk_assistant_attachment_member_id", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_assistant_attachment"),
    )
    op.create_index("ix_attachment_member", "assistant_attachment", ["member_id", "organization_id"])
    op.create_index("ix_attachment_digest", "assistant_attachment", ["digest"])
    op.create_table(
        "assistant_message_attachment",
        sa.Column("message_id", sa.Uuid(), nullable=False),
        sa.Column("attachment_id", sa.Uuid(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["assistant_message.id"],
            name="fk_assistant_message_attachment_message_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["attachment_id"],
            ["assistant_attachment.id"],
            name="fk_assistant_message_attachment_attachment_id",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", "attachment_id", name="pk_assistant_message_attachment"),
    )
    op.create_index(
        "ix_assistant_message_attachment_attachment_id", "assistant_message_attachment", ["attachment_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_assistant_message_attachment_attachment_id", table_name="assistant_message_attachment")
    op.drop_table("assistant_message_attachment")
    op.drop_index("ix_attachment_digest", table_name="assistant_attachment")
    op.drop_index("ix_attachment_member", table_name="assistant_attachment")
    op.drop_table("assistant_attachment")
