"""The tat study's query: every TAT transfer's summary (``tat_summary``) the caller may
read, as the rows its pages (and the abw-tat study's) take."""

from __future__ import annotations

from orchestrator.analysis.abwtat import TatSummaryRow
from orchestrator.study import (
    Filters,
    Readable,
    TimeSeriesQuery,
    result_rows,
    select_points,
    text,
    where_of,
)
from studies.tat.points import TAT_SUMMARY


def tat_summary_query(filters: Filters) -> str:
    return select_points(TAT_SUMMARY, ("mean_bps", "sender_bytes", "bytes"), filters)


def tat_summaries(ts: TimeSeriesQuery, filters: Filters, *,
                  readable: Readable) -> list[TatSummaryRow]:
    out = []
    for row in result_rows(ts.query(tat_summary_query(filters))):
        if row.get("mean_bps") is None or not readable.run(text(row, "run")):
            continue
        out.append(TatSummaryRow(
            time_ns=int(row["time"]), where=where_of(row), campaign=text(row, "campaign"),
            run=text(row, "run"), session=text(row, "session"),
            direction=text(row, "direction"), mean_bps=float(row["mean_bps"]),
            sender_bytes=int(row.get("sender_bytes") or row.get("bytes") or 0)))
    return out
