"""Clock offset between node and orchestrator, NTP-style, from one request/reply pair.

The node's clock matters: runs start at ``not_before`` by the node's clock and results
carry node timestamps. offset = agent clock - orchestrator clock, estimated as the
midpoint of send and receive (agent) minus the server's timestamp, which assumes a
symmetric path; the error is at most half the round trip.
"""

from __future__ import annotations

from datetime import datetime


def clock_offset_s(*, sent_at: datetime, received_at: datetime, server_time: datetime) -> float:
    """Agent clock minus orchestrator clock, seconds."""
    midpoint = sent_at + (received_at - sent_at) / 2
    return (midpoint - server_time).total_seconds()
