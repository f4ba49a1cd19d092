"""Operations (SPEC §15): token usage per member and day, and the admin API's token revocation.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "assistant_usage",
        sa.Column("member_id", sa.Uuid(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("answers", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("member_id", "day", "model", name="pk_assistant_usage"),
        sa.ForeignKeyConstraint(
            ["member_id"], ["member.id"], name="fk_assistant_usage_member_id", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organization.id"],
            name="fk_assistant_usage_organization_id",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_usage_org_day", "assistant_usage", ["organization_id", "day"])
    with op.batch_alter_table("member") as batch:
        batch.add_column(sa.Column("tokens_revoked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("member") as batch:
        batch.drop_column("tokens_revoked_at")
    op.drop_index("ix_usage_org_day", table_name="assistant_usage")
    op.drop_table("assistant_usage")
