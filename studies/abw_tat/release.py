"""The abw-tat study's tables in an open-data release: the ABw estimates (``abw``
points), and each TAT transfer paired with the nearest run of each ABw tool in its
session, as the ABw vs TAT page pairs them (docs/open-data.md). The converters read a
release's tables back into the page's rows, so a release's reader pairs them with the
same code as the page."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from orchestrator.analysis.abwtat import AbwRow, PairRow, TatSummaryRow, Where, pair_sessions
from orchestrator.study import DIRECTION, METHOD, Column, DerivedTable, Row, TableSpec, point_table
from studies.abw_tat.points import ABW

ESTIMATES = point_table(
    "abw_estimates", "ABw estimates", "One row per available-bandwidth estimate, stamped "
    "at its start", ABW, tags=(DIRECTION, METHOD), fields=(
        Column("estimate_bps", "number", "Available-bandwidth estimate", "bit/s"),
        Column("low_bps", "number", "Lower bound of the estimate", "bit/s"),
        Column("high_bps", "number", "Upper bound of the estimate", "bit/s"),
        Column("latency_s", "number", "Time the estimate took", "s"),
        Column("bytes", "integer", "Bytes", "byte"),
        Column("packets_sent", "integer", "Probe packets sent"),
        Column("loss", "number", "Probe loss ratio", "1"),
        Column("rtt_s", "number", "Round-trip time", "s"),
        Column("step", "integer", "Session step of the estimate, empty for a plain ABw run")),
    order=30)

SESSIONS = TableSpec(
    "abw_tat_sessions", "ABw-TAT session pairs",
    "Each TAT transfer paired with the nearest run of each ABw tool in its session, as "
    "the ABw vs TAT page pairs them: RD = |TAT - ABw| / TAT",
    (
        Column("node", "string", "Node id"),
        Column("country", "string", "Country of the node"),
        Column("operator", "string", "Operator of the SIM as MCC-MNC"),
        Column("operator_name", "string", "Operator's name"),
        METHOD,
        Column("tat_bps", "number", "TAT mean rate", "bit/s"),
        Column("abw_bps", "number", "Mean of the paired ABw run's estimates", "bit/s"),
        Column("rd", "number", "Relative difference |TAT - ABw| / TAT", "1"),
        Column("abs_diff_bps", "number", "|TAT - ABw|", "bit/s"),
        Column("abw_latency_mean_s", "number", "Mean time per ABw estimate", "s"),
        Column("tat_bytes", "integer", "Bytes the TAT transfer sent", "byte"),
        Column("abw_bytes", "integer", "Bytes the ABw run sent", "byte"),
    ),
    ("node", "operator", "method", "tat_bps", "abw_bps"),
)


def _where(row: Mapping[str, Any]) -> Where:
    return Where(node=str(row["node"] or ""), country=str(row["country"] or ""),
                 operator=str(row["operator"] or ""),
                 operator_name=str(row["operator_name"] or ""))


def tat_summary_rows(rows: Iterable[Mapping[str, Any]]) -> list[TatSummaryRow]:
    """The ``tat_summaries`` table's rows as the page's rows (time in µs or a datetime),
    so a release's reader pairs them with the same code as the page."""
    return [TatSummaryRow(
        time_ns=_ns(r["time_utc"]), where=_where(r), campaign=str(r["campaign"] or ""),
        run=str(r["run"]), session=str(r["session"] or ""), direction=str(r["direction"]),
        mean_bps=float(r["mean_bps"]),
        sender_bytes=int(r["sender_bytes"] or r["bytes"] or 0))
        for r in rows if r.get("mean_bps") is not None]


def abw_rows(rows: Iterable[Mapping[str, Any]]) -> list[AbwRow]:
    """The ``abw_estimates`` table's rows as the page's rows."""
    return [AbwRow(
        time_ns=_ns(r["time_utc"]), where=_where(r), campaign=str(r["campaign"] or ""),
        run=str(r["run"]), session=str(r["session"] or ""), direction=str(r["direction"]),
        method=str(r["method"]), estimate_bps=float(r["estimate_bps"]),
        latency_s=float(r["latency_s"] or 0.0), bytes=int(r["bytes"] or 0),
        step=None if _missing(r.get("step")) else int(r["step"]))
        for r in rows if r.get("estimate_bps") is not None]


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)  # a pandas NaN


def _ns(v: Any) -> int:
    if isinstance(v, int):
        return v * 1000
    stamp: Callable[[], float] | None = getattr(v, "timestamp", None)
    if stamp is None:
        raise ValueError(f"time_utc {v!r} is neither microseconds nor a datetime")
    value = getattr(v, "value", None)  # a pandas Timestamp: nanoseconds exactly
    if isinstance(value, int):
        return value
    seconds, micros = divmod(round(stamp() * 1e6), 1_000_000)
    return seconds * 1_000_000_000 + micros * 1000


def session_rows(pairs: Iterable[PairRow]) -> list[Row]:
    return [{
        "node": p.where.node, "country": p.where.country, "operator": p.where.operator,
        "operator_name": p.where.operator_name, "method": p.method, "tat_bps": p.tat_bps,
        "abw_bps": p.abw_bps, "rd": p.rd, "abs_diff_bps": p.abs_diff_bps,
        "abw_latency_mean_s": (sum(p.latencies_s) / len(p.latencies_s)
                               if p.latencies_s else None),
        "tat_bytes": p.tat_bytes, "abw_bytes": p.abw_bytes,
    } for p in pairs]


def session_pairs(tables: Mapping[str, Sequence[Row]]) -> tuple[list[Row], list[str]]:
    """The release's session pairs, from its TAT summaries and ABw estimates."""
    pairs, notes = pair_sessions(tat_summary_rows(tables.get("tat_summaries", ())),
                                 abw_rows(tables.get("abw_estimates", ())))
    return session_rows(pairs), notes


PAIRS = DerivedTable(SESSIONS, session_pairs)
