"""The app factory. Nothing happens at import time: ``create_app(settings)`` migrates the
database, loads the catalogue and starts the reaper, the planner and the ingest loops
when the app starts serving. Replicas and workers sharing a PostgreSQL database all run
the loops, but only the holder of the loops' lease (``services.leader``) reaps and
makes the planner's periodic pass."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute

from orchestrator import logconfig
from orchestrator.api import (
    errors,
    guard,
    routes_agent,
    routes_datasets,
    routes_nodes,
    routes_quotas,
    routes_runs,
    routes_tokens,
    routes_users,
)
from orchestrator.api.deps import TOKEN_SCHEME, scrape_token
from orchestrator.bootstrap import build_context
from orchestrator.errors import Unauthorized
from orchestrator.metrics.collector import StateCollector
from orchestrator.model.clock import Clock
from orchestrator.model.lease import planning_due, renew_every_s
from orchestrator.pages import routes as pages_routes
from orchestrator.services.auth import may_scrape
from orchestrator.services.ingest import ingest_pending
from orchestrator.services.leader import Leadership
from orchestrator.services.planning import availability, replan
from orchestrator.services.quotas import quota_points
from orchestrator.services.reaper import reap
from orchestrator.settings import Settings
from orchestrator.study import load as load_studies
from orchestrator.study.registry import unread_formats
from orchestrator.timeseries.influx import InfluxClient, TimeSeriesError

log = logging.getLogger("orchestrator")

#: Runs per ingest pass; the live metadata is flushed between passes.
INGEST_BATCH = 50


async def _lease_loop(lead: Leadership) -> None:
    """Takes or renews the loops' lease every third of it, in every process."""
    try:
        while True:
            try:
                await run_in_threadpool(lead.renew)
            except Exception:  # the database away: not leading once the lease runs out
                log.exception("lease %r not renewed", lead.name)
            await asyncio.sleep(renew_every_s(lead.lease_s))
    finally:  # shutdown: the next replica need not wait for the lease to expire
        with contextlib.suppress(Exception):
            await run_in_threadpool(lead.release)


async def _reaper_loop(app: FastAPI, lead: Leadership, interval_s: float) -> None:
    while True:
        try:
            if lead.leading:
                ended = await run_in_threadpool(reap, app.state.ctx)
                if ended:
                    log.info("reaper ended %d run(s)", ended)
        except Exception:  # keep reaping; a bad pass must not stop the next
            log.exception("reaper pass failed")
        await asyncio.sleep(interval_s)


async def _ingest_loop(app: FastAPI, interval_s: float) -> None:
    """Writes archived runs, then the heartbeats' metadata points, into the time-series
    store; waits out store outages. Runs in every worker process and replica: each run
    is claimed before it is written (:mod:`orchestrator.services.ingestclaims`), so the
    workers share the runs and none is written twice. A pass that took its whole batch
    is followed at once by the next."""
    ctx = app.state.ctx
    ready = False
    while True:
        try:
            if not ready and isinstance(ctx.timeseries, InfluxClient):
                await run_in_threadpool(ctx.timeseries.create_database)
            ready = True
            done = await run_in_threadpool(ingest_pending, ctx, ctx.timeseries,
                                           limit=INGEST_BATCH)
            if not done.stopped:  # the nodes' live metadata, once the store answers
                await run_in_threadpool(ctx.live.flush, ctx.timeseries)
            if done.written_runs:
                log.info("ingested %d run(s), %d points", done.written_runs, done.points)
            if done.stopped:
                log.warning("time-series store unavailable, will retry: %s", done.stopped)
        except TimeSeriesError as e:
            log.warning("time-series store not ready, will retry: %s", e)
        except Exception:  # keep ingesting; a bad pass must not stop the next
            log.exception("ingest pass failed")
        else:
            if done.written_runs == INGEST_BATCH and not done.stopped:
                await asyncio.sleep(0)  # more are waiting: go on, letting requests in
                continue
        await asyncio.sleep(interval_s)


async def _planner_loop(app: FastAPI, lead: Leadership, interval_s: float,
                        tick_s: float) -> None:
    """The leader re-plans every ``interval_s``, and at the next tick after a node went
    offline or came back; any process re-plans at its next tick after a run failed or
    a quota changed there (``ctx.replan_wanted``): passes are one at a time across
    replicas (``Context.planning``), so a follower's pass is as safe as a request's."""
    ctx = app.state.ctx
    last_seen: frozenset[tuple[str, str]] | None = None
    elapsed = interval_s  # plan at start: the calendar may have moved while down
    while True:
        try:
            leading = lead.leading
            seen: frozenset[tuple[str, str]] | None
            if leading:
                seen = await run_in_threadpool(availability, ctx)
            else:  # when it comes to lead, it plans at once
                seen = last_seen = None
                elapsed = interval_s
            if planning_due(leading=leading, elapsed_s=elapsed, interval_s=interval_s,
                            moved=seen != last_seen, wanted=ctx.replan_wanted.is_set()):
                done = await run_in_threadpool(replan, ctx)
                last_seen, elapsed = seen, 0.0
                if ctx.timeseries is not None:
                    try:
                        points = await run_in_threadpool(quota_points, ctx)
                        await run_in_threadpool(ctx.timeseries.write, points)
                    except TimeSeriesError as e:  # derived data: the next pass writes anew
                        log.warning("quota points not written: %s", e)
                if done.runs_booked:
                    log.info("planner booked %d run(s) for %d campaign(s)",
                             done.runs_booked, done.campaigns)
        except Exception:  # keep planning; a bad pass must not stop the next
            log.exception("planning pass failed")
        await asyncio.sleep(tick_s)
        elapsed += tick_s


def create_app(settings: Settings, *, clock: Clock | None = None, reaper: bool = True) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks = []
        if reaper:
            lead = Leadership(app.state.ctx.db, settings.health.leader_lease_s)
            tasks.append(asyncio.create_task(_lease_loop(lead)))
            tasks.append(asyncio.create_task(
                _reaper_loop(app, lead, settings.health.reap_interval_s)))
            replan_s = settings.scheduling.replan_interval_s
            tasks.append(asyncio.create_task(_planner_loop(
                app, lead, replan_s, min(replan_s, settings.health.reap_interval_s))))
            if app.state.ctx.timeseries is not None:
                tasks.append(asyncio.create_task(
                    _ingest_loop(app, settings.influx.ingest_interval_s)))
        yield
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = FastAPI(
        title="MBB testbed orchestrator",
        version="0.1.0",
        description="Schedules measurement runs on mobile-broadband nodes and archives "
        "their results.",
        lifespan=lifespan,
    )
    studies = load_studies()  # refuses conflicting or broken studies before anything
    ctx = build_context(settings, clock)
    for unread in unread_formats(ctx.catalogue, studies):
        log.warning("experiment %s: no installed study reads its result format; its runs "
                    "are archived but give no points (install the study that reads it)",
                    unread)
    app.state.ctx = ctx
    errors.install(app)
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(pages_routes.study_router(studies.pages))
    _meta_routes(app, ctx.settings)
    app.add_middleware(
        guard.RequestGuard,
        rules=guard.rules_for(
            guard.operations(declared_routes(app)), scheme=TOKEN_SCHEME,
            default_max_body_bytes=settings.api.max_body_bytes,
            max_body_bytes={("PATCH", routes_agent.CHUNK_PATH): settings.uploads.max_chunk_bytes},
        ),
        default_max_body_bytes=settings.api.max_body_bytes,
    )
    return app


#: The API's routers, included without a prefix (their paths are the app's).
ROUTERS: list[APIRouter] = [r.router for r in (
    routes_users, routes_nodes, routes_quotas, routes_runs, routes_datasets, routes_agent,
    routes_tokens, pages_routes)]


def declared_routes(app: FastAPI) -> list[BaseRoute]:
    """The app's routes as declared: its own and each router's. (FastAPI's view of the
    included routers is its internals', which change between its versions.)"""
    return [*app.router.routes, *(route for router in ROUTERS for route in router.routes)]


def from_environment() -> FastAPI:
    """The app from ``TESTBED_*`` variables: what each of several uvicorn worker
    processes builds for itself (``testbed serve --workers N``). Every worker runs the
    background loops, as separate replicas would."""
    logconfig.configure()  # a worker is a new process: serve's configuration is not here
    return create_app(Settings())


def _meta_routes(app: FastAPI, settings: Settings) -> None:
    ctx = app.state.ctx
    views = {per_sim: StateCollector(ctx, per_sim=per_sim) for per_sim in (False, True)}

    @app.get("/healthz", tags=["meta"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", tags=["meta"], response_class=Response, responses={
        200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
              "description": "Prometheus text format"},
        **errors.responses(401)})
    def metrics(token: Annotated[str | None, Depends(scrape_token)]) -> Response:
        """Fleet aggregates for anyone; with ``Authorization: Bearer <metrics token>``
        (``TESTBED_METRICS_TOKEN``, or the admin token) also the per-SIM quota series,
        which name nodes. A wrong token is refused rather than given less."""
        if token is not None and not may_scrape(settings, token):
            raise Unauthorized("unknown metrics token: send TESTBED_METRICS_TOKEN as "
                               "'Authorization: Bearer <token>', or no token for aggregates")
        body = views[token is not None].exposition()
        return Response(body, media_type=CONTENT_TYPE_LATEST)
