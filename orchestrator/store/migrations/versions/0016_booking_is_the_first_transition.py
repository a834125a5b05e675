"""Fewer rows and fewer checks per booked run, for the planner's day of bookings
(720,000 runs at 10,000 nodes x 3 SIMs; bench/planner-RESULTS.md: where the server's
time went, measured per foreign key and per index):

- A run's booking is its first transition, derived from its row: the ``scheduled``
  event stored beside every run is dropped (orchestrator.model.booking). It was a
  second row per run, with its own foreign-key check and two index entries.
- The index on runs by state alone goes: ``ix_runs_state_at`` (state, state_at) serves
  every lookup by state.
- The foreign keys from runs to projects and users go. A campaign's run repeats its
  campaign's project and author, which the campaign's own keys check; an ad-hoc run
  takes them from the signed-in user and the project resolved for them
  (services.users.project_for), and neither projects nor users are ever deleted. Each
  key was a trigger firing once per row (a sixth to a seventh of storing a run). The
  keys to the campaign and the node stay.

Every run is booked once and never goes back to ``scheduled``, so each run's one
``scheduled`` event is its booking; readers derive it from the run's creation time and
columns. Runs booked before the planner kept a reason of another spelling in that
event; their derived reason is the ad-hoc one (``booked for <start> on <node/iface>``).
The downgrade stores the derived events again.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 13:00:00
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from orchestrator.model.booking import BOOKED_BY, booked_reason

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_runs = sa.table(
    "runs", sa.column("id", sa.String), sa.column("campaign_id", sa.String),
    sa.column("node_id", sa.String), sa.column("interface", sa.String),
    sa.column("not_before", sa.DateTime(timezone=True)),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("session_occurrence", sa.DateTime(timezone=True)),
    sa.column("step", sa.Integer), sa.column("repetition", sa.Integer),
)
_campaigns = sa.table("campaigns", sa.column("id", sa.String), sa.column("name", sa.String))
_events = sa.table(
    "run_events", sa.column("run_id", sa.String), sa.column("state", sa.String),
    sa.column("reason", sa.Text), sa.column("source", sa.String),
    sa.column("at", sa.DateTime(timezone=True)),
)


#: Names as PostgreSQL gives them; SQLite's keys have none, and batch mode names the
#: reflected ones so (``runs_project_id_fkey``).
NAMES = {"fk": "%(table_name)s_%(column_0_name)s_fkey"}
DROPPED_KEYS = [("project_id", "projects"), ("created_by", "users")]


def upgrade() -> None:
    op.execute(_events.delete().where(_events.c.state == "scheduled"))
    op.drop_index("ix_runs_state", table_name="runs")
    with op.batch_alter_table("runs", naming_convention=NAMES) as t:
        for column, _ in DROPPED_KEYS:
            t.drop_constraint(f"runs_{column}_fkey", type_="foreignkey")


def downgrade() -> None:
    """Store the derived booking events again, first in each run's history: the events
    are read, and written back after them in their order (ids are the order readers
    of this schema sort by)."""
    with op.batch_alter_table("runs", naming_convention=NAMES) as t:
        for column, parent in DROPPED_KEYS:
            t.create_foreign_key(f"runs_{column}_fkey", parent, [column], ["id"])
    op.create_index("ix_runs_state", "runs", ["state"])
    conn = op.get_bind()
    runs = conn.execute(
        sa.select(_runs, _campaigns.c.name)
        .outerjoin(_campaigns, _campaigns.c.id == _runs.c.campaign_id)
        .order_by(_runs.c.created_at, _runs.c.id)).all()
    booked = [{"run_id": r.id, "state": "scheduled", "source": BOOKED_BY,
               "at": _utc(r.created_at),
               "reason": booked_reason(not_before=_utc(r.not_before), node=r.node_id,
                                       interface=r.interface, campaign=r.name,
                                       session=r.session_occurrence, step=r.step,
                                       repetition=r.repetition)}
              for r in runs]
    later = [dict(e._mapping) for e in conn.execute(
        sa.select(_events).order_by(sa.text("id"))).all()]
    conn.execute(_events.delete())
    if booked or later:
        conn.execute(_events.insert(), booked + later)


def _utc(at: datetime) -> datetime:
    """SQLite gives naive datetimes back (UTC, as the store writes them)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
