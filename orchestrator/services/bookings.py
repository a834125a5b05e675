"""Writing a plan's bookings: one ``Run`` row per run and interface, in state
``scheduled`` with its session key, its quota reservation (the columns
:func:`orchestrator.services.quotas.hold` fills) and why it was booked. The booking is
the run's first transition, derived from this row (:mod:`orchestrator.model.booking`):
no event row is written for it.

A day of hourly sessions at 10,000 nodes x 3 SIMs is 720,000 runs. One ORM object per
run and per event takes minutes and gigabytes, so the rows are built as plain tuples
straight from the plan's arrays (:meth:`Plan.by_lane`), each instant formatted once per
distinct second, and streamed: into one binary COPY (psycopg) where the engine is
PostgreSQL,
``BATCH`` runs at a time by SQLAlchemy Core's executemany elsewhere (SQLite, for
single-host trials and tests). Memory stays at a batch at most whatever the plan's size.
The runs have no foreign keys (migration 0017): the nodes and campaigns the plan names
are checked once, in one query each, before the first row is written.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

import numpy as np
from sqlalchemy import Connection, insert, select
from sqlalchemy.orm import Session

from orchestrator.catalogue.manifest import Manifest
from orchestrator.errors import Conflict
from orchestrator.model.booking import planner_reason, session_label
from orchestrator.quotas.ledger import Period, SimQuota
from orchestrator.scheduling.lanes import Lane
from orchestrator.scheduling.planner import Plan
from orchestrator.store.tables import Campaign, Node, Run
from testbed_common.states import RunState

#: Runs per batch where the engine has no COPY (SQLite): large enough that a round trip
#: is amortised over many rows, small enough that a batch's tuples stay a few tens of MB.
BATCH = 50_000

RUN_COLUMNS = (
    "id", "campaign_id", "project_id", "created_by", "node_id", "interface", "experiment",
    "experiment_version", "image", "parameters", "not_before", "deadline",
    "forecast_bytes", "state", "state_reason", "state_at", "created_at",
    "session_occurrence", "session_interfaces", "step", "repetition",
    "mcc_mnc", "reserved_bytes", "reservation_period",
)

Row = tuple[Any, ...]


def write_bookings(s: Session, plan: Plan, campaigns: Mapping[str, Campaign],
                   catalogue: Mapping[str, Manifest], now: datetime, *,
                   batch: int = BATCH) -> int:
    """Write every booking of ``plan`` in the caller's unit of work; the number of runs.
    The session is flushed first (the runs refer to its campaign rows, checked with the
    nodes before anything is written); the rows are not loaded into it."""
    s.flush()
    conn = s.connection()
    _check_parents(conn, plan)
    if conn.dialect.name == "postgresql":
        return _copy(conn, _rows(plan, campaigns, catalogue, now, params=json.dumps))
    rows = _rows(plan, campaigns, catalogue, now, params=_same)
    written = 0
    while runs := list(islice(rows, batch)):
        conn.execute(insert(Run), [dict(zip(RUN_COLUMNS, r, strict=True)) for r in runs])
        written += len(runs)
    return written


#: Keys per look-up of the parents' check: SQLite takes at most 32,766 bound values in a
#: statement.
CHECKED_AT_ONCE = 10_000


def _check_parents(conn: Connection, plan: Plan) -> None:
    """What the runs' foreign keys checked row by row (720,000 look-ups for a day at
    10,000 nodes), checked for the whole plan at once: every node and campaign its
    bookings name is stored (migration 0017). Parents are never deleted (the database
    refuses it), so what is there now is there when the runs commit."""
    lanes = [plan.lanes[i] for i in np.unique(plan.session_lane).tolist()]
    for table, named in ((Node, {lane.node for lane in lanes}),
                         (Campaign, {lane.campaign for lane in lanes})):
        wanted = sorted(named)
        found: set[str] = set()
        for at in range(0, len(wanted), CHECKED_AT_ONCE):
            chunk = wanted[at:at + CHECKED_AT_ONCE]
            found.update(conn.scalars(select(table.id).where(table.id.in_(chunk))))
        if missing := [x for x in wanted if x not in found]:
            raise Conflict(f"the plan books runs for {len(missing)} {table.__tablename__} "
                           f"that are not stored ({', '.join(missing[:5])}"
                           f"{', ...' if len(missing) > 5 else ''}); nothing was written: "
                           "plan again from a fresh snapshot",
                           code="unknown_parent")


#: The runs' columns' types as the binary COPY sends them, in ``RUN_COLUMNS``' order (a
#: varchar's and a json's binary form is their text, so both go as text).
COPY_TYPES = (
    "text", "text", "int4", "int4", "text", "text", "text",
    "int4", "text", "text", "timestamptz", "timestamptz",
    "int8", "text", "text", "timestamptz", "timestamptz",
    "timestamptz", "text", "int4", "int4",
    "text", "int8", "timestamptz",
)


def _copy(conn: Connection, rows: Iterator[Row]) -> int:
    """One COPY in binary format on the session's own connection, inside its
    transaction, fed row by row as the rows are made: the server stores a row while the
    next ones are formatted (the two share the machine's cores). Binary, so that the
    server reads each instant as the 8 bytes it stores rather than parsing an ISO
    string (five per run); psycopg's C dumpers write them from the datetimes."""
    raw = conn.connection.driver_connection
    assert raw is not None
    written = 0
    with raw.cursor() as cur, cur.copy(
            f"COPY runs ({', '.join(RUN_COLUMNS)}) FROM STDIN WITH (FORMAT BINARY)") as cp:
        cp.set_types(list(COPY_TYPES))
        for r in rows:
            cp.write_row(r)
            written += 1
    return written


class _Instants:
    """Each instant of the plan (s after its base) as the store takes it, with its two
    spellings (ISO or ``label``'s for reasons, compact for run ids), computed once per
    distinct second."""

    def __init__(self, base: datetime, store: Callable[[datetime], Any], *,
                 label: Callable[[datetime], str] = datetime.isoformat) -> None:
        self.base, self.store, self.label = base, store, label
        self.seen: dict[int, tuple[Any, datetime, str, str]] = {}

    def __call__(self, t: int) -> tuple[Any, datetime, str, str]:
        got = self.seen.get(t)
        if got is None:
            at = self.base + timedelta(seconds=t)
            got = self.seen[t] = (self.store(at), at, self.label(at), f"{at:%Y%m%dT%H%M%S}")
        return got


class _RunIds:
    """Run ids as :func:`orchestrator.model.ids.new_run_id` spells them (start second
    and 32 random bits), never twice in one write: 10,000 runs start in the same second
    at 10k nodes, where 32 bits collide in about one write in two. The random bits are
    drawn a lane at a time (a generator seeded from the OS, as ``secrets`` is)."""

    def __init__(self) -> None:
        self.used: set[int] = set()
        self.rng = np.random.default_rng(secrets.randbits(128))
        self.drawn: list[int] = []

    def draw(self, n: int) -> None:
        """Draw the random parts of the next ``n`` ids."""
        self.drawn = self.rng.integers(0, 1 << 32, size=n, dtype=np.uint64).tolist()
        self.drawn.reverse()

    def new(self, t: int, stamp: str) -> str:
        r = self.drawn.pop() if self.drawn else secrets.randbits(32)
        while (key := t << 32 | r) in self.used:
            r = secrets.randbits(32)
        self.used.add(key)
        return f"r-{stamp}-{r:08x}"


def _periods(lane: Lane, store: Callable[[datetime], Any]) -> list[Callable[[datetime], Any]]:
    """Per SIM of the lane: the start of the billing period holding an instant (as the
    store takes it), computed again only when a (time-ordered) session leaves the last."""
    def one(q: SimQuota) -> Callable[[datetime], Any]:
        current: Period | None = None
        stored: Any = None

        def start_at(t: datetime) -> Any:
            nonlocal current, stored
            if current is None or not current.start <= t < current.end:
                current = q.period_at(t)
                stored = store(current.start)
            return stored
        return start_at
    return [one(lane.quotas[k]) for k in range(len(lane.sims))]


def _rows(plan: Plan, campaigns: Mapping[str, Campaign], catalogue: Mapping[str, Manifest],
          now: datetime, *, params: Callable[[dict[str, Any]], Any]) -> Iterator[Row]:
    """The plan's runs as ``RUN_COLUMNS`` tuples, lane by lane, earliest first: instants
    as (UTC-aware) datetimes, each made once per distinct second, and parameters as
    ``params`` makes them once per run of a lane (JSON text for the COPY, the dict for
    SQLAlchemy)."""
    store: Callable[[datetime], Any] = _same
    instants = _Instants(plan.base, store)
    occurrences = _Instants(plan.base, store, label=session_label)
    stored_now = store(now)
    ids = _RunIds()
    state = RunState.SCHEDULED.value
    for lane, starts, occs in plan.by_lane():
        row = campaigns[lane.campaign]
        periods = _periods(lane, store)
        ifaces = ",".join(lane.interfaces)
        slots = [(run, catalogue[run.experiment], params(dict(run.parameters)))
                 for run in lane.runs]
        ids.draw(len(starts) * sum(run.interfaces for run in lane.runs))
        for start, occ in zip(starts.tolist(), occs.tolist(), strict=True):
            occ_stored, _, occ_label, _ = occurrences(occ)
            session_at = instants(start)[1]
            period = [p(session_at) for p in periods]
            for run, manifest, parameters in slots:
                t = start + run.offset_s
                at, _, at_iso, stamp = instants(t)
                end = instants(t + run.duration_s)[0]
                for k in range(run.interfaces):
                    why = planner_reason(at_iso, lane.node, lane.interfaces[k], row.name,
                                         occ_label, run.step, run.repetition)
                    yield (ids.new(t, stamp), row.id, row.project_id, row.created_by,
                           lane.node, lane.interfaces[k], manifest.name, manifest.version,
                           manifest.image, parameters, at, end, run.nbytes[k], state,
                           why, stored_now, stored_now, occ_stored, ifaces, run.step,
                           run.repetition, lane.sims[k].mcc_mnc, run.nbytes[k], period[k])


def _same(x: Any) -> Any:
    return x
