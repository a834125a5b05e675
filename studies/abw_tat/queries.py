"""The abw-tat study's query: every ABw estimate (``abw``) the caller may read, as the
rows its page pairs with the TAT transfers (:mod:`studies.tat.queries`)."""

from __future__ import annotations

from orchestrator.analysis.abwtat import AbwRow
from orchestrator.study import (
    Filters,
    Readable,
    TimeSeriesQuery,
    result_rows,
    select_points,
    text,
    where_of,
)
from studies.abw_tat.points import ABW


def abw_query(filters: Filters) -> str:
    return select_points(ABW, ("estimate_bps", "latency_s", "bytes", "method", "step"),
                         filters)


def abw_estimates(ts: TimeSeriesQuery, filters: Filters, *,
                  readable: Readable) -> list[AbwRow]:
    out = []
    for row in result_rows(ts.query(abw_query(filters))):
        if row.get("estimate_bps") is None or not readable.run(text(row, "run")):
            continue
        out.append(AbwRow(
            time_ns=int(row["time"]), where=where_of(row), campaign=text(row, "campaign"),
            run=text(row, "run"), session=text(row, "session"),
            direction=text(row, "direction"), method=text(row, "method"),
            estimate_bps=float(row["estimate_bps"]),
            latency_s=float(row.get("latency_s") or 0.0), bytes=int(row.get("bytes") or 0),
            step=None if row.get("step") is None else int(row["step"])))
    return out
