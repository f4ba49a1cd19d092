"""Cached input tokens (SPEC §19): of an answer's input tokens, those the provider read from its
prompt cache, counted beside input and output in the usage rows.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assistant_usage") as batch:
        batch.add_column(sa.Column("cached_tokens", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("assistant_usage") as batch:
        batch.drop_column("cached_tokens")
