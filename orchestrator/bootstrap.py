"""Builds the service context from settings: migrate, load the catalogue, bootstrap the
administrator and the default project. Used by the API app and by the CLI alike."""

from __future__ import annotations

from datetime import datetime

from orchestrator.archive.store import Archive
from orchestrator.catalogue.loader import load_catalogue
from orchestrator.model.clock import Clock, SystemClock
from orchestrator.services.auth import ensure_admin_user
from orchestrator.services.context import Context
from orchestrator.services.users import DEFAULT_PROJECT, get_or_create_project
from orchestrator.settings import Settings
from orchestrator.store.db import Database, make_engine
from orchestrator.store.migrate import upgrade
from orchestrator.timeseries.influx import InfluxClient


def build_context(settings: Settings, clock: Clock | None = None) -> Context:
    upgrade(settings.database_url)
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
    bootstrap_rows(ctx.db, clock.now())
    return ctx


def bootstrap_rows(db: Database, now: datetime) -> None:
    """The rows every orchestrator needs: the administrator and the default project
    (made once however many replicas and workers start at the same moment)."""
    with db.session() as s:
        ensure_admin_user(s, now)
        get_or_create_project(s, DEFAULT_PROJECT, now)


def timeseries_client(settings: Settings) -> InfluxClient | None:
    influx = settings.influx
    if influx.url is None:
        return None
    return InfluxClient(influx.url, influx.database, username=influx.username,
                        password=influx.password, batch_size=influx.batch_size)
