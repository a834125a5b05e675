"""Planner scale: plan, and plan plus persisting a day of bookings to PostgreSQL, on N
nodes with 3 SIMs each and hourly sessions.

Each size runs in a fresh child process (so peak RSS is that size's alone, read with
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end). The snapshot (nodes, quotas,
history) is built before any clock starts. One SIM in ten has a cap that runs out
mid-month, so the quota path and the decision aggregation are exercised, not only the
happy path. Timed, per size:

- ``plan()`` of 30 days (the arrays alone; bookings are not materialised);
- the service's pass: ``plan()`` of the day ahead (``TESTBED_SCHEDULING__HORIZON_S``,
  a day by default) plus writing its runs and reservations (a booking's first
  transition is derived from its run, ``orchestrator.model.booking``; no event) with
  :func:`orchestrator.services.bookings.write_bookings` (the nodes and campaigns the
  plan names checked in one query, then one binary COPY) and committing, into a fresh
  database of a throwaway PostgreSQL (Debian's binaries, as the integration tests;
  started with ``-F``, no fsync) holding the nodes and the campaign;
- the 30-day plan cut to its first day (``Plan.before``) and written the same way;
- the server alone: the same number of runs, made by an ``INSERT ... SELECT``
  in the server into a database like the others (``FLOOR_SQL``), the cost of this
  schema's indexes and foreign-key checks whatever the client does;
- the baseline in the same run: the writer it replaced (one ORM ``Run`` and ``RunEvent``
  per run, kept below as ``orm_writer``) on the same day's plan, up to ``--old-up-to``
  nodes (default 1000: at 10k it would build 1.4 M ORM objects).

    .venv/bin/python bench/planner.py              # 1k, 3k, 10k nodes
    .venv/bin/python bench/planner.py --nodes 1000 --old-up-to 3000
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from orchestrator.catalogue.manifest import Manifest
    from orchestrator.scheduling.planner import Plan
    from orchestrator.store.tables import Campaign as CampaignRow

    Writer = Callable[[Session, Plan, Mapping[str, CampaignRow], Mapping[str, Manifest],
                       datetime], int]

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from children import per_size  # noqa: E402

ZONES = ["Europe/Stockholm", "Europe/Oslo", "Europe/Madrid", "America/New_York",
         "Australia/Lord_Howe", "Asia/Kolkata"]
OPERATORS = [("240-01", "Telia"), ("240-02", "Tre"), ("240-07", "Tele2")]


def orm_writer(s: Session, result: Plan, rows: Mapping[str, CampaignRow],
               catalogue: Mapping[str, Manifest], now: datetime) -> int:
    """The writer ``write_bookings`` replaced (one ORM object per run; it also added
    one per event before a booking's event was derived), kept as the baseline."""
    from orchestrator.model.booking import booked_reason
    from orchestrator.model.ids import new_run_id
    from orchestrator.services import quotas
    from orchestrator.store.tables import Run
    from testbed_common.states import RunState

    written = 0
    for b in result.bookings():
        row = rows[b.session.campaign]
        manifest = catalogue[b.experiment]
        occurrence = b.session.occurrence
        for iface, r in zip(b.interfaces, b.reservations, strict=True):
            reason = booked_reason(not_before=b.start, node=b.node, interface=iface,
                                   campaign=row.name, session=occurrence, step=b.step,
                                   repetition=b.repetition)
            run = Run(
                id=new_run_id(b.start), campaign_id=row.id, project_id=row.project_id,
                created_by=row.created_by, node_id=b.node, interface=iface,
                experiment=manifest.name, experiment_version=manifest.version,
                image=manifest.image, parameters=dict(b.parameters), not_before=b.start,
                deadline=b.end, forecast_bytes=r.nbytes, state=RunState.SCHEDULED.value,
                state_reason=reason, state_at=now, created_at=now,
                session_occurrence=occurrence, session_interfaces=",".join(b.session.interfaces),
                step=b.step, repetition=b.repetition,
            )
            quotas.hold(run, r)
            s.add(run)
            written += 1
    return written


def _database(template: str, name: str, node_ids: Sequence[str], now: datetime) -> str:
    """A fresh database at the migrations' head holding the user, project, nodes and
    campaign the runs refer to."""
    from sqlalchemy import insert

    from orchestrator.store.db import Database, make_engine
    from orchestrator.store.migrate import upgrade
    from orchestrator.store.tables import Campaign, Node, Project, User
    from tests.integration import postgres

    url = postgres.create_database(template, name)
    upgrade(url)
    db = Database(make_engine(url))
    with db.session() as s:
        s.add(User(id=1, name="bench", created_at=now))
        s.add(Project(id=1, name="default", created_at=now))
        s.flush()
        s.execute(insert(Node), [{"id": n, "token_hash": n, "country": "SE", "tags": [],
                                  "created_at": now} for n in node_ids])
        s.add(Campaign(id="c-bench", name="hourly-tat", project_id=1, created_by=1,
                       spec={}, created_at=now, planned_at=now, decisions=[]))
    db.engine.dispose()
    return url


def _persist(url: str, result: Plan, writer: Writer, catalogue: Mapping[str, Manifest],
             now: datetime) -> tuple[int, float]:
    """Runs written and seconds: one unit of work, opened, written and committed."""
    from sqlalchemy import func, select

    from orchestrator.store.db import Database, make_engine
    from orchestrator.store.tables import Campaign, Run, RunEvent

    db = Database(make_engine(url))
    t0 = time.perf_counter()
    with db.session() as s:
        row = s.get(Campaign, "c-bench")
        assert row is not None
        written = writer(s, result, {"c-bench": row}, catalogue, now)
    elapsed = time.perf_counter() - t0
    with db.reading() as s:  # every run is stored; its booking is derived, not an event
        assert s.scalar(select(func.count()).select_from(Run)) == written
        assert s.scalar(select(func.count()).select_from(RunEvent)) == 0
    db.engine.dispose()
    return written, elapsed


#: The same rows as the writer's (same columns, reasons of the same length), made by the
#: server itself: what storing a day costs PostgreSQL with this schema (its indexes and
#: foreign-key checks) when no client formats or sends anything.
FLOOR_SQL = """
INSERT INTO runs (id, campaign_id, project_id, created_by, node_id, interface, experiment,
  experiment_version, image, parameters, not_before, deadline, forecast_bytes, state,
  state_reason, state_at, created_at, session_occurrence, session_interfaces, step,
  repetition, mcc_mnc, reserved_bytes, reservation_period)
SELECT 'r-' || to_char(t, 'YYYYMMDD"T"HH24MISS') || '-' || lpad(to_hex(i), 8, '0'),
  'c-bench', 1, 1, 'n' || lpad(mod(i, %(nodes)s)::text, 5, '0'),
  'op' || mod(i / %(nodes)s, 3), 'tat', 1,
  'testbed/exp-tat:1', '{"duration_s": 10, "direction": "uplink", "bin_s": 0.1}', t,
  t + interval '25 seconds', 32000000, 'scheduled',
  'booked by the planner for ' || to_char(t, 'YYYY-MM-DD"T"HH24:MI:SS') || '+00:00 on n'
    || lpad(mod(i, %(nodes)s)::text, 5, '0') || '/op' || mod(i / %(nodes)s, 3)
    || ': campaign ''hourly-tat'', '
    || 'session 2026-03-01 00:00, step 0, repetition 0',
  %(now)s, %(now)s, t, 'op0,op1,op2', 0, 0, '240-01', 32000000, %(now)s
FROM (SELECT i, %(now)s + (i / %(nodes)s) * interval '20 minutes' AS t
      FROM generate_series(0, %(runs)s - 1) AS i) AS g
"""


def _server_floor(url: str, runs: int, nodes: int, now: datetime) -> float:
    """Seconds for the server to store ``runs`` runs in one
    transaction (the database holds the same nodes, the same number of them)."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        t0 = time.perf_counter()
        with conn.cursor() as cur:
            cur.execute(FLOOR_SQL, {"now": now, "runs": runs, "nodes": nodes})
        conn.commit()
        return time.perf_counter() - t0


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--old-up-to", type=int, default=1000,
                    help="time the replaced ORM writer up to this many nodes")


def one(n_nodes: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from orchestrator.catalogue.manifest import parse_manifest
    from orchestrator.model.ids import CampaignId, NodeId
    from orchestrator.quotas.ledger import LedgerState, SimKey, SimQuota
    from orchestrator.scheduling.forecast import LinkHistory
    from orchestrator.scheduling.planner import Campaign, Snapshot, plan
    from orchestrator.scheduling.selection import NodeFacts, SimFacts
    from orchestrator.scheduling.spec import CampaignSpecV2
    from orchestrator.services.bookings import write_bookings
    from tests.integration import postgres

    ap = argparse.ArgumentParser()
    _arguments(ap)
    args, _ = ap.parse_known_args()
    tat = parse_manifest((REPO / "experiments/tat/experiment.yaml").read_text(), source="tat")
    catalogue = {"tat": tat}
    now = datetime(2026, 3, 1, tzinfo=UTC)
    nodes = [
        NodeFacts(NodeId(f"n{i:05d}"), "SE", timezone=ZONES[i % len(ZONES)],
                  sims=tuple(SimFacts(f"op{k}", mcc, name)
                             for k, (mcc, name) in enumerate(OPERATORS)))
        for i in range(n_nodes)
    ]
    sims = {}
    rates = {}
    for i, node in enumerate(nodes):
        for k, s in enumerate(node.sims):
            key = SimKey(node.id, s.interface, s.mcc_mnc)
            cap = 20_000_000_000 if (i + k) % 10 else 5_000_000_000  # 1 in 10 runs out
            sims[key] = SimQuota(key, cap, reset_day=15, timezone=node.timezone)
            rates[(node.id, s.mcc_mnc)] = [10e6 + 1e5 * ((i + k + j) % 7) for j in range(24)]
    snapshot = Snapshot(now=now, nodes=nodes, catalogue=catalogue,
                        quotas=LedgerState(sims=sims), history=LinkHistory(rates))
    spec = CampaignSpecV2.model_validate({
        "name": "hourly-tat", "steps": [{"experiment": "tat"}],
        "recurrence": {"kind": "every", "hours": 1, "start": now.isoformat(),
                       "end": (now + timedelta(days=30)).isoformat()},
    })
    campaign = Campaign(CampaignId("c-bench"), spec, now)
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    month = plan(snapshot, [campaign], horizon=timedelta(days=30))
    plan_month = time.perf_counter() - t0
    out: dict[str, Any] = {
        "nodes": n_nodes, "sims": 3 * n_nodes, "seconds": plan_month,
        "sessions": month.session_count, "decisions": len(month.decisions),
    }
    ids = [n.id for n in nodes]
    with postgres.server() as template:
        url = _database(template, "day", ids, now)
        t0 = time.perf_counter()
        day = plan(snapshot, [campaign], horizon=timedelta(days=1))
        out["plan_day_s"] = time.perf_counter() - t0
        out["runs"], out["write_s"] = _persist(url, day, write_bookings, catalogue, now)
        out["plan_write_s"] = out["plan_day_s"] + out["write_s"]
        url = _database(template, "cut", ids, now)
        t0 = time.perf_counter()
        cut = month.before(now + timedelta(days=1))
        runs, _ = _persist(url, cut, write_bookings, catalogue, now)
        out["cut_write_s"] = time.perf_counter() - t0
        out["cut_runs"] = runs
        url = _database(template, "floor", ids, now)
        out["floor_s"] = _server_floor(url, out["runs"], n_nodes, now)
        out["old_write_s"] = None
        if n_nodes <= args.old_up_to:
            url = _database(template, "old", ids, now)
            runs, out["old_write_s"] = _persist(url, day, orm_writer, catalogue, now)
            assert runs == out["runs"]
    out["load_start"] = load_start
    out["load_end"] = os.getloadavg()[0]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    measured = per_size(__doc__ or "", __file__, one, add_arguments=_arguments)
    if measured is None:
        return
    rows, _ = measured
    load = os.getloadavg()
    print(f"# planner bench, {os.cpu_count()} cores, load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f} at the end")
    print("\nplan() of 30 days alone:\n")
    print("| nodes | SIMs | sessions planned | decisions | plan() s | µs per node |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['nodes']} | {r['sims']} | {r['sessions']} | {r['decisions']} | "
              f"{r['seconds']:.2f} | {1e6 * r['seconds'] / r['nodes']:.0f} |")
    print("\nplan of the day ahead plus persisting its bookings to PostgreSQL (runs with "
          "their reservations, the booking derived, no event; committed):\n")
    print("| nodes | runs a day | plan() 1 d s | write s | plan + write s | runs/s written "
          "| ORM writer s (baseline) | write speed-up | server alone s | 30 d plan, cut "
          "to 1 d, write s | load 1-min avg start / end | peak RSS MB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: |")
    for r in rows:
        old = r["old_write_s"]
        speedup = "" if old is None else f"{old / r['write_s']:.1f}x"
        print(f"| {r['nodes']} | {r['runs']} | {r['plan_day_s']:.2f} | {r['write_s']:.2f} | "
              f"{r['plan_write_s']:.2f} | {r['runs'] / r['write_s']:.0f} | "
              f"{'not run' if old is None else f'{old:.2f}'} | "
              f"{speedup} | {r['floor_s']:.2f} | "
              f"{r['cut_write_s']:.2f} | {r['load_start']:.2f} / {r['load_end']:.2f} | "
              f"{r['peak_rss_mb']:.0f} |")
    first, last = rows[0], rows[-1]
    ratio = (last["seconds"] / last["nodes"]) / (first["seconds"] / first["nodes"])
    print(f"\n30-day plan() time per node at {last['nodes']} / at {first['nodes']}: "
          f"{ratio:.2f} (1.0 = linear; below 1 = fixed costs amortised)")


if __name__ == "__main__":
    main()
