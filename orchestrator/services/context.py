"""What every service needs, built once by the app factory or the CLI and passed in."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from orchestrator.archive.store import Archive
from orchestrator.catalogue.manifest import Manifest
from orchestrator.model.clock import Clock
from orchestrator.model.fleet import SimSummary
from orchestrator.services.cached import Cached
from orchestrator.settings import Settings
from orchestrator.store import locks
from orchestrator.store.db import Database
from orchestrator.timeseries.lineprotocol import TimeSeriesSink
from orchestrator.timeseries.live import LiveBuffer

#: How long a process keeps the fleet's SIM figures for the fleet page's summary.
SIM_FIGURES_S = 30.0


@dataclass
class Context:
    settings: Settings
    db: Database
    catalogue: dict[str, Manifest]
    clock: Clock
    archive: Archive
    #: When this orchestrator process started. Silence from nodes is only counted from
    #: here: after a long orchestrator outage, nodes get a full offline threshold to
    #: heartbeat again before their runs are failed.
    started_at: datetime
    #: Where results go as time series; None when no store is configured.
    timeseries: TimeSeriesSink | None = None
    #: Heartbeats' metadata points, waiting for the ingest loop to write them.
    live: LiveBuffer = field(default_factory=LiveBuffer)
    #: One planning pass at a time in this process (the planner reads the calendar and
    #: writes runs; two passes at once would book the same session twice). Take it
    #: through :meth:`planning`, which holds it across replicas too.
    plan_lock: threading.Lock = field(default_factory=threading.Lock)
    #: Set by services when a re-plan is due soon (a run failed, a node or quota
    #: changed); the planner loop clears it.
    replan_wanted: threading.Event = field(default_factory=threading.Event)
    #: The fleet's SIMs counted for the fleet page's summary and filter
    #: (:mod:`orchestrator.services.fleetview`).
    fleet_sims: Cached[SimSummary] = field(
        default_factory=lambda: Cached(SIM_FIGURES_S))

    @contextmanager
    def planning(self) -> Iterator[Session]:
        """A unit of work that books runs: one at a time in this process
        (``plan_lock``) and, on PostgreSQL, across replicas (an advisory lock held until
        it commits, taken before it reads the calendar)."""
        with self.plan_lock, self.db.session() as s:
            locks.lock_in_transaction(s, locks.PLANNING)
            yield s
