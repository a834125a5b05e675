"""The short-flows page's rows, as read from the ``short_flows`` measurement."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.study import Where


@dataclass(frozen=True)
class ShortFlowRow:
    """One flow of a short-flows session: ``status`` is ok, excluded (SYN or FIN
    retransmitted), failed or uncaptured (studies.short_flows.points)."""

    time_ns: int
    where: Where
    run: str
    session: str
    direction: str
    kind: str  # "short" or "long"
    size_bytes: int
    status: str
    fct_s: float | None
    rtt_3whs_s: float | None
