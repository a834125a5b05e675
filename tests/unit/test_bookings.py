"""The streamed booking writer stores exactly what the plan's bookings say (state,
reason, session key, reservation with its billing period; the booking shown as the
run's first transition though no event is stored for it), across batches and
a quota reset, with ids unique even when the random part repeats; ``Plan.before`` cuts
a plan to the sessions starting before an instant."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from orchestrator.catalogue.manifest import parse_manifest
from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.quotas.ledger import LedgerState, SimKey, SimQuota
from orchestrator.scheduling.planner import Campaign, Plan, Snapshot, plan
from orchestrator.scheduling.selection import NodeFacts, SimFacts
from orchestrator.scheduling.spec import CampaignSpecV2
from orchestrator.services import bookings
from orchestrator.services.views import history
from orchestrator.store.db import Database, make_engine
from orchestrator.store.migrate import upgrade
from orchestrator.store.tables import Campaign as CampaignRow
from orchestrator.store.tables import Node, Project, Run, RunEvent, User

REPO = Path(__file__).resolve().parents[2]
# Stockholm's reset on the 15th is 2026-03-14 23:00 UTC: the day booked spans two periods.
NOW = datetime(2026, 3, 14, 12, tzinfo=UTC)
TAT = parse_manifest((REPO / "experiments/tat/experiment.yaml").read_text(), source="tat")
CATALOGUE = {"tat": TAT}
NAME = "it's hourly"  # quoted in the reason as repr() quotes it


def day_plan(n_nodes: int = 2) -> Plan:
    nodes = [NodeFacts(NodeId(f"se-{i}"), "SE", timezone="Europe/Stockholm", sims=(
        SimFacts("op0", "240-01", "Telia"), SimFacts("op1", "240-02", "Tre")))
        for i in range(n_nodes)]
    sims = {}
    for n in nodes:
        for s in n.sims:
            key = SimKey(n.id, s.interface, s.mcc_mnc)
            sims[key] = SimQuota(key, 50 * 10**9, reset_day=15, timezone=n.timezone)
    spec = CampaignSpecV2.model_validate({
        "name": NAME, "project": "p",
        "steps": [{"experiment": "tat"},
                  {"experiment": "tat", "parameters": {"direction": "downlink"}}],
        "repetitions": 2,
        "recurrence": {"kind": "every", "hours": 3, "start": NOW.isoformat(),
                       "end": (NOW + timedelta(days=2)).isoformat()},
    })
    snapshot = Snapshot(now=NOW, nodes=nodes, catalogue=CATALOGUE,
                        quotas=LedgerState(sims=sims))
    return plan(snapshot, [Campaign(CampaignId("c-1"), spec, NOW)],
                horizon=timedelta(days=2))


def seed(database: Database, nodes: int = 2) -> None:
    """The user, project and nodes the plan's runs name."""
    with database.session() as s:
        s.add(User(id=1, name="alice", created_at=NOW))
        s.add(Project(id=1, name="p", created_at=NOW))
        for i in range(nodes):
            s.add(Node(id=f"se-{i}", token_hash=f"h{i}", country="SE", created_at=NOW))


@pytest.fixture
def db(tmp_path: Path) -> Database:
    url = f"sqlite:///{tmp_path / 'testbed.db'}"
    upgrade(url)
    database = Database(make_engine(url))
    seed(database)
    return database


def campaign_row() -> CampaignRow:
    return CampaignRow(id="c-1", name=NAME, project_id=1, created_by=1, spec={},
                       created_at=NOW)


def check_rows_say_what_the_bookings_say(database: Database, batch: int) -> None:
    """Write ``day_plan()`` and compare every stored run with its booking (on whichever
    engine ``database`` is: tests/integration/test_run_parents.py runs it on both)."""
    p = day_plan()
    with database.session() as s:
        row = campaign_row()
        s.add(row)
        written = bookings.write_bookings(s, p, {"c-1": row}, CATALOGUE, NOW, batch=batch)
    expected: list[tuple[Any, ...]] = []
    for b in p.bookings():
        for iface, r in zip(b.interfaces, b.reservations, strict=True):
            reason = (f"booked by the planner for {b.start.isoformat()} on {b.node}/{iface}: "
                      f"campaign {NAME!r}, session "
                      f"{b.session.occurrence:%Y-%m-%d %H:%M}, step {b.step}, "
                      f"repetition {b.repetition}")
            expected.append((b.node, iface, b.start, b.end, dict(b.parameters), r.nbytes,
                             r.sim.mcc_mnc, r.nbytes, r.period_start,
                             b.session.occurrence, ",".join(b.session.interfaces), b.step,
                             b.repetition, "scheduled", reason))
    with database.reading() as s:
        runs = s.scalars(select(Run)).all()
        got = [(r.node_id, r.interface, r.not_before, r.deadline, r.parameters,
                r.forecast_bytes, r.mcc_mnc, r.reserved_bytes, r.reservation_period,
                r.session_occurrence, r.session_interfaces, r.step, r.repetition, r.state,
                r.state_reason) for r in runs]
        assert s.scalars(select(RunEvent)).all() == []  # the booking is derived
        assert {r.campaign_id for r in runs} == {"c-1"}
        assert {(r.project_id, r.created_by, r.state_at, r.created_at) for r in runs} == {
            (1, 1, NOW, NOW)}
        for run in runs:
            assert re.fullmatch(rf"r-{run.not_before:%Y%m%dT%H%M%S}-[0-9a-f]{{8}}", run.id)
            shown = history(run)
            assert [(e.state, e.reason, e.source, e.at) for e in shown] == [
                ("scheduled", run.state_reason, "orchestrator", NOW)]
    assert written == len(runs) == len(expected) > batch
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    # both billing periods of the day are reserved against
    assert len({g[8] for g in got}) == 2


def test_rows_say_what_the_bookings_say(db: Database) -> None:
    check_rows_say_what_the_bookings_say(db, batch=7)


def test_run_ids_stay_unique_when_the_random_part_repeats(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ids = bookings._RunIds()
    ids.drawn = [7, 7, 7]  # a lane's random parts, drawn in advance, repeating
    redraws = iter([7, 9])
    monkeypatch.setattr(bookings.secrets, "randbits", lambda _bits: next(redraws))
    got = [ids.new(0, "20260314T120000") for _ in range(2)] + [
        ids.new(1, "20260314T120001")]
    assert got == ["r-20260314T120000-00000007", "r-20260314T120000-00000009",
                   "r-20260314T120001-00000007"]


def test_before_keeps_the_sessions_that_start_before_the_cut() -> None:
    p = day_plan()
    cut = NOW + timedelta(hours=12)
    day = p.before(cut)
    first: dict[Any, datetime] = {}
    for b in p.bookings():  # a session starts with its first run
        first[b.session] = min(first.get(b.session, b.start), b.start)
    assert 0 < day.session_count < p.session_count
    assert {b.session for b in day.bookings()} == {k for k, t in first.items() if t < cut}
