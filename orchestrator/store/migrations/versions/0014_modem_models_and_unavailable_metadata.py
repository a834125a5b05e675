"""Each interface's modem model, and what metadata a node cannot read: nodes carry 1 to
3 modems of different models, and a node without gpsd or ModemManager says so; the
fleet page shows both.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 11:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("interfaces") as t:
        t.add_column(sa.Column("modem_model", sa.String(64), nullable=True))
    with op.batch_alter_table("nodes") as t:
        t.add_column(sa.Column("metadata_unavailable", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as t:
        t.drop_column("metadata_unavailable")
    with op.batch_alter_table("interfaces") as t:
        t.drop_column("modem_model")
