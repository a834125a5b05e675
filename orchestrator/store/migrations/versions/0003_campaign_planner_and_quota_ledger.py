"""Campaign planner and quota ledger: SIM caps, project budgets, each run's reservation
and settlement, its campaign session, and each campaign's last plan.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 02:40:38.654462
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

RUN_COLUMNS = (
    ("mcc_mnc", sa.String(length=7)),
    ("reserved_bytes", sa.BigInteger()),
    ("reservation_period", sa.DateTime(timezone=True)),
    ("measured_bytes", sa.BigInteger()),
    ("charged_bytes", sa.BigInteger()),
    ("settled_at", sa.DateTime(timezone=True)),
    ("measured_rate_bps", sa.Float()),
    ("session_occurrence", sa.DateTime(timezone=True)),
    ("session_interfaces", sa.String(length=128)),
    ("step", sa.Integer()),
    ("repetition", sa.Integer()),
)


def upgrade() -> None:
    op.create_table(
        "sim_quotas",
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("interface", sa.String(length=16), nullable=False),
        sa.Column("cap_bytes", sa.BigInteger(), nullable=False),
        sa.Column("reset_day", sa.Integer(), nullable=False),
        sa.Column("margin", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"]),
        sa.PrimaryKeyConstraint("node_id", "interface"),
    )
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.add_column(sa.Column("planned_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("decisions", sa.JSON(), nullable=True))
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.add_column(sa.Column("budget_bytes", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name, type_ in RUN_COLUMNS:
            batch_op.add_column(sa.Column(name, type_, nullable=True))
        batch_op.create_index("ix_runs_campaign", ["campaign_id"], unique=False)
        batch_op.create_index(
            "ix_runs_sim_period", ["node_id", "interface", "reservation_period"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_sim_period")
        batch_op.drop_index("ix_runs_campaign")
        for name, _ in reversed(RUN_COLUMNS):
            batch_op.drop_column(name)
    with op.batch_alter_table("projects", schema=None) as batch_op:
        batch_op.drop_column("budget_bytes")
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.drop_column("decisions")
        batch_op.drop_column("planned_at")
    op.drop_table("sim_quotas")
