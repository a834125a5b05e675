"""``testbed dataset build``: a campaign's data as a versioned, citable release.

Reads the runs from the database and their bundles from the archive, converts each
bundle with ingest's own conversion (:func:`orchestrator.services.ingest.run_points`,
with the same moves to orchestrator and campaign time), rewrites the captures for
publication, and writes the release's files through :mod:`.dataset_files`. What goes
in each file is decided in :mod:`orchestrator.dataset` (pure); docs/open-data.md says
what a release holds and how to read it.
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import select

from orchestrator.analysis.capture import reference_flows
from orchestrator.analysis.pcap import CaptureError
from orchestrator.dataset import contrib
from orchestrator.dataset import tables as T
from orchestrator.dataset.anonymise import Anonymiser, coarsen
from orchestrator.dataset.captures import anonymise_capture
from orchestrator.dataset.contrib import derived_tables, point_tables
from orchestrator.dataset.records import publish_records
from orchestrator.dataset.release import Exclusion, Release
from orchestrator.dataset.room import footprint, refusal
from orchestrator.errors import Invalid, NoSpace, NotFound
from orchestrator.services import dataset_files
from orchestrator.services.context import Context
from orchestrator.services.exclusions import recorded_rules
from orchestrator.services.ingest import (
    METADATA_FILES,
    RESULT_PREFIX,
    campaign_time_offset,
    ingest_spec,
    run_context,
    run_points,
)
from orchestrator.store.tables import Bundle, Campaign, Node, Run
from orchestrator.timeseries.lineprotocol import Point, shifted
from orchestrator.timeseries.nodeclock import RUN_META
from orchestrator.timeseries.schema import GPS, RunContext
from testbed_common.bundle import BundleError
from testbed_common.states import FINAL_STATES
from testbed_common.tarstream import TarReader, open_decompressed
from testbed_common.untrusted import load_json

log = logging.getLogger(__name__)

#: Bundle members a raw release carries: the results and the agent's records, text
#: with addresses rewritten and captures rewritten (:mod:`orchestrator.dataset.captures`).
RAW_TEXT = (".json", ".jsonl", ".txt", ".log", ".csv", ".yaml", ".yml")
CAPTURE = (".pcap", ".pcapng")


@dataclass(frozen=True)
class BuildRequest:
    campaigns: tuple[str, ...]
    out: Path
    key: bytes
    version: str = "1.0.0"
    period_from: date | None = None  # UTC days, inclusive
    period_to: date | None = None  # exclusive
    licence: str = "CC-BY-4.0"
    authors: tuple[str, ...] = ("MBB testbed operators",)
    pseudonymise: bool = False
    grid_deg: float = 0.01
    raw: bool = False
    exclusions: tuple[Exclusion, ...] = ()
    #: SIM (``node/interface``) -> the emulated link's profile, copied in.
    link_profiles: Mapping[str, LinkProfile] = field(default_factory=dict)
    #: The previous release's folder, for the changelog.
    previous: Path | None = None


@dataclass(frozen=True)
class LinkProfile:
    """An emulated link's profile as given (a file's bytes, or an API request's text)."""

    data: bytes
    suffix: str = ".yaml"

    @classmethod
    def read(cls, path: Path) -> LinkProfile:
        return cls(path.read_bytes(), path.suffix or ".yaml")


#: Called with (runs read so far, runs in the release) as a build goes.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Built:
    out: Path
    counts: dict[str, int]
    runs: int
    excluded: list[tuple[str, str]]
    files: int


@dataclass
class _Collected:
    rows: dict[str, list[T.Row]] = field(default_factory=lambda: defaultdict(list))
    files: dict[str, bytes] = field(default_factory=dict)
    images: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    excluded: list[tuple[str, str]] = field(default_factory=list)


def _day(d: date) -> datetime:
    return datetime.combine(d, time(0), UTC)


def finished_runs(ctx: Context, req: BuildRequest) -> list[str]:
    """The ids of the runs a release of ``req`` reads; NotFound for an unknown campaign
    or when there is none."""
    run_ids = _runs(ctx, req)
    if not run_ids:
        raise NotFound(f"campaign(s) {', '.join(req.campaigns)} have no finished run in "
                       "that period: nothing to release")
    return run_ids


def _runs(ctx: Context, req: BuildRequest) -> list[str]:
    with ctx.db.session() as s:
        for c in req.campaigns:
            if s.get(Campaign, c) is None:
                raise NotFound(f"no campaign {c!r}: give campaign ids as `testbed campaign "
                               "list` shows them")
        stmt = select(Run.id).where(Run.campaign_id.in_(req.campaigns),
                                    Run.state.in_([str(x) for x in FINAL_STATES]))
        if req.period_from is not None:
            stmt = stmt.where(Run.not_before >= _day(req.period_from))
        if req.period_to is not None:
            stmt = stmt.where(Run.not_before < _day(req.period_to))
        return sorted(s.scalars(stmt).all())


def _exclusion(rules: Sequence[Exclusion], run: Run) -> Exclusion | None:
    return next((e for e in rules
                 if e.matches(run=run.id, node=run.node_id, interface=run.interface)), None)


def disk_room(where: Path) -> tuple[Path, int, int]:
    """The nearest existing folder of ``where``, the bytes its file system gives an
    unprivileged writer now, and its allocation unit."""
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return probe, st.f_bavail * st.f_frsize, st.f_frsize


def check_room(ctx: Context, out: Path, files: Mapping[str, bytes] | None = None) -> None:
    """NoSpace unless the release's ``files`` (none: a build about to start) fit on the
    disk of ``out`` with the reserve kept and under the largest release
    (:mod:`orchestrator.dataset.room` says why)."""
    settings = ctx.settings.datasets
    where, free, block = disk_room(out)
    need = size = 0
    if files:
        folders = {str(parent) for path in files for parent in PurePosixPath(path).parents}
        size = sum(len(d) for d in files.values())
        need = footprint((len(d) for d in files.values()), block=block, folders=len(folders))
    why = refusal(where=str(where), free=free, reserve=settings.reserve_bytes, need=need,
                  size=size, max_bytes=settings.max_release_bytes if files else None)
    if why is not None:
        raise NoSpace(why)


def _times(run: Run) -> tuple[int | None, int | None]:
    start = next((e.at for e in run.events if e.state == "running"), None)
    end = run.events[-1].at if run.events and run.state in FINAL_STATES else None
    return (None if start is None else int(start.timestamp() * 1e6),
            None if end is None else int(end.timestamp() * 1e6))


def _renamed(text: str, names: Mapping[str, str]) -> str:
    for old, new in names.items():
        text = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, text)
    return text


def _publish_points(points: Sequence[Point], names: Mapping[str, str],
                    grid_deg: float) -> list[Point]:
    out = []
    for p in points:
        tags = {k: _renamed(v, names) if k in ("node", "session") else v
                for k, v in p.tags.items()}
        fields = dict(p.fields)
        if p.measurement == GPS and fields.get("lat") is not None:
            lat, lon = coarsen(float(fields["lat"] or 0), float(fields["lon"] or 0), grid_deg)
            fields.update(lat=lat, lon=lon)
        out.append(replace(p, tags=tags, fields=fields))
    return out


def _bundle_members(path: Path, cap: int) -> tuple[dict[str, bytes], list[str]]:
    """results/ and meta/ members under ``cap`` bytes, and notes on those over it."""
    files: dict[str, bytes] = {}
    notes: list[str] = []
    with path.open("rb") as raw, open_decompressed(raw) as stream:
        reader = TarReader(stream)
        for member in reader:
            if not member.isfile or not member.name.startswith(("results/", "meta/")):
                continue
            if member.size > cap:
                notes.append(f"{member.name}: {member.size} bytes, over {cap}; left out")
                continue
            files[member.name] = b"".join(reader.chunks())
    return files, notes


@dataclass(frozen=True)
class _RunRecord:
    """What the database says of one run, read in one session."""

    run: Run
    context: RunContext
    zone: str
    offset: timedelta  # to campaign time
    bundle: Path | None
    start_us: int | None
    end_us: int | None


def _image_ids(run_meta: bytes | None, cap: int) -> set[str]:
    """``image (image id)`` and ``agent VERSION`` as the agent recorded them in the
    run's meta/run.json: the digest of what actually ran."""
    try:
        doc = load_json(run_meta, what=RUN_META, max_bytes=cap) if run_meta else None
    except BundleError:
        return set()
    if not isinstance(doc, dict):
        return set()
    out = set()
    if isinstance(doc.get("image"), str) and isinstance(doc.get("image_id"), str):
        out.add(f"{doc['image']} ({doc['image_id']})")
    if isinstance(doc.get("agent_version"), str):
        out.add(f"node agent {doc['agent_version']}")
    return out


def _load_runs(ctx: Context, run_ids: Sequence[str]) -> list[_RunRecord]:
    out = []
    with ctx.db.session() as s:
        for rid in run_ids:
            run = s.get(Run, rid)
            assert run is not None
            node = s.get(Node, run.node_id)
            bundle = s.get(Bundle, run.bundle_sha256) if run.bundle_sha256 else None
            start, end = _times(run)
            out.append(_RunRecord(
                run=run, context=run_context(node, run, ctx.catalogue),
                zone=(node.timezone if node else "") or "UTC",
                offset=campaign_time_offset(s, run, ctx.catalogue),
                bundle=ctx.archive.absolute(bundle.path) if bundle else None,
                start_us=start, end_us=end))
        s.expunge_all()
    return out


def _collect_run(ctx: Context, req: BuildRequest, rec: _RunRecord, anon: Anonymiser,
                 names: Mapping[str, str], got: _Collected) -> None:
    run, rc, zone = rec.run, rec.context, rec.zone
    node = names.get(run.node_id, run.node_id)
    tags = {**rc.tags(), "node": node, "session": _renamed(rc.session, names)}
    got.images.add(run.image)
    got.rows["runs"].append({
        "run": run.id, "campaign": run.campaign_id or "", "node": node,
        "country": rc.country, "operator": rc.operator, "operator_name": rc.operator_name,
        "interface": run.interface, "timezone": zone, "experiment": run.experiment,
        "experiment_version": run.experiment_version, "image": run.image,
        "parameters": _renamed(anon.text(T.parameters_text(run.parameters)), names),
        "start_utc": rec.start_us, "end_utc": rec.end_us, "state": run.state,
        "bytes": run.measured_bytes, "session": tags["session"]})
    if rec.bundle is None:
        return
    caps = ctx.settings.uploads
    try:
        files, notes = _bundle_members(rec.bundle, max(caps.max_ingest_capture_bytes,
                                                       caps.max_result_json_bytes))
    except (BundleError, OSError) as e:
        got.notes.append(f"run {run.id}: bundle unreadable ({e}); its tables are empty")
        return
    got.notes += [f"run {run.id}: {n}" for n in notes]
    got.images |= _image_ids(files.get(RUN_META), caps.max_result_json_bytes)
    captures = {n: d for n, d in files.items() if n.endswith(CAPTURE)}
    converted = {n: d for n, d in files.items()
                 if n not in captures and (n.startswith(RESULT_PREFIX) or n in METADATA_FILES)}
    built = run_points(converted, rc, captures={}, max_json_bytes=caps.max_result_json_bytes,
                       records=ingest_spec(ctx.catalogue, run.experiment).records)
    points = _publish_points(shifted(built.points, rec.offset), names, req.grid_deg)
    for table in point_tables():
        got.rows[table.spec.name] += T.point_rows(table, points, zone)
    for name, data in sorted(captures.items()):
        try:
            published = anonymise_capture(data, anon)
        except CaptureError as e:
            got.notes.append(f"run {run.id}: {name} is no capture ({e}); left out")
            continue
        if published.damage:
            got.notes.append(f"run {run.id}: {name}: {published.damage}")
        flows = reference_flows(published.data).flows
        got.rows["flows"] += T.flow_rows(flows, capture=name, tags=tags, zone=zone)
        if req.raw:
            stem = name.rsplit(".", 1)[0]
            got.files[f"raw/{run.id}/{stem}.pcap"] = published.data
    if req.raw:
        for name, data in sorted(files.items()):
            if name in captures:
                continue
            if not name.endswith(RAW_TEXT):
                got.notes.append(f"run {run.id}: {name} is not text; not in raw/")
                continue
            record = publish_records(name, data.decode("utf-8", "replace"), anon,
                                     req.grid_deg)
            got.notes += [f"run {run.id}: {n}" for n in record.notes]
            text = _renamed(anon.text(record.text), names)
            got.files[f"raw/{run.id}/{name}"] = text.encode()


def _tool_version() -> str:
    try:
        return f"mbb-testbed {package_version('mbb-testbed')}"
    except PackageNotFoundError:
        return "mbb-testbed (not installed)"


def build_release(ctx: Context, req: BuildRequest, *,
                  progress: Progress | None = None) -> Built:
    """Write the release to ``req.out`` (an empty or absent folder)."""
    if req.out.exists() and any(req.out.iterdir()):
        raise Invalid(f"{req.out} is not empty: give a new folder for the release (a "
                      "release is never written over another)")
    check_room(ctx, req.out)  # a disk already at its reserve: before reading a bundle
    run_ids = finished_runs(ctx, req)
    anon = Anonymiser(req.key)
    runs = _load_runs(ctx, run_ids)
    names = ({n: anon.node(n) for n in sorted({r.run.node_id for r in runs})}
             if req.pseudonymise else {})
    got = _Collected()
    rules = tuple(dict.fromkeys((*recorded_rules(ctx), *req.exclusions)))
    for n, rec in enumerate(runs, 1):
        rule = _exclusion(rules, rec.run)
        if rule is not None:
            got.excluded.append((rec.run.id, f"{rule.kind} {rule.target}: {rule.reason}"))
        else:
            _collect_run(ctx, req, rec, anon, names, got)
        if progress is not None:
            progress(n, len(runs))
    for derived in derived_tables():
        rows, notes = derived.rows(got.rows)
        got.rows[derived.spec.name] = rows
        got.notes += notes
    profiles = {}
    for sim, profile in sorted(req.link_profiles.items()):
        node, _, iface = sim.partition("/")
        target = f"link-profiles/{names.get(node, node)}-{iface}{profile.suffix}"
        got.files[target] = profile.data
        profiles[sim] = target
    release = Release(
        name="mbb-testbed-" + "-".join(req.campaigns)[:80], version=req.version,
        campaigns=req.campaigns, period_from=req.period_from, period_to=req.period_to,
        licence=req.licence, authors=req.authors, tool_version=_tool_version(),
        images=tuple(sorted(got.images)),
        link_profiles=tuple((_renamed(k, names), v) for k, v in profiles.items()),
        # named as the release names nodes: a pseudonymised release does not say
        # which node's owner withdrew
        exclusions=tuple(replace(e, target=_renamed(e.target, names))
                         for e in rules),
        excluded_runs=tuple(got.excluded),
        pseudonymised=req.pseudonymise, grid_deg=req.grid_deg, raw=req.raw,
        caveats=_caveats(got.notes))
    counts = dataset_files.write_release(req.out, release, got.rows, got.files,
                                         previous=req.previous,
                                         room=lambda files: check_room(ctx, req.out, files))
    return Built(out=req.out, counts=counts, runs=len(runs) - len(got.excluded),
                 excluded=got.excluded, files=len(list(req.out.rglob("*"))))


#: Caveats every release carries.
STANDING_CAVEATS = (
    "Times of a compressed campaign (time_scale > 1, an emulation) are campaign time: "
    "each run moved to where its hour falls in the campaign's schedule.",
    "TAT bins are the receiver's; the bytes a SIM paid are the sender's (sender_bytes).",
)


def _caveats(notes: list[str]) -> tuple[str, ...]:
    return (*STANDING_CAVEATS, *sorted(set(notes)))


def release_tables() -> tuple[T.TableSpec, ...]:
    return contrib.release_tables()


def describe(built: Built) -> dict[str, Any]:
    return {"out": str(built.out), "runs": built.runs, "files": built.files,
            "excluded": [{"run": r, "reason": why} for r, why in built.excluded],
            "rows": built.counts}
