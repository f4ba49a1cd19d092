"""Compaction (SPEC §19): summary checkpoints of long conversations, which the model reads instead
of the messages they cover.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "assistant_summary",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("through_message_id", sa.Uuid(), nullable=False),
        sa.Column("covered", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["assistant_conversation.id"],
            name="fk_assistant_summary_conversation_id",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_assistant_summary"),
    )
    op.create_index("ix_summary_conversation", "assistant_summary", ["conversation_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_summary_conversation", table_name="assistant_summary")
    op.drop_table("assistant_summary")
