"""A run's time out of contact: when its node fell silent while holding it (the run is
``unreachable`` from then on), and the seconds it was silent in all, for the note on the
run when its bundle arrives.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 04:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("silent_since", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("out_of_contact_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("out_of_contact_s")
        batch_op.drop_column("silent_since")
