"""What the agent enforces on a running experiment (pure decisions, no I/O).

MONROE checked quotas once a minute and killed with ``kill -9``; here the run's session
(:mod:`node_agent.session`) reads the interface counters every 0.5 s and asks
:func:`decide` whether to stop, so a run overshoots its reservation by at most half a
second of traffic, and not at all where the kernel backstop (an nftables quota,
:mod:`node_agent.backstop`) is armed. What the session observed is a frozen
:class:`Observation`; the answer is a :class:`StopDecision` (cause, state to report,
reason) or None: unit-tested without a container engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from node_agent.interfaces import Counters
from testbed_common.states import RunState


@dataclass(frozen=True)
class Usage:
    """Bytes moved on the run's interface since the run started (both directions)."""

    baseline: Counters
    current: Counters

    @property
    def bytes(self) -> int:
        rx = self.current.rx_bytes - self.baseline.rx_bytes
        tx = self.current.tx_bytes - self.baseline.tx_bytes
        # A counter that went backwards was reset (interface re-created): count from 0.
        return (rx if rx >= 0 else self.current.rx_bytes) + (
            tx if tx >= 0 else self.current.tx_bytes
        )


@dataclass(frozen=True)
class Requested:
    """Someone asked the run to stop (the orchestrator cancelled it, the agent is
    stopping, the run is already final on the orchestrator): the state and reason to
    report."""

    state: RunState
    reason: str


@dataclass(frozen=True)
class Observation:
    """What a run's session saw at one meter tick, while the container runs.

    ``quota_spent``: the kernel backstop has spent the reservation and drops the run's
    packets, though the counters, which include link-layer headers or lag by a read,
    may not show it yet. ``requested``: a stop request, if one came."""

    now: datetime
    deadline: datetime
    used_bytes: int
    max_bytes: int
    quota_spent: bool = False
    requested: Requested | None = None
    #: The run reached one of its confinement's bounds (its results or /tmp full, its
    #: process limit): the named reason (node_agent.confinement.bound_reached).
    over_bound: str | None = None


class StopCause(StrEnum):
    """Why a running experiment is stopped, in order of precedence."""

    OVERRUN = "overrun"  # the counters show more than the reservation
    QUOTA_SPENT = "quota_spent"  # the kernel quota is spent
    BOUND = "bound"  # results or /tmp full, process limit reached
    DEADLINE = "deadline"  # the time slot is over
    REQUESTED = "requested"  # cancelled, agent stopping, or final on the orchestrator


@dataclass(frozen=True)
class StopDecision:
    cause: StopCause
    state: RunState
    reason: str


def decide(obs: Observation) -> StopDecision | None:
    """Stop the run now (kill its container), and why; None to let it go on.

    The run's limits come before a request: a run past its reservation or its slot
    fails for that, even when a cancellation arrived in the same tick. Among the
    limits, an overrun the counters show is named with its figure before the quota
    that saw it first, both before a bound of its confinement, and all before the
    deadline."""
    used, cap = obs.used_bytes, obs.max_bytes
    if used > cap:
        return StopDecision(StopCause.OVERRUN, RunState.FAILED,
                            f"traffic reservation exceeded: used {used} of {cap} bytes")
    if obs.quota_spent:
        return StopDecision(
            StopCause.QUOTA_SPENT, RunState.FAILED,
            f"traffic reservation exceeded: the kernel quota of {cap} bytes is spent and "
            f"drops the run's packets (interface counters: {used} bytes)")
    if obs.over_bound is not None:
        return StopDecision(StopCause.BOUND, RunState.FAILED, obs.over_bound)
    if obs.now >= obs.deadline:
        return StopDecision(StopCause.DEADLINE, RunState.FAILED,
                            f"exceeded its time slot (deadline {obs.deadline.isoformat()})")
    if obs.requested is not None:
        return StopDecision(StopCause.REQUESTED, obs.requested.state, obs.requested.reason)
    return None


def ended(stopped: StopDecision | None, *, exit_code: int, stderr: str,
          bound: str | None = None) -> tuple[RunState, str]:
    """The state and reason a run ends with: why it was stopped, else the bound it
    ended at (``bound``: killed out of memory, its results full; it failed, whatever its
    exit code: its results may be cut short), else its exit code (0: its results go up;
    otherwise it failed, with its last line of stderr)."""
    if stopped is not None:
        return stopped.state, stopped.reason
    if bound is not None:
        return RunState.FAILED, f"{bound}; experiment exited with code {exit_code}"
    if exit_code == 0:
        return RunState.UPLOADING, exit_reason(0, stderr)
    return RunState.FAILED, exit_reason(exit_code, stderr)


def exit_reason(exit_code: int, stderr: str) -> str:
    """Reason for a run whose experiment exited on its own with ``exit_code``."""
    if exit_code == 0:
        return "experiment finished; uploading its results"
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    reason = f"experiment exited with code {exit_code}"
    # StateReport.reason is at most 2000 characters.
    return f"{reason}: {last[:1800]}" if last else f"{reason} (no stderr)"

