"""Two orchestrator replicas on one real PostgreSQL database (tests/integration/
postgres.py): the migrations applied by both at once, the loops' lease taken by one and
taken over when it dies, a run moved by both at once moved once, an upload's lock held
across processes."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.orm import Session

from orchestrator.api.app import create_app
from orchestrator.bootstrap import bootstrap_rows
from orchestrator.errors import Conflict
from orchestrator.model.lease import renew_every_s, takeover_bound_s
from orchestrator.services.auth import ADMIN_USER
from orchestrator.services.leader import Leadership
from orchestrator.services.runs import transition
from orchestrator.services.users import DEFAULT_PROJECT
from orchestrator.services.views import history
from orchestrator.store import locks
from orchestrator.store.db import Database, make_engine
from orchestrator.store.migrate import upgrade
from orchestrator.store.tables import Project, Run, User
from testbed_common.states import RunState, can_move
from tests.conftest import ManualClock
from tests.integration import postgres
from tests.integration.conftest import Api, make_settings


@pytest.fixture
def pg_url(postgres_url: str) -> str:
    return postgres.create_database(postgres_url, f"r_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def replicas(tmp_path: Path, clock: ManualClock, pg_url: str) -> Iterator[tuple[Api, Api]]:
    """Two apps on one database, one archive volume, as the compose stack's replicas."""
    settings = make_settings(tmp_path).model_copy(update={"database_url": pg_url})
    apps = [create_app(settings, clock=clock, reaper=False) for _ in range(2)]
    with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
        yield Api(a, clock, settings), Api(b, clock, settings)
    for app in apps:
        app.state.ctx.db.engine.dispose()


def test_replicas_starting_together_apply_the_migrations_once(pg_url: str) -> None:
    with ThreadPoolExecutor(3) as pool:
        for done in [pool.submit(upgrade, pg_url) for _ in range(3)]:
            done.result()  # none raised (no table created twice)
    engine = create_engine(pg_url)
    with engine.connect() as c:
        heads = c.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    engine.dispose()
    assert len(heads) == 1


def test_replicas_starting_together_on_a_new_database_all_start(pg_url: str) -> None:
    """Every replica (and every worker of each) bootstraps at start: the administrator
    and the default project. On a new database they all find them missing at once; one
    makes them, the others start too (one replica of the compose stack used to exit on
    the administrator's unique name)."""
    upgrade(pg_url)
    dbs = [Database(make_engine(pg_url)) for _ in range(6)]
    start = threading.Barrier(len(dbs))

    def boot(db: Database) -> None:
        start.wait()
        bootstrap_rows(db, datetime.now(UTC))
    with ThreadPoolExecutor(len(dbs)) as pool:
        for done in [pool.submit(boot, db) for db in dbs]:
            done.result()  # none raised
    with dbs[0].session() as s:
        assert s.scalar(select(func.count()).select_from(User)
                        .where(User.name == ADMIN_USER)) == 1
        assert s.scalar(select(func.count()).select_from(Project)
                        .where(Project.name == DEFAULT_PROJECT)) == 1
    for db in dbs:
        db.engine.dispose()


@pytest.mark.quiet  # takeover within the lease's bound
def test_one_replica_leads_and_another_takes_over_within_the_bound(pg_url: str) -> None:
    upgrade(pg_url)
    lease = 1.5
    dbs = [Database(make_engine(pg_url)) for _ in range(2)]
    a, b = (Leadership(db, lease, me=name) for db, name in zip(dbs, "ab", strict=True))
    try:
        assert a.renew() and a.leading
        assert not b.renew() and not b.leading
        assert a.renew()  # renewing its own
        # a dies: it renews no more. It stops acting before b may take over ...
        died = time.monotonic()
        while b.renew() is False:
            assert time.monotonic() - died < takeover_bound_s(lease) + 1
            time.sleep(renew_every_s(lease))
        took = time.monotonic() - died
        assert not a.leading
        assert lease * 0.9 < took <= takeover_bound_s(lease) + 0.5
        assert b.leading and not a.renew()
        # ... and a graceful stop hands over at once.
        b.release()
        assert a.renew() and not b.leading
    finally:
        for db in dbs:
            db.engine.dispose()


def test_one_run_moved_by_two_replicas_at_once_is_moved_once(replicas: tuple[Api, Api]) -> None:
    """The second move from the state both read waits for the first to commit, then
    finds the run moved and fails: it never overwrites the first."""
    a, b = replicas
    a.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = a.submit("se-01")["id"]
    db_a = a.client.app.state.ctx.db  # type: ignore[attr-defined]
    db_b = b.client.app.state.ctx.db  # type: ignore[attr-defined]
    now = a.clock.now()
    outcome: list[BaseException | None] = []
    with db_a.session() as first:
        run = first.get(Run, run_id)
        assert run is not None and run.state == RunState.SCHEDULED
        transition(first, run, RunState.ASSIGNED, "handed out", source="orchestrator", at=now)
        first.flush()

        def second() -> None:
            try:
                with db_b.session() as s:
                    other = s.get(Run, run_id)
                    assert other is not None and other.state == RunState.SCHEDULED
                    transition(s, other, RunState.EXPIRED, "never picked up",
                               source="reaper", at=now)
                outcome.append(None)
            except BaseException as e:  # the test asserts on it
                outcome.append(e)

        racer = threading.Thread(target=second)
        racer.start()
        racer.join(1.0)
        assert racer.is_alive(), "the second move did not wait for the first's commit"
    racer.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], Conflict), outcome
    with db_b.reading() as s:
        states = _shown_states(s, run_id)
        assert s.get(Run, run_id).state == RunState.ASSIGNED  # type: ignore[union-attr]
    assert states == [RunState.SCHEDULED, RunState.ASSIGNED]


def test_a_cancel_racing_the_hand_out_cancels_the_run_it_handed_out(
        replicas: tuple[Api, Api]) -> None:
    """A user's cancel read the run scheduled while a heartbeat was handing it out: it
    waits for the hand-out to commit, then cancels the assigned run (its reservation
    held until the node drops it) instead of failing with 409 and leaving the run to
    run later on its node."""
    a, b = replicas
    a.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = a.submit("se-01")["id"]
    db_a = a.client.app.state.ctx.db  # type: ignore[attr-defined]
    now = a.clock.now()
    reply: list[tuple[int, dict[str, object]]] = []
    with db_a.session() as first:
        run = first.get(Run, run_id)
        assert run is not None and run.state == RunState.SCHEDULED
        transition(first, run, RunState.ASSIGNED, "handed to the node on heartbeat",
                   source="orchestrator", at=now)
        first.flush()

        def cancel() -> None:
            r = b.client.post(f"/api/v1/runs/{run_id}/cancel", headers=b.admin,
                              json={"reason": "changed my mind"})
            reply.append((r.status_code, r.json()))

        racer = threading.Thread(target=cancel)
        racer.start()
        racer.join(1.0)
        assert racer.is_alive(), "the cancel did not wait for the hand-out's commit"
    racer.join(10)
    [(status, body)] = reply
    assert status == 200, body
    assert body["state"] == "cancelled" and "stays held until node se-01" in str(
        body["reason"]), body
    with db_a.reading() as s:
        states = _shown_states(s, run_id)
    assert states == [RunState.SCHEDULED, RunState.ASSIGNED, RunState.CANCELLED]


def test_racing_replicas_hand_out_and_cancel_each_run_once(replicas: tuple[Api, Api]) -> None:
    """Heartbeats through one replica hand the node its runs while both replicas take
    a cancel of every run at once: each run is assigned at most once and cancelled
    exactly once (of two cancels at once one wins and the other is told the run is
    cancelled, 409; a hand-out that moves the run between a cancel's read and its write
    does not make the cancel fail: the cancel is made from assigned), and its events
    follow the lifecycle."""
    a, b = replicas
    token = a.add_node("se-01", [("op0", "240-01", "Telia")])
    a.clock.advance(1)
    runs = [a.submit("se-01", duration_s=5)["id"] for _ in range(8)]
    a.clock.t += timedelta(days=2)  # every run due: the heartbeats hand them all out
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            a.heartbeat(token)

    def cancel(api: Api, run_id: str, go: threading.Barrier) -> int:
        go.wait()
        r = api.client.post(f"/api/v1/runs/{run_id}/cancel", headers=api.admin,
                            json={"reason": "race"})
        return r.status_code

    with ThreadPoolExecutor(3) as pool:
        beating = pool.submit(beat)
        codes = []
        for run_id in runs:
            go = threading.Barrier(2)
            pair = [pool.submit(cancel, api, run_id, go) for api in (a, b)]
            codes.append(sorted(f.result() for f in pair))
        stop.set()
        beating.result()
    assert all(pair == [200, 409] for pair in codes), codes
    db = a.client.app.state.ctx.db  # type: ignore[attr-defined]
    with db.reading() as s:
        for run_id in runs:
            states = _shown_states(s, run_id)
            assert states.count(RunState.CANCELLED) == 1, (run_id, states)
            assert states.count(RunState.ASSIGNED) <= 1, (run_id, states)
            assert all(can_move(x, y) for x, y in itertools.pairwise(states)), states


def test_an_uploads_lock_is_held_across_processes(pg_url: str) -> None:
    engines = [create_engine(pg_url) for _ in range(2)]
    name = locks.upload_lock_name("r-1")
    order: list[str] = []
    try:
        with locks.held(engines[0], name):
            def other() -> None:
                with locks.held(engines[1], name):
                    order.append("second")
            t = threading.Thread(target=other)
            t.start()
            t.join(0.5)
            assert t.is_alive()
            order.append("first")
        t.join(5)
        assert order == ["first", "second"]
    finally:
        for e in engines:
            e.dispose()


def _shown_states(s: Session, run_id: str) -> list[RunState]:
    """The run's history as `testbed run show` shows it: its booking, then its events."""
    run = s.get(Run, run_id)
    assert run is not None
    return [e.state for e in history(run)]
