"""Feedback for evaluation (SPEC §22): when an answer was rated, for exports since a time.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assistant_message") as batch:
        batch.add_column(sa.Column("feedback_at", sa.DateTime(timezone=True), nullable=True))
    # Ratings given before this column: their time is unknown; the answer's own is the best bound.
    op.execute("UPDATE assistant_message SET feedback_at = created_at WHERE feedback_rating IS NOT NULL")
    op.create_index(
        "ix_message_feedback_at",
        "assistant_message",
        ["feedback_at"],
        sqlite_where=sa.text("feedback_at IS NOT NULL"),
        postgresql_where=sa.text("feedback_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_message_feedback_at", table_name="assistant_message")
    with op.batch_alter_table("assistant_message") as batch:
        batch.drop_column("feedback_at")
