"""Archived bundles into the time-series store.

Ingest runs after archiving, never inside the upload: an upload must succeed whenever
the archive can take the bytes, whether or not InfluxDB is up. Runs whose results are
not yet in the store (``ingested_at`` NULL) are picked up by a background pass; when
the store is down they simply stay pending and are written when it returns. A rebuild
resets ``ingested_at`` so every run is written again from the raw archive (writes are
idempotent: same tags and timestamps overwrite).

A run of a compressed campaign (``time_scale`` > 1) is written at campaign time: all its
points move by how far campaign time is ahead of wall time at the run's booked start
(:meth:`TimeScale.offset_at`), keeping their spacing within the run. A day of hourly
runs compressed into minutes then lands on a day's hours, and the hourly, daily and
time-of-day views show it as the campaign meant it; at ``time_scale`` 1 nothing moves.

Before that, the points the node stamped on its own clock (results, the node's capture,
its metadata samples) move to orchestrator time by the clock offset the agent recorded
in the run's meta/run.json (:mod:`orchestrator.timeseries.nodeclock`); the archive keeps
the node's times. The server's side is on the server's clock and is not moved.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.orm import Session

from orchestrator.analysis.capture import CaptureFlows
from orchestrator.catalogue.manifest import IngestSpec, Manifest
from orchestrator.errors import Invalid
from orchestrator.scheduling.recurrence import TimeScale
from orchestrator.services import flowtool, ingestclaims
from orchestrator.services.context import Context
from orchestrator.services.planning import parse_spec
from orchestrator.store.tables import Bundle, Campaign, Node, Run
from orchestrator.timeseries.influx import InfluxClient, TimeSeriesUnavailable
from orchestrator.timeseries.lineprotocol import TimeSeriesSink, shifted
from orchestrator.timeseries.nodeclock import RUN_META, NodeClock, node_clock
from orchestrator.timeseries.schema import (
    GPS_FILE,
    MODEM_FILE,
    SERVER_CAPTURE_PREFIX,
    SYSTEM_FILE,
    BundlePoints,
    RunContext,
    bundle_points,
)
from testbed_common.bundle import BundleError
from testbed_common.tarstream import TarReader, open_decompressed
from testbed_common.untrusted import load_json

log = logging.getLogger(__name__)

#: Result files and the agent's modem/GPS samples are turned into points; logs and the
#: other metadata are archived as they are.
RESULT_PREFIX = "results/"
METADATA_FILES = frozenset({MODEM_FILE, GPS_FILE, SYSTEM_FILE, RUN_META})


@dataclass(frozen=True)
class IngestPass:
    written_runs: int
    points: int
    #: Why the pass stopped early (the store is down), if it did.
    stopped: str | None = None


def session_tag(run: Run, catalogue: Mapping[str, Manifest]) -> str:
    """Which ABw-TAT-ABw session a run's points belong to, so the pages can pair each
    TAT with the ABw runs around it: the campaign occurrence on the run's SIM when it
    has one (a session's steps may be separate runs), else the run itself, as for a
    run that is a whole session (its manifest's ``ingest.whole_session``). Such a run
    is a session of its own, never pooled with the other runs of its campaign
    occurrence: the demo campaign's TAT step, booked in the same occurrence just before
    its whole-session step, would otherwise join the session as a third TAT, its bytes
    counted in TAT's volume against ABw's. ``catalogue``: the experiments' manifests
    (the service context's)."""
    manifest = catalogue.get(run.experiment)
    whole = manifest is not None and manifest.ingest.whole_session
    if run.campaign_id and run.session_occurrence is not None and not whole:
        when = run.session_occurrence.strftime("%Y%m%dT%H%M%SZ")
        return f"{run.campaign_id}/{run.node_id}/{run.interface}/{when}"
    return run.id


def run_context(node: Node | None, run: Run, catalogue: Mapping[str, Manifest]) -> RunContext:
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
        session=session_tag(run, catalogue),
    )


def campaign_time_offset(s: Session, run: Run,
                         catalogue: Mapping[str, Manifest]) -> timedelta:
    """How far the run's points move to campaign time (zero outside compressed
    campaigns). The anchor defaults to the submission, in whole seconds, as the planner
    takes it; the campaign is read against the ``catalogue`` (its proxy mode)."""
    if run.campaign_id is None:
        return timedelta(0)
    campaign = s.get(Campaign, run.campaign_id)
    if campaign is None:
        return timedelta(0)
    try:
        spec = parse_spec(campaign.spec, catalogue)
    except Invalid as e:  # stored before a validation rule tightened: wall time
        log.warning("campaign %s: %s; run %s is written at wall time", campaign.id, e, run.id)
        return timedelta(0)
    if spec.time_scale == 1.0:
        return timedelta(0)
    anchor = spec.time_anchor or campaign.created_at.replace(microsecond=0)
    return TimeScale(spec.time_scale, anchor).offset_at(run.not_before)


def _is_capture(name: str) -> bool:
    return name.endswith((".pcap", ".pcapng"))


def _result_files(ctx: Context, bundle: Bundle, spool: Path | None, *,
                  server_captures: bool = False,
                  ) -> tuple[dict[str, bytes], dict[str, Path], list[str]]:
    """The members ingest turns into points, streamed out of the archived bundle, and
    notes on those left unread (with ``server_captures``, for an experiment whose
    sender may be the server, its captures under ``server/capture/`` too): each is
    taken only under its cap (JSON files under ``max_result_json_bytes``, captures
    under ``max_ingest_capture_bytes``). With a ``spool`` folder captures are written
    there, chunk by chunk, for the compiled analysis (which streams them from disk);
    without one they are read into memory."""
    caps = ctx.settings.uploads
    files: dict[str, bytes] = {}
    captures: dict[str, Path] = {}
    notes: list[str] = []
    path = ctx.archive.absolute(bundle.path)
    with path.open("rb") as raw, open_decompressed(raw) as stream:
        reader = TarReader(stream)
        for member in reader:
            name = member.name
            if not member.isfile or not (
                    name.startswith(RESULT_PREFIX) or name in METADATA_FILES
                    or (server_captures and name.startswith(SERVER_CAPTURE_PREFIX)
                        and _is_capture(name))):
                continue
            cap = (caps.max_ingest_capture_bytes if _is_capture(name)
                   else caps.max_result_json_bytes)
            if member.size > cap:
                notes.append(f"{name}: {member.size} bytes, over the {cap}-byte cap for "
                             "ingest; archived but not turned into points")
                continue
            if spool is not None and _is_capture(name):
                target = spool / f"capture-{len(captures)}"
                try:
                    with target.open("wb") as out:
                        for chunk in reader.chunks():
                            out.write(chunk)
                except OSError as e:  # the temporary disk, not the bundle: say so
                    notes.append(f"{name}: not analysed, writing it to a temporary file "
                                 f"failed ({e}); make room and rebuild the run's points")
                    continue
                captures[name] = target
                continue
            files[name] = b"".join(reader.chunks())
    return files, captures, notes


_warned_no_tool = False


def _capture_tool() -> str | None:
    """The compiled analysis, or None (the reference then runs, said once in the log)."""
    global _warned_no_tool
    tool = flowtool.find_tool()
    if tool is None and not _warned_no_tool:
        log.warning("%s not found (PATH, $%s): captures are analysed by the pure-Python "
                    "reference, same figures at a twentieth of the speed", flowtool.TOOL,
                    flowtool.ENV)
        _warned_no_tool = True
    return tool


def ingest_spec(catalogue: Mapping[str, Manifest], experiment: str) -> IngestSpec:
    """How the experiment's manifest says its runs are read (the defaults for an
    experiment no longer in the catalogue)."""
    manifest = catalogue.get(experiment)
    return manifest.ingest if manifest is not None else IngestSpec()


def _points(ctx: Context, bundle: Bundle, run: RunContext) -> BundlePoints:
    """The points of one archived bundle, with notes on what was skipped. Never raises:
    a bundle that breaks conversion is written with no points and the reason in its
    note, so that it is not retried forever ahead of every run after it."""
    spec = ingest_spec(ctx.catalogue, run.experiment)
    try:
        tool = _capture_tool()
        with tempfile.TemporaryDirectory(prefix="ingest-") as spool:
            files, spooled, skipped = _result_files(
                ctx, bundle, Path(spool) if tool is not None else None,
                server_captures=spec.sender_capture)
            captures: dict[str, Callable[[], CaptureFlows]] = {
                name: partial(flowtool.analyse_file, path, tool=tool)
                for name, path in spooled.items() if tool is not None}
            built = run_points(files, run, captures=captures, records=spec.records,
                               max_json_bytes=ctx.settings.uploads.max_result_json_bytes)
    except (BundleError, OSError) as e:  # archived, so inspected: damaged since
        return BundlePoints(points=[], notes=[f"bundle unreadable: {e}"])
    except Exception as e:  # a defect in conversion: logged with its trace, run noted
        log.exception("run %s: conversion to points failed", run.run)
        return BundlePoints(points=[], notes=[f"conversion to points failed: {e!r}"])
    built.notes[:0] = skipped
    return built


def run_points(files: Mapping[str, bytes], run: RunContext, *,
               captures: Mapping[str, Callable[[], CaptureFlows]] | None = None,
               max_json_bytes: int, records: bool | None = None,
               catalogue: Mapping[str, Manifest] | None = None) -> BundlePoints:
    """The points of a run's files (what :func:`_result_files` reads: results/ and the
    agent's meta/ files, all stamped on the node's clock) in orchestrator time: moved by
    the clock offset meta/run.json records (:mod:`orchestrator.timeseries.nodeclock`)."""
    node_files = dict(files)
    clock = _node_clock(node_files.pop(RUN_META, None), max_json_bytes)
    built = bundle_points(node_files, run, captures=captures, max_json_bytes=max_json_bytes,
                          records=records, catalogue=catalogue)
    if clock.note:
        built.notes.append(clock.note)
    return replace(built, points=shifted(built.points, clock.shift))


def _node_clock(run_meta: bytes | None, max_bytes: int) -> NodeClock:
    """The node-clock correction recorded in meta/run.json; an unreadable record moves
    nothing and says so (the results are still written)."""
    if run_meta is None:
        return NodeClock()
    try:
        doc = load_json(run_meta, what=RUN_META, max_bytes=max_bytes)
    except BundleError as e:
        return NodeClock(note=f"{e}; points written as the node stamped them")
    return node_clock(doc if isinstance(doc, dict) else None)


def ingest_pending(ctx: Context, sink: TimeSeriesSink, *, limit: int = 50,
                   owner: str | None = None) -> IngestPass:
    """Write up to ``limit`` archived runs not yet in the store, each claimed first
    (:mod:`orchestrator.services.ingestclaims`) so that any number of workers may run
    this at once: ``owner`` is this worker's id (the process's own by default)."""
    owner = owner or ingestclaims.this_worker()
    lease_s = ctx.settings.influx.ingest_lease_s
    runs = points = 0
    for _ in range(limit):
        run_id = ingestclaims.claim_next(ctx, owner, lease_s=lease_s)
        if run_id is None:
            break
        try:
            with ctx.db.reading() as s:
                run = s.get(Run, run_id)
                bundle = s.get(Bundle, run.bundle_sha256) if run and run.bundle_sha256 else None
                if run is None or bundle is None:  # deleted since it was claimed
                    continue
                built = _points(ctx, bundle, run_context(s.get(Node, run.node_id), run,
                                                          ctx.catalogue))
                written = shifted(built.points, campaign_time_offset(s, run, ctx.catalogue))
            if not ingestclaims.renew(ctx, run_id, owner, lease_s=lease_s):
                log.warning("run %s: another worker took over its ingest while this one "
                            "converted it (longer than the %.0f s lease, "
                            "TESTBED_INFLUX__INGEST_LEASE_S); not written here",
                            run_id, lease_s)
                continue
            sink.write(written)
        except TimeSeriesUnavailable as e:
            ingestclaims.release(ctx, run_id, owner)
            return IngestPass(runs, points, stopped=str(e))
        except BaseException:  # given back at once, not at the end of the lease
            ingestclaims.release(ctx, run_id, owner)
            raise
        note = "; ".join(built.notes) or None
        if not ingestclaims.finish(ctx, run_id, owner, note=note):
            log.warning("run %s: written, but its ingest claim passed to another worker "
                        "before it was marked done", run_id)
            continue
        if note:
            log.warning("run %s ingested with notes: %s", run_id, note)
        log.info("run %s: %d points written by %s", run_id, len(written), owner)
        runs += 1
        points += len(written)
    return IngestPass(runs, points)


@dataclass(frozen=True)
class Rebuild:
    marked: int
    written_runs: int
    points: int
    stopped: str | None = None


def rebuild(ctx: Context, sink: TimeSeriesSink, *, campaign: str | None = None,
            clean: bool = False) -> Rebuild:
    """Write every archived run (or one campaign's) again from the raw archive.

    Plain, it overwrites the same points in place. ``clean`` first drops the runs'
    series (``sink`` must then be an :class:`InfluxClient`): points that an older
    conversion wrote with other tags or at other times (a compressed campaign ingested
    before it was written at campaign time, a field renamed) go with them. Stops early,
    saying why, when the store goes down: the rest stay marked and the orchestrator's
    ingest loop writes them when it is back."""
    if clean:
        if not isinstance(sink, InfluxClient):
            raise Invalid("a clean rebuild needs InfluxDB (it drops the runs' series)")
        sink.drop_run_series(campaign=campaign)
    marked = reset_ingest(ctx, campaign=campaign)
    written = points = 0
    while True:
        done = ingest_pending(ctx, sink, limit=200)
        written += done.written_runs
        points += done.points
        if done.stopped or done.written_runs == 0:
            return Rebuild(marked, written, points, done.stopped)


def reset_ingest(ctx: Context, *, campaign: str | None = None) -> int:
    """Mark archived runs (all, or one campaign's) to be written again; returns how many."""
    with ctx.db.session() as s:
        stmt = update(Run).where(Run.bundle_sha256.is_not(None))
        if campaign is not None:
            stmt = stmt.where(Run.campaign_id == campaign)
        result = s.execute(stmt.values(ingested_at=None, ingest_note=None))
        return int(getattr(result, "rowcount", 0) or 0)
