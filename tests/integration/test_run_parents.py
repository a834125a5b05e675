"""Since migration 0017 the runs have no foreign keys to their node, campaign and bundle
(a look-up per row, more than half of storing a day of bookings). What the keys
guaranteed holds all the same, on both engines: the database refuses to delete a
run's parent, the planner's writer refuses a plan naming a node or campaign that is not
stored (and writes nothing), and what it writes (a binary COPY on PostgreSQL, Core
inserts on SQLite) is what the bookings say."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.exc import DBAPIError

from orchestrator.errors import Conflict
from orchestrator.services import bookings
from orchestrator.store.db import Database, make_engine
from orchestrator.store.tables import Bundle, Campaign, Node, Run
from tests.unit.test_bookings import (
    CATALOGUE,
    NOW,
    campaign_row,
    check_rows_say_what_the_bookings_say,
    day_plan,
    seed,
)


@pytest.fixture
def db(database_url: str) -> Database:
    database = Database(make_engine(database_url))
    seed(database)
    return database


def test_the_writer_stores_what_the_bookings_say(db: Database) -> None:
    check_rows_say_what_the_bookings_say(db, batch=7)
    db.engine.dispose()


def test_deleting_a_runs_parent_is_refused(db: Database) -> None:
    with db.session() as s:
        s.add(campaign_row())
        s.add(Bundle(sha256="ab" * 32, size=1, path="x", files=1, stored_at=NOW))
    for table, where in ((Node, Node.id == "se-0"), (Campaign, Campaign.id == "c-1"),
                         (Bundle, Bundle.sha256 == "ab" * 32)):
        with pytest.raises(DBAPIError, match=f"rows of {table.__tablename__} are never "
                                             "deleted"), db.session() as s:
            s.execute(delete(table).where(where))
    if db.engine.dialect.name == "postgresql":
        with pytest.raises(DBAPIError, match="rows of nodes are never deleted"), \
                db.session() as s:
            s.execute(text("TRUNCATE nodes CASCADE"))
    with db.reading() as s:  # all still there
        assert s.scalar(select(func.count()).select_from(Node)) == 2
        assert s.scalar(select(func.count()).select_from(Campaign)) == 1
        assert s.scalar(select(func.count()).select_from(Bundle)) == 1
    db.engine.dispose()


@pytest.mark.parametrize("missing", ["node", "campaign"])
def test_a_plan_naming_a_parent_not_stored_writes_nothing(db: Database,
                                                          missing: str) -> None:
    p = day_plan(3 if missing == "node" else 2)  # se-2 was never stored
    with pytest.raises(Conflict, match=f"1 {missing}s that are not stored "
                                       f"\\({'se-2' if missing == 'node' else 'c-1'}\\)"), \
            db.session() as s:
        row = campaign_row()
        if missing == "node":
            s.add(row)
        bookings.write_bookings(s, p.before(NOW + timedelta(days=1)), {"c-1": row},
                                CATALOGUE, NOW)
    with db.reading() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 0
    db.engine.dispose()
