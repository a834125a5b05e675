"""The runs' parents are checked once per write, not once per row: the foreign keys from
runs to nodes, campaigns and bundles go, and the database refuses to delete a node, a
campaign or a bundle instead.

A foreign key is a trigger that looks its parent up for every row inserted: at 10,000
nodes x 3 SIMs, 720,000 look-ups a day of bookings, 5.6 of the 12 s PostgreSQL needed
to store the day (bench/planner-RESULTS.md, per key). What the keys guaranteed, that a
run never names a node, campaign or bundle that is not there, holds without them:

- the parents are never deleted (nodes are put in maintenance, campaigns are cancelled
  and hidden with ``deleted_at``, archived bundles are kept for good), and now the
  database says so: a trigger on each of the three tables refuses any DELETE (and on
  PostgreSQL any TRUNCATE), so no run can lose its parent;
- every writer of runs takes the parents from rows read in its own transaction (an
  ad-hoc booking its node, an upload its bundle), and the planner's writer checks the
  nodes and campaigns a whole day of bookings names in one query before writing it
  (orchestrator.services.bookings).

The indexes stay: the readers use them, not the keys. The downgrade puts the keys back
(it fails, as it should, if a run names a parent that is not there) and drops the
triggers.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 17:00:00
"""

from __future__ import annotations

from alembic import op

from orchestrator.store import guards

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

#: Names as PostgreSQL gives them; SQLite's keys have none, and batch mode names the
#: reflected ones so (``runs_node_id_fkey``).
NAMES = {"fk": "%(table_name)s_%(column_0_name)s_fkey"}
#: The runs' columns whose key goes, and the parent each names (by its primary key).
DROPPED_KEYS = [("node_id", "nodes", "id"), ("campaign_id", "campaigns", "id"),
                ("bundle_sha256", "bundles", "sha256")]
# The triggers' statements are in orchestrator.store.guards: a database made at head
# gets the same (orchestrator.store.migrate).


def upgrade() -> None:
    with op.batch_alter_table("runs", naming_convention=NAMES) as t:
        for column, _, _ in DROPPED_KEYS:
            t.drop_constraint(f"runs_{column}_fkey", type_="foreignkey")
    for statement in guards.create_statements(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    for statement in guards.drop_statements(op.get_bind().dialect.name):
        op.execute(statement)
    with op.batch_alter_table("runs", naming_convention=NAMES) as t:
        for column, parent, key in DROPPED_KEYS:
            t.create_foreign_key(f"runs_{column}_fkey", parent, [column], [key])
