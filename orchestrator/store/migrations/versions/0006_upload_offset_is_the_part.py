"""An upload's offset and completion are derived, no longer stored: the offset is the
size of the part file (as tus's Upload-Offset), and an upload is complete when its run
holds the bundle it declared. Stored copies drifted from the bytes really held.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 03:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("uploads", schema=None) as batch_op:
        batch_op.drop_column("complete")
        batch_op.drop_column("offset")


def downgrade() -> None:
    # The old code reads these; 0 and false make it ask the agent to resend from the
    # start, which the part file's reset on re-declaration then agrees with.
    with op.batch_alter_table("uploads", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("offset", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch_op.add_column(
            sa.Column("complete", sa.Boolean(), nullable=False, server_default=sa.false())
        )
