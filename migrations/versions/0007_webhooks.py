"""Webhooks (SPEC §22): the outbox of events for the host's receivers, and their delivery log.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("payload_json", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", _timestamp(), nullable=False),
        sa.Column("lease_until", _timestamp(), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("delivered_at", _timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_delivery"),
    )
    op.create_index("ix_webhook_due", "webhook_delivery", ["status", "next_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_due", table_name="webhook_delivery")
    op.drop_table("webhook_delivery")
