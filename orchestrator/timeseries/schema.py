"""The time-series schema: measurement and tag names, and results turned into points.

One place names what dashboards and researchers query (documented for users in
docs/timeseries.md), so a renamed field is a change here and there, never a surprise.
Tags are the run's context (DESIGN.md "Data"): node, country, operator (MCC-MNC) and
operator_name, interface, rat, experiment, campaign, run, session; results add
``direction`` (uplink/downlink) and, for ABw, ``method``. Everything measured is a field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from datetime import datetime
from functools import partial
from typing import Any

from orchestrator.analysis.capture import CaptureFlows, reference_flows
from orchestrator.analysis.flows import FlowStats
from orchestrator.analysis.policing import MIN_BINS, classify_policing
from orchestrator.errors import Invalid
from orchestrator.timeseries.ccacompare import (
    CCA_BINS,
    CCA_BINS_FIELDS,
    CCA_COMPARE,
    CCA_COMPARE_FIELDS,
    modem_samples,
    transfer_rows,
)
from orchestrator.timeseries.lineprotocol import FieldValue, Point
from orchestrator.timeseries.shortflows import SHORT_FLOWS, SHORT_FLOWS_FIELDS, flow_rows
from testbed_common.untrusted import load_json, load_json_lines
from testbed_kit import abw_tools, cca_compare, goodput, short_flows, tat_result

TAT = "tat"
TAT_SUMMARY = "tat_summary"
ABW = "abw"
MODEM = "modem"
GPS = "gps"
SYSTEM = "system"
QUOTA = "quota"
FLOWS = "flows"
# goodput-sequence (docs/goodput-sequence.md): one point per transfer, one per run.
GOODPUT = "goodput"
GOODPUT_SUMMARY = "goodput_summary"
# abw-tools (testbed.abw-tools): one point per estimate, against the TAT around it.
ABW_TOOLS = "abw_tools"
#: The experiment whose ABw estimates are ``abw_tools`` points only (with their probe
#: size and TAT), not also ``abw`` points: those pair with TATs on the ABw vs TAT page.
ABW_TOOLS_EXPERIMENT = "abw-tools"

#: Field names of each measurement (what a point may carry).
FIELDS: dict[str, frozenset[str]] = {
    TAT: frozenset({"bps", "bytes", "duration_s"}),
    TAT_SUMMARY: frozenset({
        "mean_bps", "bytes", "sender_bytes", "duration_s", "retransmits", "bins",
        "policing", "stable_bps", "time_to_90_s", "peak_bps", "drop_s",
    }),
    ABW: frozenset({
        "estimate_bps", "low_bps", "high_bps", "latency_s", "bytes", "packets_sent",
        "loss", "rtt_s", "step",
    }),
    MODEM: frozenset({"rssi", "rsrp", "rsrq", "sinr", "cell_id", "band", "rat"}),
    GPS: frozenset({"lat", "lon", "alt_m", "speed_mps"}),
    SYSTEM: frozenset({"cpu_pct", "temperature_c", "mem_pct", "disk_free_bytes"}),
    QUOTA: frozenset({"used_bytes", "reserved_bytes", "limit_bytes"}),
    FLOWS: frozenset({
        "fct_s", "rtt_3whs_s", "retrans_pct", "retrans_bytes_pct", "dupack_pct",
        "self_delay_s", "self_delay_p95_s", "payload_bytes",
    }),
    # short-flows (testbed.short-flows): one point per flow, figures from the capture.
    SHORT_FLOWS: SHORT_FLOWS_FIELDS,
    # cca-compare (testbed.cca-compare): one point per transfer, one per 100 ms bin.
    CCA_COMPARE: CCA_COMPARE_FIELDS,
    CCA_BINS: CCA_BINS_FIELDS,
    ABW_TOOLS: frozenset({
        "estimate_bps", "tat_bps", "error", "latency_s", "probe_bytes", "probe_packets",
        "control_bytes", "overhead", "repetition", "step", "tats",
    }),
    GOODPUT: frozenset({"goodput_bps", "bytes", "total_s", "connect_s", "first_byte_s",
                        "index"}),
    GOODPUT_SUMMARY: frozenset({
        "g1_bps", "median_bps", "mean_bps", "q1_bps", "q3_bps", "ci_low_bps", "ci_high_bps",
        "ci_level", "g1_excess_s", "g1_below_ci", "transfers", "size_bytes", "idle_gap_s",
    }),
}

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


def tat_points(result: Mapping[str, Any], ctx: RunContext) -> list[Point]:
    """A ``testbed.tat`` v1 result as one ``tat`` point per bin and a ``tat_summary``.

    Bins are stamped at the transfer start plus the bin's offset; the summary at the
    start, with the policing profile when the transfer is long enough to show one.
    """
    if (result.get("format") != tat_result.FORMAT
            or int(result.get("version", 0)) != tat_result.VERSION):
        raise ValueError(f"not a {tat_result.FORMAT} v{tat_result.VERSION} result: "
                         f"{result.get('format')!r} v{result.get('version')}")
    start = to_ns(str(result["start"]))
    direction = str(result["direction"])
    points = [
        point(TAT, ctx, {"bps": float(b["bits_per_second"]), "bytes": int(b["bytes"]),
                         "duration_s": float(b["duration_s"])},
              start + round(float(b["t_s"]) * 1e9), direction=direction)
        for b in result["bins"]
    ]
    summary: dict[str, FieldValue | None] = {
        "mean_bps": float(result["mean_bps"]),
        "bytes": int(result["bytes"]),
        "sender_bytes": int(result["sender_bytes"]),
        "duration_s": float(result["duration_s"]),
        "retransmits": result.get("retransmits"),
        "bins": len(result["bins"]),
    }
    bin_s = float(result["bin_s"])
    rates = [float(b["bits_per_second"]) for b in result["bins"]
             if float(b["duration_s"]) >= bin_s * 0.9]  # the short tail bin is no rate
    if len(rates) >= MIN_BINS:
        profile = classify_policing(rates, bin_s=bin_s)
        summary.update(policing=profile.kind.value, stable_bps=profile.stable_bps,
                       time_to_90_s=profile.time_to_90_s, peak_bps=profile.peak_bps,
                       drop_s=profile.drop_s)
    points.append(point(TAT_SUMMARY, ctx, summary, start, direction=direction))
    return points


#: An ABw-TAT-ABw session names each ABw step's records ``abw-<step>-<method>.jsonl``.
_ABW_STEP_FILE = re.compile(r"(?:^|/)abw-(\d+)-[^/]*\.jsonl$")


def abw_step(name: str) -> int | None:
    """The session step of an ABw records file, or None for a file of a plain ABw run:
    a session runs the same tool before and after each TAT, and only the step tells the
    two apart when its estimates are paired with that TAT."""
    m = _ABW_STEP_FILE.search(name)
    return int(m.group(1)) if m else None


def abw_points(records: Iterable[Mapping[str, Any]], ctx: RunContext, *,
               step: int | None = None) -> list[Point]:
    """The ABw tool's estimate records (JSON lines, tools/abw) as ``abw`` points; the
    session ``step`` is a field (not a tag: the series stay those of plain runs)."""
    out = []
    for r in records:
        if r.get("type") != "estimate":
            continue
        fields: dict[str, FieldValue | None] = {
            "estimate_bps": float(r["estimate_bps"]),
            "low_bps": _float(r.get("low_bps")),
            "high_bps": _float(r.get("high_bps")),
            "latency_s": float(r["latency_s"]),
            "bytes": int(r.get("bytes_sent", 0)) + int(r.get("control_bytes", 0)),
            "packets_sent": int(r.get("packets_sent", 0)),
            "loss": _float(r.get("loss")),
            "rtt_s": _float(r.get("rtt_s")),
            "step": step,
        }
        out.append(point(ABW, ctx, fields, to_ns(float(r["start_unix_s"])),
                         method=str(r["method"]), direction=str(r.get("direction", ""))))
    return out


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


def short_flow_points(result: Mapping[str, Any], flows: Sequence[FlowStats],
                      ctx: RunContext) -> list[Point]:
    """A ``testbed.short-flows`` v1 result, joined with the run's captured ``flows``
    (:mod:`orchestrator.timeseries.shortflows`), as one ``short_flows`` point per flow,
    tagged with ``direction``, ``kind`` (short/long) and ``size`` (bytes)."""
    parsed = short_flows.parse_result(result)
    return [point(SHORT_FLOWS, ctx, row.fields, row.time_ns, direction=parsed.direction,
                  kind=row.kind, size=str(row.fields["size_bytes"]))
            for row in flow_rows(parsed, flows)]


def cca_compare_points(result: Mapping[str, Any], sender_flows: Sequence[FlowStats],
                       modem: Sequence[Mapping[str, Any]], ctx: RunContext) -> list[Point]:
    """A ``testbed.cca-compare`` v1 result, joined with the flows of the capture at the
    sender and the run's modem records (:mod:`orchestrator.timeseries.ccacompare`), as
    one ``cca_compare`` point per transfer and one ``cca_bins`` point per 100 ms bin of
    its throughput, tagged with ``direction``, ``cca`` and ``kind`` (bulk/download)."""
    parsed = cca_compare.parse_result(result)
    out = []
    for row in transfer_rows(parsed, sender_flows, modem_samples(modem)):
        tags = {"direction": parsed.direction, "cca": row.cca, "kind": row.kind}
        out.append(point(CCA_COMPARE, ctx, row.fields, row.time_ns, **tags))
        out.extend(point(CCA_BINS, ctx, {"bps": bps, "index": row.fields["index"]},
                         row.time_ns + k * row.bin_ns, **tags)
                   for k, bps in enumerate(row.bins_bps))
    return out


def abw_tools_points(result: Mapping[str, Any], ctx: RunContext) -> list[Point]:
    """A ``testbed.abw-tools`` v1 result as one ``abw_tools`` point per estimate (at its
    start), paired with the TATs around it by the kit's code
    (:func:`testbed_kit.abw_tools.pair`), tagged with ``direction``, ``method`` and
    ``size`` (probe bytes, as text)."""
    parsed = abw_tools.parse_result(result)
    out = []
    for p in abw_tools.pair(parsed):
        e = p.estimate
        fields: dict[str, FieldValue | None] = {
            "estimate_bps": e.estimate_bps, "tat_bps": p.tat_bps, "error": p.error,
            "latency_s": e.latency_s, "probe_bytes": e.probe_bytes,
            "probe_packets": e.probe_packets, "control_bytes": e.control_bytes,
            "overhead": p.overhead, "repetition": e.repetition, "step": e.step,
            "tats": p.tats}
        out.append(point(ABW_TOOLS, ctx, fields, to_ns(e.start_unix_s),
                         direction=parsed.direction, method=e.cell.method,
                         size=str(e.cell.size)))
    return out


#: Where the measurement server's side of a run's capture sits in a bundle
#: (node_agent.server_capture): never turned into ``flows`` points (the node's capture
#: of the same connections is), only joined with results whose sender it was.
SERVER_CAPTURE_PREFIX = "server/capture/"


def goodput_points(result: Mapping[str, Any], ctx: RunContext) -> list[Point]:
    """A ``testbed.goodput-sequence`` v1 result as one ``goodput`` point per transfer (at
    its start) and a ``goodput_summary`` at the first one's start, tagged with the
    direction and ``size`` (D in bytes, as text: the page's boxes group by it). The
    figures are recomputed from the transfers with the kit's code, never copied from
    the file's own summary."""
    rates = goodput.transfer_goodputs(result)  # checks format, version and bytes
    summary = goodput.summarise(rates, int(result["size_bytes"]))
    tags = {"direction": str(result["direction"]), "size": str(int(result["size_bytes"]))}
    points = [
        point(GOODPUT, ctx, {"goodput_bps": rate, "bytes": int(t["bytes"]),
                             "total_s": float(t["total_s"]), "connect_s": float(t["connect_s"]),
                             "first_byte_s": _float(t.get("first_byte_s")),
                             "index": int(t["index"])},
              to_ns(str(t["start"])), **tags)
        for t, rate in zip(result["transfers"], rates, strict=True)
    ]
    fields: dict[str, FieldValue | None] = {
        **summary.as_dict(), "size_bytes": int(result["size_bytes"]),
        "idle_gap_s": float(result["idle_gap_s"])}
    points.append(point(GOODPUT_SUMMARY, ctx, fields, points[0].time_ns, **tags))
    return points


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class BundlePoints:
    points: list[Point]
    notes: list[str] = field(default_factory=list)  # what was skipped or damaged, and why


def bundle_points(files: Mapping[str, bytes], ctx: RunContext, *,
                  max_json_bytes: int = 16 * 1024**2,
                  captures: Mapping[str, Callable[[], CaptureFlows]] | None = None,
                  ) -> BundlePoints:
    """Points from a run's result files (bundle member name -> bytes), by kind of file.

    ``*.json`` with format ``testbed.tat``: :func:`tat_points`; with format
    ``testbed.short-flows``: :func:`short_flow_points`, joined with the flows of every
    capture of the bundle (so after them); ``testbed.goodput-sequence``:
    :func:`goodput_points`; ``testbed.abw-tools``: :func:`abw_tools_points` (an abw-tools
    run's raw ABw records give no ``abw`` points); ``testbed.cca-compare``:
    :func:`cca_compare_points`, joined
    with the sender's capture (``server/capture/`` for downlink: those captures give no
    ``flows`` points of their own) and the modem records; ``meta/modem.jsonl``:
    :func:`modem_points`; ``meta/gps.jsonl``: :func:`gps_points`; ``meta/system.jsonl``:
    :func:`system_points`; other ``*.jsonl``,
    of ABw records: :func:`abw_points`; ``*.pcap`` / ``*.pcapng``: :func:`flow_points` (a
    damaged capture gives the flows before the damage, and a note). Files of other
    kinds are left alone. ``captures`` are members analysed elsewhere (ingest spools
    them to disk for the compiled tool, :mod:`orchestrator.services.flowtool`): name ->
    a call giving their flows, made here so that their notes read as the others'. The
    ingest service and a rebuild from the archive both call this, so they write the
    same points. JSON goes through the bounded loader: a file
    over ``max_json_bytes`` or nested too deep gives a note, never an exception.
    """
    out = BundlePoints(points=[])
    if MODEM_FILE not in files:
        out.notes.append(f"{MODEM_FILE}: absent; the run has no modem metadata (signal, "
                         "cell, band unknown)")
    analysed = dict(captures or {})
    captured: list[FlowStats] = []  # every capture's flows, for results that need them
    server_side: dict[str, Callable[[], CaptureFlows]] = {}  # analysed only if joined
    modem_records: list[Mapping[str, Any]] = []
    joined: list[tuple[str, Mapping[str, Any]]] = []  # results joined with them after
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
                records = load_json_lines(data, what=name, max_bytes=max_json_bytes)
                if name == MODEM_FILE:
                    out.points.extend(modem_points(records, ctx))
                    modem_records.extend(r for r in records if isinstance(r, Mapping))
                elif name == GPS_FILE:
                    out.points.extend(gps_points(records, ctx))
                elif name == SYSTEM_FILE:
                    out.points.extend(system_points(records, ctx))
                elif ctx.experiment != ABW_TOOLS_EXPERIMENT:
                    out.points.extend(abw_points(records, ctx, step=abw_step(name)))
            elif name.endswith(".json"):
                doc = load_json(data, what=name, max_bytes=max_json_bytes)
                if isinstance(doc, dict) and doc.get("format") == tat_result.FORMAT:
                    out.points.extend(tat_points(doc, ctx))
                elif isinstance(doc, dict) and doc.get("format") in (short_flows.FORMAT,
                                                                     cca_compare.FORMAT):
                    joined.append((name, doc))
                elif isinstance(doc, dict) and doc.get("format") == goodput.FORMAT:
                    out.points.extend(goodput_points(doc, ctx))
                elif isinstance(doc, dict) and doc.get("format") == abw_tools.FORMAT:
                    out.points.extend(abw_tools_points(doc, ctx))
        # Invalid: CaptureError too; ValueError: GoodputError too
        except (Invalid, ValueError, KeyError, TypeError) as e:
            out.notes.append(f"{name}: not turned into points: {e}")
    for name, doc in joined:
        try:
            if doc.get("format") == cca_compare.FORMAT:
                sender = _sender_flows(doc, captured, server_side, out.notes)
                out.points.extend(cca_compare_points(doc, sender, modem_records, ctx))
            else:
                out.points.extend(short_flow_points(doc, captured, ctx))
        except (Invalid, ValueError) as e:  # the results' OutputErrors, CaptureError too
            out.notes.append(f"{name}: not turned into points: {e}")
    return out


def _sender_flows(doc: Mapping[str, Any], node_flows: list[FlowStats],
                  server_side: Mapping[str, Callable[[], CaptureFlows]],
                  notes: list[str]) -> list[FlowStats]:
    """The flows of the capture at a cca-compare session's sender: the node's captures
    for uplink, the server's for downlink (analysed here, their notes kept)."""
    if doc.get("direction") != "downlink":
        return node_flows
    if not server_side:
        notes.append("cca-compare downlink: the bundle has no server capture (the "
                     "sender's side); its transfers are written as uncaptured")
    flows: list[FlowStats] = []
    for name, analyse in sorted(server_side.items()):
        got = analyse()
        if got.damage is not None:
            notes.append(f"{name}: {got.damage}")
        notes.extend(f"{name}: {note}" for note in got.notes)
        flows.extend(got.flows)
    return flows


def quota_point(*, node: str, interface: str, operator: str, operator_name: str = "",
                country: str = "", used: int, reserved: int, limit: int | None,
                at: datetime) -> Point:
    """A SIM's quota at ``at``: bytes charged and reserved this period, and its cap
    (left out when the SIM has none)."""
    ctx = RunContext(node=node, country=country, operator=operator,
                     operator_name=operator_name, interface=interface)
    return point(QUOTA, ctx, {"used_bytes": used, "reserved_bytes": reserved,
                              "limit_bytes": limit}, to_ns(at))
