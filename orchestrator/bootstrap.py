"""Builds the service context from settings: migrate, load the catalogue, bootstrap the
administrator, the default project and the fleet file's nodes (when one is set). Used by
the API app and by the CLI alike."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from orchestrator.archive.store import Archive
from orchestrator.catalogue.loader import load_catalogue
from orchestrator.model.clock import Clock, SystemClock
from orchestrator.services.auth import ensure_admin_user
from orchestrator.services.context import Context
from orchestrator.services.fleetfile import FleetNode, ensure_fleet, load_fleet
from orchestrator.services.users import DEFAULT_PROJECT, get_or_create_project
from orchestrator.settings import InfluxCredential, Settings
from orchestrator.store.db import Database, make_engine, wait_for_database
from orchestrator.store.migrate import upgrade
from orchestrator.timeseries.influx import Credential, InfluxClient

log = logging.getLogger(__name__)


def build_context(settings: Settings, clock: Clock | None = None) -> Context:
    steps = _Steps()
    # A broken fleet file stops the start before anything is opened.
    fleet = (load_fleet(settings.fleet.file, settings.fleet.token_hashes)
             if settings.fleet.file is not None else [])
    if settings.database_wait_s:
        wait_for_database(settings.database_url, settings.database_wait_s)
        steps.done("database")
    upgrade(settings.database_url)
    steps.done("schema")
    archive = Archive(settings.archive_dir, settings.upload_dir)
    archive.prepare()
    clock = clock or SystemClock()
    ctx = Context(
        settings=settings,
        db=Database(make_engine(settings.database_url)),
        catalogue=load_catalogue(settings.experiments_dir),
        clock=clock,
        archive=archive,
        started_at=clock.now(),
        timeseries=timeseries_client(settings),
    )
    steps.done("catalogue")
    bootstrap_rows(ctx.db, clock.now())
    bootstrap_fleet(ctx.db, fleet, clock.now())
    steps.done("administrator and fleet")
    log.info("context ready in %s", steps)
    return ctx


class _Steps:
    """How long each step of the start took, for one log line: a slow start (a database
    that took long to accept connections, a schema migrated) says where it went."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._took: list[tuple[str, float]] = []

    def done(self, step: str) -> None:
        now = time.monotonic()
        self._took.append((step, now - self._last))
        self._last = now

    def __str__(self) -> str:
        total = sum(t for _, t in self._took)
        return f"{total:.2f} s (" + ", ".join(f"{n} {t:.2f} s" for n, t in self._took) + ")"


def bootstrap_rows(db: Database, now: datetime) -> None:
    """The rows every orchestrator needs: the administrator and the default project
    (made once however many replicas and workers start at the same moment)."""
    with db.session() as s:
        ensure_admin_user(s, now)
        get_or_create_project(s, DEFAULT_PROJECT, now)


def bootstrap_fleet(db: Database, fleet: list[FleetNode], now: datetime) -> None:
    """The fleet file's nodes with a token hash (services.fleetfile), made before the API
    serves so that their agents, started in the same compose call, register at its
    first answer."""
    if not fleet:
        return
    with db.session() as s:
        made = ensure_fleet(s, fleet, now)
    if made:
        log.info("provisioned from the fleet file: %s", ", ".join(made))


def timeseries_client(settings: Settings) -> InfluxClient | None:
    influx = settings.influx
    if influx.url is None:
        return None
    return InfluxClient(influx.url, influx.database, writer=_credential(influx.writer),
                        reader=_credential(influx.reader), batch_size=influx.batch_size)


def _credential(cred: InfluxCredential) -> Credential | None:
    return Credential(cred.username, cred.password or "") if cred.username else None
