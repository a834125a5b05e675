"""Campaigns can be cancelled (no further bookings; their not-started runs cancelled)
and deleted (hidden from every list; only without data, so no bundle is ever lost).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 03:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("cancel_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.drop_column("deleted_at")
        batch_op.drop_column("cancel_reason")
        batch_op.drop_column("cancelled_at")
