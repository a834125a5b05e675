"""Which of a run's timestamps are on its node's clock, and by how much to move them to
orchestrator time.

A node's clock may be minutes off. The agent starts runs on orchestrator time (it
corrects its clock by the offset it estimates from every heartbeat), but whatever the
node stamps (the experiment's results, the agent's modem/GPS/system samples, the kernel's
packet times in the node's own capture) is on the node's clock. The agent records the
offset it used in the run's ``meta/run.json`` (``clock``: ``offset_s`` = node clock
minus orchestrator clock, ``uncertainty_s``, ``measured_at``), and ingest moves the
points of the node's files by ``-offset_s`` before they are written, so a run's points
land in the run's true time window whatever the node's clock read. The raw archive keeps
the node's own times: the correction is redone from it on every rebuild.

Ingest reads only members the node stamps (``results/``, ``meta/``): the server's side
(``server/``: the measurement server's capture) is on the server's clock, is not turned
into points, and must never be moved if it ever is. A bundle without ``clock`` (older agents, a node
that never reached the orchestrator) is written as stamped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

#: The agent's record of the run (node_agent.rundir.write_run_meta).
RUN_META = "meta/run.json"
#: Largest offset believed, seconds (10 years): a node back from a dead RTC battery may
#: be years off and is still corrected; a larger value is a broken record, not a clock.
MAX_OFFSET_S = 10 * 365.25 * 86_400


@dataclass(frozen=True)
class NodeClock:
    """How far a run's node-clock points move (``shift``), and why not when they do
    not (``note``, for the run's ingest note)."""

    shift: timedelta = timedelta(0)
    offset_s: float | None = None
    note: str | None = None


def heartbeat_shift(clock_offset_s: float | None) -> timedelta:
    """How far a heartbeat's samples (stamped on the node's clock) move: by the offset
    the node reports in it; not at all when it reports none, or one past belief."""
    if clock_offset_s is None or not abs(clock_offset_s) <= MAX_OFFSET_S:
        return timedelta(0)
    return timedelta(seconds=-clock_offset_s)


def node_clock(run_meta: Mapping[str, Any] | None) -> NodeClock:
    """The correction recorded in a run's meta/run.json (parsed); none when the run
    has no record of its node's clock."""
    if run_meta is None:
        return NodeClock()
    clock = run_meta.get("clock")
    if clock is None:
        return NodeClock()
    offset = clock.get("offset_s") if isinstance(clock, Mapping) else None
    if (not isinstance(offset, int | float) or isinstance(offset, bool)
            or not math.isfinite(offset) or abs(offset) > MAX_OFFSET_S):
        return NodeClock(note=f"{RUN_META}: clock offset {str(clock)[:100]!r} is not a "
                              "number of seconds within 10 years; points written as the "
                              "node stamped them")
    return NodeClock(shift=timedelta(seconds=-float(offset)), offset_s=float(offset))
