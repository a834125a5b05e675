"""The tat study's tables in an open-data release: each transfer's bins and its
summary, of the ``tat`` and ``tat_summary`` points (docs/open-data.md)."""

from __future__ import annotations

from orchestrator.study import DIRECTION, Column, point_table
from studies.tat.points import TAT, TAT_SUMMARY

BYTES = Column("bytes", "integer", "Bytes", "byte")
DURATION = Column("duration_s", "number", "Duration", "s")

TABLES = (
    point_table("tat_bins", "TAT bins", "Each TAT transfer's receiver rate per bin "
                "(100 ms), stamped at the bin's start", TAT, tags=(DIRECTION,),
                fields=(Column("bps", "number", "Rate in the bin", "bit/s"), BYTES,
                        DURATION), order=10),
    point_table("tat_summaries", "TAT summaries", "One row per TAT transfer: mean rate, "
                "bytes and policing profile, stamped at the transfer's start", TAT_SUMMARY,
                tags=(DIRECTION,), fields=(
                    Column("mean_bps", "number", "Mean rate of the transfer (receiver)",
                           "bit/s"),
                    BYTES,
                    Column("sender_bytes", "integer",
                           "Bytes the sender sent (what the SIM paid)", "byte"),
                    DURATION,
                    Column("retransmits", "integer", "TCP retransmissions the sender counted"),
                    Column("bins", "integer", "Rate bins of the transfer"),
                    Column("policing", "string", "Policing profile of the transfer"),
                    Column("stable_bps", "number", "Rate after the policing profile settled",
                           "bit/s"),
                    Column("time_to_90_s", "number", "Time to 90% of the stable rate", "s"),
                    Column("peak_bps", "number", "Peak rate before policing", "bit/s"),
                    Column("drop_s", "number", "When the rate dropped to the policed rate",
                           "s")),
                order=20),
)
