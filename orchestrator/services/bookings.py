"""Writing a plan's bookings: one ``Run`` row per run and interface, in state
``scheduled`` with its session key, its quota reservation (the columns
:func:`orchestrator.services.quotas.hold` fills) and why it was booked. The booking is
the run's first transition, derived from this row (:mod:`orchestrator.model.booking`):
no event row is written for it.

A day of hourly sessions at 10,000 nodes x 3 SIMs is 720,000 runs. One ORM object per
run and per event takes minutes and gigabytes, so the rows are built as plain tuples
straight from the plan's arrays (:meth:`Plan.by_lane`), each instant formatted once per
distinct second, and streamed: into one COPY (psycopg) where the engine is PostgreSQL,
``BATCH`` runs at a time by SQLAlchemy Core's executemany elsewhere (SQLite, for
single-host trials and tests). Memory stays at a batch at most whatever the plan's size.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

import numpy as np
from sqlalchemy import Connection, insert
from sqlalchemy.orm import Session

from orchestrator.catalogue.manifest import Manifest
from orchestrator.model.booking import planner_reason, session_label
from orchestrator.quotas.ledger import Period, SimQuota
from orchestrator.scheduling.lanes import Lane
from orchestrator.scheduling.planner import Plan
from orchestrator.store.tables import Campaign, Run
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
    The session is flushed first (the runs refer to its campaign rows); the rows are
    not loaded into it."""
    s.flush()
    conn = s.connection()
    if conn.dialect.name == "postgresql":
        return _copy(conn, _rows(plan, campaigns, catalogue, now, text=True))
    rows = _rows(plan, campaigns, catalogue, now, text=False)
    written = 0
    while runs := list(islice(rows, batch)):
        conn.execute(insert(Run), [dict(zip(RUN_COLUMNS, r, strict=True)) for r in runs])
        written += len(runs)
    return written


def _copy(conn: Connection, rows: Iterator[Row]) -> int:
    """One COPY on the session's own connection, inside its transaction, fed row by row
    as the rows are made: the server stores a row while the next ones are formatted
    (the two share the machine's cores), where a COPY per batch left it idle while
    each batch was built, and the client idle while the server finished it."""
    raw = conn.connection.driver_connection
    assert raw is not None
    written = 0
    with raw.cursor() as cur, cur.copy(
            f"COPY runs ({', '.join(RUN_COLUMNS)}) FROM STDIN") as cp:
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
          now: datetime, *, text: bool) -> Iterator[Row]:
    """The plan's runs as ``RUN_COLUMNS`` tuples, lane by lane, earliest first. With
    ``text``, instants are ISO strings and parameters JSON (COPY's text format parses
    them; psycopg's dumping of datetimes would cost more than the rest of a row), else
    datetimes and dicts (SQLAlchemy binds them)."""
    store: Callable[[datetime], Any] = datetime.isoformat if text else _same
    params: Callable[[dict[str, Any]], Any] = json.dumps if text else _same
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
                    reason = planner_reason(at_iso, lane.node, lane.interfaces[k], row.name,
                                            occ_label, run.step, run.repetition)
                    yield (ids.new(t, stamp), row.id, row.project_id, row.created_by,
                           lane.node, lane.interfaces[k], manifest.name, manifest.version,
                           manifest.image, parameters, at, end, run.nbytes[k], state,
                           reason, stored_now, stored_now, occ_stored, ifaces, run.step,
                           run.repetition, lane.sims[k].mcc_mnc, run.nbytes[k], period[k])


def _same(x: Any) -> Any:
    return x
