"""The links' measured rates: what volume forecasts are made from.

Every booking, whether the planner's or an ad-hoc run's, forecasts its volume from the
same history (recent TAT rates measured on that node + operator, see
:mod:`orchestrator.scheduling.forecast`) with the same policy, so a run costs the same
reservation however it was booked.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.model.ids import NodeId
from orchestrator.scheduling.forecast import LinkHistory, RatePolicy
from orchestrator.settings import Settings
from orchestrator.store.tables import Run

#: Measured rates older than this are not used for forecasts, days.
HISTORY_DAYS = 30


def link_history(s: Session, now: datetime, *, node: str | None = None) -> LinkHistory:
    """Measured rates per (node, MCC-MNC) of the last :data:`HISTORY_DAYS` days, oldest
    first (of one node when ``node`` is given)."""
    rates: dict[tuple[NodeId, str], list[float]] = defaultdict(list)
    stmt = (select(Run.node_id, Run.mcc_mnc, Run.measured_rate_bps)
            .where(Run.measured_rate_bps.is_not(None), Run.mcc_mnc.is_not(None),
                   Run.not_before >= now - timedelta(days=HISTORY_DAYS))
            .order_by(Run.not_before))
    if node is not None:
        stmt = stmt.where(Run.node_id == node)
    for node_id, mcc_mnc, rate in s.execute(stmt).all():
        if mcc_mnc is not None and rate is not None:
            rates[(NodeId(node_id), mcc_mnc)].append(float(rate))
    return LinkHistory(dict(rates))


def rate_policy(settings: Settings) -> RatePolicy:
    return RatePolicy(default_rate_bps=settings.scheduling.default_rate_bps)
