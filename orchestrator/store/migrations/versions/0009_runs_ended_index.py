"""An index on runs by state and when they reached it: the collector counts the runs
that ended in the last hour, by operator and final state, at every scrape (the failed-
run rate alert), and must read one hour of runs, not the whole history.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 07:40:00
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_state_at", "runs", ["state", "state_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_state_at", table_name="runs")
