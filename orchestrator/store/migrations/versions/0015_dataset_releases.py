"""Dataset releases built through the API, and the job building or verifying each:
the API answers at once and the job runs on (services.releases).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dataset_releases",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("job", sa.String(length=16), nullable=True),
        sa.Column("campaigns", sa.JSON(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("key_name", sa.String(length=64), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("runs_read", sa.Integer(), nullable=False),
        sa.Column("runs_total", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=True),
        sa.Column("rows", sa.JSON(), nullable=True),
        sa.Column("files", sa.Integer(), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column("excluded", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("problems", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_dataset_releases_created_at", "dataset_releases", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_dataset_releases_created_at", table_name="dataset_releases")
    op.drop_table("dataset_releases")
