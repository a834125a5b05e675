"""Clock offset between node and orchestrator, NTP-style, and the node's view of
orchestrator time.

A node's clock may be minutes off (no GPS fix, NTP blocked behind an operator's NAT, a
dead RTC battery), yet its runs must start when the orchestrator booked them: slots are
packed back to back on a node and quotas are planned by the hour. Every heartbeat is a
request/reply pair whose reply carries ``server_time``, so each one is an NTP-style
sample: offset = agent clock - orchestrator clock, the midpoint of send and receive
(agent clock) minus the server's timestamp. That assumes a symmetric path; the error is
at most half the round trip, recorded as the estimate's uncertainty.

The agent keeps the last estimate (and persists it: an agent restarted while the
orchestrator is out of reach still corrects its clock) and

- compares an assignment's ``not_before``/``deadline`` (orchestrator time) with its
  clock corrected by the offset (:func:`orchestrator_time`);
- hands the run, and so its experiment, the slot in node time (:func:`on_node_clock`):
  the experiment and the agent's run supervision compare it with the node's own clock;
- records the estimate in the run's ``meta/run.json`` (:meth:`ClockEstimate.to_json`),
  so that ingest moves the run's node-clock timestamps to orchestrator time.

Pure, but for :func:`save_estimate`/:func:`load_estimate`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from node_agent.statefile import write_state
from testbed_common.wire import Assignment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClockEstimate:
    """One offset sample: the node's clock minus the orchestrator's."""

    #: Agent clock minus orchestrator clock, seconds (positive: the node is fast).
    offset_s: float
    #: Most the offset can be off by, seconds: half the exchange's round trip.
    uncertainty_s: float
    #: When the sample was taken, in orchestrator time (the reply's ``server_time``).
    measured_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The ``clock`` object of meta/run.json and of the persisted estimate."""
        return {
            "offset_s": self.offset_s,
            "uncertainty_s": self.uncertainty_s,
            "measured_at": self.measured_at.isoformat(),
        }

    @classmethod
    def from_json(cls, data: Any) -> ClockEstimate:
        """Raises ValueError (or KeyError/TypeError) on a malformed document."""
        measured_at = datetime.fromisoformat(str(data["measured_at"]))
        if measured_at.tzinfo is None:
            raise ValueError("measured_at has no time zone")
        return cls(offset_s=float(data["offset_s"]),
                   uncertainty_s=float(data["uncertainty_s"]), measured_at=measured_at)


def estimate(*, sent_at: datetime, received_at: datetime,
             server_time: datetime) -> ClockEstimate:
    """The estimate from one exchange: ``sent_at``/``received_at`` on the agent's clock,
    ``server_time`` the orchestrator's stamp in its reply."""
    round_trip = received_at - sent_at
    midpoint = sent_at + round_trip / 2
    return ClockEstimate(
        offset_s=(midpoint - server_time).total_seconds(),
        uncertainty_s=max(0.0, round_trip.total_seconds() / 2),
        measured_at=server_time,
    )


def clock_offset_s(*, sent_at: datetime, received_at: datetime, server_time: datetime) -> float:
    """Agent clock minus orchestrator clock, seconds."""
    return estimate(sent_at=sent_at, received_at=received_at,
                    server_time=server_time).offset_s


def orchestrator_time(node_now: datetime, clock: ClockEstimate | None) -> datetime:
    """The orchestrator's time when the node's clock reads ``node_now`` (the node's own
    time when it has no estimate yet: nothing better is known)."""
    return node_now if clock is None else node_now - timedelta(seconds=clock.offset_s)


def node_time(orchestrator_instant: datetime, clock: ClockEstimate | None) -> datetime:
    """What the node's clock reads at ``orchestrator_instant``."""
    if clock is None:
        return orchestrator_instant
    return orchestrator_instant + timedelta(seconds=clock.offset_s)


def on_node_clock(a: Assignment, clock: ClockEstimate | None) -> Assignment:
    """The assignment with its slot in node time: what the run's supervision and its
    experiment compare with the node's clock (a deadline the experiment reads in its
    config.json is on the clock it reads)."""
    if clock is None or clock.offset_s == 0:
        return a
    return a.model_copy(update={"not_before": node_time(a.not_before, clock),
                                "deadline": node_time(a.deadline, clock)})


def save_estimate(clock: ClockEstimate, path: Path) -> None:
    """Keep the estimate on disk (:func:`node_agent.statefile.write_state`: atomic; a
    failure is logged: the estimate in memory still serves, the next heartbeat writes it
    again)."""
    write_state(path, clock.to_json(), what="clock estimate")


def load_estimate(path: Path) -> ClockEstimate | None:
    """The persisted estimate; None when there is none or it is unreadable (said)."""
    try:
        return ClockEstimate.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring the clock estimate in %s (%s); the next heartbeat makes "
                    "a new one", path, e)
        return None
