"""The time-series schema: tag names, the core's measurements, and a run's files turned
into points.

The core's measurements are what every run has (the agent's modem, GPS and health
samples, flows from captures) and the quotas; each result format's measurements are its
study's (:mod:`.readers`, studies/<name>/points.py), and :data:`FIELDS` holds them all,
so a point with a field nobody declared is refused as it is built. What dashboards and
researchers query is documented for users in docs/timeseries.md.
Tags are the run's context (DESIGN.md "Data"): node, country, operator (MCC-MNC) and
operator_name, interface, rat, experiment, campaign, run, session; results add
``direction`` (uplink/downlink) and, for ABw, ``method``. Everything measured is a field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from datetime import datetime
from functools import cache, partial
from typing import Any

from orchestrator.analysis.capture import CaptureFlows, reference_flows
from orchestrator.analysis.flows import FlowStats
from orchestrator.catalogue.manifest import Manifest
from orchestrator.catalogue.plugins import installed
from orchestrator.errors import Invalid
from orchestrator.timeseries.lineprotocol import FieldValue, Point
from orchestrator.timeseries.readers import (
    Readers,
    ResultReader,
    RunInputs,
    readers_of,
)
from testbed_common.untrusted import load_json, load_json_lines

MODEM = "modem"
GPS = "gps"
SYSTEM = "system"
QUOTA = "quota"
FLOWS = "flows"

#: Field names of the core's measurements (what a point may carry): the agent's
#: samples and captures, which every run has, and the quotas.
CORE_FIELDS: dict[str, frozenset[str]] = {
    MODEM: frozenset({"rssi", "rsrp", "rsrq", "sinr", "cell_id", "band", "rat"}),
    GPS: frozenset({"lat", "lon", "alt_m", "speed_mps"}),
    SYSTEM: frozenset({"cpu_pct", "temperature_c", "mem_pct", "disk_free_bytes"}),
    QUOTA: frozenset({"used_bytes", "reserved_bytes", "limit_bytes"}),
    FLOWS: frozenset({
        "fct_s", "rtt_3whs_s", "retrans_pct", "retrans_bytes_pct", "dupack_pct",
        "self_delay_s", "self_delay_p95_s", "payload_bytes",
    }),
}



class _Fields(Mapping[str, frozenset[str]]):
    """The core's measurements and every installed study's (:mod:`.readers`), read when
    first asked (so importing this module loads no study)."""

    def _all(self) -> Mapping[str, frozenset[str]]:
        studies = installed_readers().measurements
        return {**CORE_FIELDS, **{n: m.field_names for n, m in studies.items()}}

    def __getitem__(self, key: str) -> frozenset[str]:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: Field names of each measurement (what a point may carry), the studies' included.
FIELDS: Mapping[str, frozenset[str]] = _Fields()

TAGS = ("node", "country", "operator", "operator_name", "interface", "rat", "experiment",
        "campaign", "run", "session")


@dataclass(frozen=True)
class RunContext:
    """The tags of every point of one run (empty strings are left out of the points)."""

    node: str
    country: str = ""
    operator: str = ""  # MCC-MNC, e.g. "240-01"
    operator_name: str = ""
    interface: str = ""
    rat: str = ""  # 3G / 4G / 5G when the modem told
    experiment: str = ""
    campaign: str = ""  # "" for ad-hoc runs
    run: str = ""
    session: str = ""  # ABw-TAT-ABw session the run belongs to

    def tags(self, **extra: str) -> dict[str, str]:
        # every point of a run asks: read the fields, not asdict's deep copy (which
        # took half of converting a 20 s TAT with its capture)
        return {**{f.name: v for f in dataclass_fields(self) if (v := getattr(self, f.name))},
                **extra}


def to_ns(when: str | datetime | float) -> int:
    """ISO 8601 text, an aware datetime or Unix seconds as integer nanoseconds."""
    if isinstance(when, str):
        when = datetime.fromisoformat(when)
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ValueError(f"time {when.isoformat()} has no time zone; results are in UTC")
        seconds, micros = divmod(round(when.timestamp() * 1e6), 1_000_000)
        return seconds * 1_000_000_000 + micros * 1000
    return round(when * 1e9)


def point(measurement: str, ctx: RunContext, fields: Mapping[str, FieldValue | None],
          time_ns: int, **extra_tags: str) -> Point:
    """A point of a known measurement; unknown field names are refused (typos)."""
    known = FIELDS.get(measurement)
    if known is None:
        raise ValueError(f"unknown measurement {measurement!r}; known: {sorted(FIELDS)}")
    unknown = set(fields) - known
    if unknown:
        raise ValueError(f"{measurement} has no field {sorted(unknown)}; known: {sorted(known)}")
    return Point(measurement=measurement, fields=dict(fields), time_ns=time_ns,
                 tags=ctx.tags(**extra_tags))


#: Bundle members the node agent writes with its modem and GPS samples of the run's span.
MODEM_FILE = "meta/modem.jsonl"
GPS_FILE = "meta/gps.jsonl"
SYSTEM_FILE = "meta/system.jsonl"


def modem_points(records: Iterable[Mapping[str, Any]], ctx: RunContext) -> list[Point]:
    """The agent's modem samples (``meta/modem.jsonl``) as ``modem`` points.

    Each sample is tagged with its own interface and, when the modem told, its
    operator (MCC-MNC) and name; the ``rat`` tag stays the run's (so a run's points
    group together) while the modem's current RAT, cell id and band are fields.
    """
    out = []
    for r in records:
        sample_ctx = replace(
            ctx,
            interface=str(r.get("interface") or ctx.interface),
            operator=str(r.get("mcc_mnc") or ctx.operator),
            operator_name=str(r.get("operator") or ctx.operator_name),
        )
        cell = r.get("cell_id")
        fields: dict[str, FieldValue | None] = {
            "rssi": _float(r.get("rssi")),
            "rsrp": _float(r.get("rsrp")),
            "rsrq": _float(r.get("rsrq")),
            "sinr": _float(r.get("sinr")),
            "cell_id": int(cell) if cell is not None else None,
            "band": str(r["band"]) if r.get("band") is not None else None,
            "rat": str(r["rat"]) if r.get("rat") else None,
        }
        out.append(point(MODEM, sample_ctx, fields, to_ns(str(r["time"]))))
    return out


def gps_points(records: Iterable[Mapping[str, Any]], ctx: RunContext) -> list[Point]:
    """The agent's GPS samples (``meta/gps.jsonl``) with a position as ``gps`` points."""
    out = []
    for r in records:
        if r.get("lat") is None or r.get("lon") is None:
            continue  # no fix: nothing to plot
        fields: dict[str, FieldValue | None] = {
            "lat": float(r["lat"]), "lon": float(r["lon"]),
            "alt_m": _float(r.get("alt")), "speed_mps": _float(r.get("speed")),
        }
        out.append(point(GPS, ctx, fields, to_ns(str(r["time"]))))
    return out


def system_points(records: Iterable[Mapping[str, Any]], ctx: RunContext) -> list[Point]:
    """The agent's health samples (``meta/system.jsonl``) as ``system`` points."""
    out = []
    for r in records:
        free = r.get("disk_free_bytes")
        fields: dict[str, FieldValue | None] = {
            "cpu_pct": _float(r.get("cpu_pct")), "mem_pct": _float(r.get("mem_pct")),
            "temperature_c": _float(r.get("temperature_c")),
            "disk_free_bytes": int(free) if free is not None else None,
        }
        if any(v is not None for v in fields.values()):
            out.append(point(SYSTEM, ctx, fields, to_ns(str(r["time"]))))
    return out


def live_points(*, modems: Iterable[Mapping[str, Any]], gps: Mapping[str, Any] | None,
                system: Mapping[str, Any] | None, ctx: RunContext) -> list[Point]:
    """A heartbeat's latest samples (records as in the bundle's meta files) as points
    tagged with the node only: they belong to no run."""
    return [*modem_points(modems, ctx), *gps_points([gps] if gps else [], ctx),
            *system_points([system] if system else [], ctx)]


def flow_points(flows: Sequence[FlowStats], ctx: RunContext) -> list[Point]:
    """Per-connection figures from a capture as ``flows`` points, at each flow's start."""
    out = []
    for f in flows:
        fields: dict[str, FieldValue | None] = {
            "fct_s": f.fct_s,
            "rtt_3whs_s": f.rtt_3whs_s,
            "retrans_pct": f.retrans_pct,
            "retrans_bytes_pct": f.retrans_bytes_pct,
            "dupack_pct": f.dupack_pct,
            "self_delay_s": f.self_delay.mean_s if f.self_delay else None,
            "self_delay_p95_s": f.self_delay.p95_s if f.self_delay else None,
            "payload_bytes": f.payload_bytes,
        }
        direction = "uplink" if f.data_from_client else "downlink"
        out.append(point(FLOWS, ctx, fields, f.start_ns, direction=direction))
    return out


#: Where the measurement server's side of a run's capture sits in a bundle
#: (node_agent.server_capture): never turned into ``flows`` points (the node's capture
#: of the same connections is), only joined with results whose sender it was.
SERVER_CAPTURE_PREFIX = "server/capture/"


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class BundlePoints:
    points: list[Point]
    notes: list[str] = field(default_factory=list)  # what was skipped or damaged, and why


def bundle_points(files: Mapping[str, bytes], ctx: RunContext, *,
                  max_json_bytes: int = 16 * 1024**2,
                  captures: Mapping[str, Callable[[], CaptureFlows]] | None = None,
                  readers: Readers | None = None,
                  records: bool | None = None,
                  catalogue: Mapping[str, Manifest] | None = None,
                  ) -> BundlePoints:
    """Points from a run's result files (bundle member name -> bytes), by kind of file.

    The agent's files are the core's: ``meta/modem.jsonl``: :func:`modem_points`;
    ``meta/gps.jsonl``: :func:`gps_points`; ``meta/system.jsonl``:
    :func:`system_points`; ``*.pcap`` / ``*.pcapng``: :func:`flow_points` (a damaged
    capture gives the flows before the damage, and a note). A ``*.json`` result goes to
    the study whose reader claims its ``format`` (``readers``, by default every
    installed study's, :mod:`orchestrator.timeseries.readers`): at once, or, when it
    joins captures, after every capture of the bundle with their flows, the modem
    records and the server's side of the capture (``server/capture/``, which gives no
    ``flows`` points of its own and is analysed only if a reader asks). Other
    ``*.jsonl`` are tool records, read by the study that reads records, unless
    ``records`` is False: the experiment's manifest says its result holds them
    (``ingest.records``; None: ask the manifest of ``ctx.experiment`` in ``catalogue``,
    which must then be given: nothing is read from a folder behind the caller's back).
    Files of other kinds are left alone.
    ``captures`` are members analysed elsewhere (ingest spools them to disk for the
    compiled tool, :mod:`orchestrator.services.flowtool`): name -> a call giving their
    flows, made here so that their notes read as the others'. The ingest service and a
    rebuild from the archive both call this, so they write the same points. JSON goes
    through the bounded loader: a file over ``max_json_bytes`` or nested too deep gives
    a note, never an exception.
    """
    readers = readers if readers is not None else installed_readers()
    if records is None:
        if catalogue is None:
            raise ValueError(
                "bundle_points needs the experiments' catalogue (catalogue=, as the service "
                "context holds it) or records=: whether a run's JSON-lines records are "
                "points is its manifest's (ingest.records)")
        manifest = catalogue.get(ctx.experiment)
        records = manifest is None or manifest.ingest.records
    out = BundlePoints(points=[])
    if MODEM_FILE not in files:
        out.notes.append(f"{MODEM_FILE}: absent; the run has no modem metadata (signal, "
                         "cell, band unknown)")
    analysed = dict(captures or {})
    captured: list[FlowStats] = []  # every capture's flows, for results that need them
    server_side: dict[str, Callable[[], CaptureFlows]] = {}  # analysed only if joined
    modem_records: list[Mapping[str, Any]] = []
    joined: list[tuple[str, Mapping[str, Any], ResultReader]] = []  # after the captures
    for name in sorted({*files, *analysed}):
        try:
            if name.startswith(SERVER_CAPTURE_PREFIX):
                if name in analysed or name.endswith((".pcap", ".pcapng")):
                    server_side[name] = (analysed[name] if name in analysed else
                                         partial(reference_flows, files[name]))
                continue
            if name in analysed or name.endswith((".pcap", ".pcapng")):
                got = analysed[name]() if name in analysed else reference_flows(files[name])
                if got.damage is not None:
                    out.notes.append(f"{name}: {got.damage}")
                out.notes.extend(f"{name}: {note}" for note in got.notes)
                out.points.extend(flow_points(got.flows, ctx))
                captured.extend(got.flows)
                continue
            data = files[name]
            if name.endswith(".jsonl"):
                lines = load_json_lines(data, what=name, max_bytes=max_json_bytes)
                if name == MODEM_FILE:
                    out.points.extend(modem_points(lines, ctx))
                    modem_records.extend(r for r in lines if isinstance(r, Mapping))
                elif name == GPS_FILE:
                    out.points.extend(gps_points(lines, ctx))
                elif name == SYSTEM_FILE:
                    out.points.extend(system_points(lines, ctx))
                elif readers.records is not None and records:
                    out.points.extend(readers.records.points(name, lines, ctx))
            elif name.endswith(".json"):
                doc = load_json(data, what=name, max_bytes=max_json_bytes)
                reader = readers.reader(doc)
                if reader is None or not isinstance(doc, Mapping):
                    continue
                if reader.joins_captures:
                    joined.append((name, doc, reader))
                else:
                    out.points.extend(reader.points(doc, RunInputs(ctx, notes=out.notes)))
        # Invalid: CaptureError too; ValueError: the results' own errors too
        except (Invalid, ValueError, KeyError, TypeError) as e:
            out.notes.append(f"{name}: not turned into points: {e}")
    sender = _ServerFlows(server_side, out.notes)
    for name, doc, reader in joined:
        try:
            inputs = RunInputs(ctx, flows=captured, modem=modem_records,
                               server_flows=sender, has_server_capture=bool(server_side),
                               notes=out.notes)
            out.points.extend(reader.points(doc, inputs))
        except (Invalid, ValueError) as e:  # the results' OutputErrors, CaptureError too
            out.notes.append(f"{name}: not turned into points: {e}")
    return out


class _ServerFlows:
    """The flows of the server's side of the capture, analysed on the first call (its
    damage and notes kept once)."""

    def __init__(self, analyses: Mapping[str, Callable[[], CaptureFlows]],
                 notes: list[str]) -> None:
        self.analyses = analyses
        self.notes = notes
        self.flows: list[FlowStats] | None = None

    def __call__(self) -> list[FlowStats]:
        if self.flows is None:
            self.flows = []
            for name, analyse in sorted(self.analyses.items()):
                got = analyse()
                if got.damage is not None:
                    self.notes.append(f"{name}: {got.damage}")
                self.notes.extend(f"{name}: {note}" for note in got.notes)
                self.flows.extend(got.flows)
        return self.flows


@cache
def installed_readers() -> Readers:
    """Every installed study's readers (loaded once per process), checked for
    conflicts (:func:`.readers.readers_of`)."""
    return readers_of(installed(), core=CORE_FIELDS)


def quota_point(*, node: str, interface: str, operator: str, operator_name: str = "",
                country: str = "", used: int, reserved: int, limit: int | None,
                at: datetime) -> Point:
    """A SIM's quota at ``at``: bytes charged and reserved this period, and its cap
    (left out when the SIM has none)."""
    ctx = RunContext(node=node, country=country, operator=operator,
                     operator_name=operator_name, interface=interface)
    return point(QUOTA, ctx, {"used_bytes": used, "reserved_bytes": reserved,
                              "limit_bytes": limit}, to_ns(at))
