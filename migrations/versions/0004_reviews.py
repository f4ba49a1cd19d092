"""Reviews (SPEC §23): writes a second member approves.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "assistant_review",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("approval_id", sa.Uuid(), nullable=False),
        sa.Column("requester_id", sa.Uuid(), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("message_id", sa.Uuid(), nullable=False),
        sa.Column("call_id", sa.String(length=128), nullable=False),
        sa.Column("tool_name", sa.String(length=64), nullable=False),
        sa.Column("arguments_json", sa.JSON(), nullable=False),
        sa.Column("preview_json", sa.JSON(), nullable=False),
        sa.Column("reviewer_permission", sa.String(length=64), nullable=False),
        sa.Column("requester_permissions", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reviewer_id", sa.Uuid(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("result_json", sa.JSON(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("expires_at", _timestamp(), nullable=False),
        sa.Column("resolved_at", _timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_assistant_review"),
        sa.UniqueConstraint("approval_id", name="uq_assistant_review_approval_id"),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organization.id"],
            name="fk_assistant_review_organization_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["approval_id"],
            ["assistant_approval.id"],
            name="fk_assistant_review_approval_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["requester_id"], ["member.id"], name="fk_assistant_review_requester_id", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["assistant_conversation.id"],
            name="fk_assistant_review_conversation_id",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["reviewer_id"], ["member.id"], name="fk_assistant_review_reviewer_id", ondelete="SET NULL"
        ),
    )
    op.create_index("ix_review_org_status", "assistant_review", ["organization_id", "status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_review_org_status", table_name="assistant_review")
    op.drop_table("assistant_review")
