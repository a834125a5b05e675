"""Migration 0016 on a database holding runs booked the old way (a stored ``scheduled``
event each): the upgrade drops those events, the index by state alone and the runs'
keys to projects and users, and keeps the rows; the downgrade stores the events again
(their reasons derived from the runs, as they were written), first in each run's
history, and puts the index and keys back. On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from orchestrator.store.migrate import alembic_config, upgrade

NOW = datetime(2026, 3, 14, 12, tzinfo=UTC)
START = NOW + timedelta(hours=1)
PLANNER = ("booked by the planner for 2026-03-14T13:00:00+00:00 on se-1/op0: campaign "
           "'hourly', session 2026-03-14 13:00, step 1, repetition 0")
ADHOC = "booked for 2026-03-14T13:00:00+00:00 on se-1/op1"


def _seed(conn: sa.Connection) -> None:
    """At 0015: a planner's run (assigned since) and an ad-hoc one, as they were booked."""
    conn.execute(sa.text("INSERT INTO users (id, name, is_admin, created_at) "
                         "VALUES (1, 'alice', false, :t)"), {"t": NOW})
    conn.execute(sa.text("INSERT INTO projects (id, name, created_at) VALUES (1, 'p', :t)"),
                 {"t": NOW})
    conn.execute(sa.text(
        "INSERT INTO nodes (id, token_hash, country, timezone, model, architecture, "
        "mobility, tags, maintenance, created_at, spooled_bundles) VALUES "
        "('se-1', 'h', 'SE', 'UTC', 'm', 'a', 'stationary', '[]', false, :t, 0)"),
        {"t": NOW})
    conn.execute(sa.text(
        "INSERT INTO campaigns (id, name, project_id, created_by, spec, created_at) "
        "VALUES ('c-1', 'hourly', 1, 1, '{}', :t)"), {"t": NOW})
    for run_id, iface, campaign, session, step, reason in [
            ("r-1", "op0", "c-1", START, 1, PLANNER), ("r-2", "op1", None, None, None, ADHOC)]:
        conn.execute(sa.text(
            "INSERT INTO runs (id, campaign_id, project_id, created_by, node_id, interface, "
            "experiment, experiment_version, image, parameters, not_before, deadline, "
            "forecast_bytes, state, state_reason, state_at, created_at, "
            "session_occurrence, step, repetition) VALUES (:id, :c, 1, 1, 'se-1', :i, "
            "'tat', 1, 'img', '{}', :nb, :dl, 1, 'scheduled', :why, :t, :t, :s, :step, "
            ":rep)"),
            {"id": run_id, "c": campaign, "i": iface, "nb": START,
             "dl": START + timedelta(seconds=25), "why": reason, "t": NOW, "s": session,
             "step": step, "rep": 0 if step is not None else None})
        conn.execute(sa.text(
            "INSERT INTO run_events (run_id, state, reason, source, at) "
            "VALUES (:id, 'scheduled', :why, 'orchestrator', :t)"),
            {"id": run_id, "why": reason, "t": NOW})
    conn.execute(sa.text(
        "INSERT INTO run_events (run_id, state, reason, source, at) "
        "VALUES ('r-1', 'assigned', 'handed out', 'orchestrator', :t)"),
        {"t": NOW + timedelta(minutes=5)})


def _events(url: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        got = [tuple(r) for r in conn.execute(sa.text(
            "SELECT run_id, state, reason, source FROM run_events ORDER BY run_id, id"))]
    engine.dispose()
    return got


def _indexes(url: str) -> set[str]:
    engine = sa.create_engine(url)
    names = {ix["name"] for ix in sa.inspect(engine).get_indexes("runs")}
    engine.dispose()
    return {n for n in names if n}


def _parents(url: str) -> set[str]:
    """The tables the runs' foreign keys refer to."""
    engine = sa.create_engine(url)
    got = {fk["referred_table"] for fk in sa.inspect(engine).get_foreign_keys("runs")}
    engine.dispose()
    return got


def test_upgrade_derives_the_booking_and_downgrade_stores_it_again(empty_url: str) -> None:
    upgrade(empty_url, "0015")
    engine = sa.create_engine(empty_url)
    with engine.begin() as conn:
        _seed(conn)
    engine.dispose()
    before = _events(empty_url)
    assert "ix_runs_state" in _indexes(empty_url)
    assert _parents(empty_url) == {"campaigns", "projects", "users", "nodes", "bundles"}

    upgrade(empty_url, "0016")
    assert _events(empty_url) == [("r-1", "assigned", "handed out", "orchestrator")]
    engine = sa.create_engine(empty_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT id, state_reason FROM runs ORDER BY id")).all() \
            == [("r-1", PLANNER), ("r-2", ADHOC)]
    engine.dispose()
    assert "ix_runs_state" not in _indexes(empty_url)
    assert "ix_runs_state_at" in _indexes(empty_url)
    assert _parents(empty_url) == {"campaigns", "nodes", "bundles"}

    command.downgrade(alembic_config(empty_url), "0015")
    assert _events(empty_url) == before
    assert "ix_runs_state" in _indexes(empty_url)
    assert _parents(empty_url) == {"campaigns", "projects", "users", "nodes", "bundles"}


def test_0017_drops_the_runs_parent_keys_and_downgrade_puts_them_back(
        empty_url: str) -> None:
    upgrade(empty_url, "0015")
    engine = sa.create_engine(empty_url)
    with engine.begin() as conn:
        _seed(conn)
    engine.dispose()
    upgrade(empty_url, "0017")
    assert _parents(empty_url) == set()
    assert {"ix_runs_node_state", "ix_runs_campaign"} <= _indexes(empty_url)
    engine = sa.create_engine(empty_url)
    with engine.connect() as conn:  # the rows stay
        assert conn.execute(sa.text("SELECT id FROM runs ORDER BY id")).scalars().all() \
            == ["r-1", "r-2"]
    # and their parents cannot be deleted
    with pytest.raises(sa.exc.DBAPIError, match="rows of nodes are never deleted"), \
            engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM nodes"))
    engine.dispose()
    command.downgrade(alembic_config(empty_url), "0016")
    assert _parents(empty_url) == {"campaigns", "nodes", "bundles"}
    engine = sa.create_engine(empty_url)
    with engine.begin() as conn:  # the key is back and the refusal gone
        conn.execute(sa.text("DELETE FROM nodes WHERE id = 'none'"))
        assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar() == 2
    engine.dispose()
