"""The reaper reads only the held runs it may move (at 10,000 nodes the other 240,000,
handed out and not yet due, cost seconds every pass): on real SQLite and PostgreSQL, a
pass over runs in every held state, on nodes online, stale, offline, never heard from
and in maintenance, with deadlines past, within the grace and ahead, decides exactly
what a pass reading every held run decides."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from orchestrator.api.app import create_app
from orchestrator.services import reaper
from orchestrator.services.context import Context
from orchestrator.services.nodes import ACTIVE_ON_NODE
from orchestrator.store.tables import Node, Project, Run, User
from testbed_common.states import RunState
from tests.conftest import ManualClock
from tests.integration.conftest import make_settings

SILENT_FOR = {"online": timedelta(seconds=20), "stale": timedelta(minutes=4),
              "offline": timedelta(hours=1), "new": None, "maintenance": timedelta(hours=2)}
DEADLINES = {"past": -timedelta(hours=1), "in the grace": -timedelta(seconds=30),
             "ahead": timedelta(hours=1)}
HELD = (*ACTIVE_ON_NODE, RunState.UNREACHABLE)


@pytest.fixture
def ctx(tmp_path: Path, clock: ManualClock, database_url: str) -> Iterator[Context]:
    settings = make_settings(tmp_path).model_copy(update={"database_url": database_url})
    app = create_app(settings, clock=clock, reaper=False)
    context: Context = app.state.ctx
    context.started_at = clock.now() - timedelta(days=1)  # silence counts in full
    yield context
    context.db.engine.dispose()


def _seed(ctx: Context) -> int:
    now = ctx.clock.now()
    runs = 0
    with ctx.db.session() as s:
        user = s.scalars(select(User.id)).first()
        project = s.scalars(select(Project.id)).first()
        assert user is not None and project is not None  # the bootstrap's
        for health, silent in SILENT_FOR.items():
            s.add(Node(id=health, token_hash=health, country="SE", created_at=now,
                       maintenance=health == "maintenance",
                       last_heartbeat_at=None if silent is None else now - silent))
        for (health, state, (when, ahead), due) in itertools.product(
                SILENT_FOR, HELD, DEADLINES.items(), (True, False)):
            deadline = now + ahead
            s.add(Run(
                id=f"{health[:4]}-{state.value[:5]}-{when[:5]}-{'due' if due else 'later'}",
                project_id=project, created_by=user, node_id=health, interface="op0",
                experiment="tat", experiment_version=1, image="testbed/tat:dev",
                parameters={}, forecast_bytes=1,
                not_before=deadline - timedelta(minutes=5 if due else 0, seconds=1),
                deadline=deadline, state=state, state_reason="seeded",
                state_at=now - timedelta(hours=3), created_at=now - timedelta(days=1),
                silent_since=(now - timedelta(days=8 if due else 1)
                              if state == RunState.UNREACHABLE else None)))
            runs += 1
    return runs


def _decisions(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What one pass decides for each run (run, new state), recorded, not applied."""
    moved: list[tuple[str, str]] = []

    def record(s: Any, run: Run, target: RunState, reason: str, **kw: Any) -> None:
        moved.append((run.id, target.value))

    monkeypatch.setattr(reaper, "transition", record)
    reaper.reap(ctx)
    return sorted(moved)


def test_the_pass_reads_fewer_runs_and_decides_the_same(
        ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _seed(ctx)
    now = ctx.clock.now()
    with ctx.db.reading() as s:
        read = [(r.node_id, r.deadline > now, RunState(r.state))
                for r in s.scalars(reaper.held_runs_to_judge(ctx, now))]
    # the online and stale nodes' runs with their deadline ahead are not read
    assert 0 < len(read) < runs
    assert not [r for r in read if r[0] in ("online", "stale") and r[1]
                and r[2] != RunState.UNREACHABLE]

    narrow = _decisions(ctx, monkeypatch)
    monkeypatch.setattr(reaper, "held_runs_to_judge", lambda ctx, now: select(Run).where(
        Run.state.in_(HELD)))
    every = _decisions(ctx, monkeypatch)
    assert narrow == every
    assert {"unreachable", "failed"} <= {state for _, state in every}
