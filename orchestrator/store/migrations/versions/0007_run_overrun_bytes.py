"""Each run's settled overrun, stored as the settlement rule decided it, so that usage
is a plain sum and no query repeats the rule.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 03:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("overrun_bytes", sa.BigInteger(), nullable=True))
    # Runs settled before this revision: the rule they were settled under (the charge
    # beyond the reservation), written out once here.
    op.execute(
        "UPDATE runs SET overrun_bytes = CASE WHEN charged_bytes > reserved_bytes "
        "THEN charged_bytes - reserved_bytes ELSE 0 END "
        "WHERE settled_at IS NOT NULL AND reserved_bytes IS NOT NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("overrun_bytes")
