"""Runs remember when their results reached the time-series store.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 02:17:13.343943
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("ingest_note", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("ingest_note")
        batch_op.drop_column("ingested_at")
