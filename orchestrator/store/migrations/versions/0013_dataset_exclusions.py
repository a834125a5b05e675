"""Data left out of every dataset release, and why: a run, node or SIM whose owner
withdrew consent stays out of tomorrow's daily release without anyone repeating it.

Revision ID: 0013
Revises: 0011
Create Date: 2026-11-25 11:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_exclusions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("target", sa.String(length=160), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kind", "target", name="uq_dataset_exclusions_kind_target"),
    )


def downgrade() -> None:
    op.drop_table("dataset_exclusions")
