""":func:`orchestrator.model.health.node_health` as SQL, for reads that judge thousands
of nodes at once (the fleet page counts 10,000 nodes by health and pages through them,
those needing a look first): the same comparisons, decided by the database rather than
by building a row per node in the API's process, where that work holds the
interpreter's lock the heartbeats beside it need."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, case

from orchestrator.model.fleet import HEALTH_ORDER
from orchestrator.settings import HealthSettings
from orchestrator.store.tables import Node
from testbed_common.states import NodeHealth


def health_rank_sql(now: datetime, health: HealthSettings) -> ColumnElement[int]:
    """Each node's health at ``now`` as its place in
    :data:`~orchestrator.model.fleet.HEALTH_ORDER` (0: offline, needing a look first).
    As node_health: offline once silent ``offline_after_beats`` heartbeat intervals or
    more, stale from ``stale_after_beats``, boundaries included."""
    beat = health.heartbeat_interval_s

    def rank(h: NodeHealth) -> int:
        return HEALTH_ORDER.index(h.value)

    return case(
        (Node.maintenance.is_(True), rank(NodeHealth.MAINTENANCE)),
        (Node.last_heartbeat_at.is_(None), rank(NodeHealth.NEW)),
        (Node.last_heartbeat_at <= now - timedelta(seconds=beat * health.offline_after_beats),
         rank(NodeHealth.OFFLINE)),
        (Node.last_heartbeat_at <= now - timedelta(seconds=beat * health.stale_after_beats),
         rank(NodeHealth.STALE)),
        else_=rank(NodeHealth.ONLINE))
