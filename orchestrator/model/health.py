"""Node health from the time since its last heartbeat.

Health is derived, never stored: a stored "online" goes stale by itself when nobody
writes, which is the failure being detected.
"""

from __future__ import annotations

from datetime import datetime

from testbed_common.states import NodeHealth


def node_health(
    *,
    now: datetime,
    last_heartbeat: datetime | None,
    maintenance: bool,
    interval_s: float,
    stale_after_beats: float,
    offline_after_beats: float,
) -> NodeHealth:
    if maintenance:
        return NodeHealth.MAINTENANCE
    if last_heartbeat is None:
        return NodeHealth.NEW
    silent_beats = (now - last_heartbeat).total_seconds() / interval_s
    if silent_beats >= offline_after_beats:
        return NodeHealth.OFFLINE
    if silent_beats >= stale_after_beats:
        return NodeHealth.STALE
    return NodeHealth.ONLINE
