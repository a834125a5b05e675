"""Runs carry an ingest claim: which worker is writing them to the time-series store,
and until when its lease holds, so that every orchestrator worker and replica can
ingest in parallel without two writing the same run.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 10:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ingest_claim", sa.String(64), nullable=True))
        batch_op.add_column(sa.Column("ingest_lease_until", sa.DateTime(timezone=True),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("ingest_lease_until")
        batch_op.drop_column("ingest_claim")
