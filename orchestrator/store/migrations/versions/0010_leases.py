"""Leases: which orchestrator replica runs the background loops (the reaper, the
planner's periodic pass). One row per lease, its holder and until when the database's
clock says it holds it; a holder that stops renewing loses it when it expires.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("leases")
