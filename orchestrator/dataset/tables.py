"""The release's tables: their columns (names, types, units) and their rows (pure).

One :class:`TableSpec` per kind of record gives the Parquet schema, the CSV header
and the Data Package's table schema alike, so the three cannot drift. Rows are built
from the points ingest writes to the time series (:mod:`orchestrator.timeseries.schema`,
one conversion for both), from the runs' records and from the captures' flows; every
time is UTC, with the node's time zone beside it. Rows are sorted by the table's key,
so the same inputs give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.flows import FlowStats
from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.schema import GPS, MODEM, SYSTEM

#: Bumped when a column is renamed, removed or changes type or unit (not when one is
#: added at the end): the release says it, and readers can check it.
SCHEMA_VERSION = "1.0"

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Table Schema type: string, integer, number, datetime
    description: str
    unit: str = ""  # "" for none

    def describe(self) -> str:
        return f"{self.description} ({self.unit})" if self.unit else self.description


@dataclass(frozen=True)
class TableSpec:
    name: str
    title: str
    description: str
    columns: tuple[Column, ...]
    #: Columns rows are sorted by (and that identify a row).
    key: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _c(name: str, type_: str, description: str, unit: str = "") -> Column:
    return Column(name, type_, description, unit)


TIME = _c("time_utc", "datetime", "When, UTC, to the microsecond")
ZONE = _c("timezone", "string", "The node's IANA time zone, for local hours and days")
PLACE = (
    _c("node", "string", "Node id (a pseudonym when the release pseudonymises nodes)"),
    _c("country", "string", "ISO 3166-1 alpha-2 country of the node"),
    _c("operator", "string", "Operator of the SIM as MCC-MNC"),
    _c("operator_name", "string", "Operator's name as the modem reported it"),
    _c("interface", "string", "The node's modem interface (one SIM)"),
)
CAMPAIGN = _c("campaign", "string", "Campaign id, empty for an ad-hoc run")
RUN_ID = _c("run", "string", "Run id")
SESSION = _c("session", "string", "ABw-TAT-ABw session the run belongs to")
RUN = (CAMPAIGN, RUN_ID, SESSION)
DIRECTION = _c("direction", "string", "uplink or downlink")
METHOD = _c("method", "string", "ABw tool")

#: Every field a point table may carry, declared as every other column; a point
#: table names the ones it keeps (:func:`_fields`).
_FIELDS: dict[str, Column] = {c.name: c for c in (
    _c("rssi", "number", "Received signal strength", "dBm"),
    _c("rsrp", "number", "Reference signal received power", "dBm"),
    _c("rsrq", "number", "Reference signal received quality", "dB"),
    _c("sinr", "number", "Signal to interference and noise ratio", "dB"),
    _c("cell_id", "integer", "Serving cell id"),
    _c("band", "string", "Radio band"),
    _c("rat", "string", "Radio access technology (3G, 4G, 5G)"),
    _c("lat", "number", "Latitude, WGS 84, coarsened to the release's grid", "degree"),
    _c("lon", "number", "Longitude, WGS 84, coarsened to the release's grid", "degree"),
    _c("alt_m", "number", "Altitude", "m"),
    _c("speed_mps", "number", "Speed", "m/s"),
    _c("cpu_pct", "number", "CPU use", "%"),
    _c("mem_pct", "number", "Memory use", "%"),
    _c("temperature_c", "number", "Temperature", "degree Celsius"),
    _c("disk_free_bytes", "integer", "Free disk space", "byte"),
)}


def _fields(*names: str) -> tuple[Column, ...]:
    return tuple(_FIELDS[n] for n in names)


@dataclass(frozen=True)
class PointTable:
    """A table of one time-series measurement: which tags and fields it keeps."""

    spec: TableSpec
    measurement: str
    tags: tuple[str, ...]  # extra tags beyond the place and the run
    fields: tuple[str, ...]
    #: Its place among the release's point tables: the first-party studies' at 10-30,
    #: the agent's samples at 100-120, other studies' after them in name order.
    order: int = 500


@dataclass(frozen=True)
class DerivedTable:
    """A table made from other tables' rows once every run is collected (e.g. pairs of
    two measurements' rows), listed after the point tables; ``rows`` also gives the
    notes the release's caveats carry."""

    spec: TableSpec
    rows: Callable[[Mapping[str, Sequence[Row]]], tuple[list[Row], list[str]]]


def point_table(name: str, title: str, description: str, measurement: str, *,
                tags: tuple[Column, ...], fields: tuple[Column, ...],
                order: int = 500) -> PointTable:
    """A table of one measurement's points: time, time zone, place and run columns,
    then ``tags`` and ``fields`` (a study's release table is one of these)."""
    columns = (TIME, ZONE, *PLACE, *RUN, *tags, *fields)
    key = ("time_utc", "node", "interface", "run", *(t.name for t in tags))
    return PointTable(TableSpec(name, title, description, columns, key), measurement,
                      tuple(t.name for t in tags), tuple(f.name for f in fields), order)


def _point_table(name: str, title: str, description: str, measurement: str,
                 tags: tuple[Column, ...], fields: tuple[str, ...], order: int) -> PointTable:
    return point_table(name, title, description, measurement, tags=tags,
                       fields=_fields(*fields), order=order)


POINT_TABLES = (
    _point_table("modem", "Modem metadata", "The agent's modem samples over each run",
                 MODEM, (), ("rssi", "rsrp", "rsrq", "sinr", "cell_id", "band", "rat"), 100),
    _point_table("positions", "Node positions", "The agent's GPS fixes over each run, "
                 "coarsened to the release's grid", GPS, (),
                 ("lat", "lon", "alt_m", "speed_mps"), 110),
    _point_table("system_health", "System health", "The node's health samples over each "
                 "run", SYSTEM, (), ("cpu_pct", "mem_pct", "temperature_c",
                                     "disk_free_bytes"), 120),
)

RUNS = TableSpec(
    "runs", "Runs", "One row per run in the release: where, what and how it ended",
    (
        RUN_ID, CAMPAIGN, *PLACE, ZONE,
        _c("experiment", "string", "Experiment name in the catalogue"),
        _c("experiment_version", "integer", "Experiment version"),
        _c("image", "string", "Container image of the experiment"),
        _c("parameters", "string", "The run's parameters, JSON with sorted keys"),
        _c("start_utc", "datetime", "When the experiment started, UTC"),
        _c("end_utc", "datetime", "When the run reached its final state, UTC"),
        _c("state", "string", "Final state: done, failed, cancelled or expired"),
        _c("bytes", "integer", "Bytes the run moved on its interface, both directions",
           "byte"),
        SESSION,
    ),
    ("run",),
)

FLOWS = TableSpec(
    "flows", "Flows from captures",
    "One row per TCP connection in the run's anonymised captures (the same analysis "
    "as ingest's), endpoints as anonymised in the captures",
    (
        TIME, ZONE, *PLACE, *RUN,
        _c("capture", "string", "The capture file in the run's bundle"),
        _c("client_address", "string", "Client address (Crypto-PAn, prefix-preserving)"),
        _c("client_port", "integer", "Client port"),
        _c("server_address", "string", "Server address (Crypto-PAn, prefix-preserving)"),
        _c("server_port", "integer", "Server port"),
        DIRECTION,
        _c("fct_s", "number", "Flow completion time", "s"),
        _c("rtt_3whs_s", "number", "Handshake round-trip time", "s"),
        _c("payload_bytes", "integer", "Payload in the data direction", "byte"),
        _c("delivered_bytes", "integer", "Stream advance in order", "byte"),
        _c("data_packets", "integer", "Data packets"),
        _c("retrans_pct", "number", "Retransmitted data packets", "%"),
        _c("retrans_bytes_pct", "number", "Retransmitted payload", "%"),
        _c("dupack_pct", "number", "Duplicate ACKs among pure ACKs", "%"),
        _c("self_delay_s", "number", "Mean self-induced queueing delay", "s"),
        _c("self_delay_p95_s", "number", "95th percentile of the self-induced delay", "s"),
    ),
    ("time_utc", "run", "capture", "client_address", "client_port", "server_address",
     "server_port"),
)

TABLES: tuple[TableSpec, ...] = (RUNS, *(t.spec for t in POINT_TABLES), FLOWS)


def us(time_ns: int) -> int:
    """Nanoseconds to the microseconds a table keeps."""
    return time_ns // 1000


def point_rows(table: PointTable, points: Iterable[Point], zone: str) -> list[Row]:
    """The points of ``table``'s measurement as rows (time in microseconds)."""
    out = []
    for p in points:
        if p.measurement != table.measurement:
            continue
        row: Row = {"time_utc": us(p.time_ns), "timezone": zone}
        for c in (*PLACE, *RUN):
            row[c.name] = p.tags.get(c.name, "")
        for t in table.tags:
            row[t] = p.tags.get(t, "")
        for f in table.fields:
            row[f] = p.fields.get(f)
        out.append(row)
    return out


def flow_rows(flows: Sequence[FlowStats], *, capture: str, tags: Mapping[str, str],
              zone: str) -> list[Row]:
    """A capture's flows as rows; ``tags`` the run's place and run columns."""
    out = []
    for f in flows:
        row: Row = {"time_utc": us(f.start_ns), "timezone": zone}
        row.update({c.name: tags.get(c.name, "") for c in (*PLACE, *RUN)})
        client, server = f.connection
        row.update(
            capture=capture, client_address=_text(client.addr), client_port=client.port,
            server_address=_text(server.addr), server_port=server.port,
            direction="uplink" if f.data_from_client else "downlink",
            fct_s=f.fct_s, rtt_3whs_s=f.rtt_3whs_s, payload_bytes=f.payload_bytes,
            delivered_bytes=f.delivered_bytes, data_packets=f.data_packets,
            retrans_pct=f.retrans_pct, retrans_bytes_pct=f.retrans_bytes_pct,
            dupack_pct=f.dupack_pct,
            self_delay_s=f.self_delay.mean_s if f.self_delay else None,
            self_delay_p95_s=f.self_delay.p95_s if f.self_delay else None)
        out.append(row)
    return out


def _text(addr: bytes) -> str:
    import ipaddress
    return str(ipaddress.ip_address(addr))


def parameters_text(parameters: Mapping[str, Any]) -> str:
    return json.dumps(parameters, sort_keys=True, separators=(",", ":"))


def sort_key(spec: TableSpec) -> Callable[[Row], tuple[Any, ...]]:
    """Rows in the key's order, then by every column (a total order: None first)."""
    order = (*spec.key, *(n for n in spec.names if n not in spec.key))

    def key(row: Row) -> tuple[Any, ...]:
        return tuple((row.get(n) is not None, _comparable(row.get(n))) for n in order)
    return key


def _comparable(v: Any) -> Any:
    return "" if v is None else v if isinstance(v, int | float | str) else str(v)


def sorted_rows(spec: TableSpec, rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=sort_key(spec))
