"""Reasoning (SPEC §19): the reasoning a model streams with an answer, stored with it (unless
VERNIS_STORE_REASONING=0) to be shown folded in the history; never sent back to the model.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assistant_message") as batch:
        batch.add_column(sa.Column("reasoning", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("assistant_message") as batch:
        batch.drop_column("reasoning")
