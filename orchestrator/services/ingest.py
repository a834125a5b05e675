"""Archived bundles into the time-series store.

Ingest runs after archiving, never inside the upload: an upload must succeed whenever
the archive can take the bytes, whether or not InfluxDB is up. Runs whose results are
not yet in the store (``ingested_at`` NULL) are picked up by a background pass; when
the store is down they simply stay pending and are written when it returns. A rebuild
resets ``ingested_at`` so every run is written again from the raw archive (writes are
idempotent: same tags and timestamps overwrite).
"""

from __future__ import annotations

import logging
import tarfile
from dataclasses import dataclass

from sqlalchemy import select, update

from orchestrator.services.context import Context
from orchestrator.store.tables import Bundle, Node, Run
from orchestrator.timeseries.influx import TimeSeriesUnavailable
from orchestrator.timeseries.lineprotocol import TimeSeriesSink
from orchestrator.timeseries.schema import (
    GPS_FILE,
    MODEM_FILE,
    SYSTEM_FILE,
    RunContext,
    bundle_points,
)

log = logging.getLogger(__name__)

#: Result files and the agent's modem/GPS samples are turned into points; logs and the
#: other metadata are archived as they are.
RESULT_PREFIX = "results/"
METADATA_FILES = frozenset({MODEM_FILE, GPS_FILE, SYSTEM_FILE})


@dataclass(frozen=True)
class IngestPass:
    written_runs: int
    points: int
    #: Why the pass stopped early (the store is down), if it did.
    stopped: str | None = None


def session_tag(run: Run) -> str:
    """Which ABw-TAT-ABw session a run's points belong to, so the pages can pair each
    TAT with the ABw runs around it: the campaign occurrence on the run's SIM when it
    has one (a session's steps may be separate runs), else the run itself (an abw-tat
    run is a whole session)."""
    if run.campaign_id and run.session_occurrence is not None:
        when = run.session_occurrence.strftime("%Y%m%dT%H%M%SZ")
        return f"{run.campaign_id}/{run.node_id}/{run.interface}/{when}"
    return run.id


def _run_context(node: Node | None, run: Run) -> RunContext:
    iface = next((i for i in node.interfaces if i.name == run.interface), None) if node else None
    return RunContext(
        node=run.node_id,
        country=node.country if node else "",
        operator=iface.mcc_mnc if iface else "",
        operator_name=iface.operator_name if iface else "",
        interface=run.interface,
        rat=(iface.rat or "") if iface else "",
        experiment=run.experiment,
        campaign=run.campaign_id or "",
        run=run.id,
        session=session_tag(run),
    )


def _result_files(ctx: Context, bundle: Bundle) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(ctx.archive.absolute(bundle.path), "r:gz") as tar:
        for member in tar:
            if member.isfile() and (member.name.startswith(RESULT_PREFIX)
                                    or member.name in METADATA_FILES):
                handle = tar.extractfile(member)
                if handle is not None:
                    files[member.name] = handle.read()
    return files


def ingest_pending(ctx: Context, sink: TimeSeriesSink, *, limit: int = 50) -> IngestPass:
    """Write up to ``limit`` archived runs not yet in the store."""
    with ctx.db.session() as s:
        run_ids = s.scalars(
            select(Run.id)
            .where(Run.bundle_sha256.is_not(None), Run.ingested_at.is_(None))
            .order_by(Run.not_before)
            .limit(limit)
        ).all()
    runs = points = 0
    for run_id in run_ids:
        with ctx.db.session() as s:
            run = s.get(Run, run_id)
            if run is None or run.bundle_sha256 is None:
                continue
            bundle = s.get(Bundle, run.bundle_sha256)
            assert bundle is not None
            files = _result_files(ctx, bundle)
            built = bundle_points(files, _run_context(s.get(Node, run.node_id), run))
            try:
                sink.write(built.points)
            except TimeSeriesUnavailable as e:
                return IngestPass(runs, points, stopped=str(e))
            run.ingested_at = ctx.clock.now()
            run.ingest_note = "; ".join(built.notes) or None
            if built.notes:
                log.warning("run %s ingested with notes: %s", run.id, run.ingest_note)
            runs += 1
            points += len(built.points)
    return IngestPass(runs, points)


def reset_ingest(ctx: Context, *, campaign: str | None = None) -> int:
    """Mark archived runs (all, or one campaign's) to be written again; returns how many."""
    with ctx.db.session() as s:
        stmt = update(Run).where(Run.bundle_sha256.is_not(None))
        if campaign is not None:
            stmt = stmt.where(Run.campaign_id == campaign)
        result = s.execute(stmt.values(ingested_at=None, ingest_note=None))
        return int(getattr(result, "rowcount", 0) or 0)
